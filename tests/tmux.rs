//! `baton serve --tmux-pane PANE` (issue 20): tasks typed into a real tmux
//! pane where a stand-in agent runs. Each test starts a private tmux server
//! (`TMUX_TMPDIR` under the test's own directory, the default socket, so
//! baton finds it exactly as it would find a user's) and kills it at the
//! end, by `kill-server` and then by its pid. The stand-in is a small
//! Python program that puts its terminal in raw mode, asks for bracketed
//! paste (`ESC [ ? 2004 h`), and records every read it makes, with the
//! time, so a test sees the pasted block and the Enter as they arrived.
//! `tests/security/pane.rs` uses the same harness.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{
    Env, POLL, Served, event_is, finish, have, me_as_instance, pid_alive, poll, session,
    transcript, wait_event, wait_for, wait_gone, wait_until,
};

/// The bound on every wait for the instance or the pane.
pub(crate) const WAIT: Duration = Duration::from_secs(15);
/// The bound on one tmux command.
const TMUX_RUN: Duration = Duration::from_secs(10);

/// `TCSANOW`: what a paste typed before it started (from a shell, as a
/// user does) is read, not flushed.
const AGENT: &str = r#"
import json, os, sys, termios, time, tty
out = open(sys.argv[1], "a")
def note(data):
    out.write(json.dumps({"t": time.monotonic(), "d": data}) + "\n")
    out.flush()
tty.setraw(0, termios.TCSANOW)
os.write(1, b"\x1b[?2004h")
note("ready")
while True:
    b = os.read(0, 65536)
    if not b:
        break
    note(b.decode("latin-1"))
"#;

/// A private tmux server whose one pane, `t:0.0`, runs the stand-in agent.
pub(crate) struct Tmux {
    tmpdir: PathBuf,
    /// What the stand-in read, one JSON record per read.
    log: PathBuf,
    pid: Option<u32>,
    /// The pane's process, a session leader: what runs in the pane.
    pane: Option<u32>,
}

impl Tmux {
    /// The server's place, for a test that starts it later.
    pub(crate) fn new(env: &Env) -> Tmux {
        let tmpdir = env.root.join("tmux");
        fs::create_dir_all(&tmpdir).unwrap();
        fs::write(env.root.join("agent.py"), AGENT).unwrap();
        Tmux {
            tmpdir,
            log: env.root.join("agent.log"),
            pid: None,
            pane: None,
        }
    }

    /// Starts the server and waits (bounded) until the stand-in is reading.
    pub(crate) fn start(&mut self, env: &Env) {
        self.start_program(&self.agent_command(env));
        wait_until("the stand-in agent to start", WAIT, || {
            self.reads().first().is_some_and(|r| r == "ready")
        });
    }

    /// The command line that runs the stand-in agent: `exec`, so that the
    /// pane's program is the agent whatever the user's shell (tmux runs it
    /// with `$SHELL -c`, and dash, unlike bash, does not exec a lone command).
    pub(crate) fn agent_command(&self, env: &Env) -> String {
        let agent = env.root.join("agent.py");
        format!(
            "exec python3 '{}' '{}'",
            agent.display(),
            self.log.display()
        )
    }

    /// Starts the server with `program` in its one pane.
    pub(crate) fn start_program(&mut self, program: &str) {
        self.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "100",
            "-y",
            "30",
            program,
        ]);
        let pid = self.run(&["display-message", "-p", "#{pid}"]);
        self.pid = Some(pid.trim().parse().expect("the server's pid"));
        let pane = self.run(&["display-message", "-p", "-t", "t:0.0", "#{pane_pid}"]);
        self.pane = Some(pane.trim().parse().expect("the pane's pid"));
    }

    /// `TMUX_TMPDIR`, for baton.
    pub(crate) fn var(&self) -> (&'static str, String) {
        ("TMUX_TMPDIR", self.tmpdir.display().to_string())
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TMUX_TMPDIR", &self.tmpdir)
            .env("HOME", &self.tmpdir)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs one tmux command (10 s bound); its stdout.
    pub(crate) fn run(&self, args: &[&str]) -> String {
        let child = self.cmd().args(args).spawn().expect("spawn tmux");
        let out = finish(child, &format!("tmux {args:?}"), TMUX_RUN);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the stand-in read, one string per read (the first is `ready`).
    fn reads(&self) -> Vec<String> {
        self.records()
            .iter()
            .map(|r| r["d"].as_str().unwrap().to_string())
            .collect()
    }

    fn records(&self) -> Vec<Value> {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Everything the stand-in read after `ready`, as one string.
    pub(crate) fn typed(&self) -> String {
        self.reads().iter().skip(1).map(String::as_str).collect()
    }

    /// `typed`, once it holds `needle` (see `wait_done_line`).
    pub(crate) fn wait_typed(&self, needle: &str) -> String {
        wait_for(&format!("the pane to have read {needle:?}"), WAIT, || {
            let typed = self.typed();
            typed.contains(needle).then_some(typed)
        })
    }

    /// `typed`, once it holds the whole `[when done: ...]` line:
    /// `task.typed` is recorded when tmux took the keys, which the
    /// stand-in reads and writes down a moment later.
    pub(crate) fn wait_done_line(&self) -> String {
        wait_for(
            "the pane to have read the [when done: ...] line",
            WAIT,
            || {
                let typed = self.typed();
                let at = typed.find("[when done: baton ")?;
                typed[at..].contains(']').then_some(typed)
            },
        )
    }

    fn in_mode(&self) -> String {
        self.run(&["display-message", "-p", "-t", "t:0.0", "#{pane_in_mode}"])
            .trim()
            .to_string()
    }

    /// Kills the server: `kill-server`, then its pid if it is still there;
    /// then waits for what ran in the pane (every process of its session),
    /// which the hang-up of its terminal ends, and kills what outlives
    /// that. A program there may still write under the test's directory
    /// on its way out (Claude Code saves its state in HOME).
    fn stop(&mut self) {
        let Some(pid) = self.pid.take() else {
            return;
        };
        if let Ok(child) = self.cmd().arg("kill-server").spawn() {
            let _ = finish(child, "tmux kill-server", TMUX_RUN);
        }
        if !wait_gone(pid, Duration::from_secs(5)) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid
            // is the tmux server this test started and saw running.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        if let Some(pane) = self.pane.take() {
            stop_session(pane);
        }
    }
}

/// The live processes of the session `sid` (a pane's).
fn in_session(sid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| session(pid) == Some(sid) && pid_alive(pid))
        .collect()
}

/// Waits (10 s) for the session `sid` to end, then kills what is left of
/// it by pid and waits again; a process that outlives SIGKILL fails.
fn stop_session(sid: u32) {
    let over = || in_session(sid).is_empty().then_some(());
    if poll(Duration::from_secs(10), POLL, over).is_some() {
        return;
    }
    for pid in in_session(sid) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // a process of the pane this test started.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    let left = poll(Duration::from_secs(10), POLL, over);
    assert!(
        left.is_some(),
        "the pane's processes outlived SIGKILL: {:?}",
        in_session(sid)
    );
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn tools() -> bool {
    have("tmux") && have("python3")
}

/// `baton serve --name pa --tmux-pane t:0.0 ARGS` on `tmux`'s server.
pub(crate) fn serve(env: &Env, tmux: &Tmux, vars: &[(&str, &str)], args: &[&str]) -> Served {
    let ws = env.workspace("ws");
    let (k, v) = tmux.var();
    let mut all = vec![(k, v.as_str())];
    all.extend_from_slice(vars);
    let mut full = vec!["--name", "pa", "--tmux-pane", "t:0.0"];
    full.extend_from_slice(args);
    env.serve_with(&ws, &all, &full)
}

/// Sends `body` from a plain command line; its message id.
pub(crate) fn send(env: &Env, body: &str) -> String {
    let out = env.run_stdin(&["send", "pa", "-", "--json"], body.as_bytes());
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    v["message_id"].as_str().unwrap().to_string()
}

pub(crate) fn typed_event(spool: &Path, id: &str) -> Value {
    wait_event(spool, &format!("task.typed for {id}"), WAIT, |e| {
        event_is(e, "task.typed", id)
    })
}

/// The command the envelope tells the agent to finish with, as arguments
/// after `baton`.
pub(crate) fn done_command(text: &str) -> Vec<String> {
    let line = text
        .split('\r')
        .find_map(|l| l.strip_prefix("[when done: baton "))
        .unwrap_or_else(|| panic!("no [when done: ...] line in {text:?}"));
    line.trim_end_matches(']')
        .split(' ')
        .map(String::from)
        .collect()
}

/// The places of the instance's tasks: (queued, processing) ids.
pub(crate) fn places(env: &Env) -> (Vec<String>, Vec<String>) {
    let out = env.run(&["inbox", "list", "pa", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let ids = |place: &str| -> Vec<String> {
        v[place]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["message_id"].as_str().unwrap().to_string())
            .collect()
    };
    (ids("queued"), ids("processing"))
}

#[test]
fn a_multi_line_task_is_pasted_whole_then_enter_follows_as_its_own_key() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    // From a verified sender instance, so the envelope says how to reply.
    let peer = me_as_instance(&env.registry, "peer", "/w/peer");
    let mut c = s.client();
    let body = "first line\n  second, indented\nthird";
    let r = c.call(1, "message/send", s.msg_from("m-multi", body, &peer));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    typed_event(&spool, "m-multi");
    wait_until("the Enter after the paste", WAIT, || {
        tmux.reads().last().is_some_and(|r| r == "\r")
    });

    let typed = tmux.typed();
    let block = typed
        .strip_prefix("\x1b[200~")
        .and_then(|t| t.strip_suffix("\x1b[201~\r"))
        .unwrap_or_else(|| panic!("not one bracketed paste, then Enter: {typed:?}"));
    assert!(
        !block.contains("\x1b[20"),
        "the block was pasted in pieces: {typed:?}"
    );
    // tmux sends each line end of a paste as CR, as a terminal does.
    assert!(
        block.contains("\rfirst line\r  second, indented\rthird\r"),
        "{block:?}"
    );
    assert!(block.starts_with("<agent_relay from=\"peer\""), "{block:?}");
    assert!(block.ends_with("</agent_relay>\r"), "{block:?}");
    let done = format!("[when done: baton inbox complete {} m-multi]", s.id);
    let reply = format!(
        "[to reply: baton inbox complete --reply \"TEXT\" {} m-multi]",
        s.id
    );
    assert!(block.contains(&format!("\r{reply}\r{done}\r")), "{block:?}");
    // The Enter came as a read of its own, after the paste had settled.
    let records = tmux.records();
    let n = records.len();
    let gap = records[n - 1]["t"].as_f64().unwrap() - records[n - 2]["t"].as_f64().unwrap();
    assert!(gap >= 0.1, "Enter {gap} s after the paste");

    // The task is claimed, as a pull agent's claim would leave it.
    assert_eq!(places(&env), (vec![], vec!["m-multi".to_string()]));
    let claimed = transcript(&spool)
        .into_iter()
        .filter(|e| event_is(e, "task.claimed", "m-multi"))
        .count();
    assert_eq!(claimed, 1);
    let status = c.call(2, "control/status", json!({}));
    assert_eq!(status["result"]["tmux_pane"], "t:0.0", "{status}");
    let started = transcript(&spool)
        .into_iter()
        .find(|e| e["kind"] == "instance.started")
        .unwrap();
    assert_eq!(started["tmux_pane"], "t:0.0", "{started}");
    assert_eq!(started["mode"], "pull", "{started}");
    assert_eq!(status["result"]["state"], "busy", "{status}");
}

#[test]
fn the_next_task_is_typed_only_after_the_agent_completes_the_one_before() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    let peer = me_as_instance(&env.registry, "peer", "/w/peer");
    let mut c = s.client();
    let r = c.call(1, "message/send", s.msg_from("one", "task one", &peer));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    typed_event(&spool, "one");
    // Even a steer task from the same sender, which `inbox/claim` would
    // hand out as a follow-up, waits for the first to be completed.
    let mut steer = s.msg_from("two", "task two", &peer);
    steer["mode"] = json!("steer");
    let r = c.call(2, "message/send", steer);
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    // Two calls answered one after the other: the foreground looked at
    // the queue between them, and would have claimed `two` by then.
    c.call(3, "control/status", json!({}));
    c.call(4, "control/status", json!({}));
    let seen = transcript(&spool);
    assert!(
        !seen.iter().any(|e| event_is(e, "task.claimed", "two")),
        "{seen:?}"
    );
    assert_eq!(places(&env), (vec!["two".into()], vec!["one".into()]));
    let typed = tmux.wait_done_line();
    assert!(typed.contains("task one") && !typed.contains("task two"));

    // The agent finishes as the envelope says.
    let args = done_command(&typed);
    assert_eq!(args, ["inbox", "complete", &s.id, "one"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    assert_eq!(out.status, 0, "{}", out.stderr);
    typed_event(&spool, "two");
    let typed = tmux.wait_typed("task two");
    let (a, b) = (
        typed.find("task one").unwrap(),
        typed.find("task two").unwrap(),
    );
    assert!(a < b, "{typed:?}");
    assert_eq!(typed.matches("\x1b[200~").count(), 2, "{typed:?}");
    let ended = wait_event(&spool, "one ended", WAIT, |e| {
        event_is(e, "task.ended", "one")
    });
    assert_eq!(ended["outcome"], "done");
}

#[test]
fn a_pane_in_copy_mode_is_taken_out_of_it_before_the_paste() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    tmux.run(&["copy-mode", "-t", "t:0.0"]);
    assert_eq!(tmux.in_mode(), "1");
    let id = send(&env, "while in copy mode");
    typed_event(&spool, &id);
    assert_eq!(tmux.in_mode(), "0");
    // In copy mode the Enter would have been copy mode's, not the agent's.
    wait_until("the Enter", WAIT, || tmux.typed().ends_with("\x1b[201~\r"));
    let typed = tmux.typed();
    assert!(typed.contains("while in copy mode"), "{typed:?}");
    // A plain command line cannot be replied to: the envelope says only
    // how to finish.
    assert!(!typed.contains("[to reply:"), "{typed:?}");
    let done = format!("\r[when done: baton inbox complete {} {id}]\r", s.id);
    assert!(typed.contains(&done), "{typed:?}");
}

#[test]
fn tasks_stay_queued_while_the_pane_is_gone_and_are_typed_in_order_once_it_is_back() {
    if !tools() {
        return;
    }
    let env = Env::new();
    // Every tmux call baton makes is logged, then made.
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v tmux"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = env.root.join("bin");
    fs::create_dir(&bin).unwrap();
    let calls = env.root.join("calls");
    fs::write(
        bin.join("tmux"),
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
            calls.display(),
            real.trim()
        ),
    )
    .unwrap();
    chmod_x(&bin.join("tmux"));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut tmux = Tmux::new(&env);
    // No server yet: the pane is not there.
    let s = serve(&env, &tmux, &[("PATH", &path)], &[]);
    let spool = s.spool();
    let one = send(&env, "first while gone");
    let two = send(&env, "second while gone");
    let said = wait_event(&spool, "the pane reported gone", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0"
    });
    let text = said["text"].as_str().unwrap();
    assert!(
        text.contains("tmux pane t:0.0 cannot be reached ("),
        "{said}"
    );
    assert!(!said["reason"].as_str().unwrap().is_empty(), "{said}");
    // Retried on a timer, said once, and nothing is decided about a task.
    let probes = || {
        fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait_until("three more tries", WAIT, || probes() >= 4);
    let seen = transcript(&spool);
    let notices = seen
        .iter()
        .filter(|e| e["kind"] == "notice" && e["tmux_pane"] == "t:0.0")
        .count();
    assert_eq!(notices, 1, "{seen:?}");
    assert!(
        !seen
            .iter()
            .any(|e| e["kind"] == "task.ended" || e["kind"] == "task.claimed"),
        "{seen:?}"
    );
    assert_eq!(places(&env), (vec![one.clone(), two.clone()], vec![]));

    // The pane comes back: that is said, and the first task is typed.
    tmux.start(&env);
    typed_event(&spool, &one);
    wait_event(&spool, "the pane reported back", WAIT, |e| {
        e["kind"] == "notice"
            && e["text"]
                .as_str()
                .is_some_and(|t| t.contains("answers again"))
    });
    let args = done_command(&tmux.wait_done_line());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(env.run(&args).status, 0);
    typed_event(&spool, &two);
    let typed = tmux.wait_typed("second while gone");
    let (a, b) = (
        typed.find("first while gone").unwrap(),
        typed.find("second while gone").unwrap(),
    );
    assert!(a < b, "{typed:?}");
}

#[test]
fn a_task_the_pane_vanished_under_goes_back_to_its_place_and_is_typed_after_a_restart() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let mut s = serve(&env, &tmux, &[], &[]);
    let spool = s.spool();
    let one = send(&env, "typed before the pane went");
    typed_event(&spool, &one);
    let args = done_command(&tmux.wait_done_line());
    tmux.stop();
    // The pane was there the last time: the next task is claimed, and
    // goes back when typing it fails.
    let two = send(&env, "the pane went meanwhile");
    let three = send(&env, "queued behind it");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(env.run(&args).status, 0);
    let said = wait_event(&spool, "the put back", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0"
    });
    assert_eq!(said["message_id"], two.as_str(), "{said}");
    assert!(
        said["text"]
            .as_str()
            .unwrap()
            .contains(&format!("task {two} went back to its place in the queue")),
        "{said}"
    );
    assert_eq!(places(&env), (vec![two.clone(), three.clone()], vec![]));
    assert!(
        !transcript(&spool)
            .iter()
            .any(|e| event_is(e, "task.ended", &two)),
    );
    // A new server, a new instance: the queue is typed in its order.
    assert_eq!(s.term(), 0);
    fs::remove_file(&tmux.log).unwrap();
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &[]);
    typed_event(&spool, &two);
    tmux.wait_typed("the pane went meanwhile");
    assert_eq!(places(&env), (vec![three], vec![two]));
    drop(s);
}

#[test]
fn turn_timeout_ends_a_typed_task_as_timeout_and_types_the_next() {
    if !tools() {
        return;
    }
    let env = Env::new();
    let mut tmux = Tmux::new(&env);
    tmux.start(&env);
    let s = serve(&env, &tmux, &[], &["--turn-timeout", "0.5"]);
    let spool = s.spool();
    let one = send(&env, "never completed");
    let two = send(&env, "typed after the timeout");
    typed_event(&spool, &one);
    let finished = wait_event(&spool, "one finished", WAIT, |e| {
        event_is(e, "turn.finished", &one)
    });
    assert_eq!(finished["outcome"], "timeout");
    let ended = wait_event(&spool, "one ended", WAIT, |e| {
        event_is(e, "task.ended", &one)
    });
    assert_eq!(ended["outcome"], "timeout");
    typed_event(&spool, &two);
    let status = env.run(&["inbox", "complete", &s.id, &one]);
    assert_eq!(status.status, 1, "{}", status.stdout);
    assert!(
        status.stderr.contains("is not open here") || status.stdout.contains("is not open here"),
        "{status:?}"
    );
}

#[test]
fn a_tmux_that_hangs_is_killed_and_the_task_stays_queued() {
    // No real tmux: a stand-in for it that never answers.
    let env = Env::new();
    let bin = env.root.join("bin");
    fs::create_dir(&bin).unwrap();
    let pids = env.root.join("pids");
    fs::write(
        bin.join("tmux"),
        format!(
            "#!/bin/sh\necho $$ >> '{}'\nexec sleep 60\n",
            pids.display()
        ),
    )
    .unwrap();
    chmod_x(&bin.join("tmux"));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let tmux = Tmux::new(&env);
    let s = serve(&env, &tmux, &[("PATH", &path)], &[]);
    let spool = s.spool();
    let id = send(&env, "for a pane behind a hung tmux");
    let said = wait_event(&spool, "the hang reported", WAIT, |e| {
        e["kind"] == "notice" && e["tmux_pane"] == "t:0.0"
    });
    assert!(
        said["reason"]
            .as_str()
            .unwrap()
            .contains("did not finish within 5 s"),
        "{said}"
    );
    assert_eq!(places(&env), (vec![id], vec![]));
    // The hanging tmux was killed, not left behind.
    let first: u32 = fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    wait_until("the hung tmux to be reaped", WAIT, || !pid_alive(first));
    drop(s);
}

#[test]
fn tmux_pane_is_refused_with_exec_and_without_tmux() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let out = env.run_with(
        &[],
        Some(&ws),
        &["serve", "--tmux-pane", "%1", "--exec", "true"],
        None,
    );
    assert_eq!(out.status, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("--tmux-pane types each task into a pane and --exec runs it"),
        "{}",
        out.stderr
    );
    let out = env.run_with(&[], Some(&ws), &["serve", "--tmux-pane", ""], None);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("name a tmux pane"), "{}", out.stderr);
    let out = env.run_with(&[], Some(&ws), &["serve", "--turn-timeout", "3"], None);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(
        out.stderr.contains("needs --exec, --tmux-pane or --codex"),
        "{}",
        out.stderr
    );
    let empty = env.root.join("empty");
    fs::create_dir(&empty).unwrap();
    let out = env.run_with(
        &[("PATH", empty.to_str().unwrap())],
        Some(&ws),
        &["serve", "--tmux-pane", "%1"],
        None,
    );
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("tmux is not on PATH"), "{}", out.stderr);
}

pub(crate) fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
}
