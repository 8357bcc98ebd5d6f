//! `baton inbox wait [--timeout SECONDS] [TARGET]`: blocks until a task
//! waits to be claimed at a pull instance, says so in one line and exits 0;
//! exit 5 when `--timeout` passes first. What a hook or a shell loop runs
//! to wake an agent that does not poll (docs/hooks.md).
//!
//! It does not poll. It subscribes to the instance's events first, then
//! asks once (`control/status`, `inbox/list`, on a second connection) what
//! already waits, so an arrival in between is not missed; then it waits
//! for an event, read by the waiting thread itself (one blocking read,
//! bounded by `--timeout`). Under `--approve auto` a `message.accepted` is the wake-up
//! itself; an event that may make a queued task claimable without saying
//! which (`task.requeued`, an approving `approval.resolved`, a resume) is
//! followed by the same one question. A lost subscription (the instance
//! stopped or restarted) is found again by name and workspace, as
//! `send --wait` finds its receiver (cli::wait): with a bounded backoff,
//! and the registry read once a second while no such instance runs.
//!
//! "Waits to be claimed" (docs/decisions.md): queued, at a running pull
//! instance that is not paused, and ahead of the first queued task that
//! waits for an approval.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::client::Connection;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::mcp::follow::pause;
use crate::registry::{self, Peer};
use crate::sanitize::escape;
use crate::wire::{self, LineReader, ReadError};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the registry is read while no instance of the name runs.
const REDISCOVER: Duration = Duration::from_secs(1);
/// The backoff between reconnections: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(1);

/// What waits: how many tasks, and the one `inbox claim` takes first.
struct Waiting {
    count: usize,
    message_id: String,
    from: String,
}

/// What one look at the instance found.
struct Seen {
    paused: bool,
    ask: bool,
    waiting: Option<Waiting>,
}

/// How watching one instance ended.
enum Watched {
    Woke(Waiting),
    TimedOut,
    /// The connection was lost or refused: find the instance again;
    /// `watched` when it had been subscribed and looked at.
    Lost {
        error: Error,
        watched: bool,
    },
}

/// The instance waited on, as it is found again after a restart.
struct Who {
    name: String,
    workspace: String,
}

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    let rest = &args.positional[1..];
    if rest.len() > 1 {
        return Err(Error::Usage(format!(
            "inbox wait: unexpected argument {}",
            escape(&rest[1])
        )));
    }
    for opt in ["outcome", "reply"] {
        if args.flag(opt) {
            return Err(Error::Usage(format!(
                "inbox wait: --{opt} is for inbox complete"
            )));
        }
    }
    let timeout = args.seconds("inbox wait", "timeout")?;
    let deadline = timeout.map(|t| Instant::now() + t);
    let peer = target::resolve(config, rest.first().map(String::as_str))?;
    if peer.wire != registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "{} is a zcoder instance: it has no inbox to wait on",
            escape(&peer.manifest.name)
        )));
    }
    let who = Who {
        name: peer.manifest.name.clone(),
        workspace: peer.manifest.workspace.clone(),
    };
    let found = follow(config, peer, &who, deadline)?;
    Ok(report(args, &who, found))
}

/// Prints the one line (or object) and gives the exit code.
fn report(args: &Args, who: &Who, found: Option<Waiting>) -> ExitCode {
    let Some(w) = found else {
        if args.flag("json") {
            emit_json(&json!({"name": who.name, "waiting": 0, "timed_out": true}));
        } else {
            eprintln!(
                "baton: no task waits to be claimed at {} (--timeout passed)",
                escape(&who.name)
            );
        }
        return ExitCode::WaitTimedOut;
    };
    if args.flag("json") {
        emit_json(&json!({"name": who.name, "waiting": w.count,
                          "message_id": w.message_id, "from": w.from}));
    } else {
        let tasks = if w.count == 1 {
            "task waits"
        } else {
            "tasks wait"
        };
        emit(&format!(
            "{}: {} {tasks} to be claimed; next: {} from {}\n",
            escape(&who.name),
            w.count,
            escape(&w.message_id),
            escape(&w.from)
        ));
    }
    ExitCode::Ok
}

/// Watches the instance, and its successors after a restart, until a
/// task waits or the deadline passes (None). Failing to watch the first
/// instance at all is an error; losing one once watched is waited out.
fn follow(
    config: &Config,
    first: Peer,
    who: &Who,
    deadline: Option<Instant>,
) -> Result<Option<Waiting>> {
    let mut next = Some(first);
    let mut watched_once = false;
    let mut backoff = BACKOFF_FIRST;
    let mut said_absent = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        let peer = match next.take() {
            Some(p) => p,
            None => match find(config, who)? {
                Some(p) => p,
                None => {
                    if !said_absent {
                        eprintln!(
                            "baton: {} is not running; waiting for it to start",
                            escape(&who.name)
                        );
                        said_absent = true;
                    }
                    pause(REDISCOVER, deadline);
                    continue;
                }
            },
        };
        said_absent = false;
        match watch(config, &peer, deadline, &mut backoff)? {
            Watched::Woke(w) => return Ok(Some(w)),
            Watched::TimedOut => return Ok(None),
            Watched::Lost { error, watched } => {
                watched_once |= watched;
                if !watched_once {
                    return Err(error);
                }
                pause(backoff, deadline);
                backoff = (backoff * 2).min(BACKOFF_LAST);
            }
        }
    }
}

/// The live instance with the name in the workspace, if one answers.
fn find(config: &Config, who: &Who) -> Result<Option<Peer>> {
    let dir = registry::ensure_dir(config)?;
    let dirs = registry::scan_dirs(&dir);
    let found = registry::discover_matching(&dirs, None, config.io_timeout, &|m| {
        m.name == who.name && m.workspace == who.workspace
    });
    Ok(found
        .peers
        .into_iter()
        .find(|p| p.wire == registry::Wire::Jsonrpc && !p.unresponsive()))
}

/// The longest event line read: an event carries a body, escaped.
const MAX_EVENT: usize = 128 * 1024 * 1024;

/// A subscribed connection, read by the thread that waits: no reader
/// thread and no channel between the event and the exit.
struct Subscription {
    reader: LineReader,
    io_timeout: Duration,
}

/// What the subscription gave next.
enum Next {
    Event(Value),
    TimedOut,
    Closed,
}

impl Subscription {
    /// Connects, says `initialize` and `events/subscribe` (only live
    /// events: the look that follows covers what came before), and reads
    /// both answers.
    fn open(socket: &Path, io_timeout: Duration) -> std::result::Result<Subscription, String> {
        let mut stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_write_timeout(Some(io_timeout))
            .map_err(|e| e.to_string())?;
        let reader = stream.try_clone().map_err(|e| e.to_string())?;
        let mut sub = Subscription {
            reader: LineReader::new(reader, MAX_EVENT),
            io_timeout,
        };
        let hello = json!({"protocol_version": 1,
                           "client": {"name": "baton", "version": env!("CARGO_PKG_VERSION")}});
        let mut lines = wire::request_line(1, "initialize", hello);
        lines.extend(wire::request_line(2, "events/subscribe", json!({})));
        wire::write_all(&mut stream, &lines).map_err(|e| format!("write: {e}"))?;
        loop {
            let line = sub
                .reader
                .read_line(Some(io_timeout), io_timeout)
                .map_err(|e| format!("no answer to events/subscribe: {e:?}"))?;
            let v: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
            if let Some(err) = v.get("error") {
                return Err(escape(err["message"].as_str().unwrap_or("")).into_owned());
            }
            if v["id"] == 2 {
                return match v["result"]["subscribed"].as_bool() {
                    Some(true) => Ok(sub),
                    _ => Err(format!(
                        "events/subscribe answered {}",
                        escape(&v.to_string())
                    )),
                };
            }
        }
    }

    /// The next line, until the deadline.
    fn next(&mut self, deadline: Option<Instant>) -> Next {
        loop {
            let idle = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if idle.is_some_and(|d| d.is_zero()) {
                return Next::TimedOut;
            }
            match self.reader.read_line(idle, self.io_timeout) {
                Ok(line) => match serde_json::from_slice(line) {
                    Ok(v) => return Next::Event(v),
                    Err(_) => continue,
                },
                Err(ReadError::Idle) => return Next::TimedOut,
                Err(_) => return Next::Closed,
            }
        }
    }
}

/// Subscribes to one instance's events, looks once at what waits, and
/// waits for an event that makes a task claimable.
fn watch(
    config: &Config,
    peer: &Peer,
    deadline: Option<Instant>,
    backoff: &mut Duration,
) -> Result<Watched> {
    let socket = Path::new(&peer.manifest.socket);
    let mut sub = match Subscription::open(socket, config.io_timeout) {
        Ok(s) => s,
        Err(why) => {
            return Ok(Watched::Lost {
                error: Error::Transport(format!(
                    "{} ({}): cannot subscribe to its events: {why}",
                    escape(&peer.manifest.name),
                    peer.manifest.instance_id
                )),
                watched: false,
            });
        }
    };
    let lost = |error, watched| Ok(Watched::Lost { error, watched });
    let mut seen = match look(config, peer) {
        Ok(s) => s,
        Err(error @ Error::Transport(_)) => return lost(error, false),
        Err(e) => return Err(e),
    };
    *backoff = BACKOFF_FIRST;
    loop {
        if let Some(w) = seen.waiting.take() {
            return Ok(Watched::Woke(w));
        }
        let msg = match sub.next(deadline) {
            Next::Event(v) => v,
            Next::TimedOut => return Ok(Watched::TimedOut),
            Next::Closed => {
                let why = format!("{} closed the connection", escape(&peer.manifest.name));
                return lost(Error::Transport(why), true);
            }
        };
        if !on_event(&msg, &mut seen) {
            continue;
        }
        seen = match look(config, peer) {
            Ok(s) => s,
            Err(error @ Error::Transport(_)) => return lost(error, true),
            Err(e) => return Err(e),
        };
    }
}

/// Applies one line of the subscription to what was seen; true when the
/// instance must be looked at again (a task may be claimable now, but
/// the event does not say which).
fn on_event(msg: &Value, seen: &mut Seen) -> bool {
    if msg.get("method").and_then(Value::as_str) != Some("event") {
        return false;
    }
    let ev = &msg["params"];
    let field = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or("");
    match field("kind") {
        "state.changed" => {
            let was = seen.paused;
            seen.paused = field("state") == "paused";
            was && !seen.paused
        }
        // Under `--approve auto` an accepted task is claimable at once;
        // under `ask` it waits for an approval first.
        "message.accepted" if !seen.ask && !seen.paused => {
            seen.waiting = Some(Waiting {
                count: 1,
                message_id: field("message_id").to_string(),
                from: field("from").to_string(),
            });
            false
        }
        "task.requeued" => !seen.paused,
        "approval.resolved" => field("decision") == "approve" && !seen.paused,
        _ => false,
    }
}

/// Asks the instance once what waits: `control/status`, then the queue.
fn look(config: &Config, peer: &Peer) -> Result<Seen> {
    let socket = Path::new(&peer.manifest.socket);
    let mut conn =
        Connection::open(socket, config.io_timeout).map_err(|e| target::transport(peer, e))?;
    let st = conn
        .call("control/status", json!({}))
        .map_err(|e| target::transport(peer, e))?;
    let name = escape(&peer.manifest.name);
    if st["mode"] == "exec" {
        return Err(Error::Refused(format!(
            "{name} runs its tasks with --exec: baton starts each one itself, so none waits to be claimed"
        )));
    }
    if st["approve"] == "deny" {
        return Err(Error::Refused(format!(
            "{name} runs with --approve deny: every task is refused before it could be claimed"
        )));
    }
    let mut seen = Seen {
        paused: st["paused"].as_bool().unwrap_or(false),
        ask: st["approve"] == "ask",
        waiting: None,
    };
    if seen.paused || st["queue"]["queued"].as_u64().unwrap_or(0) == 0 {
        return Ok(seen);
    }
    let all = super::inbox::list_all(&mut conn, peer)?;
    let asked: HashSet<&str> = all["awaiting_approval"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let queued = all["queued"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let id = |t: &Value| t["message_id"].as_str().unwrap_or("").to_string();
    let count = queued
        .iter()
        .take_while(|t| !asked.contains(id(t).as_str()))
        .count();
    if count > 0 {
        seen.waiting = Some(Waiting {
            count,
            message_id: id(&queued[0]),
            from: sender_name(&queued[0]["sender"]),
        });
    }
    Ok(seen)
}

/// How a summary's sender is shown, as `message.accepted`'s `from` is.
fn sender_name(sender: &Value) -> String {
    let s = |k: &str| sender.get(k).and_then(Value::as_str);
    s("name")
        .or(s("instance_id"))
        .unwrap_or("(cli)")
        .to_string()
}
