//! Answers baton holds, shown where a person or a script looks (issue 31,
//! points 5 and 6): a task waiting under `--approve ask` is named in
//! `status` and `inbox list` with the command that answers it, and `serve
//! --exec CMD --stdin body` gives a script the task's text alone.

use crate::util::{Env, Served, event_is, wait_event};
use serde_json::Value;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// Sends `body` as task `id` over a raw connection, from a plain sender
/// or, with `sender`, from that verified instance id.
fn send(inst: &Served, id: &str, body: &str, sender: Option<&str>) {
    let mut c = inst.client();
    let params = match sender {
        Some(s) => inst.msg_from(id, body, s),
        None => inst.msg(id, body),
    };
    let r = c.call(1, "message/send", params);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
}

/// Regression (issue 31, point 5): with a task waiting for an approval,
/// `status` said `state: ready, queued: 2` and `inbox list` said
/// `queued`; only `--json` showed `awaiting_approval`.
#[test]
fn status_and_inbox_list_show_a_task_awaiting_approval() {
    let env = Env::new();
    let ws = env.workspace("gamma");
    let inst = env.serve(
        &ws,
        &[
            "--name",
            "gamma",
            "--exec",
            "cat > /dev/null",
            "--approve",
            "ask",
        ],
    );
    let spool = inst.spool();
    send(&inst, "ask-1", "first", None);
    send(&inst, "ask-2", "second", None);
    // Only the head of the queue is asked about; the other waits behind it.
    wait_event(&spool, "approval.requested ask-1", WAIT, |e| {
        event_is(e, "approval.requested", "ask-1")
    });

    let out = env.run(&["status", "gamma"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("queued:      2 of "), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("\nawaiting approval: ask-1 (answer with baton watch --approve gamma)\n"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stdout.matches("awaiting approval").count(),
        1,
        "{}",
        out.stdout
    );

    let out = env.run(&["inbox", "list", "gamma"]);
    assert_eq!(out.status, 0, "{out:?}");
    let row = |id: &str| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == id))
            .unwrap_or_else(|| panic!("no row for {id}: {}", out.stdout))
            .to_string()
    };
    assert!(
        row("ask-1").starts_with("awaiting approval  ask-1 "),
        "{}",
        out.stdout
    );
    assert!(
        row("ask-2").starts_with("queued             ask-2 "),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr,
        "baton: 1 task awaits approval: answer with baton watch --approve gamma\n"
    );

    // --json lists it as before.
    let out = env.run(&["inbox", "list", "gamma", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["awaiting_approval"], serde_json::json!(["ask-1"]), "{v}");
}
