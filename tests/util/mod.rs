//! Shared harness for baton's integration tests, every target
//! (`tests/tests.rs`, `tests/reliability.rs`, and `tests/bench.rs` for its
//! waits and its private sshd).
//!
//! Every test gets a private world (`Env`): its own registry, state and home
//! directories under a fresh temporary directory, and a scrubbed environment
//! so nothing from the developer's real setup leaks in. Around that sit
//! bounded process runners, guards for long-running `baton serve`
//! processes and waits for any process to end (`process`), a raw line
//! client for speaking JSON-RPC to a socket directly (`client`), and
//! readers of what an instance records (its transcript, its manifests).
//! `reliability` holds what only the crash, fault and load tests need,
//! `sshd` a private OpenSSH server, `hosts` the real agent hosts (Claude
//! Code, Codex) and `model` the stand-in model servers they talk to.
//! Everything that waits has a deadline, so a hung baton fails the test
//! with a message instead of hanging CI; every wait that polls is `poll`,
//! or `wait_for` and `wait_until` on it.
//!
//! Not every test binary uses every helper, hence the `dead_code` allowances.

mod client;
#[allow(dead_code)]
pub mod codex;
#[allow(dead_code)]
pub mod hosts;
#[allow(dead_code)]
pub mod model;
mod process;
#[allow(dead_code)]
pub mod reliability;
#[allow(dead_code)]
pub mod sshd;

pub use client::RawClient;
#[allow(unused_imports)]
pub use process::{
    Proc, Serve, Served, Sleeper, blocked, exited, exited_or_killed, finish, pid_alive, pid_exists,
    published, session, settled_threads, switches, threads, wait_gone, writing,
};

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// How long a one-shot `baton` invocation may run before it is killed.
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `wait_manifest` and `Env::serve` wait for the registry.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the waits here look again.
pub const POLL: Duration = Duration::from_millis(10);
/// How often a wait on a tmux pane looks again: each look is a
/// `capture-pane`, a process of its own, too many for a busy machine at
/// `POLL`.
#[allow(dead_code)]
pub const PANE_POLL: Duration = Duration::from_millis(50);

/// A directory removed, with everything in it, when dropped.
#[allow(dead_code)]
pub struct TempDir {
    path: PathBuf,
}

#[allow(dead_code)]
impl TempDir {
    /// A fresh directory in the system's temporary directory.
    pub fn new() -> TempDir {
        TempDir::new_in(&std::env::temp_dir())
            .unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"))
    }

    /// A fresh directory (mode 0700) in `base`.
    pub fn new_in(base: &Path) -> io::Result<TempDir> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
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
                Ok(()) => return Ok(TempDir { path }),
                // A leftover from an earlier run with a recycled pid: pick
                // the next counter value rather than share its contents.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
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
pub fn exit_code(status: ExitStatus) -> i32 {
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
    /// The binary every command of this world runs.
    bin: PathBuf,
    /// The number of the next output file `fresh_file` makes.
    files: AtomicUsize,
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
            bin: baton_bin(),
            files: AtomicUsize::new(0),
        }
    }

    /// The same world, running `bin` instead of Cargo's `baton`.
    pub fn with_bin(mut self, bin: &Path) -> Env {
        self.bin = bin.to_path_buf();
        self
    }

    /// A `Command` for the baton binary that sees only this world.
    pub fn cmd(&self) -> Command {
        self.cmd_for(&self.bin)
    }

    /// A `Command` for `program` that sees only this world, as the baton
    /// it starts would.
    pub fn cmd_for(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
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
        // A suite started in the background of a script inherits SIGINT
        // and SIGQUIT ignored; the world a test makes is a terminal's,
        // where they have their default action.
        // SAFETY: signal() is async-signal-safe and touches no memory of
        // the parent; this runs in the child between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                Ok(())
            });
        }
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

        let Some(status) = exited_or_killed(&mut child, RUN_TIMEOUT) else {
            panic!(
                "baton {args:?} (extra env {vars:?}) still running after \
                 {RUN_TIMEOUT:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                read_lossy(&out_path),
                read_lossy(&err_path),
            );
        };

        Output {
            status: exit_code(status),
            pid,
            stdout: read_lossy(&out_path),
            stderr: read_lossy(&err_path),
        }
    }

    /// Makes `root/<rel>` (a workspace directory) and returns its canonical path.
    pub fn workspace(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        fs::canonicalize(&p).unwrap()
    }

    /// Creates `root/<prefix>-<n>.<ext>` for an unused `n`.
    fn fresh_file(&self, prefix: &str, ext: &str) -> (PathBuf, File) {
        loop {
            let n = self.files.fetch_add(1, Ordering::Relaxed);
            let path = self.root.join(format!("{prefix}-{n}.{ext}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return (path, file),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        }
    }
}

fn read_lossy(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Calls `f` every `every` until it gives a value and returns that, or
/// `None` once `timeout` has passed without one. Every bounded wait of the
/// tests comes down to this one loop.
#[allow(dead_code)]
pub fn poll<T>(timeout: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(every);
    }
}

/// Polls `f` every 10 ms until it gives a value and returns that; panics
/// naming `what` if that takes longer than `timeout`.
#[allow(dead_code)]
#[track_caller]
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    match poll(timeout, POLL, f) {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Polls `f` every 10 ms until it returns true; panics naming `what` if
/// that takes longer than `timeout`.
#[allow(dead_code)]
#[track_caller]
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    wait_for(what, timeout, || f().then_some(()))
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
    let mut found = Vec::new();
    let counted = poll(MANIFEST_TIMEOUT, POLL, || {
        found = manifests(registry);
        (found.len() == count).then_some(())
    });
    if counted.is_none() {
        panic!(
            "timed out after {MANIFEST_TIMEOUT:?} waiting for {count} manifest(s) in {}; found {found:?}",
            registry.display()
        );
    }
    found
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
/// `registry`, as `parse_manifest` wants it (no socket: see
/// `me_as_instance` for a sender that verifies); returns its instance id.
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
        // Written in this pid namespace, as an instance here writes it.
        "pid_ns": pid_namespace(),
    });
    fs::write(registry.join(format!("a-{id}.json")), m.to_string()).unwrap();
    id
}

/// A verified sender: a manifest naming this test process, which is then
/// the peer of its connections, and serves its socket (`serve_socket`).
#[allow(dead_code)]
pub fn me_as_instance(registry: &Path, name: &str, workspace: &str) -> String {
    let id = fake_manifest(registry, std::process::id(), name, workspace);
    serve_socket(&registry.join(format!("a-{id}.sock")));
    id
}

/// Listens on `path` from this test process for as long as it runs, as
/// sender verification wants of an instance's socket (it connects once
/// and reads who listens; nothing is said, so nothing is accepted).
#[allow(dead_code)]
pub fn serve_socket(path: &Path) {
    static SERVED: std::sync::Mutex<Vec<UnixListener>> = std::sync::Mutex::new(Vec::new());
    let l =
        UnixListener::bind(path).unwrap_or_else(|e| panic!("listen on {}: {e}", path.display()));
    SERVED.lock().unwrap_or_else(|e| e.into_inner()).push(l);
}

/// Every line of one transcript file, parsed; none when the file does not
/// exist. A last line without its newline is still being written and is
/// left out; any other line that is not JSON fails the test.
#[allow(dead_code)]
pub fn lines_of(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
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

/// Every receipt a spool keeps, oldest first: the lines of its receipt
/// logs (`done/receipts-N.jsonl`), then any receipt file of an earlier
/// version (`done/<id>.json`).
#[allow(dead_code)]
pub fn receipts(spool: &Path) -> Vec<Value> {
    let done = spool.join("done");
    let mut names: Vec<String> = fs::read_dir(&done)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let (logs, loose): (Vec<String>, Vec<String>) = names
        .into_iter()
        .partition(|n| n.starts_with("receipts-") && n.ends_with(".jsonl"));
    let mut all: Vec<Value> = logs.iter().flat_map(|n| lines_of(&done.join(n))).collect();
    all.extend(
        loose
            .iter()
            .filter(|n| n.ends_with(".json"))
            .filter_map(|n| serde_json::from_slice(&fs::read(done.join(n)).ok()?).ok()),
    );
    all
}

/// The receipt of task `id` in a spool, if it has one.
#[allow(dead_code)]
pub fn receipt(spool: &Path, id: &str) -> Option<Value> {
    receipts(spool)
        .into_iter()
        .rev()
        .find(|r| r["message_id"] == id)
}

/// Whether `e` is an event of `kind` about task `id`.
#[allow(dead_code)]
pub fn event_is(e: &Value, kind: &str, id: &str) -> bool {
    e["kind"] == kind && e["message_id"] == id
}

/// Waits (up to `timeout`) until the transcript holds an event matching
/// `pred`, and returns the transcript up to and including the first such
/// event. The transcript is written in `seq` order, so everything the
/// instance recorded before that event is in it: a test that asserts
/// something did *not* happen waits for the event that marks the moment
/// it would have happened by, then looks at what came before.
#[allow(dead_code)]
#[track_caller]
pub fn transcript_until(
    spool: &Path,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    wait_for(what, timeout, || {
        let mut all = transcript(spool);
        let i = all.iter().position(&pred)?;
        all.truncate(i + 1);
        Some(all)
    })
}

/// Waits (up to `timeout`) until the transcript holds an event matching
/// `pred`, and returns that event.
#[allow(dead_code)]
#[track_caller]
pub fn wait_event(
    spool: &Path,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let mut upto = transcript_until(spool, what, timeout, pred);
    upto.pop().expect("the event that was waited for")
}

/// What an answer to the approval of task `id` names: the `approval_id`
/// and `digest` of its latest `approval.requested` event, waited for (up
/// to 20 s).
#[allow(dead_code)]
#[track_caller]
pub fn approval_of(spool: &Path, id: &str) -> Value {
    let what = format!("approval.requested {id}");
    wait_for(&what, Duration::from_secs(20), || {
        let all = transcript(spool);
        let e = all
            .iter()
            .rev()
            .find(|e| event_is(e, "approval.requested", id))?;
        Some(json!({"approval_id": e["approval_id"], "digest": e["digest"]}))
    })
}

/// xorshift64*: a tiny generator that gives the same sequence for the same
/// seed, so a failing randomized test can be replayed.
#[allow(dead_code)]
pub struct Rng(u64);

#[allow(dead_code)]
impl Rng {
    pub fn new(seed: u64) -> Rng {
        // One splitmix64 step, so that small seeds give a lively state;
        // xorshift must never hold 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n`; `n > 0`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform enough in `0..=max`.
    pub fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }

    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    pub fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
}

/// Processes a test's handlers leave behind on purpose (daemons, or the
/// children of a handler whose instance was killed), by the pids they
/// wrote one a line to `path`; each still running is killed with SIGKILL
/// when the guard is dropped, however the test ends.
#[allow(dead_code)]
pub struct Leftovers(pub PathBuf);

#[allow(dead_code)]
impl Leftovers {
    /// The pids written so far.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in self.pids() {
            let Ok(pid) = libc::pid_t::try_from(pid) else {
                continue;
            };
            if pid > 1 && pid_alive(pid as u32) {
                // SAFETY: kill(2) has no memory-safety preconditions; the
                // pid is one a handler of this test wrote moments ago and
                // that is still running.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`), as a
/// manifest's `pid_ns` records it.
#[allow(dead_code)]
pub fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}
