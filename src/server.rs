//! The listener (DESIGN §4): one blocking accept thread, one thread per
//! connection with read and write deadlines. Connection threads validate,
//! store accepted tasks in the spool, record the acceptance or refusal in
//! the event `Hub`, and answer; they wake the foreground only when it
//! waits for tasks. Anything that needs agent state (control, inbox) is
//! asked of the foreground over its channel and never done here.

use crate::config::Config;
use crate::events::{self, Hub, Subscription};
use crate::glob::glob_match;
use crate::registry::{self, Manifest};
use crate::spool::{self, Admission, Limits, Sender, Spool, Task};
use crate::sys;
use crate::wire::{self, Incoming, LineReader, ReadError};
use crossbeam_channel as chan;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The instance state published to peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Ready = 0,
    Busy = 1,
    Paused = 2,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Busy => "busy",
            State::Paused => "paused",
        }
    }

    fn from_u8(n: u8) -> State {
        match n {
            1 => State::Busy,
            2 => State::Paused,
            _ => State::Ready,
        }
    }
}

/// `--accept-from` / `--deny-from` patterns.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub accept_from: Vec<String>,
    pub deny_from: Vec<String>,
}

impl Policy {
    /// `Some(reason)` when a sender with this name and workspace is denied.
    pub fn check(&self, name: &str, workspace: &str) -> Option<String> {
        let hit = |p: &String| glob_match(p, name) || glob_match(p, workspace);
        if let Some(p) = self.deny_from.iter().find(|p| hit(p)) {
            return Some(format!("sender matches --deny-from {p}"));
        }
        if !self.accept_from.is_empty() && !self.accept_from.iter().any(hit) {
            return Some("sender matches no --accept-from pattern".into());
        }
        None
    }
}

/// What connection threads tell the foreground.
pub enum Event {
    /// A task was accepted while the foreground waits for one (see
    /// `Shared::wake_on_accept`); its event is recorded already.
    Queued,
    /// A connection thread left queued events to the foreground to write
    /// (see `Hub::flush_once`).
    Flush,
    /// A request only the foreground may answer.
    Call {
        method: String,
        params: Map<String, Value>,
        reply: chan::Sender<Result<Value, RpcError>>,
    },
    /// `events/subscribe`: the foreground registers the subscriber.
    Subscribe {
        controller: bool,
        reply: chan::Sender<Subscription>,
    },
    Unsubscribe {
        id: u64,
    },
    /// A client's reply to a request the server sent it.
    ClientReply {
        reply: Map<String, Value>,
    },
    /// A connection was accepted, or ended (for `--ephemeral`).
    Connected,
    Disconnected,
    /// A send made on the agent's behalf finished (for the transcript).
    Relayed {
        result: Value,
        reply_of: Option<String>,
    },
}

/// A JSON-RPC error to answer with.
#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// State shared by the listener threads; written by the foreground only
/// through atomics and the manifest snapshot.
pub struct Shared {
    pub config: Config,
    pub instance_id: String,
    pub spool: Arc<Spool>,
    pub state: AtomicU8,
    pub paused: AtomicBool,
    pub manifest: Mutex<Manifest>,
    /// Our registry directory; the directories scanned for senders are
    /// derived from it each time, so a zcoder registry created later counts.
    pub registry: PathBuf,
    pub policy: Policy,
    pub stopping: AtomicBool,
    /// The event stream; connection threads emit acceptances and
    /// refusals into it themselves.
    pub hub: Arc<Hub>,
    /// Set by the foreground while a new task would make it act (start a
    /// turn, ask for an approval, arm a `--ttl` timer). Otherwise an
    /// acceptance does not wake it: it looks at the queue again whenever
    /// it next wakes for its own reasons.
    pub wake_on_accept: AtomicBool,
    connections: AtomicUsize,
    events: chan::Sender<Event>,
}

/// Methods this version answers, as `initialize` lists them.
pub const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "agent/info",
    "message/send",
    "control/pause",
    "control/resume",
    "control/status",
    "inbox/list",
    "inbox/claim",
    "inbox/complete",
    "inbox/requeue",
    "inbox/discard",
    "relay/send",
    "events/subscribe",
    "approval/respond",
    "turn/cancel",
    "turn/local",
];

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Config,
        instance_id: String,
        spool: Arc<Spool>,
        manifest: Manifest,
        registry: PathBuf,
        policy: Policy,
        paused: bool,
        hub: Arc<Hub>,
        events: chan::Sender<Event>,
    ) -> Shared {
        Shared {
            config,
            instance_id,
            spool,
            state: AtomicU8::new(if paused { State::Paused } else { State::Ready } as u8),
            paused: AtomicBool::new(paused),
            manifest: Mutex::new(manifest),
            registry,
            policy,
            stopping: AtomicBool::new(false),
            hub,
            wake_on_accept: AtomicBool::new(true),
            connections: AtomicUsize::new(0),
            events,
        }
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::SeqCst))
    }

    pub fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::SeqCst);
        self.manifest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .state = s.as_str().to_string();
    }
}

/// Runs the accept loop until `shared.stopping` is set and a connection
/// wakes it. It blocks in `accept`: an idle instance uses no CPU.
pub fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let me = sys::euid();
    // Refusals of other users are logged at most once a second.
    let mut last_refusal: Option<std::time::Instant> = None;
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let cred = match sys::peer_cred(&stream) {
            Ok(c) if c.uid == me => c,
            Ok(c) => {
                if last_refusal.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_refusal = Some(std::time::Instant::now());
                    eprintln!(
                        "baton: refused a connection from uid {} (not uid {me}) before reading from it",
                        c.uid
                    );
                }
                continue;
            }
            Err(_) => continue,
        };
        let n = shared.connections.fetch_add(1, Ordering::SeqCst);
        if n >= shared.config.max_connections {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            refuse_over_cap(
                stream,
                shared.config.max_connections,
                shared.config.io_timeout,
            );
            continue;
        }
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("baton-conn".into())
            .spawn(move || {
                // Counted down even if the thread panics: a panic closes
                // this connection only.
                let _guard = ConnectionGuard(Arc::clone(&s));
                let _ = s.events.send(Event::Connected);
                serve_connection(stream, cred.pid, &s);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Ends a connection's accounting when its thread ends, however it ends.
struct ConnectionGuard(Arc<Shared>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        // An acceptance recorded but not yet written, if the thread ended
        // between the two.
        self.0.hub.flush();
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
        let _ = self.0.events.send(Event::Disconnected);
    }
}

fn refuse_over_cap(mut stream: UnixStream, cap: usize, timeout: Duration) {
    let _ = stream.set_write_timeout(Some(timeout));
    let line = wire::error_line(
        &Value::Null,
        wire::CONNECTION_ERROR,
        &format!("too many connections: the limit is {cap}"),
        None,
    );
    let _ = wire::write_all(&mut stream, &line);
}

/// The writing half of a connection, shared by the thread that answers
/// requests and the one that forwards events.
type Writer = Arc<Mutex<UnixStream>>;

/// Writes an answer, then the events its request recorded (an
/// acceptance): the client is not kept waiting for the transcript. If the
/// socket cannot take the whole answer at once, the events go first, so a
/// slow client never holds them back.
fn answer_then_flush(shared: &Shared, w: &Writer, line: &[u8]) -> bool {
    let mut stream = w.lock().unwrap_or_else(|e| e.into_inner());
    let sent = sys::send_nowait(&stream, line);
    shared.hub.flush_once(|| {
        let _ = shared.events.send(Event::Flush);
    });
    match sent {
        Ok(n) if n == line.len() => true,
        Ok(n) => wire::write_all(&mut stream, &line[n..]).is_ok(),
        Err(_) => false,
    }
}

fn write_line(w: &Writer, line: &[u8]) -> bool {
    let mut stream = w.lock().unwrap_or_else(|e| e.into_inner());
    wire::write_all(&mut stream, line).is_ok()
}

/// The process at the other end of a connection.
pub struct Peer {
    /// The kernel's peer pid, where the platform reports it.
    pub pid: Option<u32>,
    /// Its working directory, read from the kernel once per connection,
    /// when a plain sender first needs it.
    cwd: std::cell::OnceCell<Option<String>>,
}

impl Peer {
    pub fn new(pid: Option<u32>) -> Peer {
        Peer {
            pid,
            cwd: std::cell::OnceCell::new(),
        }
    }

    fn cwd(&self) -> Option<String> {
        self.cwd
            .get_or_init(|| {
                self.pid
                    .and_then(sys::process_cwd)
                    .map(|p| p.display().to_string())
            })
            .clone()
    }
}

fn serve_connection(stream: UnixStream, peer_pid: Option<u32>, shared: &Shared) {
    let peer = Peer::new(peer_pid);
    let cfg = &shared.config;
    if stream.set_write_timeout(Some(cfg.io_timeout)).is_err() {
        return;
    }
    let Ok(input) = stream.try_clone() else {
        return;
    };
    let out: Writer = Arc::new(Mutex::new(stream));
    let mut reader = LineReader::new(input, cfg.max_bytes);
    let mut initialized = false;
    let mut subscription: Option<u64> = None;
    let mut first = true;
    loop {
        // A subscriber waits for events, not requests: no idle limit.
        let idle = subscription.is_none().then_some(cfg.idle_timeout);
        let line = match reader.read_line(idle, cfg.io_timeout) {
            Ok(l) => l,
            Err(e) => {
                let message = match e {
                    ReadError::TooLarge => Some((
                        wire::INVALID_REQUEST,
                        format!(
                            "frame too large: a line may hold at most {} bytes",
                            cfg.max_bytes
                        ),
                    )),
                    ReadError::Idle => Some((
                        wire::CONNECTION_ERROR,
                        format!(
                            "idle timeout: no request for {} s",
                            cfg.idle_timeout.as_secs_f64()
                        ),
                    )),
                    ReadError::LineTimeout => Some((
                        wire::CONNECTION_ERROR,
                        format!(
                            "read timeout: a line must complete within {} s of its first byte",
                            cfg.io_timeout.as_secs_f64()
                        ),
                    )),
                    ReadError::Eof | ReadError::Truncated | ReadError::Io(_) => None,
                };
                let zcoder = first && reader.buffered().starts_with(b"ZCODER");
                if zcoder {
                    // A zcoder header that never completed: answer in its
                    // own framing while an answer is still possible.
                    if message.is_some() {
                        let ack = zcoder_ack("", "invalid", None, shared);
                        write_line(&out, &ack);
                    }
                } else if let Some((code, msg)) = message {
                    write_line(&out, &wire::error_line(&Value::Null, code, &msg, None));
                }
                break;
            }
        };
        if first && line.starts_with(wire::ZCODER_MAGIC) {
            let header = line.to_vec();
            zcoder_request(shared, &mut reader, &out, &header, &peer);
            break;
        }
        first = false;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if initialized && let Some((id, req, body)) = fast_send(line) {
            let _ = crate::failpoint::hit("dispatch");
            let answer = match deliver(shared, req, Some(body), &peer, "jsonrpc") {
                Ok(v) => wire::result_line(&id, &v),
                Err(e) => wire::error_line(&id, e.code, &e.message, e.data),
            };
            if !answer_then_flush(shared, &out, &answer) {
                break;
            }
            continue;
        }
        let answer = match wire::classify(line) {
            Incoming::Invalid { id, code, message } => {
                Some(wire::error_line(&id, code, &message, None))
            }
            Incoming::Notification { .. } => None,
            Incoming::Reply { reply } => {
                // Replies count only on a connection that said hello.
                if initialized {
                    let _ = shared.events.send(Event::ClientReply { reply });
                }
                None
            }
            Incoming::Request { id, method, params } => {
                if !initialized && method != "initialize" {
                    Some(wire::error_line(
                        &id,
                        wire::NOT_INITIALIZED,
                        "not initialized: the first request must be initialize",
                        None,
                    ))
                } else if method == "events/subscribe" {
                    match subscribe(shared, &out, &id, params, subscription.is_some()) {
                        Ok(sub) => {
                            subscription = Some(sub);
                            None
                        }
                        Err(e) => Some(wire::error_line(&id, e.code, &e.message, e.data)),
                    }
                } else {
                    let _ = crate::failpoint::hit("dispatch");
                    let r = dispatch(shared, &method, params, &peer);
                    if method == "initialize" && r.is_ok() {
                        initialized = true;
                    }
                    Some(match r {
                        Ok(v) => wire::result_line(&id, &v),
                        Err(e) => wire::error_line(&id, e.code, &e.message, e.data),
                    })
                }
            }
        };
        if let Some(a) = answer
            && !answer_then_flush(shared, &out, &a)
        {
            break;
        }
    }
    if let Some(id) = subscription {
        let _ = shared.events.send(Event::Unsubscribe { id });
    }
}

/// An ack frame: zcoder's statuses only.
fn zcoder_ack(
    message_id: &str,
    status: &str,
    queue_position: Option<u64>,
    shared: &Shared,
) -> Vec<u8> {
    let mut ack = json!({
        "protocol": 1,
        "type": "ack",
        "message_id": message_id,
        "status": status,
        "state": shared.state().as_str(),
    });
    if let Some(p) = queue_position {
        ack["queue_position"] = json!(p);
    }
    wire::zcoder_frame(&serde_json::to_vec(&ack).expect("serializes"))
}

/// One zcoder request on a connection whose first line was its header:
/// read exactly the declared payload, answer one frame, close.
fn zcoder_request(
    shared: &Shared,
    reader: &mut LineReader,
    out: &Writer,
    header: &[u8],
    peer: &Peer,
) {
    let cfg = &shared.config;
    let n = match wire::zcoder_length(header, cfg.max_bytes) {
        Ok(n) => n,
        Err(_) => {
            write_line(out, &zcoder_ack("", "invalid", None, shared));
            return;
        }
    };
    let payload = match reader.read_exact_within(n, cfg.io_timeout) {
        Ok(p) => p,
        // The peer is gone: no answer is possible.
        Err(ReadError::Truncated | ReadError::Io(_)) => return,
        Err(_) => {
            write_line(out, &zcoder_ack("", "invalid", None, shared));
            return;
        }
    };
    let ack = match wire::parse_flat(&payload) {
        Ok(obj) => zcoder_answer(shared, &obj, peer),
        Err(_) => zcoder_ack("", "invalid", None, shared),
    };
    answer_then_flush(shared, out, &ack);
}

fn zcoder_answer(shared: &Shared, obj: &Map<String, Value>, peer: &Peer) -> Vec<u8> {
    let message_id = obj
        .get("message_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let ack = |status: &str| zcoder_ack(&message_id, status, None, shared);
    if obj.get("protocol") != Some(&json!(1)) {
        return ack("unsupported");
    }
    match obj.get("type").and_then(Value::as_str) {
        Some("ping") => match obj.get("target_instance_id") {
            Some(Value::String(t)) if *t != shared.instance_id => ack("wrong_target"),
            None | Some(Value::String(_)) => ack("pong"),
            Some(_) => ack("invalid"),
        },
        Some("enqueue") => {
            let Some(req) = zcoder_send_request(obj) else {
                return ack("invalid");
            };
            match deliver(shared, req, None, peer, "zcoder") {
                Ok(r) => {
                    let status = match r.status {
                        // zcoder has no word for these; the transcript
                        // keeps the precise status.
                        "hop_limit" | "inflight_full" | "denied" => "invalid",
                        s => s,
                    };
                    zcoder_ack(
                        &message_id,
                        status,
                        r.queue_position.map(|p| p as u64),
                        shared,
                    )
                }
                // Storage failed: nothing was accepted; `full` tells a
                // zcoder sender to try again later.
                Err(_) => ack("full"),
            }
        }
        _ => ack("unsupported"),
    }
}

/// Maps a zcoder `enqueue` onto `message/send`'s request; `None` when a
/// field has the wrong type.
fn zcoder_send_request(obj: &Map<String, Value>) -> Option<SendRequest> {
    let s = |k: &str| -> Option<Option<String>> {
        match obj.get(k) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(v)) => Some(Some(v.clone())),
            Some(_) => None,
        }
    };
    for k in ["sender_pid", "created_at"] {
        if obj.get(k).is_some_and(|v| !v.is_null() && !v.is_u64()) {
            return None;
        }
    }
    let project = s("sender_project")?;
    Some(SendRequest {
        message_id: s("message_id")??,
        target_instance_id: s("target_instance_id")??,
        body: s("body")??,
        sender_instance_id: s("sender_instance_id")?,
        sender_name: project.map(|p| registry::default_name(std::path::Path::new(&p))),
        sender_workspace: s("sender_workspace")?,
        hop: Some(0),
        in_reply_to: None,
        mode: "queue".into(),
    })
}

/// Registers a subscriber with the foreground, answers, replays recorded
/// events from `since`, then forwards live ones on a thread of its own.
fn subscribe(
    shared: &Shared,
    out: &Writer,
    id: &Value,
    params: Value,
    already: bool,
) -> Result<u64, RpcError> {
    let Value::Object(params) = params else {
        return Err(RpcError::new(
            wire::INVALID_PARAMS,
            "invalid params: params must be an object",
        ));
    };
    let since = match params.get("since") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| bad_type("since", "a non-negative integer"))?,
        ),
    };
    let controller = match params.get("controller") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad_type("controller", "a boolean")),
    };
    if already {
        return Err(RpcError::new(
            wire::INVALID_REQUEST,
            "invalid request: this connection is already subscribed",
        ));
    }
    let (tx, rx) = chan::bounded(1);
    if shared
        .events
        .send(Event::Subscribe {
            controller,
            reply: tx,
        })
        .is_err()
    {
        return Err(RpcError::new(
            wire::INTERNAL_ERROR,
            "the instance is shutting down",
        ));
    }
    let sub = rx
        .recv_timeout(shared.config.io_timeout.max(Duration::from_secs(5)))
        .map_err(|_| RpcError::new(wire::INTERNAL_ERROR, "the instance did not answer in time"))?;
    let result = json!({"subscribed": true, "next_seq": sub.next_seq, "controller": controller});
    if !write_line(out, &wire::result_line(id, &result)) {
        return Ok(sub.id);
    }
    if let Some(since) = since {
        events::replay(
            shared.spool.dir(),
            since,
            sub.next_seq,
            |line| match serde_json::from_slice::<Value>(line) {
                Ok(ev) => write_line(out, &wire::notification_line("event", ev)),
                Err(_) => true,
            },
        );
    }
    let w = Arc::clone(out);
    let live = sub.rx;
    let _ = std::thread::Builder::new()
        .name("baton-events".into())
        .spawn(move || {
            for line in live.iter() {
                if !write_line(&w, &line) {
                    break;
                }
            }
            // A write failed, or the foreground dropped this subscriber
            // for falling behind: the client learns by EOF instead of
            // waiting on a silent connection, and the reader sees EOF and
            // unsubscribes.
            let s = w.lock().unwrap_or_else(|e| e.into_inner());
            let _ = s.shutdown(std::net::Shutdown::Both);
        });
    Ok(sub.id)
}

fn dispatch(shared: &Shared, method: &str, params: Value, peer: &Peer) -> Result<Value, RpcError> {
    if !METHODS.contains(&method) {
        return Err(RpcError::new(
            wire::METHOD_NOT_FOUND,
            format!("method not found: {}", crate::sanitize::escape(method)),
        ));
    }
    let Value::Object(params) = params else {
        return Err(RpcError::new(
            wire::INVALID_PARAMS,
            "invalid params: params must be an object",
        ));
    };
    match method {
        "initialize" => initialize(shared, &params),
        "ping" => Ok(json!({
            "status": "pong",
            "instance_id": shared.instance_id,
            "state": shared.state().as_str(),
        })),
        "agent/info" => {
            let mut info =
                serde_json::to_value(&*shared.manifest.lock().unwrap_or_else(|e| e.into_inner()))
                    .expect("serializes");
            let c = shared.spool.counts();
            info["queue"] = json!({
                "queued": c.queued,
                "processing": c.processing,
                "max": shared.config.max_queue,
            });
            Ok(info)
        }
        "message/send" => {
            let req = SendRequest::from_params(&params)?;
            let d = deliver(shared, req, None, peer, "jsonrpc")?;
            Ok(serde_json::to_value(d).expect("an answer always serializes"))
        }
        // Every other listed method needs the agent's state: the
        // foreground answers it (events/subscribe never reaches here).
        m => ask_foreground(shared, m, params),
    }
}

fn initialize(shared: &Shared, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let version = match params.get("protocol_version") {
        Some(v) if v.is_u64() || v.is_i64() => v.clone(),
        Some(_) => return Err(bad_type("protocol_version", "an integer")),
        None => return Err(missing("protocol_version")),
    };
    match params.get("client") {
        Some(Value::Object(c)) => {
            for k in ["name", "version"] {
                match c.get(k) {
                    Some(Value::String(_)) => {}
                    Some(_) => return Err(bad_type(&format!("client.{k}"), "a string")),
                    None => return Err(missing(&format!("client.{k}"))),
                }
            }
        }
        Some(_) => return Err(bad_type("client", "an object")),
        None => return Err(missing("client")),
    }
    if version != json!(1) {
        return Err(RpcError {
            code: wire::UNSUPPORTED_PROTOCOL,
            message: format!("unsupported protocol version {version}"),
            data: Some(json!({"supported": [1]})),
        });
    }
    let manifest = shared
        .manifest
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(json!({
        "protocol_version": 1,
        "server": {"name": "baton", "version": env!("CARGO_PKG_VERSION")},
        "instance": manifest,
        "capabilities": METHODS,
    }))
}

fn missing(field: &str) -> RpcError {
    RpcError::new(
        wire::INVALID_PARAMS,
        format!("invalid params: {field} is missing"),
    )
}

fn bad_type(field: &str, want: &str) -> RpcError {
    RpcError::new(
        wire::INVALID_PARAMS,
        format!("invalid params: {field} must be {want}"),
    )
}

fn ask_foreground(
    shared: &Shared,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let (tx, rx) = chan::bounded(1);
    let call = Event::Call {
        method: method.to_string(),
        params,
        reply: tx,
    };
    if shared.events.send(call).is_err() {
        return Err(RpcError::new(
            wire::INTERNAL_ERROR,
            "the instance is shutting down",
        ));
    }
    // relay/send discovers, then delivers with one retry, each bounded by
    // the I/O timeout.
    let wait = if method == "relay/send" {
        shared.config.io_timeout * 4 + Duration::from_secs(5)
    } else {
        shared.config.io_timeout.max(Duration::from_secs(5))
    };
    match rx.recv_timeout(wait) {
        Ok(r) => r,
        Err(_) => Err(RpcError::new(
            wire::INTERNAL_ERROR,
            "the instance did not answer in time",
        )),
    }
}

/// A `message/send` request with well-typed fields; values are not yet
/// checked.
#[derive(Debug, PartialEq)]
pub struct SendRequest {
    pub message_id: String,
    pub target_instance_id: String,
    pub body: String,
    pub sender_instance_id: Option<String>,
    pub sender_name: Option<String>,
    pub sender_workspace: Option<String>,
    /// `None` for a negative hop, a value error rather than a type error.
    pub hop: Option<u64>,
    pub in_reply_to: Option<String>,
    pub mode: String,
}

/// A well-formed `message/send` request read straight into its fields,
/// without building a JSON tree: the common request on a busy connection.
/// `None` for anything else and for anything unusual (a duplicate key, a
/// wrong type, a null or missing id, a bad `jsonrpc`, a negative hop),
/// which then takes the general path with its exact errors. What this
/// accepts, the general path reads to the same `SendRequest`. Also returns
/// the body as the line spelled it, a JSON string that the task file and
/// the event then copy instead of escaping the body again.
fn fast_send(line: &[u8]) -> Option<(Value, SendRequest, &RawValue)> {
    use serde::Deserialize;
    use std::borrow::Cow;
    type Text<'a> = Option<Cow<'a, str>>;
    #[derive(Deserialize)]
    struct Frame<'a> {
        #[serde(borrow)]
        jsonrpc: Cow<'a, str>,
        id: Option<Value>,
        #[serde(borrow)]
        method: Cow<'a, str>,
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        message_id: Cow<'a, str>,
        #[serde(borrow)]
        target_instance_id: Cow<'a, str>,
        #[serde(borrow)]
        body: &'a RawValue,
        #[serde(borrow)]
        sender: From<'a>,
        hop: Option<u64>,
        #[serde(borrow, default)]
        in_reply_to: Text<'a>,
        #[serde(borrow, default)]
        mode: Text<'a>,
    }
    #[derive(Deserialize)]
    struct From<'a> {
        #[serde(borrow, default)]
        instance_id: Text<'a>,
        #[serde(borrow, default)]
        name: Text<'a>,
        #[serde(borrow, default)]
        workspace: Text<'a>,
    }
    let f: Frame = serde_json::from_slice(line).ok()?;
    if f.jsonrpc != "2.0" || f.method != "message/send" {
        return None;
    }
    let id =
        f.id.filter(|id| matches!(id, Value::String(_) | Value::Number(_)))?;
    let p = f.params;
    // A string, or the general path says what it is instead.
    let body: String = serde_json::from_str(p.body.get()).ok()?;
    let own = |t: Text| t.map(Cow::into_owned);
    Some((
        id,
        SendRequest {
            message_id: p.message_id.into_owned(),
            target_instance_id: p.target_instance_id.into_owned(),
            body,
            sender_instance_id: own(p.sender.instance_id),
            sender_name: own(p.sender.name),
            sender_workspace: own(p.sender.workspace),
            hop: Some(p.hop.unwrap_or(0)),
            in_reply_to: own(p.in_reply_to),
            mode: own(p.mode).unwrap_or_else(|| "queue".into()),
        },
        p.body,
    ))
}

fn get_str(p: &Map<String, Value>, k: &str, prefix: &str) -> Result<Option<String>, RpcError> {
    match p.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad_type(&format!("{prefix}{k}"), "a string")),
    }
}

fn need_str(p: &Map<String, Value>, k: &str) -> Result<String, RpcError> {
    get_str(p, k, "")?.ok_or_else(|| missing(k))
}

impl SendRequest {
    pub fn from_params(p: &Map<String, Value>) -> Result<SendRequest, RpcError> {
        let message_id = need_str(p, "message_id")?;
        let target_instance_id = need_str(p, "target_instance_id")?;
        let body = need_str(p, "body")?;
        let sender = match p.get("sender") {
            Some(Value::Object(s)) => s,
            Some(_) => return Err(bad_type("sender", "an object")),
            None => return Err(missing("sender")),
        };
        let hop = match p.get("hop") {
            None | Some(Value::Null) => Some(0),
            Some(v) if v.is_u64() => v.as_u64(),
            Some(v) if v.is_i64() => None,
            Some(_) => return Err(bad_type("hop", "an integer")),
        };
        Ok(SendRequest {
            message_id,
            target_instance_id,
            body,
            sender_instance_id: get_str(sender, "instance_id", "sender.")?,
            sender_name: get_str(sender, "name", "sender.")?,
            sender_workspace: get_str(sender, "workspace", "sender.")?,
            hop,
            in_reply_to: get_str(p, "in_reply_to", "")?,
            mode: get_str(p, "mode", "")?.unwrap_or_else(|| "queue".into()),
        })
    }
}

/// Exact reasons, shared with the tests and docs/protocol.md.
pub mod reason {
    pub const BAD_MESSAGE_ID: &str = "message_id does not match [A-Za-z0-9_.-]{1,100}";
    pub const EMPTY_BODY: &str = "body is empty";
    pub const BAD_SENDER_ID: &str = "sender.instance_id does not match [A-Za-z0-9_.-]{1,100}";
    pub const BAD_SENDER_NAME: &str = "sender.name does not match [A-Za-z0-9_.-]{1,64}";
    pub const BAD_SENDER_WORKSPACE: &str =
        "sender.workspace is not an absolute path of at most 4096 bytes";
    pub const BAD_IN_REPLY_TO: &str = "in_reply_to does not match [A-Za-z0-9_.-]{1,100}";
    pub const BAD_MODE: &str = "mode is not queue or steer";
    pub const BAD_HOP: &str = "hop is negative";
    pub const NOT_VERIFIED: &str = "sender not verified";
    pub const REUSED: &str = "message_id reused with a different body";
    pub const DUPLICATE: &str = "this message_id was already accepted with the same body";
    pub const PAUSED: &str = "the instance is paused";
    pub const UNREADABLE: &str =
        "message_id was accepted before, but its stored record cannot be read to compare bodies";
}

/// The result of `message/send`: its members in the order a JSON map
/// gives them.
#[derive(Debug, serde::Serialize)]
pub struct Delivery {
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub state: &'static str,
    pub status: &'static str,
}

/// Runs every acceptance check of DESIGN §4 in order and, if all pass,
/// stores the task. Used by both wires. `body_json`, when the caller has
/// it, is the body as a JSON string. A spool that cannot store the task
/// is not a delivery outcome but an internal error: nothing was accepted.
pub fn deliver(
    shared: &Shared,
    req: SendRequest,
    body_json: Option<&RawValue>,
    peer: &Peer,
    wire: &str,
) -> Result<Delivery, RpcError> {
    let mut req = req;
    let result = check_and_admit(shared, &mut req, body_json, peer, wire);
    if result.status == "accepted" {
        let _ = crate::failpoint::hit("before-answer");
        // The acceptance was recorded under the spool lock (see `admit`).
        if shared.wake_on_accept.load(Ordering::SeqCst) {
            let _ = shared.events.send(Event::Queued);
        }
    } else {
        let from = result.from.unwrap_or_else(|| {
            req.sender_instance_id
                .clone()
                .unwrap_or_else(|| "(cli)".into())
        });
        let reason = result.reason.as_deref().unwrap_or_default();
        refused(
            shared,
            &req.message_id,
            result.status,
            reason,
            &from,
            peer.pid,
        );
        if result.status == "error" {
            return Err(RpcError::new(
                wire::INTERNAL_ERROR,
                format!("internal error: {reason}; the task was not accepted"),
            ));
        }
    }
    Ok(Delivery {
        message_id: req.message_id,
        queue_position: result.queue_position,
        reason: result.reason,
        state: shared.state().as_str(),
        status: result.status,
    })
}

fn refused(
    shared: &Shared,
    message_id: &str,
    status: &str,
    reason: &str,
    from: &str,
    pid: Option<u32>,
) {
    shared.hub.emit(
        "message.rejected",
        json!({"message_id": message_id, "status": status, "reason": reason,
               "from": from, "pid": pid}),
    );
}

/// Records the event of an accepted task. It is called while the task is
/// indexed, under the spool's lock, so the event precedes anything done
/// with the task; the caller flushes the `Hub` once it has answered.
pub fn emit_accepted(
    hub: &Hub,
    kind: &str,
    task: &Task,
    body_json: Option<&RawValue>,
    from: &str,
    pid: Option<u32>,
    queue_position: usize,
) {
    #[derive(serde::Serialize)]
    struct Accepted<'a> {
        message_id: &'a str,
        from: &'a str,
        pid: Option<u32>,
        queue_position: usize,
        mode: &'a str,
        body: spool::Body<'a>,
        sender_id: &'a Option<String>,
        workspace: &'a Option<String>,
    }
    hub.record(
        kind,
        &Accepted {
            message_id: &task.message_id,
            from,
            pid,
            queue_position,
            mode: &task.mode,
            body: spool::Body::new(&task.body, body_json),
            sender_id: &task.sender.instance_id,
            workspace: &task.sender.workspace,
        },
    );
}

struct Outcome {
    status: &'static str,
    queue_position: Option<usize>,
    reason: Option<String>,
    /// How the sender is shown, once it is known.
    from: Option<String>,
}

fn refuse(status: &'static str, reason: impl Into<String>) -> Outcome {
    Outcome {
        status,
        queue_position: None,
        reason: Some(reason.into()),
        from: None,
    }
}

/// Takes the body out of `req` when the task is built.
fn check_and_admit(
    shared: &Shared,
    req: &mut SendRequest,
    body_json: Option<&RawValue>,
    peer: &Peer,
    wire: &str,
) -> Outcome {
    let cfg = &shared.config;
    let peer_pid = peer.pid;
    if req.target_instance_id != shared.instance_id {
        return refuse(
            "wrong_target",
            format!(
                "this is instance {}, not {}",
                shared.instance_id,
                crate::sanitize::escape(&req.target_instance_id)
            ),
        );
    }
    if !registry::valid_id(&req.message_id) {
        return refuse("invalid", reason::BAD_MESSAGE_ID);
    }
    if req.body.trim().is_empty() {
        return refuse("invalid", reason::EMPTY_BODY);
    }
    if req.body.len() > cfg.max_message_bytes {
        return refuse(
            "invalid",
            format!(
                "body is {} bytes, over the limit of {} (BATON_MAX_MESSAGE_BYTES)",
                req.body.len(),
                cfg.max_message_bytes
            ),
        );
    }
    if req
        .sender_instance_id
        .as_deref()
        .is_some_and(|s| !registry::valid_id(s))
    {
        return refuse("invalid", reason::BAD_SENDER_ID);
    }
    if req
        .sender_name
        .as_deref()
        .is_some_and(|s| !registry::valid_name(s))
    {
        return refuse("invalid", reason::BAD_SENDER_NAME);
    }
    if req
        .sender_workspace
        .as_deref()
        .is_some_and(|w| !w.starts_with('/') || w.len() > 4096)
    {
        return refuse("invalid", reason::BAD_SENDER_WORKSPACE);
    }
    if req
        .in_reply_to
        .as_deref()
        .is_some_and(|s| !registry::valid_id(s))
    {
        return refuse("invalid", reason::BAD_IN_REPLY_TO);
    }
    if !matches!(req.mode.as_str(), "queue" | "steer") {
        return refuse("invalid", reason::BAD_MODE);
    }
    let Some(hop) = req.hop else {
        return refuse("invalid", reason::BAD_HOP);
    };
    // A plain sender's working directory as the kernel reports it: it is
    // both recorded and what the policy judges.
    let cwd = match req.sender_instance_id {
        None => peer.cwd(),
        Some(_) => None,
    };
    let sender = match verify_sender(shared, req, peer_pid, cwd.clone()) {
        Ok(s) => s,
        Err(why) => return refuse("invalid", format!("{}: {why}", reason::NOT_VERIFIED)),
    };
    // Only verified identity is matched: a plain sender's name and claimed
    // workspace are self-reported, so it is judged by its working
    // directory.
    let (policy_name, policy_workspace) = if sender.instance_id.is_some() {
        (sender.name.clone(), sender.workspace.clone())
    } else {
        (None, cwd)
    };
    if let Some(why) = shared.policy.check(
        policy_name.as_deref().unwrap_or(""),
        policy_workspace.as_deref().unwrap_or(""),
    ) {
        // Past verification, a refusal names the sender as verified, as an
        // acceptance does.
        return Outcome {
            from: Some(crate::turn::display_name(&sender)),
            ..refuse("denied", why)
        };
    }
    if cfg.max_hops > 0 && hop > cfg.max_hops {
        return Outcome {
            from: Some(crate::turn::display_name(&sender)),
            ..refuse(
                "hop_limit",
                format!(
                    "hop {hop} is over the limit of {} (BATON_MAX_HOPS)",
                    cfg.max_hops
                ),
            )
        };
    }
    // The body's JSON text, escaped once (or as the line spelled it) for
    // both the task file and the event.
    let escaped;
    let body_json = match body_json {
        Some(b) => b,
        None => {
            escaped = serde_json::value::to_raw_value(&req.body).expect("a string serializes");
            &*escaped
        }
    };
    let task = spool::new_task(
        &req.message_id,
        std::mem::take(&mut req.body),
        sender,
        hop,
        req.in_reply_to.clone(),
        &req.mode,
        peer_pid,
        wire,
    );
    let limits = Limits {
        max_queue: cfg.max_queue,
        max_inflight: cfg.max_inflight,
    };
    let sender_id = task.sender.instance_id.clone().unwrap_or_default();
    let from = crate::turn::display_name(&task.sender);
    let announce = |task: &Task, queue_position| {
        emit_accepted(
            &shared.hub,
            "message.accepted",
            task,
            Some(body_json),
            &from,
            peer_pid,
            queue_position,
        );
    };
    let mut outcome = match shared.spool.admit(
        task,
        Some(body_json),
        limits,
        || shared.paused.load(Ordering::SeqCst),
        announce,
    ) {
        Ok(Admission::Accepted { queue_position }) => Outcome {
            status: "accepted",
            queue_position: Some(queue_position),
            reason: None,
            from: None,
        },
        Ok(Admission::Duplicate) => refuse("duplicate", reason::DUPLICATE),
        Ok(Admission::Reused) => refuse("invalid", reason::REUSED),
        Ok(Admission::Unreadable) => refuse("invalid", reason::UNREADABLE),
        Ok(Admission::Paused) => refuse("paused", reason::PAUSED),
        Ok(Admission::InflightFull { limit }) => refuse(
            "inflight_full",
            format!(
                "sender {sender_id} already has {limit} tasks in flight here (BATON_MAX_INFLIGHT)"
            ),
        ),
        Ok(Admission::Full { limit }) => refuse(
            "full",
            format!("the queue is full: {limit} tasks waiting or running (BATON_MAX_QUEUE)"),
        ),
        Err(e) => refuse("error", format!("the spool could not store the task: {e}")),
    };
    outcome.from = Some(from);
    outcome
}

/// Builds the recorded sender. A claimed instance id must have a manifest
/// in a scanned registry that passes the discovery checks and names the
/// connection's peer pid.
fn verify_sender(
    shared: &Shared,
    req: &SendRequest,
    peer_pid: Option<u32>,
    cwd: Option<String>,
) -> Result<Sender, String> {
    let Some(id) = &req.sender_instance_id else {
        // A name is only what a verified manifest says; a plain sender is
        // shown as such, with its kernel-reported pid and directory.
        return Ok(Sender {
            instance_id: None,
            name: None,
            workspace: cwd.or_else(|| req.sender_workspace.clone()),
            pid: peer_pid,
        });
    };
    let Some(pid) = peer_pid else {
        return Err("this platform does not report the peer pid".into());
    };
    for dir in &registry::scan_dirs(&shared.registry) {
        let path: PathBuf = registry::manifest_path(&dir.path, id);
        if !path.exists() && std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let m = registry::read_manifest(dir, &path)?;
        if m.pid != pid {
            return Err(format!(
                "instance {id} has pid {}, but the connection comes from pid {pid}",
                m.pid
            ));
        }
        return Ok(Sender {
            instance_id: Some(m.instance_id),
            name: Some(m.name),
            workspace: Some(m.workspace),
            pid: Some(pid),
        });
    }
    Err(format!("no manifest for instance {id} in the registry"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general path's reading of a line, when it is a `message/send`
    /// request with well-typed params.
    fn general(line: &str) -> Option<(Value, SendRequest)> {
        match wire::classify(line.as_bytes()) {
            Incoming::Request { id, method, params } if method == "message/send" => {
                let Value::Object(p) = params else {
                    return None;
                };
                SendRequest::from_params(&p).ok().map(|r| (id, r))
            }
            _ => None,
        }
    }

    #[test]
    fn the_fast_send_path_reads_what_the_general_path_reads() {
        let ok = [
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m1","target_instance_id":"t","body":"hi","sender":{},"hop":0}}"#,
            r#"{"params":{"sender":{"instance_id":"a","name":"n","workspace":"/w","x":1},"body":"a\"b\n\u00e9","target_instance_id":"t","message_id":"m2","mode":"steer","in_reply_to":"r","extra":[1]},"method":"message/send","id":"s","jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"message/send","params":{"message_id":"m3","target_instance_id":"t","body":"b","sender":{"name":null},"mode":null,"in_reply_to":null,"hop":null}}"#,
            r#" {"jsonrpc":"2.0","id":-1.5,"method":"message/send","params":{"message_id":"","target_instance_id":"","body":"","sender":{}}} "#,
        ];
        for line in ok {
            let (id, req, body) =
                fast_send(line.as_bytes()).unwrap_or_else(|| panic!("not fast: {line}"));
            // The body's JSON text as the line spelled it, which the task
            // file and the event copy.
            assert_eq!(
                serde_json::from_str::<String>(body.get()).unwrap(),
                req.body
            );
            assert!(
                line.contains(&format!(r#""body":{}"#, body.get())),
                "{line}"
            );
            assert_eq!(Some((id, req)), general(line), "{line}");
        }
        // Left to the general path, which answers each with its own
        // result or error.
        let slow = [
            r#"{"jsonrpc":"2.0","id":null,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","message_id":"n","target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{},"hop":-1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{},"hop":1.0}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":null,"target_instance_id":"t","body":"b","sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":7,"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":null,"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":["b"],"sender":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{"name":5}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":[]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"b","sender":{}}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"m","target_instance_id":"t","body":"\ud800","sender":{}}}"#,
        ];
        for line in slow {
            assert!(fast_send(line.as_bytes()).is_none(), "fast: {line}");
        }
    }
}
