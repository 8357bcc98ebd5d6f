//! Row 8's private OpenSSH server, set up the way tests/ssh/sshd.rs sets
//! up its own: host and user keys made here by `ssh-keygen`, `UsePAM no`,
//! `StrictModes no`, 127.0.0.1 and a free port, its PidFile in a private
//! directory, stopped by the pid in that file. Also the ssh masters that
//! `baton send --via` leaves behind, stopped with `ssh -O exit` (then by
//! pid) on drop. Every wait is bounded.

use crate::world::Dir;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";
/// The bound on every wait here.
const T: Duration = Duration::from_secs(10);

/// Whether `tool` is on PATH.
fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What is missing to run a private sshd (sshd is looked for by its path:
/// /usr/sbin is often not on PATH), or None.
pub fn missing() -> Option<String> {
    let mut gone = Vec::new();
    if !Path::new(SSHD).exists() {
        gone.push(format!("{SSHD} (openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen"] {
        if !on_path(tool) {
            gone.push(tool.to_string());
        }
    }
    (!gone.is_empty()).then(|| gone.join(", "))
}

/// An ed25519 key pair at `path` (and `path.pub`); the public line.
fn keygen(path: &Path) -> Result<String, String> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "baton-bench", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    fs::read_to_string(path.with_extension("pub")).map_err(|e| format!("ssh-keygen: {e}"))
}

/// A private sshd, stopped (by the pid in its PidFile) when dropped.
pub struct Sshd {
    dir: PathBuf,
    child: Child,
    pub port: u16,
}

impl Sshd {
    /// Starts one in `dir` (private, short-lived) that takes one user key
    /// for any command and accepts BATON_DIR and XDG_STATE_HOME.
    pub fn start(dir: &Dir) -> Result<Sshd, String> {
        let mut dir = dir.path().to_path_buf();
        // sshd refuses to start without its privilege separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let host = keygen(&dir.join("host_key"))?;
        let user = keygen(&dir.join("user_key"))?;
        fs::write(dir.join("authorized_keys"), user).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + T;
        loop {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("a free port: {e}"))?
                .port();
            let d = dir.display();
            fs::write(
                dir.join("sshd_config"),
                format!(
                    "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\n\
                     PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
                     UsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                     PermitRootLogin prohibit-password\nAcceptEnv BATON_DIR XDG_STATE_HOME\n\
                     LogLevel ERROR\n"
                ),
            )
            .map_err(|e| e.to_string())?;
            let _ = fs::remove_file(dir.join("sshd.pid"));
            let log = fs::File::create(dir.join("sshd.log")).map_err(|e| e.to_string())?;
            let child = Command::new(SSHD)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(dir.join("sshd_config"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("{SSHD}: {e}"))?;
            let mut sshd = Sshd { dir, child, port };
            match sshd.wait_ready(deadline) {
                Ok(()) => {
                    let known = format!("[127.0.0.1]:{port} {host}");
                    fs::write(sshd.dir.join("known_hosts"), known).map_err(|e| e.to_string())?;
                    return Ok(sshd);
                }
                // The port was taken meanwhile: another one. Dropping
                // `sshd` stops it.
                Err(log) if Instant::now() < deadline => {
                    eprintln!("bench: sshd did not start on port {port}, again: {log}");
                    dir = sshd.dir.clone();
                }
                Err(log) => return Err(format!("sshd did not start within {T:?}: {log}")),
            }
        }
    }

    /// Waits for sshd to write its PidFile and take connections; its log
    /// if it exits first or the deadline passes.
    fn wait_ready(&mut self, deadline: Instant) -> Result<(), String> {
        let log = |d: &Path| fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Err(log(&self.dir));
            }
            if self.dir.join("sshd.pid").exists()
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(log(&self.dir))
    }

    /// `ssh` with the user key, a pinned host key and no prompts, passing
    /// `registry` and `state` to the remote baton with SetEnv; no options
    /// about connection sharing: what an operator puts in `--via`.
    pub fn via(&self, registry: &Path, state: &Path) -> String {
        let d = self.dir.display();
        format!(
            "ssh -F /dev/null -p {} -i {d}/user_key -o IdentitiesOnly=yes -o BatchMode=yes \
             -o StrictHostKeyChecking=yes -o UserKnownHostsFile={d}/known_hosts \
             -o ConnectTimeout=5 -o LogLevel=ERROR \
             -o 'SetEnv=BATON_DIR={} XDG_STATE_HOME={}' 127.0.0.1",
            self.port,
            registry.display(),
            state.display(),
        )
    }
}

impl Drop for Sshd {
    /// Stops sshd by the pid in its PidFile (the child's, with -D).
    fn drop(&mut self) {
        let pid = fs::read_to_string(self.dir.join("sshd.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(self.child.id() as i32);
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // this bench's sshd, still its child (not yet reaped).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a process that is not our child is still running (not a
/// zombie).
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// The ssh master `baton send --via` keeps for later sends, found by its
/// control socket (`ssh-*`) in the local registry; stopped when dropped.
pub struct Master {
    pub registry: PathBuf,
}

impl Master {
    /// Its control socket, if there is one.
    pub fn socket(&self) -> Option<PathBuf> {
        fs::read_dir(&self.registry)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("ssh-"))
            })
    }

    fn control(socket: &Path, op: &str) -> Option<std::process::Output> {
        Command::new("ssh")
            .args(["-F", "/dev/null", "-O", op, "-o"])
            .arg(format!("ControlPath={}", socket.display()))
            .arg("127.0.0.1")
            .stdin(Stdio::null())
            .output()
            .ok()
    }

    /// The pid `ssh -O check` gives for the master on `socket`.
    fn pid(socket: &Path) -> Option<i32> {
        let out = Master::control(socket, "check")?;
        let text = String::from_utf8_lossy(&out.stderr);
        let rest = &text[text.find("(pid=")? + 5..];
        rest[..rest.find(')')?].parse().ok()
    }

    /// Stops the master, if one runs: `ssh -O exit`, a bounded wait for
    /// its pid to go, then SIGTERM and SIGKILL by that pid, each followed
    /// by a bounded wait.
    pub fn stop(&self) {
        let Some(socket) = self.socket() else {
            return;
        };
        if let Some(pid) = Master::pid(&socket) {
            let _ = Master::control(&socket, "exit");
            for sig in [0, libc::SIGTERM, libc::SIGKILL] {
                if sig != 0 && alive(pid) {
                    // SAFETY: kill(2) has no memory-safety preconditions;
                    // the pid is the master this bench's sends started,
                    // as ssh said a moment ago.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
                let deadline = Instant::now() + T / 2;
                while alive(pid) && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(2));
                }
                if !alive(pid) {
                    break;
                }
            }
        }
        let _ = fs::remove_file(&socket);
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.stop();
    }
}
