//! Delivering a task to another instance: resolving a target among live
//! peers, the sender-side guards of DESIGN §7 (body bounds, self-send,
//! reply-only scope), and `message/send` with one retry under the same id.
//! The CLI uses it for plain sends; an instance uses it, on a worker thread,
//! for `relay/send` and `--reply`.

use crate::client::{ClientError, Connection};
use crate::config::Config;
use crate::registry::{self, Discovery, Peer, RegistryDir, Wire};
use crate::sanitize::escape;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What a TARGET names among live peers.
pub enum Resolved {
    One(Box<Peer>),
    /// Nothing matched; every live peer is a candidate.
    NoMatch(Vec<Peer>),
    /// A name several peers have.
    Ambiguous(Vec<Peer>),
}

/// An exact instance id first, else a name exactly one live peer has.
pub fn resolve(found: &Discovery, target: &str) -> Resolved {
    if let Some(p) = found
        .peers
        .iter()
        .find(|p| p.manifest.instance_id == target)
    {
        return Resolved::One(Box::new(p.clone()));
    }
    let named: Vec<Peer> = found
        .peers
        .iter()
        .filter(|p| p.manifest.name == target)
        .cloned()
        .collect();
    match named.len() {
        0 => Resolved::NoMatch(found.peers.clone()),
        1 => Resolved::One(Box::new(named.into_iter().next().expect("one"))),
        _ => Resolved::Ambiguous(named),
    }
}

/// One line per candidate, as errors list them.
pub fn candidates(peers: &[Peer]) -> String {
    if peers.is_empty() {
        return "no live instances are running".into();
    }
    let mut s = String::from("candidates:");
    for p in peers {
        let m = &p.manifest;
        s.push_str(&format!(
            "\n  {}  pid {}  {}  {}{}",
            escape(&m.name),
            m.pid,
            escape(&m.workspace),
            m.instance_id,
            if p.wire == Wire::Zcoder {
                "  (zcoder)"
            } else {
                ""
            }
        ));
    }
    s
}

fn candidate_json(peers: &[Peer]) -> Value {
    Value::Array(
        peers
            .iter()
            .map(|p| {
                json!({
                    "instance_id": p.manifest.instance_id,
                    "name": p.manifest.name,
                    "pid": p.manifest.pid,
                    "workspace": p.manifest.workspace,
                })
            })
            .collect(),
    )
}

/// Checks a body against both bounds before anything is sent; the error
/// says which bound it exceeds.
pub fn check_body(config: &Config, body: &str) -> Result<(), String> {
    if body.trim().is_empty() {
        return Err("the message is empty".into());
    }
    if body.len() > config.max_message_bytes {
        return Err(format!(
            "the message is {} bytes, over the body limit of {} bytes (BATON_MAX_MESSAGE_BYTES)",
            body.len(),
            config.max_message_bytes
        ));
    }
    Ok(())
}

/// Checks that the request line fits the frame bound.
pub fn check_frame(config: &Config, params: &Value) -> Result<(), String> {
    let line = crate::wire::request_line(u64::MAX, "message/send", params.clone());
    if line.len() - 1 > config.max_bytes {
        return Err(format!(
            "the request would be {} bytes, over the frame limit of {} bytes (BATON_MAX_BYTES)",
            line.len() - 1,
            config.max_bytes
        ));
    }
    Ok(())
}

/// `message/send` to a native peer, retried once with the same id when the
/// first attempt failed in transport (the task may or may not have
/// arrived; the same id makes the retry safe).
pub fn deliver(config: &Config, peer: &Peer, params: &Value) -> Result<Value, ClientError> {
    let once = || -> Result<Value, ClientError> {
        let mut conn = Connection::open(Path::new(&peer.manifest.socket), config.io_timeout)?;
        conn.call("message/send", params.clone())
    };
    match once() {
        Err(e) if e.is_transport() => once(),
        r => r,
    }
}

/// zcoder's default frame bound.
pub const ZCODER_MAX_BYTES: usize = 65536;

/// Who a zcoder `enqueue` says it comes from.
pub struct ZcoderSender<'a> {
    pub instance_id: &'a str,
    pub project: &'a str,
    pub workspace: &'a str,
}

/// Delivers to a zcoder peer with its frame: a ping first, then one
/// `enqueue`, always reading the whole ack (a zcoder listener dies of
/// SIGPIPE otherwise). Retried once with the same id after a transport
/// failure. The result has the shape of a `message/send` result.
pub fn deliver_zcoder(
    config: &Config,
    peer: &Peer,
    message_id: &str,
    body: &str,
    sender: Option<ZcoderSender<'_>>,
) -> Result<Value, ClientError> {
    let socket = Path::new(&peer.manifest.socket);
    let id = &peer.manifest.instance_id;
    let mut req = json!({
        "protocol": 1,
        "type": "enqueue",
        "message_id": message_id,
        "target_instance_id": id,
        "body": body,
        "created_at": crate::spool::now_secs(),
    });
    if let Some(s) = sender {
        req["sender_instance_id"] = json!(s.instance_id);
        req["sender_pid"] = json!(std::process::id());
        req["sender_project"] = json!(s.project);
        req["sender_workspace"] = json!(s.workspace);
    }
    // zcoder's own frame bound (ZCODER_RELAY_MAX_BYTES, 65536 unless its
    // user changed it): a bigger frame would only be refused there.
    let size = serde_json::to_vec(&req).expect("serializes").len();
    if size > ZCODER_MAX_BYTES {
        return Ok(json!({
            "status": "invalid",
            "message_id": message_id,
            "reason": format!(
                "the zcoder frame would carry {size} bytes, over zcoder's limit of {ZCODER_MAX_BYTES}"
            ),
        }));
    }
    let once = || -> Result<Value, ClientError> {
        crate::client::zcoder_ping(socket, id, config.io_timeout)?;
        let ack = crate::client::zcoder_exchange(socket, &req, config.io_timeout)?;
        let status = ack
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| ClientError::Protocol("ack has no status".into()))?;
        let mut r = json!({"status": status, "message_id": message_id});
        for k in ["queue_position", "state"] {
            if let Some(v) = ack.get(k) {
                r[k] = v.clone();
            }
        }
        if !matches!(status, "accepted" | "duplicate") {
            r["reason"] = json!(format!("the zcoder instance answered {}", escape(status)));
        }
        Ok(r)
    };
    match once() {
        Err(e) if e.is_transport() => once(),
        r => r,
    }
}

/// The instance a relayed send is made on behalf of.
#[derive(Clone)]
pub struct Origin {
    pub config: Config,
    pub registry: PathBuf,
    pub instance_id: String,
    pub name: String,
    pub workspace: String,
}

/// One send an instance makes for its agent.
pub struct Outbound {
    pub target: String,
    pub body: String,
    pub message_id: String,
    pub hop: u64,
    pub in_reply_to: Option<String>,
    pub mode: String,
    /// During a relayed turn: the only instance id that may be the target.
    pub only: Option<String>,
    /// Why `only` is set, for the refusal.
    pub scope: String,
}

fn outcome(status: &str, message_id: &str, reason: String) -> Value {
    json!({"status": status, "message_id": message_id, "reason": reason})
}

/// Runs the sender-side guards, resolves the target and delivers. The
/// result is a `message/send` result, or a sender-side status: `denied`,
/// `invalid`, `no_target` (with `candidates`), `transport` or
/// `unsupported`.
pub fn send_as(origin: &Origin, out: &Outbound) -> Value {
    let id = out.message_id.as_str();
    if let Err(why) = check_body(&origin.config, &out.body) {
        return outcome("invalid", id, why);
    }
    let dirs: Vec<RegistryDir> = registry::scan_dirs(&origin.registry);
    let found = registry::discover(&dirs, None, origin.config.io_timeout);
    let peer = match resolve(&found, &out.target) {
        Resolved::One(p) => *p,
        Resolved::NoMatch(all) => {
            let mut v = outcome(
                "no_target",
                id,
                format!(
                    "no live instance has the id or name {}",
                    escape(&out.target)
                ),
            );
            v["candidates"] = candidate_json(&all);
            return v;
        }
        Resolved::Ambiguous(many) => {
            let mut v = outcome(
                "no_target",
                id,
                format!(
                    "the name {} is ambiguous: pick one by id",
                    escape(&out.target)
                ),
            );
            v["candidates"] = candidate_json(&many);
            return v;
        }
    };
    let m = &peer.manifest;
    if m.instance_id == origin.instance_id {
        return outcome(
            "denied",
            id,
            "a send to this instance itself is refused".into(),
        );
    }
    if let Some(only) = &out.only
        && *only != m.instance_id
    {
        return outcome(
            "denied",
            id,
            format!(
                "{}: only its sender {only} may be sent to, not {} ({})",
                out.scope,
                escape(&m.name),
                m.instance_id
            ),
        );
    }
    let target = json!({"instance_id": m.instance_id, "name": m.name});
    if peer.wire == Wire::Zcoder {
        let sender = ZcoderSender {
            instance_id: &origin.instance_id,
            project: &origin.name,
            workspace: &origin.workspace,
        };
        return match deliver_zcoder(&origin.config, &peer, id, &out.body, Some(sender)) {
            Ok(mut r) => {
                r["target"] = target;
                r
            }
            Err(e) => {
                let mut v = outcome(
                    "transport",
                    id,
                    format!(
                        "{} ({}): {e}; the task may or may not have arrived",
                        escape(&m.name),
                        m.instance_id
                    ),
                );
                v["target"] = target;
                v
            }
        };
    }
    let mut params = json!({
        "message_id": id,
        "target_instance_id": m.instance_id,
        "body": out.body,
        "sender": {
            "instance_id": origin.instance_id,
            "name": origin.name,
            "workspace": origin.workspace,
        },
        "hop": out.hop,
        "mode": out.mode,
    });
    if let Some(r) = &out.in_reply_to {
        params["in_reply_to"] = json!(r);
    }
    if let Err(why) = check_frame(&origin.config, &params) {
        return outcome("invalid", id, why);
    }
    match deliver(&origin.config, &peer, &params) {
        Ok(mut r) => {
            r["target"] = target;
            r
        }
        Err(ClientError::Rpc { code, message }) => {
            let mut v = outcome(
                "transport",
                id,
                format!(
                    "{} answered error {code}: {}",
                    escape(&m.name),
                    escape(&message)
                ),
            );
            v["target"] = target;
            v
        }
        Err(e) => {
            let mut v = outcome(
                "transport",
                id,
                format!(
                    "{} ({}): {e}; the task may or may not have arrived",
                    escape(&m.name),
                    m.instance_id
                ),
            );
            v["target"] = target;
            v
        }
    }
}
