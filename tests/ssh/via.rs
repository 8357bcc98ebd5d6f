//! What `--via` runs on the other host, and its bounds: with
//! `BATON_REMOTE` unset, a login-free lookup finds baton off the PATH
//! (`~/.local/bin/baton`, ...); a TARGET that would not pass through the
//! remote shell as it is is a usage error; a via command that writes
//! without end, or never answers, is stopped with its whole process group.

use std::fs;
use std::time::{Duration, Instant};

use super::{Hosts, status_of};
use crate::util::{Leftovers, baton_bin, pid_alive, wait_until};

/// The processes of process group `pgid` still running (zombies aside).
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(at) = stat.rfind(')') else {
                return false;
            };
            // After the command: state, ppid, pgrp.
            let fields: Vec<&str> = stat[at + 1..].split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
        .collect()
}

/// Issue 18: baton is rarely on a non-interactive ssh's PATH. Without
/// `BATON_REMOTE`, `--via` looks for it where it is usually installed
/// (here `~/.local/bin`, on a host whose PATH has no baton), and says
/// where it looked when it is nowhere.
#[test]
fn send_via_finds_baton_in_local_bin_without_baton_remote() {
    let h = Hosts::new();
    let s = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let via = "bare-ssh far.example";
    let send = |id: &str| {
        h.run(&[
            "send",
            "--via",
            via,
            "far",
            "x",
            "--message-id",
            id,
            "--json",
        ])
    };
    let missing = send("l1");
    assert_eq!(missing.status, 4, "{missing:?}");
    // The remote lookup names the places it looked (stderr); baton here
    // names BATON_REMOTE in its transport result (stdout, --json).
    let path = format!("not on PATH ({})", super::bare_path(&h.remote));
    for said in [path.as_str(), "~/.local/bin/baton", "/opt/baton/bin/baton"] {
        assert!(missing.stderr.contains(said), "{said}: {missing:?}");
    }
    assert_eq!(super::parse(&missing)["status"], "transport", "{missing:?}");
    assert!(missing.stdout.contains("BATON_REMOTE"), "{missing:?}");

    // The remote user's HOME is the remote world's `home`.
    let bin = h.remote.root.join("home/.local/bin");
    fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).unwrap();
    let out = send("l2");
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "accepted"),
        "{out:?}"
    );
    let list = h.run(&["list", "--via", via, "--json"]);
    assert_eq!(list.status, 0, "{list:?}");
    assert!(list.stdout.contains(&s.id), "{list:?}");
    // A stopped agent's task is stored through the lookup, too.
    let mut s = s;
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let out = send("l3");
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "stored"),
        "{out:?}"
    );
}

/// A TARGET goes into the remote command line: one that is not an id or
/// a name is refused here (exit 2), and the via command never runs.
#[test]
fn a_via_target_that_is_no_id_or_name_is_a_usage_error() {
    let h = Hosts::new();
    let ran = h.local.root.join("ran");
    let via = format!("touch {}; fake-ssh far.example", ran.display());
    let mark = h.local.root.join("marked");
    let bad = format!("far;touch {}", mark.display());
    for target in [bad.as_str(), "far example", "$(id)"] {
        for wait in [false, true] {
            let mut args = vec!["send", "--via", &via, target, "x"];
            if wait {
                args.push("--wait");
            }
            let out = h.run(&args);
            assert_eq!(out.status, 2, "{out:?}");
            assert!(
                out.stderr.contains("is not an instance id or name"),
                "{out:?}"
            );
        }
    }
    assert!(!ran.exists(), "the via command ran");
    assert!(!mark.exists(), "the target ran as a command");
}

/// `list --via` read the via command's output to its end, however much,
/// and `send --via` each of its lines: past 64 MiB the command is
/// stopped, its process group with it, and the command fails saying so
/// (exit 4), without waiting for the 20 s timeout.
#[test]
fn a_via_command_that_writes_without_end_is_stopped() {
    let h = Hosts::new();
    for (i, cmd) in ["list", "send"].iter().enumerate() {
        let left = Leftovers(h.local.root.join(format!("left-{i}.pid")));
        // One line of more than the bound (100 MiB), then a process that
        // holds on.
        let via = format!(
            "echo $$ >> {}; yes | tr -d '\\n' | head -c 104857600; exec sleep 60; :",
            left.0.display()
        );
        let args: Vec<&str> = match *cmd {
            "send" => vec!["send", "--via", &via, "far", "x"],
            _ => vec!["list", "--via", &via],
        };
        let t = Instant::now();
        let out = h.run(&args);
        let took = t.elapsed();
        assert_eq!(out.status, 4, "{out:?}");
        let said = match *cmd {
            "send" => "wrote a line over 64 MiB",
            _ => "wrote more than 64 MiB",
        };
        assert!(out.stderr.contains(said), "{out:?}");
        assert!(took < Duration::from_secs(15), "took {took:?}: {out:?}");
        let pgid = left.pids()[0];
        wait_until(
            &format!("{cmd} --via: the via command's process group to be gone"),
            Duration::from_secs(5),
            || group_members(pgid).is_empty(),
        );
    }
}

/// Issue 18: a `--via` that never answers times out (exit 4), and its
/// whole process group goes with it: the shell, and what it started in
/// the background. The remote timeout is at least 20 s, so this takes
/// about that long.
#[test]
fn a_via_that_never_answers_times_out_and_leaves_no_process() {
    let h = Hosts::new();
    let ws = h.local.workspace("here");
    let mut runs = Vec::new();
    let mut files = Vec::new();
    for (i, cmd) in ["send", "list"].iter().enumerate() {
        let left = Leftovers(h.local.root.join(format!("left-{i}.pid")));
        // A background process, then the shell (the group's leader) as a
        // process that never answers.
        let via = format!(
            "sleep 60 </dev/null & echo $! >> {f}; echo $$ >> {f}; exec sleep 60; :",
            f = left.0.display()
        );
        let args: Vec<&str> = match *cmd {
            "send" => vec!["send", "--via", &via, "far", "x"],
            _ => vec!["list", "--via", &via],
        };
        let vars = [("PATH", h.path.as_str())];
        runs.push((*cmd, h.local.spawn_with(&vars, &args, &ws, None)));
        files.push(left);
    }
    for ((cmd, mut p), left) in runs.into_iter().zip(&files) {
        let code = p.wait_exit(Duration::from_secs(40));
        assert_eq!(code, Some(4), "{cmd}: {}", p.stderr());
        assert!(p.stderr().contains("no answer"), "{cmd}: {}", p.stderr());
        let pids = left.pids();
        assert_eq!(pids.len(), 2, "{cmd}: {pids:?}");
        let pgid = pids[1];
        wait_until(
            &format!("{cmd} --via: its via command's process group to be gone"),
            Duration::from_secs(5),
            || group_members(pgid).is_empty() && !pid_alive(pids[0]),
        );
    }
}

/// A via command that fails is a `transport` result, as a local send's
/// is: exit 4, and with `--json` the status and the id to send again with;
/// the same text on standard error without it.
#[test]
fn a_failed_via_command_is_a_transport_result() {
    let h = Hosts::new();
    for via in ["exit 255; :", "bare-ssh far.example"] {
        let out = h.run(&[
            "send",
            "--via",
            via,
            "far",
            "hello",
            "--message-id",
            "t1",
            "--json",
        ]);
        assert_eq!(out.status, 4, "{out:?}");
        let v = super::parse(&out);
        assert_eq!(v["status"], "transport", "{v}");
        assert_eq!(v["message_id"], "t1", "{v}");
        assert!(
            v["reason"]
                .as_str()
                .is_some_and(|r| r.contains("exit status")),
            "{v}"
        );
        let text = h.run(&["send", "--via", via, "far", "hello"]);
        assert_eq!(text.status, 4, "{text:?}");
        assert!(text.stdout.is_empty(), "{text:?}");
        assert!(text.stderr.contains("exit status"), "{text:?}");
    }
}
