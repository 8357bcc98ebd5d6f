//! Approvals for scripts and for reading whole (issues 44 and 46): `baton
//! approvals` lists what waits (`--json`, `--full`), `baton approve` and
//! `baton deny` answer by approval id in one shot, an id answered again or
//! asked again after a restart decides nothing, and `watch --approve`
//! says how many characters it escaped and prints the whole body on `v`.

use crate::util::{Env, Served, approval_of, event_is, transcript, wait_until};
use serde_json::Value;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A handler that records which task ran, in order, in `ran.txt`.
const RECORD: &str = "echo \"$BATON_MESSAGE_ID\" >> ran.txt";
const WAIT: Duration = Duration::from_secs(10);

fn serve_asking(env: &Env, name: &str) -> Served {
    let ws = env.workspace(name);
    env.serve(&ws, &["--exec", RECORD, "--approve", "ask", "--name", name])
}

/// Sends `body` as task `id` from the instance `alice`, and waits until
/// it waits for an approval: its approval id.
fn send_waiting(env: &Env, inst: &Served, id: &str, body: &str) -> String {
    let _ = env;
    let mut c = inst.client();
    let r = c.call(3, "message/send", inst.msg(id, body));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let a = approval_of(&inst.spool(), id);
    a["approval_id"].as_str().unwrap().to_string()
}

fn wait_receipt(spool: &Path, id: &str) -> Value {
    crate::util::wait_for(&format!("the receipt of {id}"), WAIT, || {
        crate::util::receipt(spool, id)
    })
}

fn ran(inst: &Served) -> String {
    fs::read_to_string(inst.workspace.join("ran.txt")).unwrap_or_default()
}

/// A body of `n` lines, `line 1` to `line n`.
fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

#[test]
fn approvals_lists_a_waiting_task_with_its_size_lines_and_excerpt() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let body = lines(7);
    let ask = send_waiting(&env, &inst, "p-1", &body);

    let out = env.run(&["approvals", "srv"]);
    assert_eq!(out.status, 0, "{out:?}");
    let rows: Vec<Vec<&str>> = (out.stdout.lines())
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        rows[0],
        [
            "APPROVAL", "TASK", "FROM", "MODE", "SIZE", "LINES", "EXCERPT"
        ],
        "{out:?}"
    );
    let size = body.len().to_string();
    assert_eq!(
        rows[1],
        [&ask, "p-1", "(cli)", "queue", &size, "7", "line 1 …"],
        "{out:?}"
    );
    assert_eq!(rows.len(), 2, "{out:?}");

    let out = env.run(&["approvals", "srv", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let a = &v["approvals"][0];
    assert_eq!(v["approvals"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(a["approval_id"], ask.as_str(), "{a}");
    assert_eq!(a["kind"], "task", "{a}");
    assert_eq!(a["message_id"], "p-1", "{a}");
    assert_eq!(a["mode"], "queue", "{a}");
    assert_eq!(a["bytes"], body.len(), "{a}");
    assert_eq!(a["lines"], 7, "{a}");
    assert_eq!(
        a["excerpt"], "line 1\nline 2\nline 3\nline 4\nline 5",
        "{a}"
    );
    assert_eq!(a["digest"], approval_of(&inst.spool(), "p-1")["digest"]);
    // The digest an answer names covers the whole body.
    let sha = baton::base::digest::sha256_hex(body.as_bytes());
    assert_eq!(a["body_sha256"], sha.as_str(), "{a}");
    assert!(a.get("body").is_none(), "{a}");

    let other = env.serve(&env.workspace("calm"), &["--name", "calm"]);
    let out = env.run(&["approvals", "calm"]);
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (0, "no approvals wait at calm\n")
    );
    drop(other);
}

#[test]
fn approvals_full_prints_a_40_line_body_whole_and_escaped() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let mut body = lines(40);
    body = body.replace("line 33\n", "line 33 \x1b[2J\u{202e}\n");
    let ask = send_waiting(&env, &inst, "p-40", &body);

    let out = env.run(&["approvals", "srv", "--full"]);
    assert_eq!(out.status, 0, "{out:?}");
    let s = &out.stdout;
    assert!(
        s.starts_with(&format!(
            "approval {ask} at srv: task p-40 waits for approval\n"
        )),
        "{s}"
    );
    assert!(s.contains("  body:  "), "{s}");
    assert!(s.contains(" bytes, 40 lines\n"), "{s}");
    assert!(
        s.contains("  escaped: 2 characters; v shows it whole\n"),
        "{s}"
    );
    let whole = format!(
        "  the whole of task p-40 ({} bytes, 40 lines):\n",
        body.len()
    );
    let start = s.find(&whole).unwrap_or_else(|| panic!("{s}"));
    let shown: Vec<&str> = s[start + whole.len()..].lines().take(41).collect();
    for (i, l) in shown[..40].iter().enumerate() {
        let n = i + 1;
        let want = match n {
            33 => "  | line 33 \\e[2J\\u{202e}".to_string(),
            n => format!("  | line {n}"),
        };
        assert_eq!(*l, want, "{s}");
    }
    assert_eq!(shown[40], "  (end of task p-40)", "{s}");
    assert!(!s.contains('\x1b') && !s.contains('\u{202e}'), "{s:?}");

    let out = env.run(&["approvals", "srv", "--full", "--json"]);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["approvals"][0]["body"], body.as_str(), "{v}");
}

#[test]
fn approve_by_id_runs_the_task_once() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let ask = send_waiting(&env, &inst, "p-1", "rotate the logs\n");

    // One id that waits, one that never did: the first is decided.
    let out = env.run(&["approve", "srv", &ask, "ask-999999"]);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("approved {ask} (task p-1) at srv\n"),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(
            "baton: cannot approve ask-999999 at srv: no approval ask-999999 is waiting (decided already, or asked again under a new id"
        ),
        "{out:?}"
    );
    assert_eq!(wait_receipt(&inst.spool(), "p-1")["outcome"], "done");
    assert_eq!(ran(&inst), "p-1\n");
    let resolved = transcript(&inst.spool())
        .into_iter()
        .find(|e| event_is(e, "approval.resolved", "p-1"))
        .expect("approval.resolved");
    assert_eq!(resolved["by"], "baton approve", "{resolved}");
    assert_eq!(resolved["by_pid"], out.pid, "{resolved}");

    // Answered again: not waiting any more, and the task does not run twice.
    let again = env.run(&["approve", "srv", &ask, "--json"]);
    assert_eq!(again.status, 1, "{again:?}");
    let v: Value = serde_json::from_str(again.stdout.trim()).unwrap();
    assert_eq!(v["status"], "invalid", "{v}");
    assert_eq!(v["reason"], format!("no approval {ask} is waiting"), "{v}");
    let out = env.run(&["approvals", "srv"]);
    assert_eq!(out.stdout, "no approvals wait at srv\n", "{out:?}");
    assert_eq!(ran(&inst), "p-1\n");
}

#[test]
fn deny_by_id_ends_the_task_denied() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let ask = send_waiting(&env, &inst, "d-1", "drop the database\n");
    let out = env.run(&["deny", "srv", &ask]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, format!("denied {ask} (task d-1) at srv\n"));
    assert_eq!(wait_receipt(&inst.spool(), "d-1")["outcome"], "denied");
    assert_eq!(ran(&inst), "");
    let out = env.run(&["deny", "srv"]);
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("APPROVAL_ID is missing"), "{out:?}");
}

/// An approval id read before a restart is not the id the same task (or
/// another) waits under after it: ids are not given twice by a spool's
/// instances, so an answer by an old id decides nothing.
#[test]
fn an_id_from_before_a_restart_decides_nothing_after_it() {
    let env = Env::new();
    let ws = env.workspace("srv");
    let args = ["--exec", RECORD, "--approve", "ask", "--name", "srv"];
    let mut first = env.serve(&ws, &args);
    let old = send_waiting(&env, &first, "r-1", "first run\n");
    assert_eq!(first.term(), 0);
    let second = env.serve(&ws, &args);
    let new = crate::util::wait_for("r-1 to be asked again", WAIT, || {
        let a = approval_of(&second.spool(), "r-1");
        let id = a["approval_id"].as_str()?.to_string();
        (id != old).then_some(id)
    });
    let out = env.run(&["approve", "srv", &old]);
    assert_eq!(out.status, 1, "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("no approval {old} is waiting")),
        "{out:?}"
    );
    assert_eq!(ran(&second), "");
    let out = env.run(&["approve", "srv", &new]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(wait_receipt(&second.spool(), "r-1")["outcome"], "done");
    assert_eq!(ran(&second), "r-1\n");
}

/// A `baton watch --approve` whose stdin the test writes as it goes.
struct Watch {
    child: Child,
    err: std::path::PathBuf,
}

impl Watch {
    fn start(env: &Env, target: &str) -> Watch {
        let out = env.root.join("watch.out");
        let err = env.root.join("watch.err");
        let child = env
            .cmd()
            .args(["watch", target, "--approve", "--since", "1"])
            .stdin(Stdio::piped())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .expect("spawn baton watch");
        // Subscribed once its replay printed the start.
        wait_until("watch to subscribe", WAIT, || {
            fs::read_to_string(&out).is_ok_and(|o| o.contains("instance.started"))
        });
        Watch { child, err }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn wait_for(&self, what: &str) {
        wait_until(what, WAIT, || self.stderr().contains(what));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn watch_approve_counts_what_it_escaped_and_v_prints_the_whole_body() {
    let env = Env::new();
    let inst = serve_asking(&env, "srv");
    let mut watch = Watch::start(&env, "srv");
    let body = lines(12).replace("line 12\n", "line 12 \x07 hidden\x1b\n");
    send_waiting(&env, &inst, "w-1", &body);
    watch.wait_for("approve task w-1? [y/n] ");
    let err = watch.stderr();
    assert!(
        err.contains(&format!("  body:  {} bytes, 12 lines\n", body.len())),
        "{err}"
    );
    assert!(
        err.contains("  escaped: 2 characters; v shows it whole\n"),
        "{err}"
    );
    assert!(!err.contains("line 12"), "only five lines before v: {err}");

    watch.say("v\n");
    watch.wait_for("  (end of task w-1)\n");
    let err = watch.stderr();
    let whole = format!(
        "  the whole of task w-1 ({} bytes, 12 lines):\n",
        body.len()
    );
    assert!(err.contains(&whole), "{err}");
    assert!(
        err.contains("  | line 11\n  | line 12 \\u{7} hidden\\e\n"),
        "{err}"
    );
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    // Asked again after the body, and the answer still decides it.
    let after = &err[err.find("(end of task w-1)").unwrap()..];
    assert!(after.contains("approve task w-1? [y/n] "), "{err}");
    watch.say("y\n");
    assert_eq!(wait_receipt(&inst.spool(), "w-1")["outcome"], "done");
    assert_eq!(ran(&inst), "w-1\n");
}

/// The view (`baton attach`): the prompt says how many lines the body
/// has and how many of its characters are escaped, and `v` shows the
/// whole body, escaped, before `n` answers.
#[test]
fn the_views_v_shows_the_whole_body_and_its_prompt_the_counts() {
    if !crate::util::have("tmux") {
        return;
    }
    use crate::tui::Tmux;
    let env = Env::new();
    let ws = env.workspace("h");
    let mut h = env.serve(&ws, &["--name", "h", "--exec", RECORD, "--approve", "ask"]);
    let tmux = Tmux::start(
        &env,
        "view",
        &format!("cd '{}'\nexec \"$BATON\" attach h", ws.display()),
    );
    tmux.wait_for("view", &format!("baton h ({}) coding ready", h.id));
    // Wide enough for the status row whatever the length of the sender's
    // directory (this process's, where the suite was started).
    tmux.run(&["resize-window", "-t", "t:view", "-x", "300"]);
    let body = lines(9).replace("line 9\n", "line 9 \x1b[31mred\n");
    send_waiting(&env, &h, "v-1", &body);
    tmux.wait_for("view", "mode queue, 72 bytes, 9 lines, 1 escaped; v reads");

    tmux.key("view", "v");
    let screen = tmux.wait_for("view", "(end of task v-1)");
    let rows: Vec<&str> = screen.lines().map(str::trim_end).collect();
    let at = (rows.iter())
        .position(|l| l.starts_with("* the whole of task v-1 ("))
        .unwrap_or_else(|| panic!("{screen}"));
    let whole: Vec<String> = (1..=9)
        .map(|n| match n {
            9 => "    | line 9 \\e[31mred".to_string(),
            n => format!("    | line {n}"),
        })
        .collect();
    assert_eq!(rows[at + 1..at + 10], whole, "{screen}");
    tmux.key("view", "n");
    assert_eq!(wait_receipt(&h.spool(), "v-1")["outcome"], "denied");
    assert_eq!(ran(&h), "");
    drop(tmux);
    assert_eq!(h.term(), 0);
}

/// A tool call an MCP host asks its user to allow is listed beside the
/// tasks (mode `tool`) and answered by its approval id the same way: the
/// host is told `allow`.
#[test]
fn a_hosts_tool_call_is_listed_and_approved_by_id() {
    use crate::mcp::{Mcp, NEWEST};
    let env = Env::new();
    let ws = env.workspace("perm");
    let mut m = Mcp::start_hosted(&env, &ws, &["--name", "perm"]);
    m.initialize(NEWEST);
    let note = serde_json::json!({"jsonrpc": "2.0",
        "method": "notifications/claude/channel/permission_request", "params": {
        "request_id": "tbxkq", "tool_name": "Bash", "description": "Remove the build",
        "input_preview": "{\"command\":\"rm -rf build\"}"}});
    m.send_line(&note.to_string());
    let row = crate::util::wait_for("the tool call to be listed", WAIT, || {
        let out = env.run(&["approvals", "perm"]);
        let row = out.stdout.lines().nth(1)?.to_string();
        Some(row)
    });
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // Its size and lines: the description and the input, one line each.
    let size = ("Remove the build\n".len() + "{\"command\":\"rm -rf build\"}".len()).to_string();
    assert_eq!(
        cells[1..],
        [
            "tbxkq",
            "baton-tests",
            "tool",
            &size,
            "2",
            "Bash: Remove the build …"
        ],
        "{row}"
    );
    let ask = cells[0].to_string();
    let out = env.run(&["approve", "perm", &ask]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("approved {ask} (tool call tbxkq) at perm\n")
    );
    let v = m.wait_note("notifications/claude/channel/permission", |p| {
        p["request_id"] == "tbxkq"
    });
    assert_eq!(v["params"]["behavior"], "allow", "{v}");
}
