//! Remote use over SSH (DESIGN §1, docs/ssh.md): `baton bridge TARGET`
//! joins stdio to an instance's socket, and `send --via CMD` / `list --via
//! CMD` run `CMD baton ...` to reach a baton on another host.
//!
//! No sshd is started: the tests stand a local script in for `ssh host`.
//! Like ssh, it joins its arguments after the host with spaces and hands
//! them to a shell on the "remote" side, which here is a second private
//! world (its own registry, state and home directories) on this machine.
//! Everything ssh adds (authentication, encryption, the network) is
//! OpenSSH's, and baton has nothing to do with it; what these tests check
//! is baton's part: the command line `--via` builds, the bridge's byte
//! stream, and exit codes that match a local send.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{Env, Output, baton_bin};

/// Two private worlds: `remote`, where the instances run, and `local`,
/// where the commands under test run, with `ssh` standing for a script that
/// reaches `remote`, and `baton` on PATH there (as it is on a real host).
struct Hosts {
    remote: Env,
    local: Env,
    /// The `--via` value: the stand-in for `ssh host`.
    via: String,
    /// PATH for commands in `local`, with the stand-in's `bin` first.
    path: String,
}

impl Hosts {
    fn new() -> Hosts {
        let remote = Env::new();
        let local = Env::new();
        let bin = local.root.join("bin");
        fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).unwrap();
        // ssh runs "ARGS..." (joined with spaces) with the remote user's
        // shell; so does this, in the remote world's environment.
        let ssh = bin.join("fake-ssh");
        fs::write(
            &ssh,
            format!(
                "#!/bin/sh\n\
                 # stands in for ssh HOST COMMAND...\n\
                 shift\n\
                 exec env BATON_DIR='{}' XDG_STATE_HOME='{}' HOME='{}' TMPDIR='{}' /bin/sh -c \"$*\"\n",
                remote.registry.display(),
                remote.state.display(),
                remote.root.join("home").display(),
                remote.root.join("tmp").display(),
            ),
        )
        .unwrap();
        fs::set_permissions(&ssh, fs::Permissions::from_mode(0o755)).unwrap();
        let path = match std::env::var("PATH") {
            Ok(p) if !p.is_empty() => format!("{}:{p}", bin.display()),
            _ => format!("{}:/usr/bin:/bin", bin.display()),
        };
        Hosts {
            remote,
            local,
            via: "fake-ssh far.example".into(),
            path,
        }
    }

    /// `baton ARGS` in the local world, with the stand-in on PATH.
    fn run(&self, args: &[&str]) -> Output {
        self.local
            .run_with(&[("PATH", self.path.as_str())], None, args, None)
    }

    /// `baton send --via ... TARGET BODY --message-id ID --json`.
    fn send_via(&self, target: &str, body: &str, id: &str) -> Output {
        self.run(&[
            "send",
            "--via",
            &self.via,
            target,
            body,
            "--message-id",
            id,
            "--json",
        ])
    }
}

/// The same send made locally on the remote host, for comparison.
fn send_local(env: &Env, target: &str, body: &str, id: &str) -> Output {
    env.run(&["send", target, body, "--message-id", id, "--json"])
}

fn status_of(out: &Output) -> String {
    let v: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
    v["status"].as_str().unwrap_or("").to_string()
}

#[test]
fn send_via_gives_the_statuses_and_exit_codes_of_a_local_send() {
    let h = Hosts::new();
    let ws = h.remote.workspace("far");
    let s = h.remote.serve(&ws, &["--name", "far"]);

    // accepted, then duplicate: both exit 0, and the task is there once.
    let first = h.send_via("far", "check fix-42", "m1");
    assert_eq!(first.status, 0, "{first:?}");
    assert_eq!(status_of(&first), "accepted");
    let v: Value = serde_json::from_str(first.stdout.trim()).unwrap();
    assert_eq!(v["queue_position"], json!(1), "{v}");
    assert_eq!(v["target"]["instance_id"], json!(s.id), "{v}");
    let again = h.send_via("far", "check fix-42", "m1");
    assert_eq!(again.status, 0, "{again:?}");
    assert_eq!(status_of(&again), "duplicate");
    let mut c = s.client();
    assert_eq!(s.queued(&mut c), 1);

    // The same two locally, on the remote host, for comparison.
    let local = send_local(&h.remote, "far", "check fix-43", "m2");
    assert_eq!((local.status, status_of(&local).as_str()), (0, "accepted"));
    let local = send_local(&h.remote, "far", "check fix-43", "m2");
    assert_eq!((local.status, status_of(&local).as_str()), (0, "duplicate"));

    // Refusals exit 1, as locally: a reused id, then a paused receiver.
    let reused = h.send_via("far", "something else", "m1");
    let local = send_local(&h.remote, "far", "something else", "m2");
    assert_eq!(status_of(&reused), "invalid", "{reused:?}");
    assert_eq!((reused.status, status_of(&local).as_str()), (1, "invalid"));
    assert_eq!(local.status, 1);
    let text = h.run(&[
        "send",
        "--via",
        &h.via,
        "far",
        "other",
        "--message-id",
        "m1",
    ]);
    assert_eq!(text.status, 1, "{text:?}");
    assert!(
        text.stderr
            .contains("refused message m1: invalid: message_id reused with a different body"),
        "{text:?}"
    );

    assert_eq!(h.remote.run(&["pause", "far"]).status, 0);
    let paused = h.send_via("far", "while paused", "m3");
    let local = send_local(&h.remote, "far", "while paused", "m4");
    assert_eq!((paused.status, status_of(&paused).as_str()), (1, "paused"));
    assert_eq!((local.status, status_of(&local).as_str()), (1, "paused"));
    assert_eq!(h.remote.run(&["resume", "far"]).status, 0);

    // A plain-text send says what happened, like a local one.
    let text = h.run(&[
        "send",
        "--via",
        &h.via,
        "far",
        "one more",
        "--message-id",
        "m5",
    ]);
    assert_eq!(text.status, 0, "{text:?}");
    assert!(
        text.stdout
            .starts_with(&format!("accepted: far ({}) queued message m5", s.id)),
        "{text:?}"
    );
    assert_eq!(s.queued(&mut c), 3);
}

#[test]
fn send_via_to_an_unknown_target_exits_3_and_a_failed_via_exits_4() {
    let h = Hosts::new();
    let ws = h.remote.workspace("far");
    let _s = h.remote.serve(&ws, &["--name", "far"]);

    let nobody = h.send_via("nobody", "hello", "m1");
    let local = send_local(&h.remote, "nobody", "hello", "m1");
    assert_eq!(local.status, 3, "{local:?}");
    assert_eq!(nobody.status, 3, "{nobody:?}");
    // The remote bridge's own message comes through on stderr.
    assert!(nobody.stderr.contains("nobody"), "{nobody:?}");

    // A via command that cannot reach anything (ssh exits 255 then).
    let down = h.run(&["send", "--via", "exit 255; :", "far", "hello", "--json"]);
    assert_eq!(down.status, 4, "{down:?}");
    let down = h.run(&["list", "--via", "exit 255; :"]);
    assert_eq!(down.status, 4, "{down:?}");
}

#[test]
fn list_via_shows_the_remote_instances() {
    let h = Hosts::new();
    let a = h
        .remote
        .serve(&h.remote.workspace("alpha"), &["--name", "alpha"]);
    let b = h
        .remote
        .serve(&h.remote.workspace("beta"), &["--name", "beta"]);
    let near = h
        .local
        .serve(&h.local.workspace("near"), &["--name", "near"]);

    let out = h.run(&["list", "--via", &h.via, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let items: Vec<Value> = serde_json::from_str(out.stdout.trim()).unwrap();
    let ids: Vec<&str> = items
        .iter()
        .map(|v| v["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.id.as_str(), b.id.as_str()], "{items:?}");
    assert_eq!(items[0]["name"], json!("alpha"));
    assert_eq!(items[0]["wire"], json!("jsonrpc"));

    let text = h.run(&["list", "--via", &h.via]);
    assert_eq!(text.status, 0, "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{text:?}");
    assert!(lines[0].starts_with("NAME"), "{text:?}");
    assert!(
        lines[1].starts_with("alpha") && lines[1].contains(&a.id),
        "{text:?}"
    );
    assert!(
        lines[2].starts_with("beta") && lines[2].contains(&b.id),
        "{text:?}"
    );
    assert!(!text.stdout.contains(&near.id), "{text:?}");

    // And without --via, the local world's own instance only.
    let here = h.run(&["list", "--json"]);
    let items: Vec<Value> = serde_json::from_str(here.stdout.trim()).unwrap();
    assert_eq!(items.len(), 1, "{here:?}");
    assert_eq!(items[0]["instance_id"], json!(near.id));
}

#[test]
fn a_bridge_session_speaks_the_native_protocol() {
    let h = Hosts::new();
    let ws = h.remote.workspace("far");
    let s = h.remote.serve(&ws, &["--name", "far"]);

    // What an operator types: ssh host baton bridge far.
    let mut child = Command::new("/bin/sh")
        .args(["-c", &format!("{} baton bridge far", h.via)])
        .env_clear()
        .env("PATH", &h.path)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> Value {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a line through the bridge within 10 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };

    // Pipelined, as the protocol allows: both answers come back in order.
    input
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"client\":{\"name\":\"test\",\"version\":\"0\"}}}\n\
              {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":{}}\n",
        )
        .unwrap();
    let hello = next();
    assert_eq!(hello["id"], json!(1), "{hello}");
    assert_eq!(hello["result"]["protocol_version"], json!(1), "{hello}");
    assert_eq!(hello["result"]["server"]["name"], json!("baton"), "{hello}");
    assert_eq!(
        hello["result"]["instance"]["instance_id"],
        json!(s.id),
        "{hello}"
    );
    let pong = next();
    assert_eq!(
        pong,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"status": "pong", "instance_id": s.id, "state": "ready"}})
    );

    // A delivery through it lands in the remote spool.
    let send = json!({"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": s.msg("b1", "over the bridge")});
    input.write_all(format!("{send}\n").as_bytes()).unwrap();
    let r = next();
    assert_eq!(r["result"]["status"], json!("accepted"), "{r}");
    let mut c = s.client();
    assert_eq!(s.queued(&mut c), 1);

    // Closing stdin ends the session, and the bridge exits 0.
    drop(input);
    let mut status = None;
    for _ in 0..1000 {
        if let Some(st) = child.try_wait().unwrap() {
            status = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the bridge did not exit within 10 s of its stdin closing");
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn bridge_to_an_unknown_target_exits_3() {
    let h = Hosts::new();
    let out = h.remote.run(&["bridge", "nobody"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}
