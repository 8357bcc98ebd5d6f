//! A private OpenSSH server, for the tests that go through a real one
//! (`tests/ssh/sshd.rs`) and for row 8 of the benchmarks: `sshd -D -e -f
//! CONFIG` on 127.0.0.1 and a free port, with host and user keys made by
//! `ssh-keygen` in a private directory, `UsePAM no` and `StrictModes no`
//! so that it runs as whoever runs the tests, stopped by the pid in its
//! PidFile when dropped. Also the ssh masters `baton send --via` leaves
//! running for later sends, stopped by pid when dropped.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{POLL, TempDir, exited_or_killed, have, poll, wait_gone};

/// sshd is in /usr/sbin, often not on PATH: it is looked for by its path.
pub const SSHD: &str = "/usr/sbin/sshd";
/// The bound on every wait here.
const T: Duration = Duration::from_secs(10);

/// What is missing to run a private sshd, or `None`.
pub fn missing() -> Option<String> {
    let mut gone = Vec::new();
    if !Path::new(SSHD).exists() {
        gone.push(format!("{SSHD} (openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            gone.push(tool.to_string());
        }
    }
    (!gone.is_empty()).then(|| gone.join(", "))
}

/// Whether a private sshd can run here; as `have` says of a tool, a test
/// without one is skipped with a printed reason, except under
/// BATON_REQUIRE_ALL=1 where that is a failure.
pub fn have_sshd() -> bool {
    if !Path::new(SSHD).exists() {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!("{SSHD} is required (BATON_REQUIRE_ALL=1) but not installed (openssh-server)");
        }
        eprintln!("skipped: {SSHD} is not installed");
        return false;
    }
    have("ssh") && have("ssh-keygen")
}

/// An ed25519 key pair at `path` (and `path.pub`); the public line.
fn keygen(path: &Path) -> Result<String, String> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "baton-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    if !out.status.success() {
        return Err(format!("ssh-keygen: {out:?}"));
    }
    fs::read_to_string(path.with_extension("pub")).map_err(|e| format!("ssh-keygen: {e}"))
}

/// A private sshd, stopped (by the pid in its PidFile) when dropped.
pub struct Sshd {
    dir: TempDir,
    child: Child,
    pub port: u16,
}

impl Sshd {
    /// Starts one that takes the key `user_key` for any command and
    /// accepts BATON_DIR and XDG_STATE_HOME. With `forced`, the key
    /// `forced_key` runs that command only, whatever is asked for; with
    /// `home`, its sessions get that HOME (sshd's own `SetEnv`, OpenSSH
    /// 8.7).
    pub fn start(forced: Option<&str>, home: Option<&Path>) -> Result<Sshd, String> {
        let dir = TempDir::new_in(&std::env::temp_dir()).map_err(|e| format!("temp dir: {e}"))?;
        // sshd refuses to start without its privilege separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let host = keygen(&dir.join("host_key"))?;
        let mut authorized = keygen(&dir.join("user_key"))?;
        if let Some(command) = forced {
            let key = keygen(&dir.join("forced_key"))?;
            authorized.push_str(&format!("restrict,command=\"{command}\" {key}"));
        }
        fs::write(dir.join("authorized_keys"), authorized).map_err(|e| e.to_string())?;
        // A free port may be taken before sshd binds it: then another one,
        // within the one bound.
        let began = Instant::now();
        let mut said = String::new();
        let up = poll(T, POLL, || {
            match Sshd::attempt(&dir, home, T.saturating_sub(began.elapsed())) {
                Ok(up) => Some(up),
                Err(log) => {
                    eprintln!("sshd did not start, again: {log}");
                    said = log;
                    None
                }
            }
        });
        let Some((child, port)) = up else {
            return Err(format!("sshd did not start within {T:?}: {said}"));
        };
        let known = format!("[127.0.0.1]:{port} {host}");
        fs::write(dir.join("known_hosts"), known).map_err(|e| e.to_string())?;
        Ok(Sshd { dir, child, port })
    }

    /// sshd on a fresh free port, once it has written its PidFile and
    /// takes connections; what it logged (or why it could not be run) if
    /// it exits first or `bound` passes, with it stopped.
    fn attempt(
        dir: &TempDir,
        home: Option<&Path>,
        bound: Duration,
    ) -> Result<(Child, u16), String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        let d = dir.path().display();
        let set_home = home.map_or(String::new(), |h| format!("SetEnv HOME={}\n", h.display()));
        fs::write(
            dir.join("sshd_config"),
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\n\
                 PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
                 UsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                 PermitRootLogin prohibit-password\nAcceptEnv BATON_DIR XDG_STATE_HOME\n\
                 {set_home}LogLevel ERROR\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let _ = fs::remove_file(dir.join("sshd.pid"));
        let log = fs::File::create(dir.join("sshd.log")).map_err(|e| e.to_string())?;
        let mut child = Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{SSHD}: {e}"))?;
        let ready = poll(bound, POLL, || {
            if let Ok(Some(_)) = child.try_wait() {
                return Some(false);
            }
            let listening =
                dir.join("sshd.pid").exists() && TcpStream::connect(("127.0.0.1", port)).is_ok();
            listening.then_some(true)
        });
        if ready == Some(true) {
            return Ok((child, port));
        }
        let _ = child.kill();
        let _ = child.wait();
        let said = fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
        Err(format!("on port {port}: {said}"))
    }

    /// The file `name` (a key, `known_hosts`) in the server's directory.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// An ssh config (`ssh -F FILE ALIAS`) naming this server under each
    /// alias of `worlds`, each passing its world's registry and state home
    /// with `SetEnv`, and with `dead` an alias `dead` for a port nothing
    /// listens on. The first value ssh obtains for an option is the one it
    /// uses, so the aliases' own blocks come first.
    pub fn aliases(&self, worlds: &[(&str, &crate::util::Env)], dead: Option<u16>) -> String {
        let mut c = String::new();
        for (alias, env) in worlds {
            c.push_str(&format!(
                "Host {alias}\n  SetEnv BATON_DIR={} XDG_STATE_HOME={}\n",
                env.registry.display(),
                env.state.display()
            ));
        }
        if let Some(port) = dead {
            c.push_str(&format!("Host dead\n  Port {port}\n"));
        }
        c.push_str(&format!(
            "Host *\n  HostName 127.0.0.1\n  Port {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             BatchMode yes\n  StrictHostKeyChecking yes\n  UserKnownHostsFile {}\n  \
             ConnectTimeout 5\n  LogLevel ERROR\n",
            self.port,
            self.key("user_key").display(),
            self.key("known_hosts").display()
        ));
        c
    }

    /// `ssh` with the key `key`, a pinned host key and no prompts, passing
    /// `world` (a registry and a state home) to the remote baton with
    /// SetEnv when given; no options about connection sharing: what an
    /// operator puts in `--via`.
    pub fn via(&self, key: &str, world: Option<(&Path, &Path)>) -> String {
        let setenv = world
            .map(|(registry, state)| {
                format!(
                    " -o 'SetEnv=BATON_DIR={} XDG_STATE_HOME={}'",
                    registry.display(),
                    state.display()
                )
            })
            .unwrap_or_default();
        format!(
            "ssh -F /dev/null -p {} -i {} -o IdentitiesOnly=yes -o BatchMode=yes \
             -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o ConnectTimeout=5 \
             -o LogLevel=ERROR{setenv} 127.0.0.1",
            self.port,
            self.key(key).display(),
            self.key("known_hosts").display(),
        )
    }
}

impl Drop for Sshd {
    /// Stops sshd by the pid in its PidFile (the child's, with -D).
    fn drop(&mut self) {
        let pid = fs::read_to_string(self.dir.join("sshd.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<libc::pid_t>().ok())
            .unwrap_or(self.child.id() as libc::pid_t);
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // this run's sshd, which is still its child (not yet reaped).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let _ = exited_or_killed(&mut self.child, T);
    }
}

/// The ssh masters `baton send --via` keeps running for later sends
/// (ControlPersist), found by their control sockets (`ssh-*`) in the
/// local registry `0`; stopped when this is dropped, however the run ends.
pub struct Masters(pub PathBuf);

impl Masters {
    /// The control sockets there, sorted.
    pub fn sockets(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = fs::read_dir(&self.0)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        found.retain(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ssh-"))
        });
        found.sort();
        found
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
    pub fn pid(socket: &Path) -> Option<u32> {
        let out = Masters::control(socket, "check")?;
        let text = String::from_utf8_lossy(&out.stderr);
        let rest = &text[text.find("(pid=")? + 5..];
        rest[..rest.find(')')?].parse().ok()
    }

    /// Stops every master there: `ssh -O exit`, a bounded wait for its
    /// pid to go, then SIGTERM and SIGKILL by that pid, each followed by a
    /// bounded wait; then its socket is removed.
    pub fn stop(&self) {
        for socket in self.sockets() {
            if let Some(pid) = Masters::pid(&socket) {
                let _ = Masters::control(&socket, "exit");
                for sig in [libc::SIGTERM, libc::SIGKILL] {
                    if wait_gone(pid, T) {
                        break;
                    }
                    // SAFETY: kill(2) has no memory-safety preconditions;
                    // the pid is a master this run's sends started, as ssh
                    // said a moment ago, and was running just now.
                    unsafe {
                        libc::kill(pid as libc::pid_t, sig);
                    }
                }
                if !wait_gone(pid, T) {
                    eprintln!("the ssh master (pid {pid}) outlived SIGKILL");
                }
            }
            let _ = fs::remove_file(&socket);
        }
    }
}

impl Drop for Masters {
    fn drop(&mut self) {
        self.stop();
    }
}
