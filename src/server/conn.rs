//! A connection thread answers its own requests and never touches agent
//! state: it reads lines under the deadlines of docs/protocol.md §1, says hello
//! (`initialize`, `ping`, `agent/info`), delivers `message/send` itself,
//! registers `events/subscribe` and forwards events, and asks the
//! foreground over its channel for every other method.

use super::deliver::deliver;
use super::out::{Out, Writer, answer_then_flush, write_line};
use super::peer::Peer;
use super::request::{self, SendRequest};
use super::{Event, INIT_TIMEOUT, RpcError, Shared, invalid_params, zcoder};
use crate::spool::events::{self, Subscription};
use crate::sys;
use crate::wire::access::{BridgeKey, Door};
use crate::wire::answer::{Hello, HelloParams, Pong, Software, Subscribed};
use crate::wire::request::{AgentInfo, InfoQueue, SubscribeParams, Supported};
use crate::wire::{self, Call, Id, Incoming, LineReader, Method, ReadError};
use crossbeam_channel as chan;
use serde_json::{Map, Value};
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Serves one connection, in connection slot `slot`, until its peer
/// leaves, a deadline passes or an answer cannot be written.
pub(super) fn serve_connection(
    stream: UnixStream,
    cred: sys::PeerCred,
    shared: &Shared,
    slot: u64,
) {
    let peer = Peer::new(cred.pid, cred.uid);
    let cfg = &shared.config;
    let input = match stream.try_clone() {
        Ok(input) => input,
        Err(e) => {
            // Never waits: a client that does not read loses the line.
            let _ = sys::send_nowait(&stream, &no_descriptor(&e));
            return;
        }
    };
    let out = Out::new(stream, cfg.io_timeout);
    shared.slots.started(slot, &out);
    let init_by = Instant::now() + INIT_TIMEOUT;
    let mut reader = LineReader::new(input, cfg.max_bytes);
    let mut session = Session {
        shared,
        out: &out,
        peer: &peer,
        slot,
        initialized: false,
        subscription: None,
        close: false,
        handed: None,
    };
    let mut first = true;
    loop {
        // A subscriber waits for events, not requests: no idle limit. A
        // connection that has not initialized has until `init_by`.
        let idle = match (session.initialized, session.subscription) {
            (true, Some(_)) => None,
            (true, None) => Some(cfg.idle_timeout),
            (false, _) => Some(
                cfg.idle_timeout
                    .min(init_by.saturating_duration_since(Instant::now())),
            ),
        };
        let read = match idle {
            Some(d) if d.is_zero() => Err(ReadError::Idle),
            _ => reader.read_line(idle, cfg.io_timeout),
        };
        let line = match read {
            Ok(l) => l,
            Err(ReadError::Idle) if !session.initialized && Instant::now() >= init_by => {
                let message = format!(
                    "initialize timeout: no initialize within {} s of connecting",
                    INIT_TIMEOUT.as_secs()
                );
                let line = RpcError::new(wire::CONNECTION_ERROR, message).line(&Value::Null);
                write_line(&out, &line);
                break;
            }
            Err(e) => {
                let zcoder = first && reader.buffered().starts_with(b"ZCODER");
                answer_read_error(shared, &out, &e, zcoder);
                break;
            }
        };
        // While it handles a line, a connection does not give way to a
        // new one; a subscriber never does.
        let open = session.subscription.is_none();
        if open && !shared.slots.busy(slot, true) {
            break;
        }
        if first && line.starts_with(wire::ZCODER_MAGIC) {
            let header = line.to_vec();
            zcoder::request(shared, &mut reader, &out, &header, &peer);
            break;
        }
        first = false;
        let blank = line.iter().all(u8::is_ascii_whitespace);
        let answer = (!blank).then(|| session.answer(line)).flatten();
        let written = answer.is_none_or(|a| answer_then_flush(shared, &out, &a));
        let handed = session.handed.take();
        if let (false, Some((message_id, turn))) = (written, handed) {
            // The caller never read the task it claimed: it goes back.
            let _ = shared.events.send(Event::Undelivered { message_id, turn });
        }
        if !written || session.close {
            break;
        }
        if open {
            shared.slots.busy(slot, false);
        }
    }
    if let Some(id) = session.subscription {
        let _ = shared.events.send(Event::Unsubscribe { id });
    }
}

/// The line for a connection whose thread could not get a second
/// descriptor for it (its reading half): -32603, naming the shortage in
/// the words `inbox/claim` uses (protocol §4), so the client knows to try
/// again.
fn no_descriptor(e: &io::Error) -> Vec<u8> {
    let message = match sys::shortage(e) {
        Some(what) => format!("{what}: try again"),
        None => format!("cannot serve the connection: {e}"),
    };
    wire::error_line(&Value::Null, wire::INTERNAL_ERROR, &message, None)
}

/// Says why a line could not be read, while an answer is still possible:
/// in zcoder's framing if the line was the start of a zcoder header.
fn answer_read_error(shared: &Shared, out: &Writer, e: &ReadError, zcoder: bool) {
    // A zcoder header that never completed is answered in its own framing.
    match super::read_error_line(&shared.config, e) {
        Some(_) if zcoder => write_line(out, &zcoder::invalid(shared)),
        Some(line) => write_line(out, &line),
        None => false,
    };
}

/// What one connection has said so far.
struct Session<'a> {
    shared: &'a Shared,
    out: &'a Writer,
    peer: &'a Peer,
    /// Its connection slot.
    slot: u64,
    initialized: bool,
    subscription: Option<u64>,
    /// Close the connection once the answer is written.
    close: bool,
    /// The task (and turn token) the answer being written hands out, if it
    /// is an `inbox/claim` that claimed one.
    handed: Option<(String, String)>,
}

impl Session<'_> {
    /// The answer to one line that is not blank, if it gets one.
    fn answer(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        // The common request, read without a JSON tree once the
        // connection said hello.
        let fast = self.initialized.then(|| request::fast_send(line));
        if let Some((id, req, body)) = fast.flatten() {
            let _ = crate::base::failpoint::hit("dispatch");
            let r = self
                .peer
                .check(self.shared, Door::Method(Method::MessageSend))
                .and_then(|_| deliver(self.shared, req, Some(body), self.peer, "jsonrpc"));
            return Some(answer_line(&id, r));
        }
        match wire::classify(line) {
            Incoming::Invalid { id, code, message } => {
                Some(wire::error_line(&id, code, &message, None))
            }
            Incoming::Notification { .. } => None,
            Incoming::Reply { reply } => {
                // Replies count only on a connection that said hello, and
                // only from a caller who may decide (they get no answer).
                if self.initialized && self.peer.check(self.shared, Door::Reply).is_ok() {
                    let pid = self.peer.pid;
                    let _ = self.shared.events.send(Event::ClientReply { reply, pid });
                }
                None
            }
            Incoming::Request { id, method, params } => self.request(&id, &method, params),
        }
    }

    fn request(&mut self, id: &Id, name: &str, params: Value) -> Option<Vec<u8>> {
        let method = Method::parse(name);
        if !self.initialized && method != Some(Method::Initialize) {
            let message = "not initialized: the first request must be initialize";
            return Some(RpcError::new(wire::NOT_INITIALIZED, message).line(id));
        }
        let Some(method) = method else {
            let message = format!("method not found: {}", crate::text::sanitize::escape(name));
            return Some(RpcError::new(wire::METHOD_NOT_FOUND, message).line(id));
        };
        if let Err(e) = self.peer.check(self.shared, Door::Method(method)) {
            return Some(e.line(id));
        }
        let Value::Object(params) = params else {
            return Some(invalid_params("params must be an object").line(id));
        };
        if method == Method::EventsSubscribe {
            return match self.subscribe(id, params) {
                Ok(sub) => {
                    self.subscription = Some(sub);
                    None
                }
                Err(e) => {
                    self.close = e.code == wire::TOO_MANY_CONNECTIONS;
                    Some(e.line(id))
                }
            };
        }
        let _ = crate::base::failpoint::hit("dispatch");
        let r = dispatch(self, method, params);
        self.handed = match (&r, method) {
            (Ok(v), Method::Foreground(Call::InboxClaim)) => super::handed_out(v),
            _ => None,
        };
        if method == Method::Initialize && r.is_ok() && !self.initialized {
            self.initialized = true;
            self.shared.slots.initialized(self.slot);
        }
        Some(answer_line(id, r))
    }

    /// Registers a subscriber with the foreground, answers, replays recorded
    /// events from `since`, then forwards live ones on a thread of its own.
    /// Refused, and the connection closed, when subscribers hold all the
    /// slots they may.
    fn subscribe(&self, id: &Id, params: Map<String, Value>) -> Result<u64, RpcError> {
        let (shared, out, peer, slot) = (self.shared, self.out, self.peer, self.slot);
        let SubscribeParams { since, controller } = SubscribeParams::read(&params)?;
        let controller = controller.unwrap_or(false);
        if controller {
            peer.check(shared, Door::Controller)?;
        }
        if self.subscription.is_some() {
            return Err(RpcError::new(
                wire::INVALID_REQUEST,
                "invalid request: this connection is already subscribed",
            ));
        }
        if !shared.slots.subscribe(slot) {
            return Err(RpcError::new(
                wire::TOO_MANY_CONNECTIONS,
                format!(
                    "too many subscribers: the limit is {}",
                    shared.slots.max_subscribers()
                ),
            ));
        }
        let sub = ask(shared, None, |reply| Event::Subscribe { controller, reply })
            .inspect_err(|_| shared.slots.unsubscribe(slot))?;
        let result = Subscribed {
            controller,
            next_seq: sub.next_seq,
            subscribed: true,
        };
        if !write_line(out, &wire::result_line(id, &result)) {
            return Ok(sub.id);
        }
        if let Some(since) = since {
            events::replay(shared.spool.dir(), since, sub.next_seq, |line| {
                match serde_json::from_slice::<Value>(line) {
                    Ok(ev) => write_line(out, &wire::notification_line("event", ev)),
                    Err(_) => true,
                }
            });
        }
        let id = sub.id;
        let w = Arc::clone(out);
        let _ = std::thread::Builder::new()
            .name("baton-events".into())
            .spawn(move || forward(sub, &w));
        Ok(id)
    }
}

/// A request's answer line: its result, or its error.
fn answer_line<T: serde::Serialize>(id: &Id, r: Result<T, RpcError>) -> Vec<u8> {
    match r {
        Ok(v) => wire::result_line(id, &v),
        Err(e) => e.line(id),
    }
}

/// Hands the foreground the event `ask` makes of a reply channel, and
/// waits up to `wait` (by default the I/O timeout, at least
/// `ANSWER_WAIT_MIN`) for its answer.
fn ask<T>(
    shared: &Shared,
    wait: Option<Duration>,
    ask: impl FnOnce(chan::Sender<T>) -> Event,
) -> Result<T, RpcError> {
    let (reply, rx) = chan::bounded(1);
    let wait = wait.unwrap_or(shared.config.io_timeout.max(super::ANSWER_WAIT_MIN));
    if shared.events.send(ask(reply)).is_err() {
        return Err(RpcError::new(
            wire::INTERNAL_ERROR,
            "the instance is shutting down",
        ));
    }
    rx.recv_timeout(wait)
        .map_err(|_| RpcError::new(wire::INTERNAL_ERROR, "the instance did not answer in time"))
}

/// Writes a subscriber's live lines as they come, until a write fails or
/// the hub drops the subscriber (it fell behind), which empties its queue:
/// the line being written is the last. Then the client learns by EOF
/// instead of waiting on a silent connection, and the reader sees EOF and
/// unsubscribes.
fn forward(sub: Subscription, w: &Writer) {
    let backlog = sub.backlog;
    for line in sub.rx.iter() {
        let ok = !backlog.is_cut() && write_line(w, &line);
        backlog.done(&line);
        if !ok {
            break;
        }
    }
    backlog.cut();
    for line in sub.rx.try_iter() {
        backlog.done(&line);
    }
    w.shutdown();
}

fn dispatch(s: &Session, method: Method, params: Map<String, Value>) -> Result<Value, RpcError> {
    let (shared, peer) = (s.shared, s.peer);
    match method {
        Method::Initialize => initialize(s, &params),
        // What `list` shows of each instance: counted here, on the
        // connection's thread, from the spool's index and what the
        // foreground published, so that a ping never waits for it.
        Method::Ping => Ok(to_value(Pong {
            approvals: Some(shared.approvals.load(Ordering::SeqCst)),
            instance_id: shared.instance_id.clone(),
            queued: Some(shared.spool.counts().queued),
            state: shared.state(),
            status: "pong".into(),
            wire: None,
        })),
        Method::AgentInfo => {
            let c = shared.spool.counts();
            Ok(to_value(AgentInfo {
                manifest: shared.lock_manifest().clone(),
                queue: InfoQueue {
                    max: shared.config.max_queue,
                    processing: c.processing,
                    queued: c.queued,
                },
            }))
        }
        Method::MessageSend => {
            let req = SendRequest::read(&params)?;
            Ok(to_value(deliver(shared, req, None, peer, "jsonrpc")?))
        }
        // Every other method needs the agent's state: the foreground
        // answers it.
        Method::Foreground(method) => {
            if matches!(method, Call::TaskStatus | Call::TaskCancel) {
                verify_asker(shared, &params, peer)?;
            }
            let caller = peer.caller(shared);
            // relay/send discovers, then delivers with one retry, each
            // bounded by the I/O timeout.
            let wait = (method == Call::RelaySend)
                .then(|| shared.config.io_timeout * 4 + Duration::from_secs(5));
            ask(shared, wait, |reply| Event::Call {
                method,
                params,
                reply,
                caller,
            })?
        }
        Method::EventsSubscribe => unreachable!("a subscription is taken before dispatch"),
    }
}

/// An answer as the value the connection writes.
fn to_value(answer: impl serde::Serialize) -> Value {
    serde_json::to_value(answer).expect("an answer serializes")
}

fn initialize(s: &Session, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let (shared, peer) = (s.shared, s.peer);
    let hello = HelloParams::read(params, BridgeKey::valid_label, KEY_LABEL)?;
    let version = hello.protocol_version;
    let bridge = hello.bridge.map(|b| BridgeKey {
        target: b.target,
        remote: b.remote,
        label: b.key,
    });
    if version.as_u64() != Some(wire::PROTOCOL) {
        let supported = Supported {
            supported: vec![wire::PROTOCOL],
        };
        return Err(RpcError {
            code: wire::UNSUPPORTED_PROTOCOL,
            message: format!("unsupported protocol version {version}"),
            data: Some(to_value(supported)),
        });
    }
    if let Some(key) = bridge {
        // The first declaration stands: a bridge's client cannot undo it.
        let _ = peer.bridge.set(key);
    }
    peer.check(shared, Door::Method(Method::Initialize))?;
    // The role is found now, while the connection is new: a request that
    // comes when descriptors have run out then need not read /proc.
    let _ = peer.caller(shared);
    Ok(to_value(Hello {
        capabilities: Method::ALL.map(|m| m.as_str().to_string()).to_vec(),
        instance: Some(shared.lock_manifest().clone()),
        offline: None,
        protocol_version: crate::registry::PROTOCOL,
        server: Software::baton("baton"),
    }))
}

/// What `bridge.key` must be, as its refusal says.
const KEY_LABEL: &str = "a label of 1 to 64 letters, digits and -_.@";

/// `task/status` or `task/cancel` with `sender_instance_id`: the asker
/// says it is that instance, which is checked as a sender's claim is
/// (deliver.rs); the foreground then answers it about, or lets it cancel,
/// its own tasks only.
fn verify_asker(shared: &Shared, params: &Map<String, Value>, peer: &Peer) -> Result<(), RpcError> {
    let id =
        crate::wire::request::Fields(params).opt("sender_instance_id", "an instance id", |v| {
            v.as_str().filter(|id| crate::registry::valid_id(id))
        })?;
    let Some(id) = id else { return Ok(()) };
    super::deliver::verify_instance(shared, id, peer)
        .map(|_| ())
        .map_err(|why| invalid_params(format!("sender_instance_id {id}: {why}")))
}
