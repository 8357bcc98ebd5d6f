//! Issue 20, the optional permission relay: `baton mcp` declares
//! `capabilities.experimental["claude/channel/permission"]`, hands each
//! `notifications/claude/channel/permission_request` from its host to its
//! instance (`permission/ask`), where a controller decides as on a task,
//! and tells the host the decision as
//! `notifications/claude/channel/permission` (`allow` or `deny`), once.
//! `baton watch --approve` shows the tool call and answers it.

use super::{Mcp, NEWEST};
use crate::util::{Env, RawClient, wait_until};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const REQUEST: &str = "notifications/claude/channel/permission_request";
const VERDICT: &str = "notifications/claude/channel/permission";
const WAIT: Duration = Duration::from_secs(15);

fn ask(m: &mut Mcp, request_id: &str, tool: &str) {
    let note = json!({"jsonrpc": "2.0", "method": REQUEST, "params": {
        "request_id": request_id, "tool_name": tool,
        "description": format!("{tool} in the workspace"),
        "input_preview": "{\"command\":\"rm -rf build\"}"}});
    m.send_line(&note.to_string());
}

/// Reads `c` until an `approval/request` about `request_id`.
fn request_about(c: &mut RawClient, request_id: &str) -> Value {
    loop {
        let m = c.read_json();
        if m["method"] == "approval/request" && m["params"]["request_id"] == request_id {
            return m;
        }
    }
}

/// A session with a controller subscribed to its instance.
fn session(env: &Env) -> (Mcp, RawClient, PathBuf) {
    let ws = env.workspace("perm");
    let mut m = Mcp::start_hosted(env, &ws, &["--name", "perm"]);
    let init = m.initialize(NEWEST);
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel/permission"],
        json!({}),
        "{init}"
    );
    let (_, manifest) = m.manifest(env);
    let socket = PathBuf::from(manifest["socket"].as_str().unwrap());
    let mut ctl = RawClient::connect(&socket).unwrap();
    ctl.initialize();
    let sub = ctl.call(1, "events/subscribe", json!({"controller": true}));
    assert_eq!(sub["result"]["subscribed"], true, "{sub}");
    (m, ctl, socket)
}

#[test]
fn a_controller_allows_or_denies_the_hosts_tool_calls() {
    let env = Env::new();
    let (mut m, mut ctl, socket) = session(&env);

    // Denied by a reply to the request.
    ask(&mut m, "tbxkq", "Bash");
    let req = request_about(&mut ctl, "tbxkq");
    let p = &req["params"];
    assert_eq!(p["tool_name"], "Bash", "{req}");
    assert_eq!(p["description"], "Bash in the workspace", "{req}");
    assert_eq!(
        p["input_preview"], "{\"command\":\"rm -rf build\"}",
        "{req}"
    );
    assert_eq!(
        p["pid"],
        json!(m.pid()),
        "the asking connection is baton mcp's: {req}"
    );
    // Who asked: the host's name from its initialize, and its pid (the
    // shell that runs baton mcp for this test).
    assert_eq!(p["host"], "baton-tests", "{req}");
    assert_eq!(p["host_pid"], json!(m.host_pid()), "{req}");
    assert!(p.get("message_id").is_none(), "{req}");
    assert!(
        p["approval_id"]
            .as_str()
            .is_some_and(|a| a.starts_with("ask-")),
        "{req}"
    );
    let reply = json!({"jsonrpc": "2.0", "id": req["id"],
                       "result": {"decision": "deny", "digest": p["digest"], "by": "test"}});
    ctl.send_line(reply.to_string().as_bytes());
    let v = m.wait_note(VERDICT, |p| p["request_id"] == "tbxkq");
    assert_eq!(
        v["params"],
        json!({"request_id": "tbxkq", "behavior": "deny"}),
        "{v}"
    );

    // Allowed by approval/respond, from any connection, by the approval's
    // id and the digest of what it shows.
    ask(&mut m, "abcde", "Write");
    let req = request_about(&mut ctl, "abcde");
    let (approval_id, digest) = (&req["params"]["approval_id"], &req["params"]["digest"]);
    let mut other = RawClient::connect(&socket).unwrap();
    other.initialize();
    let r = other.call(
        2,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": digest, "decision": "approve"}),
    );
    assert_eq!(
        r["result"],
        json!({"status": "approved", "approval_id": approval_id, "request_id": "abcde"}),
        "{r}"
    );
    let v = m.wait_note(VERDICT, |p| p["request_id"] == "abcde");
    assert_eq!(v["params"]["behavior"], "allow", "{v}");
    // Decided once: a second answer is refused, and the host hears no more.
    let r = other.call(
        3,
        "approval/respond",
        json!({"approval_id": approval_id, "digest": digest, "decision": "deny"}),
    );
    assert_eq!(r["result"]["status"], "invalid", "{r}");
    assert_eq!(
        r["result"]["reason"],
        format!("no approval {} is waiting", approval_id.as_str().unwrap()),
        "{r}"
    );

    // A request id the instance cannot take is not relayed: said on
    // stderr, and no controller is asked.
    ask(&mut m, "not an id", "Bash");
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    wait_until("the refusal on stderr", WAIT, || {
        m.stderr().contains("not relayed")
    });
    assert!(
        m.stderr()
            .contains("request_id must be 1 to 64 ASCII letters"),
        "{}",
        m.stderr()
    );
    assert!(
        !m.notes
            .iter()
            .any(|n| n["method"] == VERDICT && n["params"]["request_id"] == "abcde"),
        "abcde was answered twice: {:?}",
        m.notes
    );

    // The transcript says who decided.
    let log = env.run(&["log", "perm", "-n", "20"]);
    let out = &log.stdout;
    assert!(out.contains("tool call tbxkq deny by test (pid "), "{out}");
    assert!(
        out.contains("tool call abcde approve by approval/respond (pid "),
        "{out}"
    );
    assert!(
        out.contains("tool call abcde (Write) asked by baton mcp (pid "),
        "{out}"
    );
    drop((ctl, other));
    m.finish();
}

/// `baton watch --approve` shows the tool call and what it would do, and
/// a piped `y` allows it. The watcher subscribes after the request came:
/// a late controller is asked about what still waits.
#[test]
fn watch_approve_shows_a_tool_call_and_allows_it() {
    let env = Env::new();
    let (mut m, ctl, _) = session(&env);
    drop(ctl);
    ask(&mut m, "qwert", "Bash");
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    let err_path = env.root.join("watch.err");
    let mut watch = env
        .cmd()
        .args(["watch", "--approve", "perm"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    watch.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    let v = m.wait_note(VERDICT, |p| p["request_id"] == "qwert");
    assert_eq!(v["params"]["behavior"], "allow", "{v}");
    // It says so once its reply is written, which may be after the host
    // heard of it.
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    wait_until("watch to say it approved", WAIT, || {
        stderr().contains("baton: approve qwert")
    });
    // Stopped by pid: it would follow the instance until it stops.
    let _ = watch.kill();
    let _ = watch.wait();
    let err = stderr();
    assert!(
        err.contains("tool call qwert waits for permission"),
        "{err}"
    );
    assert!(err.contains("  tool:  Bash"), "{err}");
    let asked = format!(
        "  asked: by baton-tests (pid {}) through baton mcp (pid {})\n",
        m.host_pid(),
        m.pid()
    );
    assert!(err.contains(&asked), "{err}");
    assert!(
        err.contains("  input: {\"command\":\"rm -rf build\"}"),
        "{err}"
    );
    assert!(err.contains("baton: approve qwert"), "{err}");
    m.finish();
}
