//! Agents under their own account (docs/security.md): with `serve
//! --operator`, the kernel's line between two users is the operator's
//! boundary. The agent's account cannot approve, pause, start a local
//! turn or cancel another sender's task by any route tried here
//! (directly, orphaned, through `tmux run-shell`, through `baton
//! bridge`); the operator's account, and root with `--user`, can. Needs
//! root to make the accounts (as CI runs); they are removed at the end,
//! even when the test fails.

use super::{RPC, python, script};
use crate::util::{baton_bin, have, transcript, wait_until};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// Throw-away accounts and their directory, removed on drop.
struct World {
    dir: PathBuf,
    users: Vec<String>,
    started: Vec<Child>,
}

impl Drop for World {
    fn drop(&mut self) {
        for c in &mut self.started {
            // SAFETY: signalling a child of ours by its pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
        for u in &self.users {
            let _ = Command::new("userdel")
                .arg(u)
                .stderr(Stdio::null())
                .status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// An account: its name, uid and gid.
#[derive(Clone)]
struct Account {
    name: String,
    uid: u32,
    gid: u32,
}

impl World {
    fn new() -> World {
        // /tmp itself: every account may pass through it, where a
        // TMPDIR of this user's may be private.
        let dir = PathBuf::from("/tmp").join(format!("baton-accounts-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        // The binary under test, where every account may run it (the
        // build's own directory may be private).
        let bin = PathBuf::from(baton());
        fs::create_dir_all(bin.parent().unwrap()).unwrap();
        fs::copy(baton_bin(), &bin).unwrap();
        fs::set_permissions(bin.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        World {
            dir,
            users: Vec::new(),
            started: Vec::new(),
        }
    }

    fn account(&mut self, role: &str) -> Account {
        let name = format!("bt{}{role}", std::process::id());
        let out = Command::new("useradd")
            .args(["-M", "-d", "/nonexistent", "-s", "/bin/sh", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd {name}: {out:?}");
        self.users.push(name.clone());
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        Account {
            uid: id("-u"),
            gid: id("-g"),
            name,
        }
    }

    /// A directory of `who`'s, mode 0700.
    fn private(&self, name: &str, who: &Account) -> PathBuf {
        let p = self.dir.join(name);
        fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(who.uid), Some(who.gid)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o700)).unwrap();
        p
    }
}

/// `args` run as `who` (root: as this process), with only `env` and PATH.
fn command(who: Option<&Account>, env: &[(&str, &Path)], args: &[&str]) -> Command {
    let mut cmd = match who {
        Some(a) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", a.uid))
                .arg(format!("--regid={}", a.gid))
                .arg("--init-groups")
                .arg("--");
            c
        }
        None => Command::new(args[0]),
    };
    if who.is_some() {
        cmd.arg(args[0]);
    }
    // The system's directories: another account may not reach this
    // user's own (a ~/.pyenv under /root, say).
    let path = match who {
        Some(_) => "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        None => std::env::var("PATH").unwrap_or_default(),
    };
    cmd.args(&args[1..]).env_clear().env("PATH", path);
    cmd.env("HOME", "/nonexistent");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null());
    cmd
}

fn run(who: Option<&Account>, env: &[(&str, &Path)], args: &[&str]) -> Output {
    command(who, env, args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The first approval waiting at `name`, as `approvals --json` lists it.
fn waiting(who: Option<&Account>, agent: &Account, name: &str) -> (String, String) {
    let mut found = None;
    wait_until("an approval to wait", T, || {
        let o = run(
            who,
            &[],
            &[&baton(), "approvals", name, "--json", "--user", &agent.name],
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        found = v["approvals"].as_array().and_then(|a| a.first()).map(|a| {
            (
                a["approval_id"].as_str().unwrap_or_default().to_string(),
                a["message_id"].as_str().unwrap_or_default().to_string(),
            )
        });
        found.is_some()
    });
    found.unwrap()
}

/// The copy of the binary under test that `World::new` makes.
fn baton() -> String {
    format!("/tmp/baton-accounts-{}/bin/baton", std::process::id())
}

/// The one spool under `state`.
fn spool_of(state: &Path) -> PathBuf {
    let spools = state.join("baton/spool");
    let mut dirs = fs::read_dir(&spools)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path());
    dirs.next().unwrap()
}

#[test]
fn an_agents_own_account_cannot_act_as_its_operator_by_any_route() {
    if unsafe { libc::geteuid() } != 0 {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!("this test needs root (BATON_REQUIRE_ALL=1)");
        }
        eprintln!("skipped: needs root");
        return;
    }
    if !python() || !have("tmux") || !have("setpriv") || !have("useradd") {
        return;
    }
    let mut w = World::new();
    let agent = w.account("a");
    let op = w.account("o");
    let (reg, state, ws) = (
        w.private("reg", &agent),
        w.private("state", &agent),
        w.private("ws", &agent),
    );
    let scratch = w.private("scratch", &agent);
    let rpc = script(&w.dir.join("tools"), "rpc.py", RPC);
    fs::set_permissions(w.dir.join("tools"), fs::Permissions::from_mode(0o755)).unwrap();
    let agent_env: Vec<(&str, &Path)> = vec![("BATON_DIR", &reg), ("XDG_STATE_HOME", &state)];
    let serve = |w: &mut World, name: &str, operator: &str| {
        let exec = format!("echo ran >> runs-{name}");
        let args = [
            &baton(),
            "serve",
            "--name",
            name,
            "--workspace",
            ws.to_str().unwrap(),
            "--approve",
            "ask",
            "--exec",
            &exec,
            "--operator",
            operator,
        ];
        let child = command(Some(&agent), &agent_env, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        w.started.push(child);
        wait_until("the instance's manifest", T, || {
            fs::read_dir(&reg).unwrap().filter_map(|e| e.ok()).any(|e| {
                let n = e.file_name().into_string().unwrap_or_default();
                n.ends_with(&format!("@{name}"))
            })
        });
    };
    serve(&mut w, "ag", &op.name);

    // The operator's account sends a task; it waits for an approval.
    let o = run(
        Some(&op),
        &[],
        &[
            &baton(),
            "send",
            "ag",
            "rotate the logs",
            "--user",
            &agent.name,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let (ask, task) = waiting(Some(&op), &agent, "ag");

    // The agent's account, directly.
    let as_agent = |args: &[&str]| run(Some(&agent), &agent_env, args);
    for args in [
        vec![baton(), "approve".into(), "ag".into(), ask.clone()],
        vec![baton(), "pause".into(), "ag".into()],
        vec![baton(), "cancel".into(), "ag".into(), task.clone()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = as_agent(&args);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("not permitted"), "{args:?}: {}", text(&o));
    }
    let socket = fs::read_dir(&reg)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock"))
        .unwrap();
    let o = as_agent(&[
        "python3",
        rpc.to_str().unwrap(),
        socket.to_str().unwrap(),
        "turn/local",
        r#"{"text":"as the operator"}"#,
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(v["error"]["code"], -32012, "turn/local: {}", text(&o));

    // Orphaned, twice, and through tmux, each writing its exit status.
    let b = baton();
    let s = scratch.display();
    let orphans = format!(
        "( {b} pause ag >{s}/o1 2>&1; echo $? >{s}/c1 ) & \
         setsid -f sh -c '{b} approve ag {ask} >{s}/o2 2>&1; echo $? >{s}/c2' </dev/null >/dev/null 2>&1"
    );
    let o = as_agent(&["sh", "-c", &orphans]);
    assert!(o.status.success(), "{}", text(&o));
    let tmux = scratch.join("tmux.sock");
    let t = tmux.to_str().unwrap();
    let o = as_agent(&[
        "tmux",
        "-S",
        t,
        "new-session",
        "-d",
        "-s",
        "pane",
        "sleep 600",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let shell = format!("{b} cancel ag {task} >{s}/o3 2>&1; echo $? >{s}/c3");
    let o = as_agent(&["tmux", "-S", t, "run-shell", "-b", &shell]);
    assert!(o.status.success(), "{}", text(&o));
    // And through a bridge: its doors are fewer still.
    let hello = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocol_version":1,"client":{"name":"t","version":"0"}}}"#;
    let pause = r#"{"jsonrpc":"2.0","id":1,"method":"control/pause","params":{}}"#;
    let mut bridge = command(Some(&agent), &agent_env, &[&b, "bridge", "ag"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    bridge
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{hello}\n{pause}\n").as_bytes())
        .unwrap();
    let bridged = bridge.wait_with_output().unwrap();
    let refused = String::from_utf8_lossy(&bridged.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"] == 1);
    assert_eq!(
        refused.as_ref().map(|v| v["error"]["code"].clone()),
        Some(Value::from(-32012)),
        "{bridged:?}"
    );
    for n in 1..=3 {
        wait_until("an orphan's exit status", T, || {
            scratch.join(format!("c{n}")).exists()
        });
        let out = fs::read_to_string(scratch.join(format!("o{n}"))).unwrap_or_default();
        assert_ne!(
            fs::read_to_string(scratch.join(format!("c{n}")))
                .unwrap()
                .trim(),
            "0",
            "route {n}: {out}"
        );
        assert!(out.contains("not permitted"), "route {n}: {out}");
    }
    let _ = as_agent(&["tmux", "-S", t, "kill-server"]);

    // Nothing of it took: not paused, the task waits, nothing ran.
    let o = run(
        Some(&op),
        &[],
        &[&baton(), "status", "ag", "--json", "--user", &agent.name],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(v["paused"], false, "{}", text(&o));
    assert_eq!(
        v["awaiting_approval"][0],
        Value::from(task.clone()),
        "{}",
        text(&o)
    );
    assert!(!ws.join("runs-ag").exists());
    let o = run(
        Some(&op),
        &[],
        &[&baton(), "status", "ag", "--user", &agent.name],
    );
    assert!(
        text(&o).contains(&format!("operators:   {} (uid {})", op.name, op.uid)),
        "{}",
        text(&o)
    );

    // The operator's account approves; the task runs once.
    let o = run(
        Some(&op),
        &[],
        &[&baton(), "approve", "ag", &ask, "--user", &agent.name],
    );
    assert!(o.status.success(), "{}", text(&o));
    let spool = spool_of(&state);
    wait_until("the task's end", T, || {
        transcript(&spool)
            .iter()
            .any(|e| e["kind"] == "task.ended" && e["message_id"] == task.as_str())
    });
    assert_eq!(fs::read_to_string(ws.join("runs-ag")).unwrap(), "ran\n");

    // Root, with --user, where the instance names root.
    serve(&mut w, "ag2", "root");
    let o = run(
        None,
        &[("BATON_DIR", &reg)],
        &[
            &baton(),
            "send",
            "ag2",
            "prune the cache",
            "--user",
            &agent.name,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let (ask2, task2) = waiting(None, &agent, "ag2");
    let o = run(
        None,
        &[("BATON_DIR", &reg)],
        &[&baton(), "approve", "ag2", &ask2, "--user", &agent.name],
    );
    assert!(o.status.success(), "{}", text(&o));
    wait_until("the second task's end", T, || ws.join("runs-ag2").exists());
    let _ = task2;
    assert_eq!(fs::read_to_string(ws.join("runs-ag2")).unwrap(), "ran\n");

    // Stopped, a task root stores for it is the agent's, not root's.
    let o = run(
        None,
        &[("BATON_DIR", &reg)],
        &[&baton(), "stop", "ag2", "--user", &agent.name],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run(
        None,
        &[("BATON_DIR", &reg), ("XDG_STATE_HOME", &state)],
        &[&baton(), "send", "ag2", "later", "--user", &agent.name],
    );
    assert!(text(&o).contains("stored"), "{}", text(&o));
    let inboxes = fs::read_dir(state.join("baton/spool"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("inbox"));
    let stored: Vec<PathBuf> = inboxes
        .flat_map(|i| {
            fs::read_dir(i)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .map(|e| e.path())
        })
        .collect();
    assert!(!stored.is_empty());
    for f in &stored {
        assert_eq!(fs::metadata(f).unwrap().uid(), agent.uid, "{}", f.display());
    }
    drop(w);
}
