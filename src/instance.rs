//! The foreground of `baton serve` (DESIGN §2, §9): startup in order, one
//! `select!` over listener events and signals, and shutdown in order. It
//! alone claims tasks and changes the instance's state.

use crate::config::{Config, Relay};
use crate::error::{Error, Result};
use crate::registry::{self, Manifest};
use crate::server::{self, Event, Policy, RpcError, Shared, State};
use crate::spool::{self, Claim, Spool};
use crate::sys;
use crate::turn;
use crossbeam_channel::{self as chan, select};
use serde_json::{Map, Value, json};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
}

/// The task an agent has claimed and not yet completed.
struct OpenTask {
    message_id: String,
}

struct Foreground {
    shared: Arc<Shared>,
    dir: PathBuf,
    open: Option<OpenTask>,
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
    let socket = registry::socket_path(&dir, &id);
    let limit = sys::max_socket_path();
    let len = socket.as_os_str().len();
    if len > limit {
        return Err(Error::Env(format!(
            "socket path {} is {len} bytes, over the {limit}-byte limit of sun_path: choose a shorter BATON_DIR",
            socket.display()
        )));
    }

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
    write_meta(&spool_dir, &name, &workspace)?;

    // Stale entries of dead instances go before we add our own.
    let ours = vec![registry::RegistryDir {
        path: dir.clone(),
        wire: registry::Wire::Jsonrpc,
    }];
    let found = registry::discover(&ours, None, config.io_timeout);
    registry::remove_stale(&dir, &found.skipped);

    let listener = UnixListener::bind(&socket).map_err(|e| Error::io("listen on", &socket, e))?;
    let sock_meta = fs::symlink_metadata(&socket).map_err(|e| Error::io("inspect", &socket, e))?;
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
    let shared = Arc::new(Shared::new(
        config.clone(),
        id.clone(),
        Arc::clone(&spool),
        manifest.clone(),
        registry::scan_dirs(&dir),
        opts.policy.clone(),
        paused,
        events_tx,
    ));
    let (accept_done_tx, accept_done) = chan::bounded::<()>(1);
    let accept = {
        let s = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("baton-accept".into())
            .spawn(move || {
                server::accept_loop(listener, s);
                let _ = accept_done_tx.send(());
            })
            .map_err(|e| Error::Env(format!("cannot start the listener thread: {e}")))?
    };
    let signals = signal_channel()?;
    // The listener is accepting: only now may peers find us.
    registry::publish(&dir, &manifest)?;
    eprintln!(
        "baton: {name} ({id}) serving {} on {}",
        workspace.display(),
        socket.display()
    );

    let mut fg = Foreground {
        shared: Arc::clone(&shared),
        dir: dir.clone(),
        open: None,
    };
    // A label, because `break` inside `select!` would only leave the macro.
    'run: loop {
        select! {
            recv(events_rx) -> ev => match ev {
                Ok(ev) => fg.handle(ev),
                Err(_) => break 'run,
            },
            recv(signals) -> _ => break 'run,
        }
    }

    // Shutdown, in the order of DESIGN §9.
    registry::unpublish(&dir, &id);
    shared.stopping.store(true, Ordering::SeqCst);
    // The accept thread is woken by a connection through our socket path.
    // If that path is no longer our socket (removed, or replaced by someone
    // else's), connecting would reach nothing or a stranger and the join
    // would hang: the thread is then left to end with the process.
    let ours = fs::symlink_metadata(&socket)
        .is_ok_and(|now| now.dev() == sock_meta.dev() && now.ino() == sock_meta.ino());
    if ours {
        // The wake-up connect runs on its own thread and the wait for the
        // accept thread is bounded: a full backlog cannot hang shutdown.
        let wake = socket.clone();
        let _ = std::thread::Builder::new()
            .name("baton-wake".into())
            .spawn(move || UnixStream::connect(wake).map(drop));
        let _ = accept_done.recv_timeout(std::time::Duration::from_secs(1));
        let _ = fs::remove_file(&socket);
    }
    drop(accept);
    spool.remove_if_ephemeral();
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

/// `meta.json` lets senders and `list --offline` find a named spool.
fn write_meta(dir: &Path, name: &str, workspace: &Path) -> Result<()> {
    let path = dir.join("meta.json");
    if fs::symlink_metadata(&path).is_ok() {
        return Ok(());
    }
    let meta = json!({
        "name": name,
        "workspace": workspace.display().to_string(),
        "created_at": spool::now_secs(),
        "offline": true,
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
    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Accepted { .. } | Event::Refused { .. } => {}
            Event::Call {
                method,
                params,
                reply,
            } => {
                let r = self.call(&method, &params);
                let _ = reply.send(r);
            }
        }
    }

    fn paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// Recomputes the state and republishes the manifest when it changed.
    fn refresh(&mut self) {
        let want = if self.paused() {
            State::Paused
        } else if self.open.is_some() {
            State::Busy
        } else {
            State::Ready
        };
        if want == self.shared.state() {
            return;
        }
        self.shared.set_state(want);
        let m = self
            .shared
            .manifest
            .lock()
            .expect("manifest poisoned")
            .clone();
        if let Err(e) = registry::publish(&self.dir, &m) {
            eprintln!("baton: {e}");
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
                self.refresh();
                Ok(json!({"state": self.shared.state().as_str(), "changed": changed}))
            }
            "control/status" => Ok(self.status()),
            "inbox/list" => {
                let (queued, processing, interrupted) = self.shared.spool.list();
                Ok(json!({"queued": queued, "processing": processing, "interrupted": interrupted}))
            }
            "inbox/claim" => Ok(self.claim()),
            "inbox/complete" => self.complete(params),
            "inbox/requeue" | "inbox/discard" => self.interrupted(method, params),
            _ => Err(RpcError::new(
                crate::wire::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    fn status(&self) -> Value {
        let m = self
            .shared
            .manifest
            .lock()
            .expect("manifest poisoned")
            .clone();
        let c = self.shared.spool.counts();
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
            "spool": self.shared.spool.dir().display().to_string(),
            "open_task": self.open.as_ref().map(|o| o.message_id.clone()),
            "queue": {
                "queued": c.queued,
                "processing": c.processing,
                "interrupted": c.interrupted,
                "max": self.shared.config.max_queue,
            },
        })
    }

    fn claim(&mut self) -> Value {
        if self.paused() {
            return json!({"status": "paused", "reason": server::reason::PAUSED});
        }
        if let Some(o) = &self.open {
            return json!({
                "status": "busy",
                "message_id": o.message_id,
                "reason": format!("task {} is still open: complete it first", o.message_id),
            });
        }
        let mut rejected = Vec::new();
        let result = loop {
            match self.shared.spool.claim() {
                Ok(Claim::Task(task)) => {
                    // Replying from a pull turn needs relay/send, which
                    // this version does not have: no hint is shown.
                    let envelope = turn::envelope(&task, false);
                    self.open = Some(OpenTask {
                        message_id: task.message_id.clone(),
                    });
                    break json!({
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
                        },
                    });
                }
                Ok(Claim::Empty) => break json!({"status": "empty"}),
                Ok(Claim::Rejected { message_id, reason }) => {
                    eprintln!(
                        "baton: task {message_id} is bad data and went to rejected/: {reason}"
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
        let id = message_id_param(params)?;
        if !self.shared.spool.is_interrupted(&id) {
            return Ok(json!({
                "status": "invalid",
                "message_id": id,
                "reason": format!("no interrupted task {}", crate::sanitize::escape(&id)),
            }));
        }
        let (r, status) = if method == "inbox/requeue" {
            (self.shared.spool.requeue(&id), "requeued")
        } else {
            (self.shared.spool.finish(&id, "discarded"), "discarded")
        };
        Ok(match r {
            Ok(()) => json!({"status": status, "message_id": id}),
            Err(e) => json!({"status": "error", "message_id": id, "reason": e.to_string()}),
        })
    }

    fn complete(&mut self, params: &Map<String, Value>) -> std::result::Result<Value, RpcError> {
        let id = message_id_param(params)?;
        let outcome = match params.get("outcome") {
            None | Some(Value::Null) => "done".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(RpcError::new(
                    crate::wire::INVALID_PARAMS,
                    "invalid params: outcome must be a string",
                ));
            }
        };
        let invalid =
            |reason: String| Ok(json!({"status": "invalid", "message_id": id, "reason": reason}));
        if !matches!(outcome.as_str(), "done" | "failed") {
            return invalid("outcome is not done or failed".into());
        }
        if params.get("reply").is_some_and(|r| !r.is_null()) {
            return invalid("replies are not supported by this version of baton".into());
        }
        match &self.open {
            Some(o) if o.message_id == id => {}
            _ => {
                return invalid(format!(
                    "task {} is not open here",
                    crate::sanitize::escape(&id)
                ));
            }
        }
        if let Err(e) = self.shared.spool.finish(&id, &outcome) {
            return Ok(json!({"status": "error", "message_id": id, "reason": e.to_string()}));
        }
        self.open = None;
        self.refresh();
        Ok(json!({"status": "completed", "message_id": id, "outcome": outcome}))
    }
}

fn message_id_param(params: &Map<String, Value>) -> std::result::Result<String, RpcError> {
    match params.get("message_id") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(RpcError::new(
            crate::wire::INVALID_PARAMS,
            "invalid params: message_id must be a string",
        )),
        None => Err(RpcError::new(
            crate::wire::INVALID_PARAMS,
            "invalid params: message_id is missing",
        )),
    }
}
