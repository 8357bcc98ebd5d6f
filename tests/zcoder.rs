//! zcoder interoperation (docs/zcoder.md, docs/protocol.md §9): a zcoder
//! peer written here from zcoder's description (its registry manifest,
//! one `ZCODER-AGENT/1 <n>\n` frame each way per connection, its statuses
//! and its sender check), and a raw frame sender, both spoken against the
//! real `baton` binary. As in zcoder, the manifest names the main process
//! (this test's), which is also the one that sends, while a child process
//! listens on the socket ("relay_start creates a background Zsh
//! listener"): `ListenerChild`.
//!
//! - baton → zcoder: discovery, plain `baton send`, the retry under the same
//!   id, sends made by an instance through `relay/send`, bodies byte for
//!   byte, a ping before every enqueue, every ack read to its end;
//! - zcoder → baton: every ack status on both of an instance's sockets,
//!   the precise status kept in the transcript, sender verification across
//!   the two registries;
//! - malformed and stalled frames, while native clients stay served;
//! - a peer that closes right after its request;
//! - `--zcoder` publishing.

use crate::util::{Env, RawClient, wait_until};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8] = b"ZCODER-AGENT/1 ";
/// Read and write deadline of the peer and of the raw sender.
const T: Duration = Duration::from_secs(5);
/// The fields of a zcoder manifest, exactly.
const MANIFEST_FIELDS: [&str; 11] = [
    "protocol",
    "instance_id",
    "pid",
    "project",
    "workspace",
    "session_id",
    "profile",
    "model",
    "socket",
    "state",
    "started_at",
];
/// A body with everything that must cross the frame unchanged: quotes,
/// backslashes, newlines, tabs, control bytes and multibyte text.
const TRICKY: &str = "rename \"users.name\" to 'users.display_name'\n\tC:\\tmp\\x \\n is not a newline\r\n\u{1} — 名前を変更 ✓ 🚀 e\u{301}";

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A fresh zcoder-style instance id `<our pid>-<12 digits>`.
fn new_id() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        100_000_000_000 + N.fetch_add(1, Ordering::Relaxed)
    )
}

fn valid_id(id: &str) -> bool {
    (1..=100).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A private zcoder registry in the test world (mode 0700), canonical.
fn zcoder_dir(env: &Env) -> PathBuf {
    let d = env.root.join("zc");
    fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    fs::canonicalize(&d).unwrap()
}

/// Publishes a flat manifest as zcoder does: a private temporary file
/// renamed into place.
fn write_manifest(dir: &Path, id: &str, m: &Value) {
    let tmp = dir.join(format!(".t-{id}"));
    fs::write(&tmp, m.to_string()).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).unwrap();
    fs::rename(&tmp, dir.join(format!("a-{id}.json"))).unwrap();
}

/// A zcoder manifest for `id` in `dir` (its pid is the one in the id).
fn zcoder_manifest(dir: &Path, id: &str, project: &str, workspace: &str) -> Value {
    let pid: u64 = id.split('-').next().unwrap().parse().unwrap();
    json!({
        "protocol": 1, "instance_id": id, "pid": pid, "project": project,
        "workspace": workspace, "session_id": "1788012120_10392", "profile": "coding",
        "model": "qwen3-coder", "socket": s(&dir.join(format!("a-{id}.sock"))),
        "state": "ready", "started_at": 1788012102u64,
    })
}

/// zcoder's background listener: a child process that listens on a socket
/// (`LISTEN_PY`, on the descriptor it inherits as 3). The kernel names the
/// process that last called `listen` on a socket as its listener
/// (`SO_PEERCRED`), so to baton the socket is served by this child, while
/// the manifest names its parent, as zcoder's names its main process.
/// Killed by its pid when dropped.
pub(crate) struct ListenerChild {
    child: std::process::Child,
    /// The listening process: `child`, or what it started.
    listener: u32,
}

/// Listens on descriptor 3, says `ready` and its pid, and waits for its
/// standard input to end.
pub(crate) const LISTEN_PY: &str = "import os, socket, sys\n\
s = socket.socket(fileno=3)\n\
s.listen(64)\n\
print('ready', os.getpid(), flush=True)\n\
sys.stdin.read()\n";

impl ListenerChild {
    /// A child (python3) listens on `listener`, which this process bound
    /// and may go on accepting on.
    pub(crate) fn take_over(listener: &UnixListener) -> ListenerChild {
        ListenerChild::start(listener, &["python3", "-c", LISTEN_PY])
    }

    /// Binds `socket` and has a child listen on it; this process keeps no
    /// descriptor of it, as zcoder's main process keeps none.
    pub(crate) fn serve(socket: &Path) -> ListenerChild {
        let listener =
            UnixListener::bind(socket).unwrap_or_else(|e| panic!("bind {}: {e}", socket.display()));
        ListenerChild::take_over(&listener)
    }

    /// Runs `argv` (`LISTEN_PY`, or a program that runs it) with
    /// `listener` as its descriptor 3; waits (bounded) for its `ready`
    /// line.
    pub(crate) fn start(listener: &UnixListener, argv: &[&str]) -> ListenerChild {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = listener.as_raw_fd();
        let mut cmd = std::process::Command::new(argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        // SAFETY: between fork and exec only dup2(2) and fcntl(2), both
        // async-signal-safe, on a descriptor `listener` keeps open until
        // `spawn` returns.
        unsafe {
            cmd.pre_exec(move || {
                let r = if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 3)
                };
                if r == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn the listener child");
        let ready = ready_line(&mut child);
        let listener = ready
            .as_deref()
            .ok()
            .and_then(|l| l.strip_prefix("ready "))
            .and_then(|pid| pid.trim().parse().ok());
        let Some(listener) = listener else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the listener child did not start: {ready:?}");
        };
        ListenerChild { child, listener }
    }

    /// The pid the kernel names as the socket's listener.
    pub(crate) fn pid(&self) -> u32 {
        self.listener
    }
}

impl Drop for ListenerChild {
    fn drop(&mut self) {
        if self.listener != self.child.id() {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid
            // is the listener this test started, which its parent (not
            // yet reaped) waits for.
            unsafe {
                libc::kill(self.listener as libc::pid_t, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first line `child` prints, waited for `T` at most.
fn ready_line(
    child: &mut std::process::Child,
) -> Result<String, crossbeam_channel::RecvTimeoutError> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(T)
}

/// Whether python3, which the listener child runs, is here (else the
/// test is skipped, or fails under BATON_REQUIRE_ALL=1).
fn python() -> bool {
    crate::util::have("python3")
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("ZCODER-AGENT/1 {}\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Reads one frame: the header (at most 40 bytes, one at a time so that
/// nothing past the frame is consumed) and exactly the declared payload.
/// `Ok(None)`: the connection closed before any byte.
fn read_frame(c: &mut UnixStream) -> Result<Option<Vec<u8>>, String> {
    let mut header = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match c.read(&mut byte) {
            Ok(0) if header.is_empty() => return Ok(None),
            Ok(0) => {
                return Err(format!(
                    "closed in the header after {:?}",
                    String::from_utf8_lossy(&header)
                ));
            }
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => header.push(byte[0]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the header: {e}")),
        }
        if header.len() > 40 {
            return Err("header longer than 40 bytes".into());
        }
    }
    let digits = header
        .strip_prefix(MAGIC)
        .ok_or_else(|| format!("bad header {:?}", String::from_utf8_lossy(&header)))?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!("bad length {:?}", String::from_utf8_lossy(&header)));
    }
    let n: usize = std::str::from_utf8(digits).unwrap().parse().unwrap();
    let mut payload = vec![0u8; n];
    c.read_exact(&mut payload)
        .map_err(|e| format!("payload of {n} bytes: {e}"))?;
    Ok(Some(payload))
}

/// One flat JSON object: every value a string, a number or a boolean.
fn flat_object(payload: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice(payload) {
        Ok(Value::Object(m)) => {
            if let Some((k, _)) = m
                .iter()
                .find(|(_, v)| matches!(v, Value::Object(_) | Value::Array(_) | Value::Null))
            {
                return Err(format!("field {k} is not a scalar"));
            }
            Ok(m)
        }
        Ok(other) => Err(format!("not an object: {other}")),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

// ---------------------------------------------------------------------
// The zcoder peer.

/// One connection as the peer saw it.
#[derive(Clone, Debug)]
struct Conn {
    request: Result<Map<String, Value>, String>,
    /// The status decided; `None` when the request was unreadable.
    status: Option<String>,
    /// Whether the ack was written completely.
    ack_written: bool,
    /// After the ack: `Ok` when the client then closed having read all of
    /// it; otherwise what happened instead.
    after_ack: Result<(), String>,
}

impl Conn {
    fn kind(&self) -> &str {
        match &self.request {
            Ok(r) => r.get("type").and_then(Value::as_str).unwrap_or("?"),
            Err(_) => "unreadable",
        }
    }

    fn field(&self, k: &str) -> Value {
        match &self.request {
            Ok(r) => r.get(k).cloned().unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }
}

struct PeerState {
    paused: bool,
    max_queue: usize,
    /// The stricter sender check the seed also describes ("Receiving an
    /// agent turn"): the sender id begins with the sender pid, its manifest
    /// is in this registry with that pid, and the process is alive. Off by
    /// default: zcoder's listener checks the sender fields' presence and
    /// form only ("sender metadata is useful context, not trusted proof").
    strict: bool,
    /// Store the next enqueue but close without an ack, as a listener that
    /// died after storing would.
    drop_next_ack: bool,
    /// Accepted tasks: (message id, body).
    queue: Vec<(String, String)>,
    log: Vec<Conn>,
}

struct ZPeer {
    id: String,
    dir: PathBuf,
    socket: PathBuf,
    /// What the kernel names as the socket's listener; this process
    /// accepts on it too.
    _listener: ListenerChild,
    state: Arc<Mutex<PeerState>>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ZPeer {
    /// Listens on `<dir>/a-<id>.sock`, then publishes `a-<id>.json`, as
    /// zcoder does; one connection at a time, like zcoder's listener. The
    /// kernel names a child as the listener (`ListenerChild`), the
    /// manifest this process.
    fn start(dir: &Path, project: &str, workspace: &str) -> ZPeer {
        let id = new_id();
        let socket = dir.join(format!("a-{id}.sock"));
        let listener = UnixListener::bind(&socket).unwrap();
        let child = ListenerChild::take_over(&listener);
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(Mutex::new(PeerState {
            paused: false,
            max_queue: 16,
            strict: false,
            drop_next_ack: false,
            queue: Vec::new(),
            log: Vec::new(),
        }));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, accepted, stop) = (state.clone(), accepted.clone(), stop.clone());
            let (id, dir) = (id.clone(), dir.to_path_buf());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            serve_one(conn, &state, &id, &dir);
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        write_manifest(dir, &id, &zcoder_manifest(dir, &id, project, workspace));
        ZPeer {
            id,
            dir: dir.to_path_buf(),
            socket,
            _listener: child,
            state,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut PeerState) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    /// Waits until every accepted connection has been recorded, and
    /// returns the record.
    fn log(&self) -> Vec<Conn> {
        wait_until("the zcoder peer to finish its connections", T, || {
            self.with(|p| p.log.len()) == self.accepted.load(Ordering::SeqCst)
        });
        self.with(|p| p.log.clone())
    }
}

impl Drop for ZPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = fs::remove_file(self.dir.join(format!("a-{}.json", self.id)));
        let _ = fs::remove_file(&self.socket);
    }
}

fn serve_one(mut conn: UnixStream, state: &Mutex<PeerState>, id: &str, dir: &Path) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(T)).unwrap();
    conn.set_write_timeout(Some(T)).unwrap();
    let request = match read_frame(&mut conn) {
        Ok(Some(p)) => flat_object(&p),
        Ok(None) => Err("closed before a byte".into()),
        Err(e) => Err(e),
    };
    let mut rec = Conn {
        request: request.clone(),
        status: None,
        ack_written: false,
        after_ack: Err("no ack was written".into()),
    };
    let Ok(req) = request else {
        state.lock().unwrap().log.push(rec);
        return;
    };
    let (status, ack, drop_it) = state.lock().unwrap().decide(&req, id, dir);
    rec.status = Some(status);
    if !drop_it {
        // A client that closes right after its request is caught here (the
        // write fails once it is gone) or just below (it closed with the
        // ack unread).
        rec.ack_written = conn.write_all(&ack).and_then(|_| conn.flush()).is_ok();
        if rec.ack_written {
            // A client that closes with part of the ack unread makes the
            // kernel report a reset here instead of EOF.
            let mut more = [0u8; 64];
            // (EINTR comes without a signal handler when the whole process
            // is stopped and resumed: read again.)
            let read = loop {
                match conn.read(&mut more) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    r => break r,
                }
            };
            rec.after_ack = match read {
                Ok(0) => Ok(()),
                Ok(n) => Err(format!("the client sent {n} more bytes")),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    Err("the client closed without reading the whole ack".into())
                }
                Err(e) => Err(format!("the client did not close: {e}")),
            };
        }
    }
    state.lock().unwrap().log.push(rec);
}

impl PeerState {
    /// The status for one request, its ack frame, and whether to drop the
    /// connection instead of answering.
    fn decide(
        &mut self,
        req: &Map<String, Value>,
        id: &str,
        dir: &Path,
    ) -> (String, Vec<u8>, bool) {
        let message_id = req
            .get("message_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = req.get("type").and_then(Value::as_str).unwrap_or("");
        let mut position = None;
        let status = if req.get("protocol") != Some(&json!(1)) {
            "unsupported"
        } else {
            match kind {
                "ping" => match req.get("target_instance_id") {
                    Some(Value::String(t)) if t != id => "wrong_target",
                    _ => "pong",
                },
                "enqueue" => self.enqueue(req, &message_id, id, dir, &mut position),
                _ => "unsupported",
            }
        };
        let drop_it = kind == "enqueue" && std::mem::take(&mut self.drop_next_ack);
        let mut ack = json!({
            "protocol": 1, "type": "ack", "message_id": message_id, "status": status,
            "state": if self.paused { "paused" } else { "ready" },
        });
        if let Some(p) = position {
            ack["queue_position"] = json!(p);
        }
        (
            status.to_string(),
            frame(ack.to_string().as_bytes()),
            drop_it,
        )
    }

    fn enqueue(
        &mut self,
        req: &Map<String, Value>,
        message_id: &str,
        id: &str,
        dir: &Path,
        position: &mut Option<usize>,
    ) -> &'static str {
        if req.get("target_instance_id").and_then(Value::as_str) != Some(id) {
            return "wrong_target";
        }
        if !valid_id(message_id) {
            return "invalid";
        }
        let Some(body) = req
            .get("body")
            .and_then(Value::as_str)
            .filter(|b| !b.trim().is_empty())
        else {
            return "invalid";
        };
        if !sender_fields_valid(req) || (self.strict && !verified(req, dir)) {
            return "invalid";
        }
        if self.queue.iter().any(|(m, _)| m == message_id) {
            return "duplicate";
        }
        if self.paused {
            return "paused";
        }
        if self.queue.len() >= self.max_queue {
            return "full";
        }
        self.queue.push((message_id.to_string(), body.to_string()));
        *position = Some(self.queue.len());
        "accepted"
    }
}

/// What zcoder's listener requires of every enqueue's sender, as context
/// (it looks neither up): a `sender_instance_id` of the id grammar and a
/// positive integer `sender_pid`.
fn sender_fields_valid(req: &Map<String, Value>) -> bool {
    let id = req.get("sender_instance_id").and_then(Value::as_str);
    let pid = req.get("sender_pid").and_then(Value::as_u64);
    id.is_some_and(valid_id) && pid.is_some_and(|p| p > 0)
}

/// The seed's stricter sender check.
fn verified(req: &Map<String, Value>, dir: &Path) -> bool {
    let (Some(sid), Some(pid)) = (
        req.get("sender_instance_id").and_then(Value::as_str),
        req.get("sender_pid").and_then(Value::as_u64),
    ) else {
        return false;
    };
    if !valid_id(sid) || !sid.starts_with(&format!("{pid}-")) {
        return false;
    }
    let Ok(bytes) = fs::read(dir.join(format!("a-{sid}.json"))) else {
        return false;
    };
    let Ok(m) = flat_object(&bytes) else {
        return false;
    };
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid_t, 0) } == 0;
    m.get("pid") == Some(&json!(pid)) && m.get("instance_id") == Some(&json!(sid)) && alive
}

// ---------------------------------------------------------------------
// The sending side: raw frames to a baton socket.

/// What a socket answered one raw request with.
struct Reply {
    /// The answer frame's flat object; `None` when the connection closed
    /// without a byte.
    ack: Option<Map<String, Value>>,
    elapsed: Duration,
}

/// Connects, writes `request` as given (shutting down our writing half if
/// `close_write`), reads one whole answer frame, and checks that the
/// server then closed: one frame per connection.
fn exchange(socket: &Path, request: &[u8], close_write: bool) -> Reply {
    let mut c =
        UnixStream::connect(socket).unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    c.set_read_timeout(Some(T)).unwrap();
    c.set_write_timeout(Some(T)).unwrap();
    let start = Instant::now();
    c.write_all(request).unwrap();
    if close_write {
        c.shutdown(Shutdown::Write).unwrap();
    }
    let ack = match read_frame(&mut c) {
        Ok(Some(p)) => Some(
            flat_object(&p)
                .unwrap_or_else(|e| panic!("answer frame {:?}: {e}", String::from_utf8_lossy(&p))),
        ),
        Ok(None) => None,
        Err(e) => panic!(
            "answer to {:?}: {e}",
            String::from_utf8_lossy(&request[..request.len().min(80)])
        ),
    };
    let elapsed = start.elapsed();
    let mut rest = Vec::new();
    match c.read_to_end(&mut rest) {
        Ok(_) => assert!(
            rest.is_empty(),
            "bytes after the answer frame: {:?}",
            String::from_utf8_lossy(&rest)
        ),
        Err(e) => panic!("the server did not close after its answer: {e}"),
    }
    Reply { ack, elapsed }
}

/// Sends one request frame and returns the ack.
fn zsend(socket: &Path, request: &Value) -> Map<String, Value> {
    exchange(socket, &frame(request.to_string().as_bytes()), false)
        .ack
        .unwrap_or_else(|| panic!("no answer to {request}"))
}

/// Checks an ack exactly: its fields, and `queue_position` only when given.
#[track_caller]
fn assert_ack(
    ack: &Map<String, Value>,
    message_id: &str,
    status: &str,
    state: &str,
    position: Option<u64>,
) {
    let mut want = json!({"protocol": 1, "type": "ack", "message_id": message_id,
                          "status": status, "state": state});
    if let Some(p) = position {
        want["queue_position"] = json!(p);
    }
    assert_eq!(Value::Object(ack.clone()), want);
}

fn ping(target: &str, message_id: &str) -> Value {
    json!({"protocol": 1, "type": "ping", "message_id": message_id, "target_instance_id": target})
}

/// An enqueue as zcoder sends it, with no sender identity.
fn enqueue(target: &str, message_id: &str, body: &str) -> Value {
    json!({
        "protocol": 1, "type": "enqueue", "message_id": message_id,
        "target_instance_id": target, "body": body, "created_at": now(),
    })
}

/// An enqueue claiming to come from zcoder instance `sender` (its pid is
/// the one in its id).
fn enqueue_from(target: &str, message_id: &str, body: &str, sender: &str) -> Value {
    let mut e = enqueue(target, message_id, body);
    e["sender_instance_id"] = json!(sender);
    e["sender_pid"] = json!(sender.split('-').next().unwrap().parse::<u64>().unwrap());
    e["sender_project"] = json!("user profiles");
    e["sender_workspace"] = json!("/work/app/services/user-profiles");
    e
}

// ---------------------------------------------------------------------
// CLI helpers.

#[track_caller]
fn json_out(out: &crate::util::Output, what: &str) -> Value {
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}); status {}\nstdout: {}\nstderr: {}",
            out.status, out.stdout, out.stderr
        )
    })
}

/// `baton <args> --json` with the zcoder registry set; returns the exit
/// status and the JSON printed.
#[track_caller]
fn baton_json(env: &Env, zdir: &Path, extra: &[(&str, &str)], args: &[&str]) -> (i32, Value) {
    let mut vars = vec![("ZCODER_RELAY_DIR", s(zdir))];
    vars.extend_from_slice(extra);
    let mut full = args.to_vec();
    full.push("--json");
    let out = env.run_with(&vars, None, &full, None);
    let v = json_out(&out, &format!("baton {args:?}"));
    (out.status, v)
}

/// The events `baton log NAME --json` prints.
fn log_events(env: &Env, zdir: &Path, name: &str) -> Vec<Value> {
    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", s(zdir))],
        None,
        &["log", name, "--json"],
        None,
    );
    assert_eq!(out.status, 0, "baton log: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line {l:?}: {e}")))
        .collect()
}

/// The `message.rejected` event of `message_id`.
#[track_caller]
fn rejected(events: &[Value], message_id: &str) -> Value {
    let hits: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "message.rejected" && e["message_id"] == message_id)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "message.rejected for {message_id}: {events:?}"
    );
    hits[0].clone()
}

fn keys(m: &Map<String, Value>) -> BTreeSet<&str> {
    m.keys().map(String::as_str).collect()
}

// ---------------------------------------------------------------------
// The peer's own checks work.

#[test]
fn zcoder_peer_catches_clients_that_do_not_read_the_whole_ack() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "self check", "/work/self-check");
    let request = frame(ping(&peer.id, "p-1").to_string().as_bytes());

    // Closes right after the request: the ack cannot be written.
    let mut c = UnixStream::connect(&peer.socket).unwrap();
    c.write_all(&request).unwrap();
    drop(c);
    // Waits until the ack has arrived, but closes without reading it.
    let mut c = UnixStream::connect(&peer.socket).unwrap();
    c.write_all(&request).unwrap();
    wait_until("the ack to arrive", T, || readable(&c));
    drop(c);
    // Reads the whole ack, then closes, as baton does.
    let mut c = UnixStream::connect(&peer.socket).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    c.write_all(&request).unwrap();
    let ack = flat_object(&read_frame(&mut c).unwrap().unwrap()).unwrap();
    drop(c);
    assert_ack(&ack, "p-1", "pong", "ready", None);

    let log = peer.log();
    assert_eq!(log.len(), 3);
    assert!(
        !log[0].ack_written
            || log[0].after_ack == Err("the client closed without reading the whole ack".into()),
        "{:?}",
        log[0]
    );
    assert!(log[1].ack_written, "{:?}", log[1]);
    assert_eq!(
        log[1].after_ack,
        Err("the client closed without reading the whole ack".to_string())
    );
    assert!(
        log[2].ack_written && log[2].after_ack.is_ok(),
        "{:?}",
        log[2]
    );
}

// ---------------------------------------------------------------------
// baton → zcoder.

/// Issue 46: a zcoder peer keeps zcoder's own limit (16,000) while
/// baton's default is 1 MiB: a longer body is refused before any frame
/// carries it (the peer is only pinged, to find it), naming the limit
/// and the peer; one at the limit is sent.
#[test]
fn a_zcoder_peer_keeps_its_own_body_limit() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "weekly digest", "/work/weekly-digest");
    let over = "x".repeat(16_001);
    let (code, r) = baton_json(&env, &zdir, &[], &["send", "weekly_digest", &over]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "invalid", "{r}");
    assert_eq!(
        r["reason"],
        "the message is 16001 bytes; weekly_digest accepts at most 16000 (zcoder's own limit)"
    );
    let kinds: Vec<String> = peer.log().iter().map(|c| c.kind().to_string()).collect();
    assert!(kinds.iter().all(|k| k == "ping"), "{kinds:?}");
    let at = "x".repeat(16_000);
    let (code, r) = baton_json(&env, &zdir, &[], &["send", "weekly_digest", &at]);
    assert_eq!((code, &r["status"]), (0, &json!("accepted")), "{r}");
    assert_eq!(peer.with(|p| p.queue.len()), 1);
}

#[test]
fn baton_sends_to_a_zcoder_peer() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "weekly digest", "/work/app/services/weekly-digest");
    let pid = std::process::id();

    // Discovery: the peer is listed once, as a zcoder instance.
    let (code, list) = baton_json(&env, &zdir, &[], &["list"]);
    assert_eq!(code, 0);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["instance_id"], peer.id.as_str());
    assert_eq!(list[0]["wire"], "zcoder");
    assert_eq!(list[0]["name"], "weekly_digest");
    assert_eq!(list[0]["project"], "weekly digest");
    assert_eq!(list[0]["pid"], pid);
    assert_eq!(list[0]["state"], "ready");

    // Plain sends: accepted at positions 1 and 2, bodies intact.
    let bodies = [TRICKY, "second task: \"quoted\" \\ back\\slash\tand tab"];
    let t0 = now();
    for (i, body) in bodies.iter().enumerate() {
        let mid = format!("cli-{}", i + 1);
        let (code, r) = baton_json(
            &env,
            &zdir,
            &[],
            &["send", "weekly_digest", body, "--message-id", &mid],
        );
        assert_eq!(code, 0, "{r}");
        assert_eq!(
            r,
            json!({"status": "accepted", "message_id": mid, "queue_position": i + 1,
                   "state": "ready",
                   "target": {"instance_id": peer.id, "name": "weekly_digest"}})
        );
    }
    let t1 = now();
    // The same id again is a duplicate, and exits 0.
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[],
        &["send", "weekly_digest", bodies[1], "--message-id", "cli-2"],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "duplicate");
    assert!(r.get("queue_position").is_none(), "{r}");

    // A paused peer: `paused`, exit 1, in text as well.
    peer.with(|p| p.paused = true);
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[],
        &[
            "send",
            "weekly_digest",
            "while paused",
            "--message-id",
            "cli-3",
        ],
    );
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "paused");
    assert_eq!(r["state"], "paused");
    assert_eq!(r["reason"], "the zcoder instance answered paused");
    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        None,
        &[
            "send",
            "weekly_digest",
            "while paused",
            "--message-id",
            "cli-3",
        ],
        None,
    );
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "baton: weekly_digest ({}) refused message cli-3: paused: the zcoder instance answered paused\n",
            peer.id
        )
    );
    // A full one: `full`, exit 1.
    peer.with(|p| {
        p.paused = false;
        p.max_queue = 2;
    });
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[],
        &["send", "weekly_digest", "no room", "--message-id", "cli-4"],
    );
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "full");
    assert_eq!(r["reason"], "the zcoder instance answered full");

    // The peer stores the task but dies before its ack: the send is
    // retried once with the same id, which the peer knows.
    peer.with(|p| {
        p.max_queue = 16;
        p.drop_next_ack = true;
    });
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[],
        &[
            "send",
            "weekly_digest",
            "stored, unanswered",
            "--message-id",
            "cli-5",
        ],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "duplicate", "{r}");

    // Sent by an instance (relay/send): the frame names that instance.
    let ws = env.workspace("user-profiles");
    let a = env.serve_with(
        &ws,
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        &["--name", "user-profiles"],
    );
    let t2 = now();
    let sock = a.socket.display().to_string();
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[("BATON_SOCKET", &sock)],
        &["send", "weekly_digest", TRICKY],
    );
    let t3 = now();
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], 4, "cli-1, cli-2, cli-5, this: {r}");
    let relayed_id = r["message_id"].as_str().unwrap().to_string();
    assert!(relayed_id.starts_with(&format!("{}-", a.id)), "{r}");

    let log = peer.log();
    let enqueues: Vec<&Conn> = log.iter().filter(|c| c.kind() == "enqueue").collect();
    let ids: Vec<&str> = enqueues
        .iter()
        .map(|c| c.request.as_ref().unwrap()["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "cli-1",
            "cli-2",
            "cli-2",
            "cli-3",
            "cli-3",
            "cli-4",
            "cli-5",
            "cli-5",
            relayed_id.as_str()
        ]
    );
    let statuses: Vec<&str> = enqueues
        .iter()
        .map(|c| c.status.as_deref().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "accepted",
            "accepted",
            "duplicate",
            "paused",
            "paused",
            "full",
            "accepted",
            "duplicate",
            "accepted"
        ]
    );
    // Plain sends name the command line as their sender (`cli-<pid>`, its
    // own pid), as zcoder requires; all carry zcoder's fields.
    let plain: BTreeSet<&str> = [
        "protocol",
        "type",
        "message_id",
        "target_instance_id",
        "body",
        "created_at",
        "sender_instance_id",
        "sender_pid",
    ]
    .into();
    for c in &enqueues[..enqueues.len() - 1] {
        let req = c.request.as_ref().unwrap();
        assert_eq!(keys(req), plain, "{req:?}");
        assert_eq!(req["protocol"], 1);
        assert_eq!(req["target_instance_id"], peer.id.as_str());
        let pid = req["sender_pid"].as_u64().unwrap();
        assert_eq!(req["sender_instance_id"], format!("cli-{pid}"), "{req:?}");
    }
    for c in &enqueues[..2] {
        let at = c.field("created_at").as_u64().unwrap();
        assert!(
            (t0..=t1).contains(&at),
            "created_at {at} not in {t0}..={t1}"
        );
    }
    let relayed = enqueues.last().unwrap().request.as_ref().unwrap();
    let mut full = plain.clone();
    full.extend(["sender_project", "sender_workspace"]);
    assert_eq!(keys(relayed), full, "{relayed:?}");
    assert_eq!(relayed["sender_instance_id"], a.id.as_str());
    assert_eq!(relayed["sender_pid"], a.pid());
    assert_eq!(relayed["sender_project"], "user-profiles");
    assert_eq!(relayed["sender_workspace"], s(&ws));
    let at = relayed["created_at"].as_u64().unwrap();
    assert!(
        (t2..=t3).contains(&at),
        "created_at {at} not in {t2}..={t3}"
    );

    // Bodies arrived byte for byte, once each.
    let queue = peer.with(|p| p.queue.clone());
    assert_eq!(
        queue,
        [
            ("cli-1".to_string(), bodies[0].to_string()),
            ("cli-2".to_string(), bodies[1].to_string()),
            ("cli-5".to_string(), "stored, unanswered".to_string()),
            (relayed_id.clone(), TRICKY.to_string()),
        ]
    );

    // A ping to this very peer came right before each enqueue, and every
    // ack written was read to its end before the client closed.
    for (i, c) in log.iter().enumerate() {
        match c.kind() {
            "enqueue" => {
                let prev = &log[i.checked_sub(1).expect("an enqueue came first")];
                assert_eq!(prev.kind(), "ping", "before {:?}", c.request);
                assert_eq!(prev.field("target_instance_id"), json!(peer.id));
                assert_eq!(prev.status.as_deref(), Some("pong"));
            }
            "ping" => assert_eq!(c.status.as_deref(), Some("pong"), "{c:?}"),
            other => panic!("unexpected request {other}: {c:?}"),
        }
        let dropped = c.field("message_id") == "cli-5"
            && !c.ack_written
            && c.status.as_deref() == Some("accepted");
        if !dropped {
            assert!(c.ack_written, "ack not written: {c:?}");
            assert_eq!(c.after_ack, Ok(()), "{c:?}");
        }
    }
    assert_eq!(
        log.iter().filter(|c| !c.ack_written).count(),
        1,
        "only the deliberately dropped ack is missing"
    );
}

#[test]
fn a_strict_zcoder_peer_accepts_only_senders_in_its_registry() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "weekly digest", "/work/app/services/weekly-digest");
    peer.with(|p| p.strict = true);
    let zvars = [("ZCODER_RELAY_DIR", s(&zdir))];

    // A plain command line has no instance zcoder could check.
    let (code, r) = baton_json(&env, &zdir, &[], &["send", "weekly_digest", "plain"]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "invalid");

    // An instance published only in baton's registry is unknown to zcoder.
    let ws_a = env.workspace("only-baton");
    let a = env.serve_with(&ws_a, &zvars, &["--name", "only-baton"]);
    let sock_a = a.socket.display().to_string();
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[("BATON_SOCKET", &sock_a)],
        &["send", "weekly_digest", "from a"],
    );
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "invalid");

    // With --zcoder it is in zcoder's registry too, and passes.
    let ws_b = env.workspace("both");
    let b = env.serve_with(&ws_b, &zvars, &["--name", "both", "--zcoder"]);
    wait_until("b's zcoder manifest", T, || {
        zdir.join(format!("a-{}.json", b.id)).exists()
    });
    let sock_b = b.socket.display().to_string();
    let (code, r) = baton_json(
        &env,
        &zdir,
        &[("BATON_SOCKET", &sock_b)],
        &["send", "weekly_digest", "from b"],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "accepted");
    assert_eq!(r["queue_position"], 1);
    let queue = peer.with(|p| p.queue.clone());
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].1, "from b");
    let log = peer.log();
    let last = log.last().unwrap();
    assert_eq!(last.field("sender_instance_id"), json!(b.id));
    assert_eq!(last.field("sender_pid"), json!(b.pid()));
    assert!(log.iter().all(|c| c.ack_written && c.after_ack.is_ok()));
}

// ---------------------------------------------------------------------
// zcoder → baton.

#[test]
fn zcoder_frames_get_every_status_on_both_sockets() {
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let ws = env.workspace("digest");
    let b = env.serve_with(
        &ws,
        &[("ZCODER_RELAY_DIR", s(&zdir)), ("BATON_MAX_QUEUE", "2")],
        &["--name", "digest", "--zcoder"],
    );
    let zsock = zdir.join(format!("a-{}.sock", b.id));
    let native = b.socket.clone();
    let id = b.id.as_str();
    for sock in [&native, &zsock] {
        assert_ack(&zsend(sock, &ping(id, "p-1")), "p-1", "pong", "ready", None);
        // zcoder's ping names no target when it only probes.
        let probe = json!({"protocol": 1, "type": "ping", "message_id": "p-2"});
        assert_ack(&zsend(sock, &probe), "p-2", "pong", "ready", None);
        assert_ack(
            &zsend(sock, &ping("1-000000000000", "p-3")),
            "p-3",
            "wrong_target",
            "ready",
            None,
        );
    }

    // Accepted at 1 (native socket) and 2 (zcoder socket).
    let body2 = "second \"task\"\n\tdone";
    assert_ack(
        &zsend(&native, &enqueue(id, "z-1", TRICKY)),
        "z-1",
        "accepted",
        "ready",
        Some(1),
    );
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-2", body2)),
        "z-2",
        "accepted",
        "ready",
        Some(2),
    );
    // The same id and body again: duplicate, on either socket; another
    // body under that id: invalid.
    for sock in [&native, &zsock] {
        assert_ack(
            &zsend(sock, &enqueue(id, "z-1", TRICKY)),
            "z-1",
            "duplicate",
            "ready",
            None,
        );
    }
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-1", "another body")),
        "z-1",
        "invalid",
        "ready",
        None,
    );
    // BATON_MAX_QUEUE=2: full.
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-3", "third")),
        "z-3",
        "full",
        "ready",
        None,
    );

    // The body arrives intact; the sender is the plain one it is.
    let (code, c) = baton_json(&env, &zdir, &[], &["inbox", "claim", "digest"]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["status"], "claimed");
    assert_eq!(c["task"]["message_id"], "z-1");
    assert_eq!(c["task"]["body"], TRICKY);
    assert_eq!(
        c["task"]["sender"],
        json!({"pid": std::process::id(), "workspace": s(&std::env::current_dir().unwrap().canonicalize().unwrap())})
    );
    // An open task makes the instance busy.
    assert_ack(
        &zsend(&zsock, &ping(id, "p-4")),
        "p-4",
        "pong",
        "busy",
        None,
    );
    let out = env.run(&["inbox", "complete", "digest", "z-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);

    // Paused: `paused`, and the ack says so.
    let out = env.run(&["pause", "digest"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-3", "third")),
        "z-3",
        "paused",
        "paused",
        None,
    );
    assert_ack(
        &zsend(&native, &ping(id, "p-5")),
        "p-5",
        "pong",
        "paused",
        None,
    );
    let out = env.run(&["resume", "digest"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-3", "third")),
        "z-3",
        "accepted",
        "ready",
        Some(2),
    );

    // Another instance's id: wrong_target. Unknown type or protocol:
    // unsupported. Bad values: invalid.
    assert_ack(
        &zsend(&zsock, &enqueue("1-000000000000", "z-4", "x")),
        "z-4",
        "wrong_target",
        "ready",
        None,
    );
    let mut other = enqueue(id, "z-5", "x");
    other["type"] = json!("other");
    assert_ack(&zsend(&zsock, &other), "z-5", "unsupported", "ready", None);
    for kind in ["ping", "enqueue"] {
        let mut v2 = enqueue(id, "z-6", "x");
        v2["type"] = json!(kind);
        v2["protocol"] = json!(2);
        assert_ack(&zsend(&native, &v2), "z-6", "unsupported", "ready", None);
    }
    let mut no_type = enqueue(id, "z-7", "x");
    no_type.as_object_mut().unwrap().remove("type");
    assert_ack(
        &zsend(&zsock, &no_type),
        "z-7",
        "unsupported",
        "ready",
        None,
    );
    assert_ack(
        &zsend(&zsock, &enqueue(id, "z-8", " \n\t ")),
        "z-8",
        "invalid",
        "ready",
        None,
    );
    assert_ack(
        &zsend(&zsock, &enqueue(id, "bad id", "x")),
        "bad id",
        "invalid",
        "ready",
        None,
    );
    let mut numeric = enqueue(id, "z-9", "x");
    numeric["body"] = json!(42);
    assert_ack(&zsend(&zsock, &numeric), "z-9", "invalid", "ready", None);
    let mut relative = enqueue(id, "z-10", "x");
    relative["sender_workspace"] = json!("relative/path");
    assert_ack(&zsend(&zsock, &relative), "z-10", "invalid", "ready", None);

    // What was accepted, in order.
    let (_, list) = baton_json(&env, &zdir, &[], &["inbox", "list", "digest"]);
    let queued: Vec<&str> = list["queued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(queued, ["z-2", "z-3"], "{list}");
    let (_, c) = baton_json(&env, &zdir, &[], &["inbox", "claim", "digest"]);
    assert_eq!(c["task"]["body"], body2);
}

#[test]
fn zcoder_senders_are_verified_and_refusals_keep_their_precise_status() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let ws = env.workspace("recv");
    let b = env.serve_with(
        &ws,
        &[("ZCODER_RELAY_DIR", s(&zdir)), ("BATON_MAX_INFLIGHT", "1")],
        &["--name", "recv", "--deny-from", "weekly_digest"],
    );
    let id = b.id.as_str();
    let pid = std::process::id();
    // Three zcoder manifests: two of this process, one of another pid.
    let good = new_id();
    let denied = new_id();
    let elsewhere = "1-123456789012";
    write_manifest(
        &zdir,
        &good,
        &zcoder_manifest(
            &zdir,
            &good,
            "user profiles",
            "/work/app/services/user-profiles",
        ),
    );
    write_manifest(
        &zdir,
        &denied,
        &zcoder_manifest(
            &zdir,
            &denied,
            "weekly digest",
            "/work/app/services/weekly-digest",
        ),
    );
    write_manifest(
        &zdir,
        elsewhere,
        &zcoder_manifest(&zdir, elsewhere, "init", "/"),
    );
    // A child of this process serves the sockets of its two, as zcoder's
    // background listener does; this process sends, as zcoder's main
    // process does.
    let _listeners: Vec<ListenerChild> = [&good, &denied]
        .iter()
        .map(|mine| ListenerChild::serve(&zdir.join(format!("a-{mine}.sock"))))
        .collect();

    // Verified: the task names the zcoder instance, its name derived
    // from its project, and the kernel's pid (the sender's, which its
    // manifest names, not its listener's).
    assert_ack(
        &zsend(
            &b.socket,
            &enqueue_from(id, "v-1", "from a zcoder peer", &good),
        ),
        "v-1",
        "accepted",
        "ready",
        Some(1),
    );
    let (code, c) = baton_json(&env, &zdir, &[], &["inbox", "claim", "recv"]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["task"]["body"], "from a zcoder peer");
    assert_eq!(
        c["task"]["sender"],
        json!({"instance_id": good, "name": "user_profiles",
               "workspace": "/work/app/services/user-profiles", "pid": pid})
    );
    let envelope = c["task"]["envelope"].as_str().unwrap();
    assert!(
        envelope.starts_with(&format!(
            "<agent_relay from=\"user_profiles\" instance=\"{good}\" pid=\"{pid}\" workspace=\"/work/app/services/user-profiles\" message_id=\"v-1\">"
        )),
        "{envelope}"
    );

    // A second task from that sender while the first is open:
    // inflight_full, answered invalid.
    assert_ack(
        &zsend(&b.socket, &enqueue_from(id, "v-2", "again", &good)),
        "v-2",
        "invalid",
        "busy",
        None,
    );
    // --deny-from: denied, answered invalid.
    assert_ack(
        &zsend(&b.socket, &enqueue_from(id, "v-3", "denied", &denied)),
        "v-3",
        "invalid",
        "busy",
        None,
    );
    // Natively, the same sender gets the precise status.
    let mut c = b.client();
    let r = c.call(
        3,
        "message/send",
        b.msg_from("v-3n", "denied natively", &denied),
    );
    assert_eq!(
        r["result"],
        json!({"status": "denied", "message_id": "v-3n", "state": "busy",
               "reason": "sender matches --deny-from weekly_digest"})
    );
    // A manifest whose pid is not ours, and no manifest at all: invalid.
    assert_ack(
        &zsend(&b.socket, &enqueue_from(id, "v-4", "forged", elsewhere)),
        "v-4",
        "invalid",
        "busy",
        None,
    );
    let unknown = new_id();
    assert_ack(
        &zsend(&b.socket, &enqueue_from(id, "v-5", "unknown", &unknown)),
        "v-5",
        "invalid",
        "busy",
        None,
    );

    // The transcript keeps what the frame could not say.
    let events = log_events(&env, &zdir, "recv");
    let e = rejected(&events, "v-2");
    assert_eq!(e["status"], "inflight_full");
    assert_eq!(
        e["reason"],
        format!("sender {good} already has 1 tasks in flight here (BATON_MAX_INFLIGHT)")
    );
    let e = rejected(&events, "v-3");
    assert_eq!(e["status"], "denied");
    assert_eq!(e["reason"], "sender matches --deny-from weekly_digest");
    assert_eq!(e["from"], "weekly_digest");
    assert_eq!(e["pid"], pid);
    let e = rejected(&events, "v-4");
    assert_eq!(e["status"], "invalid");
    assert_eq!(
        e["reason"],
        format!(
            "sender not verified: instance {elsewhere} has pid 1, but the connection comes from pid {pid}"
        )
    );
    let e = rejected(&events, "v-5");
    assert_eq!(e["status"], "invalid");
    assert_eq!(
        e["reason"],
        format!("sender not verified: no manifest for instance {unknown} in the registry")
    );
    let accepted: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "message.accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{events:?}");
    assert_eq!(accepted[0]["from"], "user_profiles");
}

// ---------------------------------------------------------------------
// Malformed and stalled frames.

#[test]
fn malformed_and_stalled_frames_are_refused_without_stalling_anyone() {
    let env = Env::new();
    let ws = env.workspace("mal");
    let b = env.serve_with(
        &ws,
        &[("BATON_IO_TIMEOUT", "2"), ("BATON_MAX_BYTES", "1024")],
        &["--name", "mal"],
    );
    let id = b.id.clone();

    // A native client pings throughout, and notes when each is answered:
    // pings must be answered while a stalled frame waits out its deadline.
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let (stop, socket) = (stop.clone(), b.socket.clone());
        thread::spawn(move || {
            let mut answered = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let mut c = RawClient::connect(&socket).unwrap();
                c.initialize();
                let r = c.call(1, "ping", json!({}));
                assert_eq!(r["result"]["status"], "pong", "{r}");
                answered.push(Instant::now());
                thread::sleep(Duration::from_millis(20));
            }
            answered
        })
    };

    let payload_at_limit = {
        // A ping padded with spaces to exactly BATON_MAX_BYTES.
        let p = ping(&id, "edge").to_string();
        let mut v = p.into_bytes();
        let last = v.pop().unwrap();
        v.resize(1023, b' ');
        v.push(last);
        v
    };
    // (name, bytes, close our writing half, expected answer, stalls)
    type Case = (&'static str, Vec<u8>, bool, Option<&'static str>, bool);
    let cases: Vec<Case> = vec![
        (
            "header without newline",
            b"ZCODER-AGENT/1 12".to_vec(),
            false,
            Some("invalid"),
            true,
        ),
        (
            "magic cut short",
            b"ZCODER-AG".to_vec(),
            false,
            Some("invalid"),
            true,
        ),
        (
            "non-decimal length",
            b"ZCODER-AGENT/1 1x\n{}".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "negative length",
            b"ZCODER-AGENT/1 -2\n{}".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "space after length",
            b"ZCODER-AGENT/1 2 \n{}".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "empty length",
            b"ZCODER-AGENT/1 \n".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "zero length",
            b"ZCODER-AGENT/1 0\n".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "over BATON_MAX_BYTES",
            b"ZCODER-AGENT/1 1025\n".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "nine digits",
            b"ZCODER-AGENT/1 100000000\n".to_vec(),
            false,
            Some("invalid"),
            false,
        ),
        (
            "short payload, then close",
            b"ZCODER-AGENT/1 10\n{\"a".to_vec(),
            true,
            None,
            false,
        ),
        (
            "short payload, then wait",
            b"ZCODER-AGENT/1 10\n{\"a".to_vec(),
            false,
            Some("invalid"),
            true,
        ),
        (
            "nested object",
            frame(br#"{"protocol":1,"type":"ping","x":{"y":1}}"#),
            false,
            Some("invalid"),
            false,
        ),
        (
            "nested array",
            frame(br#"{"protocol":1,"type":"ping","x":[1]}"#),
            false,
            Some("invalid"),
            false,
        ),
        ("an array", frame(b"[1,2,3]"), false, Some("invalid"), false),
        (
            "a string",
            frame(br#""ping""#),
            false,
            Some("invalid"),
            false,
        ),
        (
            "not JSON",
            frame(br#"{"protocol":1,"type""#),
            false,
            Some("invalid"),
            false,
        ),
        (
            "not UTF-8",
            frame(b"{\"type\":\"\xff\xfe\"}"),
            false,
            Some("invalid"),
            false,
        ),
        (
            "exactly BATON_MAX_BYTES",
            frame(&payload_at_limit),
            false,
            Some("pong"),
            false,
        ),
    ];
    let socket = b.socket.clone();
    let workers: Vec<_> = cases
        .into_iter()
        .map(|(name, bytes, close, want, stalls)| {
            let socket = socket.clone();
            thread::spawn(move || {
                let began = Instant::now();
                let r = exchange(&socket, &bytes, close);
                match want {
                    Some(status) => {
                        let ack = r.ack.unwrap_or_else(|| panic!("{name}: no answer"));
                        let mid = if status == "pong" { "edge" } else { "" };
                        assert_eq!(
                            Value::Object(ack),
                            json!({"protocol": 1, "type": "ack", "message_id": mid,
                                   "status": status, "state": "ready"}),
                            "{name}"
                        );
                    }
                    None => assert!(r.ack.is_none(), "{name}: {:?}", r.ack),
                }
                // A stalled frame is answered at the 2 s deadline; any
                // other before it.
                if stalls {
                    assert!(
                        r.elapsed >= Duration::from_millis(1900),
                        "{name}: answered after {:?}, before the 2 s deadline",
                        r.elapsed
                    );
                    Some((name, began, began + r.elapsed))
                } else {
                    assert!(
                        r.elapsed < Duration::from_secs(2),
                        "{name}: answered after {:?}, not before the deadline",
                        r.elapsed
                    );
                    None
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    let mut stalls = Vec::new();
    for w in workers {
        match w.join() {
            Ok(stall) => stalls.extend(stall),
            Err(e) => failures.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "a case panicked".into()),
            ),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let answered = pinger.join().expect("the native pinger");
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(stalls.len(), 3, "the stalled cases");
    for (name, began, ended) in stalls {
        assert!(
            answered.iter().any(|&at| began < at && at < ended),
            "no native ping was answered while \"{name}\" stalled"
        );
    }
    let mut b = b;
    assert!(b.is_running());
    let mut c = b.client();
    assert_eq!(b.queued(&mut c), 0);
}

// ---------------------------------------------------------------------
// A peer that hangs up right after its request.

#[test]
fn a_peer_that_closes_right_after_its_request_does_not_disturb_the_listener() {
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let ws = env.workspace("hup");
    let mut b = env.serve_with(
        &ws,
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        &["--name", "hup", "--zcoder"],
    );
    let zsock = zdir.join(format!("a-{}.sock", b.id));
    let hang_up = |sock: &Path, bytes: &[u8]| {
        let mut c = UnixStream::connect(sock).unwrap();
        c.write_all(bytes).unwrap();
        drop(c);
    };
    // Complete requests, closed at once: each task is stored.
    for i in 0..6 {
        let sock = if i % 2 == 0 { &b.socket } else { &zsock };
        let e = enqueue(&b.id, &format!("h-{i}"), &format!("task {i}"));
        hang_up(sock, &frame(e.to_string().as_bytes()));
    }
    // A ping, closed at once; and an incomplete enqueue, closed at once.
    hang_up(&zsock, &frame(ping(&b.id, "p-1").to_string().as_bytes()));
    let partial = frame(
        enqueue(&b.id, "h-cut", "never whole")
            .to_string()
            .as_bytes(),
    );
    hang_up(&b.socket, &partial[..partial.len() - 5]);

    let mut c = b.client();
    wait_until("the six complete tasks to be stored", T, || {
        b.queued(&mut c) == 6
    });
    assert_ack(
        &zsend(&zsock, &ping(&b.id, "p-2")),
        "p-2",
        "pong",
        "ready",
        None,
    );
    let r = c.call(2, "ping", json!({}));
    assert_eq!(r["result"]["status"], "pong");
    assert_ack(
        &zsend(&b.socket, &enqueue(&b.id, "h-after", "after")),
        "h-after",
        "accepted",
        "ready",
        Some(7),
    );
    let (_, list) = baton_json(&env, &zdir, &[], &["inbox", "list", "hup"]);
    let mut queued: Vec<&str> = list["queued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message_id"].as_str().unwrap())
        .collect();
    queued.sort();
    assert_eq!(
        queued,
        ["h-0", "h-1", "h-2", "h-3", "h-4", "h-5", "h-after"],
        "the cut-off request was not stored"
    );
    assert!(b.is_running(), "{}", b.stderr());
    assert_eq!(b.term(), 0);
}

// ---------------------------------------------------------------------
// `--zcoder` publishing.

#[test]
fn zcoder_flag_publishes_a_zcoder_manifest_and_socket() {
    let env = Env::new();
    // Reached through a symlinked parent, so that canonical matters.
    let real = env.root.join("real");
    fs::DirBuilder::new().mode(0o700).create(&real).unwrap();
    std::os::unix::fs::symlink(&real, env.root.join("link")).unwrap();
    let zpath = env.root.join("link").join("zc");
    fs::DirBuilder::new().mode(0o700).create(&zpath).unwrap();
    let zcanon = fs::canonicalize(&zpath).unwrap();
    assert_eq!(zcanon, fs::canonicalize(&real).unwrap().join("zc"));
    let zvars = [("ZCODER_RELAY_DIR", s(&zpath))];

    let ws = env.workspace("pub");
    let mut b = env.serve_with(&ws, &zvars, &["--name", "pub", "--zcoder"]);
    let zman = zcanon.join(format!("a-{}.json", b.id));
    let zsock = zcanon.join(format!("a-{}.sock", b.id));
    wait_until("the zcoder manifest", T, || zman.exists());
    assert!(
        fs::symlink_metadata(&zsock)
            .unwrap()
            .file_type()
            .is_socket(),
        "{} is a socket",
        zsock.display()
    );
    let read = || -> Map<String, Value> {
        let bytes = fs::read(&zman).unwrap();
        assert!(bytes.len() < 16 * 1024, "{} bytes", bytes.len());
        flat_object(&bytes).unwrap()
    };
    let m = read();
    let meta = fs::symlink_metadata(&zman).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o077, 0, "private manifest");
    assert!(
        m.values().all(|v| v.is_string() || v.is_u64()),
        "strings and integers only: {m:?}"
    );
    assert_eq!(keys(&m), MANIFEST_FIELDS.into_iter().collect());
    assert_eq!(
        Value::Object(m),
        json!({
            "protocol": 1, "instance_id": b.id, "pid": b.pid(), "project": "pub",
            "workspace": s(&ws), "session_id": "", "profile": "coding", "model": "",
            "socket": s(&zsock), "state": "ready",
            "started_at": b.manifest["started_at"],
        })
    );
    // zcoder's ping reaches it there.
    assert_ack(
        &zsend(&zsock, &ping(&b.id, "p-1")),
        "p-1",
        "pong",
        "ready",
        None,
    );
    assert_ack(
        &zsend(&zsock, &ping("1-000000000000", "p-2")),
        "p-2",
        "wrong_target",
        "ready",
        None,
    );

    // Its state follows pause and resume.
    for (cmd, state) in [("pause", "paused"), ("resume", "ready")] {
        let out = env.run_with(&zvars, None, &[cmd, "pub"], None);
        assert_eq!(out.status, 0, "{}", out.stderr);
        wait_until(&format!("zcoder manifest state {state}"), T, || {
            read()["state"] == state
        });
        assert_eq!(b.manifest_state(), state);
    }

    // Another process lists it once, as the baton instance it is.
    for extra in [&[][..], &["--all"][..]] {
        let mut args = vec!["list"];
        args.extend_from_slice(extra);
        let (code, list) = baton_json(&env, &zpath, &[], &args);
        assert_eq!(code, 0);
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0]["instance_id"], b.id.as_str());
        assert_eq!(list[0]["wire"], "jsonrpc");
        assert_eq!(list[0]["socket"], s(&b.socket));
    }

    // SIGTERM removes both files from zcoder's registry, and nothing else.
    assert_eq!(b.term(), 0);
    assert!(!zman.exists(), "zcoder manifest left behind");
    assert!(
        fs::symlink_metadata(&zsock).is_err(),
        "zcoder socket left behind"
    );
    assert!(!b.manifest_path.exists() && !b.socket.exists());
    assert!(zcanon.is_dir());
    assert_eq!(fs::read_dir(&zcanon).unwrap().count(), 0);
}

#[test]
fn zcoder_flag_refuses_baton_s_own_registry() {
    let env = Env::new();
    let ws = env.workspace("same");
    let reg = s(&env.registry).to_string();
    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", &reg)],
        Some(&ws),
        &["serve", "--name", "same", "--zcoder"],
        None,
    );
    assert_eq!(out.status, 2, "{}", out.stderr);
    let canon = fs::canonicalize(&env.registry).unwrap();
    assert_eq!(
        out.stderr,
        format!(
            "baton: --zcoder: zcoder's registry {} is baton's own registry: point ZCODER_RELAY_DIR or BATON_DIR elsewhere\n",
            canon.display()
        )
    );
    // Nothing was bound or published.
    assert_eq!(fs::read_dir(&env.registry).unwrap().count(), 0);
}

// ---------------------------------------------------------------------
// Issue 18.

/// zcoder refuses an enqueue without well-formed sender fields, so a plain
/// `baton send` names itself `cli-<its pid>`, with its pid; and a baton
/// instance that receives such a frame takes the sender as the plain one
/// it is instead of failing to verify an instance.
#[test]
fn issue_18_plain_send_carries_the_sender_fields_zcoder_requires() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "weekly digest", "/work/app/services/weekly-digest");

    // The stand-in refuses what zcoder refuses (it answers, then waits for
    // its client to close).
    let to_peer = |req: &Value| -> Value {
        let mut c = UnixStream::connect(&peer.socket).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        c.write_all(&frame(req.to_string().as_bytes())).unwrap();
        let ack = read_frame(&mut c).unwrap().expect("an ack");
        Value::Object(flat_object(&ack).unwrap())
    };
    let bare = enqueue(&peer.id, "raw-1", "no sender");
    assert_eq!(to_peer(&bare)["status"], "invalid");
    let mut zero = bare.clone();
    zero["sender_instance_id"] = json!("cli-1");
    zero["sender_pid"] = json!(0);
    assert_eq!(to_peer(&zero)["status"], "invalid");

    let out = env.run_with(
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        None,
        &[
            "send",
            "weekly_digest",
            "from a shell",
            "--message-id",
            "sh-1",
        ],
        None,
    );
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!(
            "accepted: weekly_digest ({}) queued message sh-1 at position 1\n",
            peer.id
        )
    );
    let log = peer.log();
    let sent = log.last().unwrap();
    assert_eq!(sent.status.as_deref(), Some("accepted"));
    assert_eq!(
        sent.field("sender_instance_id"),
        json!(format!("cli-{}", out.pid))
    );
    assert_eq!(sent.field("sender_pid"), json!(out.pid));
    assert_eq!(sent.field("sender_project"), Value::Null);

    // baton receiving `cli-<pid>`: a plain sender, shown by its peer
    // credentials, on either wire's socket.
    let ws = env.workspace("digest");
    let b = env.serve_with(
        &ws,
        &[("ZCODER_RELAY_DIR", s(&zdir))],
        &["--name", "digest"],
    );
    let mut from_cli = enqueue(&b.id, "sh-2", "from a baton shell");
    from_cli["sender_instance_id"] = json!("cli-4242");
    from_cli["sender_pid"] = json!(4242);
    assert_ack(
        &zsend(&b.socket, &from_cli),
        "sh-2",
        "accepted",
        "ready",
        Some(1),
    );
    let (code, c) = baton_json(&env, &zdir, &[], &["inbox", "claim", "digest"]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["task"]["message_id"], "sh-2");
    let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
    assert_eq!(
        c["task"]["sender"],
        json!({"pid": std::process::id(), "workspace": s(&cwd)})
    );
}

/// `baton ping` and `baton status` on a zcoder peer use its frame's ping;
/// what its frame cannot do stays a usage error.
#[test]
fn issue_18_ping_and_status_work_on_a_zcoder_peer() {
    if !python() {
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZPeer::start(&zdir, "weekly digest", "/work/app/services/weekly-digest");
    let zvars = [("ZCODER_RELAY_DIR", s(&zdir))];

    let out = env.run_with(&zvars, None, &["ping", "weekly_digest"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let prefix = format!("pong from weekly_digest ({}): ready, ", peer.id);
    assert!(
        out.stdout.starts_with(&prefix) && out.stdout.ends_with(" ms\n"),
        "{out:?}"
    );
    peer.with(|p| p.paused = true);
    let (code, r) = baton_json(&env, &zdir, &[], &["ping", &peer.id]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "pong");
    assert_eq!(r["instance_id"], peer.id.as_str());
    assert_eq!(r["state"], "paused");
    assert_eq!(r["wire"], "zcoder");
    assert!(r["round_trip_us"].is_u64(), "{r}");

    let (code, r) = baton_json(&env, &zdir, &[], &["status", "weekly_digest"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["instance_id"], peer.id.as_str());
    assert_eq!(r["name"], "weekly_digest");
    assert_eq!(r["pid"], std::process::id());
    assert_eq!(r["state"], "paused", "the ping's state, not the manifest's");
    assert_eq!(r["workspace"], "/work/app/services/weekly-digest");
    assert_eq!(r["wire"], "zcoder");
    let out = env.run_with(&zvars, None, &["status", "weekly_digest"], None);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("state:       paused\n"), "{out:?}");
    assert!(
        out.stdout.contains(&format!("instance:    {}\n", peer.id)),
        "{out:?}"
    );

    // Every ping was zcoder's, each answered and read to its end.
    let log = peer.log();
    assert!(!log.is_empty());
    for c in &log {
        assert_eq!(c.kind(), "ping", "{c:?}");
        assert_eq!(c.status.as_deref(), Some("pong"), "{c:?}");
        assert!(c.ack_written && c.after_ack.is_ok(), "{c:?}");
    }

    // Its frame has no pause: still a usage error.
    let out = env.run_with(&zvars, None, &["pause", "weekly_digest"], None);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("is a zcoder instance"), "{out:?}");
}

/// A zcoder listener in a process of its own (python3: the test process
/// cannot be stopped itself), answering `ping` with `pong`: it binds
/// `<dir>/a-<id>.sock`, says `ready` on stdout, and serves one frame a
/// connection. As zcoder's, it is a child of the process its manifest
/// names (this test's). Killed by its pid when dropped.
struct ZProcess(std::process::Child, String);

const ZPEER_PY: &str = r#"
import json, socket, sys
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("%s/a-%s.sock" % (sys.argv[1], sys.argv[2]))
srv.listen(16)
print("ready", flush=True)
while True:
    c, _ = srv.accept()
    try:
        f = c.makefile("rb")
        n = int(f.readline().split()[1])
        req = json.loads(f.read(n))
        status = "pong" if req.get("type") == "ping" else "unsupported"
        ack = json.dumps({"protocol": 1, "type": "ack", "message_id": req.get("message_id", ""),
                          "status": status, "state": "ready"}).encode()
        c.sendall(b"ZCODER-AGENT/1 %d\n" % len(ack) + ack)
    except Exception:
        pass
    c.close()
"#;

impl ZProcess {
    fn start(dir: &Path) -> ZProcess {
        let id = new_id();
        let mut child = std::process::Command::new("python3")
            .args(["-c", ZPEER_PY])
            .arg(dir)
            .arg(&id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ready = ready_line(&mut child);
        let peer = ZProcess(child, id);
        assert_eq!(
            ready.as_deref(),
            Ok("ready\n"),
            "the python zcoder peer did not start"
        );
        peer
    }

    /// Its instance id: its main process's pid (this test's) first, as
    /// zcoder's are.
    fn id(&self) -> String {
        self.1.clone()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // this test's own child, not yet reaped.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, sig);
        }
    }
}

impl Drop for ZProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 18: a frozen peer (SIGSTOP: its pid alive, its socket silent) is
/// unresponsive, not missing, for a zcoder peer as for a baton instance:
/// `ping` and `send` exit 4 saying it did not answer in time, and `list`
/// shows it `unresponsive`.
#[test]
fn issue_18_a_frozen_zcoder_peer_is_unresponsive_not_missing() {
    if !crate::util::have("python3") {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!("python3 is required (BATON_REQUIRE_ALL=1)");
        }
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let env = Env::new();
    let zdir = zcoder_dir(&env);
    let peer = ZProcess::start(&zdir);
    let id = peer.id();
    let m = zcoder_manifest(&zdir, &id, "frozen", "/work/frozen");
    write_manifest(&zdir, &id, &m);
    let quick = [("BATON_IO_TIMEOUT", "0.5")];
    let run = |args: &[&str]| {
        env.run_with(
            &[("ZCODER_RELAY_DIR", s(&zdir)), quick[0]],
            None,
            args,
            None,
        )
    };
    let out = run(&["ping", "frozen"]);
    assert_eq!(out.status, 0, "{out:?}");

    peer.signal(libc::SIGSTOP);
    let silent = format!("baton: frozen ({id}) did not answer within 0.5 s\n");
    for target in ["frozen", id.as_str()] {
        let out = run(&["ping", target]);
        assert_eq!(
            (out.status, out.stderr.as_str()),
            (4, silent.as_str()),
            "{out:?}"
        );
    }
    let (code, listed) = baton_json(&env, &zdir, &quick, &["list"]);
    assert_eq!(code, 0, "{listed}");
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["instance_id"], id.as_str());
    assert_eq!(listed[0]["wire"], "zcoder");
    assert_eq!(listed[0]["state"], "unresponsive");
    let out = run(&["send", "frozen", "while stopped", "--message-id", "z-1"]);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (4, silent.as_str()),
        "{out:?}"
    );

    // Resumed, it answers again.
    peer.signal(libc::SIGCONT);
    let out = run(&["ping", "frozen"]);
    assert_eq!(out.status, 0, "{out:?}");
}

/// Whether bytes wait to be read on `c`, without reading them.
fn readable(c: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: c.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for a descriptor `c` keeps open.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}
