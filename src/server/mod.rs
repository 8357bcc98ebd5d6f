//! Connection threads never touch agent state: the listener (docs/protocol.md §1)
//! is one blocking accept thread and one thread per connection, with read
//! and write deadlines, and anything that needs the agent's state
//! (control, inbox, relay) is asked of the foreground over its channel.
//!
//! The rooms: this file holds what the threads share (`Shared`, the
//! `Event`s they send the foreground) and the accept loop; `slots` holds
//! the connections to the cap; `conn` reads requests and answers them;
//! `request` reads a `message/send` request; `deliver` runs its ordered
//! checks and stores accepted tasks in the spool, recording the
//! acceptance or refusal in the event `Hub`; `zcoder` answers zcoder's
//! frame. Connection threads wake the foreground only when it waits for
//! tasks.

mod conn;
mod deliver;
mod out;
mod peer;
mod request;
mod slots;
mod zcoder;

pub use deliver::{
    NotStored, Receiver, Verdict, admission_verdict, check_request, deliver, reason,
};
pub use peer::Peer;
pub use request::SendRequest;

use crate::base::config::Config;
use crate::registry::Manifest;
use crate::spool::Spool;
use crate::spool::events::{Hub, Subscription};
use crate::sys;
use crate::text::glob::Policy;
use crate::wire;
use crossbeam_channel as chan;
use serde_json::{Map, Value};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a new connection has to complete `initialize`.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest a connection thread waits for the foreground's answer to a
/// call (`BATON_IO_TIMEOUT` when that is longer): the foreground's one wait
/// of its own, a pause settling (`SETTLE_WAIT` in src/instance/dispatch.rs), stays below it,
/// and a client that waits as long as this hears the answer.
pub const ANSWER_WAIT_MIN: Duration = Duration::from_secs(5);

pub use crate::wire::State;

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
        method: crate::wire::Call,
        params: Map<String, Value>,
        reply: chan::Sender<Result<Value, RpcError>>,
        /// Who calls: its peer pid (who answered an approval) and its
        /// role (what a turn's process may send).
        caller: crate::wire::access::Caller,
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
        pid: Option<u32>,
    },
    /// A connection was accepted, or ended (for `--ephemeral`).
    Connected,
    Disconnected,
    /// The answer of an `inbox/claim` that handed out a task could not
    /// be written to its caller (its connection closed): the task goes
    /// back to the head of the queue if it is still open under `turn`.
    Undelivered {
        message_id: String,
        turn: String,
    },
    /// A send made on the agent's behalf finished (for the transcript).
    Relayed {
        result: crate::wire::answer::SendResult,
        reply_of: Option<String>,
    },
}

/// The task an `inbox/claim` answer hands out, and its turn token:
/// what must go back to the queue when the answer never reaches its caller.
pub fn handed_out(answer: &Value) -> Option<(String, String)> {
    let field = |k: &str| Some(answer.pointer(k)?.as_str()?.to_string());
    Some((field("/task/message_id")?, field("/task/turn")?))
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

    /// The error's line, answering request `id`.
    pub fn line<I: serde::Serialize + ?Sized>(self, id: &I) -> Vec<u8> {
        wire::error_line(id, self.code, &self.message, self.data)
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
    /// The approvals waiting, a task's or a tool call's, as the
    /// foreground last counted them (`ping` says it without asking it).
    pub approvals: AtomicUsize,
    pub manifest: Mutex<Manifest>,
    /// Our registry directory; the directories scanned for senders are
    /// derived from it each time, so a zcoder registry created later counts.
    pub registry: PathBuf,
    /// Its instances, for the access table (`access::Instances`).
    instances: crate::wire::access::Instances,
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
    /// The running handler's leader (0: none), set by the foreground: a
    /// caller in its process group is a process of the turn (`access`).
    pub handler: AtomicU32,
    /// The agent's process, where the instance knows it (`baton mcp`'s
    /// host): its processes may not approve (`access`).
    /// 0: none (yet). A tmux pane's process is learnt when it answers.
    pub agent: AtomicU32,
    /// `serve --operator`: the accounts whose processes are its operators
    /// (the manifest's `operators`); empty: roles among one user's.
    pub operators: Vec<u32>,
    /// Whether it is the subreaper of its handlers' orphans.
    pub reaper: AtomicBool,
    /// The tokens of the exec turns this instance started, the newest
    /// last (at most `access::KEPT_TOKENS`): a process that started with
    /// one and our socket is a turn's, even after its turn ended.
    pub turn_tokens: Mutex<std::collections::VecDeque<String>>,
    /// Our socket, as handlers get it in `BATON_SOCKET`.
    pub socket: String,
    slots: slots::Slots,
    events: chan::Sender<Event>,
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Config,
        spool: Arc<Spool>,
        manifest: Manifest,
        registry: PathBuf,
        policy: Policy,
        paused: bool,
        hub: Arc<Hub>,
        events: chan::Sender<Event>,
        agent: Option<u32>,
    ) -> Shared {
        Shared {
            slots: slots::Slots::new(config.max_connections),
            operators: manifest.operators.clone(),
            reaper: AtomicBool::new(false),
            config,
            instance_id: manifest.instance_id.clone(),
            socket: manifest.socket.clone(),
            spool,
            state: AtomicU8::new(if paused { State::Paused } else { State::Ready } as u8),
            paused: AtomicBool::new(paused),
            approvals: AtomicUsize::new(0),
            manifest: Mutex::new(manifest),
            instances: crate::wire::access::Instances::new(registry.clone()),
            registry,
            policy,
            stopping: AtomicBool::new(false),
            hub,
            wake_on_accept: AtomicBool::new(true),
            handler: AtomicU32::new(0),
            turn_tokens: Mutex::new(std::collections::VecDeque::new()),
            agent: AtomicU32::new(agent.unwrap_or(0)),
            events,
        }
    }

    /// What the access table needs to know of this instance.
    pub fn ours(&self) -> crate::wire::access::Ours<'_> {
        crate::wire::access::Ours {
            pid: std::process::id(),
            socket: &self.socket,
            handler: Some(self.handler.load(Ordering::SeqCst)).filter(|h| *h != 0),
            agent: Some(self.agent.load(Ordering::SeqCst)).filter(|a| *a != 0),
            tokens: Some(&self.turn_tokens),
            uid: sys::euid(),
            operators: &self.operators,
            reaper: self.reaper.load(Ordering::SeqCst),
            registry: Some(&self.instances),
        }
    }

    pub fn state(&self) -> State {
        // The byte is the fieldless enum's own, declared in `State::ALL`'s
        // order.
        let n = self.state.load(Ordering::SeqCst);
        State::ALL
            .get(usize::from(n))
            .copied()
            .unwrap_or(State::Ready)
    }

    pub fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::SeqCst);
        self.lock_manifest().state = s.as_str().to_string();
    }

    /// The manifest as published, held while the guard lives.
    pub(crate) fn lock_manifest(&self) -> std::sync::MutexGuard<'_, Manifest> {
        crate::base::lock(&self.manifest)
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
        let Ok(stream) = conn else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let cred = match sys::peer_cred(&stream) {
            Ok(c) if c.uid == me || shared.operators.contains(&c.uid) => c,
            Ok(c) => {
                if last_refusal.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_refusal = Some(std::time::Instant::now());
                    eprintln!(
                        "baton: refused a connection from uid {} (not uid {me}{}) before reading from it",
                        c.uid,
                        operators_said(&shared.operators)
                    );
                }
                continue;
            }
            Err(_) => continue,
        };
        let Some(slot) = shared.slots.admit(&|why| cap_line(&shared, why)) else {
            // Never waits: a client that does not read loses the line.
            let refused = cap_line(&shared, slots::GaveWay::Uninitialized);
            let _ = sys::send_nowait(&stream, &refused);
            continue;
        };
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("baton-conn".into())
            .spawn(move || {
                // Released even if the thread panics: a panic closes this
                // connection only.
                let _guard = ConnectionGuard(Arc::clone(&s), slot);
                let _ = s.events.send(Event::Connected);
                conn::serve_connection(stream, cred, &s, slot);
            });
        if spawned.is_err() {
            shared.slots.release(slot);
        }
    }
}

/// `, nor an --operator's: uid 1001, 0`, or nothing without `--operator`.
fn operators_said(operators: &[u32]) -> String {
    if operators.is_empty() {
        return String::new();
    }
    let uids: Vec<String> = operators.iter().map(u32::to_string).collect();
    format!(", nor an --operator's: uid {}", uids.join(", "))
}

/// Ends a connection's accounting when its thread ends, however it ends.
struct ConnectionGuard(Arc<Shared>, u64);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        // An acceptance recorded but not yet written, if the thread ended
        // between the two.
        self.0.hub.flush();
        self.0.slots.release(self.1);
        let _ = self.0.events.send(Event::Disconnected);
    }
}

/// The line a connection refused for the cap gets, or one that gives way
/// to a new one: one that had not initialized is told what a refused one
/// is; one that had, that it may come back. It names the instance, so a
/// client that pinged it knows it is alive.
fn cap_line(shared: &Shared, why: slots::GaveWay) -> Vec<u8> {
    let cap = shared.slots.cap();
    let message = match why {
        slots::GaveWay::Uninitialized => format!("too many connections: the limit is {cap}"),
        slots::GaveWay::Idle => format!(
            "closed to make room: too many connections (the limit is {cap}); reconnect when needed"
        ),
    };
    let data = wire::answer::ErrorData::instance(&shared.instance_id, shared.state());
    wire::error_line(
        &Value::Null,
        wire::TOO_MANY_CONNECTIONS,
        &message,
        Some(data),
    )
}

/// The error line for a line that could not be read, while an answer is
/// still possible (none for a peer that left): a connection's, and a
/// stopped agent's stand-in's (`relay::stand_in`).
pub fn read_error_line(cfg: &crate::base::config::Config, e: &wire::ReadError) -> Option<Vec<u8>> {
    use wire::ReadError;
    let (code, message) = match e {
        ReadError::TooLarge => (
            wire::INVALID_REQUEST,
            format!(
                "frame too large: a line may hold at most {} bytes",
                cfg.max_bytes
            ),
        ),
        ReadError::Idle => (
            wire::CONNECTION_ERROR,
            format!(
                "idle timeout: no request for {} s",
                cfg.idle_timeout.as_secs_f64()
            ),
        ),
        ReadError::LineTimeout => (
            wire::CONNECTION_ERROR,
            format!(
                "read timeout: a line must complete within {} s of its first byte",
                cfg.io_timeout.as_secs_f64()
            ),
        ),
        ReadError::Eof | ReadError::Truncated | ReadError::Io(_) => return None,
    };
    Some(wire::error_line(&Value::Null, code, &message, None))
}

pub fn invalid_params(what: impl std::fmt::Display) -> RpcError {
    RpcError::new(wire::INVALID_PARAMS, format!("invalid params: {what}"))
}
