//! `baton serve --codex` (docs/hosts.md) with the real Codex: `codex
//! app-server --listen unix://PATH`, its model a stand-in Responses server
//! on 127.0.0.1 (tests/util/model.rs) that the test holds and releases, so
//! a turn runs for as long as the test needs it to. Every assertion comes
//! with the model's requests, Codex's stderr and the instance's as
//! evidence.
//!
//! A Codex that is not installed skips these tests with a reason, and
//! fails them under BATON_REQUIRE_ALL=1.

use crate::util::codex::{codex_home, listen};
use crate::util::hosts::{Host, host_bin};
use crate::util::model::{ModelServer, Turn};
use crate::util::{Env, wait_for, wait_until};
use crate::util::{Served, finish};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

/// How long a task may take through Codex: its turn, and Codex's start.
const CODEX_TASK: Duration = Duration::from_secs(120);

/// `baton send --wait NAME TEXT` in the background, its output in pipes
/// (small: a reply).
fn send_wait(env: &Env, name: &str, text: &str) -> Child {
    let mut cmd = env.cmd();
    cmd.args(["send", "--wait", "--timeout", "110", name, text])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn baton send --wait")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `baton status NAME --json`, read.
fn status(env: &Env, name: &str) -> Value {
    let out = env.run(&["status", name, "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    serde_json::from_str(&out.stdout).expect("status --json")
}

/// The user input of each request the model got, as JSON text.
fn inputs(model: &ModelServer) -> Vec<String> {
    let asked = model.model_requests();
    asked.iter().map(|r| r.body["input"].to_string()).collect()
}

fn evidence(model: &ModelServer, codex: &Host, served: &Served) -> String {
    format!(
        "codex stderr:\n{}\nbaton serve stderr:\n{}\n{}",
        codex.stderr(),
        served.stderr(),
        model.evidence()
    )
}

/// `baton serve --codex --codex-socket SOCKET --name NAME` in `ws`.
fn serve_codex(env: &Env, ws: &Path, name: &str, socket: &Path) -> Served {
    let socket = socket.to_str().expect("a UTF-8 path");
    env.serve(ws, &["--name", name, "--codex", "--codex-socket", socket])
}

/// A task handed to Codex ends with its turn: `send --wait` exits 0 with
/// the model's answer as the reply. A second task sent while the first
/// turn runs waits in baton's queue (the status shows it), and is handed
/// over after the first turn ended: the model sees the two in order, each
/// once, inside its envelope.
#[test]
fn serve_codex_hands_each_task_to_codex_in_order() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let model = ModelServer::openai(vec![
        Turn::text("The lexer is fine."),
        Turn::text("The parser is fine too."),
    ]);
    let gate = model.hold(0);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let mut served = serve_codex(&env, &ws, "cx", &socket);

    let first = send_wait(&env, "cx", "review the lexer");
    // The first turn runs: the model was asked, and holds its answer.
    wait_until("the first turn's model request", CODEX_TASK, || {
        model.model_requests().len() == 1
    });
    let second = send_wait(&env, "cx", "review the parser");
    let queued = wait_for("the second task queued in baton", CODEX_TASK, || {
        let s = status(&env, "cx");
        (s["queue"]["queued"] == 1).then_some(s)
    });
    let evidence_now = evidence(&model, &host, &served);
    assert!(queued["open_task"].is_string(), "{queued}\n{evidence_now}");
    assert_eq!(queued["codex"]["connected"], true, "{queued}");
    assert!(queued["codex"]["thread"].is_string(), "{queued}");
    assert_eq!(model.model_requests().len(), 1, "{evidence_now}");
    gate.open();

    let first = finish(first, "send --wait of the first task", CODEX_TASK);
    let second = finish(second, "send --wait of the second task", CODEX_TASK);
    let ev = evidence(&model, &host, &served);
    let (out, err) = text(&first);
    assert_eq!(first.status.code(), Some(0), "{out}{err}\n{ev}");
    assert_eq!(out.trim_end(), "The lexer is fine.", "{err}\n{ev}");
    let (out, err) = text(&second);
    assert_eq!(second.status.code(), Some(0), "{out}{err}\n{ev}");
    assert_eq!(out.trim_end(), "The parser is fine too.", "{err}\n{ev}");

    // In order, each once, each inside its envelope.
    let asked = inputs(&model);
    assert_eq!(asked.len(), 2, "{ev}");
    assert!(asked[0].contains("review the lexer"), "{ev}");
    assert!(asked[0].contains("agent_relay"), "{ev}");
    assert!(!asked[0].contains("review the parser"), "{ev}");
    assert_eq!(asked[1].matches("review the parser").count(), 1, "{ev}");
    assert_eq!(asked[1].matches("review the lexer").count(), 1, "{ev}");
    served.term();
    drop(host);
}

/// The app-server goes away while a task's turn runs: that task may have
/// run in part, so it is set aside as interrupted, never handed over
/// again on its own; a task sent meanwhile stays queued, the status says
/// why; once the app-server is back, the queued task is handed to it and
/// answered. The model saw the first task once.
#[test]
fn serve_codex_keeps_tasks_while_the_app_server_is_gone() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let model = ModelServer::openai(vec![
        Turn::text("never heard: the app-server is gone"),
        Turn::text("The parser is fine."),
    ]);
    let gate = model.hold(0);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let mut served = serve_codex(&env, &ws, "cx", &socket);

    let out = env.run(&["send", "cx", "review the lexer", "--message-id", "lexer-1"]);
    assert_eq!(out.status, 0, "{out:?}");
    wait_until("the first turn's model request", CODEX_TASK, || {
        model.model_requests().len() == 1
    });
    let gone = evidence(&model, &host, &served);
    // Ends Codex's process group: SIGTERM, then SIGKILL.
    drop(host);

    let s = wait_for("the task set aside as interrupted", CODEX_TASK, || {
        let s = status(&env, "cx");
        (s["queue"]["interrupted"] == 1).then_some(s)
    });
    assert_eq!(s["codex"]["connected"], false, "{s}\n{gone}");
    assert!(s["codex"]["reason"].is_string(), "{s}");
    let text = env.run(&["status", "cx"]);
    assert!(
        text.stdout.contains("cannot be reached") && text.stdout.contains("tasks stay queued"),
        "{text:?}"
    );
    let out = env.run(&[
        "send",
        "cx",
        "review the parser",
        "--message-id",
        "parser-1",
    ]);
    assert_eq!(out.status, 0, "{out:?}");
    let s = status(&env, "cx");
    assert_eq!(s["queue"]["queued"], 1, "{s}");

    gate.open();
    let host = listen(&env, &codex, &home, &ws, &socket, 2);
    let done = env.run(&[
        "send",
        "--wait",
        "--timeout",
        "15",
        "cx",
        "review the parser",
        "--message-id",
        "parser-1",
    ]);
    let ev = evidence(&model, &host, &served);
    assert_eq!(done.status, 0, "{done:?}\n{ev}");
    assert_eq!(
        done.stdout.trim_end(),
        "The parser is fine.",
        "{done:?}\n{ev}"
    );

    // The interrupted task was not handed over again; the operator may.
    let list = env.run(&["inbox", "list", "cx", "--json"]);
    assert!(list.stdout.contains("lexer-1"), "{list:?}");
    let asked = inputs(&model);
    assert_eq!(asked.len(), 2, "{ev}");
    let lexer = asked
        .iter()
        .filter(|i| i.contains("review the lexer"))
        .count();
    assert_eq!(lexer, 1, "{ev}");
    let log = env.run(&["log", "cx"]);
    assert!(log.stdout.contains("interrupted"), "{log:?}");
    served.term();
    drop(host);
}

/// A turn Codex fails (the model refused the request) fails the task
/// with Codex's error, and `send --wait` says it is Codex's error, not a
/// handler's stderr; `--json` names the host (`"host": "codex"`), with the
/// error in `stderr_tail` as before.
#[test]
fn serve_codex_a_failed_turn_says_codex_error() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let model = ModelServer::openai(vec![
        Turn::fail("the stand-in refuses this one"),
        Turn::fail("the stand-in refuses this one"),
    ]);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let mut served = serve_codex(&env, &ws, "cx", &socket);

    let args = [
        "send",
        "--wait",
        "--timeout",
        "110",
        "cx",
        "review the lexer",
    ];
    let out = env.run(&args);
    let ev = evidence(&model, &host, &served);
    assert_eq!(out.status, 1, "{out:?}\n{ev}");
    assert_eq!(out.stdout, "", "{ev}");
    assert!(
        out.stderr.contains(" ended failed at cx\n"),
        "{out:?}\n{ev}"
    );
    assert!(
        out.stderr.contains("baton: Codex's error:\n"),
        "{out:?}\n{ev}"
    );
    assert!(
        out.stderr.contains("the stand-in refuses this one"),
        "{out:?}\n{ev}"
    );
    assert!(!out.stderr.contains("stderr"), "{out:?}\n{ev}");

    let mut args = args.to_vec();
    args.insert(2, "--json");
    let out = env.run(&args);
    let ev = evidence(&model, &host, &served);
    assert_eq!(out.status, 1, "{out:?}\n{ev}");
    let v: Value = serde_json::from_str(&out.stdout).expect("send --json");
    assert_eq!(v["outcome"], "failed", "{v}\n{ev}");
    assert_eq!(v["host"], "codex", "{v}\n{ev}");
    assert_eq!(v["exit_status"], Value::Null, "{v}");
    let tail = v["stderr_tail"].as_str().unwrap_or_default();
    assert!(tail.contains("the stand-in refuses this one"), "{v}\n{ev}");
    served.term();
    drop(host);
}

const ANSWER: &str = "Seen from the TUI: the lexer is fine.";

/// Once with Codex's terminal UI attached to the same app-server (`codex
/// --remote unix://PATH` in tmux): the task goes to the UI's thread, the
/// workspace's, and shows in the UI with the model's answer.
#[test]
fn serve_codex_task_shows_in_an_attached_codex_tui() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    if !crate::util::have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("cx");
    let model = ModelServer::openai(vec![Turn::text(ANSWER)]);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let command = format!(
        "cd '{}' && CODEX_HOME='{}' '{}' --remote 'unix://{}'; sleep 600",
        ws.display(),
        home.display(),
        codex.display(),
        socket.display()
    );
    let mut tui = crate::tmux::Tmux::new(&env);
    tui.start_program(&command);
    let screen_of = |tui: &crate::tmux::Tmux| {
        tui.run(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t:0.0"])
    };
    let mut screen = String::new();
    let ready = crate::util::poll(CODEX_TASK, Duration::from_millis(200), || {
        screen = screen_of(&tui);
        (screen.contains("›") || screen.contains("Ask Codex")).then_some(())
    });
    assert!(
        ready.is_some(),
        "the TUI did not start:\n{screen}\n{}",
        host.stderr()
    );
    // The UI starts its thread once it is up: baton is to find that one.
    let mut app = baton::workers::codex::AppServer::connect(&socket, CODEX_TASK).unwrap();
    let ui_thread = wait_for("the TUI's thread", CODEX_TASK, || {
        app.workspace_thread(&ws).unwrap().map(|t| t.id)
    });
    let mut served = serve_codex(&env, &ws, "cx", &socket);
    let out = env.run(&[
        "send",
        "--wait",
        "--timeout",
        "15",
        "cx",
        "review the lexer",
    ]);
    let ev = evidence(&model, &host, &served);
    let screen = screen_of(&tui);
    assert_eq!(out.status, 0, "{out:?}\n{screen}\n{ev}");
    assert_eq!(out.stdout.trim_end(), ANSWER, "{out:?}\n{ev}");
    // It went to the UI's thread, and shows there: the envelope as the
    // user's input, and the answer.
    let s = status(&env, "cx");
    assert_eq!(s["codex"]["thread"], ui_thread.as_str(), "{s}");
    let shown = wait_for("the task and its answer in the TUI", CODEX_TASK, || {
        let screen = screen_of(&tui);
        (screen.contains("review the lexer") && screen.contains(ANSWER)).then_some(screen)
    });
    assert!(shown.contains("<agent_relay"), "{shown}");
    let input = inputs(&model);
    assert_eq!(input[0].matches("review the lexer").count(), 1, "{ev}");
    app.close().unwrap();
    served.term();
    drop(tui);
    drop(host);
}

/// `--codex` goes one way only, and `--codex-socket` needs it: each a
/// usage error naming the options, and no instance starts.
#[test]
fn serve_codex_options_are_checked() {
    let env = Env::new();
    let ws = env.workspace("cx");
    let ws = ws.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--codex-socket", "/tmp/x.sock"],
            "--codex-socket names Codex's app-server, so it needs --codex",
        ),
        (&["--codex", "--exec", "true"], "use one of them"),
        (&["--codex", "--tmux-pane", "%1"], "use one of them"),
        (
            &["--codex", "--codex-socket", " "],
            "--codex-socket is empty",
        ),
    ];
    for (args, said) in cases {
        let mut all = vec!["serve", "--workspace", ws];
        all.extend_from_slice(args);
        let out = env.run(&all);
        assert_eq!(out.status, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(said), "{args:?}: {out:?}");
    }
    // Without CODEX_HOME, the daemon socket under HOME's .codex is asked
    // for, and its absence is said, not a verdict: the instance serves.
    let mut served = env.serve(
        std::path::Path::new(ws),
        &["--name", "cx", "--codex", "--turn-timeout", "5"],
    );
    let s = wait_for(
        "the app-server said unreachable",
        Duration::from_secs(30),
        || {
            let s = status(&env, "cx");
            (s["codex"]["connected"] == false && s["codex"]["reason"].is_string()).then_some(s)
        },
    );
    let want = env
        .root
        .join("home/.codex/app-server-control/app-server-control.sock");
    assert_eq!(s["codex"]["socket"], want.to_str().unwrap(), "{s}");
    served.term();
}

/// A steer task from the sender of the task Codex is working on joins
/// that task's running turn (`turn/steer`): the model's next request in
/// the same turn holds it, both tasks end with the turn, and the sender
/// gets the turn's answer once, as the first task's reply.
#[test]
fn serve_codex_steer_task_joins_the_running_turn() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let alpha_ws = env.workspace("alpha");
    let model = ModelServer::openai(vec![
        Turn::text("Looking at the lexer."),
        Turn::text("Lexer and parser are fine."),
    ]);
    let gate = model.hold(0);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let mut served = serve_codex(&env, &ws, "cx", &socket);
    let mut alpha = env.serve(&alpha_ws, &["--name", "alpha"]);

    let send = |args: &[&str]| {
        let out = env.run(args);
        assert_eq!(out.status, 0, "{out:?}");
    };
    send(&[
        "send",
        "--from",
        "alpha",
        "--message-id",
        "t1",
        "cx",
        "review the lexer",
    ]);
    wait_until("the first turn's model request", CODEX_TASK, || {
        model.model_requests().len() == 1
    });
    send(&[
        "send",
        "--from",
        "alpha",
        "--mode",
        "steer",
        "--message-id",
        "t2",
        "cx",
        "and the parser",
    ]);
    wait_until("the steer task open beside the first", CODEX_TASK, || {
        status(&env, "cx")["queue"]["processing"] == 2
    });
    // Claimed is not yet joined: the model may answer only once Codex
    // took the steer into the running turn (the notice naming its turn),
    // or the turn could end first and the steer task run a turn of its own.
    wait_until("the steer task joined the running turn", CODEX_TASK, || {
        let out = env.run(&["log", "cx", "--json"]);
        out.stdout.lines().any(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|e| e["message_id"] == "t2" && e["codex_turn"].is_string())
        })
    });
    gate.open();

    let ev = || evidence(&model, &host, &served);
    let list = wait_for("both tasks finished", CODEX_TASK, || {
        let out = env.run(&["inbox", "list", "cx", "--all", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        let done = v["finished"]
            .as_array()?
            .iter()
            .filter(|r| r["outcome"] == "done")
            .count();
        (done == 2).then_some(v)
    });
    let asked = inputs(&model);
    assert_eq!(asked.len(), 2, "{list}\n{}", ev());
    assert!(!asked[0].contains("and the parser"), "{}", ev());
    assert_eq!(asked[1].matches("and the parser").count(), 1, "{}", ev());
    // One reply, to the first task, in alpha's inbox.
    let replies = wait_for("the reply at alpha", CODEX_TASK, || {
        let out = env.run(&["inbox", "list", "alpha", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        let q = v["queued"].as_array()?.clone();
        (!q.is_empty()).then_some(q)
    });
    assert_eq!(replies.len(), 1, "{replies:?}\n{}", ev());
    let out = env.run(&["inbox", "claim", "alpha", "--json"]);
    let claimed: Value = serde_json::from_str(&out.stdout).expect("claim --json");
    assert_eq!(claimed["task"]["in_reply_to"], "t1", "{claimed}");
    assert_eq!(
        claimed["task"]["body"], "Lexer and parser are fine.",
        "{claimed}"
    );
    alpha.term();
    served.term();
    drop(host);
}

/// `--turn-timeout` interrupts Codex's turn (`turn/interrupt`): the task
/// ends `timeout`, Codex records the turn as interrupted, and the next
/// task runs on the same thread.
#[test]
fn serve_codex_turn_timeout_interrupts_the_turn() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let model = ModelServer::openai(vec![
        Turn::text("never heard: the turn is interrupted"),
        Turn::text("The parser is fine."),
    ]);
    let gate = model.hold(0);
    let home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let sock = socket.to_str().unwrap();
    let mut served = env.serve(
        &ws,
        &[
            "--name",
            "cx",
            "--codex",
            "--codex-socket",
            sock,
            "--turn-timeout",
            "3",
        ],
    );
    let out = env.run(&["send", "--wait", "--json", "cx", "review the lexer"]);
    let ev = || evidence(&model, &host, &served);
    assert_eq!(out.status, 1, "{out:?}\n{}", ev());
    let v: Value = serde_json::from_str(&out.stdout).expect("send --json");
    assert_eq!(v["outcome"], "timeout", "{v}\n{}", ev());
    let thread = status(&env, "cx")["codex"]["thread"]
        .as_str()
        .unwrap()
        .to_string();
    gate.open();

    let done = env.run(&["send", "--wait", "cx", "review the parser"]);
    assert_eq!(done.status, 0, "{done:?}\n{}", ev());
    assert_eq!(done.stdout.trim_end(), "The parser is fine.", "{}", ev());
    let mut app = baton::workers::codex::AppServer::connect(&socket, CODEX_TASK).unwrap();
    let turns = app.recent_turns(&thread, 8).unwrap();
    let statuses: Vec<_> = turns.iter().rev().map(|t| t.status).collect();
    use baton::workers::codex::TurnStatus::{Completed, Interrupted};
    assert_eq!(statuses, [Interrupted, Completed], "{turns:?}");
    app.close().unwrap();
    served.term();
    drop(host);
}

/// The app-server's processes are the agent's (as a pane's are): a
/// command Codex runs in a task's turn may not use the operator's doors.
/// Here the model has Codex run `baton watch --approve` (a controller,
/// which answers approvals: the operator's); baton refuses it, naming
/// the operator.
#[test]
fn serve_codex_commands_codex_runs_are_the_agents_not_the_operators() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("cx");
    let baton = crate::util::baton_bin();
    let command = format!(
        "timeout 10 '{}' watch cx --approve </dev/null; echo exit=$?",
        baton.display()
    );
    let model = ModelServer::openai(vec![
        Turn::tool("exec_command", serde_json::json!({"cmd": command})),
        Turn::text("Tried to be the controller."),
    ]);
    let home = codex_home(&env, &model);
    // Commands run unsandboxed and unasked, so that only baton can say no.
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap();
    let config =
        format!("approval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\n{config}");
    std::fs::write(home.join("config.toml"), config).unwrap();
    let socket = env.root.join("cx.sock");
    let host = listen(&env, &codex, &home, &ws, &socket, 1);
    let mut served = serve_codex(&env, &ws, "cx", &socket);
    let out = env.run(&["send", "--wait", "cx", "be the controller"]);
    let ev = || evidence(&model, &host, &served);
    assert_eq!(out.status, 0, "{out:?}\n{}", ev());
    let asked = model.model_requests();
    assert_eq!(asked.len(), 2, "{}", ev());
    let said = asked[1].body["input"].to_string();
    assert!(said.contains("not permitted"), "{said}\n{}", ev());
    assert!(said.contains("operator"), "{said}\n{}", ev());
    assert!(
        said.contains("exit=3") || said.contains("exit=2") || said.contains("exit=1"),
        "{said}"
    );
    served.term();
    drop(host);
}
