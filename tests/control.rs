//! Control of a running instance (docs/protocol.md §3, §6): approvals under
//! `--approve ask|deny` and the `sysadmin` profile, approval requests sent
//! to controllers (raw clients and `baton watch --approve`), the event
//! stream (`events/subscribe`, `since` replay, `baton log`, subscribers
//! that leave or stall), `--ephemeral`, steer follow-ups for pull agents,
//! and transcript rotation.

use crate::util::reliability::fd_count;
use crate::util::{
    Env, RawClient, approval_of, event_is, lines_of, manifests, me_as_instance, poll, transcript,
    transcript_until, wait_for, wait_until, writing,
};
use serde_json::{Value, json};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// A handler that records which task ran, in order, in `ran.txt` in the
/// workspace.
const RECORD: &str = "echo \"$BATON_MESSAGE_ID\" >> ran.txt";
/// `src/cli/serve.rs`: the sysadmin profile refuses `--approve auto`
/// without `--yes`.
const SYSADMIN_AUTO: &str = "baton: serve: --approve auto with --profile sysadmin runs every task unasked; add --yes to mean it\n";
/// `src/spool/events.rs` `ROTATE_BYTES`.
const ROTATE_BYTES: u64 = 4 * 1024 * 1024;
const WAIT: Duration = Duration::from_secs(10);

/// Calls `method` and returns its `result`, panicking on an error.
#[track_caller]
fn call(c: &mut RawClient, method: &str, params: Value) -> Value {
    let r = c.call(7, method, params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: no result: {r}"))
}

/// `message/send` and its `result`.
#[track_caller]
fn send(c: &mut RawClient, params: Value) -> Value {
    call(c, "message/send", params)
}

#[track_caller]
fn assert_accepted(r: &Value, position: u64) {
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], position, "{r}");
}

/// `inbox/list`'s `awaiting_approval`.
fn awaiting(c: &mut RawClient) -> Vec<String> {
    let l = call(c, "inbox/list", json!({}));
    l["awaiting_approval"]
        .as_array()
        .unwrap_or_else(|| panic!("{l}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// `inbox/list`'s queued message ids, in claim order.
fn queued_ids(c: &mut RawClient) -> Vec<String> {
    let l = call(c, "inbox/list", json!({}));
    l["queued"]
        .as_array()
        .unwrap_or_else(|| panic!("{l}"))
        .iter()
        .map(|t| t["message_id"].as_str().unwrap().to_string())
        .collect()
}

/// `approval/respond` on the approval task `id` waits for, by the id and
/// digest its `approval.requested` event gave.
fn respond(c: &mut RawClient, spool: &Path, id: &str, decision: &str) -> Value {
    let mut answer = approval_of(spool, id);
    answer["decision"] = json!(decision);
    call(c, "approval/respond", answer)
}

/// A file's text, or "" when it does not exist.
fn text_of(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// Recorded events of `kind` about task `id`.
fn events(spool: &Path, kind: &str, id: &str) -> Vec<Value> {
    of(&transcript(spool), kind, id)
}

/// The events of `kind` about task `id` among `events`.
fn of(events: &[Value], kind: &str, id: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| event_is(e, kind, id))
        .cloned()
        .collect()
}

/// Sends `params` again, for a task the instance has already decided
/// about, and returns the transcript up to the `message.rejected` that
/// records the `duplicate` answer. The retry goes out after a call the
/// instance's loop answered (`inbox/list`), so everything the loop did
/// with the task until then (asking, denying, starting a turn, an event
/// written twice) is recorded before that event: a test that asserts
/// that something did not happen looks there.
#[track_caller]
fn upto_duplicate(c: &mut RawClient, spool: &Path, params: Value) -> Vec<Value> {
    queued_ids(c);
    let id = params["message_id"].as_str().unwrap().to_string();
    let r = send(c, params);
    assert_eq!(r["status"], "duplicate", "{r}");
    transcript_until(
        spool,
        &format!("the duplicate of {id} refused"),
        WAIT,
        |e| event_is(e, "message.rejected", &id) && e["status"] == "duplicate",
    )
}

/// The receipt of task `id`, once it is kept.
#[track_caller]
fn wait_receipt(spool: &Path, id: &str) -> Value {
    wait_for(&format!("the receipt of {id}"), WAIT, || {
        crate::util::receipt(spool, id)
    })
}

fn steer(mut params: Value) -> Value {
    params["mode"] = json!("steer");
    params
}

/// Asserts that `seqs` counts up by one from `from`.
#[track_caller]
fn assert_contiguous(seqs: &[u64], from: u64) {
    for (i, s) in seqs.iter().enumerate() {
        assert_eq!(
            *s,
            from + i as u64,
            "the sequence breaks at index {i} of {}",
            seqs.len()
        );
    }
}

fn is_event(m: &Value, kind: &str, id: &str) -> bool {
    m["method"] == "event" && m["params"]["kind"] == kind && m["params"]["message_id"] == id
}

/// Reads server messages until `stop` holds for one; returns all of them,
/// that one last.
#[track_caller]
fn read_until(c: &mut RawClient, what: &str, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    while seen.len() < 20_000 {
        let m = c.read_json();
        let done = stop(&m);
        seen.push(m);
        if done {
            return seen;
        }
    }
    panic!("no {what} in {} messages", seen.len());
}

/// A child this test started itself; killed and reaped when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------
// 1. Approvals
// ---------------------------------------------------------------------------

#[test]
fn ask_waits_without_blocking_acceptance_and_approve_or_deny_decide() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let ran = ws.join("ran.txt");
    let inst = env.serve(&ws, &["--exec", RECORD, "--approve", "ask"]);
    let mut c = inst.client();
    let spool = inst.spool();

    let r = send(&mut c, inst.msg("ask-1", "first"));
    assert_accepted(&r, 1);
    assert_eq!(r["state"], "ready", "{r}");
    wait_until("ask-1 to wait for approval", WAIT, || {
        awaiting(&mut c) == ["ask-1"]
    });

    // Waiting is not running: nothing ran and the instance stays ready.
    // Once approval.requested is recorded nothing is due until someone
    // decides, so nothing of this instance marks the moment by which an
    // unapproved turn would have started on its own: an instance that
    // needs no approval, sent the same task later, has run it by then.
    let wws = env.workspace("witness");
    let mut witness = env.serve(&wws, &["--exec", RECORD]);
    let r = send(&mut witness.client(), witness.msg("w-1", "first"));
    assert_eq!(r["status"], "accepted", "{r}");
    wait_until("the witness's turn to run", WAIT, || {
        wws.join("ran.txt").exists()
    });
    assert_eq!(witness.term(), 0, "{}", witness.stderr());
    assert!(
        !ran.exists(),
        "the handler ran unapproved: {}",
        text_of(&ran)
    );
    assert_eq!(call(&mut c, "ping", json!({}))["state"], "ready");
    assert_eq!(inst.manifest_state(), "ready");
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["approve"], "ask", "{st}");
    assert_eq!(st["turn"], Value::Null, "{st}");
    assert_eq!(st["awaiting_approval"], json!(["ask-1"]), "{st}");
    assert_eq!(events(&spool, "approval.requested", "ask-1").len(), 1);
    assert!(events(&spool, "turn.started", "ask-1").is_empty());

    // A second task is accepted meanwhile; only the head is asked about.
    assert_accepted(&send(&mut c, inst.msg("ask-2", "second")), 2);
    assert_eq!(queued_ids(&mut c), ["ask-1", "ask-2"]);
    assert_eq!(awaiting(&mut c), ["ask-1"]);

    // Deciding about nothing, or with a bad decision, changes nothing.
    let nothing =
        json!({"approval_id": "ask-999", "digest": "0".repeat(64), "decision": "approve"});
    assert_eq!(
        call(&mut c, "approval/respond", nothing),
        json!({"status": "invalid", "approval_id": "ask-999",
               "reason": "no approval ask-999 is waiting"})
    );
    let first = approval_of(&spool, "ask-1");
    assert_eq!(
        respond(&mut c, &spool, "ask-1", "maybe"),
        json!({"status": "invalid", "approval_id": first["approval_id"],
               "reason": "decision is not approve or deny"})
    );
    assert_eq!(awaiting(&mut c), ["ask-1"]);

    // Approve: it runs; then the second one waits in turn.
    assert_eq!(
        respond(&mut c, &spool, "ask-1", "approve"),
        json!({"status": "approved", "approval_id": first["approval_id"], "message_id": "ask-1"})
    );
    wait_until("ask-1 to run", WAIT, || text_of(&ran) == "ask-1\n");
    assert_eq!(wait_receipt(&spool, "ask-1")["outcome"], "done");
    wait_until("ask-2 to wait for approval", WAIT, || {
        awaiting(&mut c) == ["ask-2"]
    });
    // The loop answered that after it had come to ask-2 and asked: had it
    // started ask-2's turn instead, or as well, the turn would show here.
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["turn"], Value::Null, "{st}");
    assert!(events(&spool, "turn.started", "ask-2").is_empty());
    assert_eq!(text_of(&ran), "ask-1\n");
    assert_eq!(call(&mut c, "ping", json!({}))["state"], "ready");
    let resolved = events(&spool, "approval.resolved", "ask-1");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["decision"], "approve");
    assert_eq!(resolved[0]["by"], "approval/respond");

    // Deny: the handler never runs and the task ends as denied.
    let second = approval_of(&spool, "ask-2");
    assert_eq!(
        respond(&mut c, &spool, "ask-2", "deny"),
        json!({"status": "denied", "approval_id": second["approval_id"], "message_id": "ask-2"})
    );
    let receipt = wait_receipt(&spool, "ask-2");
    assert_eq!(receipt["outcome"], "denied", "{receipt}");
    assert_eq!(receipt["message_id"], "ask-2", "{receipt}");
    assert!(awaiting(&mut c).is_empty());
    assert!(queued_ids(&mut c).is_empty());
    // Decided once; a second answer and a retried send change nothing.
    assert_eq!(
        respond(&mut c, &spool, "ask-2", "approve")["reason"],
        format!(
            "no approval {} is waiting",
            second["approval_id"].as_str().unwrap()
        )
    );
    let upto = upto_duplicate(&mut c, &spool, inst.msg("ask-2", "second"));
    let denied = of(&upto, "task.denied", "ask-2");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["by"], "approval/respond");
    assert_eq!(of(&upto, "approval.requested", "ask-2").len(), 1);
    assert_eq!(of(&upto, "message.accepted", "ask-2").len(), 1);
    assert!(of(&upto, "turn.started", "ask-2").is_empty());
    assert_eq!(text_of(&ran), "ask-1\n");
    assert!(awaiting(&mut c).is_empty());
    assert!(queued_ids(&mut c).is_empty());
}

#[test]
fn approve_deny_never_runs_anything() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let ran = ws.join("ran.txt");
    let inst = env.serve(&ws, &["--exec", RECORD, "--approve", "deny"]);
    let mut c = inst.client();
    let spool = inst.spool();

    // Positions vary: the first may be refused before the second comes.
    for id in ["deny-1", "deny-2"] {
        let r = send(&mut c, inst.msg(id, "do it"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    for id in ["deny-1", "deny-2"] {
        assert_eq!(wait_receipt(&spool, id)["outcome"], "denied");
    }
    let upto = upto_duplicate(&mut c, &spool, inst.msg("deny-2", "do it"));
    for id in ["deny-1", "deny-2"] {
        let denied = of(&upto, "task.denied", id);
        assert_eq!(denied.len(), 1, "{denied:?}");
        assert_eq!(denied[0]["by"], "--approve deny");
        assert!(of(&upto, "turn.started", id).is_empty());
    }
    assert!(!ran.exists(), "{}", text_of(&ran));
    assert!(queued_ids(&mut c).is_empty());
    assert!(awaiting(&mut c).is_empty());
    assert_eq!(call(&mut c, "ping", json!({}))["state"], "ready");
}

#[test]
fn sysadmin_profile_asks_and_takes_auto_only_with_yes() {
    let env = Env::new();
    let ws = env.workspace("ws");

    let out = env.run_with(
        &[],
        Some(&ws),
        &["serve", "--profile", "sysadmin", "--approve", "auto"],
        None,
    );
    assert_eq!(out.status, 2, "{out:?}");
    assert_eq!(out.stderr, SYSADMIN_AUTO);
    assert_eq!(out.stdout, "");
    assert!(manifests(&env.registry).is_empty());

    // Without --approve: ask.
    let asking = env.workspace("asking");
    let inst = env.serve(
        &asking,
        &[
            "--profile",
            "sysadmin",
            "--exec",
            RECORD,
            "--name",
            "asking",
        ],
    );
    let mut c = inst.client();
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["profile"], "sysadmin", "{st}");
    assert_eq!(st["approve"], "ask", "{st}");
    assert_accepted(&send(&mut c, inst.msg("sys-1", "check disks")), 1);
    wait_until("sys-1 to wait for approval", WAIT, || {
        awaiting(&mut c) == ["sys-1"]
    });
    // The loop answered that after it had come to sys-1 and asked: had it
    // started sys-1's turn instead, or as well, the turn would show here.
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["turn"], Value::Null, "{st}");
    assert!(events(&inst.spool(), "turn.started", "sys-1").is_empty());
    assert!(!asking.join("ran.txt").exists());

    // With --yes, auto is taken at its word.
    let auto = env.workspace("auto");
    let inst2 = env.serve(
        &auto,
        &[
            "--profile",
            "sysadmin",
            "--approve",
            "auto",
            "--yes",
            "--exec",
            RECORD,
            "--name",
            "auto",
        ],
    );
    let mut c2 = inst2.client();
    assert_eq!(
        call(&mut c2, "control/status", json!({}))["approve"],
        "auto"
    );
    assert_accepted(&send(&mut c2, inst2.msg("sys-2", "check disks")), 1);
    wait_until("sys-2 to run unasked", WAIT, || {
        text_of(&auto.join("ran.txt")) == "sys-2\n"
    });
    assert!(awaiting(&mut c2).is_empty());
}

#[test]
fn a_pull_agent_under_ask_claims_only_after_approval() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--approve", "ask"]);
    let mut c = inst.client();

    assert_accepted(&send(&mut c, inst.msg("pull-1", "please")), 1);
    let waiting = json!({"status": "awaiting_approval", "message_id": "pull-1",
                         "reason": "task pull-1 waits for approval"});
    assert_eq!(call(&mut c, "inbox/claim", json!({})), waiting);
    assert_eq!(call(&mut c, "inbox/claim", json!({})), waiting);
    assert_eq!(awaiting(&mut c), ["pull-1"]);
    assert_eq!(call(&mut c, "ping", json!({}))["state"], "ready");

    let spool = inst.spool();
    assert_eq!(
        respond(&mut c, &spool, "pull-1", "approve")["status"],
        "approved"
    );
    let claimed = call(&mut c, "inbox/claim", json!({}));
    assert_eq!(claimed["status"], "claimed", "{claimed}");
    assert_eq!(claimed["task"]["message_id"], "pull-1", "{claimed}");
    assert_eq!(claimed["task"]["body"], "please", "{claimed}");
    assert_eq!(call(&mut c, "ping", json!({}))["state"], "busy");
    let done = call(
        &mut c,
        "inbox/complete",
        json!({"message_id": "pull-1", "outcome": "done"}),
    );
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        call(&mut c, "inbox/claim", json!({})),
        json!({"status": "empty"})
    );
}

// ---------------------------------------------------------------------------
// 2. Approval requests sent to controllers
// ---------------------------------------------------------------------------

/// The id of an `approval/request` for `id`, checking its shape.
#[track_caller]
fn request_id(m: &Value, id: &str) -> String {
    assert_eq!(m["jsonrpc"], "2.0", "{m}");
    assert_eq!(m["method"], "approval/request", "{m}");
    assert_eq!(m["params"]["message_id"], id, "{m}");
    // With the task's context (tests/approve.rs checks its members).
    assert!(m["params"]["bytes"].is_u64(), "{m}");
    let rid = m["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no string id: {m}"));
    assert!(rid.starts_with("approval-"), "{m}");
    rid.to_string()
}

/// A reply to the request `rid`, with the digest of what `req` showed.
fn decide_by_reply(ctl: &mut RawClient, rid: &str, req: &Value, decision: &str) {
    let reply = json!({"jsonrpc": "2.0", "id": rid,
                       "result": {"decision": decision, "digest": req["params"]["digest"]}});
    ctl.send_line(reply.to_string().as_bytes());
}

/// A pull agent that asks: a task sent over a connection that stays open,
/// with nothing else going on, still reaches the controller at once.
#[test]
fn a_pull_agent_asks_its_controller_about_a_task_as_it_arrives() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--approve", "ask"]);
    let mut ctl = inst.client();
    let sub = call(&mut ctl, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["subscribed"], true, "{sub}");
    let mut c = inst.client();
    assert_accepted(&send(&mut c, inst.msg("pull-1", "ask me")), 1);
    let seen = read_until(&mut ctl, "approval/request", |m| {
        m["method"] == "approval/request"
    });
    request_id(seen.last().unwrap(), "pull-1");
    drop((c, ctl));
}

#[test]
fn controllers_get_approval_requests_and_answer_them_by_id() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let ran = ws.join("ran.txt");
    let inst = env.serve(&ws, &["--exec", RECORD, "--approve", "ask"]);
    let mut c = inst.client();
    let spool = inst.spool();

    // A controller that was there first.
    let mut ctl = inst.client();
    let sub = call(&mut ctl, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["subscribed"], true, "{sub}");
    assert_eq!(sub["controller"], true, "{sub}");
    assert!(sub["next_seq"].as_u64().is_some_and(|n| n >= 2), "{sub}");

    assert_accepted(&send(&mut c, inst.msg("ctl-1", "run me")), 1);
    let seen = read_until(&mut ctl, "approval/request", |m| {
        m["method"] == "approval/request"
    });
    let req = seen.last().unwrap().clone();
    let rid = request_id(&req, "ctl-1");
    assert!(
        seen.iter()
            .any(|m| is_event(m, "approval.requested", "ctl-1")),
        "the event comes before the request: {seen:?}"
    );
    // The loop asked, and answers this after it did: had it started
    // ctl-1's turn instead, or as well, the turn would show here.
    assert_eq!(awaiting(&mut c), ["ctl-1"]);
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["turn"], Value::Null, "{st}");
    assert!(!ran.exists());

    // An answer to a request never sent is dropped without an answer. The
    // controller's connection hands the reply to the loop before it reads
    // the ping, so the loop has dealt with the reply before it answers the
    // next call from anyone.
    decide_by_reply(&mut ctl, "approval-999", &req, "approve");
    assert_eq!(ctl.call(8, "ping", json!({}))["result"]["status"], "pong");
    assert_eq!(awaiting(&mut c), ["ctl-1"]);
    let st = call(&mut c, "control/status", json!({}));
    assert_eq!(st["turn"], Value::Null, "{st}");
    assert!(events(&spool, "approval.resolved", "ctl-1").is_empty());
    assert!(!ran.exists());

    decide_by_reply(&mut ctl, &rid, &req, "approve");
    let seen = read_until(&mut ctl, "turn.finished of ctl-1", |m| {
        is_event(m, "turn.finished", "ctl-1")
    });
    let resolved: Vec<&Value> = seen
        .iter()
        .filter(|m| is_event(m, "approval.resolved", "ctl-1"))
        .collect();
    assert_eq!(resolved.len(), 1, "{seen:?}");
    assert_eq!(resolved[0]["params"]["decision"], "approve");
    assert_eq!(resolved[0]["params"]["by"], "approval/request");
    assert_eq!(seen.last().unwrap()["params"]["outcome"], "done");
    assert_eq!(text_of(&ran), "ctl-1\n");
    drop(ctl);

    // A task that starts waiting with no controller attached...
    assert_accepted(&send(&mut c, inst.msg("ctl-2", "and me")), 1);
    wait_until("ctl-2 to wait for approval", WAIT, || {
        awaiting(&mut c) == ["ctl-2"]
    });
    // ...is asked about when one subscribes; a plain subscriber sees the
    // events but is never asked.
    let mut plain = inst.client();
    let sub = call(&mut plain, "events/subscribe", json!({}));
    assert_eq!(sub["controller"], false, "{sub}");
    let mut late = inst.client();
    let sub = call(&mut late, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["controller"], true, "{sub}");
    let first = late.read_json();
    let rid = request_id(&first, "ctl-2");
    decide_by_reply(&mut late, &rid, &first, "deny");
    assert_eq!(wait_receipt(&spool, "ctl-2")["outcome"], "denied");
    let seen = read_until(&mut plain, "task.denied of ctl-2", |m| {
        is_event(m, "task.denied", "ctl-2")
    });
    assert!(
        seen.iter().all(|m| m["method"] == "event"),
        "a plain subscriber got a request: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|m| is_event(m, "approval.resolved", "ctl-2")),
        "{seen:?}"
    );
    let upto = upto_duplicate(&mut c, &spool, inst.msg("ctl-2", "and me"));
    let denied = of(&upto, "task.denied", "ctl-2");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["by"], "approval/request");
    assert!(of(&upto, "turn.started", "ctl-2").is_empty());
    assert_eq!(text_of(&ran), "ctl-1\n");
}

#[test]
fn a_late_controller_does_not_make_others_ask_again() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--exec", RECORD, "--approve", "ask"]);
    let mut c = inst.client();

    let mut one = inst.client();
    call(&mut one, "events/subscribe", json!({"controller": true}));
    assert_accepted(&send(&mut c, inst.msg("dup-1", "once")), 1);
    let seen = read_until(&mut one, "approval/request", |m| {
        m["method"] == "approval/request"
    });
    let rid = request_id(seen.last().unwrap(), "dup-1");

    // A second controller is asked about what waits...
    let mut two = inst.client();
    call(&mut two, "events/subscribe", json!({"controller": true}));
    let req2 = two.read_json();
    let rid2 = request_id(&req2, "dup-1");
    assert_ne!(rid, rid2);
    // ...and the first is not asked a second time: the next thing it
    // hears is the decision the second one made.
    decide_by_reply(&mut two, &rid2, &req2, "approve");
    let seen = read_until(&mut one, "approval.resolved of dup-1", |m| {
        is_event(m, "approval.resolved", "dup-1")
    });
    assert!(
        seen.iter().all(|m| m["method"] == "event"),
        "asked again: {seen:?}"
    );
    wait_until("dup-1 to run", WAIT, || {
        text_of(&ws.join("ran.txt")) == "dup-1\n"
    });
}

#[test]
fn watch_approve_prompts_and_answers_from_stdin() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let ran = ws.join("ran.txt");
    let inst = env.serve(
        &ws,
        &["--exec", RECORD, "--approve", "ask", "--name", "watched"],
    );
    let mut c = inst.client();
    let spool = inst.spool();

    let out_path = env.root.join("watch.out");
    let err_path = env.root.join("watch.err");
    let child = env
        .cmd()
        .args(["watch", "watched", "--approve"])
        .stdin(Stdio::piped())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("spawn baton watch");
    let mut watch = Guard(child);
    let mut stdin = watch.0.stdin.take().unwrap();

    assert_accepted(&send(&mut c, inst.msg("w-1", "watch me")), 1);
    wait_until("watch to prompt for w-1", WAIT, || {
        text_of(&err_path).contains("approve task w-1? [y/n] ")
    });
    assert!(!ran.exists());
    stdin.write_all(b"y\n").unwrap();
    wait_until("w-1 to run", WAIT, || text_of(&ran) == "w-1\n");
    wait_until("watch to say it approved", WAIT, || {
        text_of(&err_path).contains("baton: approve w-1\n")
    });
    // The events that followed the subscription are printed live.
    wait_until("watch to print the end of w-1", WAIT, || {
        text_of(&out_path)
            .lines()
            .any(|l| l.contains("turn.finished") && l.contains("w-1 done, exit 0"))
    });
    let out = text_of(&out_path);
    assert!(
        out.lines().any(|l| l.contains("approval.resolved")
            && l.contains(&format!("w-1 approve by watch (pid {})", watch.0.id()))),
        "{out}"
    );

    // "n" denies.
    assert_accepted(&send(&mut c, inst.msg("w-2", "not me")), 1);
    wait_until("watch to prompt for w-2", WAIT, || {
        text_of(&err_path).contains("approve task w-2? [y/n] ")
    });
    stdin.write_all(b"n\n").unwrap();
    assert_eq!(wait_receipt(&spool, "w-2")["outcome"], "denied");
    wait_until("watch to say it denied", WAIT, || {
        text_of(&err_path).contains("baton: deny w-2\n")
    });
    let upto = upto_duplicate(&mut c, &spool, inst.msg("w-2", "not me"));
    assert_eq!(of(&upto, "task.denied", "w-2").len(), 1, "{upto:?}");
    assert!(of(&upto, "turn.started", "w-2").is_empty());
    assert_eq!(text_of(&ran), "w-1\n");
    assert!(
        watch.0.try_wait().unwrap().is_none(),
        "watch exited: {}",
        text_of(&err_path)
    );
    drop(stdin);
    drop(watch);
}

// ---------------------------------------------------------------------------
// 3. Events
// ---------------------------------------------------------------------------

#[test]
fn events_of_a_task_arrive_in_order_and_replay_matches_the_transcript() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--exec", "printf 'hello\\n'", "--name", "ev"]);
    let mut c = inst.client();
    let spool = inst.spool();

    let mut sub = inst.client();
    let r = call(&mut sub, "events/subscribe", json!({}));
    assert_eq!(r["subscribed"], true, "{r}");
    assert_eq!(r["controller"], false, "{r}");
    let first = r["next_seq"].as_u64().unwrap();
    assert!(first >= 2, "instance.started is recorded first: {r}");

    assert_accepted(&send(&mut c, inst.msg("ev-1", "say hello")), 1);
    let mut live: Vec<Value> = read_until(&mut sub, "turn.finished of ev-1", |m| {
        is_event(m, "turn.finished", "ev-1")
    })
    .into_iter()
    .map(|m| {
        assert_eq!(m["method"], "event", "{m}");
        assert_eq!(m["jsonrpc"], "2.0", "{m}");
        assert!(m.get("id").is_none(), "an event is a notification: {m}");
        m["params"].clone()
    })
    .collect();
    // Then its final outcome, and the state goes back to ready.
    for _ in 0..2 {
        let next = sub.read_json();
        live.push(next["params"].clone());
    }

    let seqs: Vec<u64> = live.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let want: Vec<u64> = (first..first + live.len() as u64).collect();
    assert_eq!(seqs, want, "{live:?}");
    let kinds: Vec<String> = live
        .iter()
        .map(|e| {
            let k = e["kind"].as_str().unwrap();
            match e["state"].as_str() {
                Some(s) => format!("{k}:{s}"),
                None => k.to_string(),
            }
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "message.accepted",
            "turn.started",
            "state.changed:busy",
            "turn.output",
            "turn.finished",
            "task.ended",
            "state.changed:ready",
        ],
        "{live:?}"
    );
    for e in live.iter().filter(|e| e["kind"] != "state.changed") {
        assert_eq!(e["message_id"], "ev-1", "{e}");
        assert!(e["time"].as_f64().is_some_and(|t| t > 1.6e9), "{e}");
    }
    assert_eq!(live[0]["from"], "(cli)");
    assert_eq!(live[0]["pid"], std::process::id());
    assert_eq!(live[0]["queue_position"], 1);
    assert_eq!(live[0]["mode"], "queue");
    assert_eq!(live[3]["stream"], "stdout");
    assert_eq!(live[3]["text"], "hello\n");
    assert_eq!(live[4]["outcome"], "done");
    assert_eq!(live[4]["exit_code"], 0);
    assert_eq!(live[4]["stdout_bytes"], 6);

    // What was sent live is what was recorded.
    let recorded = transcript(&spool);
    let last = first + live.len() as u64 - 1;
    assert_eq!(recorded.last().unwrap()["seq"], last);
    assert_eq!(recorded[(first - 1) as usize..], live[..]);

    // `since` on a fresh connection replays exactly the transcript.
    let mut again = inst.client();
    let r = call(&mut again, "events/subscribe", json!({"since": 1}));
    assert_eq!(r["next_seq"], last + 1, "{r}");
    let replayed: Vec<Value> = (1..=last)
        .map(|_| {
            let m = again.read_json();
            assert_eq!(m["method"], "event", "{m}");
            m["params"].clone()
        })
        .collect();
    assert_eq!(replayed, recorded);
    assert_eq!(replayed[0]["seq"], 1);
    assert_eq!(replayed[0]["kind"], "instance.started");
    assert_eq!(replayed[0]["approve"], "auto");
    assert_eq!(replayed[0]["mode"], "exec");
    // A later `since` replays from there.
    let mut tail = inst.client();
    call(&mut tail, "events/subscribe", json!({"since": first}));
    let part: Vec<Value> = live
        .iter()
        .map(|_| tail.read_json()["params"].clone())
        .collect();
    assert_eq!(part, live);
    // Subscribing twice on one connection is refused.
    let twice = tail.call(9, "events/subscribe", json!({}));
    assert_eq!(twice["error"]["code"], -32600, "{twice}");

    // `baton log --json` prints the same events, one object per line.
    let log = env.run(&["log", "ev", "--json"]);
    assert_eq!(log.status, 0, "{log:?}");
    let printed: Vec<Value> = log
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, recorded);
    let text = env.run(&["log", "ev"]);
    assert_eq!(text.status, 0, "{text:?}");
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains("turn.output") && l.ends_with("ev-1 stdout: hello")),
        "{}",
        text.stdout
    );
}

#[test]
fn subscribers_that_leave_or_stall_do_not_disturb_the_instance() {
    let env = Env::new();
    let ws = env.workspace("ws");
    // Many small writes, then one large block: many events and
    // far more bytes than a socket buffer holds.
    let handler = "i=0; while [ $i -lt 2500 ]; do echo \"line $i\"; i=$((i+1)); done; \
                   head -c 230000 /dev/zero | tr '\\0' b";
    let inst = env.serve_with(
        &ws,
        &[("BATON_IO_TIMEOUT", "5"), ("BATON_FSYNC", "off")],
        &["--exec", handler],
    );
    let mut c = inst.client();
    let spool = inst.spool();

    // One that leaves at once, one that never reads again, one that reads
    // a little and leaves, and one that keeps up.
    let mut gone = inst.client();
    call(&mut gone, "events/subscribe", json!({}));
    drop(gone);
    let mut stalled = inst.client();
    call(&mut stalled, "events/subscribe", json!({}));
    let mut quitter = inst.client();
    call(&mut quitter, "events/subscribe", json!({}));
    let mut reader = inst.client();
    let first = call(&mut reader, "events/subscribe", json!({}))["next_seq"]
        .as_u64()
        .unwrap();
    let keeping_up = thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            let line = reader.read_line().expect("the reader was disconnected");
            let m: Value = serde_json::from_str(&line).unwrap();
            let end = is_event(&m, "turn.finished", "big-3");
            seen.push(m["params"].clone());
            if end {
                return seen;
            }
        }
    });

    // Positions vary: a turn may already have ended.
    for i in 1..=3 {
        let r = send(&mut c, inst.msg(&format!("big-{i}"), "talk a lot"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    for _ in 0..10 {
        quitter.read_json();
    }
    drop(quitter);

    // While it all flows, the instance answers without waiting on the
    // stalled subscriber: an answer that did would take the 5 s I/O
    // timeout of that subscriber's writes.
    let mut probe = inst.client();
    let finished = poll(WAIT * 3, Duration::from_millis(20), || {
        if crate::util::receipt(&spool, "big-3").is_some() {
            return Some(());
        }
        let t = Instant::now();
        assert_eq!(call(&mut probe, "ping", json!({}))["status"], "pong");
        call(&mut probe, "control/status", json!({}));
        let took = t.elapsed();
        assert!(took < Duration::from_secs(4), "answers took {took:?}");
        None
    });
    assert!(
        finished.is_some(),
        "the turns did not finish: {}",
        inst.stderr()
    );
    for i in 1..=3 {
        assert_eq!(wait_receipt(&spool, &format!("big-{i}"))["outcome"], "done");
    }

    // The subscriber that kept up saw every event, in order.
    let seen = keeping_up.join().expect("the keeping-up reader failed");
    let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_contiguous(&seqs, first);
    let outputs = seen.iter().filter(|e| e["kind"] == "turn.output").count();
    assert!(outputs >= 3 * 30, "only {outputs} output events");
    for i in 1..=3 {
        let id = format!("big-{i}");
        let fin: Vec<&Value> = seen
            .iter()
            .filter(|e| e["kind"] == "turn.finished" && e["message_id"] == *id)
            .collect();
        assert_eq!(fin.len(), 1, "{id}");
        assert_eq!(fin[0]["outcome"], "done");
        assert_eq!(
            fin[0]["stdout_bytes"],
            230_000 + 10 * 7 + 90 * 8 + 900 * 9 + 1500 * 10
        );
    }

    // The stalled one was cut off (its writes timed out) rather than
    // waited for: buffered events, then end of stream. Nothing records the
    // cut (it is not an event), and reading now would unstall it: the
    // instance's closing of its end is watched for without reading.
    wait_until("the stalled subscriber to be cut off", WAIT * 3, || {
        stalled.hung_up()
    });
    let mut got = 0usize;
    let mut buffered = 0usize;
    while let Some(line) = stalled.read_line() {
        buffered += line.len() + 1;
        if serde_json::from_str::<Value>(&line).is_ok() {
            got += 1;
        }
    }
    assert!(got < seen.len(), "{got} of {} events", seen.len());
    assert!(buffered < 4 * 1024 * 1024, "{buffered} bytes were buffered");

    // Later tasks still run and every client is still served.
    assert_accepted(&send(&mut c, inst.msg("big-4", "once more")), 1);
    assert_eq!(wait_receipt(&spool, "big-4")["outcome"], "done");
    let mut fresh = inst.client();
    assert_eq!(call(&mut fresh, "ping", json!({}))["status"], "pong");
    assert_eq!(call(&mut c, "ping", json!({}))["status"], "pong");
}

/// A sender that stops reading its answers holds back no event: every task
/// it got accepted is heard by a watcher while the instance still waits to
/// write that sender's answers.
#[test]
fn a_sender_that_stops_reading_holds_back_no_event() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(
        &ws,
        &[("BATON_IO_TIMEOUT", "30"), ("BATON_MAX_QUEUE", "100000")],
        &[],
    );
    let mut watch = inst.client();
    let sub = call(&mut watch, "events/subscribe", json!({}));
    assert_eq!(sub["subscribed"], true, "{sub}");
    let mut stalled = inst.client();
    stalled
        .stream()
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let stalled_socket = stalled.stream().try_clone().unwrap();
    // Sends until the instance stops reading it (its answers fill the
    // socket), and never reads an answer.
    let lines: Vec<u8> = (0..20_000)
        .flat_map(|i| {
            let mut l = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": i,
                "method": "message/send", "params": inst.msg(&format!("st-{i}"), "x")}))
            .unwrap();
            l.push(b'\n');
            l
        })
        .collect();
    let writer = thread::spawn(move || {
        let _ = stalled.try_send_raw(&lines);
        stalled
    });
    // A watcher reads every event as it comes, so that the only writes
    // the instance can be waiting in are the stalled sender's answers.
    watch
        .stream()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let watch_socket = watch.stream().try_clone().unwrap();
    let heard = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let heard = Arc::clone(&heard);
        thread::spawn(move || {
            while let Ok(Some(line)) = watch.try_read_line() {
                let m: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(m["method"], "event", "{m}");
                match m["params"]["kind"].as_str() {
                    Some("message.accepted") => {
                        heard.fetch_add(1, Ordering::SeqCst);
                    }
                    Some("message.rejected") => panic!("a refusal: {m}"),
                    _ => {}
                }
            }
        })
    };
    // The queue has stopped growing once the instance is asleep writing an
    // answer (the stalled sender's: every event has been read) and every
    // task in the spool has been heard of. It is watched from outside: an
    // answer to anyone else would write the pending events too.
    let inbox = inst.spool().join("inbox");
    let accepted = wait_for("the instance to wait on the stalled answers", WAIT, || {
        let q = fs::read_dir(&inbox).unwrap().count();
        (q > 0 && heard.load(Ordering::SeqCst) == q && writing(inst.pid()) > 0).then_some(q)
    });
    assert!(accepted < 20_000, "the sender was never stalled");
    let mut c = inst.client();
    assert_eq!(inst.queued(&mut c), accepted as u64);
    let _ = stalled_socket.shutdown(std::net::Shutdown::Both);
    drop(writer.join());
    let _ = watch_socket.shutdown(std::net::Shutdown::Both);
    watcher.join().expect("the watcher");
    drop(c);
}

#[test]
fn a_subscriber_that_falls_behind_is_cut_off_not_left_hanging() {
    let env = Env::new();
    let ws = env.workspace("ws");
    // Writes never time out here: the subscriber can only be dropped for
    // letting its backlog of events fill up.
    let inst = env.serve_with(
        &ws,
        &[("BATON_IO_TIMEOUT", "60"), ("BATON_FSYNC", "off")],
        &[],
    );
    let mut c = inst.client();
    let spool = inst.spool();
    let mut slow = inst.client();
    let first = call(&mut slow, "events/subscribe", json!({}))["next_seq"]
        .as_u64()
        .unwrap();

    // Far more events than the backlog (4096) plus a socket buffer hold:
    // sends refused for their empty body, one event each, in batches (a
    // turn's output would make as many events as it takes reads, which
    // depends on the machine's load).
    let mut n = 0;
    let last = loop {
        assert!(n < 20_000, "{n} refusals made too few events");
        let batch: Vec<(&str, Value)> = (0..200)
            .map(|_| {
                n += 1;
                ("message/send", inst.msg(&format!("many-{n}"), ""))
            })
            .collect();
        for r in c.try_pipeline(&batch).unwrap() {
            assert_eq!(r["status"], "invalid", "{r}");
        }
        let last = transcript(&spool).last().unwrap()["seq"].as_u64().unwrap();
        if last - first > 8_000 {
            break last;
        }
    };

    // It gets what was already on its way, in order, then the end of the
    // stream: not a connection that stays open and silent.
    let mut seqs = Vec::new();
    while let Some(line) = slow.read_line() {
        let m: Value = serde_json::from_str(&line).unwrap();
        seqs.push(m["params"]["seq"].as_u64().unwrap());
    }
    assert!(!seqs.is_empty());
    assert_contiguous(&seqs, first);
    assert!(
        (seqs.len() as u64) < last - first,
        "it got all {} events",
        seqs.len()
    );
    assert_eq!(call(&mut c, "ping", json!({}))["status"], "pong");
}

// ---------------------------------------------------------------------------
// 4. --ephemeral
// ---------------------------------------------------------------------------

/// Returns once a one-second `--ephemeral` grace that began before the
/// call has surely ended: a second ephemeral instance, whose last client
/// left after that, has exited at the end of its own. Clients coming and
/// going are not events, so this witness is what marks the moment.
fn an_ephemeral_grace_passes(env: &Env) {
    let ws = env.workspace("witness");
    let mut witness = env.serve(&ws, &["--ephemeral"]);
    drop(witness.client());
    assert_eq!(witness.wait_exit(WAIT), Some(0), "{}", witness.stderr());
}

#[test]
fn ephemeral_waits_for_a_first_client_and_exits_a_second_after_the_last() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &["--ephemeral"]);
    // An instance that waits for its first client records nothing while it
    // waits: it would have given up by the end of a grace begun later.
    an_ephemeral_grace_passes(&env);
    assert!(inst.is_running(), "exited with no client ever seen");

    let mut c = inst.client();
    assert_eq!(call(&mut c, "ping", json!({}))["status"], "pong");
    drop(c);
    let left = Instant::now();
    let code = inst.wait_exit(Duration::from_secs(5));
    let took = left.elapsed();
    assert_eq!(code, Some(0), "{}", inst.stderr());
    assert!(took >= Duration::from_millis(800), "exited after {took:?}");
    assert!(!inst.manifest_path.exists(), "the manifest is left behind");
    assert!(!inst.socket.exists(), "the socket is left behind");
}

#[test]
fn ephemeral_reconnect_inside_the_grace_period_cancels_the_exit() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &["--ephemeral"]);

    let mut c = inst.client();
    assert_eq!(call(&mut c, "ping", json!({}))["status"], "pong");
    let with_client = fd_count(inst.pid());
    drop(c);
    // Once the instance has closed its end (the client has left, the
    // grace has begun), a client comes back at once, inside the grace;
    // then the grace is let pass.
    wait_until("the client's connection closed", WAIT, || {
        fd_count(inst.pid()) < with_client
    });
    let mut c = inst.client();
    an_ephemeral_grace_passes(&env);
    assert!(inst.is_running(), "exited with a client connected");
    assert_eq!(call(&mut c, "ping", json!({}))["status"], "pong");
    assert!(inst.manifest_path.exists());

    drop(c);
    assert_eq!(
        inst.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        inst.stderr()
    );
    assert!(!inst.manifest_path.exists());
}

// ---------------------------------------------------------------------------
// 5. Steer
// ---------------------------------------------------------------------------

#[test]
fn steer_goes_ahead_and_joins_the_open_turn_of_its_sender() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut c = inst.client();
    let a = me_as_instance(&inst.registry, "alpha", "/srv/alpha");
    let b = me_as_instance(&inst.registry, "bravo", "/srv/bravo");

    // Ahead of queued tasks, in order among themselves.
    assert_accepted(&send(&mut c, inst.msg("q-1", "queued one")), 1);
    assert_accepted(&send(&mut c, inst.msg("q-2", "queued two")), 2);
    assert_accepted(&send(&mut c, steer(inst.msg("s-1", "steer one"))), 3);
    assert_accepted(&send(&mut c, steer(inst.msg("s-2", "steer two"))), 4);
    assert_eq!(queued_ids(&mut c), ["s-1", "s-2", "q-1", "q-2"]);
    for id in ["s-1", "s-2", "q-1", "q-2"] {
        let r = call(&mut c, "inbox/claim", json!({}));
        assert_eq!(r["task"]["message_id"], id, "{r}");
        let done = call(&mut c, "inbox/complete", json!({"message_id": id}));
        assert_eq!(done["status"], "completed", "{done}");
    }

    // An open task from A.
    assert_accepted(&send(&mut c, inst.msg_from("t-1", "main task", &a)), 1);
    let t1 = call(&mut c, "inbox/claim", json!({}));
    assert_eq!(t1["status"], "claimed", "{t1}");
    assert_eq!(t1["task"]["message_id"], "t-1");
    assert_eq!(t1["task"]["follow_up_of"], Value::Null);
    assert_eq!(t1["task"]["sender"]["instance_id"], a.as_str());
    let token = t1["task"]["turn"].as_str().unwrap().to_string();
    let busy = json!({"status": "busy", "message_id": "t-1",
                      "reason": "task t-1 is still open: complete it first"});

    // A queue task from A waits.
    assert_accepted(&send(&mut c, inst.msg_from("q-a", "later", &a)), 2);
    assert_eq!(call(&mut c, "inbox/claim", json!({})), busy);

    // A steer task from A joins the open turn.
    assert_accepted(
        &send(&mut c, steer(inst.msg_from("s-a", "also this", &a))),
        3,
    );
    let s = call(&mut c, "inbox/claim", json!({}));
    assert_eq!(s["status"], "claimed", "{s}");
    assert_eq!(s["task"]["message_id"], "s-a", "{s}");
    assert_eq!(s["task"]["mode"], "steer", "{s}");
    assert_eq!(s["task"]["follow_up_of"], "t-1", "{s}");
    assert_eq!(s["task"]["turn"], token.as_str(), "{s}");

    // Steer from another verified sender, or from a plain command line,
    // waits.
    assert_accepted(&send(&mut c, steer(inst.msg_from("s-b", "mine", &b))), 4);
    assert_eq!(call(&mut c, "inbox/claim", json!({})), busy);
    assert_accepted(&send(&mut c, steer(inst.msg("s-cli", "me too"))), 5);
    assert_eq!(call(&mut c, "inbox/claim", json!({})), busy);
    assert_eq!(queued_ids(&mut c), ["s-b", "s-cli", "q-a"]);

    // Once the turn is complete, the rest come in order with turns of
    // their own.
    for id in ["s-a", "t-1"] {
        let done = call(&mut c, "inbox/complete", json!({"message_id": id}));
        assert_eq!(done["status"], "completed", "{done}");
    }
    let mut tokens = vec![token];
    for id in ["s-b", "s-cli", "q-a"] {
        let r = call(&mut c, "inbox/claim", json!({}));
        assert_eq!(r["status"], "claimed", "{r}");
        assert_eq!(r["task"]["message_id"], id, "{r}");
        assert_eq!(r["task"]["follow_up_of"], Value::Null, "{r}");
        let t = r["task"]["turn"].as_str().unwrap().to_string();
        assert!(!tokens.contains(&t), "turn token reused: {r}");
        tokens.push(t);
        let done = call(&mut c, "inbox/complete", json!({"message_id": id}));
        assert_eq!(done["status"], "completed", "{done}");
    }
    assert_eq!(
        call(&mut c, "inbox/claim", json!({})),
        json!({"status": "empty"})
    );
    let spool = inst.spool();
    let claimed = events(&spool, "task.claimed", "s-a");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0]["follow_up_of"], "t-1");
}

// ---------------------------------------------------------------------------
// 6. Transcript rotation
// ---------------------------------------------------------------------------

/// Appends notice lines to `path` until it is exactly `size` bytes,
/// numbering them from `seq`; returns the next sequence number.
fn fill_to(path: &Path, size: u64, mut seq: u64) -> u64 {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    let mut len = f.metadata().unwrap().len();
    while len < size {
        let head = format!("{{\"seq\":{seq},\"time\":1700000000.0,\"kind\":\"notice\",\"text\":\"");
        let tail = "\"}\n";
        let room = (size - len) as usize;
        let pad = if room >= 2000 + head.len() + tail.len() {
            1000
        } else {
            room - head.len() - tail.len()
        };
        let line = format!("{head}{}{tail}", "f".repeat(pad));
        f.write_all(line.as_bytes()).unwrap();
        len += line.len() as u64;
        seq += 1;
    }
    assert_eq!(len, size);
    seq
}

#[track_caller]
fn log_json(env: &Env, name: &str) -> Vec<Value> {
    let log = env.run(&["log", name, "--json"]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    log.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_transcript_rotates_within_its_bound_and_log_reads_both_files() {
    let env = Env::new();
    let ws = env.workspace("ws");
    // Past the per-stream event limit on both streams: about 530 KB of
    // events per turn.
    let handler =
        "head -c 270000 /dev/zero | tr '\\0' o; head -c 270000 /dev/zero | tr '\\0' e >&2";
    let vars = [("BATON_FSYNC", "off")];
    let mut inst = env.serve_with(&ws, &vars, &["--name", "rot", "--exec", handler]);
    let mut c = inst.client();
    let spool = inst.spool();
    let (cur, old) = (
        spool.join("transcript.jsonl"),
        spool.join("transcript.1.jsonl"),
    );

    for i in 1..=9 {
        let r = send(&mut c, inst.msg(&format!("r-{i}"), "talk"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    assert_eq!(wait_receipt(&spool, "r-9")["outcome"], "done");
    wait_until("the last turn to be recorded", WAIT, || {
        !events(&spool, "turn.finished", "r-9").is_empty()
    });
    assert!(old.exists(), "no rotation after 9 turns");
    for f in [&cur, &old] {
        let len = fs::metadata(f).unwrap().len();
        assert!(len <= ROTATE_BYTES, "{} is {len} bytes", f.display());
    }
    let first_gen = lines_of(&old);
    assert_eq!(first_gen[0]["seq"], 1);
    let logged = log_json(&env, "rot");
    let recorded = transcript(&spool);
    assert_eq!(logged.len(), recorded.len());
    assert!(logged == recorded, "baton log differs from the transcript");
    let seqs: Vec<u64> = logged.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_contiguous(&seqs, 1);
    let finished = logged
        .iter()
        .filter(|e| e["kind"] == "turn.finished" && e["outcome"] == "done")
        .count();
    assert_eq!(finished, 9);

    // A second rotation drops the oldest generation: fill the current file
    // to just under the bound, and the restart's first event rotates it.
    assert_eq!(inst.term(), 0);
    // The stop itself was recorded after the log ran.
    let stopped = lines_of(&cur).pop().unwrap();
    assert_eq!(stopped["kind"], "notice", "{stopped}");
    assert_eq!(stopped["seq"], seqs.last().unwrap() + 1);
    let next = seqs.last().unwrap() + 2;
    let after_fill = fill_to(&cur, ROTATE_BYTES - 64, next);
    let inst2 = env.serve_with(&ws, &vars, &["--name", "rot", "--exec", handler]);
    assert_eq!(inst2.spool(), spool);
    let kept = lines_of(&old);
    assert_eq!(
        kept[0]["seq"],
        first_gen.last().unwrap()["seq"].as_u64().unwrap() + 1
    );
    assert_eq!(kept.last().unwrap()["seq"], after_fill - 1);
    let now = lines_of(&cur);
    assert_eq!(now[0]["seq"], after_fill);
    assert_eq!(now[0]["kind"], "instance.started");
    for f in [&cur, &old] {
        let len = fs::metadata(f).unwrap().len();
        assert!(len <= ROTATE_BYTES, "{} is {len} bytes", f.display());
    }
    let logged = log_json(&env, "rot");
    assert!(
        logged == transcript(&spool),
        "baton log differs from the transcript"
    );
    let seqs: Vec<u64> = logged.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let from = kept[0]["seq"].as_u64().unwrap();
    assert_contiguous(&seqs, from);
    assert_eq!(logged.last().unwrap()["kind"], "instance.started");
}

/// A pause is exact under concurrent senders: once `control/pause` has
/// answered, the queue holds exactly the tasks answered `accepted`, no
/// matter when their answers arrive, and every later offer is `paused`.
/// (Acceptances write and sync outside the index lock; the pause waits
/// for those that passed the check before it.)
#[test]
fn pause_is_exact_while_senders_race_it() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(
        &ws,
        &[("BATON_FSYNC", "on"), ("BATON_MAX_QUEUE", "100000")],
        &["--name", "px"],
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (queued_at_pause, answers) = thread::scope(|s| {
        let senders: Vec<_> = (0..4)
            .map(|k| {
                let (inst, stop) = (&inst, &stop);
                s.spawn(move || {
                    let mut c = inst.client();
                    let mut out = Vec::new();
                    for i in 0..2000u64 {
                        let r = c.call(i + 10, "message/send", inst.msg(&format!("s{k}-{i}"), "x"));
                        let status = r["result"]["status"].as_str().unwrap_or("?").to_string();
                        let done = status == "paused";
                        out.push(status);
                        if done || stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                    }
                    out
                })
            })
            .collect();
        let mut control = inst.client();
        wait_until("some acceptances", Duration::from_secs(10), || {
            let l = control.call(1, "inbox/list", json!({}));
            l["result"]["queued"]
                .as_array()
                .is_some_and(|q| q.len() >= 20)
        });
        let p = control.call(2, "control/pause", json!({}));
        assert_eq!(p["result"]["state"], "paused", "{p}");
        let l = control.call(3, "inbox/list", json!({}));
        let queued = l["result"]["queued"].as_array().map_or(0, Vec::len);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let answers: Vec<Vec<String>> = senders.into_iter().map(|t| t.join().unwrap()).collect();
        (queued, answers)
    });
    let accepted = answers
        .iter()
        .flatten()
        .filter(|s| *s == "accepted")
        .count();
    assert_eq!(
        queued_at_pause, accepted,
        "queued when the pause answered vs answered accepted: {answers:?}"
    );
    for a in &answers {
        // Each sender: accepted answers, then (if it reached the pause) one `paused`.
        let (last, rest) = a.split_last().unwrap();
        assert!(rest.iter().all(|s| s == "accepted"), "{a:?}");
        assert!(matches!(last.as_str(), "accepted" | "paused"), "{a:?}");
    }
    let mut c = inst.client();
    let r = c.call(9, "message/send", inst.msg("after", "x"));
    assert_eq!(r["result"]["status"], "paused", "{r}");
}
