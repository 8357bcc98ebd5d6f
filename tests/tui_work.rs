//! The terminal view doing the work (issue 21): `/claim`, `/complete`,
//! `/reply` and the `/quit` warning; approvals with their sender, mode and
//! body; the terminal types it refuses and the colour codes it writes;
//! bare `baton` offering to attach where an instance already serves the
//! directory, and `baton -a`. The logic through the library with a fake
//! instance call, end to end in a private tmux server.

use crate::tui::WAIT;
use crate::tui::{Tmux, flat, manifest};
use crate::util::{Env, PANE_POLL, have, poll};
use baton::tui::term::{Memory, Style, Terminal, colour_wanted, style_codes, unusable_term};
use baton::tui::view::{Role, View, approval_prompt, excerpt};
use baton::tui::work;
use baton::wire::Call;
use serde_json::{Value, json};
use std::ffi::OsStr;

fn screen(view: &View) -> Vec<String> {
    let mut term = Memory::new(100, 30);
    term.draw(&view.render(100, 30)).unwrap();
    term.screen()
}

fn last(view: &View) -> (Role, String) {
    let e = view.entries.last().expect("an entry");
    (e.role, e.text.clone())
}

/// A fake instance: answers each method from `answers`, recording calls.
struct Fake {
    calls: Vec<(String, Value)>,
    answers: Vec<(&'static str, Value)>,
}

impl Fake {
    fn new(answers: Vec<(&'static str, Value)>) -> Fake {
        Fake {
            calls: Vec::new(),
            answers,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.calls.push((method.to_string(), params));
        let i = self
            .answers
            .iter()
            .position(|(m, _)| *m == method)
            .unwrap_or_else(|| panic!("unexpected call {method}"));
        Ok(self.answers.remove(i).1)
    }
}

fn claimed(id: &str, instance: Option<&str>, name: &str, body: &str) -> Value {
    let mut sender = json!({"name": name, "workspace": format!("/w/{name}")});
    if let Some(i) = instance {
        sender["instance_id"] = json!(i);
    }
    json!({"status": "claimed", "task": {"message_id": id, "body": body, "sender": sender,
           "hop": 0, "in_reply_to": null, "mode": "queue", "follow_up_of": null}})
}

#[test]
fn claim_shows_the_task_and_complete_finishes_the_last_one() {
    let mut view = View::default();
    // Nothing open: /complete says how to get a task.
    let mut fake = Fake::new(vec![]);
    work::complete("", &mut view, &mut |m: Call, p| fake.call(m.as_str(), p));
    assert_eq!(
        last(&view),
        (
            Role::Refusal,
            "no task is open here: /claim one first, or /complete ID".into()
        )
    );
    assert!(fake.calls.is_empty());

    let mut fake = Fake::new(vec![
        (
            "inbox/claim",
            claimed("t-1", Some("42-1"), "beta", "review this\nplease"),
        ),
        ("inbox/claim", json!({"status": "empty"})),
        (
            "inbox/claim",
            json!({"status": "busy", "message_id": "t-1",
                               "reason": "task t-1 is still open: complete it first"}),
        ),
        (
            "inbox/complete",
            json!({"status": "completed", "message_id": "t-1", "outcome": "failed"}),
        ),
        (
            "inbox/complete",
            json!({"status": "invalid", "message_id": "zz",
                                  "reason": "task zz is not open here"}),
        ),
    ]);
    let mut call = |m: Call, p: Value| fake.call(m.as_str(), p);
    work::claim(&mut view, &mut call);
    let shown = screen(&view);
    assert!(
        shown.contains(&"<< claimed task t-1 from beta (/w/beta), 18 bytes:".to_string()),
        "{shown:#?}"
    );
    assert!(shown.contains(&"   review this".to_string()), "{shown:#?}");
    assert!(
        flat(&shown.join("\n")).contains("/reply TEXT answers beta and completes it"),
        "{shown:#?}"
    );
    assert_eq!(view.open.len(), 1);
    assert_eq!(view.open[0].replyable, Some(true));
    work::claim(&mut view, &mut call);
    assert_eq!(
        last(&view),
        (Role::System, "the inbox is empty: nothing to claim".into())
    );
    work::claim(&mut view, &mut call);
    assert_eq!(
        last(&view),
        (
            Role::Refusal,
            "task t-1 is still open: complete it first (/complete, or /reply TEXT)".into()
        )
    );
    // Bad words are refused before any call.
    work::complete("--fail", &mut view, &mut call);
    assert!(last(&view).1.starts_with("/complete: unexpected --fail"));
    // Without an id: the task claimed last.
    work::complete("--failed", &mut view, &mut call);
    assert_eq!(last(&view), (Role::System, "completed t-1 (failed)".into()));
    assert!(view.open.is_empty());
    work::complete("zz", &mut view, &mut call);
    assert_eq!(
        last(&view),
        (
            Role::Refusal,
            "cannot complete zz: invalid: task zz is not open here".into()
        )
    );
    let calls: Vec<(String, Value)> = fake.calls.clone();
    assert_eq!(
        calls[3],
        (
            "inbox/complete".to_string(),
            json!({"message_id": "t-1", "outcome": "failed"})
        )
    );
    assert_eq!(calls[4].1, json!({"message_id": "zz", "outcome": "done"}));

    // A claim seen only as an event (`baton inbox claim` from a shell) is
    // open too, and the turn's end closes it.
    view.apply_event(&json!({"kind": "task.claimed", "message_id": "t-2", "from": "gamma"}));
    assert_eq!(view.open.len(), 1);
    view.apply_event(&json!({"kind": "turn.finished", "message_id": "t-2", "outcome": "done"}));
    assert!(view.open.is_empty());
}

#[test]
fn reply_answers_the_task_claimed_last_and_completes_it() {
    let mut view = View::default();
    assert_eq!(
        work::reply_params("hi", &view).unwrap_err().to_string(),
        "no task is open here: /claim one first"
    );
    let mut fake = Fake::new(vec![
        ("inbox/claim", claimed("t-1", None, "(cli)", "from a shell")),
        (
            "inbox/claim",
            claimed("t-2", Some("42-1"), "beta", "a question"),
        ),
    ]);
    work::claim(&mut view, &mut |m: Call, p| fake.call(m.as_str(), p));
    assert_eq!(
        last(&view).1,
        "(cli) cannot be replied to (no instance); /complete [--failed] completes it"
    );
    assert_eq!(
        work::reply_params("hi", &view).unwrap_err().to_string(),
        "task t-1 came from (cli), which has no instance to reply to: /complete it"
    );
    work::claim(&mut view, &mut |m: Call, p| fake.call(m.as_str(), p));
    assert!(
        work::reply_params("", &view)
            .unwrap_err()
            .to_string()
            .starts_with("usage: /reply TEXT")
    );
    assert_eq!(
        work::reply_params("the answer", &view).unwrap().to_value(),
        json!({"message_id": "t-2", "outcome": "done", "reply": "the answer"})
    );

    // What the completion came to.
    let ok = work::reply_outcome(
        "t-2",
        Ok(
            json!({"status": "completed", "message_id": "t-2", "outcome": "done",
                  "reply": {"status": "accepted", "message_id": "r-1"}}),
        ),
    );
    assert_eq!(ok, [(Role::System, "completed t-2 (done)".to_string())]);
    let failed = work::reply_outcome(
        "t-2",
        Ok(
            json!({"status": "completed", "message_id": "t-2", "outcome": "done",
                  "reply": {"status": "no_target", "reason": "beta is not running"}}),
        ),
    );
    assert_eq!(
        failed[1],
        (
            Role::Refusal,
            "reply not sent: no_target: beta is not running".to_string()
        )
    );
    let slow = work::reply_outcome(
        "t-2",
        Ok(
            json!({"status": "completed", "message_id": "t-2", "outcome": "done",
                  "reply": {"status": "sending", "message_id": "r-1"}}),
        ),
    );
    assert_eq!(slow[1].1, "reply r-1 is on its way; its outcome follows");
    let refused = work::reply_outcome(
        "t-2",
        Ok(
            json!({"status": "invalid", "message_id": "t-2", "reason": "task t-2 is not open here"}),
        ),
    );
    assert_eq!(
        refused,
        [(
            Role::Refusal,
            "cannot complete t-2: invalid: task t-2 is not open here".to_string()
        )]
    );
}

fn status(mode: &str, queued: u64, processing: u64) -> Value {
    json!({"mode": mode, "queue": {"queued": queued, "processing": processing}})
}

#[test]
fn quit_warns_once_while_tasks_wait() {
    // Nothing waits, or the instance does not answer: /quit leaves.
    let mut view = View::default();
    assert!(work::quit(&mut view, Some(&status("pull", 0, 0)), true));
    assert!(work::quit(&mut view, None, true));
    assert!(view.entries.is_empty());

    // Tasks wait: the first /quit says so, the next one leaves.
    assert!(!work::quit(&mut view, Some(&status("pull", 2, 1)), true));
    assert_eq!(
        last(&view),
        (
            Role::System,
            "3 tasks wait (2 queued, 1 claimed); leaving stops this instance; they stay in its spool for its next start; /quit again to leave".into()
        )
    );
    assert!(view.quit_armed);
    assert!(work::quit(&mut view, Some(&status("pull", 2, 1)), true));

    // Attached: a pull instance's tasks wait for a taker; an exec
    // instance's handler runs them, so there is nothing to warn of.
    let mut view = View::default();
    assert!(work::quit(&mut view, Some(&status("exec", 4, 0)), false));
    assert!(!work::quit(&mut view, Some(&status("pull", 1, 0)), false));
    assert_eq!(
        last(&view).1,
        "1 task waits (1 queued, 0 claimed); the instance keeps running and they stay in its inbox; /quit again to leave"
    );
}

#[test]
fn an_approval_shows_sender_workspace_mode_and_the_body() {
    // Today's request: `from` is a name; the rest comes from the task's
    // message.accepted event.
    let mut view = View::default();
    let body = "rm -rf /tmp/x\nthen \x1b]52;c;aGk=\x07 this\n3\n4\n5\n6\n7";
    view.apply_event(
        &json!({"kind": "message.accepted", "message_id": "m-1", "from": "beta",
                             "pid": 7, "workspace": "/w/beta", "mode": "queue", "body": body}),
    );
    view.apply_event(
        &json!({"kind": "approval.requested", "message_id": "m-1", "from": "beta", "pid": 7}),
    );
    let w = &view.waiting[0];
    assert_eq!(
        (
            w.from.as_str(),
            w.workspace.as_str(),
            w.mode.as_str(),
            w.bytes
        ),
        ("beta", "/w/beta", "queue", Some(body.len() as u64))
    );
    let shown = screen(&view);
    assert_eq!(
        shown[28],
        format!(
            "approve task m-1 from beta (/w/beta), mode queue, {} bytes? [y/n]",
            body.len()
        )
    );
    let at = shown
        .iter()
        .position(|l| l.starts_with("* task m-1 from beta (/w/beta), mode queue"))
        .unwrap_or_else(|| panic!("{shown:#?}"));
    assert_eq!(
        shown[at + 1..at + 8],
        [
            "    rm -rf /tmp/x",
            "    then \\e]52;c;aGk=\\u{7} this",
            "    3",
            "    4",
            "    5",
            "    …",
            ""
        ]
    );
    for l in &shown {
        assert!(!l.contains(['\x1b', '\x07']), "{l:?}");
    }

    // The fields the request may carry itself win: `from` as an object,
    // `mode`, `body_excerpt`, `body_bytes`.
    let mut view = View::default();
    view.apply_event(&json!({"kind": "approval.requested", "message_id": "m-2",
        "from": {"name": "gamma", "workspace": "/w/gamma"}, "mode": "steer",
        "body_excerpt": "first line\nsecond", "body_bytes": 9000}));
    let shown = screen(&view);
    assert_eq!(
        shown[28],
        "approve task m-2 from gamma (/w/gamma), mode steer, 9000 bytes? [y/n]"
    );
    assert_eq!(shown[2..4], ["    first line", "    second"]);
    assert_eq!(view.entries[0].role, Role::System);

    // The excerpt: five lines of at most 200 characters, … for the rest.
    assert_eq!(excerpt("a\nb"), "a\nb");
    let long = "x".repeat(250);
    assert_eq!(excerpt(&long), format!("{}…", "x".repeat(200)));
}

/// A tool call an MCP host relayed waits, with who asked, until the
/// decision on its approval comes; a new run asks about what waits anew.
#[test]
fn a_tool_call_waits_in_the_view_until_its_approval_is_decided() {
    let mut v = View::default();
    let asked = json!({"kind": "permission.requested", "request_id": "tbxkq",
        "tool_name": "Bash", "description": "List", "input_preview": "{}", "pid": 7,
        "host": "claude", "host_pid": 6, "approval_id": "ask-1", "digest": "d1"});
    v.apply_event(&asked);
    v.apply_event(&asked);
    assert_eq!(v.waiting.len(), 1);
    let w = &v.waiting[0];
    assert_eq!(w.tool.as_deref(), Some("Bash"));
    assert_eq!((w.approval_id.as_str(), w.digest.as_str()), ("ask-1", "d1"));
    assert_eq!(
        approval_prompt(w),
        "allow tool call tbxkq (Bash) asked by claude (pid 6) through baton mcp (pid 7)? [y/n]"
    );
    // A decision on another approval of the same request id is not this
    // one's.
    v.apply_event(
        &json!({"kind": "permission.resolved", "request_id": "tbxkq",
        "approval_id": "ask-9", "decision": "approve", "by": "watch"}),
    );
    assert_eq!(v.waiting.len(), 1);
    v.apply_event(
        &json!({"kind": "permission.resolved", "request_id": "tbxkq",
        "approval_id": "ask-1", "decision": "deny", "by": "watch"}),
    );
    assert!(v.waiting.is_empty());
    v.apply_event(&asked);
    v.apply_event(&json!({"kind": "instance.started", "name": "n", "workspace": "/w"}));
    assert!(v.waiting.is_empty());
}

#[test]
fn colours_are_basic_and_no_color_leaves_them_out() {
    for style in [
        Style::Relay,
        Style::System,
        Style::Refusal,
        Style::Prompt,
        Style::Header,
        Style::Local,
        Style::Output,
        Style::Normal,
    ] {
        let with = style_codes(style, true);
        let without = style_codes(style, false);
        assert!(!with.contains("38;5"), "{style:?}: a 256-colour code");
        for code in [with, without] {
            assert!(code.is_empty() || (code.starts_with("\x1b[") && code.ends_with('m')));
        }
        // No colour (30-37) under NO_COLOR; attributes stay.
        assert!(!without.contains("[3"), "{style:?}: {without:?}");
    }
    assert_eq!(style_codes(Style::Refusal, true), "\x1b[31m");
    assert_eq!(style_codes(Style::Header, false), "\x1b[7m");
    assert!(colour_wanted(None));
    assert!(colour_wanted(Some(OsStr::new(""))));
    assert!(!colour_wanted(Some(OsStr::new("1"))));
}

#[test]
fn terminal_types_that_cannot_show_the_view_are_refused() {
    let none = |_: &str| false;
    let all = |_: &str| true;
    for (term, why) in [
        (None, "TERM is not set"),
        (Some(""), "TERM is not set"),
        (Some("dumb"), "TERM=dumb cannot move the cursor"),
        (Some("unknown"), "TERM=unknown cannot move the cursor"),
        (
            Some("hal9000"),
            "TERM=hal9000 is no terminal type baton knows, and terminfo has no entry for it",
        ),
    ] {
        let msg = unusable_term(term, &none).unwrap_or_else(|| panic!("{term:?} accepted"));
        assert!(msg.contains(why), "{msg}");
        assert!(msg.contains("'baton watch' or 'baton log'"), "{msg}");
    }
    assert!(unusable_term(Some("dumb"), &all).is_some());
    assert_eq!(unusable_term(Some("hal9000"), &all), None);
    for t in [
        "xterm",
        "xterm-256color",
        "screen",
        "tmux-256color",
        "linux",
        "vt100",
    ] {
        assert_eq!(unusable_term(Some(t), &none), None, "{t}");
    }
}

// ---------------------------------------------------------------------------
// End to end in a private tmux server.

/// `s` without any blanks: a message wrapped mid-word at the pane's edge
/// still matches.
fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Waits until the pane shows `needle`, however it was wrapped.
fn wait_text(tmux: &Tmux, window: &str, needle: &str) -> String {
    let want = squash(needle);
    tmux.wait(window, &format!("{needle:?}"), |s| {
        squash(s).contains(&want)
    })
}

/// The pane with the lines scrolled off it (tmux's "Pane is dead" line
/// scrolls a full pane).
fn with_history(tmux: &Tmux, window: &str) -> String {
    tmux.run(&[
        "capture-pane",
        "-p",
        "-S",
        "-50",
        "-t",
        &format!("t:{window}"),
    ])
}

/// Waits until the pane of `window` has ended, its script having echoed
/// `rc=<status>`; returns the pane with its history.
fn ends_with_status(tmux: &Tmux, window: &str, status: i32) -> String {
    pane_ends(tmux, window);
    // tmux may mark the pane dead before it has drawn the last of its
    // output: the line is waited for, however late it shows.
    let rc = format!("rc={status}");
    let mut all = String::new();
    let shown = poll(WAIT, PANE_POLL, || {
        all = with_history(tmux, window);
        all.contains(&rc).then_some(())
    });
    assert!(shown.is_some(), "{window}:\n{all}");
    all
}

/// Waits until the pane of `window` has ended.
fn pane_ends(tmux: &Tmux, window: &str) {
    tmux.wait(window, "the pane to end", |_| {
        tmux.run(&[
            "list-panes",
            "-t",
            &format!("t:{window}"),
            "-F",
            "#{pane_dead}",
        ])
        .trim()
            == "1"
    });
}

#[test]
fn the_view_claims_replies_completes_and_warns_before_quitting() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let (ws_a, ws_b) = (env.workspace("alpha"), env.workspace("beta"));
    let beta = env.serve(&ws_b, &["--name", "beta"]);
    let mut tmux = Tmux::start(
        &env,
        "alpha",
        &format!(
            "cd '{}'\n\"$BATON\" --name alpha\necho \"rc=$?\"",
            ws_a.display()
        ),
    );
    let m = manifest(&env, "alpha");
    tmux.pids.push(m["pid"].as_u64().unwrap() as u32);
    tmux.wait_for("alpha", "baton alpha (");

    // A task from beta's instance: claimed, answered, completed.
    let sock = beta.socket.display().to_string();
    let out = env.run_with(
        &[("BATON_SOCKET", &sock)],
        None,
        &["send", "alpha", "what is 6x7?", "--json"],
        None,
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let id1 = serde_json::from_str::<Value>(&out.stdout).unwrap()["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    tmux.line("alpha", "/claim");
    tmux.wait_for(
        "alpha",
        &format!(
            "<< claimed task {id1} from beta ({}), 12 bytes: what is 6x7?",
            ws_b.display()
        ),
    );
    tmux.line("alpha", "/reply forty-two");
    tmux.wait_for("alpha", &format!("* completed {id1} (done)"));
    // The reply is a task in beta's inbox, answering the one claimed.
    let reply = crate::util::wait_for("the reply in beta's inbox", crate::tui::WAIT, || {
        let out = env.run(&["inbox", "claim", "beta", "--json"]);
        let reply: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        (reply["status"] == "claimed").then_some(reply)
    });
    assert_eq!(reply["task"]["body"], "forty-two");
    assert_eq!(reply["task"]["in_reply_to"], id1.as_str());
    assert_eq!(reply["task"]["sender"]["name"], "alpha");

    // A task from a shell has no one to reply to: /complete --failed.
    let out = env.run(&["send", "alpha", "from-a-shell", "--json"]);
    let id2 = serde_json::from_str::<Value>(&out.stdout).unwrap()["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    tmux.line("alpha", "/claim");
    tmux.wait_for("alpha", &format!("<< claimed task {id2} from (cli)"));
    tmux.line("alpha", "/reply hello");
    tmux.wait_for(
        "alpha",
        &format!("! task {id2} came from (cli), which has no instance to reply to: /complete it"),
    );
    tmux.line("alpha", "/complete --failed");
    tmux.wait_for("alpha", &format!("* completed {id2} (failed)"));
    tmux.wait_for("alpha", &format!("* turn {id2} failed"));

    // A task left waiting: the first /quit warns, the second leaves.
    let out = env.run(&["send", "alpha", "left-waiting"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    tmux.wait_for("alpha", "queued 1");
    tmux.line("alpha", "/quit");
    tmux.wait_for(
        "alpha",
        "* 1 task waits (1 queued, 0 claimed); leaving stops this instance; they stay in its spool for its next start; /quit again to leave",
    );
    tmux.line("alpha", "/quit");
    ends_with_status(&tmux, "alpha", 0);
    // The task is still in alpha's spool.
    let out = env.run(&["inbox", "list", "alpha", "--json"]);
    let list: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        list["queued"].as_array().map(Vec::len),
        Some(1),
        "{}",
        out.stdout
    );
}

#[test]
fn bare_baton_offers_to_attach_where_an_instance_serves_the_directory() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("h");
    let mut h = env.serve(&ws, &[]);
    let what = format!(
        "h ({}, pid {}) already serves {}",
        h.id,
        h.pid(),
        ws.display()
    );

    // Without a terminal: an error naming the instance and `baton -a`.
    let out = env.run_with(&[], Some(&ws), &[], None);
    assert_eq!(out.status, 2, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "baton: {what}: 'baton -a' attaches to it; 'baton --name OTHER' starts another instance here"
        )
    );

    // At a terminal: asked before the screen is touched; y attaches.
    let tmux = Tmux::start(
        &env,
        "offer",
        &format!("cd '{}'\n\"$BATON\"\necho \"rc=$?\"", ws.display()),
    );
    wait_text(
        &tmux,
        "offer",
        &format!("baton: {what}. Attach to it? [y/n]"),
    );
    let alt = tmux.run(&["display", "-p", "-t", "t:offer", "#{alternate_on}"]);
    assert_eq!(alt.trim(), "0", "the screen was switched before the answer");
    tmux.line("offer", "y");
    tmux.wait_for("offer", &format!("baton h ({}) coding ready", h.id));
    tmux.line("offer", "/quit");
    ends_with_status(&tmux, "offer", 0);

    // n leaves it alone.
    tmux.window(
        "no",
        &format!("cd '{}'\n\"$BATON\"\necho \"rc=$?\"", ws.display()),
    );
    wait_text(&tmux, "no", "Attach to it? [y/n]");
    tmux.line("no", "n");
    let screen = ends_with_status(&tmux, "no", 0);
    assert!(
        squash(&screen).contains(&squash(
            "baton: not attached; 'baton -a' attaches to it later"
        )),
        "{screen}"
    );

    // `baton -a` and `baton --attach` attach at once.
    for (window, flag) in [("short", "-a"), ("long", "--attach")] {
        tmux.window(
            window,
            &format!("cd '{}'\n\"$BATON\" {flag}\necho \"rc=$?\"", ws.display()),
        );
        tmux.wait_for(window, &format!("baton h ({}) coding ready", h.id));
        tmux.line(window, "/quit");
        ends_with_status(&tmux, window, 0);
    }
    // With the relay off there is nothing to attach through: the local
    // console opens, as before.
    tmux.window(
        "off",
        &format!(
            "cd '{}'\nBATON_RELAY=off \"$BATON\"\necho \"rc=$?\"",
            ws.display()
        ),
    );
    tmux.wait_for("off", "local console");
    tmux.line("off", "/quit");
    ends_with_status(&tmux, "off", 0);
    assert!(h.is_running(), "the views stopped the instance");
    assert_eq!(
        crate::util::manifests(&env.registry).len(),
        1,
        "a second instance started"
    );

    // Where nothing serves the directory, -a says so (exit 3); with other
    // options it is a usage error.
    let other = env.workspace("other");
    let out = env.run_with(&[], Some(&other), &["-a"], None);
    assert_eq!(out.status, 3, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("no instance serves {}", other.display())),
        "{}",
        out.stderr
    );
    let out = env.run_with(&[], Some(&ws), &["-a", "--exec", "true"], None);
    assert_eq!(out.status, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--exec does not go with it"),
        "{}",
        out.stderr
    );
    drop(tmux);
    assert_eq!(h.term(), 0);
}

#[test]
fn a_terminal_that_cannot_move_the_cursor_is_refused_and_no_color_is_kept() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("h");
    let mut h = env.serve(&ws, &["--name", "h"]);
    let other = env.workspace("d");
    let tmux = Tmux::start(
        &env,
        "dumb",
        &format!(
            "cd '{}'\nTERM=dumb \"$BATON\" --name d\necho \"rc=$?\"",
            other.display()
        ),
    );
    let screen = ends_with_status(&tmux, "dumb", 2);
    let text = squash(&screen);
    assert!(
        text.contains(&squash("baton: the view needs a terminal that can move the cursor, and TERM=dumb cannot move the cursor: 'baton watch' or 'baton log' follow an instance line by line")),
        "{screen}"
    );
    assert!(
        !crate::util::manifests(&env.registry)
            .iter()
            .any(|m| std::fs::read_to_string(m).is_ok_and(|t| t.contains("\"name\":\"d\""))),
        "an instance started"
    );
    tmux.window("unset", "unset TERM\n\"$BATON\" attach h\necho \"rc=$?\"");
    let screen = ends_with_status(&tmux, "unset", 2);
    assert!(
        squash(&screen).contains(&squash("and TERM is not set:")),
        "{screen}"
    );

    // The view writes basic colour codes, and none under NO_COLOR.
    for (window, prefix) in [("colour", ""), ("plain", "NO_COLOR=1 ")] {
        tmux.window(window, &format!("{prefix}exec \"$BATON\" attach h"));
        tmux.wait_for(window, "baton h (");
        tmux.line(window, "/nosuch");
        tmux.wait_for(window, "! unknown command /nosuch");
        let raw = tmux.run(&["capture-pane", "-p", "-e", "-t", &format!("t:{window}")]);
        let red = raw.lines().find(|l| l.contains("unknown command")).unwrap();
        assert!(
            !raw.contains("38;5;"),
            "{window}: a 256-colour code:\n{raw:?}"
        );
        if prefix.is_empty() {
            assert!(red.contains("\x1b[31m"), "{window}: no red:\n{red:?}");
        } else {
            assert!(
                !red.contains("\x1b[3"),
                "{window}: colour under NO_COLOR:\n{red:?}"
            );
        }
    }
    drop(tmux);
    assert_eq!(h.term(), 0);
}
