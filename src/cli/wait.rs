//! `baton send --wait`: after a delivery the receiver kept (`accepted`,
//! `duplicate`, `stored`), wait for the task's final outcome there and
//! print its reply.
//!
//! Waiting is an event subscription, not polling: subscribe to the
//! receiver's events first, then ask `task/status` on the same connection
//! (so a `task.ended` in between is not missed), then wait for `task.ended`
//! with the task's id. A lost connection (the receiver restarted: its id
//! changes, its name does not) is found again by name and asked again,
//! with a bounded backoff. The one exception is a receiver that is not
//! running (`stored`): nothing can be subscribed to, so the registry is
//! read again once a second until an instance of that name answers
//! (docs/decisions.md). Ctrl-C keeps its default action: the process ends
//! by SIGINT (the shell sees 130) and the task is left as it was.

use super::args::Args;
use super::{emit, emit_json};
use crate::client::Connection;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry::{self, Peer};
use crate::sanitize::{escape, escape_multiline};
use crate::status::Status;
use crate::wire;
use crossbeam_channel::{self as chan, select};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// The outcomes a task ends with; `done` is the one that exits 0.
const FINAL: &[&str] = &[
    "done",
    "failed",
    "timeout",
    "cancelled",
    "interrupted",
    "expired",
    "rejected",
    "discarded",
    "denied",
];

/// How often the registry is read while no instance of the name runs.
const REDISCOVER: Duration = Duration::from_secs(1);
/// The backoff between reconnections: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(1);
/// The id of the `task/status` request on the subscribed connection.
const STATUS_ID: &str = "wait-status";

/// Checks `--wait` and `--timeout` against the rest of the command line,
/// before anything is sent.
pub fn check(args: &Args) -> Result<Option<Duration>> {
    let timeout = match args.value("timeout") {
        None => None,
        Some(v) => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 1e9 && !v.contains(['e', 'E']) => {
                Some(Duration::from_secs_f64(s))
            }
            _ => {
                return Err(Error::Usage(format!(
                    "send: --timeout {}: use a number of seconds above 0",
                    escape(v)
                )));
            }
        },
    };
    if !args.flag("wait") {
        if timeout.is_some() {
            return Err(Error::Usage(
                "send: --timeout bounds the wait, so it needs --wait".into(),
            ));
        }
        return Ok(None);
    }
    if args.flag("reply") {
        return Err(Error::Usage(
            "send: --reply answers a turn's sender, who gets no outcome back, so it does not take --wait"
                .into(),
        ));
    }
    if args.value("via").is_some() {
        return Err(Error::Usage(
            "send: --wait does not work with --via yet: send, then follow the task with 'ssh HOST baton watch NAME'"
                .into(),
        ));
    }
    Ok(timeout)
}

/// How waiting ended.
enum End {
    /// The task reached a final outcome, with its reply text if it made one.
    Final {
        outcome: String,
        reply: Option<String>,
    },
    /// The receiver does not know the task.
    Unknown,
    /// `--timeout` passed first; the last status seen, if any.
    TimedOut(Option<String>),
}

/// What one subscribed connection came to.
enum Watched {
    Ended(End),
    /// The connection was lost or refused: find the receiver again.
    Lost,
}

/// After a delivery: waits for the task when the receiver kept it, then
/// reports the delivery and the outcome together. A refused delivery is
/// reported as it is, with no outcome.
pub fn run(args: &Args, config: &Config, delivery: &Value) -> Result<ExitCode> {
    let timeout = check(args)?;
    let spelled = delivery.get("status").and_then(Value::as_str).unwrap_or("");
    let kept = matches!(
        spelled.parse::<Status>(),
        Ok(Status::Accepted | Status::Duplicate | Status::Stored)
    );
    if !kept {
        if args.flag("json") {
            let mut r = delivery.clone();
            r["outcome"] = Value::Null;
            r["reply"] = Value::Null;
            emit_json(&r);
            let code = spelled
                .parse::<Status>()
                .map_or(ExitCode::Refused, Status::exit_code);
            return Ok(code);
        }
        return super::send::report(args, delivery);
    }
    let message_id = delivery["message_id"].as_str().unwrap_or("").to_string();
    let target = &delivery["target"];
    let name = target["name"]
        .as_str()
        .or(args.positional.first().map(String::as_str))
        .unwrap_or("")
        .to_string();
    let hint = Hint {
        instance_id: target["instance_id"].as_str().map(str::to_string),
        workspace: target["workspace"].as_str().map(str::to_string),
    };
    if !args.flag("json") {
        eprintln!(
            "baton: {spelled}: message {} to {}; waiting for it to end",
            escape(&message_id),
            escape(&name)
        );
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let end = wait(config, &name, &hint, &message_id, deadline)?;
    Ok(show(args, delivery, &name, &message_id, end))
}

/// Prints how the wait ended and gives the exit code.
fn show(args: &Args, delivery: &Value, name: &str, message_id: &str, end: End) -> ExitCode {
    let (outcome, reply, last) = match &end {
        End::Final { outcome, reply } => (Some(outcome.as_str()), reply.as_deref(), None),
        End::Unknown => (Some("unknown"), None, None),
        End::TimedOut(last) => (None, None, last.as_deref()),
    };
    let code = match (&end, outcome) {
        (End::TimedOut(_), _) => ExitCode::WaitTimedOut,
        (_, Some("done")) => ExitCode::Ok,
        _ => ExitCode::Refused,
    };
    if args.flag("json") {
        let mut r = delivery.clone();
        r["outcome"] = json!(outcome);
        r["reply"] = json!(reply);
        if let End::TimedOut(_) = end {
            r["timed_out"] = json!(true);
            r["task_status"] = json!(last);
        }
        emit_json(&r);
        return code;
    }
    if let Some(text) = reply {
        let mut text = escape_multiline(text).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        emit(&text);
    }
    let (id, who) = (escape(message_id), escape(name));
    match end {
        End::Final { outcome, .. } if outcome == "done" => {}
        End::Final { outcome, .. } => {
            eprintln!("baton: message {id} ended {} at {who}", escape(&outcome))
        }
        End::Unknown => eprintln!(
            "baton: {who} does not know message {id} (its record is gone, or another agent has the name now)"
        ),
        End::TimedOut(last) => eprintln!(
            "baton: stopped waiting after --timeout; message {id} is still {} at {who} and stays there",
            escape(last.as_deref().unwrap_or("queued"))
        ),
    }
    code
}

/// Which instance of the name to prefer: the one delivered to, else one
/// in the workspace the task was stored for.
struct Hint {
    instance_id: Option<String>,
    workspace: Option<String>,
}

/// Waits for the task at whichever instance has the name now.
fn wait(
    config: &Config,
    name: &str,
    hint: &Hint,
    message_id: &str,
    deadline: Option<Instant>,
) -> Result<End> {
    let mut backoff = BACKOFF_FIRST;
    let mut last: Option<String> = None;
    let mut said_absent = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(End::TimedOut(last));
        }
        let Some(peer) = find(config, name, hint)? else {
            if !said_absent {
                eprintln!(
                    "baton: {} is not running; waiting for it to start",
                    escape(name)
                );
                said_absent = true;
            }
            pause(REDISCOVER, deadline);
            continue;
        };
        said_absent = false;
        let socket = Path::new(&peer.manifest.socket);
        match watch(
            config,
            socket,
            message_id,
            deadline,
            &mut last,
            &mut backoff,
        )? {
            Watched::Ended(end) => return Ok(end),
            Watched::Lost => {
                pause(backoff, deadline);
                backoff = (backoff * 2).min(BACKOFF_LAST);
            }
        }
    }
}

/// Sleeps for `d`, or until the deadline if that comes first.
fn pause(d: Duration, deadline: Option<Instant>) {
    let d = match deadline {
        Some(end) => d.min(end.saturating_duration_since(Instant::now())),
        None => d,
    };
    std::thread::sleep(d);
}

/// The live baton instance with the name, if one answers: the one the
/// task was delivered to first, then one in its workspace, then any.
fn find(config: &Config, name: &str, hint: &Hint) -> Result<Option<Peer>> {
    let dir = registry::ensure_dir(config)?;
    let dirs = registry::scan_dirs(&dir);
    let found = registry::discover_matching(&dirs, None, config.io_timeout, &|m| m.name == name);
    let mut live: Vec<Peer> = found
        .peers
        .into_iter()
        .filter(|p| p.wire == registry::Wire::Jsonrpc && !p.unresponsive())
        .collect();
    let rank = |p: &Peer| {
        if hint.instance_id.as_deref() == Some(p.manifest.instance_id.as_str()) {
            0
        } else if hint.workspace.as_deref() == Some(p.manifest.workspace.as_str()) {
            1
        } else {
            2
        }
    };
    live.sort_by_key(rank);
    Ok(live.into_iter().next())
}

/// Subscribes to one instance's events, asks for the task's status, and
/// waits for its end there.
fn watch(
    config: &Config,
    socket: &Path,
    message_id: &str,
    deadline: Option<Instant>,
    last: &mut Option<String>,
    backoff: &mut Duration,
) -> Result<Watched> {
    let conn = match Connection::open(socket, config.io_timeout) {
        Ok(c) => c,
        Err(_) => return Ok(Watched::Lost),
    };
    // Only live events: the status answer covers what happened before.
    let (_, rx, mut stream) = match conn.subscribe(json!({})) {
        Ok(s) => s,
        Err(_) => return Ok(Watched::Lost),
    };
    let ask = wire::request_line(STATUS_ID, "task/status", json!({"message_id": message_id}));
    if wire::write_all(&mut stream, &ask).is_err() {
        return Ok(Watched::Lost);
    }
    let timer = match deadline {
        Some(d) => chan::at(d),
        None => chan::never(),
    };
    let watched = loop {
        select! {
            recv(rx) -> msg => {
                let Ok(msg) = msg else { break Watched::Lost };
                match read(&msg, message_id, last)? {
                    Some(w) => {
                        *backoff = BACKOFF_FIRST;
                        break w;
                    }
                    None => continue,
                }
            },
            recv(timer) -> _ => break Watched::Ended(End::TimedOut(last.clone())),
        }
    };
    // The reader thread holds its own descriptor: end the connection.
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(watched)
}

/// What one line of the subscribed connection says about the task: its
/// end, a lost cause, or nothing yet.
fn read(msg: &Value, message_id: &str, last: &mut Option<String>) -> Result<Option<Watched>> {
    if msg.get("method").and_then(Value::as_str) == Some("event") {
        let ev = &msg["params"];
        let ours = ev.get("kind").and_then(Value::as_str) == Some("task.ended")
            && ev.get("message_id").and_then(Value::as_str) == Some(message_id);
        if !ours {
            return Ok(None);
        }
        let outcome = ev
            .get("outcome")
            .and_then(Value::as_str)
            .unwrap_or("failed");
        return Ok(Some(Watched::Ended(ended(outcome, &ev["reply"]))));
    }
    if msg.get("id").and_then(Value::as_str) != Some(STATUS_ID) {
        return Ok(None);
    }
    if let Some(err) = msg.get("error") {
        let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
        if code == wire::METHOD_NOT_FOUND {
            return Err(Error::Refused(
                "the receiver does not answer task/status (an older baton), so its tasks cannot be waited for"
                    .into(),
            ));
        }
        // Shutting down, or too busy to answer: ask its successor.
        return Ok(Some(Watched::Lost));
    }
    let status = msg["result"]["status"].as_str().unwrap_or("");
    if FINAL.contains(&status) {
        return Ok(Some(Watched::Ended(ended(status, &msg["result"]["reply"]))));
    }
    if status == "unknown" {
        return Ok(Some(Watched::Ended(End::Unknown)));
    }
    *last = Some(status.to_string());
    Ok(None)
}

/// A final outcome and the reply's text, if there is one.
fn ended(outcome: &str, reply: &Value) -> End {
    End::Final {
        outcome: outcome.to_string(),
        reply: reply
            .get("body")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}
