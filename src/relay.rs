//! Delivering a task to another instance: resolving a target among live
//! peers, the sender-side guards (docs/protocol.md §6; body bounds, self-send,
//! reply-only scope), and `message/send` with one retry under the same id.
//! The CLI uses it for plain sends; an instance uses it, on a worker thread,
//! for `relay/send` and `--reply`.

use crate::client::{ClientError, Session};
use crate::config::Config;
use crate::registry::{self, Discovery, Peer, RegistryDir, Wire};
use crate::sanitize::escape;
use crate::server::{self, NotStored, Receiver, Verdict};
use crate::spool::{Spool, Task};
use crate::status::Status;
use crate::wire::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        return Err(crate::config::body_too_large(
            &body.len().to_string(),
            config.max_message_bytes,
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
        let mut conn = Session::open(Path::new(&peer.manifest.socket), config.io_timeout)?;
        conn.call(Method::MessageSend, params.clone())
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
    // zcoder requires a sender id and pid in every enqueue (as context:
    // it does not look them up). A plain command line is not an instance,
    // so it says so: `cli-<pid>`, which no instance id can be.
    let pid = std::process::id();
    match sender {
        Some(s) => {
            req["sender_instance_id"] = json!(s.instance_id);
            req["sender_project"] = json!(s.project);
            req["sender_workspace"] = json!(s.workspace);
        }
        None => req["sender_instance_id"] = json!(registry::plain_sender_id(pid)),
    }
    req["sender_pid"] = json!(pid);
    // zcoder's own frame bound (ZCODER_RELAY_MAX_BYTES, 65536 unless its
    // user changed it): a bigger frame would only be refused there.
    let size = serde_json::to_vec(&req).expect("serializes").len();
    if size > ZCODER_MAX_BYTES {
        return Ok(json!({
            "status": Status::Invalid,
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
        if !matches!(status.parse(), Ok(Status::Accepted | Status::Duplicate)) {
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
    /// The name and workspace of `only`, when known: while that instance
    /// is stopped, the task goes to the spool they own, like any task
    /// for a stopped agent.
    pub only_spool: Option<(String, String)>,
}

fn outcome(status: Status, message_id: &str, reason: String) -> Value {
    json!({"status": status, "message_id": message_id, "reason": reason})
}

/// `v`, naming the target it was meant for.
fn with_target(mut v: Value, target: Value) -> Value {
    v["target"] = target;
    v
}

/// Runs the sender-side guards, resolves the target and delivers. The
/// result is a `message/send` result, or a sender-side status: `denied`,
/// `invalid`, `no_target` (with `candidates`), `transport` or
/// `unsupported`.
pub fn send_as(origin: &Origin, out: &Outbound) -> Value {
    if let Err(why) = check_body(&origin.config, &out.body) {
        return outcome(Status::Invalid, &out.message_id, why);
    }
    let peer = match find_target(origin, out) {
        Ok(peer) => peer,
        Err(done) => return done,
    };
    if let Err(refusal) = check_scope(origin, out, &peer) {
        return refusal;
    }
    if peer.wire == Wire::Zcoder {
        to_zcoder(origin, out, &peer)
    } else {
        to_native(origin, out, &peer)
    }
}

/// The live peer the send goes to; `Err` with the result when there is
/// none, or when the task was stored for a stopped agent instead.
fn find_target(origin: &Origin, out: &Outbound) -> Result<Peer, Value> {
    let id = out.message_id.as_str();
    // A relayed turn may answer only its sender instance, which a stored
    // task for a name is not: offline delivery is for local sends.
    if out.only.is_none() {
        let make = || {
            let sender = crate::spool::Sender {
                instance_id: Some(origin.instance_id.clone()),
                name: Some(origin.name.clone()),
                workspace: Some(origin.workspace.clone()),
                pid: Some(std::process::id()),
                remote: None,
            };
            crate::spool::new_task(
                id,
                &out.body,
                sender,
                out.hop,
                out.in_reply_to.clone(),
                &out.mode,
                Some(std::process::id()),
                "jsonrpc",
            )
        };
        return match route(&origin.config, &origin.registry, &out.target, id, &make) {
            Route::Live(p) => Ok(*p),
            Route::Done(v) => Err(without_self(v, &origin.instance_id)),
        };
    }
    let dirs: Vec<RegistryDir> = registry::scan_dirs(&origin.registry);
    let found = registry::find_id(&dirs, &out.target, origin.config.io_timeout)
        .map(|p| Resolved::One(Box::new(p)))
        .unwrap_or_else(|| {
            resolve(
                &registry::discover(&dirs, None, origin.config.io_timeout),
                &out.target,
            )
        });
    match found {
        Resolved::One(p) => match live(&origin.config, p, id) {
            Route::Live(p) => Ok(*p),
            Route::Done(v) => Err(v),
        },
        Resolved::NoMatch(_) if out.only.as_deref() == Some(out.target.as_str()) => {
            match &out.only_spool {
                Some((name, workspace)) => Err(store_for_stopped(origin, out, name, workspace)),
                None => Err(outcome(
                    Status::NoTarget,
                    id,
                    format!("{} is not running", escape(&out.target)),
                )),
            }
        }
        Resolved::NoMatch(all) | Resolved::Ambiguous(all) => {
            let mut v = outcome(
                Status::NoTarget,
                id,
                format!(
                    "no single live instance has the id or name {}",
                    escape(&out.target)
                ),
            );
            v["candidates"] = candidate_json(&all);
            Err(without_self(v, &origin.instance_id))
        }
    }
}

/// A `no_target` result without the sender among its candidates: it
/// cannot be sent to.
fn without_self(mut v: Value, own_id: &str) -> Value {
    if let Some(list) = v.get_mut("candidates").and_then(Value::as_array_mut) {
        list.retain(|c| c["instance_id"] != own_id);
    }
    v
}

/// A task for the stopped instance `only` (a reply to a task it sent):
/// stored in the spool its name and workspace own, with that spool's
/// checks but for the in-flight window, which a reply to the spool's own
/// task does not count against. No such spool, or one that is in use by
/// another instance of the name, is `no_target`.
fn store_for_stopped(origin: &Origin, out: &Outbound, name: &str, workspace: &str) -> Value {
    let id = out.message_id.as_str();
    let gone = |why: String| outcome(Status::NoTarget, id, why);
    let Some(known) = known_spools()
        .into_iter()
        .find(|s| s.name == name && s.workspace == workspace)
    else {
        return gone(format!(
            "{} ({}) is not running and has no spool here",
            escape(name),
            escape(&out.target)
        ));
    };
    if !known.offline {
        let why = format!(
            "{} is not running and does not take offline delivery (serve --no-offline)",
            escape(name)
        );
        return with_target(outcome(Status::Denied, id, why), known.target());
    }
    let s = match Spool::open_offline(&known.dir, origin.config.fsync) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return gone(format!(
                "{} ({}) is not running, and its spool is in use by another instance",
                escape(name),
                escape(&out.target)
            ));
        }
        Err(e) => {
            let failed = outcome(Status::Transport, id, NotStored(e).message());
            return with_target(failed, known.target());
        }
    };
    let sender = crate::spool::Sender {
        instance_id: Some(origin.instance_id.clone()),
        name: Some(origin.name.clone()),
        workspace: Some(origin.workspace.clone()),
        pid: Some(std::process::id()),
        remote: None,
    };
    let task = crate::spool::new_task(
        id,
        &out.body,
        sender,
        out.hop,
        out.in_reply_to.clone(),
        &out.mode,
        Some(std::process::id()),
        "jsonrpc",
    );
    let mut config = origin.config.clone();
    config.max_inflight = 0;
    store(&config, &origin.registry, &s, &known, task)
}

/// No send to this instance itself, and during a relayed turn none but to
/// its sender.
fn check_scope(origin: &Origin, out: &Outbound, peer: &Peer) -> Result<(), Value> {
    let m = &peer.manifest;
    if m.instance_id == origin.instance_id {
        return Err(outcome(
            Status::Denied,
            &out.message_id,
            "a send to this instance itself is refused".into(),
        ));
    }
    match &out.only {
        Some(only) if *only != m.instance_id => Err(outcome(
            Status::Denied,
            &out.message_id,
            format!(
                "{}: only its sender {only} may be sent to, not {} ({})",
                out.scope,
                escape(&m.name),
                m.instance_id
            ),
        )),
        _ => Ok(()),
    }
}

/// The target of a result from a live peer.
fn peer_target(peer: &Peer) -> Value {
    json!({"instance_id": peer.manifest.instance_id, "name": peer.manifest.name})
}

/// The result of a send that failed in transport twice.
fn transport_failure(peer: &Peer, message_id: &str, e: &ClientError) -> Value {
    let m = &peer.manifest;
    outcome(
        Status::Transport,
        message_id,
        format!(
            "{} ({}): {e}; the task may or may not have arrived",
            escape(&m.name),
            m.instance_id
        ),
    )
}

/// Delivers to a zcoder peer, as this instance.
fn to_zcoder(origin: &Origin, out: &Outbound, peer: &Peer) -> Value {
    let sender = ZcoderSender {
        instance_id: &origin.instance_id,
        project: &origin.name,
        workspace: &origin.workspace,
    };
    let r = match deliver_zcoder(
        &origin.config,
        peer,
        &out.message_id,
        &out.body,
        Some(sender),
    ) {
        Ok(r) => r,
        Err(e) => transport_failure(peer, &out.message_id, &e),
    };
    with_target(r, peer_target(peer))
}

/// Delivers to a native peer with `message/send`, as this instance.
fn to_native(origin: &Origin, out: &Outbound, peer: &Peer) -> Value {
    let (m, id) = (&peer.manifest, out.message_id.as_str());
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
        return outcome(Status::Invalid, id, why);
    }
    let r = match deliver(&origin.config, peer, &params) {
        Ok(r) => r,
        Err(ClientError::Rpc { code, message }) => outcome(
            Status::Transport,
            id,
            format!(
                "{} answered error {code}: {}",
                escape(&m.name),
                escape(&message)
            ),
        ),
        Err(e) => transport_failure(peer, id, &e),
    };
    with_target(r, peer_target(peer))
}

/// A spool a name has on this machine, found through its `meta.json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KnownSpool {
    #[serde(skip)]
    pub dir: PathBuf,
    pub name: String,
    pub workspace: String,
    /// Whether senders may store tasks in it while its name is not running.
    pub offline: bool,
    pub queued: usize,
    /// The agent's `--accept-from` / `--deny-from`, applied by senders.
    #[serde(skip)]
    pub policy: crate::glob::Policy,
}

impl KnownSpool {
    /// How a sender's result names this spool's owner.
    fn target(&self) -> Value {
        json!({"name": self.name, "workspace": self.workspace})
    }
}

/// Every named spool under the state home (`$XDG_STATE_HOME/baton/spool`).
pub fn known_spools() -> Vec<KnownSpool> {
    let Ok(home) = crate::spool::state_home() else {
        return Vec::new();
    };
    let root = home.join("baton").join("spool");
    let Ok(rd) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let dir = e.path();
        if crate::spool::check_private_dir(&dir, "spool").is_err() {
            continue;
        }
        // Bounded and not through a symlink; a spool without a readable
        // meta.json names nobody.
        let Ok(meta) = crate::spool::Meta::read(&dir) else {
            continue;
        };
        if !registry::valid_name(&meta.name) {
            continue;
        }
        let queued = std::fs::read_dir(dir.join("inbox"))
            .map(|r| r.filter_map(|e| e.ok()).count())
            .unwrap_or(0);
        out.push(KnownSpool {
            dir,
            name: meta.name,
            workspace: meta.workspace,
            offline: meta.offline,
            queued,
            policy: crate::glob::Policy {
                accept_from: meta.accept_from,
                deny_from: meta.deny_from,
            },
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.workspace.cmp(&b.workspace)));
    out
}

/// Where a name led.
pub enum Route {
    /// A live instance: deliver through its socket.
    Live(Box<Peer>),
    /// The outcome is known: stored offline, refused, or no target.
    Done(Value),
}

/// How long a sender keeps trying while a spool's lock is held by an
/// instance that is starting (it publishes its manifest right after).
const RACE_WAIT: Duration = Duration::from_secs(3);

/// Resolves TARGET among live peers; when no live instance has that name
/// but exactly one spool does, stores the task there (docs/protocol.md §8,
/// offline delivery). `make_task` builds the task to store. `exclude` is the
/// caller's own instance id, if any.
pub fn route(
    config: &Config,
    registry_dir: &Path,
    target: &str,
    message_id: &str,
    make_task: &dyn Fn() -> Task,
) -> Route {
    let deadline = std::time::Instant::now() + RACE_WAIT;
    loop {
        let dirs = registry::scan_dirs(registry_dir);
        // An exact id needs no scan: its manifest is read directly.
        if let Some(p) = registry::find_id(&dirs, target, config.io_timeout) {
            return live(config, Box::new(p), message_id);
        }
        // Ping only what the target can name; everyone is pinged only to
        // list candidates when that finds nothing.
        let named = registry::discover_matching(&dirs, None, config.io_timeout, &|m| {
            m.instance_id == target || m.name == target
        });
        let found = match resolve(&named, target) {
            Resolved::One(p) => return live(config, p, message_id),
            Resolved::Ambiguous(_) => named,
            Resolved::NoMatch(_) => registry::discover(&dirs, None, config.io_timeout),
        };
        let all = match resolve(&found, target) {
            Resolved::One(p) => return live(config, p, message_id),
            Resolved::Ambiguous(many) => {
                let mut v = outcome(
                    Status::NoTarget,
                    message_id,
                    format!("the name {} is ambiguous: pick one by id", escape(target)),
                );
                v["candidates"] = candidate_json(&many);
                return Route::Done(v);
            }
            Resolved::NoMatch(all) => all,
        };
        let spool = match offline_spool(target, message_id, &all) {
            Ok(spool) => spool,
            Err(done) => return Route::Done(done),
        };
        match Spool::open_offline(&spool.dir, config.fsync) {
            Ok(Some(s)) => {
                return Route::Done(store(config, registry_dir, &s, &spool, make_task()));
            }
            Ok(None) if std::time::Instant::now() < deadline => {
                // Its instance is starting (or another sender is storing):
                // look again for the live instance.
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(None) => {
                return Route::Done(outcome(
                    Status::Transport,
                    message_id,
                    format!(
                        "{}'s spool stayed locked but no live instance answered; try again",
                        escape(target)
                    ),
                ));
            }
            // Not a verdict on the task either: nothing was stored.
            Err(e) => {
                let failed = outcome(Status::Transport, message_id, NotStored(e).message());
                return Route::Done(with_target(failed, spool.target()));
            }
        }
    }
}

/// A resolved peer to deliver to, unless it is unresponsive: its pid is
/// there but it did not answer the ping in time. That is a transport
/// failure, never a reason to store the task in its spool (whose lock the
/// stopped instance holds anyway).
fn live(config: &Config, p: Box<Peer>, message_id: &str) -> Route {
    if p.unresponsive() {
        let failed = outcome(Status::Transport, message_id, p.silence(config.io_timeout));
        return Route::Done(with_target(failed, peer_target(&p)));
    }
    Route::Live(p)
}

/// The one spool of a name no live instance has, if it takes offline
/// delivery; `Err` with the result otherwise. `live` lists every live
/// instance, the candidates when there is no such spool.
fn offline_spool(target: &str, message_id: &str, live: &[Peer]) -> Result<KnownSpool, Value> {
    let mut spools: Vec<KnownSpool> = known_spools()
        .into_iter()
        .filter(|s| s.name == target)
        .collect();
    if spools.is_empty() {
        let mut v = outcome(
            Status::NoTarget,
            message_id,
            format!("no live instance has the id or name {}", escape(target)),
        );
        v["candidates"] = candidate_json(live);
        return Err(v);
    }
    if spools.len() > 1 {
        let mut v = outcome(
            Status::NoTarget,
            message_id,
            format!(
                "{} is not running and several spools have that name: start the one you mean",
                escape(target)
            ),
        );
        v["candidates"] = Value::Array(
            spools
                .iter()
                .map(|s| json!({"name": s.name, "workspace": s.workspace, "pid": null, "instance_id": ""}))
                .collect(),
        );
        return Err(v);
    }
    let spool = spools.pop().expect("one spool");
    if !spool.offline {
        return Err(outcome(
            Status::Denied,
            message_id,
            format!(
                "{} is not running and does not take offline delivery (serve --no-offline)",
                escape(target)
            ),
        ));
    }
    Ok(spool)
}

/// Stores one task in an offline spool with the receiver's own checks,
/// records it in that spool's transcript as a live receiver would (marked
/// `stored`), and wakes the agent if it has a wake socket. A spool that
/// cannot store the task is an error, not a verdict: `transport`.
fn store(config: &Config, registry_dir: &Path, s: &Spool, known: &KnownSpool, task: Task) -> Value {
    let id = task.message_id.clone();
    // The agent's own sender rules, as its listener would apply them.
    if let Some(why) = known.policy.check(
        task.sender.name.as_deref().unwrap_or(""),
        task.sender.workspace.as_deref().unwrap_or(""),
    ) {
        return with_target(outcome(Status::Denied, &id, why), known.target());
    }
    let limits = crate::spool::Limits {
        max_queue: config.max_queue,
        max_inflight: config.max_inflight,
    };
    let from = crate::turn::display_name(&task.sender);
    let pid = Some(std::process::id());
    // Under the spool's lock, as a live receiver records an acceptance.
    let announce = |task: &Task, queue_position| {
        let hub = crate::events::Hub::open(s.dir());
        let event = server::Accepted::new(task, None, &from, pid, queue_position).stored();
        hub.record("message.accepted", &event);
        hub.flush();
    };
    let admitted = s.admit(task, None, limits, || false, announce);
    let verdict = server::admission_verdict(admitted, Receiver::Offline { name: &known.name });
    if matches!(&verdict, Ok(v) if v.status == Status::Stored) {
        wake(registry_dir, &known.name);
    }
    let r = match verdict {
        Ok(v) => verdict_json(&id, v),
        Err(e) => outcome(Status::Transport, &id, e.message()),
    };
    // Every answer names the spool's owner, as a live receiver's does.
    with_target(r, known.target())
}

/// An offline sender's result: the verdict, spelled as a live receiver's
/// result spells it, without the receiver's `state`.
fn verdict_json(message_id: &str, v: Verdict) -> Value {
    let mut r = json!({"status": v.status, "message_id": message_id});
    if let Some(p) = v.queue_position {
        r["queue_position"] = json!(p);
    }
    if let Some(why) = v.reason {
        r["reason"] = json!(why);
    }
    r
}

/// The wake socket of a name: where systemd (or any supervisor) listens
/// for it, starting the agent on the first connection.
pub fn wake_socket(registry_dir: &Path, name: &str) -> PathBuf {
    registry_dir.join(format!("w-{name}.sock"))
}

/// Connects once to a name's wake socket, if there is one. Returns whether
/// a wake socket answered.
pub fn wake(registry_dir: &Path, name: &str) -> bool {
    let path = wake_socket(registry_dir, name);
    use std::os::unix::fs::FileTypeExt;
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        return false;
    }
    std::os::unix::net::UnixStream::connect(&path).is_ok()
}
