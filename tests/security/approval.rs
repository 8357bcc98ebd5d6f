//! An operator's answer is bound to what the operator was shown: each
//! waiting approval has an id baton chose (`approval_id`) and the digest
//! of its text, a controller answers by both, and `baton mcp` tells its
//! host only the answer to the `permission/ask` it made itself
//! (docs/protocol.md, `approval/request`; docs/mcp.md, *Tool calls an
//! operator allows*).

use crate::mcp::{Mcp, NEWEST};
use crate::util::{Env, RawClient, event_is, wait_event};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const REQUEST: &str = "notifications/claude/channel/permission_request";
const VERDICT: &str = "notifications/claude/channel/permission";
/// How long one answer or request may take on a busy machine.
const WAIT: Duration = Duration::from_secs(20);
/// How many requests wait at once before the oldest goes.
const MAX_WAITING: usize = 32;

/// The host relays one of its permission prompts.
fn host_asks(m: &mut Mcp, request_id: &str, tool: &str, input: &str) {
    let note = json!({"jsonrpc": "2.0", "method": REQUEST, "params": {
        "request_id": request_id, "tool_name": tool,
        "description": format!("{tool} for the session"), "input_preview": input}});
    m.send_line(&note.to_string());
}

/// A `permission/ask` from a connection of its own; whether it waits.
/// Refused (by a status or an error, as a rule of who may ask would) is
/// an answer too: the caller then goes through the host.
fn other_asks(c: &mut RawClient, id: u64, request_id: &str, tool: &str, input: &str) -> bool {
    let r = c.call(
        id,
        "permission/ask",
        json!({"request_id": request_id, "tool_name": tool,
               "description": format!("{tool} for the session"), "input_preview": input}),
    );
    r["result"]["status"] == "waiting"
}

/// Reads `ctl` until the `approval/request` about `request_id`.
fn request_about(ctl: &mut RawClient, request_id: &str) -> Value {
    loop {
        let m = ctl.read_json();
        if m["method"] == "approval/request" && m["params"]["request_id"] == request_id {
            return m;
        }
    }
}

/// A controller's reply to `req`, carrying the digest it was shown.
fn reply(ctl: &mut RawClient, req: &Value, decision: &str, digest: &Value) {
    let r = json!({"jsonrpc": "2.0", "id": req["id"],
                   "result": {"decision": decision, "digest": digest, "by": "test"}});
    ctl.send_line(r.to_string().as_bytes());
}

/// A `baton mcp` session, initialized, and a controller on its instance.
fn session(env: &Env) -> (Mcp, RawClient, PathBuf) {
    let ws = env.workspace("host");
    let mut m = Mcp::start_hosted(env, &ws, &["--name", "host"]);
    m.initialize(NEWEST);
    let (_, manifest) = m.manifest(env);
    let socket = PathBuf::from(manifest["socket"].as_str().unwrap());
    let mut ctl = RawClient::connect_timeout(&socket, WAIT).unwrap();
    ctl.initialize();
    let sub = ctl.call(1, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["result"]["subscribed"], true, "{sub}");
    (m, ctl, socket)
}

/// Regression: the host's `bbbbb` (`Bash: dropdb prod`) was pushed out by
/// 32 newer requests, `bbbbb` was asked again as `Read README.md`, the
/// operator allowed that, and `baton mcp`, matching the decision by the
/// host's request id, told the host to allow the drop.
#[test]
fn an_evicted_permission_request_never_gets_an_answer_given_for_other_text() {
    let env = Env::new();
    let (mut host, mut ctl, socket) = session(&env);
    host_asks(&mut host, "bbbbb", "Bash", "{\"command\":\"dropdb prod\"}");
    request_about(&mut ctl, "bbbbb");

    // Push it out: from another connection where that may ask, else from
    // the host's own session.
    let mut other = RawClient::connect_timeout(&socket, WAIT).unwrap();
    other.initialize();
    let mut last = String::new();
    for i in 0..MAX_WAITING {
        let id = format!("f{i:04}");
        if !other_asks(&mut other, 10 + i as u64, &id, "Read", "{}") {
            host_asks(&mut host, &id, "Read", "{}");
        }
        last = id;
    }
    request_about(&mut ctl, &last);

    // The same request id, other text; then a marker from the host, whose
    // request the controller reads after whatever the re-ask made.
    let readme = "{\"file_path\":\"README.md\"}";
    if !other_asks(&mut other, 99, "bbbbb", "Read", readme) {
        host_asks(&mut host, "bbbbb", "Read", readme);
    }
    host_asks(&mut host, "zzzzz", "Bash", "{\"command\":\"true\"}");
    let marker = loop {
        let m = ctl.read_json();
        if m["method"] != "approval/request" {
            continue;
        }
        let p = &m["params"];
        if p["request_id"] == "bbbbb" {
            // The operator allows what it was shown: reading README.md.
            assert_eq!(p["tool_name"], "Read", "{m}");
            assert_eq!(p["input_preview"], readme, "{m}");
            reply(&mut ctl, &m, "approve", &p["digest"]);
        } else if p["request_id"] == "zzzzz" {
            break m;
        }
    };
    // On one connection, replies are decided in order: the re-ask's
    // before the marker's, and the host hears of the marker after
    // anything decided before it.
    reply(&mut ctl, &marker, "deny", &marker["params"]["digest"]);
    let v = host.wait_note(VERDICT, |p| p["request_id"] == "zzzzz");
    assert_eq!(v["params"]["behavior"], "deny", "{v}");
    let for_bbbbb: Vec<&Value> = host
        .notes
        .iter()
        .filter(|n| n["method"] == VERDICT && n["params"]["request_id"] == "bbbbb")
        .collect();
    assert!(
        for_bbbbb.is_empty(),
        "the host was answered for bbbbb (Bash: dropdb prod) by a decision on other text: {for_bbbbb:?}\nstderr:\n{}",
        host.stderr()
    );
    drop((ctl, other));
    host.finish();
}

/// An answer whose digest is not that of what waits under its id decides
/// nothing, by a reply or by `approval/respond`, for a tool call and for a
/// task; the right digest then decides.
#[test]
fn an_answer_with_a_wrong_digest_decides_nothing() {
    let env = Env::new();
    let (mut host, mut ctl, socket) = session(&env);
    host_asks(&mut host, "ccccc", "Bash", "{\"command\":\"ls\"}");
    let req = request_about(&mut ctl, "ccccc");
    let p = &req["params"];
    let approval_id = p["approval_id"]
        .as_str()
        .expect("an approval_id")
        .to_string();
    let digest = p["digest"].as_str().expect("a digest").to_string();
    assert_eq!(digest.len(), 64, "{req}");
    let wrong = json!("0".repeat(64));

    // A reply with another digest is dropped; a notice says why. The
    // reply reaches the instance before the ping on its connection, and
    // so before any call made after it.
    reply(&mut ctl, &req, "approve", &wrong);
    assert!(ctl.call(2, "ping", json!({})).get("result").is_some());
    let notice = loop {
        let m = ctl.read_json();
        let text = m["params"]["text"].as_str().unwrap_or("");
        if m["params"]["kind"] == "notice" && text.contains("decided nothing") {
            break m;
        }
    };
    assert_eq!(
        notice["params"]["text"],
        format!(
            "a reply to {} decided nothing: digest does not match what approval {approval_id} shows",
            req["id"].as_str().unwrap()
        ),
        "{notice}"
    );
    let mut c = RawClient::connect_timeout(&socket, WAIT).unwrap();
    c.initialize();
    let r = c.call(
        2,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": wrong, "decision": "approve"}),
    );
    assert_eq!(
        r["result"],
        json!({"status": "invalid", "approval_id": approval_id,
               "reason": format!("digest does not match what approval {approval_id} shows")}),
        "{r}"
    );
    // Without the id and digest, an answer is not taken at all.
    let r = c.call(
        3,
        "approval/respond",
        json!({"request_id": "ccccc", "decision": "approve"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Still waiting: the right digest decides it, and the host hears it.
    let r = c.call(
        4,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": digest, "decision": "approve"}),
    );
    assert_eq!(
        r["result"],
        json!({"status": "approved", "approval_id": approval_id, "request_id": "ccccc"}),
        "{r}"
    );
    let v = host.wait_note(VERDICT, |p| p["request_id"] == "ccccc");
    assert_eq!(v["params"]["behavior"], "allow", "{v}");
    assert_eq!(
        host.notes.iter().filter(|n| n["method"] == VERDICT).count(),
        0,
        "answered more than once: {:?}",
        host.notes
    );
    drop((ctl, c));
    host.finish();

    // A task under --approve ask.
    let inst = env.serve(
        &env.workspace("srv"),
        &["--approve", "ask", "--name", "srv"],
    );
    let mut c = inst.client();
    let r = c.call(5, "message/send", inst.msg("t-1", "rotate the logs"));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let asked = wait_event(&inst.spool(), "approval.requested t-1", WAIT, |e| {
        event_is(e, "approval.requested", "t-1")
    });
    let approval_id = asked["approval_id"].as_str().expect("an approval_id");
    let r = c.call(
        6,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": wrong, "decision": "approve"}),
    );
    assert_eq!(r["result"]["status"], "invalid", "{r}");
    let st = c.call(7, "task/status", json!({"message_id": "t-1"}));
    assert_eq!(st["result"]["status"], "awaiting_approval", "{st}");
    let r = c.call(
        8,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": asked["digest"], "decision": "deny"}),
    );
    assert_eq!(
        r["result"],
        json!({"status": "denied", "approval_id": approval_id, "message_id": "t-1"}),
        "{r}"
    );
}
