//! Following a task at its receiver until it ends: the waiting of
//! `baton send --wait` (`cli::wait`, which has the whole story), here so
//! that `baton mcp`'s `send_agent_message {wait_seconds}` and
//! `task_status` share it. Subscribe to the receiver's events, ask
//! `task/status` once on the same connection, wait for `task.ended`; a
//! lost receiver is found again by name.

use crate::client::Connection;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::registry::{self, Peer};
use crate::sanitize::escape;
use crate::wire::{self, Outcome};
use crossbeam_channel::{self as chan, select};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the registry is read while no instance of the name runs.
const REDISCOVER: Duration = Duration::from_secs(1);
/// The backoff between reconnections: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(1);
/// The id of the `task/status` request on the subscribed connection.
pub(crate) const STATUS_ID: &str = "wait-status";

/// How waiting ended.
pub enum End {
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
pub(crate) enum Watched {
    Ended(End),
    /// The connection was lost or refused: find the receiver again.
    Lost,
}

/// Waits for the task `message_id` at whichever instance is named
/// `target_name` now (`instance_id` first, the one it was delivered to),
/// until `deadline`: the waiting of `send --wait`, for other front ends
/// (`baton mcp`). Notes on stderr say when no instance of the name runs.
pub fn wait_for_outcome(
    config: &Config,
    target_name: &str,
    instance_id: Option<&str>,
    message_id: &str,
    deadline: Option<Instant>,
) -> Result<End> {
    let hint = Hint {
        instance_id: instance_id.map(str::to_string),
        workspace: None,
    };
    wait(config, target_name, &hint, message_id, deadline)
}

/// Asks the instance named `target_name` now (`instance_id` first) once
/// for `task/status` of `message_id`: its answer, or `None` when no
/// instance of the name runs.
pub fn ask_status(
    config: &Config,
    target_name: &str,
    instance_id: Option<&str>,
    message_id: &str,
) -> Result<Option<Value>> {
    let hint = Hint {
        instance_id: instance_id.map(str::to_string),
        workspace: None,
    };
    let Some(peer) = find(config, target_name, &hint)? else {
        return Ok(None);
    };
    let socket = Path::new(&peer.manifest.socket);
    let mut conn = Connection::open(socket, config.io_timeout)
        .map_err(|e| Error::Refused(format!("{} does not answer: {e}", escape(target_name))))?;
    conn.call("task/status", json!({"message_id": message_id}))
        .map(Some)
        .map_err(|e| {
            Error::Refused(format!(
                "{} answered task/status with {e}",
                escape(target_name)
            ))
        })
}

/// Which instance of the name to prefer: the one delivered to, else one
/// in the workspace the task was stored for.
pub struct Hint {
    pub instance_id: Option<String>,
    pub workspace: Option<String>,
}

/// Waits for the task at whichever instance has the name now.
pub fn wait(
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
pub(crate) fn pause(d: Duration, deadline: Option<Instant>) {
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
pub(crate) fn read(
    msg: &Value,
    message_id: &str,
    last: &mut Option<String>,
) -> Result<Option<Watched>> {
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
    // A status that spells an outcome is final.
    if status.parse::<Outcome>().is_ok() {
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
