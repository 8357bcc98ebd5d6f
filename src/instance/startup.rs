//! Peers find an instance only once it accepts connections: startup binds
//! the sockets, opens the spool and records the start before it publishes
//! the manifest, and a socket is unlinked at exit only while it still is
//! the one we bound. Also here: `meta.json`, the sweep of dead ephemeral
//! spools, and the signal channel.

use super::{Foreground, Inputs, ServeOptions};
use crate::base::config::{Config, Relay};
use crate::base::error::{Error, Result};
use crate::registry::{self, Manifest};
use crate::relay::Origin;
use crate::server::{self, Shared};
use crate::spool::events::Hub;
use crate::spool::{self, Spool};
use crate::sys;
use crate::wire::body::Ended;
use crate::wire::{Body, Mode, Said};
use crossbeam_channel as chan;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Where the instance lives, decided before anything is created.
struct Place {
    dir: PathBuf,
    workspace: PathBuf,
    name: String,
    id: String,
    /// Under socket activation, the listener passed on fd 3.
    activated: Option<UnixListener>,
    socket: PathBuf,
    /// zcoder's registry directory and our socket there, with `--zcoder`.
    zcoder: Option<(PathBuf, PathBuf)>,
}

/// A socket we listen on.
struct Socket {
    path: PathBuf,
    /// What was bound there: only that is unlinked at exit.
    meta: fs::Metadata,
    /// An activated socket belongs to the service manager, which keeps
    /// listening on it to start the agent again.
    activated: bool,
}

/// The sockets and the ends of their accept loops, for shutdown.
pub(super) struct Listeners(Vec<(Socket, chan::Receiver<()>)>);

/// Startup: the manifest is published last, once the instance answers
/// (docs/protocol.md §7, Manifest). The instance, ready for its loop.
pub(super) fn start(opts: ServeOptions, config: Config) -> Result<(Foreground, Inputs, Listeners)> {
    sys::set_umask(0o077);
    let mut place = place(&opts, &config)?;
    let spool = open_spool(&opts, &config, &place)?;
    let sockets = bind(&mut place)?;
    let paused = opts.paused || config.relay == Relay::Paused;
    let manifest = manifest(&place, &opts, &config, paused);
    let (events_tx, events) = chan::unbounded();
    // Opened, and the start recorded, before the listener runs: connection
    // threads emit into it from their first acceptance.
    let hub = Arc::new(Hub::open(spool.dir()));
    let first_seq = started(&hub, &manifest, &opts, &spool);
    let shared = Arc::new(Shared::new(
        config,
        spool,
        manifest.clone(),
        place.dir.clone(),
        opts.policy.clone(),
        paused,
        hub,
        events_tx.clone(),
        opts.agent,
    ));
    // The subreaper of the handlers' orphans, so that a turn's process
    // stays the turn's whatever its parent does (docs/security.md); the
    // signal thread reaps them at each SIGCHLD. False where the system
    // has no subreaper.
    let reaper = sys::become_subreaper()
        .map_err(|e| Error::Env(format!("cannot become the reaper of a turn's orphans: {e}")))?;
    shared.reaper.store(reaper, Ordering::SeqCst);
    let listeners = accept(sockets, &shared)?;
    operators_socket(&shared, &place.id)?;
    // SIGCHLD too where we reap a turn's orphans: reaped on the signal
    // thread itself, never forwarded (no descriptor more for it).
    let signals = signal_channel(&[SIGTERM, SIGINT, SIGHUP, SIGCHLD][..3 + usize::from(reaper)])?;
    let (pane, panes) = super::pane::start(&opts, &place.id)?;
    let (codex, codex_reports) = super::codex::start(&opts, &place.workspace, &place.id)?;
    // The listener is accepting: only now may peers find us.
    publish(&place, &manifest)?;
    let stop = match &opts.embedded {
        Some(e) => {
            let _ = e.ready.send((place.id.clone(), place.socket.clone()));
            e.stop.clone()
        }
        None => chan::never(),
    };
    announce(&place, opts.name.is_none());
    let (turns_tx, turns) = chan::unbounded();
    let (pauses_tx, pauses) = chan::unbounded();
    let fg = Foreground {
        hub: Arc::clone(&shared.hub),
        origin: Origin {
            config: shared.config.clone(),
            registry: place.dir,
            instance_id: place.id,
            name: place.name,
            workspace: place.workspace.display().to_string(),
        },
        opts,
        zcoder: place.zcoder,
        workspace: place.workspace,
        shared,
        events_tx,
        turns_tx,
        pauses_tx,
        open: Vec::new(),
        running: None,
        approved: HashSet::new(),
        asked: HashMap::new(),
        requests: HashMap::new(),
        next_request: 1,
        // Past every approval id an earlier run of this spool gave: each
        // was asked with an event, and the transcript's numbers go on.
        next_approval: first_seq,
        permissions: Vec::new(),
        next_out: 1,
        clients: 0,
        seen_client: false,
        idle_since: None,
        short: None,
        pane,
        codex,
        expected: Default::default(),
    };
    let inputs = Inputs {
        events,
        turns,
        pauses,
        panes,
        codex: codex_reports,
        signals,
        stop,
    };
    Ok((fg, inputs, listeners))
}

/// Says on stderr that the instance serves, and the name it made of the
/// directory's when that differs from it (`made`: no `--name`).
fn announce(place: &Place, made: bool) {
    // The workspace and the registry are any path the user gave: a
    // directory name may hold an escape sequence.
    let shown = |p: &Path| crate::text::sanitize::escape(&p.display().to_string()).into_owned();
    let basename = place.workspace.file_name().map(|b| b.to_string_lossy());
    if let Some(b) = basename.filter(|b| made && *b != place.name) {
        eprintln!(
            "baton: the name is {}, made of the directory's name {} (docs/protocol.md §2); --name chooses another",
            crate::text::sanitize::escape(&place.name),
            shown(Path::new(&*b))
        );
    }
    eprintln!(
        "baton: {} ({}) serving {} on {}",
        crate::text::sanitize::escape(&place.name),
        place.id,
        shown(&place.workspace),
        shown(&place.socket)
    );
}

/// Resolves the registry, workspace, name, id and sockets, and checks
/// them and that the instance can serve at all; creates nothing but the
/// registry directories.
fn place(opts: &ServeOptions, config: &Config) -> Result<Place> {
    if config.relay == Relay::Off {
        return Err(Error::Env(
            "BATON_RELAY=off: the relay is disabled, so serve does not start".into(),
        ));
    }
    // Checked at start, so that a missing tmux is a clear error and not a
    // pane that never answers.
    if opts.tmux_pane.is_some() && registry::health::on_path("tmux").is_none() {
        return Err(Error::Env(
            "--tmux-pane: tmux is not on PATH, so no task can be typed into a pane".into(),
        ));
    }
    let dir = registry::ensure_dir(config)?;
    let workspace = resolve_workspace(opts.workspace.as_deref())?;
    let name = match &opts.name {
        Some(n) if registry::valid_new_name(n) => n.clone(),
        Some(n) => {
            return Err(Error::Usage(format!(
                "--name {}: a name must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}} (start with a letter or a digit)",
                crate::text::sanitize::escape(n)
            )));
        }
        None => registry::default_name(&workspace),
    };
    if opts.embedded.is_none() {
        name_is_free(&dir, &name, &workspace, config)?;
    }
    let id = registry::new_instance_id()?;
    // Under socket activation the listener already exists (fd 3): its
    // path, a wake socket in the registry, is the instance's socket.
    let activated = (opts.embedded.is_none())
        .then(sys::activated_listener)
        .flatten();
    let socket = match &activated {
        Some(l) => activated_path(l, &dir, &name)?,
        None => registry::socket_path(&dir, &id),
    };
    check_socket_path(&socket, "BATON_DIR")?;
    // `--zcoder`: a second socket in zcoder's registry, so that zcoder
    // instances find this one and can deliver to it.
    let zcoder = if opts.zcoder {
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
    } else {
        None
    };
    Ok(Place {
        dir,
        workspace,
        name,
        id,
        activated,
        socket,
        zcoder,
    })
}

/// `serve` takes no name a live instance of this user has (in our
/// registry or zcoder's): from then on every `send NAME` would be
/// ambiguous. Two starting at once may both pass; `send` then lists both.
fn name_is_free(dir: &Path, name: &str, workspace: &Path, config: &Config) -> Result<()> {
    let dirs = registry::scan_dirs(dir);
    let found = registry::discover_named(&dirs, config.io_timeout, name, &|m| m.name == name);
    // One of this name and workspace holds the spool, whose lock says so
    // in its own words.
    let here = workspace.to_string_lossy();
    let Some(peer) = found.peers.iter().find(|p| p.manifest.workspace != here) else {
        return Ok(());
    };
    let m = &peer.manifest;
    let escape = crate::text::sanitize::escape;
    Err(Error::Usage(format!(
        "the name {} is taken by the live instance {} (pid {}, workspace {}): choose another with --name",
        escape(name),
        m.instance_id,
        m.pid,
        escape(&m.workspace)
    )))
}

/// `--workspace`'s value (`given`) or the current directory, made
/// absolute and checked to be a directory; an error names which it was.
pub fn resolve_workspace(given: Option<&Path>) -> Result<PathBuf> {
    let (what, workspace) = match given {
        Some(w) => ("--workspace", w.to_path_buf()),
        None => (
            "the current directory",
            std::env::current_dir().map_err(|e| Error::io("read", Path::new("."), e))?,
        ),
    };
    let workspace = fs::canonicalize(&workspace).map_err(|e| Error::io(what, &workspace, e))?;
    if !workspace.is_dir() {
        return Err(Error::Env(format!(
            "{what} {} is not a directory",
            workspace.display()
        )));
    }
    Ok(workspace)
}

/// The path of a socket-activated listener, which must be the name's wake
/// socket for peers to find it.
fn activated_path(l: &UnixListener, dir: &Path, name: &str) -> Result<PathBuf> {
    let path = l
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .ok_or_else(|| Error::Env("the socket passed on fd 3 has no path".into()))?;
    let expected = crate::relay::wake_socket(dir, name);
    if path != expected {
        return Err(Error::Env(format!(
            "the activated socket is {}, but an instance named {name} must listen on {} to be found",
            path.display(),
            expected.display()
        )));
    }
    Ok(path)
}

/// Opens (and recovers) the spool and rewrites its `meta.json`.
fn open_spool(opts: &ServeOptions, config: &Config, place: &Place) -> Result<Arc<Spool>> {
    sweep_ephemeral_spools();
    let spool_dir = if opts.ephemeral_spool {
        runtime_base().join(format!("baton-spool-{}-{}", sys::uid(), place.id))
    } else {
        spool::spool_dir(&spool::state_home()?, &place.name, &place.workspace)
    };
    let mut spool = Spool::open(&spool_dir, config.fsync, opts.ephemeral_spool)?;
    // A full disk is no reason to leave queued tasks unserved: the
    // instance starts, and what it cannot store it refuses, as ever.
    if let Err(e) = write_meta(&spool_dir, place, opts) {
        spool.recovery_notes.push(format!(
            "{e}: starting anyway, serving the tasks already queued; offline senders may not find this spool, and new tasks are refused while they cannot be stored"
        ));
    }
    for note in &spool.recovery_notes {
        eprintln!("baton: {}", crate::text::sanitize::escape(note));
    }
    Ok(Arc::new(spool))
}

/// Binds the sockets (or takes the activated one).
fn bind(place: &mut Place) -> Result<Vec<(Socket, UnixListener)>> {
    let listen =
        |path: &Path| UnixListener::bind(path).map_err(|e| Error::io("listen on", path, e));
    // What was bound at `path`, once it listens.
    let bound = |path: &Path, listener, activated| {
        let meta = fs::symlink_metadata(path).map_err(|e| Error::io("inspect", path, e))?;
        let path = path.to_path_buf();
        Ok::<_, Error>((
            Socket {
                path,
                meta,
                activated,
            },
            listener,
        ))
    };
    let socket = &place.socket;
    let mut sockets = vec![match place.activated.take() {
        // A peer that checks who serves this socket (sender verification,
        // docs/protocol.md §5) hears of the process that last listened on
        // it: the service manager, until we do.
        Some(l) => {
            sys::listen_here(&l).map_err(|e| Error::io("listen on", socket, e))?;
            bound(socket, l, true)?
        }
        None => bound(socket, listen(socket)?, false)?,
    }];
    if let Some((_, zsock)) = &place.zcoder {
        sockets.push(bound(zsock, listen(zsock)?, false)?);
    }
    Ok(sockets)
}

/// Starts an accept loop on each socket, on a thread of its own; the
/// receiver kept with the socket hears when it ends.
fn accept(sockets: Vec<(Socket, UnixListener)>, shared: &Arc<Shared>) -> Result<Listeners> {
    let accepting = sockets.into_iter().map(|(s, listener)| {
        let (tx, rx) = chan::bounded::<()>(1);
        let shared = Arc::clone(shared);
        std::thread::Builder::new()
            .name("baton-accept".into())
            .spawn(move || {
                server::accept_loop(listener, shared);
                let _ = tx.send(());
            })
            .map_err(|e| Error::Env(format!("cannot start the listener thread: {e}")))?;
        Ok((s, rx))
    });
    Ok(Listeners(accepting.collect::<Result<_>>()?))
}

impl Listeners {
    /// Stops each accept loop and unlinks its socket, only if the path
    /// still is the socket we bound. Connecting would otherwise reach
    /// nothing or a stranger, and the thread is left to end with the
    /// process.
    pub(super) fn close(&self) {
        for (s, done) in self.0.iter().filter(|(s, _)| !s.activated) {
            let ours = fs::symlink_metadata(&s.path)
                .is_ok_and(|now| now.dev() == s.meta.dev() && now.ino() == s.meta.ino());
            if !ours {
                continue;
            }
            // The wake-up connect runs on its own thread and the wait is
            // bounded: a full backlog cannot hang shutdown.
            let wake = s.path.clone();
            let _ = std::thread::Builder::new()
                .name("baton-wake".into())
                .spawn(move || UnixStream::connect(wake).map(drop));
            let _ = done.recv_timeout(Duration::from_secs(1));
            let _ = fs::remove_file(&s.path);
        }
    }
}

/// Publishes the name entry and the manifest (zcoder's too), then
/// removes the stale entries of dead instances: once we are found, so
/// that removing a thousand of them does not delay our manifest (the
/// kernel judges them; none is connected to).
fn publish(place: &Place, manifest: &Manifest) -> Result<()> {
    // A socket-activated agent's manifest goes unindexed: its registry
    // holds the service manager's wake socket and the manifest only.
    if place.socket == registry::socket_path(&place.dir, &place.id) {
        registry::publish_name(&place.dir, &place.id, &place.name);
    }
    registry::publish(&place.dir, manifest)?;
    if let Some((zdir, zsock)) = &place.zcoder {
        let z = registry::zcoder_manifest(manifest, zsock);
        registry::publish_value(zdir, &place.id, &z)?;
    }
    registry::collect_stale(&place.dir, false);
    Ok(())
}

fn manifest(place: &Place, opts: &ServeOptions, config: &Config, paused: bool) -> Manifest {
    Manifest {
        protocol: registry::PROTOCOL,
        instance_id: place.id.clone(),
        pid: std::process::id(),
        project: place.name.clone(),
        name: place.name.clone(),
        workspace: place.workspace.display().to_string(),
        session_id: String::new(),
        profile: opts.profile.clone(),
        model: opts.model.clone(),
        socket: place.socket.display().to_string(),
        state: if paused { "paused" } else { "ready" }.into(),
        started_at: spool::now_secs(),
        wire: "jsonrpc".into(),
        baton_version: env!("CARGO_PKG_VERSION").into(),
        process_start: sys::process_start(std::process::id()),
        pid_ns: sys::pid_namespace(),
        max_message_bytes: Some(config.max_message_bytes as u64),
        operators: opts.operators.clone(),
    }
}

/// The first events of a run: the start, and what recovery found. The
/// start's sequence number.
fn started(hub: &Hub, m: &Manifest, opts: &ServeOptions, spool: &Spool) -> u64 {
    let first = hub.emit(Body::InstanceStarted {
        approve: opts.approve,
        instance_id: &m.instance_id,
        mode: if opts.exec.is_some() {
            Mode::Exec
        } else {
            Mode::Pull
        },
        name: &m.name,
        pid: m.pid,
        state: Said::spelled(&m.state),
        tmux_pane: opts.tmux_pane.as_deref(),
        workspace: &m.workspace,
    });
    for note in &spool.recovery_notes {
        hub.emit(Body::notice(note));
    }
    // The same shape as `Foreground::ended`: decided by this open.
    for (id, outcome) in &spool.ended_at_open {
        hub.emit(Body::TaskEnded(Ended::new(id, *outcome, None, None)));
    }
    let c = spool.counts();
    if c.interrupted > 0 {
        hub.emit(Body::notice(&format!(
            "{} interrupted task(s) wait for the operator: baton inbox requeue|discard",
            c.interrupted
        )));
    }
    first
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
    for name in rd.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        let Some(id) = name.strip_prefix(&prefix) else {
            continue;
        };
        let pid = id.split('-').next().and_then(|p| p.parse::<u32>().ok());
        // The kernel first: a live instance's spool costs no stat.
        if !(registry::valid_id(id)
            && pid.is_some_and(|p| sys::pid_status(p) == sys::PidStatus::Gone))
        {
            continue;
        }
        let path = base.join(&name);
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == sys::euid()) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// `meta.json` lets senders and `list --offline` find a named spool. It is
/// rewritten at every start, so `--no-offline` takes effect and lasts.
fn write_meta(dir: &Path, place: &Place, opts: &ServeOptions) -> Result<()> {
    // A meta.json that cannot be read (first start, or damaged) gets a
    // new creation time; the rest is this start's.
    let created_at = spool::Meta::read(dir)
        .ok()
        .and_then(|m| m.created_at)
        .unwrap_or_else(spool::now_secs);
    spool::Meta {
        accept_from: opts.policy.accept_from.clone(),
        created_at: Some(created_at),
        deny_from: opts.policy.deny_from.clone(),
        name: place.name.clone(),
        // Offline senders apply the agent's own sender rules.
        offline: !opts.no_offline,
        workspace: place.workspace.display().to_string(),
    }
    .write(dir)
}

/// With `--operator`, on Linux: the operators' socket too
/// (`registry::operators`), served by the same accept loop, whose uid
/// check lets in only the listed accounts and our own. It lives as long
/// as the process (an abstract socket leaves no file behind).
fn operators_socket(shared: &Arc<Shared>, id: &str) -> Result<()> {
    let linux = cfg!(any(target_os = "linux", target_os = "android"));
    if shared.operators.is_empty() || !linux {
        return Ok(());
    }
    let name = format!("@baton/{}/a-{id}.sock", sys::euid());
    let listener = registry::operators::listen(id).map_err(|e| {
        Error::Env(format!(
            "cannot listen on the operators' socket {name}: {e}"
        ))
    })?;
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("baton-accept".into())
        .spawn(move || server::accept_loop(listener, shared))
        .map_err(|e| Error::Env(format!("cannot start the listener thread: {e}")))?;
    Ok(())
}

/// `signals` as a channel a loop can select on (the foreground's, the
/// view's).
pub(crate) fn signal_channel(signals: &[i32]) -> Result<chan::Receiver<i32>> {
    let mut signals = signal_hook::iterator::Signals::new(signals)
        .map_err(|e| Error::Env(format!("cannot install signal handlers: {e}")))?;
    let (tx, rx) = chan::bounded(4);
    std::thread::Builder::new()
        .name("baton-signals".into())
        .spawn(move || {
            // SIGCHLD, where asked for, reaps a turn's orphans here.
            let _ = signals.forever().try_for_each(|sig| match sig {
                SIGCHLD => {
                    crate::base::reaper::reap_orphans();
                    Ok(())
                }
                sig => tx.send(sig),
            });
        })
        .map_err(|e| Error::Env(format!("cannot start the signal thread: {e}")))?;
    Ok(rx)
}
