//! Answers baton holds, shown where a person or a script looks (issue 31,
//! points 5 and 6): a task waiting under `--approve ask` is named in
//! `status` and `inbox list` with the command that answers it, and `serve
//! --exec CMD --stdin body` gives a script the task's text alone.

use crate::util::{Env, Served, event_is, me_as_instance, wait_event};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// Waits for task `id`'s receipt and returns it.
fn wait_receipt(spool: &Path, id: &str) -> Value {
    crate::util::wait_for(&format!("the receipt of {id}"), WAIT, || {
        crate::util::receipt(spool, id)
    })
}

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

    // The view's /inbox shows it too, with the view's way to answer.
    let mut c = inst.client();
    let text = baton::tui::inbox_listing(&mut |params| {
        let r = c.call(9, "inbox/list", params);
        Ok(r["result"].clone())
    })
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "awaiting approval ask-1  from (cli)",
            "queued      ask-2  from (cli)",
            "2 tasks: 2 queued, 0 processing, 0 interrupted, 0 rejected",
            "1 task awaits approval: /approve ID or /deny ID answers it",
        ],
        "{text}"
    );
}

/// A handler that keeps what it read and the turn's variables.
const KEEP: &str = "cat > \"in-$BATON_MESSAGE_ID\"; \
    printf '%s\\n' \"$BATON_MESSAGE_ID\" \"$BATON_SENDER_ID\" \"$BATON_SENDER_NAME\" \"$BATON_MODE\" \
    > \"vars-$BATON_MESSAGE_ID\"";

/// Issue 31, point 6: `--stdin body` gives the handler the task's text,
/// byte for byte (no envelope, no newline added, nothing escaped); who
/// sent it, its id and its mode are in the `BATON_*` variables.
#[test]
fn stdin_body_gives_the_handler_the_text_alone() {
    let env = Env::new();
    let ws = env.workspace("plain");
    let inst = env.serve(&ws, &["--name", "plain", "--exec", KEEP, "--stdin", "body"]);
    let spool = inst.spool();
    let alice = me_as_instance(&inst.registry, "alice", "/w/alice");
    let body = "line 1\n<agent_relay from=\"x\">\n\ttabbed $HOME `date`\né 🎉";
    let mut c = inst.client();
    let mut params = inst.msg_from("body-1", body, &alice);
    params["mode"] = "steer".into();
    let r = c.call(1, "message/send", params);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    assert_eq!(wait_receipt(&spool, "body-1")["outcome"], "done");

    assert_eq!(fs::read_to_string(ws.join("in-body-1")).unwrap(), body);
    let vars = fs::read_to_string(ws.join("vars-body-1")).unwrap();
    assert_eq!(vars, format!("body-1\n{alice}\nalice\nsteer\n"));

    // A plain sender's task too: the text alone, mode queue.
    send(&inst, "body-2", "just this", None);
    assert_eq!(wait_receipt(&spool, "body-2")["outcome"], "done");
    assert_eq!(
        fs::read_to_string(ws.join("in-body-2")).unwrap(),
        "just this"
    );
    let vars = fs::read_to_string(ws.join("vars-body-2")).unwrap();
    assert_eq!(vars, "body-2\n\n(cli)\nqueue\n");
}

/// `--stdin envelope` is the default, spelled out: the same envelope.
#[test]
fn stdin_envelope_is_the_default() {
    let env = Env::new();
    let mut got = Vec::new();
    for (name, extra) in [
        ("plain", &[][..]),
        ("spelled", &["--stdin", "envelope"][..]),
    ] {
        let ws = env.workspace(name);
        let mut args = vec!["--name", name, "--exec", KEEP];
        args.extend_from_slice(extra);
        let inst = env.serve(&ws, &args);
        send(&inst, "env-1", "the text", None);
        assert_eq!(wait_receipt(&inst.spool(), "env-1")["outcome"], "done");
        let text = fs::read_to_string(ws.join("in-env-1")).unwrap();
        // The workspace in the envelope is the sender's (this process's).
        got.push(text);
    }
    assert!(
        got[0].starts_with("<agent_relay from=\"(cli)\" "),
        "{}",
        got[0]
    );
    assert!(got[0].contains("\n\nthe text\n\n"), "{}", got[0]);
    assert!(got[0].ends_with("</agent_relay>\n"), "{}", got[0]);
    assert_eq!(got[0], got[1]);
}

/// A `--stdin` that is neither is a usage error that names it, as is
/// `--stdin` without `--exec`.
#[test]
fn a_bad_stdin_is_a_usage_error_naming_it() {
    let env = Env::new();
    let ws = env.workspace("bad");
    let out = env.run_with(
        &[],
        Some(&ws),
        &["serve", "--exec", "cat", "--stdin", "text"],
        None,
    );
    assert_eq!(out.status, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: serve: --stdin text: use envelope or body\n"
    );
    let out = env.run_with(&[], Some(&ws), &["serve", "--stdin", "body"], None);
    assert_eq!(out.status, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: serve: --stdin says what an --exec handler reads, so it needs --exec\n"
    );
}
