//! Issue 19: `baton send --from NAME` sends as a live local instance, and a
//! stopped agent stays readable: `baton log` and `baton inbox list` read its
//! spool from disk, without a lock, and change nothing there.
//!
//! Issue 31, point 4: one verdict per stopped name. The commands that need
//! a live instance exit 3 saying it is stopped, since when, what its spool
//! holds and how to start it; `status`, `log` and `inbox list` read its
//! spool and say it is stopped; `log -f` follows it from its next start.

use crate::util::{Env, Output, event_is, transcript, wait_event, wait_for, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bound for anything that should take well under a second.
const T: Duration = Duration::from_secs(10);

fn parse(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

/// The one spool directory of `name` under the state home.
fn spool_of(env: &Env, name: &str) -> PathBuf {
    let root = env.state.join("baton").join("spool");
    let found: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .collect();
    assert_eq!(found.len(), 1, "spools of {name}: {found:?}");
    found.into_iter().next().unwrap()
}

/// What is kept of one entry: kind, mode, size, mtime (s, ns) and, for a
/// regular file, its bytes.
type Entry = (String, u32, u64, i64, i64, Vec<u8>);

/// Every entry under `dir`, by path.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().filter_map(Result::ok) {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let t = m.file_type();
            let kind = if t.is_dir() {
                todo.push(p.clone());
                "dir"
            } else if t.is_fifo() {
                "fifo"
            } else if t.is_file() {
                "file"
            } else {
                "other"
            };
            let bytes = if t.is_file() {
                fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.insert(
                p,
                (
                    kind.to_string(),
                    m.mode(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    bytes,
                ),
            );
        }
    }
    out
}

/// An agent run once and stopped, with two tasks stored in its spool.
fn stopped_keeper(env: &Env) -> (PathBuf, PathBuf) {
    let ws = env.workspace("keeper");
    let mut s = env.serve(&ws, &["--name", "keeper"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
    for id in ["k1", "k2"] {
        let body = format!("task {id}");
        let out = env.run(&["send", "keeper", &body, "--message-id", id, "--json"]);
        assert_eq!(parse(&out)["status"], "stored", "{out:?}");
    }
    (ws, spool_of(env, "keeper"))
}

/// Whether `stderr` is the one line `log` and `inbox list` say on a
/// stopped agent: `baton: keeper is stopped (since TIME); reading its
/// spool`.
#[track_caller]
fn says_stopped(out: &Output) {
    let rest = out.stderr.strip_prefix("baton: keeper is stopped (since ");
    let time = rest.and_then(|r| r.strip_suffix("); reading its spool\n"));
    assert!(time.is_some_and(is_time), "{out:?}");
}

/// A time as `log` prints it: `HH:MM:SS`, or with the date before it.
fn is_time(t: &str) -> bool {
    let hms = t.rsplit(' ').next().unwrap_or("");
    hms.len() == 8
        && hms.split(':').count() == 3
        && t.chars().all(|c| c.is_ascii_digit() || ":- ".contains(c))
}

fn queued_ids(v: &Value) -> Vec<String> {
    v["queued"]
        .as_array()
        .unwrap_or_else(|| panic!("no queued: {v}"))
        .iter()
        .map(|t| t["message_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn send_from_sends_as_that_instance_and_the_reply_lands_in_its_inbox() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let a = env.serve(&wa, &["--name", "alpha"]);
    let b = env.serve(
        &wb,
        &[
            "--name",
            "beta",
            "--reply",
            "--exec",
            "cat > /dev/null; echo pong",
        ],
    );
    let out = env.run(&["send", "--from", "alpha", "beta", "hi", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "accepted", "{r}");
    let mid = r["message_id"].as_str().unwrap().to_string();
    let accepted = wait_event(&b.spool(), "beta accepting the task", T, |e| {
        event_is(e, "message.accepted", &mid)
    });
    assert_eq!(accepted["from"], "alpha", "{accepted}");
    // The reply goes to alpha, a pull agent: it waits in alpha's inbox.
    let listed = wait_for("the reply in alpha's inbox", T, || {
        let out = env.run(&["inbox", "list", "alpha", "--json"]);
        assert_eq!(out.status, 0, "{out:?}");
        Some(parse(&out)).filter(|l| l["queued"].as_array().is_some_and(|q| !q.is_empty()))
    });
    let reply = &listed["queued"][0];
    assert_eq!(reply["sender"]["name"], "beta", "{listed}");
    assert_eq!(reply["sender"]["instance_id"], b.id.as_str(), "{listed}");
    // Without --from, a send from alpha's own directory stays plain.
    let out = env.run_with(&[], Some(&wa), &["send", "beta", "plain", "--json"], None);
    let mid = parse(&out)["message_id"].as_str().unwrap().to_string();
    let accepted = wait_event(&b.spool(), "beta accepting the plain task", T, |e| {
        event_is(e, "message.accepted", &mid)
    });
    assert_eq!(accepted["from"], "(cli)", "{accepted}");
    // --from a name no live instance has: no target, nothing sent.
    let out = env.run(&["send", "--from", "nobody", "beta", "hi"]);
    assert_eq!(out.status, 3, "{out:?}");
    drop((a, b));
}

/// `send --from NAME` carries NAME's checks: while NAME runs an exec turn
/// for a task relayed from another agent, a send from NAME (with no turn
/// token, from a shell) goes only back to that sender, one hop further,
/// as a send from inside the turn does; when the turn has ended, any
/// target again.
#[test]
fn send_from_an_agent_in_a_relayed_turn_is_held_to_its_scope() {
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let go = env.root.join("go");
    let a = env.serve(&wa, &["--name", "alpha"]);
    let gate = format!(
        "cat >/dev/null; while [ ! -e '{}' ]; do sleep 0.05; done",
        go.display()
    );
    let b = env.serve(&wb, &["--name", "beta", "--exec", &gate]);
    let c = env.serve(&wc, &["--name", "gamma"]);
    let out = env.run(&["send", "--from", "alpha", "beta", "work", "--json"]);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    wait_event(&b.spool(), "beta's turn", T, |e| {
        e["kind"] == "turn.started"
    });
    let out = env.run(&["send", "--from", "beta", "gamma", "elsewhere", "--json"]);
    assert_eq!(out.status, 1, "{out:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "denied", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap_or("")
            .contains("relayed from alpha"),
        "{r}"
    );
    let out = env.run(&["send", "--from", "beta", "alpha", "back", "--json"]);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    let mid = parse(&out)["message_id"].as_str().unwrap().to_string();
    wait_event(&a.spool(), "alpha accepting", T, |e| {
        event_is(e, "message.accepted", &mid)
    });
    fs::write(&go, "").unwrap();
    wait_event(&b.spool(), "the turn's end", T, |e| {
        e["kind"] == "turn.finished"
    });
    let out = env.run(&["send", "--from", "beta", "gamma", "now", "--json"]);
    assert_eq!(parse(&out)["status"], "accepted", "{out:?}");
    drop((a, b, c));
}

#[test]
fn a_stopped_agents_log_and_inbox_are_read_from_its_spool_and_left_unchanged() {
    let env = Env::new();
    let (ws, spool) = stopped_keeper(&env);
    let before = snapshot(&spool);

    let out = env.run(&["log", "keeper"]);
    assert_eq!(out.status, 0, "{out:?}");
    says_stopped(&out);
    assert!(out.stdout.contains("instance.started"), "{out:?}");
    for id in ["k1", "k2"] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.contains("message.accepted") && l.contains(id)),
            "{out:?}"
        );
    }
    let out = env.run_with(&[], Some(&ws), &["log", "--json"], None);
    assert_eq!(out.status, 0, "{out:?}");
    says_stopped(&out);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(events.iter().any(|e| event_is(e, "message.accepted", "k2")));

    let out = env.run_with(&[], Some(&ws), &["inbox", "list"], None);
    assert_eq!(out.status, 0, "{out:?}");
    says_stopped(&out);
    let rows: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{out:?}");
    assert!(
        rows[0].starts_with("queued") && rows[0].contains("k1"),
        "{out:?}"
    );
    assert!(
        rows[1].starts_with("queued") && rows[1].contains("k2"),
        "{out:?}"
    );
    let out = env.run(&["inbox", "list", "keeper", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    says_stopped(&out);
    let v = parse(&out);
    assert_eq!(queued_ids(&v), ["k1", "k2"], "{v}");
    assert_eq!(v["queued"][0]["bytes"], 7, "{v}");

    assert_eq!(snapshot(&spool), before, "reading changed the spool");
    // A name with neither an instance nor a spool is still no target.
    let out = env.run(&["log", "nobody"]);
    assert_eq!(out.status, 3, "{out:?}");
}

#[test]
fn reading_a_stopped_spool_takes_no_lock_and_waits_on_no_fifo() {
    let env = Env::new();
    let (_ws, spool) = stopped_keeper(&env);
    // Something else holds the spool's lock (a sender storing a task).
    let lock = fs::File::open(spool.join("lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );
    // A FIFO planted in the inbox under a task file's name.
    let fifo = spool.join("inbox").join("0000000000009999-fifo.json");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = env.run(&["inbox", "list", "keeper", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(queued_ids(&parse(&out)), ["k1", "k2", "fifo"], "{out:?}");
    let out = env.run(&["log", "keeper"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("k2"), "{out:?}");
    drop(lock);
}

/// `baton: keeper is stopped (since TIME); its spool holds 2 tasks; baton
/// wake keeper or start it`, TIME as `log` prints it.
#[track_caller]
fn stopped_verdict(out: &Output, what: &str) {
    assert_eq!(out.status, 3, "{what}: {out:?}");
    assert_eq!(out.stdout, "", "{what}: {out:?}");
    let rest = out.stderr.strip_prefix("baton: keeper is stopped (since ");
    let time = rest.and_then(|r| {
        r.strip_suffix("); its spool holds 2 tasks; baton wake keeper or start it\n")
    });
    assert!(time.is_some_and(is_time), "{what}: {out:?}");
}

#[test]
fn issue_31_commands_that_need_a_live_instance_say_a_stopped_name_is_stopped() {
    let env = Env::new();
    let (ws, spool) = stopped_keeper(&env);
    let before = snapshot(&spool);
    for cmd in [
        &["ping", "keeper"][..],
        &["watch", "keeper"],
        &["watch", "--approve", "keeper"],
        &["pause", "keeper"],
        &["resume", "keeper"],
        &["attach", "keeper"],
        &["inbox", "claim", "keeper"],
        &["inbox", "wait", "keeper", "--timeout", "1"],
        &["bridge", "keeper"],
    ] {
        stopped_verdict(&env.run(cmd), &cmd.join(" "));
    }
    // Without TARGET, in the workspace of the stopped agent.
    let out = env.run_with(&[], Some(&ws), &["ping"], None);
    stopped_verdict(&out, "ping in its workspace");
    // `stop` has nothing to stop: exit 3, as for a name nobody has.
    let out = env.run(&["stop", "keeper"]);
    assert_eq!(out.status, 3, "{out:?}");
    let rest = out
        .stderr
        .strip_prefix("baton: stop: keeper is stopped (since ");
    let time = rest.and_then(|r| r.strip_suffix("); its spool holds 2 tasks: nothing to stop\n"));
    assert!(time.is_some_and(is_time), "{out:?}");
    assert_eq!(snapshot(&spool), before, "the verdicts changed the spool");
    // A name with neither an instance nor a spool keeps its answer.
    let out = env.run(&["ping", "nobody"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr
            .starts_with("baton: no live instance has the id or name nobody;"),
        "{out:?}"
    );
}

#[test]
fn issue_31_status_of_a_stopped_name_reads_its_spool() {
    let env = Env::new();
    let (ws, spool) = stopped_keeper(&env);
    let before = snapshot(&spool);
    let out = env.run(&["status", "keeper"]);
    assert_eq!(out.status, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "name:        keeper", "{out:?}");
    let time =
        (lines[1].strip_prefix("state:       stopped (since ")).and_then(|r| r.strip_suffix(')'));
    assert!(time.is_some_and(is_time), "{out:?}");
    for line in ["queued:      2", "processing:  0", "interrupted: 0"] {
        assert!(lines.contains(&line), "{line}: {out:?}");
    }
    let out = env.run_with(&[], Some(&ws), &["status", "--json"], None);
    assert_eq!(out.status, 0, "{out:?}");
    let v = parse(&out);
    assert_eq!(v["state"], "stopped", "{v}");
    assert_eq!(v["name"], "keeper", "{v}");
    assert_eq!(v["queue"]["queued"], 2, "{v}");
    assert_eq!(v["awaiting_approval"], serde_json::json!([]), "{v}");
    // Since the last event the instance itself recorded (its stopping),
    // not the tasks stored after it.
    let own = transcript(&spool)
        .into_iter()
        .rfind(|e| e.get("stored").is_none())
        .expect("an event of the instance");
    let since = own["time"].as_f64().unwrap() as u64;
    assert_eq!(v["stopped_since"], since, "{v}");
    assert_eq!(snapshot(&spool), before, "status changed the spool");
}

#[test]
fn issue_31_log_follow_of_a_stopped_name_follows_its_next_start() {
    let env = Env::new();
    let (ws, _spool) = stopped_keeper(&env);
    let mut log = env.spawn(&["log", "-f", "keeper"], &ws);
    let what = "log -f to print the transcript and wait for the next start";
    wait_until(what, T, || {
        let waits = log
            .stderr()
            .contains("keeper is not running; waiting for it to start");
        waits || !log.is_running()
    });
    assert!(log.is_running(), "{}", log.stderr());
    assert!(log.stdout().contains("k2"), "{}", log.stdout());
    let mut served = env.serve(&ws, &["--name", "keeper"]);
    let out = env.run(&["send", "keeper", "after the start", "--message-id", "k3"]);
    assert_eq!(out.status, 0, "{out:?}");
    // The new instance's events, from its start on, each once.
    wait_until("log -f to show k3", T, || log.stdout().contains("k3"));
    let shown = log.stdout();
    let started = shown
        .lines()
        .filter(|l| l.contains("instance.started"))
        .count();
    assert_eq!(started, 2, "{shown}");
    assert!(shown.contains(&format!("pid {}", served.pid())), "{shown}");
    // Ctrl-C ends it, as it ends `log -f` of a live instance.
    log.signal(libc::SIGINT);
    assert_eq!(
        log.wait_exit(T),
        Some(128 + libc::SIGINT),
        "{}",
        log.stderr()
    );
    assert_eq!(served.term(), 0, "{}", served.stderr());
}

/// A waiter learns a task's end from its spool's receipt while no
/// instance of the name runs: the instance that ran the task may have
/// come and gone between two of the waiter's looks at the registry (as
/// `baton mcp` under a host that runs for a second does). Here the
/// instance runs where the waiter cannot see it (another registry, the
/// same spool), so only the receipt can tell it.
#[test]
fn send_wait_learns_the_end_from_the_receipt_once_the_agent_stopped_again() {
    let env = Env::new();
    let ws = env.workspace("keeper");
    let mut s = env.serve(&ws, &["--name", "keeper"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let mut cmd = env.cmd();
    cmd.args([
        "send",
        "--wait",
        "--timeout",
        "60",
        "keeper",
        "hello",
        "--message-id",
        "w1",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let waiter = cmd.spawn().unwrap();
    wait_until("the task stored", Duration::from_secs(20), || {
        env.run(&["inbox", "list", "keeper"]).stdout.contains("w1")
    });
    let elsewhere = env.root.join("elsewhere");
    let other = elsewhere.to_str().unwrap();
    let vars = [("BATON_DIR", other)];
    let mut s = env.serve_with(&ws, &vars, &["--name", "keeper"]);
    let claimed = env.run_with(&vars, None, &["inbox", "claim", "keeper"], None);
    assert!(claimed.stdout.contains("hello"), "{claimed:?}");
    let args = ["inbox", "complete", "keeper", "w1", "--reply", "done here"];
    let done = env.run_with(&vars, None, &args, None);
    assert_eq!(done.status, 0, "{done:?}");
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let out = crate::util::finish(waiter, "send --wait", Duration::from_secs(70));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.trim_end(), "done here", "{stderr}");
}

/// Issue 45: a stopped agent's stand-in (`bridge --offline`, what `send
/// --via` reaches a stopped agent through) reads and checks as an
/// instance's connection does, where it was once a second server of the
/// command line's own: a request before `initialize` is refused as a
/// connection refuses it, params that are not an object get the server's
/// words, and a line gets one deadline (`BATON_IO_TIMEOUT`) from its first
/// byte: one that never ends is answered `read timeout` and the bridge
/// exits, where it once waited for the rest forever.
#[test]
fn a_stopped_agents_stand_in_reads_and_checks_as_a_connection_does() {
    let env = Env::new();
    stopped_keeper(&env);
    let mut st = StandIn::start(&env, &[("BATON_IO_TIMEOUT", "1")]);
    let mut ask = |line: &str| st.ask(line);
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"k3","body":"b","sender":{}}}"#;
    let early = ask(&format!("{send}\n"));
    assert_eq!(early["error"]["code"], -32010, "{early}");
    let hello = ask(
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"client\":{\"name\":\"t\",\"version\":\"0\"}}}\n",
    );
    assert_eq!(hello["result"]["offline"]["name"], "keeper", "{hello}");
    let bad = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"message/send\",\"params\":[1]}\n");
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(
        bad["error"]["message"], "invalid params: params must be an object",
        "{bad}"
    );
    // Half a line, and the client goes quiet with its end still open.
    let stalled = ask(r#"{"jsonrpc":"2.0","id":3,"#);
    assert_eq!(stalled["error"]["code"], -32000, "{stalled}");
    let m = stalled["error"]["message"].as_str().unwrap_or("");
    assert!(m.starts_with("read timeout: "), "{stalled}");
    let exited = st.exit(false);
    assert!(exited.success(), "{exited:?}");
}

/// Issue 45: a stopped agent's stand-in whose agent has started meanwhile
/// delivers the request it read and checked to the live instance, as
/// having come through a bridge, and the answer names the instance.
#[test]
fn a_stand_in_whose_agent_started_meanwhile_delivers_to_it() {
    let env = Env::new();
    let (ws, _) = stopped_keeper(&env);
    let mut st = StandIn::start(&env, &[]);
    let mut ask = |line: &str| st.ask(line);
    let hello = ask(
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"client\":{\"name\":\"t\",\"version\":\"0\"}}}\n",
    );
    assert_eq!(hello["result"]["offline"]["name"], "keeper", "{hello}");
    let mut s = env.serve(&ws, &["--name", "keeper"]);
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message_id":"k9","body":"late","sender":{},"mode":"queue","hop":2}}"#;
    let sent = ask(&format!("{send}\n"));
    assert_eq!(sent["result"]["status"], "accepted", "{sent}");
    assert_eq!(
        sent["result"]["target"]["instance_id"],
        s.id.as_str(),
        "{sent}"
    );
    assert_eq!(sent["result"]["target"]["name"], "keeper", "{sent}");
    let listed = parse(&env.run(&["inbox", "list", "keeper", "--json"]));
    assert_eq!(queued_ids(&listed), ["k1", "k2", "k9"], "{listed}");
    let k9 = &listed["queued"][2];
    assert_eq!(k9["bytes"], 4, "{k9}");
    assert_eq!(k9["mode"], "queue", "{k9}");
    assert_eq!(k9["sender"]["remote"], "ssh", "{k9}");
    let exited = st.exit(true);
    assert!(exited.success(), "{exited:?}");
    assert_eq!(s.term(), 0, "{}", s.stderr());
}

/// `baton bridge --offline keeper` with `vars`, its answers read line by
/// line as JSON by a thread.
struct StandIn {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    answers: crossbeam_channel::Receiver<Value>,
}

impl StandIn {
    fn start(env: &Env, vars: &[(&str, &str)]) -> StandIn {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = env
            .cmd()
            .args(["bridge", "--offline", "keeper"])
            .envs(vars.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, answers) = crossbeam_channel::unbounded();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        let stdin = child.stdin.take();
        StandIn {
            child,
            stdin,
            answers,
        }
    }

    /// Writes `line` and gives the next answer.
    fn ask(&mut self, line: &str) -> Value {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("its stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
        self.answers
            .recv_timeout(T)
            .expect("an answer from the stand-in")
    }

    /// Its exit, once it exits (by `T`); with `close`, its stdin is closed
    /// first, else it ends on its own.
    fn exit(&mut self, close: bool) -> std::process::ExitStatus {
        if close {
            drop(self.stdin.take());
        }
        let status = wait_for("the stand-in's exit", T, || self.child.try_wait().unwrap());
        drop(self.stdin.take());
        status
    }
}
