//! The sender learns why (issue 31): the task of a failed or timed-out
//! turn keeps how its handler ended (`exit_status` or `signal`) and the
//! end of its stderr (`stderr_tail`: at most 2 KiB, its last bytes,
//! escaped as the view escapes a peer's text) in its receipt, its
//! `task.ended` and its `task/status`; `send --wait` prints them after
//! its line, `--json` has them, and so does MCP's `task_status`. A pull
//! agent's failure ran no handler: the members are absent.

use crate::mcp::{Mcp, NEWEST, text};
use crate::util::{self, Env, RawClient, event_is as is};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Bound for anything that should take well under a second.
const WAIT: Duration = Duration::from_secs(15);

/// A handler that reads its task, says why on stderr and exits 1.
const FAILING: &str = "cat >/dev/null; echo 'failing on purpose' >&2; exit 1";

/// Waits for the `task.ended` of `id` and returns it.
#[track_caller]
fn wait_ended(spool: &Path, id: &str) -> Value {
    util::wait_event(spool, &format!("task.ended for {id}"), WAIT, |e| {
        is(e, "task.ended", id)
    })
}

/// `task/status` for `id`: the result object.
fn status(c: &mut RawClient, id: &str) -> Value {
    let r = c.call(7, "task/status", json!({"message_id": id}));
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("task/status {id}: no result: {r}"))
}

/// The receipt of `id` in `spool`.
fn receipt(spool: &Path, id: &str) -> Value {
    crate::util::receipt(spool, id).unwrap_or_else(|| panic!("no receipt of {id}"))
}

/// The three members, as one value to compare.
fn why(v: &Value) -> Value {
    json!([v.get("exit_status"), v.get("signal"), v.get("stderr_tail")])
}

#[test]
fn send_wait_says_the_exit_status_and_the_end_of_stderr() {
    let env = Env::new();
    let inst = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", FAILING],
    );

    let out = env.run(&["send", "--wait", "--message-id", "m-1", "beta", "FAILME"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "baton: accepted: message m-1 to beta; waiting for it to end\n\
         baton: message m-1 ended failed at beta (exit status 1)\n\
         baton: the handler's stderr ended with:\n\
         \x20 failing on purpose\n"
    );

    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "m-2",
        "beta",
        "FAILME",
    ]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(v["reply"], Value::Null, "{v}");
    assert_eq!(why(&v), json!([1, null, "failing on purpose\n"]), "{v}");

    // The receipt keeps it; a signal that did not end it is absent there.
    let r = receipt(&inst.spool(), "m-1");
    assert_eq!(why(&r), json!([1, null, "failing on purpose\n"]), "{r}");

    // A task that did not fail has none of it, in `--json` as null.
    let ok = env.serve(
        &env.workspace("gamma"),
        &[
            "--name",
            "gamma",
            "--exec",
            "cat >/dev/null; echo noted >&2",
        ],
    );
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "m-3",
        "gamma",
        "fine",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (&v["outcome"], why(&v)),
        (&json!("done"), json!([null, null, null]))
    );
    assert_eq!(why(&receipt(&ok.spool(), "m-3")), json!([null, null, null]));
}

#[test]
fn a_handler_killed_by_a_signal_is_said_with_its_signal() {
    let env = Env::new();
    let _inst = env.serve(
        &env.workspace("beta"),
        &[
            "--name",
            "beta",
            "--exec",
            "cat >/dev/null; echo dying >&2; kill -9 $$",
        ],
    );
    let out = env.run(&["send", "--wait", "--message-id", "k-1", "beta", "die"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.ends_with(
            "baton: message k-1 ended failed at beta (killed by signal 9)\n\
             baton: the handler's stderr ended with:\n\
             \x20 dying\n"
        ),
        "{}",
        out.stderr
    );
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "k-2",
        "beta",
        "die",
    ]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(why(&v), json!([null, 9, "dying\n"]), "{v}");
}

/// `task/status` on the socket and `task.ended` carry the members for a
/// failed and a timed-out turn; a pull agent's failure has none.
#[test]
fn task_status_and_task_ended_say_why_and_a_pull_agent_s_failure_does_not() {
    let env = Env::new();
    let exec = "cat >/dev/null; case \"$BATON_MESSAGE_ID\" in \
                slow*) echo 'too slow' >&2; sleep 30 ;; \
                *) echo 'failing on purpose' >&2; exit 3 ;; esac";
    let inst = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--turn-timeout", "1", "--exec", exec],
    );
    let spool = inst.spool();
    let mut c = inst.client();

    assert_eq!(inst.send(&mut c, "f-1", "fail")["status"], "accepted");
    let ended = wait_ended(&spool, "f-1");
    assert_eq!(
        ended,
        json!({"seq": ended["seq"], "time": ended["time"], "kind": "task.ended",
               "message_id": "f-1", "outcome": "failed", "reply": null,
               "exit_status": 3, "stderr_tail": "failing on purpose\n"})
    );
    let s = status(&mut c, "f-1");
    assert_eq!(
        s,
        json!({"message_id": "f-1", "status": "failed", "finished_at": s["finished_at"],
               "accepted_at": s["accepted_at"],
               "reply": null, "exit_status": 3, "stderr_tail": "failing on purpose\n"})
    );
    assert!(s["accepted_at"].is_u64(), "{s}");

    // --turn-timeout ends it with SIGTERM to its group.
    assert_eq!(inst.send(&mut c, "slow-1", "wait")["status"], "accepted");
    let ended = wait_ended(&spool, "slow-1");
    assert_eq!(ended["outcome"], "timeout", "{ended}");
    assert_eq!(why(&ended), json!([null, 15, "too slow\n"]), "{ended}");
    let s = status(&mut c, "slow-1");
    assert_eq!(s["status"], "timeout", "{s}");
    assert_eq!(why(&s), json!([null, 15, "too slow\n"]), "{s}");
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "slow-2",
        "beta",
        "x",
    ]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (&v["outcome"], why(&v)),
        (&json!("timeout"), json!([null, 15, "too slow\n"])),
        "{v}"
    );

    // No handler ran for a pull agent's task.
    let pull = env.serve(&env.workspace("delta"), &["--name", "delta"]);
    let mut p = pull.client();
    assert_eq!(pull.send(&mut p, "p-1", "try")["status"], "accepted");
    let r = p.call(10, "inbox/claim", json!({}));
    assert_eq!(r["result"]["status"], "claimed", "{r}");
    let r = p.call(
        11,
        "inbox/complete",
        json!({"message_id": "p-1", "outcome": "failed"}),
    );
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let ended = wait_ended(&pull.spool(), "p-1");
    assert_eq!(ended["outcome"], "failed", "{ended}");
    assert_eq!(why(&ended), json!([null, null, null]), "{ended}");
    let s = status(&mut p, "p-1");
    assert_eq!(
        (&s["status"], why(&s)),
        (&json!("failed"), json!([null, null, null]))
    );
}

/// A handler that writes far more than 2 KiB (past the 256 KiB that
/// become events, too): the tail is the last 2 KiB, whole lines cut only
/// at its start.
#[test]
fn the_stderr_tail_is_the_last_2_kib() {
    let env = Env::new();
    let exec = "cat >/dev/null; yes 'noise noise noise' | head -n 30000 >&2; \
                echo 'the last line' >&2; exit 2";
    let inst = env.serve(&env.workspace("beta"), &["--name", "beta", "--exec", exec]);
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "b-1",
        "beta",
        "go",
    ]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let tail = v["stderr_tail"].as_str().unwrap();
    let whole = format!("{}the last line\n", "noise noise noise\n".repeat(30000));
    assert!(tail.len() <= 2048 && tail.len() > 2000, "{}", tail.len());
    assert!(whole.ends_with(tail), "{tail:?}");
    assert_eq!(v["exit_status"], 2, "{v}");
    assert_eq!(
        receipt(&inst.spool(), "b-1")["stderr_tail"].as_str(),
        Some(tail)
    );
}

/// Control characters, bidi overrides and the like come back escaped as
/// the view and `baton log` show them: newlines and tabs kept, the rest
/// visible escapes; nothing raw reaches the sender's terminal.
#[test]
fn the_stderr_tail_is_escaped() {
    let env = Env::new();
    let exec =
        "cat >/dev/null; printf 'a\\033]0;title\\007b\\tc\\r\\n\\342\\200\\256evil\\n' >&2; exit 1";
    let _inst = env.serve(&env.workspace("beta"), &["--name", "beta", "--exec", exec]);
    let out = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "e-1",
        "beta",
        "go",
    ]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        v["stderr_tail"], "a\\e]0;title\\u{7}b\tc\\r\n\\u{202e}evil\n",
        "{v}"
    );
    let out = env.run(&["send", "--wait", "--message-id", "e-2", "beta", "go"]);
    assert!(
        out.stderr.ends_with(
            "baton: the handler's stderr ended with:\n\
             \x20 a\\e]0;title\\u{7}b\tc\\r\n\
             \x20 \\u{202e}evil\n"
        ),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(['\x1b', '\x07', '\r', '\u{202e}']));
}

/// MCP's `send_agent_message` with `wait_seconds` and `task_status` say
/// why, in their text and their structured content.
#[test]
fn mcp_task_status_says_why() {
    let env = Env::new();
    let _beta = env.serve(
        &env.workspace("beta"),
        &["--name", "beta", "--exec", FAILING],
    );
    let mut a = Mcp::start(&env, &env.workspace("alpha"), &["--name", "alpha"]);
    a.initialize(NEWEST);
    let res = a.tool(
        "send_agent_message",
        json!({"target_instance_id": "beta", "message": "FAILME", "wait_seconds": 60}),
    );
    assert_eq!(res["isError"], false, "{res}");
    let sc = &res["structuredContent"];
    assert_eq!(sc["outcome"], "failed", "{res}");
    assert_eq!(why(sc), json!([1, null, "failing on purpose\n"]), "{res}");
    let id = sc["message_id"].as_str().unwrap().to_string();
    let said = format!(
        "failed: task {id} ended on beta with no reply. Its handler exited with status 1. \
         Its stderr ended with:\nfailing on purpose\n"
    );
    assert_eq!(text(&res), said);

    let st = a.tool("task_status", json!({"message_id": id}));
    assert_eq!(st["isError"], false, "{st}");
    let sc = &st["structuredContent"];
    assert_eq!(sc["status"], "failed", "{st}");
    assert_eq!(why(sc), json!([1, null, "failing on purpose\n"]), "{st}");
    assert_eq!(text(&st), said);
    a.finish();
}
