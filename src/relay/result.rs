//! A sender's result, spelled as a `message/send` result is: its status,
//! the message id and why, and the target it names.

use crate::base::status::Status;
use crate::registry::Peer;
use crate::registry::lookup::KnownSpool;
use serde_json::{Value, json};

pub(super) fn outcome(status: Status, message_id: &str, reason: String) -> Value {
    json!({"status": status, "message_id": message_id, "reason": reason})
}

/// `v`, naming the target it was meant for.
pub(super) fn with_target(mut v: Value, target: Value) -> Value {
    v["target"] = target;
    v
}

/// The target of a result from a live peer.
pub(super) fn peer_target(peer: &Peer) -> Value {
    json!({"instance_id": peer.manifest.instance_id, "name": peer.manifest.name})
}

/// How a result names a stopped agent's spool's owner.
pub(super) fn spool_target(spool: &KnownSpool) -> Value {
    json!({"name": spool.name, "workspace": spool.workspace})
}

/// A `no_target` result: why, and the candidates to pick from.
pub(super) fn no_target(message_id: &str, why: String, candidates: Value) -> Value {
    let mut v = outcome(Status::NoTarget, message_id, why);
    v["candidates"] = candidates;
    v
}
