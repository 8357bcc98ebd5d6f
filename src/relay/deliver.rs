//! Delivering to a live peer: `message/send` to a native one, an
//! `enqueue` frame to a zcoder one, each retried once under the same id
//! after a transport failure (the task may or may not have arrived; the
//! same id makes the retry safe).

use super::Origin;
use super::result::outcome;
use crate::base::config::Config;
use crate::base::status::Status;
use crate::client::ZcoderRequest;
use crate::client::{ClientError, Session};
use crate::registry::{self, Peer};
use crate::text::sanitize::escape;
use crate::wire::Method;
use crate::wire::answer::SendResult;
use crate::wire::request::SendParams;
use std::path::Path;

/// `once`, and once more after a transport failure.
fn retried(once: impl Fn() -> Result<SendResult, ClientError>) -> Result<SendResult, ClientError> {
    once().or_else(|e| if e.is_transport() { once() } else { Err(e) })
}

/// `message/send` to a native peer; a body over the limit its manifest
/// says it accepts is refused (`invalid`) without connecting.
pub fn deliver(
    config: &Config,
    peer: &Peer,
    params: &SendParams,
) -> Result<SendResult, ClientError> {
    if let Err(r) = super::check_limit(peer, &params.body) {
        return Ok(outcome(r.status, &params.message_id, r.reason));
    }
    retried(|| {
        let mut conn = Session::open(Path::new(&peer.manifest.socket), config.io_timeout)?;
        conn.call(Method::MessageSend, params)
    })
}

/// zcoder's default frame bound.
pub const ZCODER_MAX_BYTES: usize = 65536;

/// Delivers to a zcoder peer with its frame: a ping first, then one
/// `enqueue`, always reading the whole ack (a zcoder listener dies of
/// SIGPIPE otherwise). A body over zcoder's own limit is refused
/// (`invalid`) without connecting. The result has the shape of a
/// `message/send` result.
/// `sender` is the instance it is sent for (its name is zcoder's
/// `sender_project`), none for a plain command line.
pub fn deliver_zcoder(
    config: &Config,
    peer: &Peer,
    message_id: &str,
    body: &str,
    sender: Option<&Origin>,
) -> Result<SendResult, ClientError> {
    if let Err(r) = super::check_limit(peer, body) {
        return Ok(outcome(r.status, message_id, r.reason));
    }
    let socket = Path::new(&peer.manifest.socket);
    let id = &peer.manifest.instance_id;
    // zcoder requires a sender id and pid in every enqueue (as context:
    // it does not look them up). A plain command line is not an instance,
    // so it says so: `cli-<pid>`, which no instance id can be.
    let pid = std::process::id();
    let sender_id =
        sender.map_or_else(|| registry::plain_sender_id(pid), |s| s.instance_id.clone());
    let req = ZcoderRequest {
        body: Some(body),
        created_at: Some(crate::spool::now_secs()),
        message_id,
        protocol: 1,
        sender_instance_id: Some(&sender_id),
        sender_pid: Some(pid),
        sender_project: sender.map(|s| s.name.as_str()),
        sender_workspace: sender.map(|s| s.workspace.as_str()),
        target_instance_id: id,
        kind: "enqueue",
    };
    // zcoder's own frame bound (ZCODER_RELAY_MAX_BYTES, 65536 unless its
    // user changed it): a bigger frame would only be refused there.
    let size = serde_json::to_vec(&req).expect("serializes").len();
    if size > ZCODER_MAX_BYTES {
        let why = format!(
            "the zcoder frame would carry {size} bytes, over zcoder's limit of {ZCODER_MAX_BYTES}"
        );
        return Ok(outcome(Status::Invalid, message_id, why));
    }
    retried(|| {
        crate::client::zcoder_ping(socket, id, config.io_timeout)?;
        let ack = crate::client::zcoder_exchange(socket, &req, config.io_timeout)?;
        let status = (ack.status.as_deref())
            .ok_or_else(|| ClientError::Protocol("ack has no status".into()))?;
        let mut r = SendResult {
            queue_position: ack.queue_position,
            state: ack.state(),
            ..SendResult::new(status, message_id, None)
        };
        if !matches!(status.parse(), Ok(Status::Accepted | Status::Duplicate)) {
            r.reason = Some(format!("the zcoder instance answered {}", escape(status)));
        }
        Ok(r)
    })
}

/// The result of a send that failed in transport twice.
pub(super) fn transport_failure(peer: &Peer, message_id: &str, e: &ClientError) -> SendResult {
    let why = format!("{peer}: {e}; the task may or may not have arrived");
    outcome(Status::Transport, message_id, why)
}
