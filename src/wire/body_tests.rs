//! Every body writes the bytes the instance wrote before it was typed:
//! a sorted JSON object, but for an acceptance's own order.

use super::*;
use crate::wire::Sender;
use crate::wire::answer::SendResult;
use serde_json::json;

fn same(body: Body<'_>, want: Value) {
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        serde_json::to_string(&want).unwrap()
    );
}

#[test]
fn each_kind_writes_its_members_sorted_with_nulls_where_they_were() {
    let kind_of = |b: &Body<'_>| b.kind();
    same(
        Body::InstanceStarted {
            approve: Approve::Ask,
            instance_id: "i",
            mode: Mode::Exec,
            name: "n",
            pid: 7,
            state: Said::spelled("ready"),
            tmux_pane: None,
            workspace: "/w",
        },
        json!({"instance_id": "i", "name": "n", "pid": 7, "workspace": "/w",
               "mode": "exec", "approve": "ask", "state": "ready"}),
    );
    same(
        Body::MessageRejected {
            from: "(cli)",
            message_id: "m",
            pid: None,
            reason: "r",
            status: Status::Duplicate,
        },
        json!({"message_id": "m", "status": "duplicate", "reason": "r", "from": "(cli)", "pid": null}),
    );
    same(
        Body::TaskClaimed {
            follow_up_of: None,
            from: "a",
            message_id: "m",
        },
        json!({"message_id": "m", "from": "a", "follow_up_of": null}),
    );
    same(
        Body::TurnOutput {
            dropped: Some(3),
            message_id: "m",
            stream: Stream::Stderr,
            tail: true,
            text: "t",
        },
        json!({"message_id": "m", "stream": "stderr", "text": "t", "tail": true, "dropped": 3}),
    );
    let output = Body::TurnOutput {
        dropped: None,
        message_id: "m",
        stream: Stream::Stdout,
        tail: false,
        text: "t",
    };
    assert_eq!(kind_of(&output), EventKind::TurnOutput);
    same(
        output,
        json!({"message_id": "m", "stream": "stdout", "text": "t"}),
    );
    same(
        Body::turn_finished("m", Outcome::Interrupted),
        json!({"message_id": "m", "outcome": "interrupted"}),
    );
    same(
        Body::TurnFinished(Finished {
            dropped_bytes: Some(0),
            duration_ms: Some(12),
            exit_code: Some(None),
            signal: Some(Some(9)),
            stderr_bytes: Some(1),
            stdout_bytes: Some(2),
            ..Finished::new("m", Outcome::Failed)
        }),
        json!({"message_id": "m", "outcome": "failed", "exit_code": null, "signal": 9,
               "duration_ms": 12, "stdout_bytes": 2, "stderr_bytes": 1, "dropped_bytes": 0}),
    );
    same(
        Body::ApprovalResolved {
            approval_id: "ask-1",
            by: "view",
            by_pid: Some(4),
            decision: Said::spelled("deny"),
            message_id: "m",
        },
        json!({"approval_id": "ask-1", "decision": "deny", "by": "view", "by_pid": 4,
               "message_id": "m"}),
    );
}

#[test]
fn an_ended_task_carries_its_handler_members_in_order() {
    let reply = ReplyRecord {
        message_id: None,
        body: "ok".into(),
    };
    let exit = HandlerExit {
        exit_status: Some(2),
        signal: None,
        stderr_tail: Some("boom".into()),
        host: Some("codex".into()),
    };
    let ended = Ended::new("m", Outcome::Failed, Some(&reply), Some(&exit));
    let mut want = json!({"message_id": "m", "outcome": "failed", "reply": reply});
    let members = serde_json::to_value(&exit).unwrap();
    want.as_object_mut()
        .unwrap()
        .extend(members.as_object().cloned().unwrap());
    same(Body::TaskEnded(ended), want);
    let mut stored = Ended::new("m", Outcome::Cancelled, None, None);
    stored.stored = true;
    same(
        Body::TaskEnded(stored),
        json!({"message_id": "m", "outcome": "cancelled", "reply": null, "stored": true}),
    );
}

#[test]
fn a_notice_has_only_what_it_is_about() {
    same(Body::notice("hi"), json!({"text": "hi"}));
    same(
        Body::Notice(Notice {
            codex: true,
            codex_thread: Some("th"),
            codex_turn: Some("tu"),
            message_id: Some("m"),
            reason: Some("r"),
            shortage: Some("disk"),
            stored: true,
            text: "x",
            tmux_pane: Some("%1"),
        }),
        json!({"codex": true, "codex_thread": "th", "codex_turn": "tu", "message_id": "m",
               "reason": "r", "shortage": "disk", "stored": true, "text": "x", "tmux_pane": "%1"}),
    );
}

#[test]
fn a_relayed_result_takes_reply_of_in_its_place() {
    let result = json!({"status": "accepted", "message_id": "a-1", "queue_position": 0,
                        "state": "ready", "target": {"name": "b"}});
    let typed: SendResult = serde_json::from_value(result.clone()).unwrap();
    let mut want = result.clone();
    want["reply_of"] = json!("t-1");
    same(
        Body::RelaySent(Relayed {
            result: &typed,
            reply_of: Some("t-1"),
        }),
        want,
    );
    let last = json!({"message_id": "a", "candidates": [], "status": "no_target"});
    let last_typed: SendResult = serde_json::from_value(last.clone()).unwrap();
    let mut want = last.clone();
    want["reply_of"] = json!("z");
    same(
        Body::RelaySent(Relayed {
            result: &last_typed,
            reply_of: Some("z"),
        }),
        want,
    );
    same(
        Body::RelaySent(Relayed {
            result: &typed,
            reply_of: None,
        }),
        result.clone(),
    );
}

#[test]
fn an_acceptance_keeps_its_own_order() {
    let task = Task {
        message_id: "m".into(),
        body: "hi".into(),
        sender: Sender {
            instance_id: Some("s".into()),
            remote: Some("r".into()),
            ..Sender::default()
        },
        hop: 0,
        in_reply_to: None,
        mode: TaskMode::Queue,
        accepted_at: 1,
        peer_pid: None,
        wire: "jsonrpc".into(),
        digest: String::new(),
        seq: 1,
    };
    let raw = serde_json::value::to_raw_value("hi").unwrap();
    let mut accepted = Accepted::new(&task, Some(&raw), "s", Some(3), 2);
    accepted.stored = true;
    assert_eq!(
        serde_json::to_string(&Body::MessageAccepted(accepted)).unwrap(),
        r#"{"message_id":"m","from":"s","pid":3,"queue_position":2,"mode":"queue","body":"hi","sender_id":"s","workspace":null,"remote":"r","stored":true}"#
    );
    same(
        Body::LocalInput(Local::Noted {
            body: "b",
            from: "(local)",
            noted: true,
        }),
        json!({"from": "(local)", "body": "b", "noted": true}),
    );
}
