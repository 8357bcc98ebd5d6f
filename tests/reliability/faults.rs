//! Fail points (`BATON_FAILPOINT=NAME:ACTION`, src/failpoint.rs) at each
//! step of storing a task, and a panic in a connection thread.

use crate::util::reliability::{body_for, env, logging_handler, runs, spool, spool_dir};
use crate::util::{Env, RawClient, Served, wait_until};
use serde_json::{Value, json};
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
        let receipt = self.dir.join("done").join(format!("{id}.json"));
        wait_until(&format!("{id} to run"), Duration::from_secs(10), || {
            receipt.exists()
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
            baton::digest::sha256_hex(body_for(id).as_bytes())
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
