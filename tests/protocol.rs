//! The native wire (docs/protocol.md §1 to §5) and the delivery guards
//! (§5, §6), spoken to a real `baton serve` over its socket: every refusal
//! status of `message/send` with its exact reason and the order of the
//! checks, every JSON-RPC error code, framing bounds and deadlines, slow clients, and the
//! `baton send` command line on top of it.

use crate::util::{
    Env, RawClient, Served, fake_manifest, me_as_instance, transcript, wait_for, wait_until,
};
use serde_json::{Value, json};
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Exact reasons, as `src/server.rs` (`reason`) spells them.
const BAD_MESSAGE_ID: &str = "message_id does not match [A-Za-z0-9_.-]{1,100}";
const EMPTY_BODY: &str = "body is empty";
const BAD_SENDER_ID: &str = "sender.instance_id does not match [A-Za-z0-9_.-]{1,100}";
const BAD_SENDER_NAME: &str = "sender.name does not match [A-Za-z0-9_.-]{1,64}";
const BAD_SENDER_WORKSPACE: &str = "sender.workspace is not an absolute path of at most 4096 bytes";
const BAD_IN_REPLY_TO: &str = "in_reply_to does not match [A-Za-z0-9_.-]{1,100}";
const BAD_MODE: &str = "mode is not queue or steer";
const BAD_HOP: &str = "hop is negative";
const REUSED: &str = "message_id reused with a different body";
const DUPLICATE: &str = "this message_id was already accepted with the same body";
const PAUSED: &str = "the instance is paused";
const NO_ACCEPT: &str = "sender matches no --accept-from pattern";

/// Sends `message/send` and returns its `result`.
fn send(c: &mut RawClient, params: Value) -> Value {
    let r = c.call(1, "message/send", params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("message/send got no result: {r}"))
}

#[track_caller]
fn assert_refused(r: &Value, status: &str, reason: &str) {
    assert_eq!(r["status"], status, "{r}");
    assert_eq!(r["reason"], reason, "{r}");
    assert!(
        r.get("queue_position").is_none(),
        "a refusal has no position: {r}"
    );
}

#[track_caller]
fn assert_accepted(r: &Value, position: u64) {
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(r["queue_position"], position, "{r}");
    assert!(r.get("reason").is_none(), "{r}");
}

/// This process's working directory as the kernel reports it.
fn my_cwd() -> String {
    fs::read_link("/proc/self/cwd")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// Asserts that `c` still answers a ping with id `id`.
#[track_caller]
fn assert_pings(c: &mut RawClient, id: u64) {
    let r = c.call(id, "ping", json!({}));
    assert_eq!(r["result"]["status"], "pong", "{r}");
}

/// Reads one line and parses it as JSON.
#[track_caller]
fn read_obj(c: &mut RawClient) -> Value {
    let line = c
        .read_line()
        .expect("the server closed instead of answering");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

#[track_caller]
fn assert_error(v: &Value, id: Value, code: i64, message: &str) {
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], id, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["message"], message, "{v}");
    assert!(v.get("result").is_none(), "{v}");
}

// ---------------------------------------------------------------------------
// A. Delivery statuses and the order of the checks
// ---------------------------------------------------------------------------

#[test]
fn invalid_and_wrong_target_refusals_have_exact_reasons() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_MESSAGE_BYTES", "100")], &[]);
    let mut c = inst.client();
    let me = std::process::id();

    // wrong_target, and it wins over every other problem.
    let mut p = inst.msg("m1", "hello");
    p["target_instance_id"] = json!("12-345678901234");
    let r = send(&mut c, p);
    let want = format!("this is instance {}, not 12-345678901234", inst.id);
    assert_refused(&r, "wrong_target", &want);
    assert_eq!(r["message_id"], "m1");
    assert_eq!(r["state"], "ready");
    let mut p = inst.msg("bad id", "");
    p["target_instance_id"] = json!("12-345678901234");
    assert_refused(&send(&mut c, p), "wrong_target", &want);

    // message_id grammar: a space, 101 characters; 100 is fine.
    let r = send(&mut c, inst.msg("has space", "x"));
    assert_refused(&r, "invalid", BAD_MESSAGE_ID);
    assert_refused(
        &send(&mut c, inst.msg(&"a".repeat(101), "x")),
        "invalid",
        BAD_MESSAGE_ID,
    );
    assert_refused(&send(&mut c, inst.msg("", "x")), "invalid", BAD_MESSAGE_ID);
    assert_refused(
        &send(&mut c, inst.msg("a/b", "x")),
        "invalid",
        BAD_MESSAGE_ID,
    );
    assert_accepted(&send(&mut c, inst.msg(&"a".repeat(100), "x")), 1);

    // Body: whitespace only is empty; 100 bytes pass, 101 do not, and the
    // limit counts bytes, not characters.
    assert_refused(
        &send(&mut c, inst.msg("e1", " \n\t \r\n")),
        "invalid",
        EMPTY_BODY,
    );
    assert_refused(&send(&mut c, inst.msg("e2", "")), "invalid", EMPTY_BODY);
    assert_accepted(&send(&mut c, inst.msg("b100", &"x".repeat(100))), 2);
    assert_refused(
        &send(&mut c, inst.msg("b101", &"x".repeat(101))),
        "invalid",
        "body is 101 bytes, over the limit of 100 (BATON_MAX_MESSAGE_BYTES)",
    );
    assert_refused(
        &send(&mut c, inst.msg("b102", &"€".repeat(34))),
        "invalid",
        "body is 102 bytes, over the limit of 100 (BATON_MAX_MESSAGE_BYTES)",
    );

    // The other value checks, each with its reason.
    let with = |k: &str, v: Value| {
        let mut p = inst.msg("v1", "task");
        if let Some(s) = k.strip_prefix("sender.") {
            p["sender"][s] = v;
        } else {
            p[k] = v;
        }
        p
    };
    for (k, v, reason) in [
        ("sender.instance_id", json!("no such/id"), BAD_SENDER_ID),
        ("sender.instance_id", json!("x".repeat(101)), BAD_SENDER_ID),
        ("sender.name", json!("a b"), BAD_SENDER_NAME),
        ("sender.name", json!("n".repeat(65)), BAD_SENDER_NAME),
        (
            "sender.workspace",
            json!("relative/dir"),
            BAD_SENDER_WORKSPACE,
        ),
        ("in_reply_to", json!("not valid!"), BAD_IN_REPLY_TO),
        ("mode", json!("urgent"), BAD_MODE),
        ("hop", json!(-1), BAD_HOP),
    ] {
        let r = send(&mut c, with(k, v.clone()));
        assert_refused(&r, "invalid", reason);
    }

    // Sender verification: no manifest at all, and a manifest that names
    // another pid than the connection's.
    let r = send(&mut c, inst.msg_from("s1", "task", "4242-123456789012"));
    assert_refused(
        &r,
        "invalid",
        "sender not verified: no manifest for instance 4242-123456789012 in the registry",
    );
    let other = fake_manifest(&inst.registry, 1, "init", "/");
    let r = send(&mut c, inst.msg_from("s2", "task", &other));
    assert_refused(
        &r,
        "invalid",
        &format!(
            "sender not verified: instance {other} has pid 1, but the connection comes from pid {me}"
        ),
    );
    assert!(r["reason"].as_str().unwrap().contains("has pid"));

    // Order inside `invalid`: id before body, body before sender, sender
    // grammar before verification, verification before the hop limit.
    assert_refused(
        &send(&mut c, inst.msg("bad id", " ")),
        "invalid",
        BAD_MESSAGE_ID,
    );
    let mut p = inst.msg("o1", " ");
    p["sender"]["instance_id"] = json!("bad id");
    assert_refused(&send(&mut c, p), "invalid", EMPTY_BODY);
    let mut p = inst.msg("o2", &"y".repeat(101));
    p["sender"]["instance_id"] = json!("bad id");
    assert_refused(
        &send(&mut c, p),
        "invalid",
        "body is 101 bytes, over the limit of 100 (BATON_MAX_MESSAGE_BYTES)",
    );
    let mut p = inst.msg_from("o3", "task", "4242-123456789012");
    p["hop"] = json!(1000);
    let r = send(&mut c, p);
    assert_eq!(r["status"], "invalid", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .starts_with("sender not verified: "),
        "{r}"
    );

    // Reuse and duplicates; ids are compared exactly.
    assert_accepted(&send(&mut c, inst.msg("m1", "first body")), 3);
    assert_refused(
        &send(&mut c, inst.msg("m1", "other body")),
        "invalid",
        REUSED,
    );
    let r = send(&mut c, inst.msg("m1", "first body"));
    assert_eq!(r["status"], "duplicate", "{r}");
    assert_eq!(r["reason"], DUPLICATE, "{r}");
    assert_eq!(r["message_id"], "m1");
    assert!(r.get("queue_position").is_none(), "{r}");
    assert_accepted(&send(&mut c, inst.msg("x-1", "same")), 4);
    assert_accepted(&send(&mut c, inst.msg("1", "same")), 5);
    assert_accepted(&send(&mut c, inst.msg("M1", "first body")), 6);

    // Nothing refused was stored.
    assert_eq!(inst.queued(&mut c), 6);
}

#[test]
fn paused_full_and_duplicate_keep_their_order() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_QUEUE", "3")], &[]);
    let mut c = inst.client();

    assert_accepted(&send(&mut c, inst.msg("q1", "one")), 1);

    let r = c.call(2, "control/pause", json!({}));
    assert_eq!(r["result"]["state"], "paused", "{r}");
    let r = send(&mut c, inst.msg("q2", "two"));
    assert_refused(&r, "paused", PAUSED);
    assert_eq!(r["state"], "paused", "{r}");
    // duplicate and reuse are decided before paused ...
    assert_eq!(send(&mut c, inst.msg("q1", "one"))["status"], "duplicate");
    assert_refused(&send(&mut c, inst.msg("q1", "changed")), "invalid", REUSED);
    // ... and hop_limit before duplicate.
    let mut p = inst.msg("q1", "one");
    p["hop"] = json!(9);
    assert_refused(
        &send(&mut c, p),
        "hop_limit",
        "hop 9 is over the limit of 8 (BATON_MAX_HOPS)",
    );

    let r = c.call(3, "control/resume", json!({}));
    assert_eq!(r["result"]["state"], "ready", "{r}");
    let r = send(&mut c, inst.msg("q2", "two"));
    assert_accepted(&r, 2);
    assert_eq!(r["state"], "ready");
    assert_accepted(&send(&mut c, inst.msg("q3", "three")), 3);

    let full = "the queue is full: 3 tasks waiting or running (BATON_MAX_QUEUE)";
    assert_refused(&send(&mut c, inst.msg("q4", "four")), "full", full);
    // A duplicate is still a duplicate when the queue is full.
    assert_eq!(send(&mut c, inst.msg("q3", "three"))["status"], "duplicate");

    // Paused wins over full.
    c.call(4, "control/pause", json!({}));
    assert_refused(&send(&mut c, inst.msg("q4", "four")), "paused", PAUSED);
    c.call(5, "control/resume", json!({}));
    assert_refused(&send(&mut c, inst.msg("q4", "four")), "full", full);

    // A claimed task still counts against the queue (inbox + processing);
    // a finished one does not.
    let r = c.call(6, "inbox/claim", json!({}));
    assert_eq!(r["result"]["status"], "claimed", "{r}");
    assert_eq!(r["result"]["task"]["message_id"], "q1", "{r}");
    assert_refused(&send(&mut c, inst.msg("q4", "four")), "full", full);
    let r = c.call(
        7,
        "inbox/complete",
        json!({"message_id": "q1", "outcome": "done"}),
    );
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_accepted(&send(&mut c, inst.msg("q4", "four")), 3);
    // Finished tasks are remembered: same id and body is a duplicate.
    assert_eq!(send(&mut c, inst.msg("q1", "one"))["status"], "duplicate");
}

#[test]
fn hop_limit_is_inclusive_and_zero_disables_it() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_HOPS", "3")], &[]);
    let mut c = inst.client();
    let hop = |id: &str, h: Value| hop_params(&inst, id, h);
    assert_accepted(&send(&mut c, hop("h0", json!(0))), 1);
    assert_accepted(&send(&mut c, hop("h3", json!(3))), 2);
    assert_refused(
        &send(&mut c, hop("h4", json!(4))),
        "hop_limit",
        "hop 4 is over the limit of 3 (BATON_MAX_HOPS)",
    );
    let r = send(&mut c, hop("hbig", json!(u64::MAX)));
    assert_eq!(r["status"], "hop_limit", "{r}");
    // A missing or null hop is hop 0.
    let mut p = inst.msg("hnull", "task");
    p["hop"] = Value::Null;
    assert_accepted(&send(&mut c, p), 3);
    drop(c);
    drop(inst);

    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_HOPS", "0")], &[]);
    let mut c = inst.client();
    assert_accepted(&send(&mut c, hop_params(&inst, "z1", json!(1000))), 1);
    assert_accepted(&send(&mut c, hop_params(&inst, "z2", json!(u64::MAX))), 2);
    assert_refused(
        &send(&mut c, hop_params(&inst, "z3", json!(-1))),
        "invalid",
        BAD_HOP,
    );
}

fn hop_params(inst: &Served, id: &str, hop: Value) -> Value {
    let mut p = inst.msg(id, "task");
    p["hop"] = hop;
    p
}

#[test]
fn inflight_window_counts_verified_senders_only() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_INFLIGHT", "2")], &[]);
    let sender = me_as_instance(&inst.registry, "peer", "/srv/peer");
    let mut c = inst.client();

    assert_accepted(&send(&mut c, inst.msg_from("i1", "one", &sender)), 1);
    assert_accepted(&send(&mut c, inst.msg_from("i2", "two", &sender)), 2);
    let want = format!("sender {sender} already has 2 tasks in flight here (BATON_MAX_INFLIGHT)");
    assert_refused(
        &send(&mut c, inst.msg_from("i3", "three", &sender)),
        "inflight_full",
        &want,
    );
    // Plain senders are not counted.
    assert_accepted(&send(&mut c, inst.msg("p1", "plain")), 3);
    assert_accepted(&send(&mut c, inst.msg("p2", "plain")), 4);
    // A duplicate is answered before the window is looked at.
    assert_eq!(
        send(&mut c, inst.msg_from("i1", "one", &sender))["status"],
        "duplicate"
    );
    // Paused is decided before the window.
    c.call(2, "control/pause", json!({}));
    assert_refused(
        &send(&mut c, inst.msg_from("i3", "three", &sender)),
        "paused",
        PAUSED,
    );
    c.call(3, "control/resume", json!({}));

    // The recorded sender is the verified identity.
    let r = c.call(4, "inbox/claim", json!({}));
    let task = &r["result"]["task"];
    assert_eq!(task["message_id"], "i1", "{r}");
    assert_eq!(task["sender"]["instance_id"], sender.as_str(), "{r}");
    assert_eq!(task["sender"]["name"], "peer", "{r}");
    assert_eq!(task["sender"]["workspace"], "/srv/peer", "{r}");
    assert_eq!(task["sender"]["pid"], std::process::id(), "{r}");
    // Claimed is still in flight; finished is not.
    assert_eq!(
        send(&mut c, inst.msg_from("i3", "three", &sender))["status"],
        "inflight_full"
    );
    // queue_position counts the claimed task too: 1 processing + i2, p1,
    // p2 queued + this one.
    assert_accepted(&send(&mut c, inst.msg("p3", "plain")), 5);
    let r = c.call(5, "inbox/complete", json!({"message_id": "i1"}));
    assert_eq!(r["result"]["status"], "completed", "{r}");
    // i2, p1, p2, p3 queued + this one.
    assert_accepted(&send(&mut c, inst.msg_from("i3", "three", &sender)), 5);
}

#[test]
fn deny_from_matches_verified_name_and_workspace() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let cwd = my_cwd();
    let inst = env.serve(&ws, &["--deny-from", "ws*"]);
    let ws1 = me_as_instance(&inst.registry, "ws1", "/srv/one");
    let other = me_as_instance(&inst.registry, "other", "/srv/ws-two");
    let mut c = inst.client();

    let r = send(&mut c, inst.msg_from("d1", "task", &ws1));
    assert_refused(&r, "denied", "sender matches --deny-from ws*");
    // Order: invalid before denied, denied before hop_limit and duplicate.
    assert_refused(
        &send(&mut c, inst.msg_from("d2", " ", &ws1)),
        "invalid",
        EMPTY_BODY,
    );
    let mut p = inst.msg_from("d3", "task", &ws1);
    p["hop"] = json!(100);
    assert_eq!(send(&mut c, p)["status"], "denied");
    assert_accepted(&send(&mut c, inst.msg("d4", "task")), 1);
    assert_eq!(
        send(&mut c, inst.msg_from("d4", "task", &ws1))["status"],
        "denied"
    );
    // The pattern is anchored: /srv/ws-two does not match ws*.
    assert_accepted(&send(&mut c, inst.msg_from("d5", "task", &other)), 2);
    drop(c);
    drop(inst);

    // A plain sender's workspace is its working directory, read from the
    // kernel, not what it claims.
    let inst = env.serve(&env.workspace("ws2"), &["--deny-from", &cwd]);
    let mut c = inst.client();
    let want = format!("sender matches --deny-from {cwd}");
    assert_refused(&send(&mut c, inst.msg("c1", "task")), "denied", &want);
    let mut p = inst.msg("c2", "task");
    p["sender"]["workspace"] = json!("/somewhere/else");
    assert_refused(&send(&mut c, p), "denied", &want);
}

#[test]
fn accept_from_admits_only_matching_senders() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let cwd = my_cwd();
    let inst = env.serve(&ws, &["--accept-from", "ws*", "--accept-from", "/srv/*"]);
    let ws1 = me_as_instance(&inst.registry, "ws1", "/home/u/one");
    let by_dir = me_as_instance(&inst.registry, "zed", "/srv/work");
    let outsider = me_as_instance(&inst.registry, "other", "/home/u/two");
    let mut c = inst.client();

    assert_accepted(&send(&mut c, inst.msg_from("a1", "task", &ws1)), 1);
    assert_accepted(&send(&mut c, inst.msg_from("a2", "task", &by_dir)), 2);
    assert_refused(
        &send(&mut c, inst.msg_from("a3", "task", &outsider)),
        "denied",
        NO_ACCEPT,
    );
    // A plain sender (cwd here does not match) is refused, and claiming a
    // name or workspace that would match does not get it in: neither is
    // verified.
    assert!(!cwd.starts_with("/srv/"), "test cwd {cwd} would match");
    assert_refused(&send(&mut c, inst.msg("a4", "task")), "denied", NO_ACCEPT);
    let mut p = inst.msg("a5", "task");
    p["sender"]["name"] = json!("ws9");
    assert_refused(&send(&mut c, p), "denied", NO_ACCEPT);
    let mut p = inst.msg("a6", "task");
    p["sender"]["workspace"] = json!("/srv/claimed");
    assert_refused(&send(&mut c, p), "denied", NO_ACCEPT);
    drop(c);
    drop(inst);

    // Accepting the plain sender's real working directory lets it in.
    // (Another workspace, so it has its own spool.)
    let inst = env.serve(&env.workspace("ws2"), &["--accept-from", &cwd]);
    let mut c = inst.client();
    assert_accepted(&send(&mut c, inst.msg("b1", "task")), 1);
}

// ---------------------------------------------------------------------------
// A. The `baton send` command line
// ---------------------------------------------------------------------------

#[test]
fn cli_send_reports_and_exit_codes() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "target"]);

    let out = env.run(&["send", "target", "first task"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("accepted: "), "{out:?}");
    assert!(out.stdout.contains(&inst.id), "{out:?}");

    let out = env.run(&[
        "send",
        "--json",
        "--message-id",
        "fixed-1",
        "target",
        "second",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("send --json printed no JSON ({e}): {out:?}"));
    assert_eq!(
        v,
        json!({"status": "accepted", "message_id": "fixed-1", "queue_position": 2, "state": "ready",
               "target": {"instance_id": inst.id, "name": "target"}})
    );
    // The same id and body again: duplicate, still exit 0.
    let out = env.run(&[
        "send",
        "--json",
        "--message-id",
        "fixed-1",
        "target",
        "second",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["status"], "duplicate", "{v}");
    // The same id with another body: refused, exit 1.
    let out = env.run(&[
        "send",
        "--json",
        "--message-id",
        "fixed-1",
        "target",
        "third",
    ]);
    assert_eq!(out.status, 1, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["status"], "invalid", "{v}");
    assert_eq!(v["reason"], REUSED, "{v}");

    // A refusal exits 1 and says why.
    let mut c = inst.client();
    c.call(2, "control/pause", json!({}));
    let out = env.run(&["send", "target", "while paused"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr.contains("paused: the instance is paused"),
        "{out:?}"
    );
    c.call(3, "control/resume", json!({}));

    // stdin with `-`, delivered byte for byte.
    let out = env.run_stdin(&["send", "target", "-"], b"from stdin\nline two\n");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("accepted: "), "{out:?}");
    let mut last = Value::Null;
    for n in 0..3 {
        let r = c.call(10 + n, "inbox/claim", json!({}));
        let id = r["result"]["task"]["message_id"].clone();
        last = r["result"]["task"].clone();
        c.call(20 + n, "inbox/complete", json!({"message_id": id}));
    }
    assert_eq!(last["body"], "from stdin\nline two\n", "{last}");
    // A plain CLI sender: no instance id, its pid, hop 0.
    assert!(last["sender"]["instance_id"].is_null(), "{last}");
    assert_eq!(last["hop"], 0, "{last}");

    // No such target: exit 3, candidates listed.
    let out = env.run(&["send", "nosuch", "hello"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(out.stderr.contains("nosuch"), "{out:?}");
    assert!(out.stderr.contains("target"), "{out:?}");
    assert!(out.stderr.contains(&inst.id), "{out:?}");
}

#[test]
fn cli_send_to_an_ambiguous_name_lists_both() {
    let env = Env::new();
    let a = env.serve(&env.workspace("a/w"), &["--name", "twin"]);
    // `serve` takes no name a live instance has (issue 46); the instance
    // of a `baton mcp`, whose name its host chose, may still share one.
    let mut b = env
        .cmd()
        .args(["mcp", "--name", "twin"])
        .current_dir(env.workspace("b/w"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("a-{}-", b.id());
    let b_id = crate::util::wait_for("baton mcp's instance", Duration::from_secs(20), || {
        crate::util::manifests(&env.registry)
            .into_iter()
            .find_map(|p| {
                let n = p.file_name()?.to_str()?.to_string();
                let id = n.strip_prefix("a-")?.strip_suffix(".json")?;
                n.starts_with(&prefix).then(|| id.to_string())
            })
    });
    let out = env.run(&["send", "twin", "hello"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(out.stderr.contains("ambiguous"), "{out:?}");
    assert!(out.stderr.contains(&a.id), "{out:?}");
    assert!(out.stderr.contains(&b_id), "{out:?}");
    // Neither got the task.
    assert_eq!(a.queued(&mut a.client()), 0);
    // By exact id it goes through.
    let out = env.run(&["send", &b_id, "hello", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("\"status\":\"accepted\""), "{out:?}");
    assert!(
        out.stdout.contains(&format!("\"instance_id\":\"{b_id}\"")),
        "{out:?}"
    );
    drop(b.stdin.take());
    let _ = crate::util::exited_or_killed(&mut b, Duration::from_secs(20));
}

/// The refusal of a body over its receiver's limit
/// (`config::over_receiver_limit`).
fn too_large(size: usize, name: &str, limit: usize) -> String {
    format!(
        "invalid: the message is {size} bytes; {name} accepts at most {limit} (BATON_MAX_MESSAGE_BYTES at {name})"
    )
}

#[test]
fn cli_send_checks_the_receivers_body_limit_before_sending() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let limit = [("BATON_MAX_MESSAGE_BYTES", "100")];
    let inst = env.serve_with(&ws, &limit, &["--name", "big"]);

    let body = "x".repeat(101);
    let out = env.run(&["send", "big", &body]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr
            .ends_with(&format!("{}\n", too_large(101, "big", 100))),
        "{out:?}"
    );
    let out = env.run_with(&[], None, &["send", "big", "-"], Some(body.as_bytes()));
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr
            .ends_with(&format!("{}\n", too_large(101, "big", 100))),
        "{out:?}"
    );
    // Empty after trimming: a usage error.
    let out = env.run(&["send", "big", "  \n"]);
    assert_eq!(out.status, 2, "{out:?}");
    // Nothing reached the instance.
    assert_eq!(inst.queued(&mut inst.client()), 0);
    // Exactly at the limit is sent.
    let out = env.run(&["send", "big", &"x".repeat(100)]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(inst.queued(&mut inst.client()), 1);
}

// ---------------------------------------------------------------------------
// B. JSON-RPC errors and framing
// ---------------------------------------------------------------------------

#[test]
fn handshake_errors() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut c = RawClient::connect(&inst.socket).unwrap();

    // Anything but initialize first: -32010, for known and unknown methods.
    let r = c.call(1, "ping", json!({}));
    assert_error(
        &r,
        json!(1),
        -32010,
        "not initialized: the first request must be initialize",
    );
    let r = c.call(2, "no/such", json!({}));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let r = c.call(3, "message/send", inst.msg("m", "x"));
    assert_eq!(r["error"]["code"], -32010, "{r}");

    // protocol_version 2: -32011 with the supported versions.
    let hello = |v: Value| json!({"protocol_version": v, "client": {"name": "t", "version": "0"}});
    let r = c.call(4, "initialize", hello(json!(2)));
    assert_eq!(r["id"], 4, "{r}");
    assert_eq!(r["error"]["code"], -32011, "{r}");
    assert_eq!(r["error"]["data"], json!({"supported": [1]}), "{r}");
    // A failed initialize leaves the connection uninitialized.
    assert_eq!(c.call(5, "ping", json!({}))["error"]["code"], -32010);
    // Bad initialize params are -32602.
    let r = c.call(6, "initialize", hello(json!("1")));
    assert_error(
        &r,
        json!(6),
        -32602,
        "invalid params: protocol_version must be an integer",
    );
    let r = c.call(7, "initialize", json!({"protocol_version": 1}));
    assert_error(&r, json!(7), -32602, "invalid params: client is missing");

    let r = c.call(8, "initialize", hello(json!(1)));
    let res = &r["result"];
    assert_eq!(res["protocol_version"], 1, "{r}");
    assert_eq!(res["server"]["name"], "baton", "{r}");
    assert_eq!(res["instance"]["instance_id"], inst.id.as_str(), "{r}");
    let caps = res["capabilities"].as_array().unwrap();
    assert!(caps.contains(&json!("message/send")), "{r}");
    assert!(caps.contains(&json!("ping")), "{r}");
    let r = c.call(9, "ping", json!({}));
    assert_eq!(
        r["result"],
        json!({"status": "pong", "instance_id": inst.id, "state": "ready",
               "queued": 0, "approvals": 0})
    );
}

/// Issue 17: an id is echoed as its request spelled it, on both readers
/// of `message/send` and in errors: a 30-digit integer used to come back
/// as `1.2345678901234568e+29`, and `-0` as `-0.0`.
#[test]
fn request_ids_are_echoed_exactly_as_spelled() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let ids = [
        "123456789012345678901234567890",
        "-0",
        "1E2",
        "1.50",
        "-12345678901234567890123.4560e-3",
        r#""\u0041\u00e9""#,
    ];
    let echoes = |answer: &str, id: &str| {
        assert!(
            answer.contains(&format!(r#""id":{id},"#)),
            "id {id} not echoed as spelled: {answer}"
        );
    };
    let hello = r#"{"protocol_version":1,"client":{"name":"t","version":"0"}}"#;
    for (n, id) in ids.iter().enumerate() {
        let mut c = RawClient::connect(&inst.socket).unwrap();
        let mut exchange = |line: String| -> String {
            c.send_line(line.as_bytes());
            c.read_line().expect("an answer")
        };
        // Before the handshake: -32010.
        let a = exchange(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        assert!(a.contains("-32010"), "{a}");
        echoes(&a, id);
        // A malformed request: -32600.
        let a = exchange(format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"ping"}}"#));
        assert!(a.contains("-32600"), "{a}");
        echoes(&a, id);
        let a = exchange(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{hello}}}"#
        ));
        assert!(a.contains(r#""result""#), "{a}");
        echoes(&a, id);
        let msg = |mid: String, extra: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"message/send","params":{{"message_id":"{mid}","target_instance_id":"{}","body":"b","sender":{{}}{extra}}}}}"#,
                inst.id
            )
        };
        // The fast path, and the general one (an unknown member).
        for (path, extra) in [("fast", ""), ("general", r#","x":1"#)] {
            let a = exchange(msg(format!("m-{n}-{path}"), extra));
            assert!(a.contains(r#""status":"accepted""#), "{path}: {a}");
            echoes(&a, id);
        }
        // Errors of both kinds after the handshake.
        let a = exchange(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"message/send","params":{{"message_id":"m","sender":{{}}}}}}"#
        ));
        assert!(a.contains("-32602"), "{a}");
        echoes(&a, id);
        let a = exchange(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such"}}"#
        ));
        assert!(a.contains("-32601"), "{a}");
        echoes(&a, id);
        let a = exchange(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        assert!(a.contains(r#""status":"pong""#), "{a}");
        echoes(&a, id);
    }
}

/// Issue 17: the direct `message/send` reader refuses what the general
/// reader refuses. serde_json skips an unknown member without the checks
/// it makes on a value it reads, so nesting past its limit of 128, a
/// number out of range or a lone surrogate in one was accepted directly,
/// and the same line without the fast path's shape was -32700.
#[test]
fn the_direct_send_path_refuses_what_the_general_path_refuses() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut c = RawClient::connect(&inst.socket).unwrap();
    c.initialize();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let members = [
        format!(r#""x":{deep}"#),
        r#""x":1e400"#.to_string(),
        r#""x":"\ud800""#.to_string(),
    ];
    for (n, member) in members.iter().enumerate() {
        for (at, line) in [
            (
                "top",
                format!(
                    r#"{{"jsonrpc":"2.0","id":{n},"method":"message/send",{member},"params":{{"message_id":"d{n}","target_instance_id":"{}","body":"b","sender":{{}}}}}}"#,
                    inst.id
                ),
            ),
            (
                "params",
                format!(
                    r#"{{"jsonrpc":"2.0","id":{n},"method":"message/send","params":{{"message_id":"d{n}","target_instance_id":"{}","body":"b","sender":{{}},{member}}}}}"#,
                    inst.id
                ),
            ),
            (
                "sender",
                format!(
                    r#"{{"jsonrpc":"2.0","id":{n},"method":"message/send","params":{{"message_id":"d{n}","target_instance_id":"{}","body":"b","sender":{{{member}}}}}}}"#,
                    inst.id
                ),
            ),
        ] {
            c.send_line(line.as_bytes());
            let a = c.read_json();
            assert_eq!(a["error"]["code"], -32700, "{at}: {a}");
            assert_eq!(a["id"], Value::Null, "{at}: {a}");
        }
    }
    // Nothing was accepted, and the connection still serves.
    assert_eq!(inst.queued(&mut c), 0);
}

/// Issue 17: a reply to an `approval/request` counts only on a connection
/// that completed `initialize` (subscribed or not), as section 1 now says;
/// one on a connection that never did is dropped.
#[test]
fn approval_replies_count_only_on_a_connection_that_completed_initialize() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--approve", "ask"]);
    let mut ctl = inst.client();
    let sub = ctl.call(1, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["result"]["controller"], true, "{sub}");
    let mut c = inst.client();
    assert_eq!(
        send(&mut c, inst.msg("ask-1", "may I"))["status"],
        "accepted"
    );
    let req = loop {
        let m = ctl.read_json();
        if m["method"] == "approval/request" {
            break m;
        }
    };
    let rid = req["id"].as_str().expect("a string id");
    let awaiting = |c: &mut RawClient| {
        let l = c.call(2, "inbox/list", json!({}));
        l["result"]["awaiting_approval"].clone()
    };
    let reply = json!({"jsonrpc": "2.0", "id": rid,
                       "result": {"decision": "approve", "digest": req["params"]["digest"]}});

    // Never initialized: dropped, no answer. The next line's answer shows
    // the reply was read before the decision is looked at.
    let mut stranger = RawClient::connect(&inst.socket).unwrap();
    stranger.send_line(reply.to_string().as_bytes());
    let r = stranger.call(3, "ping", json!({}));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert_eq!(awaiting(&mut c), json!(["ask-1"]));

    // Initialized, not subscribed: it counts.
    let mut other = inst.client();
    other.send_line(reply.to_string().as_bytes());
    assert_eq!(awaiting(&mut other), json!([]));
    let claimed = c.call(4, "inbox/claim", json!({}));
    assert_eq!(
        claimed["result"]["task"]["message_id"], "ask-1",
        "{claimed}"
    );
}

#[test]
fn envelope_and_params_errors_keep_the_connection() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_BYTES", "1024")], &[]);
    let mut c = inst.client();
    let mut ping_id = 1000;
    let mut check = |c: &mut RawClient, line: &str, id: Value, code: i64, msg: Option<&str>| {
        c.send_line(line.as_bytes());
        let v = read_obj(c);
        assert_eq!(v["id"], id, "for {line}: {v}");
        assert_eq!(v["error"]["code"], code, "for {line}: {v}");
        if let Some(m) = msg {
            assert_eq!(v["error"]["message"], m, "for {line}: {v}");
        }
        // No error but the closing ones ends the connection.
        ping_id += 1;
        assert_pings(c, ping_id);
    };

    // -32700: unparsable, id null even when one is visible.
    check(&mut c, "{not json", Value::Null, -32700, None);
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping""#,
        Value::Null,
        -32700,
        None,
    );
    check(&mut c, "\u{7f}garbage", Value::Null, -32700, None);

    // -32600: not an object.
    let not_obj = Some("invalid request: not a JSON object");
    check(&mut c, "[1,2]", Value::Null, -32600, not_obj);
    check(&mut c, "42", Value::Null, -32600, not_obj);
    check(&mut c, r#""ping""#, Value::Null, -32600, not_obj);
    check(&mut c, "null", Value::Null, -32600, not_obj);
    // An object without a method echoes a valid id.
    let no_method = Some("invalid request: no \"method\"");
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":7,"params":{}}"#,
        json!(7),
        -32600,
        no_method,
    );
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"s-7"}"#,
        json!("s-7"),
        -32600,
        no_method,
    );
    check(&mut c, "{}", Value::Null, -32600, no_method);
    // ... and an invalid id is echoed as null.
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":[7]}"#,
        Value::Null,
        -32600,
        no_method,
    );
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
        Value::Null,
        -32600,
        Some("invalid request: \"id\" must be a string, a number or null"),
    );
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        Value::Null,
        -32600,
        None,
    );
    // A method that is not a string.
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":8,"method":5}"#,
        json!(8),
        -32600,
        Some("invalid request: \"method\" is not a string"),
    );
    // jsonrpc missing or not "2.0".
    let bad_version = Some("invalid request: \"jsonrpc\" must be \"2.0\"");
    check(
        &mut c,
        r#"{"id":9,"method":"ping"}"#,
        json!(9),
        -32600,
        bad_version,
    );
    check(
        &mut c,
        r#"{"jsonrpc":"1.0","id":10,"method":"ping"}"#,
        json!(10),
        -32600,
        bad_version,
    );
    check(
        &mut c,
        r#"{"jsonrpc":2.0,"id":11,"method":"ping"}"#,
        json!(11),
        -32600,
        bad_version,
    );

    // -32601.
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":12,"method":"no/such"}"#,
        json!(12),
        -32601,
        Some("method not found: no/such"),
    );

    // -32602: params not an object; missing fields; wrong types.
    check(
        &mut c,
        r#"{"jsonrpc":"2.0","id":13,"method":"ping","params":[1]}"#,
        json!(13),
        -32602,
        Some("invalid params: params must be an object"),
    );
    let id = inst.id.clone();
    let ms = |params: Value| {
        json!({"jsonrpc": "2.0", "id": 14, "method": "message/send", "params": params}).to_string()
    };
    let base = json!({"message_id": "m", "target_instance_id": id, "body": "b", "sender": {}});
    let without = |k: &str| {
        let mut p = base.clone();
        p.as_object_mut().unwrap().remove(k);
        ms(p)
    };
    let with = |k: &str, v: Value| {
        let mut p = base.clone();
        if let Some(s) = k.strip_prefix("sender.") {
            p["sender"][s] = v;
        } else {
            p[k] = v;
        }
        ms(p)
    };
    for (line, msg) in [
        (
            without("message_id"),
            "invalid params: message_id is missing",
        ),
        (
            without("target_instance_id"),
            "invalid params: target_instance_id is missing",
        ),
        (without("body"), "invalid params: body is missing"),
        (without("sender"), "invalid params: sender is missing"),
        (
            with("body", json!(5)),
            "invalid params: body must be a string",
        ),
        (
            with("message_id", json!(7)),
            "invalid params: message_id must be a string",
        ),
        (
            with("hop", json!("1")),
            "invalid params: hop must be an integer",
        ),
        (
            with("hop", json!(1.5)),
            "invalid params: hop must be an integer",
        ),
        (
            with("sender", json!("me")),
            "invalid params: sender must be an object",
        ),
        (
            with("sender.instance_id", json!(12)),
            "invalid params: sender.instance_id must be a string",
        ),
        (
            with("mode", json!(["queue"])),
            "invalid params: mode must be a string",
        ),
        (
            ms(json!("text")),
            "invalid params: params must be an object",
        ),
    ] {
        check(&mut c, &line, json!(14), -32602, Some(msg));
    }
    // A null body is a missing one, not a value.
    check(
        &mut c,
        &with("body", Value::Null),
        json!(14),
        -32602,
        Some("invalid params: body is missing"),
    );
    // Blank lines are skipped without an answer.
    c.send_raw(b"\n   \n");
    assert_pings(&mut c, 1);
    // Nothing above was stored.
    assert_eq!(inst.queued(&mut c), 0);
}

#[test]
fn notifications_and_replies_get_no_answer_and_pipelining_keeps_order() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    // A notification before initialize gets nothing either.
    let mut c = RawClient::connect(&inst.socket).unwrap();
    c.send_line(br#"{"jsonrpc":"2.0","method":"ping"}"#);
    c.initialize();

    for silent in [
        r#"{"jsonrpc":"2.0","method":"ping"}"#,
        r#"{"jsonrpc":"2.0","method":"no/such","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"ping","params":[1]}"#,
        r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":98,"error":{"code":-1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":"unknown","result":null}"#,
        r#"{"result":5}"#,
        r#"{"error":"malformed"}"#,
    ] {
        c.send_line(silent.as_bytes());
        let r = c.call(1, "ping", json!({}));
        assert_eq!(r["result"]["status"], "pong", "after {silent}: {r}");
    }
    // A notification of message/send is not a delivery that gets answered,
    // and it is not stored either.
    let note = json!({"jsonrpc": "2.0", "method": "message/send", "params": inst.msg("n1", "x")});
    c.send_line(note.to_string().as_bytes());
    assert_pings(&mut c, 2);

    // Several requests in one write are answered in order, errors included.
    let mut batch = Vec::new();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 20, "method": "ping"}),
        json!({"jsonrpc": "2.0", "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 21, "method": "agent/info", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 22, "method": "no/such"}),
        json!({"jsonrpc": "2.0", "id": 23, "method": "message/send", "params": inst.msg("p1", "x")}),
        json!({"jsonrpc": "2.0", "id": 24, "method": "message/send", "params": inst.msg("p1", "x")}),
        json!({"jsonrpc": "2.0", "id": "last", "method": "ping"}),
    ];
    for l in &lines {
        batch.extend_from_slice(l.to_string().as_bytes());
        batch.push(b'\n');
    }
    batch.extend_from_slice(b"{broken\n");
    c.send_raw(&batch);
    let got: Vec<Value> = (0..7).map(|_| read_obj(&mut c)).collect();
    let ids: Vec<Value> = got.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(
        ids,
        vec![
            json!(20),
            json!(21),
            json!(22),
            json!(23),
            json!(24),
            json!("last"),
            Value::Null
        ],
        "{got:?}"
    );
    assert_eq!(got[0]["result"]["status"], "pong");
    assert_eq!(got[1]["result"]["queue"]["queued"], 0, "{}", got[1]);
    assert_eq!(got[2]["error"]["code"], -32601);
    assert_accepted(&got[3]["result"], 1);
    assert_eq!(got[4]["result"]["status"], "duplicate");
    assert_eq!(got[6]["error"]["code"], -32700);
    assert_pings(&mut c, 3);
    assert_eq!(inst.queued(&mut c), 1);
}

#[test]
fn frame_limit_is_exact_and_closes_the_connection() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_BYTES", "1024")], &[]);

    let padded = |len: usize| {
        let head = br#"{"jsonrpc":"2.0","id":30,"method":"ping","params":{"#;
        let tail = b"}}";
        let mut line = head.to_vec();
        line.resize(len - tail.len(), b' ');
        line.extend_from_slice(tail);
        assert_eq!(line.len(), len);
        line
    };

    let mut c = inst.client();
    c.send_line(&padded(1024));
    let v = read_obj(&mut c);
    assert_eq!(v["id"], 30, "{v}");
    assert_eq!(v["result"]["status"], "pong", "{v}");
    // Two maximal lines in one write.
    let mut two = padded(1024);
    two.push(b'\n');
    two.extend_from_slice(&two.clone());
    c.send_raw(&two);
    assert_eq!(read_obj(&mut c)["id"], 30);
    assert_eq!(read_obj(&mut c)["id"], 30);
    assert_pings(&mut c, 1);

    c.send_line(&padded(1025));
    let v = read_obj(&mut c);
    assert_error(
        &v,
        Value::Null,
        -32600,
        "frame too large: a line may hold at most 1024 bytes",
    );
    assert_eq!(c.read_line(), None, "the connection must close");

    // A line that never ends is cut off at the bound, without waiting for
    // its newline; the instance keeps serving others.
    let mut c = inst.client();
    let _ = c.try_send_raw(&vec![b' '; 64 * 1024]);
    let v = read_obj(&mut c);
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(c.read_line(), None, "the connection must close");
    assert_pings(&mut inst.client(), 2);
}

#[test]
fn missed_line_deadline_gets_one_error_then_close() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_IO_TIMEOUT", "0.3")], &[]);
    let want = "read timeout: a line must complete within 0.3 s of its first byte";

    // After initialize.
    let mut c = inst.client();
    let start = Instant::now();
    c.send_raw(br#"{"jsonrpc":"2.0","id":1,"me"#);
    let v = read_obj(&mut c);
    let took = start.elapsed();
    assert_error(&v, Value::Null, -32000, want);
    assert_eq!(c.read_line(), None, "the connection must close");
    assert!(took >= Duration::from_millis(250), "error after {took:?}");

    // A line that keeps trickling in on a fresh connection, before anything
    // else, still has to finish within the deadline of its first byte:
    // slow_clients_do_not_delay_others_and_are_dropped.

    // A complete line between pauses is fine: the deadline is per line.
    // Each pause lasts until a connection that began a line after c's
    // last one has been cut off at its deadline: a deadline counted from
    // c's last line would have passed by then.
    let mut c = inst.client();
    for n in 2..=3 {
        let mut later = inst.client();
        later.send_raw(br#"{"jsonrpc":"2.0","id":1,"me"#);
        assert_error(&read_obj(&mut later), Value::Null, -32000, want);
        assert_pings(&mut c, n);
    }
}

#[test]
fn connections_past_the_cap_get_one_error_then_close() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve_with(&ws, &[("BATON_MAX_CONNECTIONS", "2")], &[]);
    // Subscribers, which never give way to a new connection (an idle
    // connection that is not one does: limits::connections_that_*).
    let mut a = inst.client();
    let mut b = inst.client();
    for c in [&mut a, &mut b] {
        let r = c.call(9, "events/subscribe", json!({}));
        assert_eq!(r["result"]["subscribed"], true, "{r}");
    }

    let mut third = RawClient::connect(&inst.socket).unwrap();
    let mut v = read_obj(&mut third);
    // It names the instance, which is alive.
    let data = v["error"].as_object_mut().unwrap().remove("data").unwrap();
    assert_eq!(data, json!({"instance_id": inst.id, "state": "ready"}));
    assert_error(
        &v,
        Value::Null,
        -32001,
        "too many connections: the limit is 2",
    );
    assert_eq!(third.read_line(), None, "the connection must close");
    // The refused one does not count: the first two still work.
    assert_pings(&mut a, 1);

    // Once one leaves, a new connection is served again.
    drop(b);
    let mut served = wait_for("a free connection slot", Duration::from_secs(10), || {
        let mut c = RawClient::connect(&inst.socket).unwrap();
        let mut hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocol_version": 1, "client": {"name": "t", "version": "0"}}})
        .to_string()
        .into_bytes();
        hello.push(b'\n');
        // A refused connection may be closed before this write lands; its
        // error line is still there to read.
        let _ = c.try_send_raw(&hello);
        let v = read_obj(&mut c);
        if v.get("result").is_some() {
            return Some(c);
        }
        assert_eq!(v["error"]["code"], -32001, "{v}");
        None
    });
    assert_pings(&mut served, 2);
    assert_pings(&mut a, 3);
}

// ---------------------------------------------------------------------------
// C. Slow and vanishing clients
// ---------------------------------------------------------------------------

/// What a trickling client saw: the bytes it received, and when (from its
/// first byte sent, and as an instant) the server hung up.
struct Trickled {
    received: Vec<u8>,
    closed_after: Option<Duration>,
    closed_at: Option<Instant>,
}

/// Connects and sends one byte of a ping per second, reading between bytes,
/// until the server hangs up or 10 s pass.
fn trickle(socket: PathBuf, ready: Arc<Barrier>) -> Trickled {
    let mut s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut received = Vec::new();
    let _ = s.write_all(&line[..1]);
    let start = Instant::now();
    ready.wait();
    let mut next = 1;
    while start.elapsed() < Duration::from_secs(10) {
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => {
                return Trickled {
                    received,
                    closed_after: Some(start.elapsed()),
                    closed_at: Some(Instant::now()),
                };
            }
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if next < line.len() {
                    let _ = s.write_all(&line[next..next + 1]);
                    next += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                return Trickled {
                    received,
                    closed_after: Some(start.elapsed()),
                    closed_at: Some(Instant::now()),
                };
            }
            // A read with a timeout returns EINTR when the whole process is
            // stopped and resumed (a frozen container, say), with no
            // signal handler involved: read again.
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("trickler read: {e}"),
        }
    }
    Trickled {
        received,
        closed_after: None,
        closed_at: None,
    }
}

#[test]
fn slow_clients_do_not_delay_others_and_are_dropped() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let ready = Arc::new(Barrier::new(11));
    // Before any trickler's first byte: its 2 s deadline ends after this.
    let began = Instant::now();
    let tricklers: Vec<_> = (0..10)
        .map(|_| {
            let socket = inst.socket.clone();
            let ready = Arc::clone(&ready);
            thread::spawn(move || trickle(socket, ready))
        })
        .collect();
    ready.wait();

    // While all ten are mid-line, an eleventh client is served, again and
    // again: each answer comes before the first of them is dropped (at
    // its line's deadline), not after it, however slow the machine.
    let mut c = inst.client();
    assert_pings(&mut c, 1);
    let mut answered = vec![(1, Instant::now())];
    let mut n = 2;
    while began.elapsed() < Duration::from_millis(1500) {
        assert_pings(&mut c, n);
        answered.push((n, Instant::now()));
        let r = send(&mut c, inst.msg(&format!("fast-{n}"), "task"));
        assert_eq!(r["status"], "accepted", "{r}");
        n += 1;
        thread::sleep(Duration::from_millis(200));
    }

    let mut first_drop: Option<Instant> = None;
    for t in tricklers {
        let got = t.join().expect("trickler panicked");
        let after = got
            .closed_after
            .expect("a trickler was still connected after 10 s");
        first_drop = first_drop.min(got.closed_at).or(got.closed_at);
        assert!(
            after >= Duration::from_millis(1900),
            "dropped before the 2 s deadline: {after:?}"
        );
        let text = String::from_utf8(got.received).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "exactly one error line: {text:?}");
        let v: Value = serde_json::from_str(lines[0]).unwrap();
        assert_error(
            &v,
            Value::Null,
            -32000,
            "read timeout: a line must complete within 2 s of its first byte",
        );
    }
    let first_drop = first_drop.expect("a drop");
    for (n, at) in &answered {
        assert!(
            *at < first_drop,
            "ping {n} was answered only after a slow client was dropped"
        );
    }
    // The patient client was never disturbed.
    assert_pings(&mut c, 100);
}

#[test]
fn a_client_that_leaves_without_reading_does_not_hurt_the_instance() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &[]);

    // A request, then gone before the answer.
    let mut c = inst.client();
    let p = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": inst.msg("gone-1", "task")});
    c.send_line(p.to_string().as_bytes());
    drop(c);

    // Many pipelined requests whose answers nobody reads, then gone.
    let mut c = inst.client();
    let mut batch = Vec::new();
    for i in 0..500 {
        let l = json!({"jsonrpc": "2.0", "id": i, "method": "agent/info"});
        batch.extend_from_slice(l.to_string().as_bytes());
        batch.push(b'\n');
    }
    let _ = c.try_send_raw(&batch);
    c.stream().shutdown(std::net::Shutdown::Both).unwrap();
    drop(c);

    // A half-sent line, then gone.
    let mut c = inst.client();
    c.send_raw(br#"{"jsonrpc":"2.0","id":1,"#);
    drop(c);

    let mut c = inst.client();
    assert_pings(&mut c, 1);
    // The task sent by the client that left was still accepted.
    wait_until(
        "the abandoned send to be stored",
        Duration::from_secs(5),
        || inst.queued(&mut c) == 1,
    );
    assert_eq!(
        send(&mut c, inst.msg("gone-1", "task"))["status"],
        "duplicate"
    );
    assert!(inst.is_running(), "the instance died:\n{}", inst.stderr());
    assert_pings(&mut inst.client(), 2);
}

// ---------------------------------------------------------------------------
// Failures of the receiver's own storage, and sender-side refusals
// ---------------------------------------------------------------------------

/// The one spool directory under the test's state home.
fn spool_dir(env: &Env) -> PathBuf {
    let root = env.state.join("baton/spool");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn a_spool_that_cannot_store_is_an_internal_error_not_an_acceptance() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "brk"]);
    let mut c = inst.client();
    // tmp/ becomes a file: creating the task file fails with ENOTDIR even
    // for root, for whom permission bits mean nothing.
    let tmp = spool_dir(&env).join("tmp");
    fs::remove_dir(&tmp).unwrap();
    fs::write(&tmp, b"").unwrap();
    let r = c.call(9, "message/send", inst.msg("lost-1", "work"));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("internal error: the spool could not store the task: ")
            && msg.ends_with("; the task was not accepted"),
        "{msg}"
    );
    // The connection stays usable, and once storage works again the same id
    // is accepted: the failed attempt left no trace.
    fs::remove_file(&tmp).unwrap();
    fs::create_dir(&tmp).unwrap();
    assert_accepted(&send(&mut c, inst.msg("lost-1", "work")), 1);
}

#[test]
fn an_id_whose_record_cannot_be_read_is_not_called_a_duplicate() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "rec"]);
    let mut c = inst.client();
    assert_accepted(&send(&mut c, inst.msg("r-1", "job")), 1);
    let claimed = c.call(2, "inbox/claim", json!({}));
    assert_eq!(claimed["result"]["status"], "claimed", "{claimed}");
    let done = c.call(3, "inbox/complete", json!({"message_id": "r-1"}));
    assert_eq!(done["result"]["status"], "completed", "{done}");
    drop(c);
    // SIGTERM and wait: the next instance needs the spool's lock.
    drop(inst);
    let receipt = spool_dir(&env).join("done/r-1.json");
    fs::write(&receipt, b"{garbage").unwrap();
    let inst = env.serve(&ws, &["--name", "rec"]);
    let mut c = inst.client();
    assert_refused(
        &send(&mut c, inst.msg("r-1", "job")),
        "invalid",
        "message_id was accepted before, but its stored record cannot be read to compare bodies",
    );
}

#[test]
fn send_from_inside_an_instance_to_itself_is_refused_by_the_sender() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "selfie"]);
    let sock = inst.socket.display().to_string();
    let out = env.run_with(
        &[("BATON_SOCKET", &sock)],
        None,
        &["send", "selfie", "hi"],
        None,
    );
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: not sent: denied: a send to this instance itself is refused\n"
    );
    let mut c = inst.client();
    assert_eq!(inst.queued(&mut c), 0);
}

#[test]
fn help_works_with_a_broken_environment() {
    let env = Env::new();
    let out = env.run_with(&[("BATON_MAX_QUEUE", "0")], None, &["help"], None);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("baton: hand tasks"), "{out:?}");
    let out = env.run_with(&[("BATON_MAX_QUEUE", "0")], None, &["list"], None);
    assert_eq!(out.status, 2, "{out:?}");
}

/// A body is the string its JSON spells, whatever the escapes: a task sent
/// with escapes other than baton's own is stored, announced and claimed as
/// that string (the task file and the event copy the line's spelling), and
/// the same string spelled baton's way is the same body.
#[test]
fn a_body_is_its_string_whatever_its_escapes() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut c = inst.client();
    let body = "A\u{e9}\n\"\u{1b}\u{7f}";
    let spelled = r#""\u0041\u00e9\n\"\u001b\u007F""#;
    let params = inst.msg("e1", "BODY").to_string();
    let params = params.replace(r#""BODY""#, spelled);
    c.send_line(
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"message/send","params":{params}}}"#)
            .as_bytes(),
    );
    let r = c.read_json();
    assert_accepted(&r["result"], 1);
    assert_refused(&send(&mut c, inst.msg("e1", body)), "duplicate", DUPLICATE);

    let spool = spool_dir(&env);
    let accepted = || {
        transcript(&spool)
            .into_iter()
            .find(|e| e["kind"] == "message.accepted" && e["message_id"] == "e1")
    };
    wait_until(
        "the acceptance in the transcript",
        Duration::from_secs(10),
        || accepted().is_some(),
    );
    assert_eq!(accepted().unwrap()["body"], body);

    let r = c.call(3, "inbox/claim", json!({}));
    assert_eq!(r["result"]["task"]["message_id"], "e1", "{r}");
    assert_eq!(r["result"]["task"]["body"], body, "{r}");
}
