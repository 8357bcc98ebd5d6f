//! The foreground of `baton serve` (docs/ARCHITECTURE.md): only the foreground
//! claims tasks, runs turns, asks for approvals, changes the instance's
//! state and writes the transcript. This room holds what `baton serve` was
//! asked to be, the foreground's state, and `serve`: startup, one `select!`
//! over listener events, turn reports, settled pauses, signals and timers,
//! and shutdown in order.
//!
//! The foreground's methods live by concern: `startup` (sockets, spool,
//! manifest, signals), `dispatch` (events, calls, state, timers),
//! `approval`, `turns` (exec turns, local turns, cancelling), `inbox` (the
//! pull inbox), `received` (replies a waiter already handed over) and
//! `outbound` (sends made on the agent's behalf).

mod approval;
mod backoff;
mod cancel;
mod codex;
mod dispatch;
mod inbox;
mod outbound;
mod outcome;
mod pane;
mod permission;
mod received;
mod startup;
mod turns;

use crate::base::config::Config;
use crate::base::error::Result;
use crate::registry;
use crate::relay::Origin;
use crate::server::{Event, RpcError, Shared};
use crate::spool::events::Hub;
use crate::spool::{self, Task};
use crate::text::glob::Policy;
use crate::wire::Stream;
use crate::workers::turn::TurnEvent;
use crossbeam_channel::{self as chan, select};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use crate::wire::Approve;
pub use cancel::cancel_stopped;
pub use codex::default_socket as codex_default_socket;
pub use startup::resolve_workspace;
pub(crate) use startup::signal_channel;

/// What `baton serve` was asked to be.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub name: Option<String>,
    pub workspace: Option<PathBuf>,
    pub profile: String,
    pub model: String,
    pub paused: bool,
    pub ephemeral_spool: bool,
    pub policy: Policy,
    /// `--exec CMD`: run each task through `sh -c CMD`.
    pub exec: Option<String>,
    /// `--reply`: send the handler's stdout back to the sender.
    pub reply: bool,
    /// `--stdin`: what the handler reads, the envelope or the body alone.
    pub stdin: crate::workers::turn::Stdin,
    pub turn_timeout: Option<Duration>,
    pub approve: Approve,
    /// `--ephemeral`: exit about a second after the last client left.
    pub ephemeral: bool,
    /// `--zcoder`: also publish in zcoder's registry, with a second socket.
    pub zcoder: bool,
    /// For an instance run inside another front end (`baton mcp`).
    pub embedded: Option<Embedded>,
    /// `--ttl`: queued tasks older than this are set aside as expired.
    pub ttl: Option<Duration>,
    /// `--no-offline`: senders may not store tasks while this name is not
    /// running (kept in the spool's meta.json).
    pub no_offline: bool,
    /// The agent replies through MCP's `complete_task` (`baton mcp`), not
    /// a command: the envelope says so.
    pub reply_by_tool: bool,
    /// `--tmux-pane PANE`: type each task into this tmux pane (`pane`).
    pub tmux_pane: Option<String>,
    /// `--codex`: hand each task to the Codex session of the workspace
    /// through the app-server at this socket (`codex`).
    pub codex: Option<PathBuf>,
    /// The agent's process, where the front end knows it (`baton mcp`:
    /// its host). Its processes may use the agent's doors, not the
    /// operator's (`access`).
    pub agent: Option<u32>,
    /// `--operator`: the uids of the accounts whose processes are its
    /// operators (`access`).
    pub operators: Vec<u32>,
}

/// How a front end that runs an instance on a thread of its own learns it
/// is ready and tells it to stop.
#[derive(Clone, Debug)]
pub struct Embedded {
    /// Receives the instance id and socket once peers can find it.
    pub ready: chan::Sender<(String, PathBuf)>,
    /// A message (or a closed channel) stops the instance.
    pub stop: chan::Receiver<()>,
}

/// How the operator's own input is named as a sender: not a valid instance
/// name, so no peer can claim it.
pub const LOCAL: &str = "(local)";

fn is_local(s: &spool::Sender) -> bool {
    s.instance_id.is_none() && s.name.as_deref() == Some(LOCAL)
}

/// SIGTERM to SIGKILL, for a handler that is being ended.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// After the handler exited, how long its output may take to drain (a
/// background child may hold the pipes open).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// `--ephemeral`: the grace period after the last client left.
pub const EPHEMERAL_GRACE: Duration = Duration::from_secs(1);

/// A call's params, and what the foreground answers it.
type Params = Map<String, Value>;
type Answer = std::result::Result<Value, RpcError>;
/// The answer channel of a call the foreground answers.
type Reply = chan::Sender<Answer>;

/// A typed answer as the reply channel carries it.
fn answer(a: impl serde::Serialize) -> Answer {
    Ok(serde_json::to_value(a).expect("an answer serializes"))
}

/// A task an agent claimed (pull mode) and has not completed.
struct OpenTask {
    task: Task,
    token: String,
}

/// The handler process of the running turn (exec mode).
struct Running {
    task: Task,
    token: String,
    /// Dropped when the turn ends, which closes our ends of its pipes.
    handler: crate::workers::turn::Handler,
    started: Instant,
    deadline: Option<Instant>,
    kill_at: Option<Instant>,
    drain_until: Option<Instant>,
    ended_by: Option<crate::wire::Outcome>,
    exit: Option<(Option<i32>, Option<i32>)>,
    streams_open: u8,
    bytes: HashMap<Stream, (u64, u64)>,
    captured: Option<Vec<u8>>,
    /// The last of its stderr (`TurnEvent::StreamDone`'s `last`), for
    /// the record of a failed or timed-out turn.
    stderr_last: String,
}

struct Foreground {
    shared: Arc<Shared>,
    opts: ServeOptions,
    /// zcoder's registry directory and our socket there, with `--zcoder`.
    zcoder: Option<(PathBuf, PathBuf)>,
    workspace: PathBuf,
    hub: Arc<Hub>,
    /// For sender threads, which report as `Event::Relayed`.
    events_tx: chan::Sender<Event>,
    /// For the threads of a handler, which report as `TurnEvent`s.
    turns_tx: chan::Sender<TurnEvent>,
    /// For the threads that wait for a pause to settle.
    pauses_tx: chan::Sender<dispatch::Settled>,
    origin: Origin,
    open: Vec<OpenTask>,
    running: Option<Running>,
    /// Tasks approved and not yet started.
    approved: HashSet<String>,
    /// Tasks waiting for an approval, by message id.
    asked: HashMap<String, approval::Pending>,
    /// Tool calls an MCP host asks its user to allow (`permission/ask`),
    /// oldest first.
    permissions: Vec<approval::Pending>,
    /// The approval each `approval/request` sent and not answered asks
    /// about, by the request's id.
    requests: HashMap<String, String>,
    next_request: u64,
    /// The number in the next approval's id.
    next_approval: u64,
    next_out: u64,
    clients: usize,
    seen_client: bool,
    idle_since: Option<Instant>,
    /// A resource that ran short while handing out a task, until one is
    /// handed out again.
    short: Option<backoff::Shortage>,
    /// `--tmux-pane`: the pane tasks are typed into.
    pane: Option<pane::Pane>,
    /// `--codex`: the app-server tasks are handed to.
    codex: Option<codex::Codex>,
    /// Replies their sender got through a wait before they arrived here
    /// (`inbox/received`): each is recorded as received on arrival.
    expected: received::Expected,
}

/// What the foreground waits on, besides its timers.
struct Inputs {
    events: chan::Receiver<Event>,
    turns: chan::Receiver<TurnEvent>,
    pauses: chan::Receiver<dispatch::Settled>,
    panes: chan::Receiver<crate::workers::tmux::Report>,
    codex: chan::Receiver<crate::workers::codex::driver::Report>,
    signals: chan::Receiver<i32>,
    stop: chan::Receiver<()>,
}

/// Runs an instance until SIGTERM, SIGINT or SIGHUP.
pub fn serve(opts: ServeOptions, config: Config) -> Result<()> {
    let (mut fg, inputs, listeners) = startup::start(opts, config)?;
    fg.run(&inputs);
    fg.shut_down(&inputs, &listeners);
    Ok(())
}

impl Foreground {
    /// The loop, until a signal, the front end or `--ephemeral` stops the
    /// instance.
    fn run(&mut self, inputs: &Inputs) {
        // This thread starts the turns, and waits while the kernel starts
        // each handler: on a busy machine a handler that just started
        // would otherwise keep the CPU for a whole slice before this
        // thread learns that it runs (docs/performance.md, row 7b). A
        // hint, and nothing is wrong without it.
        let _ = crate::sys::prefer_short_slices();
        loop {
            // Every acceptance is announced before its task can be claimed,
            // so draining first keeps the transcript in order: accepted,
            // then started.
            while let Ok(ev) = inputs.events.try_recv() {
                self.handle(ev);
            }
            // Set before the queue is looked at, so that an acceptance
            // either is seen by `pump` or sees the flag and wakes us (both
            // sides use the spool's lock and sequentially consistent flag
            // accesses).
            self.publish_wait();
            self.pump();
            self.pane_pump();
            self.codex_pump();
            self.publish_wait();
            self.publish_approvals();
            let timer = match self.next_timer() {
                Some(at) => chan::at(at),
                None => chan::never(),
            };
            select! {
                recv(inputs.events) -> ev => match ev {
                    Ok(ev) => self.handle(ev),
                    Err(_) => return,
                },
                recv(inputs.turns) -> ev => {
                    if let Ok(ev) = ev {
                        // What the handler caused before it exited (its
                        // sends' results) is recorded before its end.
                        if matches!(ev, TurnEvent::Exited { .. }) {
                            let n = inputs.events.len();
                            for queued in inputs.events.try_iter().take(n) {
                                self.handle(queued);
                            }
                        }
                        self.turn_event(ev);
                    }
                },
                recv(inputs.panes) -> report => {
                    if let Ok(report) = report {
                        self.pane_report(report);
                    }
                },
                recv(inputs.codex) -> report => {
                    if let Ok(report) = report {
                        self.codex_report(report);
                    }
                },
                recv(inputs.pauses) -> settled => {
                    if let Ok(settled) = settled {
                        self.answer_pause(settled);
                    }
                },
                recv(inputs.signals) -> sig => {
                    self.notice(None, format!("stopping on signal {}", sig.unwrap_or(0)));
                    return;
                },
                recv(inputs.stop) -> _ => {
                    self.notice(None, "stopping: the front end closed");
                    return;
                },
                recv(timer) -> _ => {
                    if self.on_timer() {
                        self.notice(None, "no client for a second: ephemeral instance stopping");
                        return;
                    }
                },
            }
        }
    }

    /// Shutdown: the manifest goes first, so no one finds an instance that
    /// no longer answers (docs/protocol.md §7, Manifest).
    fn shut_down(&mut self, inputs: &Inputs, listeners: &startup::Listeners) {
        let id = self.shared.instance_id.clone();
        registry::unpublish(&self.origin.registry, &id);
        registry::unpublish_name(&self.origin.registry, &id, &self.origin.name);
        if let Some((zdir, _)) = &self.zcoder {
            registry::unpublish(zdir, &id);
        }
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.interrupt_turn(&inputs.turns);
        listeners.close();
        self.shared.spool.remove_if_ephemeral();
        // An instance a front end started for itself (`baton mcp`, bare
        // `baton`) is no address of its own choosing: a spool it never
        // used goes with it (docs/decisions.md). `serve`'s name stays an
        // address after its first start (docs/systemd.md).
        let removed = self.opts.embedded.is_some()
            && !self.opts.ephemeral_spool
            && self.shared.spool.remove_if_unused();
        // The last line on the terminal says it stopped, never the
        // `serving` line of its start (a view's screen gives that back).
        eprintln!("baton: {}", self.stopped_line(removed));
    }

    /// `NAME (ID) stopped`, with what its spool keeps for the next start,
    /// or that it went (`removed`: it never held a task).
    fn stopped_line(&self, removed: bool) -> String {
        let name = crate::text::sanitize::escape(&self.origin.name);
        let id = &self.shared.instance_id;
        if self.opts.ephemeral {
            return format!("{name} ({id}) stopped; its spool is removed (--ephemeral)");
        }
        if removed {
            return format!(
                "{name} ({id}) stopped; its spool, which never held a task, is removed"
            );
        }
        let c = self.shared.spool.counts();
        let waiting = c.queued + c.processing + c.interrupted;
        match waiting {
            0 => format!("{name} ({id}) stopped"),
            n => format!(
                "{name} ({id}) stopped; {n} task{} wait{} in its spool for its next start",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" }
            ),
        }
    }
}
