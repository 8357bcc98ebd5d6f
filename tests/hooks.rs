//! The recipes of docs/hooks.md, run exactly as the page writes them: the
//! fenced block after each `<!-- tested: NAME -->` line is saved as NAME
//! and run by `sh`, with this world's `baton` on PATH. The Claude Code
//! `Stop` hook gets the JSON a `Stop` hook gets on stdin; the agent loop
//! serves a real instance with a stand-in agent.

use crate::util::{Env, Served, baton_bin, exit_code, finish, settled_threads, threads, wait_for};
use serde_json::{Value, json};
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The bound on every wait in this file.
const T: Duration = Duration::from_secs(10);

/// The script the page gives under `<!-- tested: NAME -->`.
pub(crate) fn recipe(name: &str) -> String {
    let doc = fs::read_to_string(format!("{ROOT}/docs/hooks.md")).unwrap();
    let mark = format!("<!-- tested: {name} -->\n```sh\n");
    let start = doc
        .find(&mark)
        .unwrap_or_else(|| panic!("docs/hooks.md has no {mark:?}"))
        + mark.len();
    let len = doc[start..].find("\n```\n").expect("the block ends");
    format!("{}\n", &doc[start..start + len])
}

/// Saves the recipe in the world and gives a `sh` command for it, with
/// the world's environment and `baton` on PATH.
fn script(env: &Env, name: &str, cwd: &Path) -> Command {
    let bin = env.root.join("bin");
    if !bin.exists() {
        fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).unwrap();
    }
    let file = env.root.join(name);
    fs::write(&file, recipe(name)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg(&file)
        .env_clear()
        .env("PATH", path)
        .env("HOME", env.root.join("home"))
        .env("BATON_DIR", &env.registry)
        .env("XDG_STATE_HOME", &env.state)
        .env("TMPDIR", env.root.join("tmp"))
        .env("LANG", "C.UTF-8")
        .current_dir(cwd);
    cmd
}

struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs the Stop hook with `vars` added to its environment and `input`
/// on stdin, bounded by `T`.
fn stop_hook(env: &Env, cwd: &Path, args: &[&str], vars: &[(&str, &str)], input: &Value) -> Ran {
    let mut child = script(env, "baton-stop-hook", cwd)
        .args(args)
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = finish(child, "the stop hook", T);
    Ran {
        status: exit_code(out.status),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What Claude Code gives a `Stop` hook on stdin.
fn stop_input(session: &str, active: bool, cwd: &Path) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/nonexistent/transcript.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": active,
    })
}

fn send(inst: &Served, id: &str, body: &str) {
    let r = inst.send(&mut inst.client(), id, body);
    assert_eq!(r["status"], "accepted", "{r}");
}

/// The hook's stdout as the JSON Claude Code reads, and its `reason`.
#[track_caller]
fn blocked(ran: &Ran) -> String {
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let v: Value = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", ran.stdout));
    assert_eq!(v["decision"], "block", "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    v["reason"].as_str().unwrap().to_string()
}

#[test]
fn the_stop_hook_blocks_while_a_task_waits_and_lets_claude_stop_otherwise() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "digest"]);
    let vars = [("BATON_STOP_WAIT", "0.3")];
    let run = |active: bool, session: &str| {
        stop_hook(&env, &ws, &[], &vars, &stop_input(session, active, &ws))
    };
    // Nothing waits: Claude may stop; no output.
    let ran = run(false, "s-1");
    assert_eq!((ran.status, ran.stdout.as_str()), (0, ""), "{}", ran.stderr);

    // A task waits: blocked, told what to do (never the body).
    send(&inst, "t-1", "summarize \"the\" week");
    let reason = blocked(&run(false, "s-1"));
    assert_eq!(
        reason,
        "baton: digest: 1 task waits to be claimed; next: t-1 from (cli). Take it with: \
         baton inbox claim; do what the envelope asks; then baton inbox complete MESSAGE_ID, \
         with --reply TEXT to answer its sender."
    );
    // Claude continued (stop_hook_active) but did not take it: no loop.
    let ran = run(true, "s-1");
    assert_eq!((ran.status, ran.stdout.as_str()), (0, ""), "{}", ran.stderr);
    // Another session is told all the same.
    blocked(&run(true, "s-2"));
    // A new task first in line (the old one was taken): blocked again.
    let claimed = inst.client().call(3, "inbox/claim", json!({}));
    assert_eq!(claimed["result"]["status"], "claimed", "{claimed}");
    let done = inst
        .client()
        .call(4, "inbox/complete", json!({"message_id": "t-1"}));
    assert_eq!(done["result"]["status"], "completed", "{done}");
    send(&inst, "t-2", "next");
    assert!(blocked(&run(true, "s-1")).contains("next: t-2 from"));
}

#[test]
fn the_stop_hook_waits_briefly_for_a_task_and_takes_a_target() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "digest"]);
    let elsewhere = env.workspace("elsewhere");
    // A task that arrives within BATON_STOP_WAIT blocks the stop.
    let base = settled_threads(inst.pid());
    let hook = {
        let (env, dir) = (&env, elsewhere.clone());
        thread::scope(|s| {
            let h = s.spawn(move || {
                stop_hook(
                    env,
                    &dir,
                    &["digest"],
                    &[("BATON_STOP_WAIT", "8")],
                    &stop_input("s", false, &dir),
                )
            });
            // The task arrives once the hook waits for one: its
            // subscription is two threads of the instance's.
            wait_for("the hook's wait to subscribe", T, || {
                (threads(inst.pid()) >= base + 2 || h.is_finished()).then_some(())
            });
            send(&inst, "soon", "arrives");
            h.join().unwrap()
        })
    };
    assert!(
        blocked(&hook).contains("next: soon from"),
        "{}",
        hook.stdout
    );
    // No instance serves the directory: baton's error for the user, exit 1.
    let ran = stop_hook(
        &env,
        &elsewhere,
        &[],
        &[],
        &stop_input("s", false, &elsewhere),
    );
    assert_eq!(ran.status, 1, "{}", ran.stderr);
    assert_eq!(ran.stdout, "");
    assert!(ran.stderr.contains("no instance serves"), "{}", ran.stderr);
}

/// A stand-in agent: replies "did X" to a body "please X", fails (and
/// says nothing) on "please fail".
const AGENT: &str = r#"r=$(sed -n 's/^please //p'); [ "$r" != fail ] && echo "did $r""#;

/// `task/status` of `id` once it has ended.
fn ended(inst: &Served, id: &str) -> Value {
    wait_for(&format!("task {id} to end"), T, || {
        let r = inst
            .client()
            .call(5, "task/status", json!({"message_id": id}));
        let status = &r["result"];
        let ended = !matches!(status["status"].as_str(), Some("queued" | "running"));
        ended.then(|| status.clone())
    })
}

#[test]
fn the_agent_loop_serves_each_task_and_sleeps_in_between() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "worker"]);
    send(&inst, "early", "please sweep");
    let mut cmd = script(&env, "baton-agent-loop", &ws);
    cmd.args(["sh", "-c", AGENT])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut group = Group(cmd.spawn().unwrap());
    let st = ended(&inst, "early");
    assert_eq!(st["status"], "done", "{st}");
    assert_eq!(st["reply"]["body"], "did sweep", "{st}");
    // Asleep in `baton inbox wait`, then woken by each task.
    send(&inst, "bad", "please fail");
    let st = ended(&inst, "bad");
    assert_eq!(st["status"], "failed", "{st}");
    assert_eq!(st["reply"], Value::Null, "{st}");
    send(&inst, "late", "please mop");
    let st = ended(&inst, "late");
    assert_eq!(st["status"], "done", "{st}");
    assert_eq!(st["reply"]["body"], "did mop", "{st}");
    assert!(group.0.try_wait().unwrap().is_none(), "the loop ended");
    group.stop();
}

/// The loop and everything it started (its own process group), stopped
/// by the group's id.
struct Group(Child);

impl Group {
    fn stop(&mut self) {
        if self.0.try_wait().unwrap().is_some() {
            return;
        }
        let pgid = self.0.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory-safety preconditions; the group is
        // the one our unreaped child leads.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}
