//! Long-running baton processes a test starts: `Proc`, a guard that stops
//! its process (by pid, while it is still our unreaped child) when dropped,
//! and `Served`, a `baton serve` together with what its manifest says.
//! Also the bounded waits for any process to end: a child of ours
//! (`exited`, `exited_or_killed`, `finish`) or any pid (`pid_alive`,
//! `wait_gone`), or for its pid to be free (`pid_exists`).

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Output};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Env, MANIFEST_TIMEOUT, POLL, RawClient, exit_code, manifests, poll, read_lossy};

/// Grace period a `Proc` gets after SIGTERM when dropped.
const DROP_GRACE: Duration = Duration::from_secs(3);
/// How long `Proc::term` and `Proc::kill9` wait for the exit.
const TERM_TIMEOUT: Duration = Duration::from_secs(5);

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

    /// Sends `sig` if the process is still running. Only then is the pid
    /// guaranteed to be ours: an unreaped child's pid cannot be reused.
    pub fn signal(&mut self, sig: libc::c_int) {
        if !self.is_running() {
            return;
        }
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own unreaped child, so the signal cannot reach another process.
        unsafe {
            libc::kill(pid, sig);
        }
    }

    /// Polls for the exit until `timeout`; its exit code (128 + signal if
    /// a signal ended it), or `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        exited(&mut self.child, timeout).map(exit_code)
    }

    /// Kills the process with SIGKILL, as a crash would, and reaps it.
    /// Panics if it has not been reaped within 5 s.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        if self.wait_exit(TERM_TIMEOUT).is_none() {
            panic!(
                "baton (pid {}) not reaped {TERM_TIMEOUT:?} after SIGKILL",
                self.pid()
            );
        }
    }

    /// Sends SIGTERM and returns the exit code (128 + signal if the signal
    /// itself ended it). Panics if the process is still running after 5 s.
    pub fn term(&mut self) -> i32 {
        self.signal(libc::SIGTERM);
        match self.wait_exit(TERM_TIMEOUT) {
            Some(code) => code,
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
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.is_running() {
            return;
        }
        // SIGTERM first so baton gets to clean up its socket and manifest,
        // which keeps a failing test from leaving litter behind; SIGCONT
        // before it, for a test that stopped the process.
        self.signal(libc::SIGCONT);
        self.signal(libc::SIGTERM);
        if self.wait_exit(DROP_GRACE).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How to start `baton serve`: `vars` added to the scrubbed environment,
/// the arguments after `serve`, and optionally an RLIMIT_NOFILE for it.
#[allow(dead_code)]
#[derive(Clone, Copy, Default)]
pub struct Serve<'a> {
    pub vars: &'a [(&'a str, &'a str)],
    pub args: &'a [&'a str],
    pub nofile: Option<u64>,
}

#[allow(dead_code)]
impl Env {
    /// Starts a long-running baton (normally `serve`) in `workspace`.
    pub fn spawn(&self, args: &[&str], workspace: &Path) -> Proc {
        self.spawn_with(&[], args, workspace, None)
    }

    /// Like `spawn`, with `vars` added to the scrubbed environment and, if
    /// given, RLIMIT_NOFILE set to `nofile`.
    pub fn spawn_with(
        &self,
        vars: &[(&str, &str)],
        args: &[&str],
        workspace: &Path,
        nofile: Option<u64>,
    ) -> Proc {
        let (stdout_path, out) = self.fresh_file("serve", "out");
        let (stderr_path, err) = self.fresh_file("serve", "err");
        let mut cmd = self.cmd();
        cmd.envs(vars.iter().copied())
            .args(args)
            .current_dir(workspace)
            .stdout(out)
            .stderr(err);
        if let Some(limit) = nofile {
            // SAFETY: setrlimit is async-signal-safe and touches no memory
            // of the parent; this runs in the child between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
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
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn baton {args:?}: {e}"));
        Proc {
            child,
            stdout_path,
            stderr_path,
        }
    }

    /// Starts `baton serve` as `s` says, without waiting for it; see
    /// `published` for when it is there.
    pub fn spawn_serve(&self, workspace: &Path, s: Serve<'_>) -> Proc {
        let mut full = vec!["serve"];
        full.extend_from_slice(s.args);
        self.spawn_with(s.vars, &full, workspace, s.nofile)
    }

    /// The registry an instance started with `vars` publishes in: their
    /// `BATON_DIR`, else this world's.
    pub fn registry_for(&self, vars: &[(&str, &str)]) -> PathBuf {
        vars.iter()
            .rev()
            .find(|(k, _)| *k == "BATON_DIR")
            .map_or_else(|| self.registry.clone(), |(_, v)| PathBuf::from(v))
    }

    /// Starts `baton serve <args>` in `workspace` and waits (10 s bound)
    /// until its own manifest is published.
    pub fn serve(&self, workspace: &Path, args: &[&str]) -> Served {
        self.serve_opts(
            workspace,
            Serve {
                args,
                ..Serve::default()
            },
        )
    }

    /// Like `serve`, with `vars` added to the scrubbed environment.
    pub fn serve_with(&self, workspace: &Path, vars: &[(&str, &str)], args: &[&str]) -> Served {
        self.serve_opts(
            workspace,
            Serve {
                vars,
                args,
                nofile: None,
            },
        )
    }

    /// Like `serve`, started as `s` says.
    pub fn serve_opts(&self, workspace: &Path, s: Serve<'_>) -> Served {
        let mut proc = self.spawn_serve(workspace, s);
        let registry = self.registry_for(s.vars);
        let found = poll(MANIFEST_TIMEOUT, POLL, || {
            if let Some(p) = published(&registry, proc.pid()) {
                return Some(Ok(p));
            }
            (!proc.is_running()).then_some(Err(()))
        });
        match found {
            Some(Ok(p)) => Served {
                proc,
                id: p.id,
                registry: p.socket.parent().unwrap().to_path_buf(),
                socket: p.socket,
                workspace: workspace.to_path_buf(),
                manifest_path: p.path,
                manifest: p.manifest,
            },
            Some(Err(())) => panic!(
                "baton serve {:?} (extra env {:?}) exited early:\n{}",
                s.args,
                s.vars,
                proc.stderr()
            ),
            None => panic!(
                "baton serve {:?} (extra env {:?}) published no manifest in \
                 {MANIFEST_TIMEOUT:?}:\n{}",
                s.args,
                s.vars,
                proc.stderr()
            ),
        }
    }
}

/// A manifest an instance published.
#[allow(dead_code)]
pub struct Published {
    pub id: String,
    pub socket: PathBuf,
    /// The manifest file.
    pub path: PathBuf,
    pub manifest: Value,
}

/// Looks once in `registry` for the manifest of the instance with `pid`.
#[allow(dead_code)]
pub fn published(registry: &Path, pid: u32) -> Option<Published> {
    let prefix = format!("a-{pid}-");
    manifests(registry).into_iter().find_map(|path| {
        let name = path.file_name()?.to_str()?;
        if !name.starts_with(&prefix) {
            return None;
        }
        let manifest: Value = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
        Some(Published {
            id: manifest["instance_id"].as_str()?.to_string(),
            socket: PathBuf::from(manifest["socket"].as_str()?),
            path,
            manifest,
        })
    })
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

    /// See `Proc::signal`.
    pub fn signal(&mut self, sig: libc::c_int) {
        self.proc.signal(sig)
    }

    /// See `Proc::wait_exit`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        self.proc.wait_exit(timeout)
    }

    /// A raw client on this instance's socket, already initialized.
    pub fn client(&self) -> RawClient {
        let mut c = RawClient::connect(&self.socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.socket.display()));
        c.initialize();
        c
    }

    /// The instance's spool directory, as `control/status` reports it.
    pub fn spool(&self) -> PathBuf {
        let r = self.client().call(2, "control/status", json!({}));
        PathBuf::from(
            r["result"]["spool"]
                .as_str()
                .unwrap_or_else(|| panic!("control/status has no spool: {r}")),
        )
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

/// `child`'s exit status once it has exited, waiting up to `timeout`;
/// `None` while it still runs.
#[allow(dead_code)]
pub fn exited(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    poll(timeout, POLL, || child.try_wait().ok().flatten())
}

/// Like `exited`, but a child still running after `timeout` is killed and
/// reaped, and `None` says so.
#[allow(dead_code)]
pub fn exited_or_killed(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let status = exited(child, timeout);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// What `child` wrote, once it has exited; panics naming `what` (after
/// killing it) if it runs longer than `timeout`. Its output must fit in
/// the pipes meanwhile, as nothing reads them until it has exited.
#[allow(dead_code)]
#[track_caller]
pub fn finish(mut child: Child, what: &str, timeout: Duration) -> Output {
    if exited_or_killed(&mut child, timeout).is_none() {
        panic!("{what}: still running after {timeout:?}; killed");
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Whether a process that has not yet exited has `pid` (a zombie, or one
/// being torn down, has exited).
#[allow(dead_code)]
pub fn pid_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with(['Z', 'X'])))
        .is_some_and(|exited| !exited)
}

/// Whether any process has `pid`, one that has exited but is not yet
/// reaped (a zombie) included: stricter than `pid_alive`, for a test that
/// its process is gone altogether.
#[allow(dead_code)]
pub fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits up to `timeout` for the process `pid`, a child of ours or not,
/// to exit (as `pid_alive` sees it); whether it did.
#[allow(dead_code)]
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    poll(timeout, POLL, || (!pid_alive(pid)).then_some(())).is_some()
}

/// One number from /proc/PID/status (or a thread's status file).
#[allow(dead_code)]
fn status_field(path: &Path, field: &str) -> u64 {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[allow(dead_code)]
pub fn threads(pid: u32) -> u64 {
    status_field(Path::new(&format!("/proc/{pid}/status")), "Threads:")
}

/// Every context switch of every thread of `pid` so far: a thread blocked
/// in a read or a channel makes none.
#[allow(dead_code)]
pub fn switches(pid: u32) -> u64 {
    let dir = format!("/proc/{pid}/task");
    let mut n = 0;
    for t in fs::read_dir(&dir).unwrap().flatten() {
        let status = t.path().join("status");
        n += status_field(&status, "voluntary_ctxt_switches:");
        n += status_field(&status, "nonvoluntary_ctxt_switches:");
    }
    n
}

/// The instance's thread count once it holds still (two reads 50 ms
/// apart agree): threads of connections that just closed are gone.
#[allow(dead_code)]
pub fn settled_threads(pid: u32) -> u64 {
    let mut last = None;
    let settled = super::poll(Duration::from_secs(10), Duration::from_millis(50), || {
        let now = threads(pid);
        let same = last == Some(now);
        last = Some(now);
        same.then_some(now)
    });
    // Past the bound, what it holds then.
    settled.or(last).expect("a thread count")
}

/// How many threads of `pid` are asleep in a write to a descriptor
/// (`write`, `writev`, `sendto`, `sendmsg`), as /proc/PID/task/*/syscall
/// says: a thread waiting for a reader to make room.
#[allow(dead_code)]
pub fn writing(pid: u32) -> usize {
    let calls = [
        libc::SYS_write,
        libc::SYS_writev,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
    ];
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            let call = fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
            let nr = call.split(' ').next().and_then(|n| n.parse::<i64>().ok());
            nr.is_some_and(|n| calls.contains(&n))
        })
        .count()
}

/// A process's state letter, as /proc/PID/stat has it (`S` sleeping, `R`
/// running, ...); None once it is gone.
#[allow(dead_code)]
pub fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name, in parentheses, may hold anything: the state follows the last `)`.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A process's session id, as /proc/PID/stat has it; None once it is gone.
#[allow(dead_code)]
pub fn session(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the name: state, ppid, pgrp, session.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// Waits (up to 10 s) until `pid` is blocked: asleep, with no context
/// switch of any thread for 50 ms. What was last sent to it has then been
/// read and acted on: "it did not exit" is then a verdict, not a guess.
/// True when blocked, false when the process has gone.
#[allow(dead_code)]
#[track_caller]
pub fn blocked(pid: u32) -> bool {
    let mut last = None;
    let seen = poll(Duration::from_secs(10), Duration::from_millis(50), || {
        let Some(s) = state(pid) else {
            return Some(false);
        };
        let now = switches(pid);
        let still = s == 'S' && last == Some(now);
        last = Some(now);
        still.then_some(true)
    });
    seen.unwrap_or_else(|| panic!("pid {pid} did not settle within 10 s"))
}

/// A live process that is not a baton instance, killed when dropped.
#[allow(dead_code)]
pub struct Sleeper(std::process::Child);

#[allow(dead_code)]
impl Sleeper {
    pub fn start() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("120")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
