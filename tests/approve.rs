//! Approvals an operator can decide on (issue 21): `baton watch --approve`
//! shows the task's context, answers read before a request apply in
//! order (or by id), the sender of a denied task learns of it
//! (`send --wait`, a reply to a sender instance), and the transcript
//! names who decided.

use crate::util::{
    Env, Served, approval_of, event_is, me_as_instance, transcript, wait_event, wait_until,
};
use serde_json::{Value, json};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// A handler that records which task ran, in order, in `ran.txt`.
const RECORD: &str = "echo \"$BATON_MESSAGE_ID\" >> ran.txt";
const WAIT: Duration = Duration::from_secs(10);

/// A `baton watch --approve`, stopped by pid when dropped.
struct Watch {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    /// Kept open: at the end of its input, watch --approve exits once it
    /// has answered what it read (issue 46).
    _input: std::process::ChildStdin,
}

impl Watch {
    /// Starts `baton watch TARGET --approve --since 1` with `answers`
    /// written to its stdin, which stays open, and waits until it has
    /// subscribed (its replay printed `instance.started`), so that every
    /// answer is read before any request is sent to it.
    fn start(env: &Env, target: &str, answers: &str) -> Watch {
        let n = fs::read_dir(env.root.path()).map_or(0, |d| d.count());
        let out = env.root.join(format!("watch-{n}.out"));
        let err = env.root.join(format!("watch-{n}.err"));
        let mut child = env
            .cmd()
            .args(["watch", target, "--approve", "--since", "1"])
            .stdin(Stdio::piped())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .expect("spawn baton watch");
        let mut input = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut input, answers.as_bytes()).unwrap();
        let w = Watch {
            child,
            out,
            err,
            _input: input,
        };
        wait_until("watch to subscribe", WAIT, || {
            w.stdout().contains("instance.started")
        });
        w
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stdout(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[track_caller]
fn call(c: &mut crate::util::RawClient, method: &str, params: Value) -> Value {
    let r = c.call(3, method, params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: no result: {r}"))
}

fn wait_receipt(spool: &Path, id: &str) -> Value {
    crate::util::wait_for(&format!("the receipt of {id}"), WAIT, || {
        crate::util::receipt(spool, id)
    })
}

fn serve_asking(env: &Env, name: &str) -> Served {
    let ws = env.workspace(name);
    env.serve(&ws, &["--exec", RECORD, "--approve", "ask", "--name", name])
}

/// Regression (issue 21): `printf 'y\nno\n' | baton watch srv --approve`
/// dropped the `y` that came before the first request and denied the
/// first task with the `no`.
#[test]
fn piped_answers_read_before_the_requests_apply_in_order() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let ran = inst.workspace.join("ran.txt");
    let watch = Watch::start(&env, "srv", "y\nno\n");
    let mut c = inst.client();
    let alice = me_as_instance(&inst.registry, "alice", "/w/alice");
    let body = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\n";
    let r = call(&mut c, "message/send", inst.msg_from("p-1", body, &alice));
    assert_eq!(r["status"], "accepted", "{r}");
    let r = call(&mut c, "message/send", inst.msg("p-2", "second"));
    assert_eq!(r["status"], "accepted", "{r}");

    assert_eq!(wait_receipt(&inst.spool(), "p-1")["outcome"], "done");
    assert_eq!(wait_receipt(&inst.spool(), "p-2")["outcome"], "denied");
    assert_eq!(fs::read_to_string(&ran).unwrap(), "p-1\n");

    // The operator saw who sent it, from where, its mode, size and lines.
    let err = watch.stderr();
    assert!(err.contains("task p-1 waits for approval\n"), "{err}");
    assert!(
        err.contains("  from:  alice, workspace /w/alice, pid "),
        "{err}"
    );
    assert!(err.contains("  mode:  queue\n"), "{err}");
    assert!(
        err.contains(&format!("  body:  {} bytes, 7 lines\n", body.len())),
        "{err}"
    );
    assert!(
        err.contains(
            "  | line 1\n  | line 2\n  | line 3\n  | line 4\n  | line 5\n  | … 2 more lines\n"
        ),
        "{err}"
    );
    assert!(!err.contains("line 6"), "{err}");
    assert!(
        err.contains("baton: approve p-1 (an answer read before)\n"),
        "{err}"
    );
    assert!(
        err.contains("baton: deny p-2 (an answer read before)\n"),
        "{err}"
    );

    // The same context is in the event, for the view and MCP.
    let asked = wait_event(&inst.spool(), "approval.requested p-1", WAIT, |e| {
        event_is(e, "approval.requested", "p-1")
    });
    assert_eq!(asked["from"], "alice", "{asked}");
    assert_eq!(asked["sender_name"], "alice", "{asked}");
    assert_eq!(asked["workspace"], "/w/alice", "{asked}");
    assert_eq!(asked["mode"], "queue", "{asked}");
    assert_eq!(asked["bytes"], body.len(), "{asked}");
    assert_eq!(asked["lines"], 7, "{asked}");
    assert_eq!(
        asked["excerpt"], "line 1\nline 2\nline 3\nline 4\nline 5",
        "{asked}"
    );

    // Who decided: watch, by its pid.
    let pid = watch.pid();
    let resolved = wait_event(&inst.spool(), "approval.resolved p-2", WAIT, |e| {
        event_is(e, "approval.resolved", "p-2")
    });
    assert_eq!(resolved["by"], "watch", "{resolved}");
    assert_eq!(resolved["by_pid"], pid, "{resolved}");
    let denied = wait_event(&inst.spool(), "task.denied p-2", WAIT, |e| {
        event_is(e, "task.denied", "p-2")
    });
    assert_eq!(
        (&denied["by"], &denied["by_pid"]),
        (&json!("watch"), &json!(pid))
    );
    wait_until("watch to print the denial", WAIT, || {
        watch
            .stdout()
            .contains(&format!("task.denied        p-2 by watch (pid {pid})"))
    });
}

/// `y ID` / `n ID` answer a task by id, or by the start of one only one
/// task has; one read before its request waits for that request.
#[test]
fn answers_by_id_wait_for_their_task() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let ran = inst.workspace.join("ran.txt");
    // "n tw" is for two-2 whenever it comes; "y" for the first request.
    let watch = Watch::start(&env, "srv", "n tw\nmaybe\ny\n");
    let mut c = inst.client();
    for (id, body) in [("one-1", "first"), ("two-2", "second")] {
        let r = call(&mut c, "message/send", inst.msg(id, body));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    assert_eq!(wait_receipt(&inst.spool(), "one-1")["outcome"], "done");
    assert_eq!(wait_receipt(&inst.spool(), "two-2")["outcome"], "denied");
    assert_eq!(fs::read_to_string(&ran).unwrap(), "one-1\n");
    let err = watch.stderr();
    assert!(
        err.contains("baton: not an answer: maybe: type y or n, or y ID / n ID\n"),
        "{err}"
    );
}

/// The sender of a denied task learns of it: `send --wait` ends with the
/// outcome `denied` (exit 1).
#[test]
fn send_wait_reports_a_denial() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let _watch = Watch::start(&env, "srv", "n\n");
    let out = env.run(&["send", "srv", "rotate the logs", "--wait", "--json"]);
    assert_eq!(out.status, 1, "{out:?}");
    let v: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["outcome"], "denied", "{v}");
    assert_eq!(v["status"], "accepted", "{v}");
    let id = v["message_id"].as_str().unwrap();
    assert_eq!(wait_receipt(&inst.spool(), id)["outcome"], "denied");
}

/// A sender that is an instance is told by a reply to the denied task,
/// which its transcript records.
#[test]
fn a_sender_instance_is_told_of_a_denial() {
    let env = Env::new();
    let srv = serve_asking(&env, "srv");
    let watch = Watch::start(&env, "srv", "n\n");
    let asker = env.serve(&env.workspace("asker"), &["--name", "asker"]);
    let mut c = asker.client();
    let r = call(
        &mut c,
        "relay/send",
        json!({"target": "srv", "body": "please"}),
    );
    assert_eq!(r["status"], "accepted", "{r}");
    let id = r["message_id"].as_str().unwrap().to_string();
    assert_eq!(wait_receipt(&srv.spool(), &id)["outcome"], "denied");

    let notice = wait_event(&asker.spool(), "the denial notice", WAIT, |e| {
        e["kind"] == "message.accepted" && e["from"] == "srv"
    });
    let expected = format!(
        "baton: task {id} was denied by watch (pid {}) at srv; it did not run.\n",
        watch.pid()
    );
    assert_eq!(notice["body"], expected, "{notice}");
    let listed = call(&mut c, "inbox/list", json!({}));
    let queued = &listed["queued"][0];
    assert_eq!(queued["sender"]["name"], "srv", "{listed}");
    // The receiver records sending it, as the reply to the denied task.
    let sent = wait_event(&srv.spool(), "relay.sent for the notice", WAIT, |e| {
        e["kind"] == "relay.sent" && e["reply_of"] == id.as_str()
    });
    assert_eq!(sent["status"], "accepted", "{sent}");
}

/// `approval/respond` records the kind a client declares and its pid; a
/// kind that is not plain is refused.
#[test]
fn approval_respond_names_the_client_and_its_pid() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let mut c = inst.client();
    let r = call(&mut c, "message/send", inst.msg("r-1", "x"));
    assert_eq!(r["status"], "accepted", "{r}");
    let mut answer = approval_of(&inst.spool(), "r-1");
    answer["decision"] = json!("deny");
    answer["by"] = json!("view\u{1b}[2J");
    let bad = call(&mut c, "approval/respond", answer.clone());
    assert_eq!(bad["status"], "invalid", "{bad}");
    assert!(
        bad["reason"].as_str().unwrap().starts_with("by must be"),
        "{bad}"
    );
    answer["by"] = json!("view");
    let ok = call(&mut c, "approval/respond", answer);
    assert_eq!(ok["status"], "denied", "{ok}");
    let denied = transcript(&inst.spool())
        .into_iter()
        .find(|e| event_is(e, "task.denied", "r-1"))
        .expect("task.denied");
    assert_eq!(denied["by"], "view", "{denied}");
    assert_eq!(denied["by_pid"], std::process::id(), "{denied}");
    let out = env.run(&["log", "srv"]);
    assert!(
        out.stdout
            .contains(&format!("r-1 deny by view (pid {})", std::process::id())),
        "{out:?}"
    );
}

/// Issue 46, point 3: `printf 'y\n' | baton watch NAME --approve`
/// answered and then waited forever after its input ended, and with
/// `</dev/null` it prompted and hung. Now it exits 0 at the end of its
/// input once it has answered what it read, and at once when there is
/// nothing to answer with.
#[test]
fn watch_approve_ends_with_its_input() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let mut c = inst.client();
    for id in ["e-1", "e-2"] {
        let r = call(&mut c, "message/send", inst.msg(id, "please"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    // The head of the queue waits for an approval.
    wait_event(&inst.spool(), "the approval asked", WAIT, |e| {
        event_is(e, "approval.requested", "e-1")
    });
    let run = |stdin: Stdio| {
        let mut child = env
            .cmd()
            .args(["watch", "srv", "--approve"])
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let status = crate::util::wait_for("watch --approve to exit", WAIT, || {
            child.try_wait().unwrap()
        });
        assert_eq!(status.code(), Some(0), "{status:?}");
    };
    // Nothing to answer with: it leaves the approvals waiting.
    run(Stdio::null());
    let answers = env.root.join("yes.txt");
    fs::write(&answers, "y\n").unwrap();
    run(Stdio::from(File::open(&answers).unwrap()));
    // The one answer went to the one approval waiting; the next task
    // then waits for one of its own.
    assert_eq!(wait_receipt(&inst.spool(), "e-1")["outcome"], "done");
    wait_event(&inst.spool(), "the next approval asked", WAIT, |e| {
        event_is(e, "approval.requested", "e-2")
    });
}
