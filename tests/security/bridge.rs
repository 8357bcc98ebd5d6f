//! A bridge key is a sender to its target and nothing else. Through a key
//! whose forced command was `baton bridge carol`, `relay/send
//! {"target":"dave"}` was once accepted by dave as a verified send from
//! carol, `inbox/claim` took carol's queued task, `control/pause` paused
//! carol, and `baton bridge gate` answered gate's approval request.
//! `baton bridge` is run here as sshd runs a forced command, with the
//! `SSH_CONNECTION` sshd sets (tests/ssh/sshd.rs does it through a real
//! sshd).

use crate::util::{Env, transcript, wait_event};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// `baton bridge NAME` with `lines` on its stdin; its answers by id.
fn bridge(env: &Env, name: &str, lines: &[Value]) -> Vec<Value> {
    let mut child = env
        .cmd()
        .args(["bridge", name])
        .env("SSH_CONNECTION", "192.0.2.7 52100 127.0.0.1 22")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        stdin.write_all(format!("{l}\n").as_bytes()).unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut got = Vec::new();
    while got.len() < lines.len() {
        let line = rx
            .recv_timeout(T)
            .unwrap_or_else(|_| panic!("bridge answers: {got:?}"));
        got.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    got
}

fn req(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn hello() -> Value {
    req(
        0,
        "initialize",
        json!({"protocol_version": 1, "client": {"name": "t", "version": "0"}}),
    )
}

fn by_id(answers: &[Value], id: u64) -> Value {
    answers
        .iter()
        .find(|a| a["id"] == id)
        .cloned()
        .unwrap_or_default()
}

fn limited(answer: &Value, target: &str) {
    assert_eq!(answer["error"]["code"], -32012, "{answer}");
    let m = answer["error"]["message"].as_str().unwrap_or("");
    let want = format!("this key is limited to sending to {target}");
    assert!(m.contains(&want), "{answer}");
}

#[test]
fn a_bridge_key_is_a_sender_to_its_target_and_nothing_else() {
    let env = Env::new();
    let carol = env.serve(&env.workspace("carol"), &["--name", "carol"]);
    let dave = env.serve(&env.workspace("dave"), &["--name", "dave"]);
    let gate = env.serve(
        &env.workspace("gate"),
        &["--name", "gate", "--approve", "ask"],
    );
    let out = env.run(&["send", "carol", "carol's own", "--message-id", "c1"]);
    assert_eq!(out.status, 0, "{out:?}");
    let out = env.run(&["send", "gate", "needs a yes", "--message-id", "g1"]);
    assert_eq!(out.status, 0, "{out:?}");

    let answers = bridge(
        &env,
        "carol",
        &[
            hello(),
            req(
                1,
                "relay/send",
                json!({"target": "dave", "body": "as carol"}),
            ),
            req(2, "inbox/claim", json!({})),
            req(3, "control/pause", json!({})),
            req(4, "events/subscribe", json!({"controller": true})),
            req(5, "turn/local", json!({"text": "hi"})),
            req(
                6,
                "message/send",
                json!({"message_id": "r1", "target_instance_id": carol.id,
                 "body": "from afar", "sender": {"instance_id": carol.id, "name": "carol"}}),
            ),
            req(7, "task/status", json!({"message_id": "r1"})),
            req(8, "task/status", json!({"message_id": "c1"})),
            req(
                9,
                "initialize",
                json!({"protocol_version": 1, "client": {"name": "t", "version": "0"}}),
            ),
            req(10, "inbox/list", json!({})),
            // Carol's own task is not the key's to cancel; its own is.
            req(11, "task/cancel", json!({"message_id": "c1"})),
            req(12, "task/cancel", json!({"message_id": "r1"})),
        ],
    );
    for id in [1, 2, 3, 4, 5, 10, 11] {
        limited(&by_id(&answers, id), "carol");
    }
    assert!(by_id(&answers, 0)["result"]["instance"]["instance_id"] == json!(carol.id));
    assert_eq!(
        by_id(&answers, 6)["result"]["status"],
        "accepted",
        "{answers:?}"
    );
    assert_eq!(
        by_id(&answers, 7)["result"]["status"],
        "queued",
        "{answers:?}"
    );
    assert_eq!(
        by_id(&answers, 12)["result"]["status"],
        "cancelled",
        "{answers:?}"
    );
    // Another sender's task is none of the key's business.
    let other = by_id(&answers, 8);
    assert_eq!(other["result"]["status"], "unknown", "{other}");
    // A second initialize does not undo what the bridge declared.
    assert!(by_id(&answers, 9)["result"].is_object(), "{answers:?}");

    // The task is from the remote end, never from carol.
    let accepted = wait_event(&carol.spool(), "r1 at carol", T, |e| {
        e["kind"] == "message.accepted" && e["message_id"] == "r1"
    });
    assert_eq!(accepted["from"], "(remote)", "{accepted}");
    assert_eq!(accepted["remote"], "192.0.2.7 52100", "{accepted}");
    assert!(accepted["sender_id"].is_null(), "{accepted}");
    // Carol's own task waits unclaimed, carol is not paused, dave got nothing.
    let status = carol.client().call(1, "control/status", json!({}));
    assert_eq!(status["result"]["state"], "ready", "{status}");
    let c1 = carol
        .client()
        .call(1, "task/status", json!({"message_id": "c1"}));
    assert_eq!(c1["result"]["status"], "queued", "{c1}");
    let to_dave: Vec<Value> = transcript(&dave.spool())
        .into_iter()
        .filter(|e| e["kind"] == "message.accepted")
        .collect();
    assert!(to_dave.is_empty(), "{to_dave:?}");

    // `baton bridge gate` cannot answer gate's approval request.
    let answers = bridge(
        &env,
        "gate",
        &[
            hello(),
            req(
                1,
                "approval/respond",
                json!({"message_id": "g1", "decision": "approve", "by": "watch"}),
            ),
        ],
    );
    limited(&by_id(&answers, 1), "gate");
    let g1 = gate
        .client()
        .call(1, "task/status", json!({"message_id": "g1"}));
    assert_eq!(g1["result"]["status"], "awaiting_approval", "{g1}");
    drop((carol, dave, gate));
}
