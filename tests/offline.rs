//! Offline delivery (docs/protocol.md §8): a plain `baton send` to a named agent that
//! is not running stores the task in its spool (`stored`), with the same
//! duplicate check and queue limit as a live receiver, without losing or
//! doubling anything when senders race each other or the agent's start.
//! Socket activation and waking (§9): an instance handed a listening socket
//! on fd 3 serves it and leaves it in place; `baton wake` and a stored task
//! connect to it. Expiry (`--ttl`, `BATON_TTL`), the operator's requeue and
//! discard of expired tasks, `--no-offline` and `baton list --offline`.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{Env, Output, POLL, baton_bin, exited, manifests, poll, wait_for, wait_until};

/// The bound on every wait in this file.
const T: Duration = Duration::from_secs(10);

/// What a plain sender prints when its task was stored.
fn stored_line(name: &str, id: &str, position: usize) -> String {
    format!(
        "stored: {name} is not running; message {id} waits in its spool at position {position} and runs when it starts\n"
    )
}

/// The `reason` of a `stored` result.
fn stored_reason(name: &str) -> String {
    format!("{name} is not running; the task waits in its spool and runs when it starts")
}

fn parse(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

/// `baton send NAME BODY --message-id ID` with extra variables.
fn send(env: &Env, vars: &[(&str, &str)], name: &str, id: &str, json: bool) -> Output {
    let body = format!("task {id}");
    let mut args = vec!["send", name, &body, "--message-id", id];
    if json {
        args.push("--json");
    }
    env.run_with(vars, None, &args, None)
}

/// Runs a named instance once and stops it, so that its spool (and its
/// `meta.json`) exists and the name is offline.
fn run_once(env: &Env, ws: &Path, args: &[&str]) {
    let mut s = env.serve(ws, args);
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

/// The one spool directory of `name` under the state home.
fn spool_of(env: &Env, name: &str) -> PathBuf {
    let root = env.state.join("baton").join("spool");
    let found: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(name))
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|hash| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .collect();
    assert_eq!(found.len(), 1, "spools of {name}: {found:?}");
    found.into_iter().next().unwrap()
}

/// The message ids of the task files in one place of a spool, in file
/// name (acceptance) order; for `done/`, the ids of its receipts.
fn ids_in(spool: &Path, place: &str) -> Vec<String> {
    if place == "done" {
        let ids = crate::util::receipts(spool).into_iter();
        return ids
            .map(|r| r["message_id"].as_str().unwrap().to_string())
            .collect();
    }
    let dir = spool.join(place);
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let stem = n.strip_suffix(".json").unwrap_or(&n).to_string();
            match stem.split_once('-') {
                Some((seq, id)) if place != "done" && seq.len() == 16 => id.to_string(),
                _ => stem,
            }
        })
        .collect()
}

/// The events of one kind in a spool's transcript.
fn events(spool: &Path, kind: &str) -> Vec<Value> {
    let path = spool.join("transcript.jsonl");
    fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// The message ids of the events of one kind, in order.
fn event_ids(spool: &Path, kind: &str) -> Vec<String> {
    events(spool, kind)
        .iter()
        .map(|e| e["message_id"].as_str().unwrap_or("").to_string())
        .collect()
}

fn lines_of(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// An `--exec` handler that appends the message id of each task it runs to
/// `file`.
fn recorder(file: &Path) -> String {
    format!(
        "cat >/dev/null; printf '%s\\n' \"$BATON_MESSAGE_ID\" >> '{}'",
        file.display()
    )
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A fresh file for a background process's stderr.
fn err_file(env: &Env) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    env.root
        .join(format!("bg-{}.err", N.fetch_add(1, Ordering::Relaxed)))
}

/// A background process this file started itself (an agent started on a
/// socket, or one racing a sender); stopped by its pid when dropped.
pub(crate) struct Bg {
    child: Child,
    stderr: PathBuf,
}

impl Bg {
    fn spawn(mut cmd: Command, stderr: PathBuf) -> Bg {
        let file = File::create(&stderr).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Bg { child, stderr }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn signal(&mut self, sig: i32) {
        if self.running() {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is
            // our own child, just seen unreaped, so it cannot be reused.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, sig);
            }
        }
    }

    fn wait(&mut self, bound: Duration) -> Option<ExitStatus> {
        exited(&mut self.child, bound)
    }

    /// SIGTERM by pid; the exit code. Panics after 5 s.
    fn term(&mut self) -> i32 {
        self.signal(libc::SIGTERM);
        match self.wait(Duration::from_secs(5)) {
            Some(s) => exit_code(s),
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "pid {} ignored SIGTERM for 5 s:\n{}",
                    self.pid(),
                    self.stderr()
                );
            }
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.signal(libc::SIGTERM);
        if self.wait(Duration::from_secs(3)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `baton serve ARGS` in `ws`, in the background.
fn start(env: &Env, ws: &Path, vars: &[(&str, &str)], args: &[&str]) -> Bg {
    let mut cmd = env.cmd();
    cmd.envs(vars.iter().copied())
        .arg("serve")
        .args(args)
        .current_dir(ws);
    Bg::spawn(cmd, err_file(env))
}

/// `baton serve ARGS` in `ws` as a service manager starts it under socket
/// activation: `listener` on fd 3, `LISTEN_FDS=1` and `LISTEN_PID` its own
/// pid (set by the shell that execs baton, which keeps the pid).
pub(crate) fn activated(env: &Env, listener: &UnixListener, ws: &Path, args: &[&str]) -> Bg {
    Bg::spawn(activated_command(env, listener, ws, args), err_file(env))
}

/// The command `activated` runs. `listener` must stay open until it is
/// spawned.
fn activated_command(env: &Env, listener: &UnixListener, ws: &Path, args: &[&str]) -> Command {
    let base = env.cmd();
    let mut cmd = Command::new("sh");
    cmd.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.env("LISTEN_FDS", "1")
        .arg("-c")
        .arg("LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" serve \"$@\"")
        .arg(baton_bin())
        .args(args)
        .current_dir(ws);
    let fd = listener.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and calls
    // only dup2 and fcntl, which are async-signal-safe; `fd` is a listening
    // socket this process keeps open until after the spawn.
    unsafe {
        cmd.pre_exec(move || {
            let rc = if fd == 3 {
                // dup2(3, 3) would leave close-on-exec set.
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Creates the registry directory with mode 0700, as baton would.
fn make_registry(env: &Env) {
    match fs::DirBuilder::new().mode(0o700).create(&env.registry) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir {}: {e}", env.registry.display()),
    }
}

/// Waits (bounded) until some process connects to `listener`; accepts and
/// drops that connection, then runs `then` (start the agent, as systemd
/// would). `None` when nobody connected within the bound.
fn on_connection<R: Send + 'static>(
    listener: &UnixListener,
    then: impl FnOnce() -> R + Send + 'static,
) -> thread::JoinHandle<Option<R>> {
    let l = listener.try_clone().unwrap();
    l.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let conn = poll(T, POLL, || match l.accept() {
            Ok((conn, _)) => Some(Some(conn)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(_) => Some(None),
        });
        let connected = conn.flatten().is_some();
        // O_NONBLOCK belongs to the socket, which the agent shares: it gets
        // it blocking, as from systemd.
        l.set_nonblocking(false).unwrap();
        connected.then(then)
    })
}

/// The manifest of the instance with this pid, once it is published.
pub(crate) fn manifest_of(env: &Env, pid: u32) -> Value {
    let prefix = format!("a-{pid}-");
    wait_for(&format!("the manifest of pid {pid}"), T, || {
        manifests(&env.registry)
            .into_iter()
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .and_then(|p| fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    })
}

// 1. Store while stopped, run at start, duplicates.

#[test]
fn a_task_sent_to_a_stopped_agent_is_stored_and_runs_when_it_starts() {
    let env = Env::new();
    let ws = env.workspace("w1");
    let ran = env.root.join("ran.txt");
    let handler = recorder(&ran);
    run_once(&env, &ws, &["--name", "keeper", "--exec", &handler]);
    let spool = spool_of(&env, "keeper");

    let out = send(&env, &[], "keeper", "k1", false);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, stored_line("keeper", "k1", 1), "{out:?}");
    let out = send(&env, &[], "keeper", "k2", true);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        parse(&out),
        json!({
            "status": "stored",
            "message_id": "k2",
            "queue_position": 2,
            "reason": stored_reason("keeper"),
            "target": {"name": "keeper", "workspace": ws.display().to_string()},
        })
    );
    assert_eq!(ids_in(&spool, "inbox"), ["k1", "k2"]);
    // The same id again while it waits: a duplicate, stored once.
    let out = send(&env, &[], "keeper", "k1", false);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "duplicate: keeper had already accepted message k1\n"
    );
    let out = send(&env, &[], "keeper", "k1", true);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        parse(&out),
        json!({
            "status": "duplicate",
            "message_id": "k1",
            "reason": "this message_id was already accepted with the same body",
            "target": {"name": "keeper", "workspace": ws.display().to_string()},
        })
    );
    assert_eq!(ids_in(&spool, "inbox"), ["k1", "k2"]);
    // The spool's transcript says who stored what.
    let accepted = events(&spool, "message.accepted");
    assert_eq!(accepted.len(), 2, "{accepted:?}");
    for (e, id) in accepted.iter().zip(["k1", "k2"]) {
        assert_eq!(e["message_id"], id);
        assert_eq!(e["stored"], true, "{e}");
    }
    assert!(!ran.exists(), "nothing runs while the agent is stopped");

    // Starting the agent runs both, in order, once each.
    let mut s = env.serve(&ws, &["--name", "keeper", "--exec", &handler]);
    wait_until("both stored tasks to run", T, || lines_of(&ran).len() == 2);
    assert_eq!(lines_of(&ran), ["k1", "k2"]);
    wait_until("both receipts", T, || ids_in(&spool, "done").len() == 2);
    let log = env.run(&["log", "keeper", "--json"]);
    assert_eq!(log.status, 0, "{log:?}");
    let finished: Vec<Value> = log
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "turn.finished")
        .collect();
    assert_eq!(finished.len(), 2, "{}", log.stdout);
    for (e, id) in finished.iter().zip(["k1", "k2"]) {
        assert_eq!(e["message_id"], id, "{e}");
        assert_eq!(e["outcome"], "done", "{e}");
        assert_eq!(e["exit_code"], 0, "{e}");
    }
    assert_eq!(s.term(), 0, "{}", s.stderr());

    // Stopped again: a retry of a task that already ran is a duplicate
    // too, and is not run a second time.
    let out = send(&env, &[], "keeper", "k1", true);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(parse(&out)["status"], "duplicate", "{out:?}");
    assert!(ids_in(&spool, "inbox").is_empty());
    let mut s = env.serve(&ws, &["--name", "keeper", "--exec", &handler]);
    let out = send(&env, &[], "keeper", "k3", true);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    wait_until("k3 to run", T, || lines_of(&ran).len() == 3);
    assert_eq!(lines_of(&ran), ["k1", "k2", "k3"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

#[test]
fn a_name_with_several_spools_is_ambiguous_while_stopped() {
    let env = Env::new();
    let (w1, w2) = (env.workspace("t1"), env.workspace("t2"));
    run_once(&env, &w1, &["--name", "twin"]);
    run_once(&env, &w2, &["--name", "twin"]);
    let out = send(&env, &[], "twin", "a1", false);
    assert_eq!(out.status, 3, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "baton: twin is not running and several spools have that name: start the one you mean; candidates:\n  twin  not running  {}\n  twin  not running  {}\n",
            w1.display(),
            w2.display()
        )
    );
    let out = send(&env, &[], "twin", "a1", true);
    assert_eq!(out.status, 3, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "no_target", "{r}");
    let listed: Vec<&str> = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["workspace"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [w1.to_str().unwrap(), w2.to_str().unwrap()]);
    // Nothing was stored in either.
    let root = env.state.join("baton").join("spool");
    for e in fs::read_dir(&root).unwrap() {
        assert!(ids_in(&e.unwrap().path(), "inbox").is_empty());
    }
    // With one of them running, the name is that live instance.
    let mut s = env.serve(&w2, &["--name", "twin"]);
    let out = send(&env, &[], "twin", "a1", true);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

// 2. The queue limit, and concurrent senders.

#[test]
fn the_queue_limit_holds_for_stored_tasks() {
    let env = Env::new();
    let ws = env.workspace("w2");
    run_once(&env, &ws, &["--name", "small"]);
    let spool = spool_of(&env, "small");
    let limit = [("BATON_MAX_QUEUE", "2")];
    for (i, id) in ["q1", "q2"].into_iter().enumerate() {
        let out = send(&env, &limit, "small", id, false);
        assert_eq!(out.status, 0, "{out:?}");
        assert_eq!(out.stdout, stored_line("small", id, i + 1));
    }
    let reason = "the queue is full: 2 tasks waiting or running (BATON_MAX_QUEUE)";
    let out = send(&env, &limit, "small", "q3", false);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!("baton: small refused message q3: full: {reason}\n")
    );
    let out = send(&env, &limit, "small", "q3", true);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(
        parse(&out),
        json!({
            "status": "full",
            "message_id": "q3",
            "reason": reason,
            "target": {"name": "small", "workspace": ws.display().to_string()},
        })
    );
    assert_eq!(ids_in(&spool, "inbox"), ["q1", "q2"]);
    assert!(ids_in(&spool, "tmp").is_empty());
}

/// The `message.accepted` event of `id` in a spool's transcript, without
/// its `seq` and `time`.
fn accepted_event(spool: &Path, id: &str) -> Value {
    let mut found: Vec<Value> = events(spool, "message.accepted")
        .into_iter()
        .filter(|e| e["message_id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "message.accepted of {id}: {found:?}");
    let mut e = found.pop().unwrap();
    let fields = e.as_object_mut().unwrap();
    fields.remove("seq");
    fields.remove("time");
    e
}

#[test]
fn a_stored_task_is_recorded_in_the_live_shape_marked_stored() {
    let env = Env::new();
    let ws = env.workspace("w-shape");
    let from = env.workspace("sender-dir");
    let send_from = |id: &str| {
        let body = format!("task {id}");
        let out = env.run_with(
            &[],
            Some(&from),
            &["send", "shape", &body, "--message-id", id],
            None,
        );
        assert_eq!(out.status, 0, "{out:?}");
        out
    };
    // Live: the instance records the acceptance.
    let mut s = env.serve(&ws, &["--name", "shape"]);
    let live = send_from("live-1");
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let spool = spool_of(&env, "shape");
    let expected = |id: &str, pid: u32, position: u64| {
        json!({
            "kind": "message.accepted",
            "message_id": id,
            "from": "(cli)",
            "pid": pid,
            "queue_position": position,
            "mode": "queue",
            "body": format!("task {id}"),
            "sender_id": null,
            "workspace": from.display().to_string(),
        })
    };
    assert_eq!(
        accepted_event(&spool, "live-1"),
        expected("live-1", live.pid, 1)
    );
    // Stopped: the sender records the same event, marked as stored.
    let stored = send_from("stored-1");
    assert_eq!(stored.stdout, stored_line("shape", "stored-1", 2));
    let mut want = expected("stored-1", stored.pid, 2);
    want["stored"] = json!(true);
    assert_eq!(accepted_event(&spool, "stored-1"), want);
}

/// A sender's answer when the spool of a stopped agent fails it: exit
/// status 4 and `transport`, whose reason names the spool's error.
fn assert_not_stored(env: &Env, ws: &Path, id: &str) -> String {
    let out = send(env, &[], "broken", id, true);
    assert_eq!(out.status, 4, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "transport", "{r}");
    assert_eq!(r["message_id"], id, "{r}");
    assert_eq!(
        r["target"],
        json!({"name": "broken", "workspace": ws.display().to_string()})
    );
    let reason = r["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("internal error: the spool could not store the task: ")
            && reason.ends_with("; the task was not accepted"),
        "{reason}"
    );
    let out = send(env, &[], "broken", id, false);
    assert_eq!(out.status, 4, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, format!("baton: {reason}\n"));
    reason
}

#[test]
fn a_spool_that_cannot_store_an_offline_task_is_an_error_not_a_verdict() {
    let env = Env::new();
    let ws = env.workspace("w-broken");
    run_once(&env, &ws, &["--name", "broken"]);
    let spool = spool_of(&env, "broken");
    // The spool opens, but storing fails: `sequence` is a directory, so
    // the sequence lease cannot be renamed over it (EISDIR even for root,
    // for whom permission bits mean nothing).
    let sequence = spool.join("sequence");
    match fs::remove_file(&sequence) {
        Err(e) if e.kind() != ErrorKind::NotFound => panic!("remove {}: {e}", sequence.display()),
        _ => {}
    }
    fs::DirBuilder::new().mode(0o700).create(&sequence).unwrap();
    let reason = assert_not_stored(&env, &ws, "b1");
    assert!(reason.contains("sequence"), "{reason}");
    fs::remove_dir(&sequence).unwrap();
    // The spool cannot even be opened: tmp/ is a file (it held what the
    // failed lease left, which the next open would have removed).
    let tmp = spool.join("tmp");
    fs::remove_dir_all(&tmp).unwrap();
    fs::write(&tmp, b"").unwrap();
    let reason = assert_not_stored(&env, &ws, "b1");
    assert!(reason.contains("tmp"), "{reason}");
    assert!(events(&spool, "message.accepted").is_empty());
    // Nothing was stored: once the spool works again, the same id is
    // stored, not called a duplicate.
    fs::remove_file(&tmp).unwrap();
    fs::DirBuilder::new().mode(0o700).create(&tmp).unwrap();
    let out = send(&env, &[], "broken", "b1", false);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, stored_line("broken", "b1", 1));
    assert_eq!(ids_in(&spool, "inbox"), ["b1"]);
}

/// The live path gives the same answer as the offline one above: a
/// running agent whose spool cannot store a task answers an internal
/// error, and `baton send` reports it as `transport` (exit 4, send it
/// again), not as a refusal of the task.
#[test]
fn a_live_spool_that_cannot_store_a_task_is_an_error_not_a_verdict() {
    let env = Env::new();
    let ws = env.workspace("w-live-broken");
    let mut s = env.serve(&ws, &["--name", "broken"]);
    let spool = s.spool();
    // tmp/ is a file: the task file cannot be created.
    let tmp = spool.join("tmp");
    fs::remove_dir_all(&tmp).unwrap();
    fs::write(&tmp, b"").unwrap();
    let out = send(&env, &[], "broken", "l1", true);
    assert_eq!(out.status, 4, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "transport", "{r}");
    assert_eq!(r["message_id"], "l1", "{r}");
    let reason = r["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("internal error: the spool could not store the task: ")
            && reason.ends_with("; the task was not accepted"),
        "{reason}"
    );
    let out = send(&env, &[], "broken", "l1", false);
    assert_eq!(out.status, 4, "{out:?}");
    assert_eq!(out.stderr, format!("baton: {reason}\n"));
    // Nothing was stored: once the spool works again, the same id is
    // accepted, not called a duplicate.
    fs::remove_file(&tmp).unwrap();
    fs::DirBuilder::new().mode(0o700).create(&tmp).unwrap();
    let out = send(&env, &[], "broken", "l1", true);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    s.term();
}

#[test]
fn concurrent_senders_into_one_offline_spool_lose_and_double_nothing() {
    const THREADS: usize = 2;
    const EACH: usize = 20;
    let env = Env::new();
    let ws = env.workspace("w3");
    run_once(&env, &ws, &["--name", "busy"]);
    let spool = spool_of(&env, "busy");
    let vars = [("BATON_MAX_QUEUE", "1000")];
    thread::scope(|s| {
        for t in 0..THREADS {
            let env = &env;
            let vars = &vars;
            s.spawn(move || {
                for i in 0..EACH {
                    let id = format!("c{t}-{i}");
                    let out = send(env, vars, "busy", &id, true);
                    assert_eq!(out.status, 0, "{out:?}");
                    let r = parse(&out);
                    assert_eq!(r["status"], "stored", "{r}");
                    assert_eq!(r["message_id"], id.as_str(), "{r}");
                }
            });
        }
    });
    let want: BTreeSet<String> = (0..THREADS)
        .flat_map(|t| (0..EACH).map(move |i| format!("c{t}-{i}")))
        .collect();
    let inbox = ids_in(&spool, "inbox");
    assert_eq!(inbox.len(), THREADS * EACH, "{inbox:?}");
    assert_eq!(inbox.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert!(ids_in(&spool, "tmp").is_empty());
    // The senders' transcript entries were serialized too: one each, with
    // distinct sequence numbers.
    let accepted = events(&spool, "message.accepted");
    let ids: BTreeSet<String> = accepted
        .iter()
        .map(|e| e["message_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(accepted.len(), THREADS * EACH);
    assert_eq!(ids, want);
    let seqs: BTreeSet<u64> = accepted
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), THREADS * EACH, "sequence numbers repeat");
    // Each sender's queue position is its place: 1 to 40, once each.
    let positions: BTreeSet<u64> = accepted
        .iter()
        .map(|e| e["queue_position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, (1..=(THREADS * EACH) as u64).collect());
}

// 3. A sender racing the agent's start.

#[test]
fn a_sender_racing_the_agent_start_loses_nothing_and_runs_nothing_twice() {
    const ROUNDS: usize = 50;
    let env = Env::new();
    let ws = env.workspace("w4");
    // Fifty tasks accumulate in the spool; fsync would only slow the race.
    let vars = [("BATON_MAX_QUEUE", "1000"), ("BATON_FSYNC", "off")];
    run_once(&env, &ws, &["--name", "racer"]);
    let spool = spool_of(&env, "racer");
    let (mut stored, mut live) = (0, 0);
    let began = Instant::now();
    for i in 0..ROUNDS {
        let id = format!("r{i}");
        // From the send starting 27 ms before the agent to 54 ms after it:
        // the send lands before, during and after the agent's start.
        let offset = (i % 10) as i64 * 9 - 27;
        let pause = Duration::from_millis(offset.unsigned_abs());
        let run_send = || send(&env, &vars, "racer", &id, true);
        let (out, mut agent) = thread::scope(|s| {
            if offset < 0 {
                let h = s.spawn(run_send);
                thread::sleep(pause);
                let agent = start(&env, &ws, &vars, &["--name", "racer"]);
                (h.join().unwrap(), agent)
            } else {
                let agent = start(&env, &ws, &vars, &["--name", "racer"]);
                thread::sleep(pause);
                (run_send(), agent)
            }
        });
        assert_eq!(out.status, 0, "round {i}: {out:?}");
        match parse(&out)["status"].as_str() {
            Some("stored") => stored += 1,
            Some("accepted") => live += 1,
            other => panic!("round {i}: {other:?}: {out:?}"),
        }
        // Fully started, then stopped by its pid.
        manifest_of(&env, agent.pid());
        assert_eq!(agent.term(), 0, "round {i}: {}", agent.stderr());
        let inbox = ids_in(&spool, "inbox");
        assert_eq!(
            inbox.iter().filter(|x| **x == id).count(),
            1,
            "round {i}: {inbox:?}"
        );
        assert_eq!(inbox.len(), i + 1, "round {i}: {inbox:?}");
        for place in ["tmp", "processing", "interrupted", "rejected", "done"] {
            assert!(ids_in(&spool, place).is_empty(), "round {i}: {place}/");
        }
    }
    eprintln!(
        "{ROUNDS} rounds in {:?}: {stored} stored, {live} accepted live",
        began.elapsed()
    );
    // Each of them runs exactly once when an agent that runs tasks starts.
    let ran = env.root.join("ran.txt");
    let handler = recorder(&ran);
    let mut s = env.serve_with(&ws, &vars, &["--name", "racer", "--exec", &handler]);
    wait_until("every task to finish", T, || {
        ids_in(&spool, "done").len() == ROUNDS
    });
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let want: Vec<String> = (0..ROUNDS).map(|i| format!("r{i}")).collect();
    assert_eq!(lines_of(&ran), want, "each task once, in order");
}

// 4. Socket activation and waking.

#[test]
fn a_socket_activated_instance_serves_its_wake_socket_and_leaves_it() {
    let env = Env::new();
    let ws = env.workspace("w5");
    make_registry(&env);
    let wake = env.registry.join("w-lazy.sock");
    let listener = UnixListener::bind(&wake).unwrap();
    let mut agent = activated(&env, &listener, &ws, &["--name", "lazy"]);
    let m = manifest_of(&env, agent.pid());
    assert_eq!(m["name"], "lazy", "{m}");
    assert_eq!(m["socket"], wake.display().to_string(), "{m}");
    let id = m["instance_id"].as_str().unwrap().to_string();
    // It answers on that socket, and peers find it by name.
    let out = env.run(&["ping", "lazy", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "pong", "{r}");
    assert_eq!(r["instance_id"], id.as_str(), "{r}");
    let out = send(&env, &[], "lazy", "a1", true);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    // It bound nothing of its own.
    let mut names: Vec<String> = fs::read_dir(&env.registry)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    assert_eq!(names, [format!("a-{id}.json"), "w-lazy.sock".to_string()]);

    assert_eq!(agent.term(), 0, "{}", agent.stderr());
    // The manifest is gone; the socket is the manager's and stays,
    // still listening.
    assert!(manifests(&env.registry).is_empty());
    let meta = fs::symlink_metadata(&wake).expect("the wake socket is still there");
    assert!(meta.file_type().is_socket());
    UnixStream::connect(&wake).expect("the manager still listens on it");
}

#[test]
fn a_crashed_activated_instance_is_stale_without_waking_anything() {
    let env = Env::new();
    let ws = env.workspace("w8");
    make_registry(&env);
    let wake = env.registry.join("w-crash.sock");
    let listener = UnixListener::bind(&wake).unwrap();
    let mut agent = activated(&env, &listener, &ws, &["--name", "crash"]);
    let id = manifest_of(&env, agent.pid())["instance_id"]
        .as_str()
        .unwrap()
        .to_string();
    agent.signal(libc::SIGKILL);
    agent.wait(T).expect("reaped after SIGKILL");
    // Its manifest stays behind; the socket, still listening, says nothing
    // about it, so discovery neither pings it (which would start the agent
    // under systemd) nor waits for an answer.
    // With a 30 s I/O timeout, waiting on the socket would take 30 s;
    // not waiting takes well under half of that on any machine.
    let began = Instant::now();
    let out = env.run_with(
        &[("BATON_IO_TIMEOUT", "30")],
        None,
        &["list", "--all", "--json"],
        None,
    );
    assert_eq!(out.status, 0, "{out:?}");
    let all = parse(&out);
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["instance_id"], id.as_str(), "{all}");
    let problem = all[0]["problem"].as_str().unwrap();
    assert!(problem.starts_with("stale: "), "{problem}");
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "discovery waited on the wake socket"
    );
    let out = env.run(&["gc", "--json"]);
    assert_eq!(parse(&out), json!({"removed": [id]}), "{out:?}");
    assert!(manifests(&env.registry).is_empty());
    assert!(wake.exists(), "the wake socket is systemd's");
    listener.set_nonblocking(true).unwrap();
    assert_eq!(
        listener.accept().err().map(|e| e.kind()),
        Some(ErrorKind::WouldBlock),
        "nothing connected to the wake socket"
    );
    listener.set_nonblocking(false).unwrap();
    // Started again on it, it serves as before.
    let mut agent = activated(&env, &listener, &ws, &["--name", "crash"]);
    manifest_of(&env, agent.pid());
    let out = env.run(&["ping", "crash"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(agent.term(), 0, "{}", agent.stderr());
}

#[test]
fn baton_wake_without_a_wake_socket_is_no_target() {
    let env = Env::new();
    make_registry(&env);
    let path = env.registry.join("w-ghost.sock");
    let want = format!(
        "baton: ghost is not running and has no wake socket at {} that accepts connections (see docs/systemd.md)\n",
        path.display()
    );
    let out = env.run(&["wake", "ghost"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert_eq!(out.stderr, want);
    assert_eq!(out.stdout, "");
    // A socket file nobody listens on any more is no wake socket either.
    drop(UnixListener::bind(&path).unwrap());
    let out = env.run(&["wake", "ghost"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert_eq!(out.stderr, want);
    // Nor is a name outside the grammar anything to look for.
    let out = env.run(&["wake", "../x"]);
    assert_eq!(out.status, 2, "{out:?}");
}

#[test]
fn wake_and_a_stored_task_start_a_socket_activated_agent() {
    let env = Env::new();
    let ws = env.workspace("w6");
    let ran = env.root.join("ran.txt");
    let handler = recorder(&ran);
    let args = ["--name", "sleeper", "--exec", handler.as_str()];
    run_once(&env, &ws, &args);
    let spool = spool_of(&env, "sleeper");
    let wake = env.registry.join("w-sleeper.sock");
    let listener = UnixListener::bind(&wake).unwrap();

    // `baton wake`: connects; the "manager" starts the agent on the
    // socket; wake waits for it and says so.
    let starter = manager(&env, &listener, &ws, &args);
    let out = env.run(&["wake", "sleeper"]);
    let mut agent = starter
        .join()
        .unwrap()
        .expect("wake connected to the wake socket");
    assert_eq!(out.status, 0, "{out:?}\n{}", agent.stderr());
    let m = manifest_of(&env, agent.pid());
    assert_eq!(
        out.stdout,
        format!(
            "sleeper is running: pid {}, instance {}\n",
            agent.pid(),
            m["instance_id"].as_str().unwrap()
        )
    );
    assert_eq!(m["socket"], wake.display().to_string());
    // Already running: wake says so at once.
    let out = env.run(&["wake", "sleeper"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout.starts_with("sleeper is running: pid "),
        "{out:?}"
    );
    assert_eq!(agent.term(), 0, "{}", agent.stderr());
    assert!(wake.exists());
    drain(&listener);

    // A stored task wakes it too: the sender stores, then connects; the
    // agent started on the socket runs the task.
    let starter = manager(&env, &listener, &ws, &args);
    let out = send(&env, &[], "sleeper", "s1", false);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, stored_line("sleeper", "s1", 1));
    let mut agent = starter
        .join()
        .unwrap()
        .expect("the sender connected to the wake socket");
    wait_until("the stored task to run", T, || lines_of(&ran) == ["s1"]);
    wait_until("its receipt", T, || ids_in(&spool, "done") == ["s1"]);
    assert_eq!(agent.term(), 0, "{}", agent.stderr());
    assert!(wake.exists());
}

/// Accepts and drops whatever connections wait on `listener` (pings the
/// stopped agent left unanswered).
fn drain(listener: &UnixListener) {
    listener.set_nonblocking(true).unwrap();
    while listener.accept().is_ok() {}
    listener.set_nonblocking(false).unwrap();
}

/// A service manager for one start: on the first connection to
/// `listener`, it starts the agent on it.
fn manager(
    env: &Env,
    listener: &UnixListener,
    ws: &Path,
    args: &[&str],
) -> thread::JoinHandle<Option<Bg>> {
    let l = listener.try_clone().unwrap();
    let cmd = activated_command(env, &l, ws, args);
    let err = err_file(env);
    on_connection(listener, move || {
        let bg = Bg::spawn(cmd, err);
        drop(l);
        bg
    })
}

// 5. Expiry, requeue and discard; --no-offline; list --offline.

/// A task sent to a running, idle pull agent expires on time although
/// nothing else happens there (the sender's connection stays open): its
/// acceptance arms the `--ttl` timer.
#[test]
fn a_task_accepted_by_an_idle_agent_expires_on_time() {
    let env = Env::new();
    let ws = env.workspace("w7b");
    let mut s = env.serve(&ws, &["--name", "idle", "--ttl", "1"]);
    let spool = spool_of(&env, "idle");
    let mut c = s.client();
    let r = s.send(&mut c, "x1", "expire me");
    assert_eq!(r["status"], "accepted", "{r}");
    wait_until("the task to expire", T, || {
        ids_in(&spool, "rejected") == ["x1"] && events(&spool, "task.expired").len() == 1
    });
    drop(c);
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

#[test]
fn expired_tasks_are_set_aside_and_the_operator_requeues_or_discards_them() {
    let env = Env::new();
    let ws = env.workspace("w7");
    run_once(&env, &ws, &["--name", "stale"]);
    let spool = spool_of(&env, "stale");
    // Stored while stopped; they age past --ttl before anyone claims them.
    for id in ["e1", "e2"] {
        let out = send(&env, &[], "stale", id, true);
        assert_eq!(parse(&out)["status"], "stored", "{out:?}");
    }
    let mut s = env.serve(&ws, &["--name", "stale", "--ttl", "2"]);
    // The files move first, then the events are written.
    wait_until("both tasks to expire", T, || {
        ids_in(&spool, "rejected") == ["e1", "e2"] && events(&spool, "task.expired").len() == 2
    });
    assert!(ids_in(&spool, "inbox").is_empty());
    let expired = events(&spool, "task.expired");
    assert_eq!(expired.len(), 2, "{expired:?}");
    for (e, id) in expired.iter().zip(["e1", "e2"]) {
        assert_eq!(e["message_id"], id, "{e}");
        assert_eq!(e["reason"], "expired", "{e}");
    }
    let list = env.run(&["inbox", "list", "stale", "--json"]);
    assert_eq!(list.status, 0, "{list:?}");
    let l = parse(&list);
    let rejected: Vec<&str> = l["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(rejected, ["e1", "e2"], "{l}");
    assert_eq!(l["queued"], json!([]), "{l}");
    let list = env.run(&["inbox", "list", "stale"]);
    assert_eq!(list.status, 0, "{list:?}");
    let rows: Vec<Vec<&str>> = list
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert_eq!(
        rows,
        [["rejected", "e1"], ["rejected", "e2"]],
        "{}",
        list.stdout
    );

    // Requeued, it waits again: --ttl counts afresh from the requeue,
    // across a restart too, so it can still be claimed.
    let out = env.run(&["inbox", "requeue", "stale", "e1"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "requeued e1\n");
    assert_eq!(event_ids(&spool, "task.requeued"), ["e1"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
    assert_eq!(ids_in(&spool, "inbox"), ["e1"]);
    assert_eq!(ids_in(&spool, "rejected"), ["e2"]);
    let mut s = env.serve(&ws, &["--name", "stale", "--ttl", "3"]);
    let out = env.run(&["inbox", "claim", "stale", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "claimed", "{r}");
    assert_eq!(r["task"]["message_id"], "e1", "{r}");
    let out = env.run(&["inbox", "complete", "stale", "e1"]);
    assert_eq!(out.status, 0, "{out:?}");

    // Discarded, it leaves a receipt: a retry of its id is a duplicate.
    let out = env.run(&["inbox", "discard", "stale", "e2"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "discarded e2\n");
    assert_eq!(event_ids(&spool, "task.discarded"), ["e2"]);
    assert!(ids_in(&spool, "rejected").is_empty());
    let receipt = crate::util::receipt(&spool, "e2").expect("e2's receipt");
    assert_eq!(receipt["outcome"], "discarded", "{receipt}");
    let out = send(&env, &[], "stale", "e2", true);
    assert_eq!(parse(&out)["status"], "duplicate", "{out:?}");
    // Neither can be requeued or discarded twice.
    for action in ["requeue", "discard"] {
        let out = env.run(&["inbox", action, "stale", "e2"]);
        assert_eq!(out.status, 1, "{action}: {out:?}");
    }
    assert_eq!(s.term(), 0, "{}", s.stderr());

    // BATON_TTL does the same without the flag, for tasks accepted live.
    let mut s = env.serve_with(&ws, &[("BATON_TTL", "1")], &["--name", "stale"]);
    let out = send(&env, &[], "stale", "e3", true);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    wait_until("e3 to expire", T, || {
        ids_in(&spool, "rejected") == ["e3"] && events(&spool, "task.expired").len() == 3
    });
    assert_eq!(event_ids(&spool, "task.expired"), ["e1", "e2", "e3"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

#[test]
fn no_offline_denies_stored_delivery_and_list_offline_shows_names_not_running() {
    let env = Env::new();
    let (ws_a, ws_b, ws_c) = (
        env.workspace("wa"),
        env.workspace("wb"),
        env.workspace("wc"),
    );
    run_once(&env, &ws_a, &["--name", "closed"]);
    run_once(&env, &ws_b, &["--name", "open"]);
    run_once(&env, &ws_c, &["--name", "up"]);
    // Offline delivery works until the agent opts out; meta.json is
    // rewritten at its next start.
    let out = send(&env, &[], "closed", "n1", true);
    assert_eq!(parse(&out)["status"], "stored", "{out:?}");
    run_once(&env, &ws_a, &["--name", "closed", "--no-offline"]);
    let reason = "closed is not running and does not take offline delivery (serve --no-offline)";
    let out = send(&env, &[], "closed", "n2", false);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, format!("baton: not sent: denied: {reason}\n"));
    let out = send(&env, &[], "closed", "n2", true);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(
        parse(&out),
        json!({"status": "denied", "message_id": "n2", "reason": reason})
    );
    let out = send(&env, &[], "open", "n3", true);
    assert_eq!(parse(&out)["status"], "stored", "{out:?}");

    // `up` is running, so it is not offline; n1 ran nowhere yet (a pull
    // agent), so `closed` still counts it.
    let mut up = env.serve(&ws_c, &["--name", "up"]);
    let out = env.run(&["list", "--offline"]);
    assert_eq!(out.status, 0, "{out:?}");
    let (a, b) = (ws_a.display(), ws_b.display());
    assert_eq!(
        out.stdout,
        format!(
            "NAME    QUEUED  OFFLINE_DELIVERY  WORKSPACE\n\
             closed  1       no                {a}\n\
             open    1       yes               {b}\n"
        )
    );
    let out = env.run(&["list", "--offline", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        parse(&out),
        json!([
            {"name": "closed", "workspace": a.to_string(), "offline": false, "queued": 1},
            {"name": "open", "workspace": b.to_string(), "offline": true, "queued": 1},
        ])
    );
    assert_eq!(up.term(), 0, "{}", up.stderr());
    // Stopped, it is listed too, with nothing queued.
    let out = env.run(&["list", "--offline", "--json"]);
    let names: Vec<String> = parse(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{}:{}", s["name"], s["queued"]))
        .collect();
    assert_eq!(names, ["\"closed\":1", "\"open\":1", "\"up\":0"]);
    // The choice lasts only until the next start without the flag.
    run_once(&env, &ws_a, &["--name", "closed"]);
    let out = send(&env, &[], "closed", "n2", false);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, stored_line("closed", "n2", 2));
    // With no spools at all there is nothing to list.
    let empty = Env::new();
    let out = empty.run(&["list", "--offline", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(parse(&out), json!([]));
    let out = empty.run(&["list", "--offline"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, "baton: no known names are offline\n");
}

/// Issue 18: a reply to a sender that has stopped was lost (`no_target`).
/// A handler's `--reply` to a stopped sender is stored in its spool, and
/// the transcript says `stored`.
#[test]
fn a_handler_reply_to_a_stopped_sender_is_stored() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let go = env.root.join("go");
    // Answers only once the test says so (bounded: about 10 s).
    let handler = format!(
        "for i in $(seq 200); do [ -e '{}' ] && break; sleep 0.05; done; echo 'There are 12.'",
        go.display()
    );
    let mut a = env.serve(&wa, &["--name", "alpha"]);
    let b = env.serve(&wb, &["--name", "beta", "--exec", &handler, "--reply"]);
    let r = a.client().call(
        1,
        "relay/send",
        json!({"target": b.id, "body": "Count the tests."}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let mid = r["result"]["message_id"].as_str().unwrap().to_string();
    let b_spool = b.spool();
    crate::util::wait_event(&b_spool, "the turn", T, |e| {
        crate::util::event_is(e, "turn.started", &mid)
    });
    assert_eq!(a.term(), 0, "{}", a.stderr());
    File::create(&go).unwrap();
    let sent = crate::util::wait_event(&b_spool, "the reply's result", T, |e| {
        e["kind"] == "relay.sent" && e["reply_of"] == mid.as_str()
    });
    assert_eq!(sent["status"], "stored", "{sent}");
    let rid = sent["message_id"].as_str().unwrap();
    assert_eq!(
        ids_in(&spool_of(&env, "alpha"), "inbox"),
        vec![rid.to_string()]
    );
}

/// Issue 18: `baton inbox complete --reply` said the reply was "sending";
/// it says where the reply went: `stored` for a stopped sender.
#[test]
fn inbox_complete_says_where_the_reply_went() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let mut a = env.serve(&wa, &["--name", "alpha"]);
    let b = env.serve(&wb, &["--name", "beta"]);
    let r = a.client().call(
        1,
        "relay/send",
        json!({"target": b.id, "body": "Count the tests."}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let mid = r["result"]["message_id"].as_str().unwrap().to_string();
    let out = env.run(&["inbox", "claim", "beta", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(a.term(), 0, "{}", a.stderr());
    let out = env.run(&[
        "inbox", "complete", "beta", &mid, "--reply", "12.", "--json",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let v = parse(&out);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["reply"]["status"], "stored", "{v}");
    let rid = v["reply"]["message_id"].as_str().unwrap();
    assert_eq!(
        ids_in(&spool_of(&env, "alpha"), "inbox"),
        vec![rid.to_string()]
    );
}

/// Without `--json`, `inbox complete --reply` says in words where the
/// reply went: to a running sender, then to a stopped sender's spool. It
/// used to print "reply not sent: accepted" (and "stored") on stderr.
#[test]
fn inbox_complete_says_in_words_where_a_delivered_reply_went() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let mut a = env.serve(&wa, &["--name", "alpha"]);
    let b = env.serve(&wb, &["--name", "beta"]);
    let mut ids = Vec::new();
    for n in 1..=2 {
        let r = a.client().call(
            n,
            "relay/send",
            json!({"target": b.id, "body": format!("Task {n}.")}),
        );
        assert_eq!(r["result"]["status"], "accepted", "{r}");
        ids.push(r["result"]["message_id"].as_str().unwrap().to_string());
    }
    let claim = || {
        let out = env.run(&["inbox", "claim", "beta", "--json"]);
        assert_eq!(out.status, 0, "{out:?}");
    };
    claim();
    // alpha runs: the reply is accepted there.
    let out = env.run(&["inbox", "complete", "beta", &ids[0], "--reply", "one"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout.contains("accepted by alpha") && !out.stderr.contains("not sent"),
        "{out:?}"
    );
    // alpha stopped: the reply waits in its spool.
    assert_eq!(a.term(), 0, "{}", a.stderr());
    claim();
    let out = env.run(&["inbox", "complete", "beta", &ids[1], "--reply", "two"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout.contains("stored for alpha") && !out.stderr.contains("not sent"),
        "{out:?}"
    );
    drop(b);
}

/// A handler (`--exec`, `--reply`) that answers once `go` exists (bounded:
/// about 10 s), running `then` first; its stdout is the reply.
fn gated_handler(go: &Path, then: &str) -> String {
    format!(
        "for i in $(seq 200); do [ -e '{}' ] && break; sleep 0.05; done; {then}",
        go.display()
    )
}

/// alpha (started with `alpha_args`) hands beta a task; alpha stops while
/// beta's handler waits; then the handler goes on. The task's id.
fn task_to_a_gated_beta(
    env: &Env,
    alpha_args: &[&str],
    beta_exec: &str,
    go: &Path,
) -> (String, crate::util::Served) {
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let mut a = env.serve(&wa, alpha_args);
    let b = env.serve(&wb, &["--name", "beta", "--exec", beta_exec, "--reply"]);
    let r = a.client().call(
        1,
        "relay/send",
        json!({"target": b.id, "body": "Count the tests."}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let mid = r["result"]["message_id"].as_str().unwrap().to_string();
    crate::util::wait_event(&b.spool(), "the turn", T, |e| {
        crate::util::event_is(e, "turn.started", &mid)
    });
    assert_eq!(a.term(), 0, "{}", a.stderr());
    File::create(go).unwrap();
    (mid, b)
}

/// Issue 18: a handler's `--reply` that cannot be delivered (its sender
/// stopped, and takes no offline delivery) is reported to whoever wrote
/// it: a `notice` in the replier's transcript naming the task and why,
/// besides the `relay.sent` record.
#[test]
fn a_handler_reply_that_cannot_be_delivered_is_a_notice_for_the_replier() {
    let env = Env::new();
    let go = env.root.join("go");
    let exec = gated_handler(&go, "echo 'There are 12.'");
    let (mid, b) = task_to_a_gated_beta(&env, &["--name", "alpha", "--no-offline"], &exec, &go);
    let spool = b.spool();
    let sent = crate::util::wait_event(&spool, "the reply's result", T, |e| {
        e["kind"] == "relay.sent" && e["reply_of"] == mid.as_str()
    });
    assert_eq!(sent["status"], "denied", "{sent}");
    let notice = crate::util::wait_event(&spool, "the notice of the lost reply", T, |e| {
        e["kind"] == "notice" && e["message_id"] == mid.as_str()
    });
    assert_eq!(
        notice["text"],
        format!(
            "the reply to {mid} was not delivered: denied: alpha is not running and does not take offline delivery (serve --no-offline)"
        ),
        "{notice}"
    );
}

/// Issue 18: `baton send --reply` inside a turn, to a sender whose
/// instance has stopped: the reply is `stored` in its spool, and the
/// replier is told `stored` (exit 0), not that it is on its way.
#[test]
fn send_reply_to_a_stopped_sender_is_stored_and_the_replier_told_so() {
    let env = Env::new();
    let go = env.root.join("go");
    let out = env.root.join("reply.json");
    let code = env.root.join("reply.code");
    let then = format!(
        "'{}' send --json --reply 'There are 12.' > '{}'; echo $? > '{}'",
        baton_bin().display(),
        out.display(),
        code.display()
    );
    let exec = gated_handler(&go, &then);
    let (mid, b) = task_to_a_gated_beta(&env, &["--name", "alpha"], &exec, &go);
    crate::util::wait_event(&b.spool(), "the turn's end", T, |e| {
        crate::util::event_is(e, "turn.finished", &mid)
    });
    assert_eq!(fs::read_to_string(&code).unwrap().trim(), "0");
    let v: Value = serde_json::from_str(&fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["status"], "stored", "{v}");
    let rid = v["message_id"].as_str().unwrap();
    assert_eq!(
        ids_in(&spool_of(&env, "alpha"), "inbox"),
        vec![rid.to_string()]
    );
}
