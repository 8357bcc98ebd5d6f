//! `baton result [TARGET] MESSAGE_ID` (issue 46): what became of a task,
//! read later: its outcome, how its handler ended, its reply, when it was
//! accepted and ended; `--json` as `send --wait --json` spells it;
//! `--wait [--timeout]`; exit 0 done, 1 ended otherwise, 3 unknown, 5 not
//! ended; a stopped agent's task read from its spool.

use crate::util::{Env, event_is, wait_event};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Bound for anything that should take well under a second.
const WAIT: Duration = Duration::from_secs(20);

/// A handler that replies (under `--reply`) with a fixed text.
const REPLIES: &str = "cat >/dev/null; printf 'renamed 3 files\\nall done\\n'";

/// A handler that fails with a word on stderr.
const FAILS: &str = "cat >/dev/null; echo 'failing on purpose' >&2; exit 3";

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

#[track_caller]
fn ended(spool: &Path, id: &str) {
    wait_event(spool, &format!("task.ended for {id}"), WAIT, |e| {
        event_is(e, "task.ended", id)
    });
}

#[test]
fn a_done_task_shows_its_reply_and_its_json_is_send_wait_s() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let beta = env.serve(&ws, &["--name", "beta", "--exec", REPLIES, "--reply"]);
    let sent = env.run(&[
        "send",
        "--wait",
        "--json",
        "--message-id",
        "d-1",
        "beta",
        "go",
    ]);
    assert_eq!(sent.status, 0, "{}", sent.stderr);
    let sent = json(&sent.stdout);

    let out = env.run(&["result", "beta", "d-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "message_id: d-1", "{}", out.stdout);
    assert_eq!(lines[1], format!("target: beta ({})", beta.id));
    assert_eq!(lines[2], "outcome: done", "{}", out.stdout);
    assert!(lines[3].starts_with("accepted_at: "), "{}", out.stdout);
    assert!(lines[4].starts_with("finished_at: "), "{}", out.stdout);
    assert_eq!(lines[5..], ["reply:", "  renamed 3 files", "  all done"]);
    assert_eq!(out.stderr, "");

    // Without TARGET: the one instance that knows it. The same members
    // as `send --wait --json`, but the queue position it had then.
    let out = env.run(&["result", "--json", "d-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let got = json(&out.stdout);
    let mut want = names(&sent);
    want.remove("queue_position");
    assert_eq!(names(&got), want, "{got}\n{sent}");
    for member in [
        "message_id",
        "status",
        "outcome",
        "reply",
        "exit_status",
        "state",
    ] {
        assert_eq!(got[member], sent[member], "{member}: {got}\n{sent}");
    }
    assert_eq!(got["reply"], "renamed 3 files\nall done\n");
    assert_eq!(got["target"]["instance_id"], beta.id.as_str());
    let (accepted, finished) = (got["accepted_at"].as_u64(), got["finished_at"].as_f64());
    assert!(
        accepted.is_some_and(|a| finished.is_some_and(|f| a as f64 <= f + 1.0)),
        "{got}"
    );
}

#[test]
fn a_failed_exec_handler_shows_its_exit_status_and_stderr_tail() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let _beta = env.serve(&ws, &["--name", "beta", "--exec", FAILS]);
    let sent = env.run(&["send", "--wait", "--message-id", "f-1", "beta", "go"]);
    assert_eq!(sent.status, 1, "{}", sent.stderr);

    let out = env.run(&["result", "beta", "f-1"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stdout.contains("\noutcome: failed (exit status 3)\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\nstderr_tail: failing on purpose\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.ends_with("\nreply: (none)\n"), "{}", out.stdout);
    let out = env.run(&["result", "--json", "beta", "f-1"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(v["exit_status"], 3, "{v}");
    assert_eq!(v["signal"], Value::Null, "{v}");
    assert_eq!(v["stderr_tail"], "failing on purpose\n", "{v}");
}

#[test]
fn a_task_never_accepted_is_unknown_with_exit_3() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let beta = env.serve(&ws, &["--name", "beta"]);
    let out = env.run(&["result", "beta", "nosuch-1"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "baton: beta ({}) does not know message nosuch-1: it was never accepted there, or its receipt was pruned\n",
            beta.id
        )
    );
    let out = env.run(&["result", "--json", "nosuch-1"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("baton: no instance knows message nosuch-1, live (in ")
            && out
                .stderr
                .ends_with(") or stopped: it was never accepted, or its receipt was pruned\n"),
        "{}",
        out.stderr
    );
}

#[test]
fn wait_follows_a_queued_task_until_a_pull_agent_completes_it() {
    let env = Env::new();
    let ws = env.workspace("puller");
    let puller = env.serve(&ws, &["--name", "puller"]);
    let out = env.run(&["send", "--message-id", "p-1", "puller", "take me"]);
    assert_eq!(out.status, 0, "{}", out.stderr);

    // Not ended, and not waited for: where it is, exit 5 at once.
    let out = env.run(&["result", "puller", "p-1"]);
    assert_eq!(out.status, 5, "{}", out.stderr);
    assert!(
        out.stdout.contains("\ntask_status: queued (position 1)\n"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr,
        "baton: message p-1 has not ended: it is queued at puller; 'baton result --wait' waits for its end\n"
    );
    let out = env.run(&["result", "--json", "puller", "p-1"]);
    assert_eq!(out.status, 5, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(
        (
            &v["outcome"],
            &v["task_status"],
            &v["queue_position"],
            &v["timed_out"]
        ),
        (
            &Value::Null,
            &Value::from("queued"),
            &Value::from(1),
            &Value::from(true)
        ),
        "{v}"
    );

    let mut waiting = env.spawn(&["result", "--wait", "--timeout", "60", "p-1"], &ws);
    let out = env.run(&["inbox", "claim", "puller"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(waiting.is_running(), "{}", waiting.stderr());
    let out = env.run(&["inbox", "complete", "puller", "p-1", "--reply", "took it"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    ended(&puller.spool(), "p-1");
    assert_eq!(waiting.wait_exit(WAIT), Some(0), "{}", waiting.stderr());
    let stdout = waiting.stdout();
    assert!(stdout.contains("\noutcome: done\n"), "{stdout}");
    assert!(stdout.ends_with("\nreply: took it\n"), "{stdout}");
}

#[test]
fn wait_timeout_on_a_task_nobody_claims_exits_5() {
    let env = Env::new();
    let ws = env.workspace("puller");
    let _puller = env.serve(&ws, &["--name", "puller"]);
    let out = env.run(&["send", "--message-id", "n-1", "puller", "nobody"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = env.run(&["result", "--wait", "--timeout", "0.5", "puller", "n-1"]);
    assert_eq!(out.status, 5, "{}", out.stderr);
    assert!(
        out.stdout.contains("\ntask_status: queued (position 1)\n"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr,
        "baton: stopped waiting after --timeout; message n-1 is still queued at puller, and stays there\n"
    );
    // --timeout bounds a wait: alone it is a usage error.
    let out = env.run(&["result", "--timeout", "1", "puller", "n-1"]);
    assert_eq!(out.status, 2, "{}", out.stderr);
}

#[test]
fn a_stopped_agents_finished_task_is_read_from_its_spool() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let mut beta = env.serve(&ws, &["--name", "beta", "--exec", REPLIES, "--reply"]);
    let out = env.run(&["send", "--wait", "--message-id", "s-1", "beta", "go"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = env.run(&["send", "--message-id", "s-2", "beta", "go"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    ended(&beta.spool(), "s-2");
    assert_eq!(beta.term(), 0, "{}", beta.stderr());

    for args in [&["result", "beta", "s-1"][..], &["result", "s-1"]] {
        let out = env.run(args);
        assert_eq!(out.status, 0, "{args:?}: {}", out.stderr);
        assert!(
            out.stdout
                .starts_with("message_id: s-1\ntarget: beta (stopped)\noutcome: done\n"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout
                .ends_with("\nreply:\n  renamed 3 files\n  all done\n"),
            "{}",
            out.stdout
        );
    }
    let out = env.run(&["result", "--json", "beta", "s-2"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["outcome"], "done", "{v}");
    assert_eq!(v["target"]["name"], "beta", "{v}");
    assert!(
        v["accepted_at"].is_u64() && v["finished_at"].is_f64(),
        "{v}"
    );
    let out = env.run(&["result", "beta", "nosuch-2"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("baton: beta (stopped) does not know message nosuch-2"),
        "{}",
        out.stderr
    );
}
