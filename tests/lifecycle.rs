//! Whole-program behaviour: an idle instance sleeps in the kernel, `make
//! demo`'s script works, and `baton` alone serves the current directory.

use crate::util::{Env, baton_bin, blocked, switches, wait_manifest};
use std::fs;
use std::process::Command;
use std::time::Duration;

#[test]
fn an_idle_instance_does_not_wake_up() {
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("skipped: no /proc on this system");
        return;
    }
    let env = Env::new();
    let ws = env.workspace("idle");
    let s = env.serve(&ws, &["--name", "idle"]);
    // Once startup has settled (every thread asleep), watch for two
    // seconds. Not waking up is the absence of anything at all, which no
    // event can mark: it is measured over a window of time (a slow
    // machine makes no extra wakeups).
    assert!(blocked(s.proc.pid()), "the instance exited");
    let before = switches(s.proc.pid());
    std::thread::sleep(Duration::from_secs(2));
    let after = switches(s.proc.pid());
    assert!(
        after - before <= 3,
        "an idle instance woke up {} times in 2 s",
        after - before
    );
}

#[test]
fn the_demo_script_hands_a_task_over_and_cleans_up() {
    let env = Env::new();
    let out = Command::new("sh")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/demo.sh"))
        .arg(baton_bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TMPDIR", env.root.join("tmp"))
        .env("HOME", env.root.join("home"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The task went to bob, bob's handler ran it in bob's workspace, and
    // its output came back to alice as a reply to that task.
    assert!(stdout.contains("accepted: bob ("), "{stdout}");
    // alice waited for bob's answer to a second task and printed it.
    assert!(
        stdout.contains("alice waits for bob's answer\nbaton: accepted: message task-2 to bob")
            || stdout.contains("alice waits for bob's answer\nbob ran a task "),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "\nbob ran a task from alice; the files here are:\nREADME\nmain.c\n\n$ baton log bob"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("<agent_relay from=\"bob\""), "{stdout}");
    let relayed = stdout
        .lines()
        .filter(|l| l.contains("relay.sent") && l.contains("to alice: accepted (reply to "))
        .count();
    // The reply to the first task; the second task's reply was printed by
    // `send --wait` above, and its `relay.sent` is recorded when bob's
    // sender thread reports, which may come after the log was read.
    assert!((1..=2).contains(&relayed), "{stdout}");
    assert!(stdout.contains("turn.finished"), "{stdout}");
    // The claimed reply says how to answer it from a shell.
    assert!(
        stdout.contains("[to reply: baton inbox complete alice "),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n$ baton stop bob\nstopped bob ("),
        "{stdout}"
    );
    // Plain, short output: no terminal escapes, no line over 100
    // characters, on stdout or stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains('\u{1b}'),
            "an escape in the demo's output:\n{text}"
        );
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "a long line in the demo's output: {line}"
            );
        }
    }
    // Everything it made lived under TMPDIR and is gone.
    let left: Vec<_> = fs::read_dir(env.root.join("tmp")).unwrap().collect();
    assert!(left.is_empty(), "the demo left {left:?}");
}

#[test]
fn baton_without_a_command_serves_the_current_directory() {
    let env = Env::new();
    let ws = env.workspace("here");
    let mut p = env.spawn(&[], &ws);
    let m = wait_manifest(&env.registry, 1);
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(&m[0]).unwrap()).unwrap();
    assert_eq!(manifest["name"], "here");
    assert_eq!(manifest["workspace"], ws.display().to_string());
    assert_eq!(p.term(), 0);
    assert!(
        p.stderr()
            .contains("serving this directory in the foreground")
    );
}
