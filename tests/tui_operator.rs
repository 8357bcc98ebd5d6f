//! The view's operator commands (issue 46, point 9): `/cancel MESSAGE_ID`
//! withdraws a queued task, or stops its turn, as `baton cancel` does
//! (`task/cancel`), and `/approve APPROVAL_ID` and `/deny APPROVAL_ID`
//! answer as `baton approve` and `baton deny` do (`approval/respond`),
//! each said in the same words; the view lists the approvals that wait,
//! escaped, as they come and go. The list's layout is read through the
//! in-memory terminal; the commands end to end in a private tmux server
//! (`tui::Tmux`), each process stopped by pid.

use crate::tui::{Tmux, flat};
use crate::util::{self, Env, event_is, have};
use baton::tui::term::{Memory, Terminal};
use baton::tui::view::View;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A handler that blocks until it is stopped.
const BLOCKS: &str = "cat >/dev/null; exec sleep 600";

/// A handler that records which task ran, in order, in `ran.txt`.
const RECORD: &str = "echo \"$BATON_MESSAGE_ID\" >> ran.txt";

fn screen(view: &View, cols: u16, rows: u16) -> Vec<String> {
    let mut term = Memory::new(cols, rows);
    term.draw(&view.render(cols, rows)).unwrap();
    term.screen()
}

fn asked(id: &str, approval: &str, from: &str, excerpt: &str) -> Value {
    json!({"kind": "approval.requested", "message_id": id, "from": from,
           "approval_id": approval, "digest": format!("d-{approval}"), "excerpt": excerpt})
}

#[test]
fn the_waiting_approvals_are_listed_above_the_status_line_escaped() {
    let mut view = View::default();
    view.apply_event(&asked("m-1", "ask-1", "beta", "first one"));
    view.apply_event(&asked(
        "m-2",
        "ask-2",
        "ev\u{202e}il",
        "rm \x1b[2J \u{e0041}x\nsecond line",
    ));
    view.apply_event(&json!({"kind": "permission.requested", "request_id": "tq1",
        "tool_name": "Bash", "host": "claude-code", "host_pid": 77,
        "description": "List files", "input_preview": "ls", "approval_id": "ask-3",
        "digest": "d-3"}));
    let s = screen(&view, 80, 24);
    assert_eq!(
        s[18..23],
        [
            "waiting for approval (3): /approve ID, /deny ID, /body ID",
            "  ask-1  from beta: first one",
            "  ask-2  from ev\\u{202e}il: rm \\e[2J \\u{e0041}x …",
            "  ask-3  tool Bash asked by claude-code (pid 77): List files …",
            "approve task m-1 from beta? [y/n]",
        ],
        "{s:#?}"
    );
    // The transcript keeps its place above the list.
    assert!(
        s[1].starts_with("* task m-1 from beta waits for approval"),
        "{s:#?}"
    );

    // Answered elsewhere, or denied: it leaves the list.
    view.apply_event(&json!({"kind": "approval.resolved", "message_id": "m-1",
        "approval_id": "ask-1", "decision": "approve", "by": "baton approve"}));
    view.apply_event(&json!({"kind": "task.denied", "message_id": "m-2"}));
    let s = screen(&view, 80, 24);
    assert_eq!(
        s[20..23],
        [
            "waiting for approval (1): /approve ID, /deny ID, /body ID",
            "  ask-3  tool Bash asked by claude-code (pid 77): List files …",
            "allow tool call tq1 (Bash) asked by claude-code (pid 77)? [y/n]",
        ],
        "{s:#?}"
    );

    // More than fit: the rest are counted; a small screen keeps half its
    // transcript rows.
    for i in 4..=9 {
        view.apply_event(&asked(&format!("m-{i}"), &format!("ask-{i}"), "gamma", "x"));
    }
    let s = screen(&view, 80, 24);
    assert_eq!(
        s[16..22],
        [
            "waiting for approval (7): /approve ID, /deny ID, /body ID",
            "  ask-3  tool Bash asked by claude-code (pid 77): List files …",
            "  ask-4  from gamma: x",
            "  ask-5  from gamma: x",
            "  ask-6  from gamma: x",
            "  and 3 more",
        ],
        "{s:#?}"
    );
    let s = screen(&view, 40, 10);
    assert_eq!(s.len(), 10);
    assert_eq!(
        s[5..8],
        [
            "waiting for approval (7): /approve ID, /",
            "  ask-3  tool Bash asked by claude-code ",
            "  and 6 more",
        ],
        "{s:#?}"
    );
    assert_eq!(s[9], "> ");
    view.waiting.clear();
    let s = screen(&view, 80, 24);
    assert!(
        !s.iter().any(|l| l.contains("waiting for approval (")),
        "{s:#?}"
    );
}

#[track_caller]
fn wait_event(spool: &Path, kind: &str, id: &str) -> Value {
    util::wait_event(spool, &format!("{kind} for {id}"), WAIT, |e| {
        event_is(e, kind, id)
    })
}

fn wait_receipt(spool: &Path, id: &str) -> Value {
    util::wait_for(&format!("the receipt of {id}"), WAIT, || {
        util::receipt(spool, id)
    })
}

/// `/cancel` withdraws a queued task (its waiting sender hears
/// `cancelled`, the inbox no longer holds it) and stops a running turn;
/// a task that ended, or no id, is said as `baton cancel` says it.
/// (Before: `unknown command /cancel`.)
#[test]
fn the_views_cancel_withdraws_a_queued_task_and_stops_a_running_one() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("beta");
    let mut beta = env.serve(&ws, &["--name", "beta", "--exec", BLOCKS]);
    let spool = beta.spool();
    let out = env.run(&["send", "--message-id", "m-1", "beta", "runs"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    wait_event(&spool, "turn.started", "m-1");
    let mut waiting = env.spawn(
        &["send", "--wait", "--message-id", "m-2", "beta", "waits"],
        &ws,
    );
    wait_event(&spool, "message.accepted", "m-2");

    let tmux = Tmux::start(
        &env,
        "view",
        &format!("cd '{}'\nexec \"$BATON\" attach beta", ws.display()),
    );
    tmux.wait_for("view", &format!("baton beta ({}) coding busy", beta.id));
    tmux.line("view", "/help");
    tmux.wait_for(
        "view",
        "/cancel MESSAGE_ID withdraw a queued task, or stop its running turn",
    );
    tmux.line("view", "/cancel");
    tmux.wait_for("view", "! usage: /cancel MESSAGE_ID");

    tmux.line("view", "/cancel m-2");
    tmux.wait_for("view", "* cancelled m-2 at beta (withdrawn from the queue)");
    assert_eq!(waiting.wait_exit(WAIT), Some(1), "{}", waiting.stderr());
    assert!(
        (waiting.stderr()).ends_with("baton: message m-2 ended cancelled at beta\n"),
        "{}",
        waiting.stderr()
    );
    assert_eq!(wait_receipt(&spool, "m-2")["outcome"], "cancelled");
    let list = env.run(&["inbox", "list", "beta"]);
    assert!(!list.stdout.contains("m-2"), "{}", list.stdout);
    let list = env.run(&["inbox", "list", "--all", "beta"]);
    assert!(
        (list.stdout.lines()).any(|l| l.starts_with("cancelled") && l.contains("m-2")),
        "{}",
        list.stdout
    );

    tmux.line("view", "/cancel m-2");
    tmux.wait_for(
        "view",
        "! cannot cancel m-2 at beta: ended: task m-2 already ended cancelled: there is nothing to cancel",
    );
    tmux.line("view", "/cancel m-1");
    tmux.wait_for(
        "view",
        "* cancelled m-1 at beta (its turn is stopped: SIGTERM to its handler's process group)",
    );
    assert_eq!(wait_receipt(&spool, "m-1")["outcome"], "cancelled");
    // What the view does not know stays a refusal.
    tmux.line("view", "/nosuch");
    tmux.wait_for("view", "! unknown command /nosuch: /help lists them");

    tmux.line("view", "/quit");
    tmux.wait("view", "the view to end", |_| {
        tmux.run(&["list-panes", "-t", "t:view", "-F", "#{pane_dead}"])
            .trim()
            == "1"
    });
    drop(tmux);
    assert_eq!(beta.term(), 0);
}

/// Whether the view's list of waiting approvals is on the screen.
fn listed(screen: &str) -> bool {
    screen.contains("waiting for approval (")
}

/// `/approve APPROVAL_ID` runs the task once, `/deny APPROVAL_ID` ends it
/// denied; each is listed while it waits (escaped) and leaves the list
/// when answered, or when its task is cancelled; an id answered already
/// is said as `baton approve` says it. (Before: no list, nothing said of
/// an approval answered, and no `/cancel`.)
#[test]
fn the_views_approve_and_deny_answer_by_approval_id_and_the_list_follows() {
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("h");
    let mut h = env.serve(&ws, &["--name", "h", "--exec", RECORD, "--approve", "ask"]);
    let spool = h.spool();
    let tmux = Tmux::start(
        &env,
        "view",
        &format!("cd '{}'\nexec \"$BATON\" attach h", ws.display()),
    );
    tmux.wait_for("view", &format!("baton h ({}) coding ready", h.id));
    let ran = || fs::read_to_string(ws.join("ran.txt")).unwrap_or_default();

    let out = env.run(&["send", "--message-id", "a-1", "h", "first one"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let ask1 = util::approval_of(&spool, "a-1")["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    tmux.wait_for(
        "view",
        &format!(
            "waiting for approval (1): /approve ID, /deny ID, /body ID {ask1} from (cli): first one"
        ),
    );
    assert_eq!(ran(), "", "ran before approval");

    tmux.line("view", &format!("/approve {ask1}"));
    tmux.wait_for("view", &format!("* approved {ask1} (task a-1) at h"));
    assert_eq!(wait_receipt(&spool, "a-1")["outcome"], "done");
    tmux.wait("view", "the list to empty", |s| !listed(s));
    tmux.line("view", &format!("/approve {ask1}"));
    tmux.wait_for(
        "view",
        &format!(
            "! cannot approve {ask1} at h: no approval {ask1} is waiting (decided already, or asked again under a new id)"
        ),
    );

    let out = env.run(&[
        "send",
        "--message-id",
        "a-2",
        "h",
        "second \x1b[31m one\nline 2",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let ask2 = util::approval_of(&spool, "a-2")["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(ask1, ask2);
    let screen = tmux.wait_for("view", &format!("{ask2} from (cli): second \\e[31m one …"));
    assert!(!screen.contains('\x1b'), "{screen:?}");
    assert!(!flat(&screen).contains(&format!("{ask1} from")), "{screen}");

    tmux.line("view", &format!("/deny {ask2}"));
    tmux.wait_for("view", &format!("* denied {ask2} (task a-2) at h"));
    assert_eq!(wait_receipt(&spool, "a-2")["outcome"], "denied");
    tmux.wait("view", "the list to empty", |s| !listed(s));
    // The approved task ran once; the denied one never did.
    assert_eq!(ran(), "a-1\n");
    let started = (util::transcript(&spool).iter())
        .filter(|e| event_is(e, "turn.started", "a-1"))
        .count();
    assert_eq!(started, 1);

    // A task cancelled while it waits leaves the list too.
    let out = env.run(&["send", "--message-id", "a-3", "h", "third"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let ask3 = util::approval_of(&spool, "a-3")["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    tmux.wait_for("view", &format!("{ask3} from (cli): third"));
    tmux.line("view", "/cancel a-3");
    tmux.wait_for("view", "* cancelled a-3 at h (withdrawn from the queue)");
    tmux.wait("view", "the list to empty", |s| !listed(s));
    assert_eq!(ran(), "a-1\n");

    tmux.line("view", "/quit");
    tmux.wait("view", "the view to end", |_| {
        tmux.run(&["list-panes", "-t", "t:view", "-F", "#{pane_dead}"])
            .trim()
            == "1"
    });
    drop(tmux);
    assert_eq!(h.term(), 0);
}
