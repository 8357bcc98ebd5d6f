//! The foreground of `baton serve` (DESIGN §2, §6, §9): startup in order,
//! one `select!` over listener events, signals and timers, and shutdown in
//! order. It alone claims tasks, runs turns, asks for approvals, changes
//! the instance's state and writes the transcript.

use crate::config::{Config, Relay};
use crate::error::{Error, Result};
use crate::events::Hub;
use crate::glob::Policy;
use crate::registry::{self, Manifest};
use crate::relay::{self, Origin, Outbound};
use crate::sanitize::escape;
use crate::server::{self, Event, RpcError, Shared, State};
use crate::spool::{self, Claim, Spool, Task};
use crate::sys;
use crate::turn::{self, TurnEvent};
use crossbeam_channel::{self as chan, select};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How a task is approved before it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Approve {
    #[default]
    Auto,
    Ask,
    Deny,
}

impl Approve {
    pub fn as_str(self) -> &'static str {
        match self {
            Approve::Auto => "auto",
            Approve::Ask => "ask",
            Approve::Deny => "deny",
        }
    }
}

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
/// How long `control/pause` waits for acceptances already past their
/// checks to be stored (each takes one file sync and one directory sync).
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// What the approval policy says of a queued task.
enum Gate {
    Go,
    Wait,
    Denied,
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
    pid: u32,
    started: Instant,
    deadline: Option<Instant>,
    kill_at: Option<Instant>,
    drain_until: Option<Instant>,
    ended_by: Option<&'static str>,
    exit: Option<(Option<i32>, Option<i32>)>,
    streams_open: u8,
    bytes: HashMap<&'static str, (u64, u64)>,
    captured: Option<Vec<u8>>,
}

struct Foreground {
    shared: Arc<Shared>,
    opts: ServeOptions,
    dir: PathBuf,
    socket: PathBuf,
    /// zcoder's registry directory and our socket there, with `--zcoder`.
    zcoder: Option<(PathBuf, PathBuf)>,
    workspace: PathBuf,
    hub: Arc<Hub>,
    events_tx: chan::Sender<Event>,
    origin: Origin,
    open: Vec<OpenTask>,
    running: Option<Running>,
    /// Tasks approved and not yet started.
    approved: HashSet<String>,
    /// Tasks waiting for an approval, and the ids of the requests sent.
    asked: HashMap<String, Vec<String>>,
    requests: HashMap<String, String>,
    next_request: u64,
    next_out: u64,
    clients: usize,
    seen_client: bool,
    idle_since: Option<Instant>,
}

/// Runs an instance until SIGTERM, SIGINT or SIGHUP.
pub fn serve(opts: ServeOptions, config: Config) -> Result<()> {
    sys::set_umask(0o077);
    if config.relay == Relay::Off {
        return Err(Error::Env(
            "BATON_RELAY=off: the relay is disabled, so serve does not start".into(),
        ));
    }
    let dir = registry::ensure_dir(&config)?;
    let workspace = match &opts.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| Error::io("read", Path::new("."), e))?,
    };
    let workspace =
        fs::canonicalize(&workspace).map_err(|e| Error::io("resolve workspace", &workspace, e))?;
    if !workspace.is_dir() {
        return Err(Error::Env(format!(
            "workspace {} is not a directory",
            workspace.display()
        )));
    }
    let name = match &opts.name {
        Some(n) if registry::valid_name(n) => n.clone(),
        Some(n) => {
            return Err(Error::Usage(format!(
                "--name {}: a name must match [A-Za-z0-9_.-]{{1,64}}",
                crate::sanitize::escape(n)
            )));
        }
        None => registry::default_name(&workspace),
    };
    let id = registry::new_instance_id()?;
    // Under socket activation the listener already exists (fd 3): its
    // path, a wake socket in the registry, is the instance's socket.
    let activated = match &opts.embedded {
        None => sys::activated_listener(),
        Some(_) => None,
    };
    let socket = match &activated {
        Some(l) => {
            let path = l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(Path::to_path_buf))
                .ok_or_else(|| Error::Env("the socket passed on fd 3 has no path".into()))?;
            let expected = crate::relay::wake_socket(&dir, &name);
            if path != expected {
                return Err(Error::Env(format!(
                    "the activated socket is {}, but an instance named {name} must listen on {} to be found",
                    path.display(),
                    expected.display()
                )));
            }
            path
        }
        None => registry::socket_path(&dir, &id),
    };
    check_socket_path(&socket, "BATON_DIR")?;
    // `--zcoder`: a second socket in zcoder's registry, so that zcoder
    // instances find this one and can deliver to it.
    let zcoder = match opts.zcoder {
        true => {
            let zdir = registry::ensure_private_dir(&registry::zcoder_dir(), "zcoder registry")?;
            // The same directory would need two sockets of one name, and
            // would leave the first bound when the second failed.
            if zdir == dir {
                return Err(Error::Env(format!(
                    "--zcoder: zcoder's registry {} is baton's own registry: point ZCODER_RELAY_DIR or BATON_DIR elsewhere",
                    zdir.display()
                )));
            }
            let zsock = registry::socket_path(&zdir, &id);
            check_socket_path(&zsock, "ZCODER_RELAY_DIR")?;
            Some((zdir, zsock))
        }
        false => None,
    };

    sweep_ephemeral_spools();
    let spool_dir = if opts.ephemeral_spool {
        runtime_base().join(format!("baton-spool-{}-{id}", sys::uid()))
    } else {
        spool::spool_dir(&spool::state_home()?, &name, &workspace)
    };
    let spool = Arc::new(Spool::open(&spool_dir, config.fsync, opts.ephemeral_spool)?);
    for note in &spool.recovery_notes {
        eprintln!("baton: {note}");
    }
    write_meta(
        &spool_dir,
        &name,
        &workspace,
        !opts.no_offline,
        &opts.policy,
    )?;

    // Stale entries of dead instances go before we add our own.
    registry::collect_stale(&dir);

    let was_activated = activated.is_some();
    let listener = match activated {
        Some(l) => l,
        None => UnixListener::bind(&socket).map_err(|e| Error::io("listen on", &socket, e))?,
    };
    let sock_meta = fs::symlink_metadata(&socket).map_err(|e| Error::io("inspect", &socket, e))?;
    let zlistener = match &zcoder {
        Some((_, zsock)) => {
            let l = UnixListener::bind(zsock).map_err(|e| Error::io("listen on", zsock, e))?;
            let meta = fs::symlink_metadata(zsock).map_err(|e| Error::io("inspect", zsock, e))?;
            Some((l, meta))
        }
        None => None,
    };
    let paused = opts.paused || config.relay == Relay::Paused;
    let manifest = Manifest {
        protocol: registry::PROTOCOL,
        instance_id: id.clone(),
        pid: std::process::id(),
        project: name.clone(),
        name: name.clone(),
        workspace: workspace.display().to_string(),
        session_id: String::new(),
        profile: opts.profile.clone(),
        model: opts.model.clone(),
        socket: socket.display().to_string(),
        state: if paused { "paused" } else { "ready" }.into(),
        started_at: spool::now_secs(),
        wire: "jsonrpc".into(),
        baton_version: env!("CARGO_PKG_VERSION").into(),
    };
    let (events_tx, events_rx) = chan::unbounded();
    let worker_tx = events_tx.clone();
    // Opened, and the start recorded, before the listener runs: connection
    // threads emit into it from their first acceptance.
    let hub = Arc::new(Hub::open(spool.dir()));
    started(&hub, &manifest, &opts, &spool);
    let shared = Arc::new(Shared::new(
        config.clone(),
        id.clone(),
        Arc::clone(&spool),
        manifest.clone(),
        dir.clone(),
        opts.policy.clone(),
        paused,
        Arc::clone(&hub),
        events_tx,
    ));
    let accept_done = start_accept(listener, &shared)?;
    let zaccept = match zlistener {
        Some((l, meta)) => Some((start_accept(l, &shared)?, meta)),
        None => None,
    };
    let signals = signal_channel()?;
    // The listener is accepting: only now may peers find us.
    registry::publish(&dir, &manifest)?;
    if let Some((zdir, zsock)) = &zcoder {
        registry::publish_value(zdir, &id, &registry::zcoder_manifest(&manifest, zsock))?;
    }
    let stop = match &opts.embedded {
        Some(e) => {
            let _ = e.ready.send((id.clone(), socket.clone()));
            e.stop.clone()
        }
        None => chan::never(),
    };
    eprintln!(
        "baton: {name} ({id}) serving {} on {}",
        workspace.display(),
        socket.display()
    );

    let mut fg = Foreground {
        shared: Arc::clone(&shared),
        origin: Origin {
            config: config.clone(),
            registry: dir.clone(),
            instance_id: id.clone(),
            name: name.clone(),
            workspace: workspace.display().to_string(),
        },
        opts,
        dir: dir.clone(),
        socket: socket.clone(),
        zcoder: zcoder.clone(),
        workspace: workspace.clone(),
        hub,
        events_tx: worker_tx,
        open: Vec::new(),
        running: None,
        approved: HashSet::new(),
        asked: HashMap::new(),
        requests: HashMap::new(),
        next_request: 1,
        next_out: 1,
        clients: 0,
        seen_client: false,
        idle_since: None,
    };
    // A label, because `break` inside `select!` would only leave the macro.
    'run: loop {
        // Every acceptance is announced before its task can be claimed, so
        // draining first keeps the transcript in order: accepted, then
        // started.
        while let Ok(ev) = events_rx.try_recv() {
            fg.handle(ev);
        }
        // Set before the queue is looked at, so that an acceptance either
        // is seen by `pump` or sees the flag and wakes us (both sides use
        // the spool's lock and sequentially consistent flag accesses).
        fg.publish_wait();
        fg.pump();
        fg.publish_wait();
        let timer = match fg.next_timer() {
            Some(at) => chan::at(at),
            None => chan::never(),
        };
        select! {
            recv(events_rx) -> ev => match ev {
                Ok(ev) => fg.handle(ev),
                Err(_) => break 'run,
            },
            recv(signals) -> sig => {
                fg.hub.emit("notice", json!({"text": format!("stopping on signal {}", sig.unwrap_or(0))}));
                break 'run;
            },
            recv(stop) -> _ => {
                fg.hub.emit("notice", json!({"text": "stopping: the front end closed"}));
                break 'run;
            },
            recv(timer) -> _ => {
                if fg.on_timer() {
                    fg.hub.emit("notice", json!({"text": "no client for a second: ephemeral instance stopping"}));
                    break 'run;
                }
            },
        }
    }

    // Shutdown, in the order of DESIGN §9.
    registry::unpublish(&dir, &id);
    if let Some((zdir, _)) = &zcoder {
        registry::unpublish(zdir, &id);
    }
    shared.stopping.store(true, Ordering::SeqCst);
    fg.interrupt_turn(&events_rx);
    if was_activated {
        // The socket belongs to the service manager, which keeps listening
        // on it to start the agent again.
        shared.stopping.store(true, Ordering::SeqCst);
    } else {
        close_listener(&socket, &sock_meta, &accept_done);
    }
    if let (Some((_, zsock)), Some((zdone, zmeta))) = (&zcoder, &zaccept) {
        close_listener(zsock, zmeta, zdone);
    }
    spool.remove_if_ephemeral();
    Ok(())
}

/// The first events of a run: the start, and what recovery found.
fn started(hub: &Hub, m: &Manifest, opts: &ServeOptions, spool: &Spool) {
    hub.emit(
        "instance.started",
        json!({
            "instance_id": m.instance_id,
            "name": m.name,
            "pid": m.pid,
            "workspace": m.workspace,
            "mode": if opts.exec.is_some() { "exec" } else { "pull" },
            "approve": opts.approve.as_str(),
            "state": m.state,
        }),
    );
    for note in &spool.recovery_notes {
        hub.emit("notice", json!({"text": note}));
    }
    let c = spool.counts();
    if c.interrupted > 0 {
        hub.emit(
            "notice",
            json!({"text": format!(
                "{} interrupted task(s) wait for the operator: baton inbox requeue|discard",
                c.interrupted
            )}),
        );
    }
}

/// Says clearly when a socket path cannot be bound, before `bind` fails
/// with a bare error.
fn check_socket_path(socket: &Path, variable: &str) -> Result<()> {
    let limit = sys::max_socket_path();
    let len = socket.as_os_str().len();
    if len > limit {
        return Err(Error::Env(format!(
            "socket path {} is {len} bytes, over the {limit}-byte limit of sun_path: choose a shorter {variable}",
            socket.display()
        )));
    }
    Ok(())
}

/// Runs an accept loop on its own thread; the receiver hears when it ends.
fn start_accept(listener: UnixListener, shared: &Arc<Shared>) -> Result<chan::Receiver<()>> {
    let (tx, rx) = chan::bounded::<()>(1);
    let s = Arc::clone(shared);
    std::thread::Builder::new()
        .name("baton-accept".into())
        .spawn(move || {
            server::accept_loop(listener, s);
            let _ = tx.send(());
        })
        .map_err(|e| Error::Env(format!("cannot start the listener thread: {e}")))?;
    Ok(rx)
}

/// Stops an accept loop and unlinks its socket, only if the path still is
/// the socket we bound. Connecting would otherwise reach nothing or a
/// stranger, and the thread is left to end with the process.
fn close_listener(socket: &Path, bound: &fs::Metadata, done: &chan::Receiver<()>) {
    let ours = fs::symlink_metadata(socket)
        .is_ok_and(|now| now.dev() == bound.dev() && now.ino() == bound.ino());
    if !ours {
        return;
    }
    // The wake-up connect runs on its own thread and the wait is bounded:
    // a full backlog cannot hang shutdown.
    let wake = socket.to_path_buf();
    let _ = std::thread::Builder::new()
        .name("baton-wake".into())
        .spawn(move || UnixStream::connect(wake).map(drop));
    let _ = done.recv_timeout(Duration::from_secs(1));
    let _ = fs::remove_file(socket);
}

fn runtime_base() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .or_else(|| std::env::var_os("TMPDIR"))
        .filter(|v| !v.is_empty() && Path::new(v).is_absolute())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// Removes the ephemeral spools of instances that died without cleaning
/// up (`kill -9`): ours by owner and name, their pid gone.
fn sweep_ephemeral_spools() {
    let base = runtime_base();
    let prefix = format!("baton-spool-{}-", sys::uid());
    let Ok(rd) = fs::read_dir(&base) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let Some(id) = name.strip_prefix(&prefix) else {
            continue;
        };
        let pid = id.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let path = base.join(&name);
        let ours = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == sys::euid());
        if ours
            && registry::valid_id(id)
            && pid.is_some_and(|p| sys::pid_status(p) == sys::PidStatus::Gone)
        {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// `meta.json` lets senders and `list --offline` find a named spool. It is
/// rewritten at every start, so `--no-offline` takes effect and lasts.
fn write_meta(
    dir: &Path,
    name: &str,
    workspace: &Path,
    offline: bool,
    policy: &Policy,
) -> Result<()> {
    let path = dir.join("meta.json");
    let created_at = fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("created_at").and_then(Value::as_u64))
        .unwrap_or_else(spool::now_secs);
    let meta = json!({
        "name": name,
        "workspace": workspace.display().to_string(),
        "created_at": created_at,
        "offline": offline,
        // Offline senders apply the agent's own sender rules.
        "accept_from": policy.accept_from,
        "deny_from": policy.deny_from,
    });
    let tmp = dir.join("tmp").join("meta.json");
    let _ = fs::remove_file(&tmp);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&serde_json::to_vec(&meta).expect("serializes")))
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| Error::io("write", &path, e))
}

/// SIGTERM, SIGINT and SIGHUP as a channel the foreground can select on.
fn signal_channel() -> Result<chan::Receiver<i32>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| Error::Env(format!("cannot install signal handlers: {e}")))?;
    let (tx, rx) = chan::bounded(4);
    std::thread::Builder::new()
        .name("baton-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if tx.send(sig).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Error::Env(format!("cannot start the signal thread: {e}")))?;
    Ok(rx)
}

impl Foreground {
    /// Tells connection threads whether a newly accepted task would make
    /// the foreground act: start a turn, put it to the approval policy, or
    /// arm the `--ttl` timer. A running turn or a pause ends with a look
    /// at the queue anyway.
    fn publish_wait(&self) {
        let waits = self.opts.ttl.is_some()
            || (self.running.is_none()
                && !self.paused()
                && (self.opts.exec.is_some() || self.opts.approve != Approve::Auto));
        self.shared.wake_on_accept.store(waits, Ordering::SeqCst);
    }

    fn manifest(&self) -> Manifest {
        self.shared
            .manifest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn spool(&self) -> &Spool {
        &self.shared.spool
    }

    fn paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    fn new_token() -> String {
        registry::random_digits(24).unwrap_or_else(|_| format!("{:?}", Instant::now()))
    }

    fn new_message_id(&mut self) -> String {
        let n = self.next_out;
        self.next_out += 1;
        format!("{}-{n}", self.shared.instance_id)
    }

    /// Recomputes the state; publishes the manifest and an event when it
    /// changed. Waiting for an approval is not busy.
    fn refresh(&mut self) {
        let want = if self.paused() {
            State::Paused
        } else if self.running.is_some() || !self.open.is_empty() {
            State::Busy
        } else {
            State::Ready
        };
        if want == self.shared.state() {
            return;
        }
        self.shared.set_state(want);
        let m = self.manifest();
        if let Err(e) = registry::publish(&self.dir, &m) {
            eprintln!("baton: {e}");
        }
        if let Some((zdir, zsock)) = &self.zcoder
            && let Err(e) =
                registry::publish_value(zdir, &m.instance_id, &registry::zcoder_manifest(&m, zsock))
        {
            eprintln!("baton: {e}");
        }
        self.hub
            .emit("state.changed", json!({"state": want.as_str()}));
    }

    /// The earliest moment a timer must fire.
    fn next_timer(&self) -> Option<Instant> {
        let mut at: Vec<Instant> = Vec::new();
        if let Some(r) = &self.running {
            at.extend(r.deadline.filter(|_| r.ended_by.is_none()));
            at.extend(r.kill_at);
            at.extend(r.drain_until);
        }
        if self.opts.ephemeral
            && let Some(t) = self.idle_since
        {
            at.push(t + EPHEMERAL_GRACE);
        }
        // Only with --ttl: finding the oldest task walks the whole queue,
        // and this runs at every turn of the foreground loop.
        if let Some(ttl) = self.opts.ttl
            && let Some(oldest) = self.spool().oldest_queued()
        {
            let due = (oldest + ttl.as_secs()).saturating_sub(spool::now_secs());
            at.push(Instant::now() + Duration::from_secs(due) + Duration::from_millis(10));
        }
        at.into_iter().min()
    }

    /// `--ttl`: sets aside what waited too long, visibly.
    fn expire(&mut self) {
        let Some(ttl) = self.opts.ttl else {
            return;
        };
        for id in self.shared.spool.expire(ttl.as_secs()) {
            self.asked.remove(&id);
            self.approved.remove(&id);
            self.hub.emit(
                "task.expired",
                json!({"message_id": id, "reason": "expired",
                       "text": format!("waited longer than --ttl {} s; moved to rejected/", ttl.as_secs())}),
            );
        }
    }

    /// Handles due timers; true when an ephemeral instance should stop.
    fn on_timer(&mut self) -> bool {
        self.expire();
        let now = Instant::now();
        if let Some(r) = &mut self.running {
            if r.ended_by.is_none() && r.deadline.is_some_and(|d| d <= now) {
                r.ended_by = Some("timeout");
                let _ = sys::kill_group(r.pid, sys::SIGTERM);
                r.kill_at = Some(now + KILL_GRACE);
                let id = r.task.message_id.clone();
                self.hub.emit(
                    "notice",
                    json!({"message_id": id, "text": "turn timed out: SIGTERM sent to its process group"}),
                );
            } else if r.kill_at.is_some_and(|k| k <= now) {
                r.kill_at = None;
                let _ = sys::kill_group(r.pid, sys::SIGKILL);
            } else if r.drain_until.is_some_and(|d| d <= now) {
                // The handler exited but something it started still holds
                // its output open: the turn is over all the same.
                r.streams_open = 0;
                r.drain_until = None;
                let _ = sys::kill_group(r.pid, sys::SIGKILL);
                self.maybe_finish();
            }
        }
        self.opts.ephemeral
            && self.clients == 0
            && self.idle_since.is_some_and(|t| t + EPHEMERAL_GRACE <= now)
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            // The loop looks at the queue after every event.
            Event::Queued => {}
            Event::Flush => self.hub.flush(),
            Event::Call {
                method,
                params,
                reply,
            } => {
                if method == "relay/send" {
                    self.relay_send(&params, reply);
                } else {
                    let r = self.call(&method, &params);
                    let _ = reply.send(r);
                }
            }
            Event::Subscribe { controller, reply } => {
                let sub = self.hub.subscribe(controller);
                let sub_id = sub.id;
                let _ = reply.send(sub);
                if controller {
                    // A controller that comes late still hears what waits;
                    // the others were asked already.
                    let waiting: Vec<String> = self.asked.keys().cloned().collect();
                    for id in waiting {
                        self.send_approval_request(&id, Some(sub_id));
                    }
                }
            }
            Event::Unsubscribe { id } => self.hub.unsubscribe(id),
            Event::ClientReply { reply } => self.client_reply(&reply),
            Event::Connected => {
                self.clients += 1;
                self.seen_client = true;
                self.idle_since = None;
            }
            Event::Disconnected => {
                self.clients = self.clients.saturating_sub(1);
                if self.clients == 0 && self.seen_client {
                    self.idle_since = Some(Instant::now());
                }
            }
            Event::Turn(t) => self.turn_event(t),
            Event::Relayed { result, reply_of } => {
                let mut fields = result;
                if let Some(r) = reply_of {
                    fields["reply_of"] = json!(r);
                }
                self.hub.emit("relay.sent", fields);
            }
        }
    }

    fn call(
        &mut self,
        method: &str,
        params: &Map<String, Value>,
    ) -> std::result::Result<Value, RpcError> {
        match method {
            "control/pause" | "control/resume" => {
                let pause = method == "control/pause";
                let changed = self.shared.paused.swap(pause, Ordering::SeqCst) != pause;
                if pause {
                    // Acceptances that passed the check before the pause
                    // finish storing first: the pause is exact.
                    self.spool().settle(SETTLE_WAIT);
                }
                self.refresh();
                Ok(json!({"state": self.shared.state().as_str(), "changed": changed}))
            }
            "control/status" => Ok(self.status()),
            "inbox/list" => {
                let l = self.spool().list();
                let waiting: Vec<&String> = self.asked.keys().collect();
                Ok(json!({"queued": l.queued, "processing": l.processing,
                          "interrupted": l.interrupted, "rejected": l.rejected,
                          "awaiting_approval": waiting}))
            }
            "inbox/claim" => Ok(self.claim()),
            "inbox/complete" => self.complete(params),
            "inbox/requeue" | "inbox/discard" => self.interrupted(method, params),
            "approval/respond" => self.approval_respond(params),
            "turn/cancel" => self.cancel(params),
            "turn/local" => self.local(params),
            _ => Err(RpcError::new(
                crate::wire::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    fn status(&self) -> Value {
        let m = self.manifest();
        let c = self.spool().counts();
        let turn = self.running.as_ref().map(|r| {
            json!({"message_id": r.task.message_id, "pid": r.pid,
                   "seconds": r.started.elapsed().as_secs_f64()})
        });
        json!({
            "instance_id": m.instance_id,
            "name": m.name,
            "pid": m.pid,
            "workspace": m.workspace,
            "profile": m.profile,
            "model": m.model,
            "socket": m.socket,
            "state": self.shared.state().as_str(),
            "paused": self.paused(),
            "started_at": m.started_at,
            "spool": self.spool().dir().display().to_string(),
            "mode": if self.opts.exec.is_some() { "exec" } else { "pull" },
            "approve": self.opts.approve.as_str(),
            "open_task": self.open.first().map(|o| o.task.message_id.clone()),
            "turn": turn,
            "awaiting_approval": self.asked.keys().collect::<Vec<_>>(),
            "queue": {
                "queued": c.queued,
                "processing": c.processing,
                "interrupted": c.interrupted,
                "max": self.shared.config.max_queue,
            },
        })
    }

    /// Applies `--approve` to the task at the head of the queue. Returns
    /// the id that may be claimed now, if any; under `deny` the head is
    /// refused and the next one considered.
    fn approved_head(&mut self) -> Option<String> {
        loop {
            let head = self.spool().peek()?;
            match self.gate(&head) {
                Gate::Go => return Some(head.message_id),
                Gate::Wait => return None,
                Gate::Denied => {}
            }
        }
    }

    /// Applies `--approve` to one queued task: it may go, it waits for an
    /// approval (asked for once), or it was refused and ended.
    fn gate(&mut self, task: &spool::Summary) -> Gate {
        let id = &task.message_id;
        if is_local(&task.sender) {
            // The operator typed it: there is no one else to ask.
            return Gate::Go;
        }
        match self.opts.approve {
            Approve::Auto => Gate::Go,
            Approve::Ask if self.approved.contains(id) => Gate::Go,
            Approve::Ask => {
                if !self.asked.contains_key(id) {
                    self.asked.insert(id.clone(), Vec::new());
                    self.hub.emit(
                        "approval.requested",
                        json!({"message_id": id, "from": turn::display_name(&task.sender),
                               "pid": task.sender.pid}),
                    );
                    self.send_approval_request(id, None);
                }
                Gate::Wait
            }
            Approve::Deny => {
                self.deny(id, "--approve deny");
                Gate::Denied
            }
        }
    }

    /// Asks every controller, or only the one subscriber `only`.
    fn send_approval_request(&mut self, message_id: &str, only: Option<u64>) {
        let rid = format!("approval-{}", self.next_request);
        self.next_request += 1;
        let line = crate::wire::notification_line("approval/request", json!({}));
        // A request, not a notification: it carries an id the reply names.
        let mut req: Value = serde_json::from_slice(&line).expect("json");
        req["id"] = json!(rid);
        req["params"] = json!({"message_id": message_id});
        let mut bytes = serde_json::to_vec(&req).expect("serializes");
        bytes.push(b'\n');
        if self.hub.send_to_controllers(&bytes, only) > 0 {
            self.requests.insert(rid.clone(), message_id.to_string());
            if let Some(v) = self.asked.get_mut(message_id) {
                v.push(rid);
            }
        }
    }

    /// Claims a queued task and ends it as refused by the approval policy.
    fn deny(&mut self, message_id: &str, by: &str) {
        self.asked.remove(message_id);
        self.approved.remove(message_id);
        match self.spool().claim_id(message_id) {
            Ok(Claim::Task(_)) => {
                if let Err(e) = self.spool().finish(message_id, "denied") {
                    self.hub.emit("notice", json!({"text": e.to_string()}));
                }
            }
            Ok(_) => {}
            Err(e) => {
                self.hub.emit("notice", json!({"text": e.to_string()}));
            }
        }
        self.hub
            .emit("task.denied", json!({"message_id": message_id, "by": by}));
    }

    fn decide(&mut self, message_id: &str, decision: &str, by: &str) -> Value {
        if self.asked.remove(message_id).is_none() {
            return json!({"status": "invalid", "message_id": message_id,
                          "reason": format!("no task {} is waiting for approval", escape(message_id))});
        }
        self.requests.retain(|_, m| m != message_id);
        self.hub.emit(
            "approval.resolved",
            json!({"message_id": message_id, "decision": decision, "by": by}),
        );
        if decision == "approve" {
            self.approved.insert(message_id.to_string());
            json!({"status": "approved", "message_id": message_id})
        } else {
            self.deny(message_id, by);
            json!({"status": "denied", "message_id": message_id})
        }
    }

    fn approval_respond(
        &mut self,
        params: &Map<String, Value>,
    ) -> std::result::Result<Value, RpcError> {
        let id = str_param(params, "message_id")?;
        let decision = str_param(params, "decision")?;
        if !matches!(decision.as_str(), "approve" | "deny") {
            return Ok(json!({"status": "invalid", "message_id": id,
                             "reason": "decision is not approve or deny"}));
        }
        Ok(self.decide(&id, &decision, "approval/respond"))
    }

    /// A controller answered an `approval/request`.
    fn client_reply(&mut self, reply: &Map<String, Value>) {
        let Some(rid) = reply.get("id").and_then(Value::as_str) else {
            return;
        };
        let Some(message_id) = self.requests.get(rid).cloned() else {
            return;
        };
        let decision = reply
            .get("result")
            .and_then(|r| r.get("decision"))
            .and_then(Value::as_str);
        if let Some(d @ ("approve" | "deny")) = decision {
            self.decide(&message_id, d, "approval/request");
        }
    }

    /// Exec mode: starts the next turn when nothing runs.
    fn pump(&mut self) {
        self.expire();
        if self.running.is_some() || self.paused() {
            return;
        }
        if self.opts.exec.is_none() {
            // A pull agent's next task is put to the approval policy now,
            // so a controller hears of it before the agent asks for it.
            if self.opts.approve != Approve::Auto && self.open.is_empty() {
                self.approved_head();
            }
            return;
        }
        let Some(id) = self.approved_head() else {
            return;
        };
        self.approved.remove(&id);
        match self.spool().claim_id(&id) {
            Ok(Claim::Task(task)) => self.start_turn(*task),
            Ok(Claim::Rejected { message_id, reason }) => {
                self.hub.emit(
                    "task.rejected",
                    json!({"message_id": message_id, "reason": reason}),
                );
            }
            Ok(Claim::Empty) => {}
            Err(e) => {
                self.hub.emit("notice", json!({"text": e.to_string()}));
            }
        }
    }

    fn turn_env(&self, task: &Task, token: &str) -> Vec<(&'static str, String)> {
        vec![
            ("BATON_SOCKET", self.socket.display().to_string()),
            ("BATON_TURN", token.to_string()),
            ("BATON_MESSAGE_ID", task.message_id.clone()),
            (
                "BATON_SENDER_ID",
                task.sender.instance_id.clone().unwrap_or_default(),
            ),
            ("BATON_SENDER_NAME", turn::display_name(&task.sender)),
            // Only an instance id is a sender one can reply to.
        ]
    }

    fn start_turn(&mut self, task: Task) {
        let token = Self::new_token();
        let command = self.opts.exec.clone().expect("exec mode");
        let reply_possible = task.sender.instance_id.is_some();
        let spec = turn::ExecSpec {
            command: &command,
            workspace: &self.workspace,
            envelope: if is_local(&task.sender) {
                format!("{}\n", task.body)
            } else {
                turn::envelope(&task, reply_possible)
            },
            env: self.turn_env(&task, &token),
            token: token.clone(),
            capture: self
                .opts
                .reply
                .then_some(self.shared.config.max_message_bytes),
        };
        let id = task.message_id.clone();
        match turn::spawn(spec, self.events_tx.clone()) {
            Ok(pid) => {
                let now = Instant::now();
                self.hub.emit(
                    "turn.started",
                    json!({"message_id": id, "pid": pid, "from": turn::display_name(&task.sender),
                           "sender_id": task.sender.instance_id, "hop": task.hop}),
                );
                self.running = Some(Running {
                    task,
                    token,
                    pid,
                    started: now,
                    deadline: self.opts.turn_timeout.map(|t| now + t),
                    kill_at: None,
                    drain_until: None,
                    ended_by: None,
                    exit: None,
                    streams_open: 2,
                    bytes: HashMap::new(),
                    captured: None,
                });
            }
            Err(e) => {
                let _ = self.spool().finish(&id, "failed");
                self.hub.emit(
                    "turn.finished",
                    json!({"message_id": id, "outcome": "failed",
                           "error": format!("cannot start the handler: {e}")}),
                );
            }
        }
        self.refresh();
    }

    fn turn_event(&mut self, ev: TurnEvent) {
        let token = match &ev {
            TurnEvent::Output { token, .. }
            | TurnEvent::StreamDone { token, .. }
            | TurnEvent::Exited { token, .. }
            | TurnEvent::SpawnFailed { token, .. } => token.clone(),
        };
        let Some(r) = self.running.as_mut().filter(|r| r.token == token) else {
            return;
        };
        let id = r.task.message_id.clone();
        match ev {
            TurnEvent::Output { stream, text, .. } => {
                self.hub.emit(
                    "turn.output",
                    json!({"message_id": id, "stream": stream, "text": text}),
                );
            }
            TurnEvent::StreamDone {
                stream,
                total,
                dropped,
                tail,
                captured,
                ..
            } => {
                r.streams_open = r.streams_open.saturating_sub(1);
                r.bytes.insert(stream, (total, dropped));
                if captured.is_some() {
                    r.captured = captured;
                }
                if dropped > 0 {
                    self.hub.emit(
                        "turn.output",
                        json!({"message_id": id, "stream": stream, "text": tail, "tail": true,
                               "dropped": dropped}),
                    );
                }
            }
            TurnEvent::Exited { code, signal, .. } => {
                r.exit = Some((code, signal));
                r.kill_at = None;
                if r.streams_open > 0 {
                    r.drain_until = Some(Instant::now() + DRAIN_GRACE);
                }
            }
            TurnEvent::SpawnFailed { error, .. } => {
                r.exit = Some((None, None));
                r.streams_open = 0;
                self.hub
                    .emit("notice", json!({"message_id": id, "text": error}));
            }
        }
        self.maybe_finish();
    }

    /// Ends the turn once the handler exited and its output drained.
    fn maybe_finish(&mut self) {
        let done = self
            .running
            .as_ref()
            .is_some_and(|r| r.exit.is_some() && r.streams_open == 0);
        if !done {
            return;
        }
        let r = self.running.take().expect("checked");
        let (code, signal) = r.exit.expect("checked");
        let outcome = r
            .ended_by
            .unwrap_or(if code == Some(0) { "done" } else { "failed" });
        let id = r.task.message_id.clone();
        if let Err(e) = self.spool().finish(&id, outcome) {
            self.hub
                .emit("notice", json!({"message_id": id, "text": e.to_string()}));
        }
        let (out_total, out_dropped) = r.bytes.get("stdout").copied().unwrap_or_default();
        let (err_total, err_dropped) = r.bytes.get("stderr").copied().unwrap_or_default();
        self.hub.emit(
            "turn.finished",
            json!({
                "message_id": id,
                "outcome": outcome,
                "exit_code": code,
                "signal": signal,
                "duration_ms": r.started.elapsed().as_millis() as u64,
                "stdout_bytes": out_total,
                "stderr_bytes": err_total,
                "dropped_bytes": out_dropped + err_dropped,
            }),
        );
        if self.opts.reply && outcome == "done" {
            self.reply_with_stdout(&r.task, r.captured.unwrap_or_default());
        }
        self.refresh();
    }

    /// `--reply`: the handler's stdout goes back to the sender.
    fn reply_with_stdout(&mut self, task: &Task, stdout: Vec<u8>) {
        let id = &task.message_id;
        let Some(sender) = task.sender.instance_id.clone() else {
            self.hub.emit(
                "notice",
                json!({"message_id": id, "text": "no reply: the sender is a plain command line, which cannot be replied to"}),
            );
            return;
        };
        let limit = self.shared.config.max_message_bytes;
        if stdout.len() > limit {
            self.hub.emit(
                "notice",
                json!({"message_id": id, "text": format!(
                    "no reply: the handler printed more than {limit} bytes (BATON_MAX_MESSAGE_BYTES)"
                )}),
            );
            return;
        }
        let body = String::from_utf8_lossy(&stdout).into_owned();
        if body.trim().is_empty() {
            self.hub.emit(
                "notice",
                json!({"message_id": id, "text": "no reply: the handler printed nothing"}),
            );
            return;
        }
        let out = Outbound {
            target: sender.clone(),
            body,
            message_id: self.new_message_id(),
            hop: task.hop + 1,
            in_reply_to: Some(id.clone()),
            mode: "queue".into(),
            only: Some(sender),
            scope: "a reply".into(),
        };
        self.spawn_send(out, Some(id.clone()), None);
    }

    /// Delivers on a worker thread; the result goes to the transcript and,
    /// for `relay/send`, to the waiting caller.
    fn spawn_send(
        &mut self,
        out: Outbound,
        reply_of: Option<String>,
        caller: Option<chan::Sender<std::result::Result<Value, RpcError>>>,
    ) {
        let origin = self.origin.clone();
        let events = self.events_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("baton-send".into())
            .spawn(move || {
                let result = relay::send_as(&origin, &out);
                if let Some(c) = caller {
                    let _ = c.send(Ok(result.clone()));
                }
                let _ = events.send(Event::Relayed { result, reply_of });
            });
        if let Err(e) = spawned {
            self.hub.emit(
                "notice",
                json!({"text": format!("cannot start a sender thread: {e}")}),
            );
        }
    }

    /// `relay/send`: the sender-side guards need the turn, so they are
    /// decided here; the delivery itself runs on a worker thread.
    fn relay_send(
        &mut self,
        params: &Map<String, Value>,
        reply: chan::Sender<std::result::Result<Value, RpcError>>,
    ) {
        let plan = self.plan_send(params);
        match plan {
            Ok(Ok(out)) => {
                let reply_of = out.in_reply_to.clone();
                self.spawn_send(out, reply_of, Some(reply));
            }
            Ok(Err(refusal)) => {
                self.hub.emit("relay.sent", refusal.clone());
                let _ = reply.send(Ok(refusal));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The task a turn token names: the running turn or an open one.
    fn task_of_turn(&self, token: &str) -> Option<&Task> {
        if let Some(r) = self.running.as_ref().filter(|r| r.token == token) {
            return Some(&r.task);
        }
        self.open.iter().find(|o| o.token == token).map(|o| &o.task)
    }

    #[allow(clippy::type_complexity)]
    fn plan_send(
        &mut self,
        params: &Map<String, Value>,
    ) -> std::result::Result<std::result::Result<Outbound, Value>, RpcError> {
        let body = str_param(params, "body")?;
        let turn = opt_str_param(params, "turn")?;
        let target = opt_str_param(params, "target")?;
        let mode = opt_str_param(params, "mode")?.unwrap_or_else(|| "queue".into());
        let is_reply = match params.get("reply") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RpcError::new(
                    crate::wire::INVALID_PARAMS,
                    "invalid params: reply must be a boolean",
                ));
            }
        };
        let message_id = match opt_str_param(params, "message_id")? {
            Some(id) if registry::valid_id(&id) => id,
            Some(_) => {
                let id = self.new_message_id();
                return Ok(Err(json!({"status": "invalid", "message_id": id,
                                     "reason": server::reason::BAD_MESSAGE_ID})));
            }
            None => self.new_message_id(),
        };
        let refuse = |status: &str, reason: String| {
            Ok(Err(
                json!({"status": status, "message_id": message_id, "reason": reason}),
            ))
        };
        if !matches!(mode.as_str(), "queue" | "steer") {
            return refuse("invalid", "mode is not queue or steer".into());
        }
        let task = match &turn {
            Some(t) => match self.task_of_turn(t) {
                Some(task) => Some(task.clone()),
                None => return refuse("denied", "the turn token names no open turn here".into()),
            },
            None => None,
        };
        let task = task.filter(|t| !is_local(&t.sender));
        let Some(task) = task else {
            // A local turn (the operator, a script with BATON_SOCKET): any
            // target, hop 0.
            if is_reply {
                return refuse("invalid", "a reply needs the turn it answers (turn)".into());
            }
            let Some(target) = target else {
                return Err(RpcError::new(
                    crate::wire::INVALID_PARAMS,
                    "invalid params: target is missing",
                ));
            };
            return Ok(Ok(Outbound {
                target,
                body,
                message_id,
                hop: 0,
                in_reply_to: None,
                mode,
                only: None,
                scope: String::new(),
            }));
        };
        let from = turn::display_name(&task.sender);
        let Some(sender) = task.sender.instance_id.clone() else {
            return refuse(
                "denied",
                format!(
                    "this turn runs a task from {from}, a plain command line, which cannot be sent to"
                ),
            );
        };
        let target = if is_reply {
            sender.clone()
        } else {
            match target {
                Some(t) => t,
                None => {
                    return Err(RpcError::new(
                        crate::wire::INVALID_PARAMS,
                        "invalid params: target is missing",
                    ));
                }
            }
        };
        Ok(Ok(Outbound {
            target,
            body,
            message_id,
            hop: task.hop + 1,
            in_reply_to: Some(task.message_id.clone()),
            mode,
            only: Some(sender),
            scope: format!("this turn runs a task relayed from {}", escape(&from)),
        }))
    }

    /// Pull mode: hands out the next task and opens its turn.
    fn claim(&mut self) -> Value {
        if self.opts.exec.is_some() {
            return json!({"status": "invalid",
                          "reason": "this instance runs its tasks with --exec; there is nothing to claim"});
        }
        if self.paused() {
            return json!({"status": "paused", "reason": server::reason::PAUSED});
        }
        let mut rejected = Vec::new();
        let result = loop {
            // A steer task from the sender of the open task joins its turn,
            // wherever it waits in the queue.
            let follow_up = self.open.first().and_then(|o| {
                let sender = o.task.sender.instance_id.as_deref()?;
                let steer = self.spool().first_steer_from(sender)?;
                Some((steer, o.token.clone()))
            });
            if follow_up.is_none()
                && let Some(o) = self.open.first()
            {
                let id = o.task.message_id.clone();
                break json!({
                    "status": "busy",
                    "message_id": id,
                    "reason": format!("task {id} is still open: complete it first"),
                });
            }
            let next = match &follow_up {
                Some((steer, _)) => match self.gate(steer) {
                    Gate::Go => Some(steer.message_id.clone()),
                    Gate::Wait => None,
                    Gate::Denied => continue,
                },
                None => self.approved_head(),
            };
            let Some(id) = next else {
                let waiting = follow_up
                    .as_ref()
                    .map(|(s, _)| s.message_id.clone())
                    .or_else(|| self.asked.keys().next().cloned());
                break match waiting {
                    Some(w) => json!({"status": "awaiting_approval", "message_id": w,
                                      "reason": format!("task {w} waits for approval")}),
                    None => json!({"status": "empty"}),
                };
            };
            self.approved.remove(&id);
            match self.spool().claim_id(&id) {
                Ok(Claim::Task(task)) => {
                    let token = follow_up.map_or_else(Self::new_token, |(_, t)| t);
                    let envelope = turn::envelope(&task, task.sender.instance_id.is_some());
                    let follows = self.open.first().map(|o| o.task.message_id.clone());
                    self.hub.emit(
                        "task.claimed",
                        json!({"message_id": task.message_id, "from": turn::display_name(&task.sender),
                               "follow_up_of": follows}),
                    );
                    let v = json!({
                        "status": "claimed",
                        "task": {
                            "message_id": task.message_id,
                            "body": task.body,
                            "sender": task.sender,
                            "hop": task.hop,
                            "in_reply_to": task.in_reply_to,
                            "mode": task.mode,
                            "accepted_at": task.accepted_at,
                            "wire": task.wire,
                            "envelope": envelope,
                            "turn": token,
                            "follow_up_of": follows,
                        },
                    });
                    self.open.push(OpenTask { task: *task, token });
                    break v;
                }
                Ok(Claim::Empty) => break json!({"status": "empty"}),
                Ok(Claim::Rejected { message_id, reason }) => {
                    eprintln!(
                        "baton: task {message_id} is bad data and went to rejected/: {reason}"
                    );
                    self.hub.emit(
                        "task.rejected",
                        json!({"message_id": message_id, "reason": reason}),
                    );
                    rejected.push(json!({"message_id": message_id, "reason": reason}));
                }
                Err(e) => {
                    break json!({"status": "error", "reason": e.to_string()});
                }
            }
        };
        self.refresh();
        let mut result = result;
        if !rejected.is_empty() {
            result["rejected"] = Value::Array(rejected);
        }
        result
    }

    /// Puts an interrupted task back in the queue, or discards it with a
    /// receipt (so a retry of its id stays a duplicate).
    fn interrupted(
        &mut self,
        method: &str,
        params: &Map<String, Value>,
    ) -> std::result::Result<Value, RpcError> {
        let id = str_param(params, "message_id")?;
        if !self.spool().is_set_aside(&id) {
            return Ok(json!({
                "status": "invalid",
                "message_id": id,
                "reason": format!("no interrupted or rejected task {}", escape(&id)),
            }));
        }
        let (r, status) = if method == "inbox/requeue" {
            (self.spool().requeue(&id), "requeued")
        } else {
            (self.spool().finish(&id, "discarded"), "discarded")
        };
        Ok(match r {
            Ok(()) => {
                self.hub
                    .emit(&format!("task.{status}"), json!({"message_id": id}));
                json!({"status": status, "message_id": id})
            }
            Err(e) => json!({"status": "error", "message_id": id, "reason": e.to_string()}),
        })
    }

    fn complete(&mut self, params: &Map<String, Value>) -> std::result::Result<Value, RpcError> {
        let id = str_param(params, "message_id")?;
        let outcome = opt_str_param(params, "outcome")?.unwrap_or_else(|| "done".into());
        let reply = opt_str_param(params, "reply")?;
        let invalid =
            |reason: String| Ok(json!({"status": "invalid", "message_id": id, "reason": reason}));
        if !matches!(outcome.as_str(), "done" | "failed") {
            return invalid("outcome is not done or failed".into());
        }
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            return invalid(format!("task {} is not open here", escape(&id)));
        };
        if let Err(e) = self.spool().finish(&id, &outcome) {
            return Ok(json!({"status": "error", "message_id": id, "reason": e.to_string()}));
        }
        let open = self.open.remove(pos);
        self.hub.emit(
            "turn.finished",
            json!({"message_id": id, "outcome": outcome}),
        );
        let mut result = json!({"status": "completed", "message_id": id, "outcome": outcome});
        if let Some(body) = reply {
            // The reply goes out like `baton send --reply` from the turn.
            let mut p = Map::new();
            p.insert("body".into(), json!(body));
            p.insert("reply".into(), json!(true));
            p.insert("turn".into(), json!(open.token));
            self.open.push(open);
            let plan = self.plan_send(&p);
            self.open.pop();
            match plan {
                Ok(Ok(out)) => {
                    // The foreground never waits on the network: the
                    // reply's outcome goes to the transcript (relay.sent).
                    result["reply"] = json!({"status": "sending", "message_id": out.message_id});
                    self.spawn_send(out, Some(id.clone()), None);
                }
                Ok(Err(refusal)) => {
                    let mut r = refusal.clone();
                    r["reply_of"] = json!(id);
                    self.hub.emit("relay.sent", r);
                    result["reply"] = refusal;
                }
                Err(e) => result["reply"] = json!({"status": "invalid", "reason": e.message}),
            }
        }
        self.refresh();
        Ok(result)
    }

    fn cancel(&mut self, params: &Map<String, Value>) -> std::result::Result<Value, RpcError> {
        let want = opt_str_param(params, "message_id")?;
        if let Some(r) = &mut self.running
            && want.as_ref().is_none_or(|w| *w == r.task.message_id)
        {
            let id = r.task.message_id.clone();
            if r.ended_by.is_none() {
                r.ended_by = Some("cancelled");
                let _ = sys::kill_group(r.pid, sys::SIGTERM);
                r.kill_at = Some(Instant::now() + KILL_GRACE);
                self.hub.emit(
                    "notice",
                    json!({"message_id": id, "text": "turn cancelled: SIGTERM sent to its process group"}),
                );
            }
            return Ok(json!({"status": "cancelling", "message_id": id}));
        }
        if let Some(pos) = self
            .open
            .iter()
            .position(|o| want.as_ref().is_none_or(|w| *w == o.task.message_id))
        {
            let id = self.open[pos].task.message_id.clone();
            if let Err(e) = self.spool().finish(&id, "cancelled") {
                return Ok(json!({"status": "error", "message_id": id, "reason": e.to_string()}));
            }
            self.open.remove(pos);
            self.hub.emit(
                "turn.finished",
                json!({"message_id": id, "outcome": "cancelled"}),
            );
            self.refresh();
            return Ok(json!({"status": "cancelled", "message_id": id}));
        }
        let reason = match (&want, &self.running) {
            (Some(w), Some(r)) => format!(
                "task {} is not the running turn ({} is)",
                escape(w),
                r.task.message_id
            ),
            (Some(w), None) if !self.open.is_empty() => {
                format!("task {} is not an open turn here", escape(w))
            }
            _ => "no turn is running".to_string(),
        };
        Ok(json!({"status": "invalid", "message_id": want, "reason": reason}))
    }

    /// `turn/local`: a line the operator typed. With `--exec` it becomes a
    /// task of its own, queued like any other; otherwise it is only noted.
    fn local(&mut self, params: &Map<String, Value>) -> std::result::Result<Value, RpcError> {
        let text = str_param(params, "text")?;
        if text.trim().is_empty() {
            return Ok(json!({"status": "invalid", "reason": server::reason::EMPTY_BODY}));
        }
        if self.opts.exec.is_none() {
            self.hub.emit(
                "local.input",
                json!({"from": LOCAL, "body": text, "noted": true}),
            );
            return Ok(json!({"status": "noted",
                             "reason": "this instance has no --exec handler: the line is noted in the transcript"}));
        }
        let id = self.new_message_id();
        let sender = spool::Sender {
            name: Some(LOCAL.into()),
            pid: Some(std::process::id()),
            ..spool::Sender::default()
        };
        let task = spool::new_task(&id, text, sender, 0, None, "queue", None, "local");
        let limits = spool::Limits {
            max_queue: self.shared.config.max_queue,
            max_inflight: 0,
        };
        let r = self.shared.spool.admit(
            task,
            None,
            limits,
            || false,
            |task, queue_position| {
                server::emit_accepted(
                    &self.hub,
                    "local.input",
                    task,
                    None,
                    LOCAL,
                    task.sender.pid,
                    queue_position,
                );
            },
        );
        self.hub.flush();
        Ok(match r {
            Ok(spool::Admission::Accepted { queue_position }) => {
                json!({"status": "accepted", "message_id": id, "queue_position": queue_position})
            }
            Ok(spool::Admission::Full { limit }) => json!({"status": "full", "message_id": id,
                "reason": format!("the queue is full: {limit} tasks waiting or running (BATON_MAX_QUEUE)")}),
            Ok(other) => {
                json!({"status": "invalid", "message_id": id, "reason": format!("{other:?}")})
            }
            Err(e) => json!({"status": "error", "message_id": id, "reason": e.to_string()}),
        })
    }

    /// At shutdown: the running handler is ended; its task stays in
    /// `processing/` and shows up as interrupted at the next start.
    /// Ends the handler with SIGTERM, and SIGKILL if it is still there
    /// after the grace period (its exit is watched on `events`).
    fn interrupt_turn(&mut self, events: &chan::Receiver<Event>) {
        let Some(r) = self.running.take() else {
            return;
        };
        let _ = sys::kill_group(r.pid, sys::SIGTERM);
        let deadline = Instant::now() + KILL_GRACE;
        let mut exited = r.exit.is_some();
        while !exited {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(Event::Turn(TurnEvent::Exited { token, .. })) if token == r.token => {
                    exited = true;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if !exited {
            let _ = sys::kill_group(r.pid, sys::SIGKILL);
        }
        self.hub.emit(
            "turn.finished",
            json!({"message_id": r.task.message_id, "outcome": "interrupted"}),
        );
    }
}

fn str_param(params: &Map<String, Value>, k: &str) -> std::result::Result<String, RpcError> {
    opt_str_param(params, k)?.ok_or_else(|| {
        RpcError::new(
            crate::wire::INVALID_PARAMS,
            format!("invalid params: {k} is missing"),
        )
    })
}

fn opt_str_param(
    params: &Map<String, Value>,
    k: &str,
) -> std::result::Result<Option<String>, RpcError> {
    match params.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::new(
            crate::wire::INVALID_PARAMS,
            format!("invalid params: {k} must be a string"),
        )),
    }
}
