//! The `--via`, `bridge` and forced-command paths through a real OpenSSH
//! server, the private sshd of `util::sshd`. The remote world is the
//! parent module's; what ssh needs set up there is docs/ssh.md's recipe:
//! `BATON_REMOTE` for a baton that is not on a non-interactive PATH (or,
//! without it, the lookup finding it in the remote `~/.local/bin`),
//! `AcceptEnv`/`SetEnv` for `BATON_DIR` and `XDG_STATE_HOME`, a pinned
//! host key with `BatchMode`, and a forced-command key that carries its
//! own environment.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Hosts, parse, status_of};
use crate::util::sshd::{Masters, Sshd, have_sshd};
use crate::util::{Env, baton_bin, exited_or_killed, wait_until};

/// The bound on every wait here.
const T: Duration = Duration::from_secs(10);

/// A private sshd whose `forced_key` runs `forced` and whose sessions
/// get `home` as HOME.
fn start_sshd(forced: &str, home: &Path) -> Sshd {
    Sshd::start(Some(forced), Some(home)).unwrap_or_else(|e| panic!("{e}"))
}

/// `sshd.via(key)`, passing `env`'s registry and state home when given.
fn via_for(sshd: &Sshd, key: &str, env: Option<&Env>) -> String {
    sshd.via(key, env.map(|e| (e.registry.as_path(), e.state.as_path())))
}

/// `VIA COMMAND` as an operator types it, with `input` on its stdin; the
/// lines it answers, until its stdin closes and it exits (bounded).
fn session(via: &str, command: &str, input: &[u8]) -> Vec<Value> {
    let mut child = Command::new("/bin/sh")
        .args(["-c", &format!("{via} {command}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(out).lines().map_while(Result::ok).collect();
        let _ = tx.send(lines);
    });
    let lines = rx.recv_timeout(T);
    let status = exited_or_killed(&mut child, T);
    let lines = lines.expect("the session's output within 10 s");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{lines:?}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn a_real_sshd_carries_send_list_bridge_and_a_forced_command_key() {
    if !have_sshd() {
        return;
    }
    let h = Hosts::new();
    let far = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let other = h
        .remote
        .serve(&h.remote.workspace("other"), &["--name", "other"]);
    let mut gone = h
        .remote
        .serve(&h.remote.workspace("gone"), &["--name", "gone"]);
    assert_eq!(gone.term(), 0, "{}", gone.stderr());
    let bin = baton_bin();
    let bin = bin.to_str().unwrap();
    // docs/ssh.md's forced-command key: its command carries its environment.
    let forced = format!(
        "env BATON_DIR={} XDG_STATE_HOME={} {bin} bridge --key ci-bot far",
        h.remote.registry.display(),
        h.remote.state.display()
    );
    let home = h.remote.root.join("home");
    let sshd = start_sshd(&forced, &home);
    let _masters = Masters(h.local.registry.clone());
    let via = via_for(&sshd, "user_key", Some(&h.remote));
    let remote = [("BATON_REMOTE", bin)];
    let run = |vars: &[(&str, &str)], args: &[&str]| h.local.run_with(vars, None, args, None);

    // send --via: accepted, stored for a stopped agent, 3 for nobody.
    let out = run(
        &remote,
        &[
            "send",
            "--via",
            &via,
            "far",
            "over ssh",
            "--message-id",
            "s1",
            "--json",
        ],
    );
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "accepted"),
        "{out:?}"
    );
    assert_eq!(parse(&out)["target"]["instance_id"], json!(far.id));
    let out = run(
        &remote,
        &[
            "send",
            "--via",
            &via,
            "gone",
            "while away",
            "--message-id",
            "s2",
            "--json",
        ],
    );
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "stored"),
        "{out:?}"
    );
    // --wait for it, bounded: exit 5, and the remote `bridge --await`
    // (seen while it waits) ends with the session, its stdin closed,
    // leaving nothing there.
    let mut w = h.local.spawn_with(
        &remote,
        &[
            "send",
            "--via",
            &via,
            "--wait",
            "--timeout",
            "4",
            "gone",
            "wait",
            "--json",
        ],
        &h.local.workspace("sender"),
        None,
    );
    wait_until("the remote bridge --await", Duration::from_secs(10), || {
        !super::awaiting_bridges(&h.remote).is_empty()
    });
    assert_eq!(
        w.wait_exit(Duration::from_secs(15)),
        Some(5),
        "{}",
        w.stderr()
    );
    wait_until(
        "the remote bridge --await to end with its session",
        Duration::from_secs(10),
        || super::awaiting_bridges(&h.remote).is_empty(),
    );
    let out = run(&remote, &["send", "--via", &via, "nobody", "x", "--json"]);
    assert_eq!(out.status, 3, "{out:?}");
    // Without BATON_REMOTE, sshd's PATH has no baton, nor has any place
    // the lookup tries: exit 4, saying where it looked.
    let out = run(&[], &["send", "--via", &via, "far", "x", "--json"]);
    assert_eq!(out.status, 4, "{out:?}");
    // The transport result (stdout, --json) names BATON_REMOTE; the
    // remote lookup (stderr) the places it looked.
    assert!(out.stdout.contains("BATON_REMOTE"), "{out:?}");
    assert!(out.stderr.contains("~/.local/bin/baton"), "{out:?}");
    // With baton in ~/.local/bin there, the lookup finds it.
    fs::create_dir_all(home.join(".local/bin")).unwrap();
    std::os::unix::fs::symlink(bin, home.join(".local/bin/baton")).unwrap();
    let out = run(
        &[],
        &[
            "send",
            "--via",
            &via,
            "far",
            "found there",
            "--message-id",
            "s3",
            "--json",
        ],
    );
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "accepted"),
        "{out:?}"
    );
    let out = run(&[], &["list", "--via", &via, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains(&far.id), "{out:?}");

    // list --via: the remote instances, not the local ones.
    let out = run(&remote, &["list", "--via", &via, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let items: Vec<Value> = serde_json::from_str(out.stdout.trim()).unwrap();
    let ids: Vec<&str> = items
        .iter()
        .filter_map(|v| v["instance_id"].as_str())
        .collect();
    assert_eq!(ids, [far.id.as_str(), other.id.as_str()], "{out:?}");

    // A bridge session: initialize and ping, then its stdin closes.
    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1, "client": {"name": "t", "version": "0"}}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}});
    let answers = session(
        &via,
        &format!("{bin} bridge far"),
        format!("{hello}\n{ping}\n").as_bytes(),
    );
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(
        answers[0]["result"]["instance"]["instance_id"],
        json!(far.id)
    );
    assert_eq!(answers[1]["result"]["status"], json!("pong"), "{answers:?}");

    // The forced-command key: far only, whatever is asked for.
    let forced_via = via_for(&sshd, "forced_key", None);
    let out = run(
        &[],
        &[
            "send",
            "--via",
            &forced_via,
            "other",
            "x",
            "--message-id",
            "f1",
            "--json",
        ],
    );
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (1, "wrong_target"),
        "{out:?}"
    );
    let out = run(
        &[],
        &[
            "send",
            "--via",
            &forced_via,
            "far",
            "x",
            "--message-id",
            "f2",
            "--json",
        ],
    );
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "accepted"),
        "{out:?}"
    );
    let out = run(&[], &["list", "--via", &forced_via, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let items: Vec<Value> = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(items.len(), 1, "{out:?}");
    assert_eq!(items[0]["instance_id"], json!(far.id), "{out:?}");

    // The key is a sender to far and nothing else: what reaches far's
    // socket through it is refused but for hello, sends and status.
    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocol_version": 1, "client": {"name": "t", "version": "0"}}});
    let mut input = format!("{hello}\n");
    for (id, method, params) in [
        (
            2,
            "relay/send",
            json!({"target": "other", "body": "as far"}),
        ),
        (3, "inbox/claim", json!({})),
        (4, "control/pause", json!({})),
        (
            5,
            "message/send",
            json!({"message_id": "f3", "target_instance_id": far.id,
                                  "body": "hi", "sender": {"instance_id": far.id}}),
        ),
    ] {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        input.push_str(&format!("{line}\n"));
    }
    let answers = session(&forced_via, "", input.as_bytes());
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .cloned()
            .unwrap_or_default()
    };
    for id in [2, 3, 4] {
        let m = by_id(id)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            m.contains("this key is limited to sending to"),
            "{answers:?}"
        );
    }
    assert_eq!(by_id(5)["result"]["status"], "accepted", "{answers:?}");
    // From the remote end, never from far, whatever it claimed.
    let list = far.client().call(9, "inbox/list", json!({}));
    let queued = list["result"]["queued"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let f3 = queued
        .iter()
        .find(|t| t["message_id"] == "f3")
        .cloned()
        .unwrap_or_default();
    assert!(f3["sender"]["instance_id"].is_null(), "{list}");
    let remote = f3["sender"]["remote"].as_str().unwrap_or("");
    assert!(remote.starts_with("127.0.0.1 "), "{list}");
    assert_eq!(
        far.client().call(9, "control/status", json!({}))["result"]["state"],
        "ready"
    );

    let (mut cf, mut co) = (far.client(), other.client());
    assert_eq!((far.queued(&mut cf), other.queued(&mut co)), (4, 0));
}

/// Repeated `--via` calls to one host share one ssh connection (a master
/// kept by ControlPersist, its socket in the registry), unless
/// `--no-multiplex`; the timings are printed for docs/ssh.md.
#[test]
fn repeated_sends_via_ssh_share_one_connection() {
    if !have_sshd() {
        return;
    }
    let h = Hosts::new();
    let far = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let sshd = start_sshd("true", &h.remote.root.join("home"));
    let masters = Masters(h.local.registry.clone());
    let via = via_for(&sshd, "user_key", Some(&h.remote));
    let bin = baton_bin();
    let remote = [("BATON_REMOTE", bin.to_str().unwrap())];
    let send = |via: &str, id: &str, extra: Option<&str>| {
        let mut args = vec![
            "send",
            "--via",
            via,
            "far",
            "shared",
            "--message-id",
            id,
            "--json",
        ];
        args.extend(extra);
        let t = Instant::now();
        let out = h.local.run_with(&remote, None, &args, None);
        assert_eq!(
            (out.status, status_of(&out).as_str()),
            (0, "accepted"),
            "{out:?}"
        );
        t.elapsed()
    };

    let first = send(&via, "m1", None);
    let sockets = masters.sockets();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let pid = Masters::pid(&sockets[0]).expect("a master on the socket");
    let second = send(&via, "m2", None);
    let out = h
        .local
        .run_with(&remote, None, &["list", "--via", &via, "--json"], None);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains(&far.id), "{out:?}");
    // The same master, still running, and no other.
    assert_eq!(masters.sockets(), sockets);
    assert_eq!(Masters::pid(&sockets[0]), Some(pid));

    // --no-multiplex opens a connection of its own and leaves no master.
    let other = via.replacen("ssh ", "ssh -o ServerAliveInterval=30 ", 1);
    let own = send(&other, "m3", Some("--no-multiplex"));
    assert_eq!(masters.sockets(), sockets);
    let (mut c, t) = (far.client(), Instant::now());
    assert_eq!(far.queued(&mut c), 3);

    let plain = Command::new("/bin/sh")
        .args(["-c", &format!("{other} true")])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(plain.success());
    let ssh_true = t.elapsed();
    eprintln!(
        "send --via: first {first:?}, second (shared) {second:?}, unshared {own:?}; ssh host true {ssh_true:?}"
    );
}
