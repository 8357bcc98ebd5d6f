//! What the reliability tests share: a private copy of the fail-point
//! binary, instances started and stopped by pid, a client that reports
//! failures instead of panicking (a crash test expects connections to
//! die), and a reader that checks every file of a spool.

use crate::util::{Env, baton_bin};
use baton::digest::sha256_hex;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long an instance may take to publish its manifest.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Grace after SIGTERM when an `Inst` is dropped.
const DROP_GRACE: Duration = Duration::from_secs(3);

/// Tests that measure time or CPU run one at a time, so that two of them
/// do not disturb each other's numbers on a small machine.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the slow tests run: `BATON_SLOW=1` (`make test-slow`). When
/// they do not, the test says so and why.
pub fn slow(test: &str) -> bool {
    if std::env::var("BATON_SLOW").is_ok_and(|v| v == "1") {
        return true;
    }
    // Straight to the descriptor: the test harness captures eprintln! of
    // a test that passes, and this should be seen.
    let _ = writeln!(
        io::stderr(),
        "{test}: skipped: a slow test; set BATON_SLOW=1 (make test-slow) to run it"
    );
    false
}

/// Whether `/proc` is there for CPU and memory readings; without it the
/// test is skipped, or fails under `BATON_REQUIRE_ALL=1`.
pub fn have_proc(test: &str) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return true;
    }
    if std::env::var("BATON_REQUIRE_ALL").is_ok_and(|v| v == "1") {
        panic!("{test}: /proc is missing and BATON_REQUIRE_ALL=1");
    }
    let _ = writeln!(io::stderr(), "{test}: skipped: no /proc on this system");
    false
}

/// A copy of the binary this target built (with `--features failpoints`),
/// taken once: a plain `cargo test` elsewhere rebuilds `target/debug/baton`
/// without the fail points, and must not swap it under a running test.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = baton_bin();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join(format!("baton-reliability.{}", std::process::id()));
        fs::copy(&src, &tmp).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        let bytes = fs::read(&tmp).unwrap();
        let needle = b"BATON_FAILPOINT";
        if !bytes.windows(needle.len()).any(|w| w == needle) {
            let _ = fs::remove_file(&tmp);
            panic!(
                "{} has no fail points: build it with `cargo test --features failpoints --test reliability`",
                src.display()
            );
        }
        let dest = dir.join("baton-reliability");
        fs::rename(&tmp, &dest).unwrap();
        dest
    })
}

/// `Env::cmd`, but running the private copy of the binary.
pub fn cmd(env: &Env) -> Command {
    let base = env.cmd();
    let mut c = Command::new(bin());
    c.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c.stdin(Stdio::null());
    c
}

/// The exit code, or 128 + the signal that ended the process.
pub fn code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// What a published manifest says.
#[derive(Clone, Debug)]
pub struct Ready {
    pub id: String,
    pub socket: PathBuf,
    pub manifest: PathBuf,
}

/// One `baton serve` process of ours; stopped (SIGTERM, then SIGKILL) when
/// dropped. Signals go only to this pid while it is unreaped.
pub struct Inst {
    child: Child,
    pub pid: u32,
    stderr: PathBuf,
    registry: PathBuf,
    ready: Option<Ready>,
    exited: Option<ExitStatus>,
}

/// How to start an instance.
#[derive(Default)]
pub struct Start<'a> {
    pub vars: &'a [(&'a str, &'a str)],
    pub args: &'a [&'a str],
    /// RLIMIT_NOFILE for the child, set between fork and exec.
    pub nofile: Option<u64>,
}

impl Inst {
    /// Starts `baton serve <args>` in `ws` without waiting for it.
    pub fn spawn(env: &Env, ws: &Path, s: Start<'_>) -> Inst {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = env.root.join(format!("inst-{n}.err"));
        let err = fs::File::create(&stderr).unwrap();
        let mut c = cmd(env);
        c.arg("serve")
            .args(s.args)
            .envs(s.vars.iter().copied())
            .current_dir(ws)
            .stdout(Stdio::null())
            .stderr(err);
        if let Some(limit) = s.nofile {
            // SAFETY: setrlimit is async-signal-safe and touches no memory
            // of the parent; this runs in the child between fork and exec.
            unsafe {
                c.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: limit as libc::rlim_t,
                        rlim_max: limit as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = c.spawn().expect("spawn baton serve");
        let registry = s
            .vars
            .iter()
            .find(|(k, _)| *k == "BATON_DIR")
            .map_or_else(|| env.registry.clone(), |(_, v)| PathBuf::from(v));
        Inst {
            pid: child.id(),
            child,
            stderr,
            registry,
            ready: None,
            exited: None,
        }
    }

    /// Starts an instance and waits until its manifest is published.
    pub fn start(env: &Env, ws: &Path, s: Start<'_>) -> Inst {
        let mut i = Inst::spawn(env, ws, s);
        i.wait_ready();
        i
    }

    /// Looks once for this process's manifest; true once it is published.
    pub fn poll_ready(&mut self) -> bool {
        if self.ready.is_some() {
            return true;
        }
        let prefix = format!("a-{}-", self.pid);
        let Ok(rd) = fs::read_dir(&self.registry) else {
            return false;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(name.starts_with(&prefix) && name.ends_with(".json")) {
                continue;
            }
            let Ok(bytes) = fs::read(e.path()) else {
                continue;
            };
            let Ok(m) = serde_json::from_slice::<Value>(&bytes) else {
                continue;
            };
            self.ready = Some(Ready {
                id: m["instance_id"].as_str().unwrap().to_string(),
                socket: PathBuf::from(m["socket"].as_str().unwrap()),
                manifest: e.path(),
            });
            return true;
        }
        false
    }

    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !self.poll_ready() {
            if !self.is_running() {
                panic!("baton serve exited early:\n{}", self.stderr());
            }
            if Instant::now() > deadline {
                panic!(
                    "baton serve published no manifest in {READY_TIMEOUT:?}:\n{}",
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn ready(&self) -> &Ready {
        self.ready.as_ref().expect("the instance is ready")
    }

    pub fn id(&self) -> &str {
        &self.ready().id
    }

    pub fn socket(&self) -> &Path {
        &self.ready().socket
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.stderr).unwrap_or_default()).into_owned()
    }

    pub fn is_running(&mut self) -> bool {
        self.reap();
        self.exited.is_none()
    }

    fn reap(&mut self) {
        if self.exited.is_none()
            && let Ok(Some(st)) = self.child.try_wait()
        {
            self.exited = Some(st);
        }
    }

    /// Sends `sig` if the process is still ours (unreaped).
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.is_running() {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is
            // our unreaped child.
            unsafe {
                libc::kill(self.pid as libc::pid_t, sig);
            }
        }
    }

    /// Waits up to `timeout` for the exit; its code, if it exited.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return self.exited.map(code);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// A crash: SIGKILL, then reaped.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            panic!("pid {} not reaped 5 s after SIGKILL", self.pid);
        }
    }

    /// SIGTERM; the exit code and how long the exit took. Panics after 5 s.
    pub fn term(&mut self) -> (i32, Duration) {
        let t = Instant::now();
        self.signal(libc::SIGTERM);
        match self.wait_exit(Duration::from_secs(5)) {
            Some(c) => (c, t.elapsed()),
            None => {
                self.signal(libc::SIGKILL);
                let _ = self.wait_exit(Duration::from_secs(5));
                panic!(
                    "pid {} ignored SIGTERM for 5 s:\n{}",
                    self.pid,
                    self.stderr()
                );
            }
        }
    }

    /// A client on this instance, initialized.
    pub fn conn(&self) -> Conn {
        let mut c = Conn::connect(self.socket(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.socket().display()));
        c.init().expect("initialize");
        c
    }

    /// `message/send` params from a plain sender.
    pub fn msg(&self, id: &str, body: &str) -> Value {
        json!({"message_id": id, "target_instance_id": self.id(), "body": body, "sender": {}})
    }
}

impl Drop for Inst {
    fn drop(&mut self) {
        if !self.is_running() {
            return;
        }
        self.signal(libc::SIGCONT);
        self.signal(libc::SIGTERM);
        if self.wait_exit(DROP_GRACE).is_none() {
            self.signal(libc::SIGKILL);
            let _ = self.wait_exit(Duration::from_secs(5));
        }
    }
}

/// A JSON-RPC line client whose every failure is a `Result`: a crash test
/// expects the server to vanish mid-request.
pub struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    next_id: u64,
}

impl Conn {
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Conn> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            next_id: 1,
        })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next line without its `\n`; `None` at EOF (or a reset, which is
    /// a hang-up too).
    pub fn read_line(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                return String::from_utf8(line)
                    .map(Some)
                    .map_err(|e| io::Error::new(ErrorKind::InvalidData, e));
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends a request and returns the whole response object; notifications
    /// in between are skipped. EOF is `UnexpectedEof`.
    pub fn call(&mut self, method: &str, params: Value) -> io::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.send_raw(line.as_bytes())?;
        loop {
            let Some(l) = self.read_line()? else {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("the server closed the connection during {method}"),
                ));
            };
            let v: Value = serde_json::from_str(&l)
                .map_err(|e| io::Error::new(ErrorKind::InvalidData, format!("{e}: {l}")))?;
            if v.get("method").is_none() && v.get("id") == Some(&json!(id)) {
                return Ok(v);
            }
        }
    }

    /// Sends several requests in one write (a client may pipeline; the
    /// answers come in order) and returns their results.
    pub fn pipeline(&mut self, reqs: &[(&str, Value)]) -> io::Result<Vec<Value>> {
        let first = self.next_id;
        let mut out = String::new();
        for (method, params) in reqs {
            let id = self.next_id;
            self.next_id += 1;
            out.push_str(
                &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                    .to_string(),
            );
            out.push('\n');
        }
        self.send_raw(out.as_bytes())?;
        let mut results = Vec::new();
        while results.len() < reqs.len() {
            let Some(l) = self.read_line()? else {
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "closed"));
            };
            let v: Value = serde_json::from_str(&l)
                .map_err(|e| io::Error::new(ErrorKind::InvalidData, format!("{e}: {l}")))?;
            if v.get("method").is_some() {
                continue;
            }
            let want = first + results.len() as u64;
            match v.get("result") {
                Some(r) if v["id"] == want => results.push(r.clone()),
                _ => return Err(io::Error::other(format!("answer to request {want}: {v}"))),
            }
        }
        Ok(results)
    }

    /// The `result` of a call; a JSON-RPC error is an `Other` error.
    pub fn result(&mut self, method: &str, params: Value) -> io::Result<Value> {
        let r = self.call(method, params)?;
        match r.get("result") {
            Some(v) => Ok(v.clone()),
            None => Err(io::Error::other(format!("{method}: {r}"))),
        }
    }

    pub fn init(&mut self) -> io::Result<Value> {
        self.result(
            "initialize",
            json!({"protocol_version": 1, "client": {"name": "reliability", "version": "0"}}),
        )
    }

    pub fn ping(&mut self) -> io::Result<()> {
        let r = self.result("ping", json!({}))?;
        if r["status"] != "pong" {
            return Err(io::Error::other(format!("ping: {r}")));
        }
        Ok(())
    }

    /// `agent/info`'s `(queued, processing)`.
    pub fn queue(&mut self) -> io::Result<(u64, u64)> {
        let r = self.result("agent/info", json!({}))?;
        Ok((
            r["queue"]["queued"].as_u64().unwrap(),
            r["queue"]["processing"].as_u64().unwrap(),
        ))
    }
}

/// The body every test sends for a message id: fixed by the id, so a spool
/// file can be checked against what was sent. Not only ASCII.
pub fn body_for(id: &str) -> String {
    let pad = id.bytes().map(usize::from).sum::<usize>() % 40;
    format!("task {id}: grüße ✓ {}", "·".repeat(pad))
}

/// The spool of the instance named `name` serving `ws` in `env`.
pub fn spool_dir(env: &Env, name: &str, ws: &Path) -> PathBuf {
    spool_dir_in(&env.state, name, ws)
}

/// The spool of the instance named `name` serving `ws` under the state
/// home `state`.
pub fn spool_dir_in(state: &Path, name: &str, ws: &Path) -> PathBuf {
    let hash = sha256_hex(ws.as_os_str().as_encoded_bytes());
    state
        .join("baton/spool")
        .join(format!("{name}-{}", &hash[..16]))
}

/// A private directory in `/dev/shm` (tmpfs), removed with everything in
/// it when dropped; `None` where there is no such file system.
pub struct ShmDir(pub PathBuf);

impl ShmDir {
    pub fn new(tag: &str) -> Option<ShmDir> {
        let base = Path::new("/dev/shm");
        if !base.is_dir() {
            return None;
        }
        let p = base.join(format!("baton-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .ok()
            .map(|()| ShmDir(p))
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One task file of a spool, checked.
#[derive(Clone, Debug)]
pub struct Item {
    pub place: &'static str,
    pub seq: u64,
    pub id: String,
    pub body: String,
}

/// Everything in a spool, every file parsed and checked.
#[derive(Debug, Default)]
pub struct View {
    pub items: Vec<Item>,
    /// `done/`: id to receipt.
    pub done: BTreeMap<String, Value>,
    pub tmp: Vec<String>,
    pub rejected: Vec<String>,
}

impl View {
    /// The places where `id` is (a task file or a receipt).
    pub fn places(&self, id: &str) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self
            .items
            .iter()
            .filter(|i| i.id == id)
            .map(|i| i.place)
            .collect();
        if self.done.contains_key(id) {
            v.push("done");
        }
        v
    }

    pub fn in_place(&self, place: &str) -> Vec<&Item> {
        self.items.iter().filter(|i| i.place == place).collect()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", dir.display()),
    };
    v.sort();
    v
}

/// Reads a spool nobody is changing (its instance is stopped, dead or
/// idle): every task file must be named `<seq>-<id>.json`, parse, carry
/// its id and sequence number, and hold a body whose SHA-256 is its
/// `digest`; every receipt must parse and name its id. All problems are
/// returned together.
pub fn read_spool(dir: &Path) -> Result<View, Vec<String>> {
    let mut view = View::default();
    let mut bad = Vec::new();
    for place in ["inbox", "processing", "interrupted"] {
        for name in names(&dir.join(place)) {
            let path = dir.join(place).join(&name);
            let parsed = (|| -> Result<Item, String> {
                let stem = name.strip_suffix(".json").ok_or("not .json")?;
                let (seq, id) = stem.split_once('-').ok_or("no <seq>-")?;
                if seq.len() != 16 {
                    return Err("sequence is not 16 digits".into());
                }
                let seq: u64 = seq.parse().map_err(|_| "bad sequence")?;
                let bytes = fs::read(&path).map_err(|e| e.to_string())?;
                let t: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
                let body = t["body"].as_str().ok_or("no body")?.to_string();
                if t["message_id"] != id {
                    return Err(format!("message_id is {}", t["message_id"]));
                }
                if t["seq"] != seq {
                    return Err(format!("seq is {}", t["seq"]));
                }
                if t["digest"] != sha256_hex(body.as_bytes()) {
                    return Err(format!("digest {} does not match the body", t["digest"]));
                }
                Ok(Item {
                    place,
                    seq,
                    id: id.to_string(),
                    body,
                })
            })();
            match parsed {
                Ok(i) => view.items.push(i),
                Err(e) => bad.push(format!("{place}/{name}: {e}")),
            }
        }
    }
    for name in names(&dir.join("done")) {
        let path = dir.join("done").join(&name);
        let Some(id) = name.strip_suffix(".json") else {
            bad.push(format!("done/{name}: not .json"));
            continue;
        };
        match fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()))
        {
            Ok(r)
                if r["message_id"] == id && r["digest"].as_str().is_some_and(|d| d.len() == 64) =>
            {
                view.done.insert(id.to_string(), r);
            }
            Ok(r) => bad.push(format!("done/{name}: receipt {r} does not fit")),
            Err(e) => bad.push(format!("done/{name}: {e}")),
        }
    }
    view.tmp = names(&dir.join("tmp"));
    view.rejected = names(&dir.join("rejected"));
    if bad.is_empty() { Ok(view) } else { Err(bad) }
}

/// `read_spool` that panics with every problem.
pub fn spool(dir: &Path) -> View {
    read_spool(dir).unwrap_or_else(|bad| panic!("bad spool files:\n{}", bad.join("\n")))
}

/// The handler command that records each run, one message id a line.
pub fn logging_handler(log: &Path) -> String {
    format!("echo \"$BATON_MESSAGE_ID\" >> '{}'", log.display())
}

/// The message ids a logging handler recorded, in order.
pub fn runs(log: &Path) -> Vec<String> {
    match fs::read_to_string(log) {
        Ok(s) => s.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", log.display()),
    }
}

/// Polls `f` every 5 ms; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// CPU time (user + system) a process has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Open file descriptors of a process.
pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// A small deterministic generator (xorshift64*), seeded from
/// `BATON_SEED` or the clock; the seed is printed so a failure can be
/// replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("BATON_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: seed {seed} (BATON_SEED={seed} replays it)");
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..=max`.
    pub fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

/// Median and the given percentile of some durations, in ms.
pub fn percentile(v: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((ms.len() as f64 - 1.0) * p).round() as usize;
    ms[i]
}
