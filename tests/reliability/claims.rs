//! A task that `inbox/claim` hands out to a caller that never gets the
//! answer goes back to its place at the head of the queue, once, with a
//! `notice` (docs/protocol.md, `inbox/claim`): else it would sit in
//! `processing/` where no agent could ever claim it. The foreground's
//! answer is held back with the `claim-answer:sleep=MS` fail point, past
//! the connection's wait for it (5 s), or past its caller's hang-up.

use crate::util::reliability::{env, spool_dir};
use crate::util::{Env, RawClient, Served, transcript, wait_event};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// How long a test waits for what the instance does on its own.
const LONG: Duration = Duration::from_secs(30);
/// The notice's words (src/instance/inbox.rs, `UNDELIVERED`).
const PUT_BACK: &str = "the answer to inbox/claim did not reach its caller";

/// A pull instance under the fail points `fp` with the tasks `first` and
/// `second` queued, in that order.
fn queued(env: &Env, fp: &str) -> (Served, PathBuf) {
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_FAILPOINT", fp)], &["--name", "cl"]);
    let mut c = inst.client();
    for id in ["first", "second"] {
        let r = c.try_result("message/send", inst.msg(id, &format!("body of {id}")));
        assert_eq!(r.unwrap()["status"], "accepted", "{id}");
    }
    (inst, spool_dir(env, "cl", &ws))
}

/// Once the `notice` that `first` went back is recorded: the next claim
/// hands out `first` again, with its body, and the notice came once.
fn claimed_again(inst: &mut Served, spool: &std::path::Path) {
    let is_put_back = |e: &Value| {
        e["kind"] == "notice"
            && e["message_id"] == "first"
            && e["text"].as_str().is_some_and(|t| t.starts_with(PUT_BACK))
    };
    wait_event(spool, "the notice that first went back", LONG, is_put_back);
    let r = inst.client().try_result("inbox/claim", json!({})).unwrap();
    assert_eq!(r["status"], "claimed", "{r}");
    assert_eq!(r["task"]["message_id"], "first", "{r}");
    assert_eq!(r["task"]["body"], "body of first", "{r}");
    let notices = transcript(spool).into_iter().filter(is_put_back).count();
    assert_eq!(notices, 1, "put back once");
    assert!(inst.is_running());
}

/// The connection stopped waiting (`the instance did not answer in
/// time`) before the foreground answered.
pub fn claim_answered_after_its_caller_gave_up_goes_back() {
    let env = env();
    let (mut inst, spool) = queued(&env, "claim-answer:sleep=7000*1");
    let mut c = RawClient::connect_timeout(&inst.socket, LONG).unwrap();
    c.initialize();
    let r = c.try_call("inbox/claim", json!({})).unwrap();
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer in time"), "{r}");
    claimed_again(&mut inst, &spool);
}

/// The caller closed its connection before the answer was written.
pub fn claim_whose_caller_closed_goes_back() {
    let env = env();
    let (mut inst, spool) = queued(&env, "claim-answer:sleep=3000*1");
    let mut c = inst.client();
    let line = json!({"jsonrpc": "2.0", "id": 7, "method": "inbox/claim", "params": {}});
    c.send_line(line.to_string().as_bytes());
    drop(c);
    claimed_again(&mut inst, &spool);
}
