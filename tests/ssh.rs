//! Remote use over SSH (docs/ssh.md): `baton bridge TARGET`
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

mod hosts;
mod sshd;
mod via;

use crate::util::{Env, Leftovers, Output, baton_bin, exited_or_killed, pid_alive, wait_until};

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
        stand_in(&remote, &bin.join("fake-ssh"), None, "\"$*\"");
        // A key whose authorized_keys line forces `baton bridge far`: sshd
        // runs that whatever the client asked for.
        stand_in(&remote, &bin.join("forced-ssh"), None, "'baton bridge far'");
        // A host where baton is nowhere a non-interactive ssh looks.
        bare_stand_in(&remote, &bin.join("bare-ssh"));
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

/// Writes a stand-in for `ssh HOST COMMAND...` at `at`: it drops HOST and
/// runs `/bin/sh -c RUN` in the remote world's environment, with PATH
/// replaced by `path` when given.
fn stand_in(remote: &Env, at: &std::path::Path, path: Option<&str>, run: &str) {
    let path = path.map(|p| format!("PATH='{p}' ")).unwrap_or_default();
    fs::write(
        at,
        format!(
            "#!/bin/sh\n\
             # stands in for ssh HOST COMMAND...\n\
             shift\n\
             exec env {path}BATON_DIR='{}' XDG_STATE_HOME='{}' HOME='{}' TMPDIR='{}' /bin/sh -c {run}\n",
            remote.registry.display(),
            remote.state.display(),
            remote.root.join("home").display(),
            remote.root.join("tmp").display(),
        ),
    )
    .unwrap();
    fs::set_permissions(at, fs::Permissions::from_mode(0o755)).unwrap();
}

/// The PATH a non-interactive ssh has on the host `bare-ssh` reaches: a
/// directory of its own that holds only `sh`.
fn bare_path(remote: &Env) -> String {
    remote.root.join("bare-bin").display().to_string()
}

/// Writes a stand-in for `ssh HOST COMMAND...` to a host with no baton
/// installed, whether or not this machine has one (issue 47): PATH is
/// `bare_path`, and the system places the remote lookup tries by name
/// (`/usr/local/bin/baton`, `/usr/bin/baton`, `/opt/baton/bin/baton`) are
/// that host's, under the remote world's `bare-root`, where nothing is
/// installed. Otherwise as `stand_in`.
fn bare_stand_in(remote: &Env, at: &std::path::Path) {
    let path = bare_path(remote);
    fs::create_dir_all(&path).unwrap();
    std::os::unix::fs::symlink("/bin/sh", format!("{path}/sh")).unwrap();
    let root = remote.root.join("bare-root");
    let root = root.display();
    // The rewrite below is only sound while these are the system places
    // the lookup names (src/cli/bridge.rs LOOKUP).
    let places = [
        "/usr/local/bin/baton",
        "/usr/bin/baton",
        "/opt/baton/bin/baton",
    ];
    let rewrite: String = places
        .iter()
        .map(|p| format!(" -e 's#{p}#{root}{p}#g'"))
        .collect();
    stand_in(
        remote,
        at,
        Some(&path),
        &format!("\"$(printf '%s\\n' \"$*\" | sed{rewrite})\""),
    );
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

/// An item of a remote's `list --json` that this version cannot read is
/// named on stderr and left out, not shown as a row of blanks.
#[test]
fn list_via_names_an_item_it_cannot_read() {
    let h = Hosts::new();
    let via = r#"printf '%s' '[{"name":"good","pid":7,"instance_id":"7-1","wire":"jsonrpc","workspace":"/w","state":"ready"},{"name":5}]'; :"#;
    let out = h.run(&["list", "--via", via]);
    assert_eq!(out.status, 0, "{out:?}");
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{out:?}");
    // The via command's last word names its host (`:` here).
    assert!(rows[0].starts_with("HOST  NAME"), "{out:?}");
    assert!(rows[1].starts_with(":     good  7"), "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: list: an item that cannot be read (invalid type: integer `5`, expected a string): {\"name\":5}\n"
    );
}

/// What a host prints is shown with nothing invisible raw, whatever the
/// host's baton did (an older one, or one that lies).
#[test]
fn a_hosts_text_is_escaped_here_too() {
    let h = Hosts::new();
    let via = "printf 'state: \\033[2Jgone\\n'; :";
    let out = h.run(&["status", "far", "--via", via]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, ":  state: \\e[2Jgone\n", "{out:?}");
    assert!(!out.stdout.contains('\x1b'), "{out:?}");
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
    assert_eq!(items[0]["host"], json!("far.example"));

    let text = h.run(&["list", "--via", &h.via]);
    assert_eq!(text.status, 0, "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{text:?}");
    // A HOST column first: the via command's last word.
    assert!(lines[0].starts_with("HOST         NAME"), "{text:?}");
    assert!(
        lines[1].starts_with("far.example  alpha") && lines[1].contains(&a.id),
        "{text:?}"
    );
    assert!(
        lines[2].starts_with("far.example  beta") && lines[2].contains(&b.id),
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
        json!({"jsonrpc": "2.0", "id": 2, "result": {"status": "pong", "instance_id": s.id,
            "state": "ready", "queued": 0, "approvals": 0}})
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
    let Some(status) = exited_or_killed(&mut child, Duration::from_secs(10)) else {
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

fn parse(out: &Output) -> Value {
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

/// Issue 18: through a key whose forced command is `baton bridge far`, a
/// send to `other` reached far and said `accepted`.
#[test]
fn send_via_a_forced_command_key_refuses_a_target_it_does_not_reach() {
    let h = Hosts::new();
    let far = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let other = h
        .remote
        .serve(&h.remote.workspace("other"), &["--name", "other"]);
    let via = "forced-ssh far.example";

    let wrong = h.run(&[
        "send",
        "--via",
        via,
        "other",
        "x",
        "--message-id",
        "w1",
        "--json",
    ]);
    assert_eq!(wrong.status, 1, "{wrong:?}");
    let v = parse(&wrong);
    assert_eq!(v["status"], json!("wrong_target"), "{v}");
    assert_eq!(v["target"]["instance_id"], json!(far.id), "{v}");
    let text = h.run(&[
        "send",
        "--via",
        via,
        other.id.as_str(),
        "x",
        "--message-id",
        "w2",
    ]);
    assert_eq!(text.status, 1, "{text:?}");
    assert!(
        text.stderr.contains("wrong_target") && text.stderr.contains(&far.id),
        "{text:?}"
    );
    let (mut cf, mut co) = (far.client(), other.client());
    assert_eq!((far.queued(&mut cf), other.queued(&mut co)), (0, 0));

    // The target the key does reach, by name or id, is sent to.
    let right = h.run(&[
        "send",
        "--via",
        via,
        "far",
        "x",
        "--message-id",
        "r1",
        "--json",
    ]);
    assert_eq!(
        (right.status, status_of(&right).as_str()),
        (0, "accepted"),
        "{right:?}"
    );
    let right = h.run(&[
        "send",
        "--via",
        via,
        far.id.as_str(),
        "y",
        "--message-id",
        "r2",
    ]);
    assert_eq!(right.status, 0, "{right:?}");
    assert_eq!(far.queued(&mut cf), 2);

    // list --via shows the one instance the key reaches, and says why.
    let list = h.run(&["list", "--via", via, "--json"]);
    assert_eq!(list.status, 0, "{list:?}");
    let items: Vec<Value> = serde_json::from_str(list.stdout.trim()).unwrap();
    assert_eq!(items.len(), 1, "{list:?}");
    assert_eq!(items[0]["instance_id"], json!(far.id), "{list:?}");
    assert!(list.stderr.contains("forced command"), "{list:?}");
    let list = h.run(&["list", "--via", via]);
    assert_eq!(list.status, 0, "{list:?}");
    assert!(
        list.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("far")),
        "{list:?}"
    );
    assert!(!list.stdout.contains(&other.id), "{list:?}");
}

/// Issue 18: what a via command starts (ssh, behind the shell that ran it)
/// outlived a send that gave up on it. The process group goes, whole.
#[test]
fn nothing_a_via_command_starts_outlives_the_command() {
    let h = Hosts::new();
    let _s = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    for (i, cmd) in ["send", "list"].iter().enumerate() {
        let left = Leftovers(h.local.root.join(format!("left-{i}.pid")));
        // Like ssh after the shell that started it is gone: a process that
        // holds on, while the command itself ends without an answer.
        let via = format!(
            "sh -c 'echo $$ >> {}; exec sleep 60' >/dev/null 2>&1 </dev/null & sleep 0.2; exit 0; :",
            left.0.display()
        );
        let args: Vec<&str> = match *cmd {
            "send" => vec!["send", "--via", &via, "far", "x"],
            _ => vec!["list", "--via", &via],
        };
        let out = h.run(&args);
        assert_eq!(out.status, 4, "{out:?}");
        let pids = left.pids();
        assert_eq!(pids.len(), 1, "{cmd}: {out:?}");
        wait_until(
            &format!("{cmd} --via: the process its via command started to be gone"),
            Duration::from_secs(5),
            || !pid_alive(pids[0]),
        );
    }
}

/// Issue 18: a send through ssh to a stopped agent exited 3 where a local
/// send stores the task (`stored`, exit 0).
#[test]
fn send_via_to_a_stopped_agent_stores_the_task_as_a_local_send_does() {
    let h = Hosts::new();
    let ws = h.remote.workspace("far");
    let mut s = h.remote.serve(&ws, &["--name", "far"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());

    let out = h.send_via("far", "while away", "m1");
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "stored"),
        "{out:?}"
    );
    assert_eq!(parse(&out)["queue_position"], json!(1), "{out:?}");
    let local = send_local(&h.remote, "far", "also away", "m2");
    assert_eq!((local.status, status_of(&local).as_str()), (0, "stored"));
    // The same id again is a duplicate, there as here.
    let again = h.send_via("far", "while away", "m1");
    let local = send_local(&h.remote, "far", "also away", "m2");
    assert_eq!(
        (again.status, status_of(&again)),
        (local.status, status_of(&local)),
        "{again:?}"
    );
    let text = h.run(&[
        "send",
        "--via",
        &h.via,
        "far",
        "third",
        "--message-id",
        "m3",
    ]);
    assert_eq!(text.status, 0, "{text:?}");
    assert_eq!(
        text.stdout,
        "stored: far is not running; message m3 waits in its spool at position 3 and runs when it starts\n",
        "{text:?}"
    );
    // A name nobody has is still exit 3.
    let nobody = h.send_via("nobody", "hello", "m4");
    assert_eq!(nobody.status, 3, "{nobody:?}");

    let s = h.remote.serve(&ws, &["--name", "far"]);
    let mut c = s.client();
    assert_eq!(s.queued(&mut c), 3);
}

/// Issue 18: baton is rarely on a non-interactive ssh's PATH; BATON_REMOTE
/// names the command that runs it there.
#[test]
fn baton_remote_names_the_remote_baton_when_it_is_not_on_path() {
    let h = Hosts::new();
    let s = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let via = "bare-ssh far.example";
    let args = [
        "send",
        "--via",
        via,
        "far",
        "x",
        "--message-id",
        "b1",
        "--json",
    ];
    let missing = h.run(&args);
    assert_eq!(missing.status, 4, "{missing:?}");
    // --json: the transport result names BATON_REMOTE.
    assert!(missing.stdout.contains("BATON_REMOTE"), "{missing:?}");

    let bin = baton_bin();
    let vars = [
        ("PATH", h.path.as_str()),
        ("BATON_REMOTE", bin.to_str().unwrap()),
    ];
    let out = h.local.run_with(&vars, None, &args, None);
    assert_eq!(
        (out.status, status_of(&out).as_str()),
        (0, "accepted"),
        "{out:?}"
    );
    let list = h
        .local
        .run_with(&vars, None, &["list", "--via", via, "--json"], None);
    assert_eq!(list.status, 0, "{list:?}");
    assert!(list.stdout.contains(&s.id), "{list:?}");
}

/// Issue 19: `send --via ... --wait` waits over the same bridge, as a
/// local `send --wait` does: the reply of an exec agent with `--reply` is
/// printed (exit 0), another outcome is exit 1, and `--timeout` is exit 5
/// with the task left queued there.
#[test]
fn send_via_wait_prints_the_reply_and_exits_as_a_local_wait() {
    let h = Hosts::new();
    let mut bob = h.remote.serve(
        &h.remote.workspace("bob"),
        &[
            "--name",
            "bob",
            "--exec",
            "cat >/dev/null; echo answered",
            "--reply",
        ],
    );
    let out = h.run(&["send", "--via", &h.via, "--wait", "bob", "hi"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "answered\n", "{out:?}");
    assert!(out.stderr.contains("waiting for it to end"), "{out:?}");
    // The same id again: a duplicate, whose outcome the status answer has.
    let args = [
        "send",
        "--via",
        &h.via,
        "--wait",
        "--json",
        "--message-id",
        "w1",
        "bob",
        "again",
    ];
    for expect in ["accepted", "duplicate"] {
        let out = h.run(&args);
        assert_eq!(out.status, 0, "{out:?}");
        let v = parse(&out);
        assert_eq!(v["status"], json!(expect), "{v}");
        assert_eq!(v["outcome"], json!("done"), "{v}");
        assert_eq!(v["reply"], json!("answered\n"), "{v}");
        assert_eq!(v["target"]["instance_id"], json!(bob.id), "{v}");
    }
    assert_eq!(bob.term(), 0, "{}", bob.stderr());

    let _fails = h.remote.serve(
        &h.remote.workspace("fails"),
        &["--name", "fails", "--exec", "cat >/dev/null; exit 3"],
    );
    let out = h.run(&["send", "--via", &h.via, "--wait", "--json", "fails", "x"]);
    assert_eq!(out.status, 1, "{out:?}");
    let v = parse(&out);
    assert_eq!(
        (v["outcome"].clone(), v["reply"].clone()),
        (json!("failed"), Value::Null),
        "{v}"
    );

    // An instance with no handler keeps the task queued; paused, it
    // still answers the status of what it holds.
    let far = h
        .remote
        .serve(&h.remote.workspace("far"), &["--name", "far"]);
    let sent = h.send_via("far", "stays", "q1");
    assert_eq!(status_of(&sent), "accepted", "{sent:?}");
    assert_eq!(h.remote.run(&["pause", "far"]).status, 0);
    let started = std::time::Instant::now();
    let out = h.run(&[
        "send",
        "--via",
        &h.via,
        "--wait",
        "--timeout",
        "1",
        "--json",
        "--message-id",
        "q1",
        "far",
        "stays",
    ]);
    assert_eq!(out.status, 5, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{out:?}");
    let v = parse(&out);
    assert_eq!(v["timed_out"], json!(true), "{v}");
    assert_eq!(v["task_status"], json!("queued"), "{v}");
    assert_eq!(v["outcome"], Value::Null, "{v}");
    let text = h.run(&[
        "send",
        "--via",
        &h.via,
        "--wait",
        "--timeout",
        "0.5",
        "--message-id",
        "q1",
        "far",
        "stays",
    ]);
    assert_eq!(text.status, 5, "{text:?}");
    assert!(
        text.stderr.contains("message q1 is still queued at far"),
        "{text:?}"
    );
    let mut c = far.client();
    assert_eq!(far.queued(&mut c), 1);
}

/// Issue 19: a task stored over `--via` for a stopped agent is waited for
/// until the agent starts there and runs it (`bridge --await` on the
/// remote side); a wait whose instance stops goes on when it runs again;
/// `--timeout` ends a wait for a stopped agent with exit 5 and leaves no
/// bridge behind.
#[test]
fn send_via_wait_for_a_stopped_agent_waits_until_it_runs_the_task() {
    let h = Hosts::new();
    let ws = h.remote.workspace("far");
    let mut s = h.remote.serve(&ws, &["--name", "far"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let sender = h.local.workspace("sender");
    let vars = [("PATH", h.path.as_str())];
    let wait_args = |id: &'static str| -> Vec<String> {
        [
            "send",
            "--via",
            &h.via,
            "--wait",
            "--json",
            "--message-id",
            id,
            "far",
            "later",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let args: Vec<String> = wait_args("s1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut w = h.local.spawn_with(&vars, &args, &sender, None);
    wait_until(
        "the wait for a stopped agent",
        Duration::from_secs(20),
        || {
            w.stderr()
                .contains("far is not running there; waiting for it to start")
        },
    );
    let runs = [
        "--name",
        "far",
        "--exec",
        "cat >/dev/null; echo answered",
        "--reply",
    ];
    let mut far = h.remote.serve(&ws, &runs);
    assert_eq!(
        w.wait_exit(Duration::from_secs(20)),
        Some(0),
        "{}",
        w.stderr()
    );
    let v: Value = serde_json::from_str(w.stdout().trim()).unwrap();
    assert_eq!(v["status"], json!("stored"), "{v}");
    assert_eq!(v["outcome"], json!("done"), "{v}");
    assert_eq!(v["reply"], json!("answered\n"), "{v}");
    assert_eq!(far.term(), 0, "{}", far.stderr());

    // Accepted by a live agent that keeps it queued (no handler), which
    // then stops: the wait goes on, and ends when the agent runs again.
    let mut pull = h.remote.serve(&ws, &["--name", "far"]);
    let args: Vec<String> = wait_args("s2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut w = h.local.spawn_with(&vars, &args, &sender, None);
    let mut c = pull.client();
    wait_until("the task queued there", Duration::from_secs(20), || {
        pull.queued(&mut c) == 1
    });
    drop(c);
    assert_eq!(pull.term(), 0, "{}", pull.stderr());
    wait_until("the wait to notice", Duration::from_secs(20), || {
        w.stderr().contains("far went away there")
    });
    let mut far = h.remote.serve(&ws, &runs);
    assert_eq!(
        w.wait_exit(Duration::from_secs(20)),
        Some(0),
        "{}",
        w.stderr()
    );
    let v: Value = serde_json::from_str(w.stdout().trim()).unwrap();
    assert_eq!(
        (v["status"].clone(), v["outcome"].clone()),
        (json!("accepted"), json!("done")),
        "{v}"
    );
    assert_eq!(far.term(), 0, "{}", far.stderr());

    // Stopped, with a bound: exit 5, the task kept, no bridge left.
    let out = h.run(&[
        "send",
        "--via",
        &h.via,
        "--wait",
        "--timeout",
        "1",
        "--json",
        "--message-id",
        "s3",
        "far",
        "later",
    ]);
    assert_eq!(out.status, 5, "{out:?}");
    let v = parse(&out);
    assert_eq!(
        (v["status"].clone(), v["timed_out"].clone()),
        (json!("stored"), json!(true)),
        "{v}"
    );
    // It ends with the command (killed with the via's process group, or at
    // the end of its input): on a loaded machine, a moment after it.
    wait_until(
        "the bridge --await to end with the command",
        Duration::from_secs(10),
        || awaiting_bridges(&h.remote).is_empty(),
    );
    let s = h.remote.serve(&ws, &["--name", "far"]);
    let mut c = s.client();
    assert_eq!(s.queued(&mut c), 1);
}

/// The `baton bridge --await` processes of a world (by its registry).
fn awaiting_bridges(world: &Env) -> Vec<u32> {
    let registry = format!("BATON_DIR={}", world.registry.display());
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let environ = fs::read(entry.path().join("environ")).unwrap_or_default();
        let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        if has(&cmdline, b"bridge\0--await")
            && environ.split(|b| *b == 0).any(|v| v == registry.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}
