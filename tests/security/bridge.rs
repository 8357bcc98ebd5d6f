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
    bridge_args(env, &["bridge", name], lines)
}

/// `baton ARGS` (a bridge) with `lines` on its stdin; its answers.
fn bridge_args(env: &Env, args: &[&str], lines: &[Value]) -> Vec<Value> {
    let mut child = env
        .cmd()
        .args(args)
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

/// `baton bridge carol --key LABEL` with `lines` on its stdin.
fn keyed(env: &Env, label: Option<&str>, lines: &[Value]) -> Vec<Value> {
    let mut args = vec!["bridge", "carol"];
    args.extend(label.map(|l| ["--key", l]).into_iter().flatten());
    bridge_args(env, &args, lines)
}

fn send(id: u64, message_id: &str, target: &str) -> Value {
    req(
        id,
        "message/send",
        json!({"message_id": message_id, "target_instance_id": target,
               "body": "from afar", "sender": {}}),
    )
}

/// Regression (issue 44, point 7): a second ssh session cancelled the
/// first session's task, and a bridged sender was shown `(cli)` in
/// `inbox list` and `(remote)` in events. Each key's label holds its
/// bridge to its own tasks, and names its sender everywhere.
#[test]
fn a_bridge_key_reaches_only_the_tasks_of_its_own_label() {
    let env = Env::new();
    let carol = env.serve(&env.workspace("carol"), &["--name", "carol"]);
    let c = carol.id.as_str();
    let sent = keyed(
        &env,
        Some("a"),
        &[hello(), send(1, "ra1", c), send(2, "ra2", c)],
    );
    let sent_b = keyed(&env, Some("b"), &[hello(), send(1, "rb1", c)]);
    let sent_n = keyed(&env, None, &[hello(), send(1, "rn1", c)]);
    for (answers, id) in [(&sent, 1), (&sent, 2), (&sent_b, 1), (&sent_n, 1)] {
        let a = by_id(answers, id);
        assert_eq!(a["result"]["status"], "accepted", "{a}");
    }

    // b, and a bridge without --key, reach none of a's tasks.
    let refused = |with: &str, id: &str| {
        format!(
            "not permitted: this key is limited to sending to carol, and cancels only the tasks sent through a bridge {with}; task {id} was not"
        )
    };
    let b = keyed(
        &env,
        Some("b"),
        &[
            hello(),
            req(1, "task/cancel", json!({"message_id": "ra1"})),
            req(2, "task/status", json!({"message_id": "ra1"})),
            req(3, "task/status", json!({"message_id": "rb1"})),
        ],
    );
    let cancel = by_id(&b, 1);
    assert_eq!(cancel["error"]["code"], -32012, "{cancel}");
    assert_eq!(cancel["error"]["message"], refused("with --key b", "ra1"));
    let status = &by_id(&b, 2)["result"];
    assert_eq!(status["status"], "unknown", "{status}");
    assert_eq!(
        status["reason"],
        "it was not sent through a bridge with --key b: a bridge asks only about the tasks sent through one with its own key's label"
    );
    assert_eq!(by_id(&b, 3)["result"]["status"], "queued", "{b:?}");
    let n = keyed(
        &env,
        None,
        &[
            hello(),
            req(1, "task/cancel", json!({"message_id": "ra2"})),
            req(2, "task/status", json!({"message_id": "rn1"})),
        ],
    );
    let cancel = by_id(&n, 1);
    assert_eq!(cancel["error"]["message"], refused("without --key", "ra2"));
    assert_eq!(by_id(&n, 2)["result"]["status"], "queued", "{n:?}");

    // a reaches its own.
    let a = keyed(
        &env,
        Some("a"),
        &[
            hello(),
            req(1, "task/status", json!({"message_id": "ra1"})),
            req(2, "task/cancel", json!({"message_id": "ra1"})),
        ],
    );
    assert_eq!(by_id(&a, 1)["result"]["status"], "queued", "{a:?}");
    assert_eq!(by_id(&a, 2)["result"]["status"], "cancelled", "{a:?}");
    let ra2 = carol
        .client()
        .call(1, "task/status", json!({"message_id": "ra2"}));
    assert_eq!(ra2["result"]["status"], "queued", "{ra2}");

    // Shown by its label: events, inbox list, log.
    let accepted = wait_event(&carol.spool(), "ra2 at carol", T, |e| {
        e["kind"] == "message.accepted" && e["message_id"] == "ra2"
    });
    assert_eq!(accepted["from"], "(remote a)", "{accepted}");
    assert_eq!(accepted["key"], "a", "{accepted}");
    let listed = env.run(&["inbox", "list", "carol"]);
    assert_eq!(listed.status, 0, "{listed:?}");
    for (id, from) in [
        ("ra2", "(remote a)"),
        ("rb1", "(remote b)"),
        ("rn1", "(remote)"),
    ] {
        let row = listed.stdout.lines().find(|l| l.contains(id));
        let row = row.unwrap_or_else(|| panic!("{id}: {}", listed.stdout));
        assert!(row.contains(&format!(" {from} ")), "{row}");
    }
    let log = env.run(&["log", "carol"]);
    assert!(log.stdout.contains("ra2 from (remote a)"), "{}", log.stdout);
    assert!(log.stdout.contains("rn1 from (remote) "), "{}", log.stdout);

    // A label is a short name.
    let bad = env.run(&["bridge", "carol", "--key", "a b"]);
    assert_eq!(bad.status, 2, "{bad:?}");
    assert_eq!(
        bad.stderr.trim(),
        "baton: bridge: --key a b: a key's label is 1 to 64 bytes of letters, digits and -_.@"
    );
    // The instance holds a declaration to the same grammar.
    let declared = carol.client().call(
        1,
        "initialize",
        json!({"protocol_version": 1, "client": {"name": "t", "version": "0"},
               "bridge": {"target": c, "key": "a\u{1b}[2J"}}),
    );
    assert_eq!(declared["error"]["code"], -32602, "{declared}");
    assert_eq!(
        declared["error"]["message"],
        "invalid params: bridge.key must be a label of 1 to 64 letters, digits and -_.@"
    );
    drop(carol);
}
