//! How an exec turn is started (issue 20, fast dispatch): the handler's
//! leader as `sys::spawn_leader` starts it (its environment, its signal
//! state, its working directory), the state between turns that follow
//! each other, and the I/O threads that serve turns one after another.

use crate::util::{self, Env, event_is as is, transcript};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

#[track_caller]
fn wait_finished(spool: &Path, id: &str) -> Value {
    util::wait_event(spool, &format!("turn.finished for {id}"), WAIT, |e| {
        is(e, "turn.finished", id)
    })
}

/// A mask as `/proc/PID/status` prints it (`SigBlk:`, `SigIgn:`).
fn mask(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in\n{status}"));
    u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
}

/// The leader starts as a fork and exec would start it (its signal state
/// read by the shell itself, before it forks anything): nothing blocked,
/// SIGPIPE (which Rust ignores) back to its default, in the workspace,
/// with the instance's environment and each turn variable once, even one
/// the instance itself was started with.
#[test]
fn a_handler_starts_with_the_instances_environment_and_default_signals() {
    if !util::reliability::have_proc("a_handler_starts_with_the_instances_environment") {
        return;
    }
    let env = Env::new();
    let out = env.root.join("out");
    fs::create_dir_all(&out).unwrap();
    let exec = format!(
        "while read -r l; do echo \"$l\"; done < /proc/self/status > '{o}/status'; \
         cat > /dev/null; pwd > '{o}/pwd'; env > '{o}/env'",
        o = out.display()
    );
    let ws = env.workspace("echo");
    let s = env.serve_with(
        &ws,
        &[("BATON_TURN", "outer"), ("DISPATCH_MARK", "kept")],
        &["--name", "echo", "--exec", &exec],
    );
    let spool = s.spool();
    let mut c = s.client();
    assert_eq!(s.send(&mut c, "t-1", "look")["status"], "accepted");
    let fin = wait_finished(&spool, "t-1");
    assert_eq!(fin["outcome"], "done", "{fin}");

    let status = fs::read_to_string(out.join("status")).unwrap();
    assert_eq!(mask(&status, "SigBlk:"), 0, "blocked signals:\n{status}");
    let sigpipe = 1u64 << (13 - 1);
    assert_eq!(
        mask(&status, "SigIgn:") & sigpipe,
        0,
        "SIGPIPE ignored:\n{status}"
    );
    let pwd = fs::read_to_string(out.join("pwd")).unwrap();
    assert_eq!(
        fs::canonicalize(pwd.trim()).unwrap(),
        fs::canonicalize(&ws).unwrap()
    );
    let vars = fs::read_to_string(out.join("env")).unwrap();
    let turn: Vec<&str> = vars
        .lines()
        .filter(|l| l.starts_with("BATON_TURN="))
        .collect();
    assert_eq!(turn.len(), 1, "{vars}");
    assert_ne!(turn[0], "BATON_TURN=outer", "{vars}");
    assert_eq!(turn[0].len(), "BATON_TURN=".len() + 24, "{vars}");
    assert!(vars.lines().any(|l| l == "DISPATCH_MARK=kept"), "{vars}");
    assert_eq!(
        vars.lines()
            .filter(|l| l.starts_with("BATON_MESSAGE_ID="))
            .collect::<Vec<_>>(),
        ["BATON_MESSAGE_ID=t-1"]
    );
}

/// A command that cannot run in the workspace is the task's failure, with
/// the reason, and the queue goes on.
#[test]
fn a_handler_that_cannot_start_fails_its_task_with_the_reason() {
    let env = Env::new();
    let ws = env.workspace("gone");
    let s = env.serve(&ws, &["--name", "gone", "--exec", "cat > /dev/null"]);
    let spool = s.spool();
    let mut c = s.client();
    fs::remove_dir(&ws).unwrap();
    assert_eq!(s.send(&mut c, "t-1", "run")["status"], "accepted");
    let fin = wait_finished(&spool, "t-1");
    assert_eq!(fin["outcome"], "failed", "{fin}");
    let error = fin["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("cannot start the handler") && error.contains("No such file"),
        "{fin}"
    );
}

/// Turns that follow each other keep the instance busy: no `ready` (and no
/// manifest rewrite) between them, and `ready` once the queue is empty.
#[test]
fn back_to_back_turns_keep_the_instance_busy() {
    let env = Env::new();
    // The first turn waits for the gate (bounded), so the others queue
    // behind it.
    let gate = env.root.join("gate");
    let exec = format!(
        "cat > /dev/null; n=0; while [ \"$BATON_MESSAGE_ID\" = t-0 ] && [ ! -e '{}' ] \
         && [ $n -lt 300 ]; do sleep 0.05; n=$((n+1)); done",
        gate.display()
    );
    let s = env.serve(&env.workspace("busy"), &["--name", "busy", "--exec", &exec]);
    let spool = s.spool();
    let mut c = s.client();
    for i in 0..3 {
        assert_eq!(
            s.send(&mut c, &format!("t-{i}"), "go")["status"],
            "accepted"
        );
    }
    util::wait_event(&spool, "turn.started for t-0", WAIT, |e| {
        is(e, "turn.started", "t-0")
    });
    fs::write(&gate, "").unwrap();
    for i in 0..3 {
        let fin = wait_finished(&spool, &format!("t-{i}"));
        assert_eq!(fin["outcome"], "done", "{fin}");
    }
    util::wait_event(&spool, "state.changed ready", WAIT, |e| {
        e["kind"] == "state.changed" && e["state"] == "ready"
    });
    let events = transcript(&spool);
    let at = |kind: &str, id: &str| {
        events
            .iter()
            .position(|e| is(e, kind, id))
            .unwrap_or_else(|| panic!("no {kind} for {id}: {events:#?}"))
    };
    let (first, last) = (at("turn.started", "t-0"), at("turn.finished", "t-2"));
    let states: Vec<&Value> = events[first..last]
        .iter()
        .filter(|e| e["kind"] == "state.changed")
        .collect();
    assert!(
        states.iter().all(|e| e["state"] == "busy"),
        "the state between the turns: {states:#?}"
    );
    assert!(
        events[last..]
            .iter()
            .any(|e| e["kind"] == "state.changed" && e["state"] == "ready"),
        "ready after the last turn: {events:#?}"
    );
}

/// Turns one after another are served by threads that wait between turns:
/// twenty turns leave the instance with about as many threads as two did.
#[test]
fn turns_reuse_their_io_threads() {
    if !util::reliability::have_proc("turns_reuse_their_io_threads") {
        return;
    }
    let env = Env::new();
    let s = env.serve(
        &env.workspace("reuse"),
        &[
            "--name",
            "reuse",
            "--exec",
            "cat > /dev/null; echo out; echo err >&2",
        ],
    );
    let spool = s.spool();
    let mut c = s.client();
    let threads = || {
        fs::read_dir(format!("/proc/{}/task", s.pid()))
            .unwrap()
            .count()
    };
    for i in 0..2 {
        assert_eq!(
            s.send(&mut c, &format!("w-{i}"), "go")["status"],
            "accepted"
        );
        wait_finished(&spool, &format!("w-{i}"));
    }
    // Once it holds still (two reads 50 ms apart agree): the threads of
    // the turns just over are gone.
    let mut last = None;
    let before = util::poll(Duration::from_secs(10), Duration::from_millis(50), || {
        let now = threads();
        let same = last == Some(now);
        last = Some(now);
        same.then_some(now)
    })
    .or(last)
    .expect("a thread count");
    // Two batches, each under the queue's cap (16): however slowly the
    // handlers run, every send is taken.
    for batch in [0..10, 10..20] {
        for i in batch.clone() {
            assert_eq!(
                s.send(&mut c, &format!("t-{i}"), "go")["status"],
                "accepted"
            );
        }
        for i in batch {
            let fin = wait_finished(&spool, &format!("t-{i}"));
            assert_eq!(fin["outcome"], "done", "{fin}");
            assert_eq!(fin["stdout_bytes"], 4, "{fin}");
            assert_eq!(fin["stderr_bytes"], 4, "{fin}");
        }
    }
    // Two more than before at most: a turn may start while the last
    // one's thread is still on its way back (under load, twice). The
    // last turns' threads are given time to go.
    let after = util::poll(Duration::from_secs(10), Duration::from_millis(50), || {
        let now = threads();
        (now <= before + 2).then_some(now)
    })
    .unwrap_or_else(threads);
    assert!(
        after <= before + 2,
        "{after} threads after 20 turns, {before} after 2"
    );
}

/// A thread's scheduler slice in nanoseconds, as `/proc/.../sched` shows
/// it (`se.slice`, Linux 6.12 and later).
fn slice(sched: &str) -> Option<u64> {
    let text = fs::read_to_string(sched).ok()?;
    let line = text.lines().find(|l| l.starts_with("se.slice"))?;
    line.split(':').nth(1)?.trim().parse().ok()
}

/// The foreground, which starts each handler and waits while the kernel
/// starts it, asks for a short slice: on a busy machine a handler that
/// just started would otherwise keep the CPU for its whole slice before
/// the instance learns that it runs (docs/performance.md, row 7b). The
/// handler gets the default slice, the one this test runs with.
#[test]
fn the_foreground_asks_for_a_short_slice_and_its_handlers_get_the_default() {
    let Some(default) = slice("/proc/self/sched") else {
        assert_ne!(
            std::env::var("BATON_REQUIRE_ALL").as_deref(),
            Ok("1"),
            "this kernel shows no se.slice in /proc/self/sched (BATON_REQUIRE_ALL=1)"
        );
        eprintln!("skipped: this kernel shows no se.slice in /proc/PID/sched");
        return;
    };
    let env = Env::new();
    let out = env.root.join("handler-slice");
    let exec = format!(
        "cat > /dev/null; sed -n 's/^se\\.slice *: *//p' /proc/$$/sched > '{}'",
        out.display()
    );
    let s = env.serve(
        &env.workspace("slice"),
        &["--name", "slice", "--exec", &exec],
    );
    let mut c = s.client();
    assert_eq!(s.send(&mut c, "t-1", "look")["status"], "accepted");
    let fin = wait_finished(&s.spool(), "t-1");
    assert_eq!(fin["outcome"], "done", "{fin}");
    let handler = fs::read_to_string(&out).unwrap();
    assert_eq!(handler.trim(), default.to_string(), "the handler's slice");
    let pid = s.pid();
    let foreground = slice(&format!("/proc/{pid}/task/{pid}/sched"));
    assert_eq!(foreground, Some(100_000), "the foreground's slice");
}
