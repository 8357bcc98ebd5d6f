//! Fail points (`BATON_FAILPOINT=NAME:ACTION`, src/base/failpoint.rs) at each
//! step of storing a task, and a panic in a connection thread; resources
//! that run short (descriptors under a low RLIMIT_NOFILE, a handler that
//! cannot be started, a full disk at start).

use crate::util::reliability::{body_for, env, fd_count, logging_handler, runs, spool, spool_dir};
use crate::util::{
    Env, RawClient, Serve, Served, baton_bin, transcript, transcript_until, wait_event, wait_until,
};
use serde_json::{Value, json};
use std::fs;
use std::io::{self, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The steps of an acceptance, in order.
pub const STORE_POINTS: [&str; 4] = [
    "after-write",
    "after-file-fsync",
    "after-rename",
    "before-dir-fsync",
];

/// Asserts that a call got no answer because the server closed the
/// connection: not an answer, and not a connection left open and silent
/// (a timeout).
#[track_caller]
fn assert_hung_up(r: io::Result<Value>, what: &str) {
    match r {
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => {}
        other => panic!("{what}: expected the connection to close unanswered, got {other:?}"),
    }
}

/// Asserts that the server has closed `c`: end of stream, nothing more.
#[track_caller]
fn assert_closed(c: &mut RawClient, what: &str) {
    match c.try_read_line() {
        Ok(None) => {}
        other => panic!("{what}: expected the connection to be closed, got {other:?}"),
    }
}

/// Whether the task file was already renamed into `inbox/` at `point`.
fn in_inbox_at(point: &str) -> bool {
    matches!(point, "after-rename" | "before-dir-fsync" | "before-answer")
}

struct Case {
    env: Env,
    ws: PathBuf,
    log: PathBuf,
    dir: PathBuf,
    handler: String,
}

impl Case {
    fn new() -> Case {
        let env = env();
        let ws = env.workspace("ws");
        let log = env.root.join("runs.log");
        let handler = logging_handler(&log);
        let dir = spool_dir(&env, "fp", &ws);
        Case {
            env,
            ws,
            log,
            dir,
            handler,
        }
    }

    /// With a fail point the instance is a pull agent that nobody pulls
    /// from, so a stored task stays where the failure left it; without
    /// one it runs every task through the logging handler.
    fn start(&self, failpoint: Option<&str>) -> Served {
        let fp;
        let (vars, args): (&[(&str, &str)], &[&str]) = match failpoint {
            Some(f) => {
                fp = [("BATON_FAILPOINT", f)];
                (&fp, &["--name", "fp"])
            }
            None => (&[], &["--name", "fp", "--exec", &self.handler]),
        };
        self.env.serve_with(&self.ws, vars, args)
    }

    fn count_runs(&self, id: &str) -> usize {
        runs(&self.log).iter().filter(|r| *r == id).count()
    }

    /// With no fail point: the retry of `id` answers `want`, the task runs
    /// once, a second retry is `duplicate`, and the spool is clean.
    /// `leftovers` are the names a failure left in `tmp/`; the restart
    /// must have swept them.
    fn retry_runs_once(&self, id: &str, want: &str, leftovers: &[String]) {
        let mut inst = self.start(None);
        for name in leftovers {
            assert!(
                !self.dir.join("tmp").join(name).exists(),
                "tmp/{name} not swept at restart"
            );
        }
        let mut c = inst.client();
        let r = c
            .try_result("message/send", inst.msg(id, &body_for(id)))
            .unwrap();
        assert_eq!(r["status"], want, "retry of {id}: {r}");
        wait_until(&format!("{id} to run"), Duration::from_secs(10), || {
            crate::util::receipt(&self.dir, id).is_some()
        });
        let r = c
            .try_result("message/send", inst.msg(id, &body_for(id)))
            .unwrap();
        assert_eq!(r["status"], "duplicate", "second retry of {id}: {r}");
        wait_until("the queue to be idle", Duration::from_secs(10), || {
            c.try_queue().unwrap() == (0, 0)
        });
        drop(c);
        assert_eq!(inst.term(), 0, "{}", inst.stderr());
        assert_eq!(self.count_runs(id), 1, "{id} ran {:?}", runs(&self.log));
        let v = spool(&self.dir);
        assert_eq!(v.places(id), ["done"], "{v:?}");
        assert_eq!(
            v.done[id]["digest"],
            baton::base::digest::sha256_hex(body_for(id).as_bytes())
        );
        assert!(v.items.is_empty() && v.tmp.is_empty(), "{v:?}");
    }
}

/// `NAME:exit`: the process dies at the point with status 86 and the
/// sender gets no answer. After a restart the retry is `accepted` (the
/// file never reached `inbox/`, and `tmp/` was swept) or `duplicate` (it
/// did), and the task runs once.
pub fn exit_at(point: &str) {
    let case = Case::new();
    let mut inst = case.start(Some(&format!("{point}:exit")));
    let id = format!("x-{point}");
    let mut c = inst.client();
    let r = c.try_call("message/send", inst.msg(&id, &body_for(&id)));
    assert_hung_up(r, &format!("{point}:exit"));
    let code = inst.wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(86), "{point}:exit: {}", inst.stderr());
    let v = spool(&case.dir);
    if in_inbox_at(point) {
        assert_eq!(v.places(&id), ["inbox"], "{v:?}");
    } else {
        assert!(v.items.is_empty(), "{v:?}");
        assert_eq!(v.tmp.len(), 1, "the unsynced file stays in tmp/: {v:?}");
    }
    assert_eq!(case.count_runs(&id), 0);
    let want = if in_inbox_at(point) {
        "duplicate"
    } else {
        "accepted"
    };
    case.retry_runs_once(&id, want, &v.tmp);
}

/// `NAME:panic`: the connection thread panics at the point; that
/// connection closes without an answer, the instance keeps serving
/// others. After a restart the retry is accepted or duplicate and the
/// task runs once.
pub fn panic_at(point: &str) {
    let case = Case::new();
    let mut inst = case.start(Some(&format!("{point}:panic")));
    let id = format!("p-{point}");
    let mut other = inst.client();
    let mut c = inst.client();
    let r = c.try_call("message/send", inst.msg(&id, &body_for(&id)));
    assert_hung_up(r, &format!("{point}:panic"));
    assert!(inst.is_running(), "{}", inst.stderr());
    // The other connection, and new ones, still work; the spool's lock,
    // held during the panic, is usable.
    other.try_ping().unwrap();
    let mut fresh = inst.client();
    fresh.try_ping().unwrap();
    // Only a panic after the task was stored and indexed leaves it
    // queued; one left in inbox/ by a panic after the rename is unknown
    // to this process until a restart.
    let queued = u64::from(point == "before-answer");
    assert_eq!(fresh.try_queue().unwrap(), (queued, 0));
    assert!(
        inst.stderr().contains(&format!("fail point {point}")),
        "{}",
        inst.stderr()
    );
    drop((other, fresh, c));
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let v = spool(&case.dir);
    if in_inbox_at(point) {
        assert_eq!(v.places(&id), ["inbox"], "{v:?}");
    } else {
        assert!(v.items.is_empty(), "{v:?}");
    }
    let leftovers = v.tmp;
    let want = if in_inbox_at(point) {
        "duplicate"
    } else {
        "accepted"
    };
    case.retry_runs_once(&id, want, &leftovers);
}

/// `NAME:error` at a step of storing: the answer is -32603, no file
/// stays in `inbox/` or `tmp/`, and a second try (the fail point still
/// set) is refused the same way, so a failed file is never reused. After
/// a restart without the fail point the retry is accepted and runs once.
pub fn error_at(point: &str) {
    let case = Case::new();
    let mut inst = case.start(Some(&format!("{point}:error")));
    let id = format!("e-{point}");
    let mut c = inst.client();
    for attempt in 0..2 {
        let r = c
            .try_call("message/send", inst.msg(&id, &body_for(&id)))
            .unwrap();
        assert_eq!(r["error"]["code"], -32603, "attempt {attempt}: {r}");
        let msg = r["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("not accepted"), "{msg}");
        let v = spool(&case.dir);
        assert!(
            v.items.is_empty() && v.tmp.is_empty() && v.done.is_empty(),
            "{point}:error left files: {v:?}"
        );
    }
    // The connection stays usable: an internal error does not close it.
    c.try_ping().unwrap();
    assert_eq!(c.try_queue().unwrap(), (0, 0));
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    assert_eq!(case.count_runs(&id), 0);
    case.retry_runs_once(&id, "accepted", &[]);
}

/// A store that runs out of descriptors (`after-write:emfile*1`) is no
/// verdict on the task: the answer is -32603 that says the task was not
/// accepted and to try again, nothing stays in the spool, and the same id
/// sent again on the same connection is accepted and runs once.
pub fn store_short_of_descriptors_says_try_again() {
    let case = Case::new();
    let mut inst = case.start(Some("after-write:emfile*1"));
    let id = "e-emfile";
    let mut c = inst.client();
    let r = c
        .try_call("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.starts_with("internal error: the spool could not store the task: ")
            && msg.contains("(os error 24)")
            && msg.ends_with("; the task was not accepted: try again"),
        "{msg}"
    );
    let v = spool(&case.dir);
    assert!(
        v.items.is_empty() && v.tmp.is_empty() && v.done.is_empty(),
        "left files: {v:?}"
    );
    let r = c
        .try_result("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    case.retry_runs_once(id, "duplicate", &[]);
}

/// `before-answer:error` is not a storage error: the task is stored, so
/// the point cannot fail it and the answer is `accepted`.
pub fn error_before_answer_is_ignored() {
    let case = Case::new();
    let mut inst = case.start(Some("before-answer:error"));
    let id = "e-before-answer";
    let mut c = inst.client();
    let r = c
        .try_result("message/send", inst.msg(id, &body_for(id)))
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    drop(c);
    assert_eq!(inst.term(), 0);
    assert_eq!(spool(&case.dir).places(id), ["inbox"]);
    case.retry_runs_once(id, "duplicate", &[]);
}

fn zcoder_ping(socket: &Path) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let payload = br#"{"protocol":1,"type":"ping"}"#;
    s.write_all(format!("ZCODER-AGENT/1 {}\n", payload.len()).as_bytes())
        .unwrap();
    s.write_all(payload).unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let (_, body) = text.split_once('\n').unwrap_or_else(|| panic!("{text:?}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

/// `dispatch:panic`: every dispatched request panics in its connection
/// thread (the point sits before dispatch, so it fires for initialize and
/// ping too). The panicking connection closes without an answer; a
/// connection opened before it, and new ones, keep being served (their
/// lines that do not reach dispatch are answered, and zcoder's ping,
/// which does not go through dispatch, gets its pong); the process lives.
pub fn dispatch_panic() {
    let env = env();
    let ws = env.workspace("ws");
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_FAILPOINT", "dispatch:panic")],
        &["--name", "dp"],
    );
    let socket = inst.socket.clone();
    let connect = || RawClient::connect(&socket).unwrap();
    let mut before = connect();
    let mut victim = connect();
    assert_hung_up(victim.try_initialize(), "initialize under dispatch:panic");
    assert_closed(&mut victim, "the panicking connection");
    assert!(inst.is_running());
    // The connection opened before the panic is still served.
    let r = before.try_call("ping", json!({})).unwrap();
    assert_eq!(r["error"]["code"], -32010, "{r}");
    before.try_send_raw(b"{not json\n").unwrap();
    let l: Value = serde_json::from_str(&before.read_line().unwrap()).unwrap();
    assert_eq!(l["error"]["code"], -32700, "{l}");
    // New connections too, on both wires.
    let mut after = connect();
    let r = after.try_call("agent/info", json!({})).unwrap();
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let pong = zcoder_ping(&socket);
    assert_eq!(pong["status"], "pong", "{pong}");
    // Each panic closed only its own connection: five in a row, and the
    // instance is still there.
    for n in 0..5 {
        assert_hung_up(connect().try_initialize(), &format!("panic {n}"));
    }
    assert!(inst.is_running());
    let r = before.try_call("ping", json!({})).unwrap();
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert!(
        inst.stderr().contains("fail point dispatch"),
        "{}",
        inst.stderr()
    );
    drop((before, after));
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

/// A panic while answering an accepted `message/send`
/// (`before-answer:panic`): that connection closes without an answer,
/// every other connection and new ones go on, JSON-RPC pings answered.
pub fn answer_panic_closes_only_its_connection() {
    let env = env();
    let ws = env.workspace("ws");
    let mut inst = env.serve_with(
        &ws,
        &[("BATON_FAILPOINT", "before-answer:panic")],
        &["--name", "ap"],
    );
    let mut others: Vec<RawClient> = (0..3).map(|_| inst.client()).collect();
    for n in 0..3 {
        let id = format!("ap-{n}");
        let mut c = inst.client();
        let r = c.try_call("message/send", inst.msg(&id, &body_for(&id)));
        assert_hung_up(r, &format!("{id} under before-answer:panic"));
        assert_closed(&mut c, &format!("the connection that sent {id}"));
        for o in &mut others {
            o.try_ping().unwrap();
        }
        let mut fresh = inst.client();
        fresh.try_ping().unwrap();
        // It was stored before the panic: a retry is a duplicate, which is
        // answered (the point fires only for acceptances).
        let r = fresh
            .try_result("message/send", inst.msg(&id, &body_for(&id)))
            .unwrap();
        assert_eq!(r["status"], "duplicate", "{r}");
        assert_eq!(fresh.try_queue().unwrap(), (n + 1, 0));
    }
    assert!(inst.is_running());
    drop(others);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let v = spool(&spool_dir(&env, "ap", &ws));
    assert_eq!(v.in_place("inbox").len(), 3, "{v:?}");
}

// Temporary errors are not verdicts (issue 17): a resource that runs short
// leaves every task queued, in its place, said once; the task is handed
// out, and runs once, when the resource is back.

/// The `notice` events of a spool's transcript about a shortage (the ones
/// that say it started, then the ones that say it is over).
fn shortage_notices(dir: &Path) -> (Vec<Value>, Vec<Value>) {
    let notices: Vec<Value> = transcript(dir)
        .into_iter()
        .filter(|e| e["kind"] == "notice")
        .collect();
    let started = notices
        .iter()
        .filter(|e| e["shortage"].is_string())
        .cloned()
        .collect();
    let over = notices
        .iter()
        .filter(|e| {
            e["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("no longer"))
        })
        .cloned()
        .collect();
    (started, over)
}

/// The message ids of one list of `inbox/list`.
fn listed(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("inbox/list has no {key}: {list}"))
        .iter()
        .map(|t| t["message_id"].as_str().unwrap().to_string())
        .collect()
}

/// Connects clients, each initialized, until the instance holds all but
/// one or two of its `limit` descriptors (each connection takes two),
/// then lowers its soft RLIMIT_NOFILE to what it holds: from then on it
/// cannot open a file. Lowering the limit, rather than counting on the
/// last connection to land exactly on it, keeps the case the same
/// whatever number of descriptors the instance started with.
fn use_up_descriptors(inst: &Served, limit: usize) -> Vec<RawClient> {
    let mut fillers = Vec::new();
    wait_until(
        "the instance to use up its descriptors",
        Duration::from_secs(10),
        || {
            if fd_count(inst.pid()) + 2 >= limit {
                return true;
            }
            fillers.push(inst.client());
            false
        },
    );
    let held = fd_count(inst.pid());
    set_soft_nofile(inst.pid(), held as u64);
    assert_eq!(fd_count(inst.pid()), held, "descriptors in use");
    fillers
}

/// Sets another process's soft RLIMIT_NOFILE (same user: no privilege).
fn set_soft_nofile(pid: u32, soft: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a null new limit only reads the current one into `old`.
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(r, 0, "prlimit read: {}", io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: both pointers are to live rlimit values.
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0, "prlimit set: {}", io::Error::last_os_error());
}

/// Descriptors the instance holds for one connection: its socket and
/// the clone it reads from.
const CONN_FDS: usize = 2;

/// Stops `n` fillers and waits until the instance closed both descriptors
/// of each.
fn give_back(inst: &Served, fillers: &mut Vec<RawClient>, n: usize) {
    let before = fd_count(inst.pid());
    fillers.truncate(fillers.len() - n);
    wait_until(
        "the instance to close the connections",
        Duration::from_secs(5),
        || fd_count(inst.pid()) <= before - n * CONN_FDS,
    );
}

/// Lowers the instance's soft RLIMIT_NOFILE so that exactly `k`
/// descriptor numbers are free below it: what it may open at once.
fn leave_free(inst: &Served, k: usize) {
    let held: std::collections::BTreeSet<usize> = fs::read_dir(format!("/proc/{}/fd", inst.pid()))
        .expect("the instance's descriptors")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let last_free = (0..)
        .filter(|n| !held.contains(n))
        .nth(k - 1)
        .expect("a free number");
    set_soft_nofile(inst.pid(), last_free as u64 + 1);
}

/// A pull agent out of descriptors (RLIMIT_NOFILE reached; `fsync` is
/// `on` or `off`): every claim answers a temporary error that says what
/// ran short, the tasks stay queued in order (in `inbox/`, listed, none
/// in `processing/` or `rejected/`), the shortage is said once; with one
/// descriptor back the tasks are claimed in order.
pub fn pull_claim_out_of_descriptors(fsync: &str) {
    let env = env();
    let ws = env.workspace("ws");
    let limit = 40;
    let serve = || {
        env.serve_opts(
            &ws,
            Serve {
                vars: &[("BATON_FSYNC", fsync)],
                args: &["--name", "fdp"],
                nofile: Some(limit as u64),
            },
        )
    };
    let mut inst = serve();
    let dir = spool_dir(&env, "fdp", &ws);
    let ids = ["d-1", "d-2", "d-3"];
    let mut c = inst.client();
    // d-0 ran before: a resend reads its receipt.
    for id in ["d-0"].iter().chain(&ids) {
        assert_eq!(inst.send(&mut c, id, &body_for(id))["status"], "accepted");
    }
    let r = c.try_result("inbox/claim", json!({})).unwrap();
    assert_eq!(r["task"]["message_id"], "d-0", "{r}");
    let done = json!({"message_id": "d-0"});
    assert_eq!(
        c.try_result("inbox/complete", done).unwrap()["status"],
        "completed"
    );
    // A restarted instance has no task it stored itself (those a claim
    // may hand out as written): each claim reads its file.
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let inst = serve();
    let mut c = inst.client();
    let mut fillers = use_up_descriptors(&inst, limit);
    // Neither is a resend refused because its receipt cannot be opened
    // now: the sender gets an error and may send again.
    let r = c
        .try_call("message/send", inst.msg("d-0", &body_for("d-0")))
        .unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    for attempt in 0..3 {
        let r = c.try_result("inbox/claim", json!({})).unwrap();
        let l = c.try_result("inbox/list", json!({})).unwrap();
        assert_eq!(
            listed(&l, "queued"),
            ids,
            "attempt {attempt}: {l}\nclaim: {r}"
        );
        assert!(listed(&l, "processing").is_empty(), "{l}");
        assert!(listed(&l, "rejected").is_empty(), "{l}");
        assert_eq!(r["status"], "error", "attempt {attempt}: {r}");
        assert_eq!(r["temporary"], true, "attempt {attempt}: {r}");
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("out of file descriptors"), "{reason}");
        assert!(reason.contains("the task stays queued"), "{reason}");
    }
    let v = spool(&dir);
    assert_eq!(v.in_place("inbox").len(), 3, "{v:?}");
    assert!(v.in_place("processing").is_empty() && v.rejected.is_empty());
    // One descriptor back, not two: a claim, a resend's receipt read and
    // a completion (its receipt appended and made durable, the task's
    // file removed and its directory synced) each need one at a time.
    give_back(&inst, &mut fillers, 1);
    leave_free(&inst, 1);
    assert_eq!(
        inst.send(&mut c, "d-0", &body_for("d-0"))["status"],
        "duplicate"
    );
    for id in ids {
        let r = c.try_result("inbox/claim", json!({})).unwrap();
        assert_eq!(r["status"], "claimed", "{r}");
        assert_eq!(r["task"]["message_id"], id, "{r}");
        assert_eq!(r["task"]["body"], body_for(id), "{r}");
        let r = c
            .try_result("inbox/complete", json!({"message_id": id}))
            .unwrap();
        assert_eq!(r["status"], "completed", "{r}");
    }
    let (started, over) = shortage_notices(&dir);
    assert_eq!(started.len(), 1, "said once: {started:?}");
    assert_eq!(over.len(), 1, "{over:?}");
    let said = inst
        .stderr()
        .lines()
        .filter(|l| l.starts_with("baton: out of file descriptors"))
        .count();
    assert_eq!(said, 1, "{}", inst.stderr());
    drop((fillers, c));
    let mut inst = inst;
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let v = spool(&dir);
    for id in ["d-0"].iter().chain(&ids) {
        assert_eq!(v.places(id), ["done"], "{v:?}");
    }
}

/// An exec agent out of descriptors when its queue resumes: the claim
/// fails, the tasks stay queued, the agent backs off (said once) and
/// runs each task once, in order, when the descriptors are back.
pub fn exec_turn_out_of_descriptors() {
    let case = Case::new();
    // Two tasks stored while no handler runs them.
    let mut first = case.env.serve(&case.ws, &["--name", "fp"]);
    let ids = ["x-1", "x-2"];
    let mut c = first.client();
    for id in ids {
        assert_eq!(first.send(&mut c, id, &body_for(id))["status"], "accepted");
    }
    drop(c);
    assert_eq!(first.term(), 0, "{}", first.stderr());
    let limit = 40;
    let inst = case.env.serve_opts(
        &case.ws,
        Serve {
            vars: &[("BATON_FSYNC", "on")],
            args: &["--name", "fp", "--exec", &case.handler, "--paused"],
            nofile: Some(limit as u64),
        },
    );
    let mut c = inst.client();
    let mut fillers = use_up_descriptors(&inst, limit);
    let r = c.try_result("control/resume", json!({})).unwrap();
    assert_eq!(r["changed"], true, "{r}");
    // Backing off: the retries (50 ms, doubling to 1 s) fail the same way
    // and are not said again. No event marks a retry: this is a window
    // of time.
    std::thread::sleep(Duration::from_millis(1500));
    let l = c.try_result("inbox/list", json!({})).unwrap();
    assert_eq!(listed(&l, "queued"), ids, "{l}");
    assert!(listed(&l, "processing").is_empty(), "{l}");
    assert!(runs(&case.log).is_empty());
    wait_event(
        &case.dir,
        "the shortage notice",
        Duration::from_secs(5),
        |e| e["shortage"].is_string(),
    );
    let all = fillers.len();
    give_back(&inst, &mut fillers, all);
    wait_until("both tasks to run", Duration::from_secs(10), || {
        ids.iter()
            .all(|id| crate::util::receipt(&case.dir, id).is_some())
    });
    assert_eq!(runs(&case.log), ids);
    let (started, over) = shortage_notices(&case.dir);
    assert_eq!(started.len(), 1, "said once: {started:?}");
    assert_eq!(over.len(), 1, "{over:?}");
    drop(c);
    let mut inst = inst;
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let v = spool(&case.dir);
    for id in ids {
        assert_eq!(v.places(id), ["done"], "{v:?}");
        assert_eq!(v.done[id]["outcome"], "done", "{v:?}");
    }
}

/// A handler that cannot be started for want of a resource
/// (`handler-spawn:<errno>*3`, the first three starts fail): the task is
/// put back in its place, not finished `failed`; it runs once, before the
/// next task, and a resend is a duplicate.
pub fn handler_spawn_short(errno: &str) {
    let case = Case::new();
    let fp = format!("handler-spawn:{errno}*3");
    let mut inst = case.env.serve_with(
        &case.ws,
        &[("BATON_FAILPOINT", &fp)],
        &["--name", "fp", "--exec", &case.handler],
    );
    let ids = ["s-1", "s-2"];
    let mut c = inst.client();
    for id in ids {
        assert_eq!(inst.send(&mut c, id, &body_for(id))["status"], "accepted");
    }
    wait_until("both tasks to run", Duration::from_secs(10), || {
        ids.iter()
            .all(|id| crate::util::receipt(&case.dir, id).is_some())
    });
    assert_eq!(runs(&case.log), ids, "{fp}");
    for id in ids {
        let r = inst.send(&mut c, id, &body_for(id));
        assert_eq!(r["status"], "duplicate", "{fp}: {r}");
    }
    let failed: Vec<Value> = transcript(&case.dir)
        .into_iter()
        .filter(|e| e["kind"] == "turn.finished" && e["outcome"] != "done")
        .collect();
    assert!(failed.is_empty(), "{fp}: {failed:?}");
    let (started, over) = shortage_notices(&case.dir);
    assert_eq!(started.len(), 1, "{fp}: said once: {started:?}");
    assert_eq!(over.len(), 1, "{fp}: {over:?}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    assert_eq!(runs(&case.log), ids, "{fp}");
}

/// A full disk at start (`lock-write`, `meta-write` and `after-write`
/// fail with ENOSPC): the instance starts anyway, says so, runs what was
/// queued, and refuses what it cannot store with -32603.
pub fn full_disk_at_start() {
    let case = Case::new();
    let mut first = case.env.serve(&case.ws, &["--name", "fp"]);
    let ids = ["q-1", "q-2"];
    let mut c = first.client();
    for id in ids {
        assert_eq!(first.send(&mut c, id, &body_for(id))["status"], "accepted");
    }
    drop(c);
    assert_eq!(first.term(), 0, "{}", first.stderr());
    let full = "lock-write:enospc,meta-write:enospc,after-write:enospc";
    let mut inst = case.env.serve_with(
        &case.ws,
        &[("BATON_FAILPOINT", full)],
        &["--name", "fp", "--exec", &case.handler],
    );
    let said = inst.stderr();
    assert!(said.contains("No space left on device"), "{said}");
    assert!(said.contains("starting anyway"), "{said}");
    wait_event(&case.dir, "the notice", Duration::from_secs(5), |e| {
        e["kind"] == "notice"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("starting anyway"))
    });
    wait_until("the queued tasks to run", Duration::from_secs(10), || {
        ids.iter()
            .all(|id| crate::util::receipt(&case.dir, id).is_some())
    });
    assert_eq!(runs(&case.log), ids);
    let mut c = inst.client();
    let r = c
        .try_call("message/send", inst.msg("q-3", &body_for("q-3")))
        .unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    // With room again, the refused task is accepted and runs once.
    case.retry_runs_once("q-3", "accepted", &[]);
}

/// A claim whose directory sync fails after the rename
/// (`claim-sync:eio*1`): the move is undone, the claim answers a
/// temporary error, the task is listed where it was, and the next claim
/// hands it out.
pub fn claim_sync_fails_once() {
    let case = Case::new();
    let mut inst = case.env.serve_with(
        &case.ws,
        &[
            ("BATON_FAILPOINT", "claim-sync:eio*1"),
            ("BATON_FSYNC", "on"),
        ],
        &["--name", "fp"],
    );
    let ids = ["c-1", "c-2"];
    let mut c = inst.client();
    for id in ids {
        assert_eq!(inst.send(&mut c, id, &body_for(id))["status"], "accepted");
    }
    let r = c.try_result("inbox/claim", json!({})).unwrap();
    let l = c.try_result("inbox/list", json!({})).unwrap();
    assert_eq!(listed(&l, "queued"), ids, "{l}\nclaim: {r}");
    assert!(listed(&l, "processing").is_empty(), "{l}");
    assert_eq!(r["temporary"], true, "{r}");
    assert!(r["reason"].as_str().unwrap().contains("EIO"), "{r}");
    assert_eq!(spool(&case.dir).in_place("inbox").len(), 2);
    for id in ids {
        let r = c.try_result("inbox/claim", json!({})).unwrap();
        assert_eq!(r["task"]["message_id"], id, "{r}");
        let done = json!({"message_id": id});
        assert_eq!(
            c.try_result("inbox/complete", done).unwrap()["status"],
            "completed"
        );
    }
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

/// A turn's in-turn reply is on record before the turn's end: the
/// instance hears of the send's result before the handler that waits for
/// it does (`between-send-reports:sleep=300` stalls the sender thread
/// between the two), so `relay.sent` precedes `turn.finished` however
/// the threads are scheduled.
pub fn an_in_turn_send_is_recorded_before_its_turn_ends() {
    let env = Env::new();
    let a = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let bin = baton_bin().display().to_string().replace('\'', "'\\''");
    let script = env.root.join("reply.sh");
    fs::write(
        &script,
        format!("cat > /dev/null\n'{bin}' send --reply 'in-turn reply' > /dev/null\n"),
    )
    .unwrap();
    let exec = format!("sh '{}'", script.display());
    let b = env.serve_with(
        &env.workspace("bravo"),
        &[("BATON_FAILPOINT", "between-send-reports:sleep=300")],
        &["--name", "bravo", "--exec", &exec],
    );
    let sock = a.socket.to_str().unwrap().to_string();
    let out = env.run_with(
        &[("BATON_SOCKET", &sock)],
        None,
        &["send", "--json", "--", "bravo", "go"],
        None,
    );
    assert_eq!(out.status, 0, "{out:?}");
    let task: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let task = task["message_id"].as_str().unwrap().to_string();
    let upto = transcript_until(&b.spool(), "turn.finished", Duration::from_secs(30), |e| {
        e["kind"] == "turn.finished" && e["message_id"] == task.as_str()
    });
    let sent = upto
        .iter()
        .find(|e| e["kind"] == "relay.sent" && e["reply_of"] == task.as_str());
    assert!(
        sent.is_some(),
        "no relay.sent for the in-turn reply before turn.finished: {upto:#?}"
    );
    assert_eq!(sent.unwrap()["status"], "accepted", "{sent:?}");
}
