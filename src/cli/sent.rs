//! What a send leaves behind, shared by `send`, `send --wait` and the
//! bridge: a delivery result printed with its exit code, and the task a
//! plain command line stores in a stopped agent's spool.

use super::{emit, emit_json};
use crate::base::error::{Error, ExitCode, Result};
use crate::base::status::Status;
use crate::registry::lookup;
use crate::text::sanitize::escape;
use crate::wire::answer::SendResult;

/// Prints a delivery result and maps its status to the exit code.
pub(super) fn report(json: bool, r: &SendResult) -> Result<ExitCode> {
    let status = r.status();
    let spelled = escape(&r.status);
    let id = escape(r.id());
    let reason = escape(r.reason.as_deref().unwrap_or(""));
    let code = status.map_or(ExitCode::Refused, Status::exit_code);
    if json {
        emit_json(&serde_json::to_value(r).expect("a result serializes"));
        return Ok(code);
    }
    let t = r.target.clone().unwrap_or_default();
    let who = match (&t.name, &t.instance_id) {
        (Some(n), Some(i)) => format!("{} ({i})", escape(n)),
        (Some(n), None) => escape(n).into_owned(),
        _ => "the receiver".into(),
    };
    let position = r.queue_position.map(|n| n.to_string()).unwrap_or_default();
    match status {
        Some(Status::Accepted) => emit(&format!(
            "accepted: {who} queued message {id} at position {position}\n"
        )),
        Some(Status::Duplicate) => emit(&format!(
            "duplicate: {who} had already accepted message {id}\n"
        )),
        Some(Status::Stored) => emit(&format!(
            "stored: {} is not running; message {id} waits in its spool at position {position} and runs when it starts\n",
            escape(t.name.as_deref().unwrap_or(""))
        )),
        Some(Status::NoTarget) => {
            let rows: Vec<[String; 4]> = (r.candidates.iter().flatten())
                .map(|c| lookup::candidate(&c.name, c.pid, &c.workspace, &c.instance_id))
                .collect();
            eprintln!("baton: {reason}; {}", lookup::candidate_list(&rows));
        }
        Some(Status::Transport) => eprintln!("baton: {reason}"),
        Some(Status::Denied | Status::Invalid | Status::Unsupported) if r.target.is_none() => {
            eprintln!("baton: not sent: {spelled}: {reason}")
        }
        _ => eprintln!("baton: {who} refused message {id}: {spelled}: {reason}"),
    }
    Ok(code)
}

/// A plain send (or a bridge's stand-in) may write a stopped agent's spool
/// itself: not for a process of a turn, which speaks only through its
/// own instance (docs/security.md).
pub(super) fn not_in_a_turn() -> Result<()> {
    match crate::wire::access::turn_of_this_process() {
        None => Ok(()),
        Some(socket) => Err(Error::Refused(format!(
            "not permitted: this process belongs to a turn of the instance at {}, and sends only through that instance (baton send with that BATON_SOCKET)",
            escape(&socket)
        ))),
    }
}
