//! What became of a task, as its sender learns it (issue 19): `task/status`
//! on the receiver's socket answers from the spool (a task's place, or its
//! receipt, which also keeps the reply text), across restarts, and every
//! final outcome is recorded once as a `task.ended` event.

use crate::util::{self, Env, RawClient, Served, event_is as is, transcript};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::time::Duration;

/// Bound for anything that should take well under a second.
const WAIT: Duration = Duration::from_secs(15);

/// A handler that fails on FAIL, waits (bounded) for `gate` on HOLD, and
/// otherwise prints a reply naming its task.
fn handler(env: &Env, gate: &Path) -> String {
    let script = format!(
        "body=$(cat)\n\
         case \"$body\" in\n\
         *FAIL*) exit 1 ;;\n\
         *HOLD*) i=0; while [ ! -e '{}' ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done ;;\n\
         esac\n\
         printf 'reply to %s\\n' \"$BATON_MESSAGE_ID\"\n",
        gate.display()
    );
    let path = env.root.join("handler.sh");
    fs::write(&path, script).unwrap();
    format!("sh '{}'", path.display())
}

/// `task/status` for `id`: the result object.
fn status(c: &mut RawClient, id: &str) -> Value {
    let r = c.call(7, "task/status", json!({"message_id": id}));
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("task/status {id}: no result: {r}"))
}

fn send(inst: &Served, c: &mut RawClient, id: &str, body: &str) {
    let r = inst.send(c, id, body);
    assert_eq!(r["status"], "accepted", "{r}");
}

/// Waits for the `task.ended` of `id` and returns it.
#[track_caller]
fn wait_ended(spool: &Path, id: &str) -> Value {
    util::wait_event(spool, &format!("task.ended for {id}"), WAIT, |e| {
        is(e, "task.ended", id)
    })
}

/// How many `task.ended` events the transcript holds for `id`.
fn ended_count(spool: &Path, id: &str) -> usize {
    transcript(spool)
        .iter()
        .filter(|e| is(e, "task.ended", id))
        .count()
}

#[test]
fn task_status_follows_exec_tasks_from_queued_to_done_with_the_reply_and_failed() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let gate = env.root.join("gate");
    let inst = env.serve(&ws, &["--exec", &handler(&env, &gate), "--reply"]);
    let spool = inst.spool();
    let mut c = inst.client();

    send(&inst, &mut c, "held", "HOLD");
    util::wait_event(&spool, "turn.started for held", WAIT, |e| {
        is(e, "turn.started", "held")
    });
    send(&inst, &mut c, "second", "plain");
    send(&inst, &mut c, "broken", "FAIL");
    // Each says when it was accepted.
    let accepted = |s: &Value| {
        assert!(
            s["accepted_at"].as_u64().is_some_and(|t| t > 1_000_000_000),
            "{s}"
        );
        s["accepted_at"].clone()
    };
    let s = status(&mut c, "held");
    assert_eq!(
        s,
        json!({"message_id": "held", "status": "running", "accepted_at": accepted(&s)})
    );
    let s = status(&mut c, "second");
    assert_eq!(
        s,
        json!({"message_id": "second", "status": "queued", "queue_position": 1,
               "accepted_at": accepted(&s)})
    );
    let s = status(&mut c, "broken");
    assert_eq!(
        s,
        json!({"message_id": "broken", "status": "queued", "queue_position": 2,
               "accepted_at": accepted(&s)})
    );

    fs::write(&gate, b"").unwrap();
    let ended = wait_ended(&spool, "broken");
    assert_eq!(
        ended,
        json!({"seq": ended["seq"], "time": ended["time"], "kind": "task.ended",
               "message_id": "broken", "outcome": "failed", "reply": null,
               "exit_status": 1, "stderr_tail": ""})
    );
    let held = wait_ended(&spool, "held");
    // A plain command line cannot take the reply: it is kept all the same.
    let reply = json!({"message_id": null, "body": "reply to held\n"});
    assert_eq!(held["outcome"], "done");
    assert_eq!(held["reply"], reply);

    let s = status(&mut c, "held");
    assert_eq!(s["status"], "done", "{s}");
    assert_eq!(s["reply"], reply, "{s}");
    assert!(s["finished_at"].as_f64().is_some_and(|t| t > 1e9), "{s}");
    // The receipt keeps when it was accepted.
    accepted(&s);
    let s = status(&mut c, "broken");
    assert_eq!(s["status"], "failed", "{s}");
    assert_eq!(s["reply"], Value::Null, "{s}");

    // The receipt keeps it, so it outlives the instance.
    let receipt = crate::util::receipt(&spool, "held").expect("held's receipt");
    assert_eq!(receipt["reply"], reply, "{receipt}");
    for id in ["held", "second", "broken"] {
        assert_eq!(
            ended_count(&spool, id),
            1,
            "{id}: {:#?}",
            transcript(&spool)
        );
    }
}

#[test]
fn task_status_is_unknown_for_an_id_never_accepted_and_refuses_bad_params() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut c = inst.client();
    assert_eq!(
        status(&mut c, "never-sent"),
        json!({"message_id": "never-sent", "status": "unknown"})
    );
    for params in [json!({}), json!({"message_id": 5})] {
        let r = c.call(8, "task/status", params);
        assert_eq!(r["error"]["code"], -32602, "{r}");
    }
}

/// A verified asker (`sender_instance_id`, checked against the
/// connection's pid as a sender's claim is) hears about its own tasks
/// only, queued or finished; an asker that names no instance hears about
/// any task; a claim that does not hold is -32602.
#[test]
fn task_status_answers_a_verified_asker_about_its_own_tasks_only() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let me = util::me_as_instance(&inst.registry, "asker", "/");
    let other = util::fake_manifest(&inst.registry, 1, "init", "/");
    let mut c = inst.client();
    let r = c.call(3, "message/send", inst.msg_from("mine", "x", &me));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    send(&inst, &mut c, "plain", "y");
    let ask = |c: &mut RawClient, id: &str, asker: &str| {
        let r = c.call(
            9,
            "task/status",
            json!({"message_id": id, "sender_instance_id": asker}),
        );
        r.get("result").cloned().unwrap_or_else(|| panic!("{r}"))
    };
    let check = |c: &mut RawClient, outcome: &str| {
        assert_eq!(ask(c, "mine", &me)["status"], outcome);
        let r = ask(c, "plain", &me);
        assert_eq!(r["status"], "unknown", "{r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("asks only about its own tasks"),
            "{r}"
        );
        assert_eq!(status(c, "plain")["status"], outcome);
        assert_eq!(status(c, "mine")["status"], outcome);
    };
    check(&mut c, "queued");
    let r = c.call(
        10,
        "task/status",
        json!({"message_id": "mine", "sender_instance_id": other}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("pid"),
        "{r}"
    );
    for id in ["mine", "plain"] {
        let r = c.try_result("inbox/claim", json!({})).unwrap();
        assert_eq!(r["task"]["message_id"], id, "{r}");
        let r = c
            .try_result("inbox/complete", json!({"message_id": id}))
            .unwrap();
        assert_eq!(r["status"], "completed", "{r}");
    }
    check(&mut c, "done");
}

#[test]
fn task_status_tells_awaiting_approval_and_denied() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let gate = env.root.join("gate");
    let inst = env.serve(&ws, &["--exec", &handler(&env, &gate), "--approve", "ask"]);
    let spool = inst.spool();
    let mut c = inst.client();
    send(&inst, &mut c, "ask-me", "plain");
    util::wait_event(&spool, "approval.requested", WAIT, |e| {
        is(e, "approval.requested", "ask-me")
    });
    assert_eq!(status(&mut c, "ask-me")["status"], "awaiting_approval");
    let mut answer = util::approval_of(&spool, "ask-me");
    answer["decision"] = json!("deny");
    let r = c.call(9, "approval/respond", answer);
    assert_eq!(r["result"]["status"], "denied", "{r}");
    let ended = wait_ended(&spool, "ask-me");
    assert_eq!(ended["outcome"], "denied");
    assert_eq!(ended["reply"], Value::Null);
    let s = status(&mut c, "ask-me");
    assert_eq!(s["status"], "denied", "{s}");
    assert_eq!(ended_count(&spool, "ask-me"), 1);
}

#[test]
fn a_pull_agent_s_reply_cancel_and_ttl_expiry_are_final_outcomes() {
    let env = Env::new();
    let ws = env.workspace("ws");
    // No --ttl while p1 and p2 are claimed: on a loaded machine a claim
    // may come later than any short TTL.
    let mut inst = env.serve(&ws, &[]);
    let spool = inst.spool();
    let mut c = inst.client();

    send(&inst, &mut c, "p1", "answer me");
    let r = c.call(10, "inbox/claim", json!({}));
    assert_eq!(r["result"]["status"], "claimed", "{r}");
    assert_eq!(status(&mut c, "p1")["status"], "running");
    let r = c.call(
        11,
        "inbox/complete",
        json!({"message_id": "p1", "reply": "the answer"}),
    );
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let reply = json!({"message_id": null, "body": "the answer"});
    assert_eq!(wait_ended(&spool, "p1")["reply"], reply);
    let s = status(&mut c, "p1");
    assert_eq!(
        (s["status"].clone(), s["reply"].clone()),
        (json!("done"), reply)
    );

    send(&inst, &mut c, "p2", "never mind");
    let r = c.call(12, "inbox/claim", json!({}));
    assert_eq!(r["result"]["status"], "claimed", "{r}");
    let r = c.call(13, "turn/cancel", json!({"message_id": "p2"}));
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    assert_eq!(wait_ended(&spool, "p2")["outcome"], "cancelled");
    assert_eq!(status(&mut c, "p2")["status"], "cancelled");

    // Nobody claims p3: --ttl sets it aside.
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let inst = env.serve(&ws, &["--ttl", "1"]);
    assert_eq!(inst.spool(), spool);
    let mut c = inst.client();
    send(&inst, &mut c, "p3", "too late");
    assert_eq!(wait_ended(&spool, "p3")["outcome"], "expired");
    assert_eq!(status(&mut c, "p3")["status"], "expired");
    for id in ["p1", "p2", "p3"] {
        assert_eq!(ended_count(&spool, id), 1, "{id}");
    }
}

#[test]
fn after_kill9_a_running_task_is_interrupted_then_discarded_and_known_after_restart() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let gate = env.root.join("gate-never");
    let cmd = handler(&env, &gate);
    let args = ["--name", "crashy", "--exec", cmd.as_str()];
    let mut first = env.serve(&ws, &args);
    let spool = first.spool();
    let mut c = first.client();
    send(&first, &mut c, "mid", "HOLD");
    util::wait_event(&spool, "turn.started for mid", WAIT, |e| {
        is(e, "turn.started", "mid")
    });
    // A bad task file waiting in the inbox is set aside at the next open.
    drop(c);
    first.kill9();
    fs::write(spool.join("inbox/0000000000000099-junk.json"), b"{not json").unwrap();

    let mut second = env.serve(&ws, &args);
    let mut c = second.client();
    let s = status(&mut c, "mid");
    assert_eq!(
        s,
        json!({"message_id": "mid", "status": "interrupted", "accepted_at": s["accepted_at"]})
    );
    assert!(s["accepted_at"].is_u64(), "{s}");
    let junk = status(&mut c, "junk");
    assert_eq!(junk["status"], "rejected", "{junk}");
    assert!(junk["reason"].is_string(), "{junk}");
    assert_eq!(wait_ended(&spool, "mid")["outcome"], "interrupted");
    assert_eq!(wait_ended(&spool, "junk")["outcome"], "rejected");

    let r = c.call(14, "inbox/discard", json!({"message_id": "mid"}));
    assert_eq!(r["result"]["status"], "discarded", "{r}");
    assert_eq!(status(&mut c, "mid")["status"], "discarded");
    drop(c);
    second.term();

    // From the receipt, after a restart; nothing ended twice.
    let third = env.serve(&ws, &args);
    let mut c = third.client();
    let s = status(&mut c, "mid");
    assert_eq!(s["status"], "discarded", "{s}");
    assert_eq!(s["reply"], Value::Null, "{s}");
    let outcomes: Vec<Value> = transcript(&spool)
        .into_iter()
        .filter(|e| is(e, "task.ended", "mid"))
        .map(|e| e["outcome"].clone())
        .collect();
    assert_eq!(outcomes, [json!("interrupted"), json!("discarded")]);
    assert_eq!(ended_count(&spool, "junk"), 1);
}
