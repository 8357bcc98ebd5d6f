//! What a send leaves behind, shared by `send`, `send --wait` and the
//! bridge: a delivery result printed with its exit code, and the task a
//! plain command line stores in a stopped agent's spool.

use super::args::Args;
use super::{emit, emit_json};
use crate::error::{Error, ExitCode, Result};
use crate::sanitize::escape;
use crate::status::Status;
use serde_json::Value;

/// The task a plain command line stores in a stopped agent's spool: the
/// sender is recorded as such, by its pid and working directory.
pub(super) fn plain_task(message_id: &str, body: &str, mode: &str) -> crate::spool::Task {
    let sender = crate::spool::Sender {
        pid: Some(std::process::id()),
        workspace: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
        ..crate::spool::Sender::default()
    };
    crate::spool::new_task(
        message_id,
        body,
        sender,
        0,
        None,
        mode,
        Some(std::process::id()),
        "jsonrpc",
    )
}

/// Prints a delivery result and maps its status to the exit code.
pub(super) fn report(args: &Args, r: &Value) -> Result<ExitCode> {
    let spelled = r.get("status").and_then(Value::as_str).unwrap_or("");
    // A status this version does not know (a zcoder peer's, say) is a
    // refusal, shown as it was spelled.
    let status = spelled.parse::<Status>().ok();
    let id = escape(r.get("message_id").and_then(Value::as_str).unwrap_or("")).into_owned();
    let reason = escape(r.get("reason").and_then(Value::as_str).unwrap_or("")).into_owned();
    let code = status.map_or(ExitCode::Refused, Status::exit_code);
    if args.flag("json") {
        emit_json(r);
        return Ok(code);
    }
    let t = &r["target"];
    let who = match (
        t.get("name").and_then(Value::as_str),
        t.get("instance_id").and_then(Value::as_str),
    ) {
        (Some(n), Some(i)) => format!("{} ({i})", escape(n)),
        (Some(n), None) => escape(n).into_owned(),
        _ => "the receiver".into(),
    };
    match status {
        Some(Status::Accepted) => emit(&format!(
            "accepted: {who} queued message {id} at position {}\n",
            r.get("queue_position")
                .map(Value::to_string)
                .unwrap_or_default()
        )),
        Some(Status::Duplicate) => emit(&format!(
            "duplicate: {who} had already accepted message {id}\n"
        )),
        Some(Status::Stored) => emit(&format!(
            "stored: {} is not running; message {id} waits in its spool at position {} and runs when it starts\n",
            escape(t["name"].as_str().unwrap_or("")),
            r.get("queue_position")
                .map(Value::to_string)
                .unwrap_or_default()
        )),
        Some(Status::NoTarget) => {
            let peers: Vec<String> = r
                .get("candidates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    let name = escape(c["name"].as_str().unwrap_or(""));
                    let workspace = escape(c["workspace"].as_str().unwrap_or(""));
                    // A spool of a stopped agent has no pid and no id.
                    match c["pid"].as_u64() {
                        Some(pid) => format!(
                            "\n  {name}  pid {pid}  {workspace}  {}",
                            c["instance_id"].as_str().unwrap_or("")
                        ),
                        None => format!("\n  {name}  not running  {workspace}"),
                    }
                })
                .collect();
            let list = if peers.is_empty() {
                "no live instances are running".to_string()
            } else {
                format!("candidates:{}", peers.concat())
            };
            eprintln!("baton: {reason}; {list}");
        }
        Some(Status::Transport) => eprintln!("baton: {reason}"),
        Some(Status::Denied | Status::Invalid | Status::Unsupported) if t.is_null() => {
            eprintln!("baton: not sent: {}: {reason}", escape(spelled))
        }
        _ => eprintln!(
            "baton: {who} refused message {id}: {}: {reason}",
            escape(spelled)
        ),
    }
    Ok(code)
}

/// A plain send (or a bridge's stand-in) may write a stopped agent's spool
/// itself: not for a process of a turn, which speaks only through its
/// own instance (docs/security.md).
pub(super) fn not_in_a_turn() -> Result<()> {
    match crate::access::turn_of_this_process() {
        None => Ok(()),
        Some(socket) => Err(Error::Refused(format!(
            "not permitted: this process belongs to a turn of the instance at {}, and sends only through that instance (baton send with that BATON_SOCKET)",
            escape(&socket)
        ))),
    }
}
