//! The sender-side guards (docs/protocol.md §6), run before anything is
//! sent: a body that says something, within its receiver's limit, a
//! request line within the frame bound,
//! no send to this instance itself, and during a relayed turn none but to
//! its sender.

use crate::base::config::Config;
use crate::base::status::Status;
use crate::registry::Peer;
use crate::text::sanitize::escape;
use crate::wire::request::SendParams;
use std::fmt;

/// A send refused before it went: the status a sender reports, and why.
#[derive(Debug)]
pub struct Refusal {
    pub status: Status,
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

fn invalid(reason: String) -> Refusal {
    let status = Status::Invalid;
    Refusal { status, reason }
}

/// Checks that a body says something. Its size is the receiver's to
/// bound (`check_limit`), not the sender's.
pub(super) fn check_body(body: &str) -> Result<(), Refusal> {
    if body.trim().is_empty() {
        return Err(invalid("the message is empty".into()));
    }
    Ok(())
}

/// Checks a body against the limit its receiver accepts (its manifest's
/// `max_message_bytes`, or zcoder's own), before anything is sent to it:
/// the refusal names the size, the receiver and the limit.
pub fn check_limit(peer: &Peer, body: &str) -> Result<(), Refusal> {
    let (limit, whose) = peer.body_limit();
    if body.len() > limit {
        let name = escape(&peer.manifest.name);
        let why = crate::base::config::over_receiver_limit(body.len(), &name, limit, &whose);
        return Err(invalid(why));
    }
    Ok(())
}

/// Checks that the request line fits the frame bound.
pub fn check_frame(config: &Config, params: &SendParams) -> Result<(), Refusal> {
    let params = serde_json::to_value(params).expect("strings and numbers serialize");
    let size = crate::wire::request_line(u64::MAX, "message/send", params).len() - 1;
    if size > config.max_bytes {
        return Err(invalid(format!(
            "the request would be {size} bytes, over the frame limit of {} bytes (BATON_MAX_BYTES)",
            config.max_bytes
        )));
    }
    Ok(())
}

/// No send to this instance (`own_id`) itself, and while `only` is set
/// (for the reason `scope`) none but to `only`.
pub(super) fn check_scope(
    own_id: &str,
    only: Option<&str>,
    scope: &str,
    peer: &Peer,
) -> Result<(), Refusal> {
    let m = &peer.manifest;
    let reason = match only {
        _ if m.instance_id == own_id => "a send to this instance itself is refused".to_string(),
        Some(only) if only != m.instance_id => {
            format!("{scope}: only its sender {only} may be sent to, not {peer}")
        }
        _ => return Ok(()),
    };
    let status = Status::Denied;
    Err(Refusal { status, reason })
}
