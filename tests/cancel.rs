//! `baton cancel [TARGET] MESSAGE_ID` and `task/cancel` (issue 31): a
//! queued task is withdrawn with a receipt `cancelled`, which its
//! sender's `send --wait` reports; a running `--exec` turn has its
//! handler's process group stopped; a pull agent's open task ends at once;
//! a stopped agent's queued task is withdrawn from its spool; without
//! TARGET the one holder is found, and several are candidates (exit 3).
//! The receiver's agent cancels only what its own instance sent, a
//! process of a turn nothing; `inbox discard` keeps its meaning.

use crate::util::{self, Env, baton_bin, event_is as is};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// Bound for anything that should take well under a second.
const WAIT: Duration = Duration::from_secs(20);

/// A handler that blocks until it is stopped.
const BLOCKS: &str = "cat >/dev/null; exec sleep 600";

#[track_caller]
fn wait_event(spool: &Path, kind: &str, id: &str) -> Value {
    util::wait_event(spool, &format!("{kind} for {id}"), WAIT, |e| {
        is(e, kind, id)
    })
}

#[test]
fn a_queued_task_is_withdrawn_and_its_waiting_sender_hears_cancelled() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let beta = env.serve(&ws, &["--name", "beta", "--exec", BLOCKS]);
    let spool = beta.spool();
    let out = env.run(&["send", "--message-id", "m-1", "beta", "runs"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    wait_event(&spool, "turn.started", "m-1");
    let mut waiting = env.spawn(
        &["send", "--wait", "--message-id", "m-2", "beta", "waits"],
        &ws,
    );
    wait_event(&spool, "message.accepted", "m-2");

    // `inbox discard` keeps its meaning: interrupted and rejected tasks.
    let out = env.run(&["inbox", "discard", "beta", "m-2"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("no interrupted or rejected task m-2"),
        "{}",
        out.stderr
    );

    let out = env.run(&["cancel", "beta", "m-2"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "cancelled m-2 at beta (withdrawn from the queue)\n"
    );
    assert_eq!(waiting.wait_exit(WAIT), Some(1), "{}", waiting.stderr());
    assert!(
        waiting
            .stderr()
            .ends_with("baton: message m-2 ended cancelled at beta\n"),
        "{}",
        waiting.stderr()
    );
    let ended = wait_event(&spool, "task.ended", "m-2");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    let r = util::receipt(&spool, "m-2").expect("a receipt of m-2");
    assert_eq!(r["outcome"], "cancelled", "{r}");
    let st = beta
        .client()
        .call(3, "task/status", json!({"message_id": "m-2"}));
    assert_eq!(st["result"]["status"], "cancelled", "{st}");
    let list = env.run(&["inbox", "list", "beta"]);
    assert!(!list.stdout.contains("m-2"), "{}", list.stdout);
    // `--all` lists it among the finished tasks, as cancelled.
    let list = env.run(&["inbox", "list", "--all", "beta"]);
    assert!(
        list.stdout
            .lines()
            .any(|l| l.starts_with("cancelled") && l.contains("m-2")),
        "{}",
        list.stdout
    );

    // Once ended, it says how; an id never sent is unknown.
    let out = env.run(&["cancel", "beta", "m-2"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        "baton: cannot cancel m-2 at beta: ended: task m-2 already ended cancelled: there is nothing to cancel\n"
    );
    let out = env.run(&["cancel", "--json", "beta", "nosuch"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["status"], "unknown", "{v}");
}

#[test]
fn a_running_exec_turn_has_its_handlers_group_stopped() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let child = env.root.join("child.pid");
    // The handler starts a child of its own in its group, then waits.
    let handler = format!(
        "cat >/dev/null; sleep 600 & echo $! > '{}'; wait",
        child.display()
    );
    let beta = env.serve(&ws, &["--name", "beta", "--exec", &handler]);
    let spool = beta.spool();
    let mut waiting = env.spawn(
        &["send", "--wait", "--message-id", "r-1", "beta", "runs"],
        &ws,
    );
    wait_event(&spool, "turn.started", "r-1");
    let pid: u32 = util::wait_for("the handler's child", WAIT, || {
        fs::read_to_string(&child).ok()?.trim().parse().ok()
    });
    assert!(util::pid_alive(pid));

    let out = env.run(&["cancel", "beta", "r-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "cancelled r-1 at beta (its turn is stopped: SIGTERM to its handler's process group)\n"
    );
    let ended = wait_event(&spool, "task.ended", "r-1");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    assert!(
        util::wait_gone(pid, WAIT),
        "the handler's child {pid} lives on"
    );
    assert_eq!(waiting.wait_exit(WAIT), Some(1), "{}", waiting.stderr());
    assert!(
        waiting
            .stderr()
            .contains("message r-1 ended cancelled at beta"),
        "{}",
        waiting.stderr()
    );
    assert_eq!(
        util::receipt(&spool, "r-1").unwrap()["outcome"],
        "cancelled"
    );
}

#[test]
fn a_pull_agents_open_task_ends_and_its_complete_says_it_was_cancelled() {
    let env = Env::new();
    let ws = env.workspace("puller");
    let _p = env.serve(&ws, &["--name", "puller"]);
    let out = env.run(&["send", "--message-id", "p-1", "puller", "take me"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = env.run(&["inbox", "claim", "puller"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = env.run(&["cancel", "puller", "p-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "cancelled p-1 at puller (its open turn ended)\n"
    );
    let out = env.run(&["inbox", "complete", "puller", "p-1"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .ends_with("invalid: task p-1 is not open here: it was cancelled\n"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_stopped_agents_queued_task_is_withdrawn_from_its_spool() {
    let env = Env::new();
    let ws = env.workspace("coder");
    let mut coder = env.serve(&ws, &["--name", "coder"]);
    let spool = coder.spool();
    assert_eq!(coder.term(), 0);
    let out = env.run(&["send", "--message-id", "s-1", "coder", "later"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("stored:"), "{}", out.stdout);

    let out = env.run(&["cancel", "coder", "s-1"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "cancelled s-1 at coder (withdrawn from its queue; it is not running)\n"
    );
    assert_eq!(
        util::receipt(&spool, "s-1").unwrap()["outcome"],
        "cancelled"
    );
    let ended = wait_event(&spool, "task.ended", "s-1");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    assert_eq!(fs::read_dir(spool.join("inbox")).unwrap().count(), 0);
    // Written by this command, not by the agent: marked `stored`, so
    // that "stopped (since ...)" stays the agent's own last time.
    let notice = wait_event(&spool, "notice", "s-1");
    assert_eq!(notice["stored"], true, "{notice}");
    assert_eq!(ended["stored"], true, "{ended}");

    // Started again, it does not run it, and knows how it ended.
    let coder = env.serve(&ws, &["--name", "coder"]);
    let st = coder
        .client()
        .call(3, "task/status", json!({"message_id": "s-1"}));
    assert_eq!(st["result"]["status"], "cancelled", "{st}");
}

#[test]
fn without_target_the_one_holder_is_found_and_several_are_candidates() {
    let env = Env::new();
    let _alpha = env.serve(&env.workspace("alpha"), &["--name", "alpha"]);
    let beta = env.serve(&env.workspace("beta"), &["--name", "beta"]);
    for (id, to) in [("both", "alpha"), ("both", "beta"), ("solo", "beta")] {
        let out = env.run(&["send", "--message-id", id, to, "x"]);
        assert_eq!(out.status, 0, "{}", out.stderr);
    }
    let out = env.run(&["cancel", "solo"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "cancelled solo at beta (withdrawn from the queue)\n"
    );
    assert_eq!(
        util::receipt(&beta.spool(), "solo").unwrap()["outcome"],
        "cancelled"
    );

    let out = env.run(&["cancel", "both"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert!(
        out.stderr.starts_with(
            "baton: message both is queued or running at several instances: name one as TARGET; candidates:\n"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("\n  alpha ").count(),
        1,
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches("\n  beta ").count(), 1, "{}", out.stderr);

    let out = env.run(&["cancel", "never-sent"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("no instance, live or stopped, holds message never-sent queued or running"),
        "{}",
        out.stderr
    );
}

/// `baton mcp`'s host is the test, so the test's children are the
/// agent's processes: they cancel only what the agent's instance sent
/// (an instance sends nothing to itself, so in practice nothing queued
/// here), never another sender's task.
#[test]
fn the_receivers_agent_may_cancel_only_what_its_instance_sent() {
    let env = Env::new();
    let ws = env.workspace("agentic");
    let mut mcp = env
        .cmd()
        .args(["mcp", "--name", "agentic"])
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("a-{}-", mcp.id());
    util::wait_for("baton mcp's instance", WAIT, || {
        util::manifests(&env.registry).into_iter().find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
    });
    let out = env.run(&["send", "--message-id", "o-1", "agentic", "from outside"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let refused = env.run(&["cancel", "agentic", "o-1"]);
    let queued = env.run(&["inbox", "list", "agentic"]);
    drop(mcp.stdin.take());
    let _ = util::exited_or_killed(&mut mcp, WAIT);

    assert_eq!(refused.status, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not permitted: pid ")
            && refused
                .stderr
                .contains("is a process of the agent agentic serves")
            && refused
                .stderr
                .contains("cancels only the tasks agentic sent; task o-1 was sent by a sender that is no instance"),
        "{}",
        refused.stderr
    );
    assert!(queued.stdout.contains("o-1"), "{}", queued.stdout);
}

/// A process of a turn speaks only through its instance: `task/cancel`
/// is outside the turn's row of the access table.
#[test]
fn a_process_of_a_turn_may_not_cancel() {
    let env = Env::new();
    let ws = env.workspace("beta");
    let out_file = env.root.join("turn-cancel.out");
    let handler = format!(
        "cat >/dev/null; '{}' cancel beta any-id > '{o}.part' 2>&1; echo \"rc=$?\" >> '{o}.part'; mv '{o}.part' '{o}'",
        baton_bin().display(),
        o = out_file.display()
    );
    let _beta = env.serve(&ws, &["--name", "beta", "--exec", &handler]);
    let out = env.run(&["send", "beta", "knock"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let said = util::wait_for("the turn's cancel", WAIT, || {
        fs::read_to_string(&out_file).ok()
    });
    assert!(said.ends_with("rc=1\n"), "{said}");
    assert!(
        said.contains("not permitted: pid ")
            && said.contains("belongs to a turn of beta")
            && said.contains("which may not call task/cancel"),
        "{said}"
    );
}
