//! The real agent hosts the suite drives (tests/hosts.rs): where their
//! binaries are, and a guard for a host process and everything it starts.
//!
//! `.ci/run` installs the pinned npm packages into a cache directory
//! outside the repository, `${BATON_HOSTS_DIR:-$HOME/.cache/baton-hosts}`;
//! the tests take a binary from `BATON_CLAUDE` or `BATON_CODEX` when set,
//! else from the platform package in that directory (the native binary
//! itself, not npm's launcher, so no Node.js is needed to run it).

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::{POLL, poll};

/// The versions `.ci/run` installs, which the tests are written against.
pub const CLAUDE_VERSION: &str = "2.1.328";
pub const CODEX_VERSION: &str = "0.169.0";

/// How long a host gets to end after SIGTERM before the group is killed.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// The directory the npm packages are installed in.
pub fn hosts_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BATON_HOSTS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cache/baton-hosts")
}

fn executable(p: &Path) -> bool {
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where the binary of `host` (`claude` or `codex`) is looked for, in
/// order: its variable, then the platform packages in `hosts_dir()`.
pub fn candidates(host: &str) -> (&'static str, Vec<PathBuf>) {
    let modules = hosts_dir().join("node_modules");
    let (npm_arch, triple) = match std::env::consts::ARCH {
        "aarch64" => ("arm64", "aarch64-unknown-linux-musl"),
        _ => ("x64", "x86_64-unknown-linux-musl"),
    };
    match host {
        "claude" => (
            "BATON_CLAUDE",
            vec![
                modules.join(format!("@anthropic-ai/claude-code-linux-{npm_arch}/claude")),
                modules.join(format!(
                    "@anthropic-ai/claude-code-linux-{npm_arch}-musl/claude"
                )),
                // Not `@anthropic-ai/claude-code/bin/claude.exe`: the
                // package's postinstall links the native binary there, and
                // without it (`--ignore-scripts`, as `.ci/run` installs)
                // it is a stub that says so and fails.
            ],
        ),
        "codex" => (
            "BATON_CODEX",
            vec![modules.join(format!(
                "@openai/codex-linux-{npm_arch}/vendor/{triple}/bin/codex"
            ))],
        ),
        other => panic!("no such host: {other}"),
    }
}

/// The binary of `host`, or `None` with `skipped: ...` printed when it is
/// not installed; under BATON_REQUIRE_ALL=1 a missing host fails the test
/// instead, as `have` does for a tool.
pub fn host_bin(host: &str) -> Option<PathBuf> {
    let (var, paths) = candidates(host);
    let found = match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(set) => {
            let p = PathBuf::from(set);
            executable(&p).then_some(p)
        }
        None => paths.iter().find(|p| executable(p)).cloned(),
    };
    if found.is_none() {
        let looked = match std::env::var_os(var).filter(|v| !v.is_empty()) {
            Some(set) => format!("{var}={}", Path::new(&set).display()),
            None => format!("{paths:?} ({var} unset)"),
        };
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!(
                "{host} is required (BATON_REQUIRE_ALL=1) but not installed: looked at {looked}"
            );
        }
        let version = if host == "claude" {
            CLAUDE_VERSION
        } else {
            CODEX_VERSION
        };
        eprintln!(
            "skipped: {host} is not installed (looked at {looked}; .ci/run installs {host} {version})"
        );
    }
    found
}

/// A host process, in a process group of its own, with its stdout and
/// stderr in files. Dropping it ends the whole group: SIGTERM, then
/// SIGKILL after 5 s, the group signalled while its leader is not yet
/// reaped (so the group id cannot have been reused).
pub struct Host {
    pub child: Child,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// Whether the leader has been reaped (its group ended before).
    reaped: bool,
}

impl Host {
    /// Starts `cmd` in a new process group, its output to `out` and `err`
    /// (files under the test's root), unless the caller piped them.
    pub fn spawn(mut cmd: Command, out: &Path, err: &Path, piped_stdout: bool) -> Host {
        let stderr = File::create(err).unwrap_or_else(|e| panic!("create {}: {e}", err.display()));
        cmd.process_group(0).stderr(stderr);
        if !piped_stdout {
            let stdout =
                File::create(out).unwrap_or_else(|e| panic!("create {}: {e}", out.display()));
            cmd.stdout(stdout);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        Host {
            child,
            stdout_path: out.to_path_buf(),
            stderr_path: err.to_path_buf(),
            reaped: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stdout_path).unwrap_or_default()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr_path).unwrap_or_default()).into_owned()
    }

    /// Whether the leader has exited, without reaping it.
    fn leader_exited(&self) -> bool {
        let pid: libc::id_t = self.child.id();
        // SAFETY: waitid writes only into `info`, which lives on this
        // stack; WNOWAIT leaves the child unreaped, so its pid (and the
        // group id) stays ours.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r != 0 || info.si_pid() != 0
        }
    }

    /// Waits up to `timeout` for the leader to exit by itself; its exit
    /// code (128 + signal), or `None` if it still runs. Once it has
    /// exited, whatever it left in its group is killed and it is reaped.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        poll(timeout, POLL, || self.leader_exited().then_some(()))?;
        // Whatever it left in its group goes first, while the leader's
        // unreaped pid still holds the group id.
        self.signal_group(libc::SIGKILL);
        self.reaped = true;
        self.child.wait().ok().map(super::exit_code)
    }

    fn signal_group(&self, sig: libc::c_int) {
        let Ok(pgid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the group is
        // the one our unreaped child leads.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.reaped {
            // Its group was killed then (wait_exit).
            return;
        }
        self.signal_group(libc::SIGTERM);
        let _ = poll(TERM_GRACE, POLL, || self.leader_exited().then_some(()));
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }
}
