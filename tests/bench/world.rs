//! Private directories and the baton processes of one benchmark: every
//! instance is started with a scrubbed environment that sees only this
//! world, and stopped by pid (SIGTERM, then SIGKILL) with bounded waits.

use super::util::{POLL, poll};
use serde_json::Value;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a started instance may take to publish its manifest.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long stopped instances get to exit after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// How long killed instances get to be reaped after SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// The baton binary Cargo built for this target (release under `make
/// bench`).
pub fn baton_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_baton"))
}

/// A private directory (mode 0700), removed with its contents on drop.
pub struct Dir {
    path: PathBuf,
}

impl Dir {
    /// A fresh directory under `base`, named after this process.
    pub fn new(base: &Path, tag: &str) -> io::Result<Dir> {
        static N: AtomicUsize = AtomicUsize::new(0);
        loop {
            let n = N.fetch_add(1, Ordering::Relaxed);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            // Short: socket paths in it must fit sun_path.
            let path = base.join(format!("bb{}-{n}{tag}{}", std::process::id(), nanos % 1000));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Dir { path }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

pub fn mkdir(path: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Where tmpfs benchmarks put their files: `/dev/shm` when it is there.
pub fn tmpfs_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Where disk benchmarks put their files: `BATON_BENCH_DISK` when set (to
/// measure the disk spools will live on), else Cargo's scratch directory
/// for integration tests, on the disk the repository is on.
pub fn disk_base() -> PathBuf {
    match std::env::var_os("BATON_BENCH_DISK") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    }
}

/// A started instance, as its manifest describes it.
#[derive(Clone, Debug)]
pub struct Instance {
    pub pid: u32,
    pub id: String,
    pub socket: PathBuf,
}

/// A world: registry, state home, temporary directory and home on tmpfs
/// (the state home may be elsewhere), and the processes started in it.
pub struct World {
    root: Dir,
    /// Kept alive while the world is: the state home on disk, if any.
    _state_dir: Option<Dir>,
    pub reg: PathBuf,
    pub state: PathBuf,
    vars: Vec<(String, String)>,
    children: Vec<Child>,
    /// The inotify watches of timed starts, closed with the world.
    watches: Vec<Arrivals>,
}

impl World {
    /// A world whose spools live on tmpfs, or on disk with `on_disk`.
    /// `vars` are `BATON_*` settings every process in it gets.
    pub fn new(on_disk: bool, vars: &[(&str, &str)]) -> Result<World, String> {
        let root = Dir::new(&tmpfs_base(), "").map_err(|e| format!("temp dir: {e}"))?;
        let state_dir = if on_disk {
            let base = disk_base();
            fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
            Some(Dir::new(&base, "d").map_err(|e| format!("temp dir on disk: {e}"))?)
        } else {
            None
        };
        let state = match &state_dir {
            Some(d) => d.path().join("state"),
            None => root.path().join("state"),
        };
        for d in [
            state.clone(),
            root.path().join("tmp"),
            root.path().join("home"),
            root.path().join("ws"),
            root.path().join("log"),
        ] {
            mkdir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Ok(World {
            reg: root.path().join("reg"),
            root,
            _state_dir: state_dir,
            state,
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            children: Vec::new(),
            watches: Vec::new(),
        })
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A `baton` command that sees only this world.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(baton_bin());
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("HOME", self.root().join("home"))
            .env("BATON_DIR", &self.reg)
            .env("XDG_STATE_HOME", &self.state)
            .env("TMPDIR", self.root().join("tmp"))
            .env("LANG", "C.UTF-8")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// Starts `baton serve --name NAME` for each name (its workspace a
    /// fresh directory), all at once, and waits until every one has
    /// published its manifest.
    pub fn start(&mut self, names: &[String], args: &[&str]) -> Result<Vec<Instance>, String> {
        let mut pending: HashMap<u32, (usize, PathBuf)> = HashMap::new();
        // Set before the start, so that no arrival is missed.
        let watch = (names.len() == 1)
            .then(|| Arrivals::watch(&self.reg))
            .flatten();
        let first = self.children.len();
        for (i, name) in names.iter().enumerate() {
            let ws = self.root().join("ws").join(name);
            mkdir(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
            let log = self.root().join("log").join(format!("{name}.err"));
            let err = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            let child = self
                .cmd()
                .args(["serve", "--name", name])
                .arg("--workspace")
                .arg(&ws)
                .args(args)
                .current_dir(&ws)
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .map_err(|e| format!("cannot start baton serve: {e}"))?;
            pending.insert(child.id(), (i, log));
            self.children.push(child);
        }
        let mut found: Vec<Option<Instance>> = vec![None; names.len()];
        // Finer polling when one start is being timed: woken by the
        // manifest's arrival where inotify can tell, rather than scanning
        // a registry of thousands of entries every millisecond beside the
        // start being measured.
        let every = Duration::from_millis(if names.len() == 1 { 1 } else { 5 });
        let (every, wait) = match &watch {
            Some(_) => (Duration::ZERO, Duration::from_millis(50)),
            None => (every, Duration::ZERO),
        };
        // With a watch, a scan too now and then: an arrival it could not
        // read yet is not lost.
        let mut scanned = Instant::now();
        let started = poll(START_TIMEOUT, every, || {
            let seen = watch
                .as_ref()
                .is_some_and(|w| w.arrivals(&self.reg, wait, &mut pending, &mut found));
            if !seen || scanned.elapsed() > Duration::from_millis(500) {
                collect_published(&self.reg, &mut pending, &mut found);
                scanned = Instant::now();
            }
            for child in &mut self.children[first..] {
                let Some((_, log)) = pending.get(&child.id()) else {
                    continue;
                };
                if let Ok(Some(status)) = child.try_wait() {
                    return Some(Err(format!(
                        "baton serve exited with {status} before publishing its manifest: {}",
                        fs::read_to_string(log).unwrap_or_default().trim()
                    )));
                }
            }
            pending.is_empty().then_some(Ok(()))
        });
        started.unwrap_or_else(|| {
            Err(format!(
                "{} of {} instances did not publish a manifest within {START_TIMEOUT:?}",
                pending.len(),
                names.len()
            ))
        })?;
        // Closed later: closing an inotify descriptor waits for an RCU
        // grace period, milliseconds that are not the start's.
        self.watches.extend(watch);
        Ok(found.into_iter().map(|i| i.expect("found")).collect())
    }

    /// Waits until the instance `name` has said on stderr that it serves,
    /// which it does once its start is over (after its manifest, and
    /// after it removed the stale entries it found).
    pub fn wait_started(&self, name: &str) -> Result<(), String> {
        let log = self.root().join("log").join(format!("{name}.err"));
        poll(START_TIMEOUT, POLL, || {
            let text = fs::read_to_string(&log).unwrap_or_default();
            text.contains(") serving ").then_some(())
        })
        .ok_or_else(|| format!("{name} did not say that it serves within {START_TIMEOUT:?}"))
    }

    /// Starts `count` instances in batches of `batch` at a time.
    pub fn start_batched(
        &mut self,
        names: &[String],
        args: &[&str],
        batch: usize,
    ) -> Result<Vec<Instance>, String> {
        let mut out = Vec::new();
        for chunk in names.chunks(batch.max(1)) {
            out.extend(self.start(chunk, args)?);
        }
        Ok(out)
    }

    /// Spawns `cmd` (made by [`World::cmd`]) as a process of this world:
    /// [`World::stop_all`] stops it with the instances, by pid. Its pid.
    pub fn spawn(&mut self, cmd: &mut Command) -> Result<u32, String> {
        let child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Whether the process `pid` started in this world has not exited.
    pub fn running(&mut self, pid: u32) -> bool {
        self.children
            .iter_mut()
            .find(|c| c.id() == pid)
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops every process started in this world, by pid: SIGTERM, a
    /// bounded wait, then SIGKILL and another bounded wait.
    pub fn stop_all(&mut self) {
        for c in &self.children {
            signal(c.id(), libc::SIGTERM);
        }
        let reap = |children: &mut Vec<Child>, grace: Duration| {
            let _ = poll(grace, POLL, || {
                children.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
                children.is_empty().then_some(())
            });
        };
        reap(&mut self.children, TERM_GRACE);
        for c in &self.children {
            signal(c.id(), libc::SIGKILL);
        }
        reap(&mut self.children, KILL_GRACE);
        if !self.children.is_empty() {
            eprintln!(
                "bench: {} baton processes could not be reaped",
                self.children.len()
            );
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is one of
    // our own children, not yet reaped, so it cannot have been reused.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Moves each instance in `pending` (by pid: its index in `found` and its
/// log) whose manifest is now readable in `reg` to `found`.
/// The names renamed or created into a directory, from inotify (Linux).
struct Arrivals(std::os::fd::OwnedFd);

impl Arrivals {
    fn watch(dir: &Path) -> Option<Arrivals> {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: a plain system call.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor inotify_init1 just returned, owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mask = libc::IN_MOVED_TO | libc::IN_CREATE;
        // SAFETY: `path` is NUL-terminated and outlives the call.
        let wd = unsafe { libc::inotify_add_watch(raw(&fd), path.as_ptr(), mask) };
        (wd >= 0).then_some(Arrivals(fd))
    }

    /// Waits up to `wait` for arrivals and takes the manifests among them
    /// of the pending starts (as `collect_published` does). False when
    /// the kernel's queue overflowed: the caller scans instead.
    fn arrivals(
        &self,
        reg: &Path,
        wait: Duration,
        pending: &mut HashMap<u32, (usize, PathBuf)>,
        found: &mut [Option<Instance>],
    ) -> bool {
        let mut pfd = libc::pollfd {
            fd: raw(&self.0),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
        let mut buf = vec![0u8; 1 << 16];
        // SAFETY: the buffer is writable for its length.
        let n = unsafe { libc::read(raw(&self.0), buf.as_mut_ptr().cast(), buf.len()) };
        let mut at = 0;
        while n > 0 && at + 16 <= n as usize {
            // struct inotify_event: wd, mask, cookie, len, then the name.
            let word = |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().unwrap());
            let (mask, len) = (word(4), word(12) as usize);
            if mask & libc::IN_Q_OVERFLOW != 0 {
                return false;
            }
            let name = &buf[at + 16..at + 16 + len];
            let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[]));
            take_manifest(reg, &name, pending, found);
            at += 16 + len;
        }
        true
    }
}

fn raw(fd: &std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

fn collect_published(
    reg: &Path,
    pending: &mut HashMap<u32, (usize, PathBuf)>,
    found: &mut [Option<Instance>],
) {
    let Ok(rd) = fs::read_dir(reg) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        if let Ok(file) = e.file_name().into_string() {
            take_manifest(reg, &file, pending, found);
        }
    }
}

/// If `file` in `reg` is the manifest of a pending start, records it.
fn take_manifest(
    reg: &Path,
    file: &str,
    pending: &mut HashMap<u32, (usize, PathBuf)>,
    found: &mut [Option<Instance>],
) {
    let Some(id) = file
        .strip_prefix("a-")
        .and_then(|f| f.strip_suffix(".json"))
    else {
        return;
    };
    let Some(pid) = id.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return;
    };
    let Some((i, _)) = pending.get(&pid) else {
        return;
    };
    let Some(m) = fs::read(reg.join(file))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    else {
        return;
    };
    let Some(socket) = m["socket"].as_str() else {
        return;
    };
    found[*i] = Some(Instance {
        pid,
        id: id.to_string(),
        socket: PathBuf::from(socket),
    });
    pending.remove(&pid);
}

/// Runs a command to completion with `stdin` fed to it, killing it (by
/// pid) after `timeout`. Returns the wall time from spawn to exit and
/// stdout; a non-zero exit is an error.
pub fn run_timed(
    cmd: &mut Command,
    stdin: &[u8],
    timeout: Duration,
) -> Result<(Duration, Vec<u8>), String> {
    use std::io::Write;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let pid = child.id();
    let mut pipe = child.stdin.take().expect("piped");
    let data = stdin.to_vec();
    let feeder = thread::spawn(move || {
        let _ = pipe.write_all(&data);
    });
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send((t0.elapsed(), out));
    });
    let (wall, out) = match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(_) => {
            signal(pid, libc::SIGKILL);
            let _ = rx.recv_timeout(KILL_GRACE);
            return Err(format!("still running after {timeout:?}; killed"));
        }
    };
    let _ = feeder.join();
    let out = out.map_err(|e| format!("wait: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok((wall, out.stdout))
}
