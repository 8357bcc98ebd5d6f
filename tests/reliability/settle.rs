//! `control/pause` is answered once the acceptances already past their
//! checks are stored (docs/protocol.md, `control/pause`). That wait is a
//! helper thread's, so the foreground goes on answering; only when no
//! thread can be started does the foreground wait itself, and then at most
//! `SETTLE_WAIT`, below the time every caller waits for the answer. An
//! acceptance is stalled with the `before-dir-fsync:sleep=MS` fail point
//! (its file is in `inbox/`, its answer not yet given).

use crate::util::reliability::{env, spool_dir};
use crate::util::{Env, RawClient, Served, wait_event, wait_for, wait_until};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a test client waits for an answer that may take a stall.
const LONG: Duration = Duration::from_secs(20);
const ID: &str = "stalled-1";

/// Starts a pull instance named `fp` with the fail points `fp`, sends it
/// one task on a thread of its own, and returns once that acceptance is
/// stalled: its file is in `inbox/` and it is not answered yet. The thread
/// returns the answer and when it came.
fn stalled(env: &Env, ws: &Path, fp: &str) -> (Served, JoinHandle<(Value, Instant)>) {
    let inst = env.serve_with(ws, &[("BATON_FAILPOINT", fp)], &["--name", "fp"]);
    let inbox = spool_dir(env, "fp", ws).join("inbox");
    let (socket, params) = (inst.socket.clone(), inst.msg(ID, "wait for me"));
    let sender = thread::spawn(move || {
        let mut c = RawClient::connect_timeout(&socket, LONG).unwrap();
        c.initialize();
        let r = c.try_result("message/send", params).unwrap();
        (r, Instant::now())
    });
    wait_until("the stalled task file in inbox/", LONG, || {
        fs::read_dir(&inbox).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().contains(ID))
        })
    });
    (inst, sender)
}

/// While a pause waits for a stalled acceptance, the foreground answers
/// `control/status` (which already says `paused`) and `ping` long before
/// the acceptance it waits for is answered; the pause then answers over a
/// queue that holds the task.
pub fn stalled_settle_leaves_the_foreground_answering() {
    let env = env();
    let ws = env.workspace("ws");
    let (mut inst, sender) = stalled(&env, &ws, "before-dir-fsync:sleep=6000*1");
    let socket = inst.socket.clone();
    let pauser = thread::spawn(move || {
        let mut c = RawClient::connect_timeout(&socket, LONG).unwrap();
        c.initialize();
        let r = c.try_result("control/pause", json!({})).unwrap();
        (r, Instant::now())
    });
    let mut c = inst.client();
    let status_at = wait_for("control/status to say paused", LONG, || {
        let r = c.try_result("control/status", json!({})).unwrap();
        let at = Instant::now();
        (r["paused"] == true).then_some(at)
    });
    let pong = c.try_result("ping", json!({})).unwrap();
    assert_eq!(pong["status"], "pong", "{pong}");
    let (paused, _) = pauser.join().unwrap();
    assert_eq!(paused["state"], "paused", "{paused}");
    let (sent, sent_at) = sender.join().unwrap();
    assert_eq!(sent["status"], "accepted", "{sent}");
    assert!(
        status_at < sent_at,
        "control/status was not answered while the pause waited for the acceptance"
    );
    let st = c.try_result("control/status", json!({})).unwrap();
    assert_eq!(st["queue"]["queued"], 1, "the pause answered over {st}");
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}

/// With no settle thread (the `settle-spawn` fail point), the foreground
/// waits itself, but no longer than SETTLE_WAIT: `baton pause` is answered
/// (exit 0) while the acceptance is still stalled (three times as long as
/// SETTLE_WAIT, 4 s in src/instance/dispatch.rs), and says `paused`.
pub fn settle_without_its_thread_is_bounded() {
    let env = env();
    let ws = env.workspace("ws");
    let fp = "before-dir-fsync:sleep=12000*1,settle-spawn:error";
    let (mut inst, sender) = stalled(&env, &ws, fp);
    let out = env.run(&["pause", "fp"]);
    let paused_at = Instant::now();
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.ends_with(": paused\n"), "{out:?}");
    let spool = spool_dir(&env, "fp", &ws);
    wait_event(&spool, "the notice of no settle thread", LONG, |e| {
        e["kind"] == "notice"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("cannot start a settle thread"))
    });
    // The stalled acceptance ends on its own, after the pause.
    let (sent, sent_at) = sender.join().unwrap();
    assert_eq!(sent["status"], "accepted", "{sent}");
    assert!(
        paused_at < sent_at,
        "the pause was answered only once the stalled acceptance was"
    );
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
}
