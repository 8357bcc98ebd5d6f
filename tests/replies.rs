//! One reply, handed over once (issue 31, point 2): a reply that reached
//! its sender through a wait (`send --wait`, MCP's `wait_seconds`) is
//! recorded at the sending instance as `received` and never handed out
//! again as new work (`inbox list --all` shows it); a task that is itself
//! a reply never makes an `--exec --reply` handler answer it, and `inbox
//! complete --reply` on one needs `--reply-to-reply`. Two agents that
//! answer everything exchange one reply, and the hop limit ends nothing.

use crate::mcp::{Mcp, NEWEST, text};
use crate::util::{self, Env, event_is as is};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// Bound for anything that should take well under a second.
const WAIT: Duration = Duration::from_secs(20);

/// A handler that reads its task and answers `pong`.
const PONG: &str = "cat >/dev/null; echo pong";

/// The id of the reply the task `id` finished with, from its receipt.
fn reply_id(spool: &Path, id: &str) -> String {
    let r = util::wait_for(&format!("the receipt of {id}"), WAIT, || {
        util::receipt(spool, id)
    });
    r["reply"]["message_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply id in {r}"))
        .to_string()
}

/// `inbox list --all --json NAME`.
fn listing(env: &Env, name: &str) -> Value {
    let out = env.run(&["inbox", "list", "--all", "--json", name]);
    assert_eq!(out.status, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

/// Waits until `inbox list --all` of `name` shows `id` finished as
/// `received`, and nothing queued.
fn wait_received(env: &Env, name: &str, id: &str) -> Value {
    util::wait_for(&format!("{id} received at {name}"), WAIT, || {
        let l = listing(env, name);
        let fin = l["finished"].as_array()?.clone();
        fin.iter()
            .any(|f| f["message_id"] == id && f["outcome"] == "received")
            .then_some(l)
    })
}

/// No transcript line of `spool` says `hop_limit`.
fn no_hop_limit(spool: &Path) {
    for e in util::transcript(spool) {
        assert!(!e.to_string().contains("hop_limit"), "{e}");
    }
}

#[test]
fn a_reply_printed_by_send_wait_is_not_queued_again() {
    let env = Env::new();
    let alpha = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", PONG, "--reply"],
    );
    let out = env.run(&[
        "send",
        "--from",
        "alpha",
        "--wait",
        "--message-id",
        "t-1",
        "beta",
        "ping",
    ]);
    assert_eq!((out.status, out.stdout.as_str()), (0, "pong\n"), "{out:?}");
    let rid = reply_id(&beta.spool(), "t-1");

    let l = wait_received(&env, "alpha", &rid);
    assert_eq!(l["queued"], json!([]), "{l}");
    let out = env.run(&["inbox", "list", "--all", "alpha"]);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("received") && l.contains(&rid)),
        "{out:?}"
    );
    let out = env.run(&["inbox", "claim", "--json", "alpha"]);
    let c: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(c["status"], "empty", "{c}");
    let ended = util::wait_event(&alpha.spool(), "task.ended of the reply", WAIT, |e| {
        is(e, "task.ended", &rid)
    });
    assert_eq!(ended["outcome"], "received", "{ended}");
}

/// A reply that arrives after its sender's wait said it was received is
/// recorded as received on arrival.
#[test]
fn a_reply_expected_before_it_arrives_is_received_on_arrival() {
    let env = Env::new();
    let alpha = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let mut c = alpha.client();
    c.initialize();
    let told = c.call(
        3,
        "inbox/received",
        json!({"message_id": "r-1", "in_reply_to": "t-1"}),
    );
    assert_eq!(told["result"]["status"], "expected", "{told}");
    let mut msg = alpha.msg("r-1", "the answer");
    msg["in_reply_to"] = json!("t-1");
    let r = c.call(4, "message/send", msg);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    wait_received(&env, "alpha", "r-1");

    // A task that answers another task is not received for it.
    let told = c.call(
        5,
        "inbox/received",
        json!({"message_id": "r-2", "in_reply_to": "t-1"}),
    );
    assert_eq!(told["result"]["status"], "expected", "{told}");
    let mut msg = alpha.msg("r-2", "another answer");
    msg["in_reply_to"] = json!("t-9");
    let r = c.call(6, "message/send", msg);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let out = env.run(&["inbox", "claim", "--json", "alpha"]);
    let got: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(got["task"]["message_id"], "r-2", "{got}");
}

/// `inbox/received` is in the access table: a bridge may not call it.
#[test]
fn a_bridge_may_not_say_a_reply_was_received() {
    let env = Env::new();
    let _alpha = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let mut child = env
        .cmd()
        .args(["bridge", "alpha"])
        .env("SSH_CONNECTION", "192.0.2.7 52100 127.0.0.1 22")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocol_version": 1, "client": {"name": "t", "version": "0"}}});
    let told = json!({"jsonrpc": "2.0", "id": 1, "method": "inbox/received",
                      "params": {"message_id": "r-1", "in_reply_to": "t-1"}});
    writeln!(stdin, "{hello}\n{told}").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let answer = loop {
        let line = rx.recv_timeout(WAIT).expect("the bridge answers");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 1 {
            break v;
        }
    };
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(answer["error"]["code"], -32012, "{answer}");
    assert_eq!(answer["error"]["data"]["role"], "bridge", "{answer}");
}

#[test]
fn two_exec_reply_agents_exchange_one_reply_and_stop() {
    let env = Env::new();
    let alpha = env.serve(
        &env.workspace("alpha"),
        &["--name", "alpha", "--exec", PONG, "--reply"],
    );
    let beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", PONG, "--reply"],
    );
    let out = env.run(&[
        "send",
        "--from",
        "alpha",
        "--message-id",
        "t-1",
        "beta",
        "ping",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let rid = reply_id(&beta.spool(), "t-1");
    // alpha's handler runs the reply; what it prints is kept, not sent.
    let upto = util::transcript_until(&alpha.spool(), "the reply's notice", WAIT, |e| {
        is(e, "notice", &rid)
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("is itself a reply"))
    });
    let ended = upto.iter().find(|e| is(e, "task.ended", &rid));
    assert_eq!(
        ended.map(|e| &e["outcome"]),
        Some(&json!("done")),
        "{upto:?}"
    );
    assert_eq!(
        util::receipt(&alpha.spool(), &rid).unwrap()["reply"]["body"],
        "pong\n"
    );
    // beta got the one task, and no reply came back to it.
    let beta_got: Vec<Value> = util::transcript(&beta.spool())
        .into_iter()
        .filter(|e| e["kind"] == "message.accepted")
        .collect();
    assert_eq!(beta_got.len(), 1, "{beta_got:?}");
    let sent: Vec<&Value> = (upto.iter())
        .filter(|e| e["kind"] == "relay.sent" && e["reply_of"] == rid.as_str())
        .collect();
    assert!(sent.is_empty(), "{sent:?}");
    no_hop_limit(&alpha.spool());
    no_hop_limit(&beta.spool());
}

#[test]
fn inbox_complete_reply_on_a_reply_needs_reply_to_reply() {
    let env = Env::new();
    let alpha = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let beta = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    let out = env.run(&[
        "send",
        "--from",
        "alpha",
        "--message-id",
        "t-1",
        "beta",
        "q",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(env.run(&["inbox", "claim", "beta"]).status, 0);
    let out = env.run(&["inbox", "complete", "beta", "t-1", "--reply", "answer"]);
    assert_eq!(out.status, 0, "{out:?}");
    let rid = reply_id(&beta.spool(), "t-1");
    util::wait_event(&alpha.spool(), "the reply's arrival", WAIT, |e| {
        is(e, "message.accepted", &rid)
    });
    let out = env.run(&["inbox", "claim", "--json", "alpha"]);
    let c: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(c["task"]["message_id"], rid.as_str(), "{c}");

    let out = env.run(&["inbox", "complete", "alpha", &rid, "--reply", "thanks"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(out.stderr.contains("is itself a reply"), "{out:?}");
    assert!(out.stderr.contains("--reply-to-reply"), "{out:?}");
    let out = env.run(&["inbox", "complete", "alpha", &rid, "--reply-to-reply"]);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("needs --reply"), "{out:?}");

    let out = env.run(&[
        "inbox",
        "complete",
        "alpha",
        &rid,
        "--reply",
        "thanks",
        "--reply-to-reply",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("accepted by beta"), "{out:?}");
}

/// Over MCP: the reply `wait_seconds` returned is not handed over again
/// by `check_inbox`, and `complete_task` with a reply to a reply needs
/// `reply_to_reply`.
#[test]
fn mcp_a_reply_returned_by_a_wait_is_not_in_check_inbox() {
    let env = Env::new();
    let beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", PONG, "--reply"],
    );
    let mut a = Mcp::start(&env, &env.workspace("alpha"), &["--name", "alpha"]);
    a.initialize(NEWEST);
    let res = a.tool(
        "send_agent_message",
        json!({"target_instance_id": "beta", "message": "ping", "wait_seconds": 60}),
    );
    assert_eq!(res["structuredContent"]["reply"], "pong\n", "{res}");
    let id = res["structuredContent"]["message_id"].as_str().unwrap();
    let rid = reply_id(&beta.spool(), id);
    wait_received(&env, "alpha", &rid);
    let got = a.tool("check_inbox", json!({}));
    assert_eq!(text(&got), "The inbox is empty.", "{got}");
    a.finish();
}

/// Not handed over by a wait, a reply is ordinary work; MCP's
/// `complete_task` follows the same rule as `inbox complete`.
#[test]
fn mcp_complete_task_on_a_reply_needs_reply_to_reply() {
    let env = Env::new();
    let beta = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    let mut a = Mcp::start(&env, &env.workspace("alpha"), &["--name", "alpha"]);
    a.initialize(NEWEST);
    let res = a.tool(
        "send_agent_message",
        json!({"target_instance_id": "beta", "message": "q"}),
    );
    let id = res["structuredContent"]["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(env.run(&["inbox", "claim", "beta"]).status, 0);
    let out = env.run(&["inbox", "complete", "beta", &id, "--reply", "answer"]);
    assert_eq!(out.status, 0, "{out:?}");
    let rid = reply_id(&beta.spool(), &id);
    let got = util::wait_for("the reply in check_inbox", WAIT, || {
        let got = a.tool("check_inbox", json!({}));
        (got["structuredContent"]["message_id"] == rid.as_str()).then_some(got)
    });
    assert_eq!(got["structuredContent"]["in_reply_to"], id.as_str());
    let no = a.tool(
        "complete_task",
        json!({"message_id": rid, "reply": "thanks"}),
    );
    assert_eq!(no["isError"], true, "{no}");
    assert!(text(&no).contains("reply_to_reply"), "{no}");
    let yes = a.tool(
        "complete_task",
        json!({"message_id": rid, "reply": "thanks", "reply_to_reply": true}),
    );
    assert_eq!(yes["isError"], false, "{yes}");
    a.finish();
}
