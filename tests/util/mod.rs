//! Shared harness for baton's integration tests.
//!
//! Every test gets a private world (`Env`): its own registry, state and home
//! directories under a fresh temporary directory, and a scrubbed environment
//! so nothing from the developer's real setup leaks in. Around that sit
//! bounded process runners, a guard for long-running `baton serve`
//! processes, and a raw line client for speaking JSON-RPC to a socket
//! directly. Everything that waits has a deadline, so a hung baton fails
//! the test with a message instead of hanging CI.
//!
//! Not every test binary uses every helper, hence the `dead_code` allowances.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// How long a one-shot `baton` invocation may run before it is killed.
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
/// Grace period a `Proc` gets after SIGTERM when dropped.
const DROP_GRACE: Duration = Duration::from_secs(3);
/// How long `Proc::term` waits for an orderly exit.
const TERM_TIMEOUT: Duration = Duration::from_secs(5);
/// Read/write timeout on `RawClient` sockets.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `wait_manifest` waits for the registry to settle.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

/// A directory removed, with everything in it, when dropped.
#[allow(dead_code)]
pub struct TempDir {
    path: PathBuf,
}

#[allow(dead_code)]
impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            // Only the sub-second part of the clock: it already separates
            // runs that reuse a pid, and a short name leaves room for socket
            // paths under the 108-byte `sun_path` limit.
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = base.join(format!("baton-test-{}-{n}-{nanos}", std::process::id()));
            match make_private_dir(&path) {
                Ok(()) => return TempDir { path },
                // A leftover from an earlier run with a recycled pid: pick
                // the next counter value rather than share its contents.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create temp dir {}: {e}", path.display()),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Creates one directory with mode 0700, failing if it already exists.
fn make_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(path)
}

/// Path of the `baton` binary Cargo built for these tests.
#[allow(dead_code)]
pub fn baton_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_baton"))
}

/// What a finished `baton` invocation produced.
#[allow(dead_code)]
#[derive(Debug, Clone)]
pub struct Output {
    /// The exit code, or 128 + the signal number if a signal ended it.
    pub status: i32,
    /// The pid the process ran as, for checking messages that name it.
    pub pid: u32,
    pub stdout: String,
    pub stderr: String,
}

/// Exit code in the shell's convention, so signals are distinguishable.
fn exit_code(status: ExitStatus) -> i32 {
    match status.code() {
        Some(code) => code,
        None => 128 + status.signal().unwrap_or(0),
    }
}

/// A private world for one test.
#[allow(dead_code)]
pub struct Env {
    pub root: TempDir,
    /// `root/reg`; deliberately not created, since creating it is baton's job.
    pub registry: PathBuf,
    /// `root/state`, used as `XDG_STATE_HOME`.
    pub state: PathBuf,
}

#[allow(dead_code)]
impl Env {
    pub fn new() -> Env {
        let root = TempDir::new();
        let registry = root.join("reg");
        let state = root.join("state");
        for dir in [&state, &root.join("home"), &root.join("tmp")] {
            make_private_dir(dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        }
        Env {
            root,
            registry,
            state,
        }
    }

    /// A `Command` for the baton binary that sees only this world.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(baton_bin());
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("HOME", self.root.join("home"))
            .env("BATON_DIR", &self.registry)
            .env("XDG_STATE_HOME", &self.state)
            .env("TMPDIR", self.root.join("tmp"))
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `baton <args>` to completion, killing it after 20 s.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(&[], None, args, None)
    }

    /// Like `run`, with `stdin` fed to the process.
    pub fn run_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        self.run_with(&[], None, args, Some(stdin))
    }

    /// Like `run`, with `vars` added to the scrubbed environment (replacing
    /// any of the same name), in `cwd` if given, and with `stdin` fed to the
    /// process if given.
    pub fn run_with(
        &self,
        vars: &[(&str, &str)],
        cwd: Option<&Path>,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Output {
        // Output goes to files, not pipes: nothing has to drain them while
        // we poll, and a daemon baton leaves behind that inherits them
        // cannot keep us waiting for EOF.
        let (out_path, out) = self.fresh_file("run", "out");
        let (err_path, err) = self.fresh_file("run", "err");
        let mut cmd = self.cmd();
        cmd.envs(vars.iter().copied())
            .args(args)
            .stdout(out)
            .stderr(err);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn baton {args:?}: {e}"));
        let pid = child.id();

        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let data = data.to_vec();
            // A separate thread, because baton may not read all of its
            // input and a full pipe would block us. The thread is left
            // detached: once baton exits the write fails with EPIPE (Rust
            // ignores SIGPIPE) and the thread ends on its own.
            thread::spawn(move || {
                let _ = pipe.write_all(&data);
            });
        }

        let deadline = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "baton {args:?} (extra env {vars:?}) still running after \
                         {RUN_TIMEOUT:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                        read_lossy(&out_path),
                        read_lossy(&err_path),
                    );
                }
                Err(e) => panic!("waiting for baton {args:?}: {e}"),
            }
        };

        Output {
            status: exit_code(status),
            pid,
            stdout: read_lossy(&out_path),
            stderr: read_lossy(&err_path),
        }
    }

    /// Starts a long-running baton (normally `serve`) in `workspace`.
    pub fn spawn(&self, args: &[&str], workspace: &Path) -> Proc {
        self.spawn_with(&[], args, workspace)
    }

    /// Like `spawn`, with `vars` added to the scrubbed environment.
    fn spawn_with(&self, vars: &[(&str, &str)], args: &[&str], workspace: &Path) -> Proc {
        let (stdout_path, out) = self.fresh_file("serve", "out");
        let (stderr_path, err) = self.fresh_file("serve", "err");
        let child = self
            .cmd()
            .envs(vars.iter().copied())
            .args(args)
            .current_dir(workspace)
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn baton {args:?}: {e}"));
        Proc {
            child,
            stdout_path,
            stderr_path,
        }
    }

    /// Creates `root/<prefix>-<n>.<ext>` for the lowest unused `n`.
    fn fresh_file(&self, prefix: &str, ext: &str) -> (PathBuf, File) {
        for n in 0.. {
            let path = self.root.join(format!("{prefix}-{n}.{ext}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return (path, file),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        }
        unreachable!("ran out of file names")
    }
}

fn read_lossy(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Guard for a long-running baton process: stops it when dropped.
#[allow(dead_code)]
pub struct Proc {
    pub child: Child,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

#[allow(dead_code)]
impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process has written to stdout so far.
    pub fn stdout(&self) -> String {
        read_lossy(&self.stdout_path)
    }

    /// Everything the process has written to stderr so far.
    pub fn stderr(&self) -> String {
        read_lossy(&self.stderr_path)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process with SIGKILL, as a crash would, and reaps it.
    /// Panics if it has not been reaped within 5 s.
    pub fn kill9(&mut self) {
        if self.is_running() {
            self.signal(libc::SIGKILL);
        }
        if self.wait_for_exit(TERM_TIMEOUT).is_none() {
            panic!(
                "baton (pid {}) not reaped {TERM_TIMEOUT:?} after SIGKILL",
                self.pid()
            );
        }
    }

    /// Sends SIGTERM and returns the exit code (128 + signal if the signal
    /// itself ended it). Panics if the process is still running after 5 s.
    pub fn term(&mut self) -> i32 {
        if self.is_running() {
            self.signal(libc::SIGTERM);
        }
        match self.wait_for_exit(TERM_TIMEOUT) {
            Some(status) => exit_code(status),
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "baton (pid {}) ignored SIGTERM for {TERM_TIMEOUT:?}; killed.\nstderr:\n{}",
                    self.pid(),
                    self.stderr()
                );
            }
        }
    }

    /// Polls for exit until `timeout`; `None` if it is still running.
    fn wait_for_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Sends `sig` to the child. Callers must have just seen it running:
    /// only then is the pid guaranteed not to have been reaped and reused.
    fn signal(&self, sig: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own unreaped child, so the signal cannot reach another process.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.is_running() {
            return;
        }
        // SIGTERM first so baton gets to clean up its socket and manifest,
        // which keeps a failing test from leaving litter behind.
        self.signal(libc::SIGTERM);
        if self.wait_for_exit(DROP_GRACE).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `f` every 10 ms until it returns true; panics naming `what` if
/// that takes longer than `timeout`.
#[allow(dead_code)]
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(POLL);
    }
}

/// A JSON-RPC-over-lines client that does no validation of its own, so
/// tests can send anything, including malformed input.
#[allow(dead_code)]
pub struct RawClient {
    stream: UnixStream,
    buf: Vec<u8>,
    /// Server-initiated messages (notifications and requests) that arrived
    /// while `call` was waiting for its response; `read_json` returns them
    /// first so nothing is lost.
    backlog: VecDeque<Value>,
}

#[allow(dead_code)]
impl RawClient {
    pub fn connect(path: impl AsRef<Path>) -> io::Result<RawClient> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        Ok(RawClient {
            stream,
            buf: Vec::new(),
            backlog: VecDeque::new(),
        })
    }

    /// The underlying socket, for tests that need to shut down one half or
    /// change timeouts.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Sends `bytes` followed by `\n`. Panics on a write error.
    pub fn send_line(&mut self, bytes: &[u8]) {
        let mut line = Vec::with_capacity(bytes.len() + 1);
        line.extend_from_slice(bytes);
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Sends `bytes` exactly as given. Panics on a write error.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_send_raw(bytes) {
            panic!("writing {} bytes to server: {e}", bytes.len());
        }
    }

    /// Sends `bytes` exactly as given, reporting failure instead of
    /// panicking, for tests that expect the server to hang up mid-write.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads the next line, without its `\n`. Returns `None` once the server
    /// has closed the connection (a final unterminated fragment is returned
    /// first). Panics if nothing arrives within 5 s.
    pub fn read_line(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                return Some(utf8_line(line));
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    if self.buf.is_empty() {
                        return None;
                    }
                    return Some(utf8_line(std::mem::take(&mut self.buf)));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A server that closes with our data still unread makes the
                // kernel report a reset; for a test that is just a hang-up.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!(
                        "no line from server within {CLIENT_TIMEOUT:?}; buffered so far: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                }
                Err(e) => panic!("reading from server: {e}"),
            }
        }
    }

    /// Reads the next message as JSON. Panics on EOF or invalid JSON.
    pub fn read_json(&mut self) -> Value {
        if let Some(msg) = self.backlog.pop_front() {
            return msg;
        }
        self.read_json_from_socket()
    }

    fn read_json_from_socket(&mut self) -> Value {
        let Some(line) = self.read_line() else {
            panic!("server closed the connection while a message was expected");
        };
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("server sent invalid JSON ({e}): {line:?}"))
    }

    /// Sends a request and returns the whole response object. Messages the
    /// server initiates in the meantime are kept for `read_json`. Panics if
    /// the next response carries a different id.
    pub fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(request.to_string().as_bytes());
        loop {
            let msg = self.read_json_from_socket();
            let is_response = msg.get("id").is_some() && msg.get("method").is_none();
            if !is_response {
                self.backlog.push_back(msg);
                continue;
            }
            assert_eq!(
                msg["id"],
                json!(id),
                "response to {method} (id {id}) has the wrong id: {msg}"
            );
            return msg;
        }
    }

    /// Performs the protocol handshake and returns its `result`.
    pub fn initialize(&mut self) -> Value {
        let params = json!({"protocol_version": 1, "client": {"name": "test", "version": "0"}});
        let response = self.call(0, "initialize", params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("initialize failed: {response}"),
        }
    }
}

fn utf8_line(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| {
        panic!(
            "server sent a non-UTF-8 line: {:?}",
            String::from_utf8_lossy(e.as_bytes())
        )
    })
}

/// The agent manifests (`a-*.json`) currently in `registry`, sorted. A
/// missing registry simply has none.
#[allow(dead_code)]
pub fn manifests(registry: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(registry) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("a-") && n.ends_with(".json"))
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// Waits up to 10 s until `registry` holds exactly `count` manifests and
/// returns them.
#[allow(dead_code)]
pub fn wait_manifest(registry: &Path, count: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + MANIFEST_TIMEOUT;
    loop {
        let found = manifests(registry);
        if found.len() == count {
            return found;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {MANIFEST_TIMEOUT:?} waiting for {count} manifest(s) in {}; found {found:?}",
                registry.display()
            );
        }
        thread::sleep(POLL);
    }
}

/// A running `baton serve` and what its manifest says. Dropping it stops
/// the process as dropping its `Proc` does.
#[allow(dead_code)]
pub struct Served {
    pub proc: Proc,
    pub id: String,
    pub socket: PathBuf,
    /// The canonical registry directory the instance publishes in (its
    /// socket's directory).
    pub registry: PathBuf,
    pub workspace: PathBuf,
    /// The instance's own manifest file.
    pub manifest_path: PathBuf,
    /// The manifest as it was when the instance was first seen.
    pub manifest: Value,
}

#[allow(dead_code)]
impl Env {
    /// Makes `root/<rel>` (a workspace directory) and returns its canonical path.
    pub fn workspace(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        fs::canonicalize(&p).unwrap()
    }

    /// Starts `baton serve <args>` in `workspace` and waits (10 s bound)
    /// until its own manifest is published.
    pub fn serve(&self, workspace: &Path, args: &[&str]) -> Served {
        self.serve_with(workspace, &[], args)
    }

    /// Like `serve`, with `vars` added to the scrubbed environment.
    pub fn serve_with(&self, workspace: &Path, vars: &[(&str, &str)], args: &[&str]) -> Served {
        let mut full = vec!["serve"];
        full.extend_from_slice(args);
        let mut proc = self.spawn_with(vars, &full, workspace);
        let pid = proc.pid();
        let deadline = Instant::now() + MANIFEST_TIMEOUT;
        loop {
            let mine = manifests(&self.registry).into_iter().find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("a-{pid}-")))
            });
            if let Some(path) = mine
                && let Ok(bytes) = fs::read(&path)
                && let Ok(manifest) = serde_json::from_slice::<Value>(&bytes)
            {
                let id = manifest["instance_id"].as_str().unwrap().to_string();
                let socket = PathBuf::from(manifest["socket"].as_str().unwrap());
                let registry = socket.parent().unwrap().to_path_buf();
                return Served {
                    proc,
                    id,
                    socket,
                    registry,
                    workspace: workspace.to_path_buf(),
                    manifest_path: path,
                    manifest,
                };
            }
            if !proc.is_running() {
                panic!(
                    "baton serve {args:?} (extra env {vars:?}) exited early:\n{}",
                    proc.stderr()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "baton serve {args:?} (extra env {vars:?}) published no manifest in \
                     {MANIFEST_TIMEOUT:?}:\n{}",
                    proc.stderr()
                );
            }
            thread::sleep(POLL);
        }
    }
}

#[allow(dead_code)]
impl Served {
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Everything the instance has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// An orderly stop; see `Proc::term`.
    pub fn term(&mut self) -> i32 {
        self.proc.term()
    }

    /// A crash; see `Proc::kill9`.
    pub fn kill9(&mut self) {
        self.proc.kill9()
    }

    /// A raw client on this instance's socket, already initialized.
    pub fn client(&self) -> RawClient {
        let mut c = RawClient::connect(&self.socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.socket.display()));
        c.initialize();
        c
    }

    /// `message/send` params for this instance from a plain sender (no
    /// instance id).
    pub fn msg(&self, id: &str, body: &str) -> Value {
        json!({"message_id": id, "target_instance_id": self.id, "body": body, "sender": {}})
    }

    /// `message/send` params for this instance from a sender claiming
    /// `sender_id`.
    pub fn msg_from(&self, id: &str, body: &str, sender_id: &str) -> Value {
        json!({
            "message_id": id,
            "target_instance_id": self.id,
            "body": body,
            "sender": {"instance_id": sender_id},
        })
    }

    /// `message/send` with a plain sender; returns the `result` object.
    pub fn send(&self, c: &mut RawClient, id: &str, body: &str) -> Value {
        let r = c.call(1, "message/send", self.msg(id, body));
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {r}"))
    }

    /// `agent/info`'s `queue.queued`.
    pub fn queued(&self, c: &mut RawClient) -> u64 {
        let r = c.call(50, "agent/info", json!({}));
        r["result"]["queue"]["queued"]
            .as_u64()
            .unwrap_or_else(|| panic!("agent/info has no queue.queued: {r}"))
    }

    /// The `state` field of this instance's manifest file now, as peers
    /// see it.
    pub fn manifest_state(&self) -> String {
        let bytes = fs::read(&self.manifest_path)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.manifest_path.display()));
        let m: Value = serde_json::from_slice(&bytes).expect("the manifest is JSON");
        m["state"].as_str().expect("manifest state").to_string()
    }
}

/// Whether a tool a test needs is on PATH; when it is not, the test is
/// skipped with a printed reason, except under BATON_REQUIRE_ALL=1 (as in
/// CI) where a missing tool is a failure.
#[allow(dead_code)]
pub fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!("{tool} is required (BATON_REQUIRE_ALL=1) but not installed");
        }
        eprintln!("skipped: {tool} is not installed");
    }
    found
}

/// Writes a valid manifest for a pretend instance with `pid` into
/// `registry`, as `parse_manifest` wants it (its socket need not exist:
/// sender verification does not ping); returns its instance id.
#[allow(dead_code)]
pub fn fake_manifest(registry: &Path, pid: u32, name: &str, workspace: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let id = format!(
        "{pid}-{}",
        100_000_000_000u64 + N.fetch_add(1, Ordering::Relaxed) as u64
    );
    let m = json!({
        "protocol": 1,
        "instance_id": id,
        "pid": pid,
        "project": name,
        "name": name,
        "workspace": workspace,
        "session_id": "",
        "profile": "coding",
        "model": "",
        "socket": registry.join(format!("a-{id}.sock")),
        "state": "ready",
        "started_at": 1_700_000_000u64,
        "wire": "jsonrpc",
        "baton_version": "0.1.0",
    });
    fs::write(registry.join(format!("a-{id}.json")), m.to_string()).unwrap();
    id
}

/// A verified sender: a manifest naming this test process, which is then
/// the peer of its connections.
#[allow(dead_code)]
pub fn me_as_instance(registry: &Path, name: &str, workspace: &str) -> String {
    fake_manifest(registry, std::process::id(), name, workspace)
}

/// Every line of one transcript file, parsed; none when the file does not
/// exist. A line that is not JSON fails the test.
#[allow(dead_code)]
pub fn lines_of(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line ({e}): {l}")))
        .collect()
}

/// A spool's whole recorded transcript, the older generation first.
#[allow(dead_code)]
pub fn transcript(spool: &Path) -> Vec<Value> {
    let mut all = lines_of(&spool.join("transcript.1.jsonl"));
    all.extend(lines_of(&spool.join("transcript.jsonl")));
    all
}
