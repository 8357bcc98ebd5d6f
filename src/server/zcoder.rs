//! A zcoder connection gets exactly one answer, in zcoder's own frame and
//! with zcoder's statuses only (docs/zcoder.md): its header names the
//! payload's length, the payload is read exactly, an `enqueue` goes
//! through the same delivery checks as `message/send`, and the connection
//! closes.

use super::Shared;
use super::deliver::deliver;
use super::out::{Writer, answer_then_flush, write_line};
use super::peer::Peer;
use crate::base::status::Status;
use crate::wire::Body;
use crate::wire::body::Notice;
use crate::wire::{self, LineReader, ReadError, ZcoderAck, ZcoderHead};
use serde_json::{Map, Value};

/// What a ping is answered when it reaches its target.
const PONG: &str = "pong";

/// An ack frame: `pong`, or one of zcoder's statuses.
pub(super) fn ack_frame(
    message_id: &str,
    status: &str,
    queue_position: Option<usize>,
    shared: &Shared,
) -> Vec<u8> {
    let ack = ZcoderAck {
        message_id,
        protocol: 1,
        queue_position,
        state: shared.state().as_str(),
        status,
        kind: "ack",
    };
    ack.frame()
}

/// The ack of a frame that cannot be read as a request.
pub(super) fn invalid(shared: &Shared) -> Vec<u8> {
    ack_frame("", Status::Invalid.as_str(), None, shared)
}

/// One zcoder request on a connection whose first line was its header:
/// read exactly the declared payload, answer one frame, close.
pub(super) fn request(
    shared: &Shared,
    reader: &mut LineReader,
    out: &Writer,
    header: &[u8],
    peer: &Peer,
) {
    let cfg = &shared.config;
    let Ok(n) = wire::zcoder_length(header, cfg.max_bytes) else {
        write_line(out, &invalid(shared));
        return;
    };
    let payload = match reader.read_exact_within(n, cfg.io_timeout) {
        Ok(p) => p,
        // The peer is gone: no answer is possible.
        Err(ReadError::Truncated | ReadError::Io(_)) => return,
        Err(_) => {
            write_line(out, &invalid(shared));
            return;
        }
    };
    let ack = match wire::parse_flat(&payload) {
        Ok(obj) => answer(shared, &obj, peer),
        Err(_) => invalid(shared),
    };
    answer_then_flush(shared, out, &ack);
}

fn answer(shared: &Shared, obj: &Map<String, Value>, peer: &Peer) -> Vec<u8> {
    let head = ZcoderHead::read(obj);
    let message_id = head.message_id;
    let ack = |status: &str| ack_frame(&message_id, status, None, shared);
    if !head.protocol_one {
        return ack(Status::Unsupported.as_str());
    }
    match head.kind.as_deref() {
        Some("ping") => match head.target {
            Some(Some(t)) if t != shared.instance_id => ack(Status::WrongTarget.as_str()),
            None | Some(Some(_)) => ack(PONG),
            Some(None) => ack(Status::Invalid.as_str()),
        },
        Some("enqueue") => {
            let Some(req) = super::request::from_zcoder(obj) else {
                return ack(Status::Invalid.as_str());
            };
            // zcoder has no word for "not permitted" (nor "denied"): the
            // transcript says who was refused and why.
            if let Err(e) = peer.check(shared, crate::wire::access::Door::Zcoder) {
                shared.hub.emit(Body::Notice(Notice {
                    message_id: Some(&message_id),
                    text: &format!("a zcoder frame refused: {}", e.message),
                    ..Notice::default()
                }));
                return ack(Status::Invalid.as_str());
            }
            match deliver(shared, req, None, peer, "zcoder") {
                Ok(r) => {
                    let status = match r.status() {
                        // zcoder has no word for these; the transcript
                        // keeps the precise status.
                        Some(Status::HopLimit | Status::InflightFull | Status::Denied) => {
                            Status::Invalid.as_str()
                        }
                        _ => &r.status,
                    };
                    ack_frame(&message_id, status, r.queue_position, shared)
                }
                // Storage failed: nothing was accepted; `full` tells a
                // zcoder sender to try again later.
                Err(_) => ack(Status::Full.as_str()),
            }
        }
        _ => ack(Status::Unsupported.as_str()),
    }
}
