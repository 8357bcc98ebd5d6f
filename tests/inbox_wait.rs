//! `baton inbox wait [--timeout SECONDS] [TARGET]`: exits 0 with a one-line
//! summary as soon as a task waits to be claimed at a pull instance (at
//! once when one already waits), exit 5 at `--timeout` with nothing
//! changed; it is woken by the instance's events, not by polling, and
//! follows the instance across a restart. What "waits to be claimed"
//! leaves out: tasks waiting for an approval, a paused instance; an exec
//! or `--approve deny` instance is refused.

use crate::util::{
    Env, Proc, RawClient, Served, approval_of, settled_threads, switches, threads, wait_until,
};
use serde_json::{Value, json};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// The bound on every wait in this file.
const T: Duration = Duration::from_secs(30);

/// Starts `baton inbox wait ARGS` in `dir` and returns once the instance
/// holds its subscription (a subscribed connection's two threads: its
/// reader and its event forwarder) and its look at the inbox (a
/// connection of its own) is over; it must still be waiting then.
fn start_wait(env: &Env, inst: &Served, dir: &Path, args: &[&str]) -> Proc {
    let pid = inst.pid();
    let base = settled_threads(pid);
    let mut full = vec!["inbox", "wait"];
    full.extend_from_slice(args);
    let mut w = env.spawn(&full, dir);
    wait_until("the wait to subscribe", T, || {
        threads(pid) >= base + 2 || !w.is_running()
    });
    wait_until("the look at the inbox to end", T, || {
        settled_threads(pid) == base + 2 || !w.is_running()
    });
    assert!(
        w.is_running(),
        "inbox wait exited early: {}{}",
        w.stdout(),
        w.stderr()
    );
    w
}

fn send(inst: &Served, id: &str, body: &str) {
    let r = inst.send(&mut inst.client(), id, body);
    assert_eq!(r["status"], "accepted", "{r}");
}

/// The ids `inbox/list` shows queued.
fn queued(inst: &Served) -> Vec<String> {
    let r = inst.client().call(3, "inbox/list", json!({}));
    r["result"]["queued"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["message_id"].as_str().unwrap().to_string())
        .collect()
}

#[track_caller]
fn call(c: &mut RawClient, method: &str, params: Value) -> Value {
    let r = c.call(9, method, params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: {r}"))
}

#[test]
fn a_task_already_waiting_ends_the_wait_at_once_and_stays_queued() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "puller"]);
    send(&inst, "first", "do one thing\nand another");
    send(&inst, "second", "two");
    let out = env.run_with(&[], Some(&ws), &["inbox", "wait"], None);
    assert_eq!(out.status, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout,
        "puller: 2 tasks wait to be claimed; next: first from (cli)\n"
    );
    assert_eq!(queued(&inst), ["first", "second"]);

    let out = env.run_with(&[], Some(&ws), &["inbox", "wait", "--json"], None);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"name": "puller", "waiting": 2, "message_id": "first", "from": "(cli)"})
    );
}

#[test]
fn a_task_that_arrives_wakes_the_wait() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "puller"]);
    let mut w = start_wait(&env, &inst, &ws, &[]);
    send(&inst, "late", "wake up");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert_eq!(
        w.stdout(),
        "puller: 1 task waits to be claimed; next: late from (cli)\n"
    );
    assert_eq!(queued(&inst), ["late"]);
}

#[test]
fn the_wait_makes_no_wakeups_while_nothing_arrives() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut w = start_wait(&env, &inst, &ws, &[]);
    let before = switches(w.pid());
    thread::sleep(Duration::from_millis(1500));
    let after = switches(w.pid());
    assert!(w.is_running(), "{}", w.stderr());
    // A poll, even four times a second, would wake a thread each time.
    assert!(
        after - before <= 1,
        "inbox wait woke {} times in 1.5 s of quiet",
        after - before
    );
    send(&inst, "x", "now");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
}

#[test]
fn the_timeout_ends_an_empty_wait_with_5_and_changes_nothing() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--approve", "ask"]);
    // It waits for an approval, so it does not wait to be claimed.
    send(&inst, "asked", "may I");
    let started = Instant::now();
    let out = env.run_with(&[], Some(&ws), &["inbox", "wait", "--timeout", "0.5"], None);
    assert_eq!(out.status, 5, "{}{}", out.stdout, out.stderr);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.contains("no task waits to be claimed") && out.stderr.contains("--timeout"),
        "{}",
        out.stderr
    );
    let out = env.run_with(
        &[],
        Some(&ws),
        &["inbox", "wait", "--timeout", "0.2", "--json"],
        None,
    );
    assert_eq!(out.status, 5, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["waiting"], 0);
    assert_eq!(v["timed_out"], true);
    let st = call(
        &mut inst.client(),
        "task/status",
        json!({"message_id": "asked"}),
    );
    assert_eq!(st["status"], "awaiting_approval", "{st}");
}

#[test]
fn an_approval_wakes_the_wait() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--approve", "ask"]);
    send(&inst, "asked", "may I");
    let mut w = start_wait(&env, &inst, &ws, &[]);
    let mut answer = approval_of(&inst.spool(), "asked");
    answer["decision"] = json!("approve");
    let r = call(&mut inst.client(), "approval/respond", answer);
    assert_eq!(r["status"], "approved", "{r}");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert!(w.stdout().contains("next: asked from"), "{}", w.stdout());
}

#[test]
fn a_paused_instance_has_nothing_to_claim_until_it_resumes() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    send(&inst, "held", "later");
    call(&mut inst.client(), "control/pause", json!({}));
    let mut w = start_wait(&env, &inst, &ws, &[]);
    call(&mut inst.client(), "control/resume", json!({}));
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert!(w.stdout().contains("next: held"), "{}", w.stdout());
}

#[test]
fn a_requeued_task_wakes_the_wait() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &["--name", "rq"]);
    send(&inst, "cut", "interrupted");
    assert_eq!(
        call(&mut inst.client(), "inbox/claim", json!({}))["status"],
        "claimed"
    );
    inst.kill9();
    let inst = env.serve(&ws, &["--name", "rq"]);
    let mut w = start_wait(&env, &inst, &ws, &["rq"]);
    let r = call(
        &mut inst.client(),
        "inbox/requeue",
        json!({"message_id": "cut"}),
    );
    assert_eq!(r["status"], "requeued", "{r}");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert!(w.stdout().contains("next: cut"), "{}", w.stdout());
}

#[test]
fn target_names_the_instance_from_anywhere() {
    let env = Env::new();
    let (a, b) = (env.workspace("a"), env.workspace("b"));
    let ia = env.serve(&a, &["--name", "alpha"]);
    let ib = env.serve(&b, &["--name", "beta"]);
    send(&ia, "for-alpha", "x");
    let elsewhere = env.workspace("elsewhere");
    let out = env.run_with(&[], Some(&elsewhere), &["inbox", "wait", "alpha"], None);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("alpha: 1 task waits"),
        "{}",
        out.stdout
    );
    // By instance id, and beta has nothing.
    let out = env.run_with(
        &[],
        Some(&elsewhere),
        &["inbox", "wait", "--timeout", "0.2", &ib.id],
        None,
    );
    assert_eq!(out.status, 5, "{}{}", out.stdout, out.stderr);
    let mut w = start_wait(&env, &ib, &elsewhere, &["beta"]);
    send(&ib, "for-beta", "y");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert!(
        w.stdout().starts_with("beta: 1 task waits"),
        "{}",
        w.stdout()
    );
    // No TARGET where no instance serves: exit 3.
    let out = env.run_with(&[], Some(&elsewhere), &["inbox", "wait"], None);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert!(out.stderr.contains("no instance serves"), "{}", out.stderr);
}

#[test]
fn the_wait_follows_the_instance_across_a_restart() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &["--name", "phoenix"]);
    let mut w = start_wait(&env, &inst, &ws, &[]);
    inst.term();
    wait_until("the note that it waits for a restart", T, || {
        w.stderr()
            .contains("phoenix is not running; waiting for it to start")
    });
    assert!(w.is_running(), "{}", w.stderr());
    let inst = env.serve(&ws, &["--name", "phoenix"]);
    // Found again within the registry's one-second re-read; the task is
    // either seen by its look or wakes it.
    send(&inst, "after", "back");
    assert_eq!(w.wait_exit(T), Some(0), "{}", w.stderr());
    assert!(w.stdout().contains("next: after"), "{}", w.stdout());
}

#[test]
fn exec_and_deny_instances_and_stopped_ones_are_refused() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let other = env.workspace("other");
    let _exec = env.serve(&ws, &["--name", "runner", "--exec", "true"]);
    let _deny = env.serve(&other, &["--name", "wall", "--approve", "deny"]);
    let out = env.run(&["inbox", "wait", "runner"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("runner runs its tasks with --exec"),
        "{}",
        out.stderr
    );
    let out = env.run(&["inbox", "wait", "wall"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(out.stderr.contains("--approve deny"), "{}", out.stderr);
    let out = env.run(&["inbox", "wait", "gone"]);
    assert_eq!(out.status, 3, "{}", out.stderr);
}

#[test]
fn bad_command_lines_are_usage_errors() {
    let env = Env::new();
    for (args, says) in [
        (&["inbox", "wait", "a", "b"][..], "unexpected argument b"),
        (&["inbox", "wait", "--timeout", "0"][..], "--timeout 0"),
        (
            &["inbox", "wait", "--timeout", "soon"][..],
            "--timeout soon",
        ),
        (
            &["inbox", "claim", "--timeout", "3"][..],
            "--timeout is for inbox wait",
        ),
        (
            &["inbox", "wait", "--reply", "x"][..],
            "--reply is for inbox complete",
        ),
    ] {
        let out = env.run(args);
        assert_eq!(out.status, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn ctrl_c_ends_the_wait_and_leaves_the_inbox_alone() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &[]);
    let mut w = start_wait(&env, &inst, &ws, &[]);
    w.signal(libc::SIGINT);
    assert_eq!(w.wait_exit(T), Some(130), "{}", w.stderr());
    send(&inst, "kept", "still here");
    assert_eq!(queued(&inst), ["kept"]);
}
