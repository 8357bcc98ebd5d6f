//! A sender's result, spelled as a `message/send` result is: its status,
//! the message id and why, and the target it names.

use crate::base::status::Status;
use crate::registry::Peer;
use crate::registry::lookup::KnownSpool;
use crate::wire::answer::{Candidate, SendResult, Target};

pub(super) fn outcome(status: Status, message_id: &str, reason: String) -> SendResult {
    SendResult::new(status, message_id, Some(reason))
}

/// `r`, naming the target it was meant for.
pub(super) fn with_target(r: SendResult, target: Target) -> SendResult {
    SendResult {
        target: Some(target),
        ..r
    }
}

/// The target of a result from a live peer.
pub fn peer_target(peer: &Peer) -> Target {
    Target {
        instance_id: Some(peer.manifest.instance_id.clone()),
        name: Some(peer.manifest.name.clone()),
        workspace: None,
    }
}

/// How a result names a stopped agent's spool's owner.
pub fn spool_target(spool: &KnownSpool) -> Target {
    Target {
        instance_id: None,
        name: Some(spool.name.clone()),
        workspace: Some(spool.workspace.clone()),
    }
}

/// A `no_target` result: why, and the candidates to pick from.
pub(super) fn no_target(message_id: &str, why: String, candidates: Vec<Candidate>) -> SendResult {
    SendResult {
        candidates: Some(candidates),
        ..outcome(Status::NoTarget, message_id, why)
    }
}
