//! The real agent hosts (docs/hosts.md): Claude Code and Codex, the
//! pinned native binaries `.ci/run` installs (tests/util/hosts.rs), run
//! offline against a stand-in model server on 127.0.0.1 that each test
//! scripts (tests/util/model.rs). Every assertion about what a host did
//! comes with the requests it sent the model as evidence.
//!
//! A host that is not installed skips its test with a reason, and fails it
//! under BATON_REQUIRE_ALL=1.

use crate::util::codex::codex_home;
use crate::util::hosts::{Host, host_bin};
use crate::util::model::{EXHAUSTED, ModelServer, Turn};
use crate::util::{Env, PANE_POLL, baton_bin, have, poll, wait_for};
use baton::workers::codex::{AppServer as CodexClient, TurnStatus};
use serde_json::{Value, json};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a host may take to start and answer its first request.
const HOST_START: Duration = Duration::from_secs(60);
/// How long a whole `claude -p` run with a few model turns may take.
const CLAUDE_RUN: Duration = Duration::from_secs(150);
/// How long one turn of Codex may take.
const CODEX_TURN: Duration = Duration::from_secs(90);
/// Any API key: the stand-in does not check it; Claude Code wants its
/// last 20 characters approved in `.claude.json`.
const API_KEY: &str = "sk-ant-standin-0123456789abcdefghijklmnopqrstuv";

/// `HOME/.claude.json` that skips every first-run dialog for `workspace`:
/// onboarding done, the workspace trusted, the API key approved.
fn claude_home(home: &Path, workspace: &Path) {
    let key_tail = &API_KEY[API_KEY.len() - 20..];
    let mut projects = serde_json::Map::new();
    projects.insert(
        workspace.display().to_string(),
        json!({"hasTrustDialogAccepted": true}),
    );
    let config = json!({
        "hasCompletedOnboarding": true,
        "projects": projects,
        "customApiKeyResponses": {"approved": [key_tail], "rejected": []},
    });
    fs::write(home.join(".claude.json"), config.to_string()).unwrap();
}

/// What Claude Code needs besides the world's environment (`Env::cmd_for`)
/// to talk to `model` quietly, once its private HOME is set up for `ws`
/// (`claude_home`).
fn claude_vars(env: &Env, ws: &Path, model: &ModelServer) -> Vec<(&'static str, String)> {
    claude_home(&env.root.join("home"), ws);
    vec![
        ("ANTHROPIC_BASE_URL", model.url()),
        ("ANTHROPIC_API_KEY", API_KEY.to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
    ]
}

/// `claude` in `ws`, its private HOME set up (`claude_home`), talking to
/// `model` quietly; the caller adds the prompt and the options.
fn claude_cmd(env: &Env, claude: &Path, ws: &Path, model: &ModelServer) -> std::process::Command {
    let mut cmd = env.cmd_for(claude);
    cmd.current_dir(ws).envs(claude_vars(env, ws, model));
    cmd
}

/// Starts `cmd` (a `claude -p`), its output in files under the root.
fn start_claude(env: &Env, cmd: std::process::Command) -> Host {
    Host::spawn(
        cmd,
        &env.root.join("claude.out"),
        &env.root.join("claude.err"),
        false,
    )
}

/// Runs `cmd` (a `claude -p`) to its end: the host, and how it exited.
fn run_claude(env: &Env, cmd: std::process::Command) -> (Host, Option<i32>) {
    let mut host = start_claude(env, cmd);
    let status = host.wait_exit(CLAUDE_RUN);
    (host, status)
}

/// What a failed assertion shows: how claude ended, what it printed, and
/// the model's requests.
fn claude_evidence(host: &Host, status: Option<i32>, model: &ModelServer) -> String {
    format!(
        "claude exit {status:?}\nstdout:\n{}\nstderr:\n{}\n{}",
        host.stdout(),
        host.stderr(),
        model.evidence()
    )
}

/// The text of every `tool_result` block in a Messages API request.
fn tool_results(body: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for block in m["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                found.push(block["content"].to_string());
            }
        }
    }
    found
}

/// A `--mcp-config` file that runs `baton mcp --name NAME`, as a user
/// writes it (docs/hosts.md): no `env`, the server inherits Claude Code's
/// environment, BATON_DIR and XDG_STATE_HOME included.
fn mcp_config(env: &Env, name: &str) -> PathBuf {
    let path = env.root.join("mcp.json");
    let server = json!({"mcpServers": {"baton": {
        "command": baton_bin(),
        "args": ["mcp", "--name", name],
    }}});
    fs::write(&path, server.to_string()).unwrap();
    path
}

/// (a), sending: Claude Code with `baton mcp` configured by
/// `--mcp-config` calls `send_agent_message`, and the task reaches another
/// instance from Claude's own instance. baton's tools are deferred in
/// Claude Code 2.1.328: the first request names them only in its text,
/// the model loads one with `ToolSearch` (`select:NAME`), and the next
/// request offers it.
#[test]
fn claude_code_sends_a_task_through_baton_mcp() {
    let Some(claude) = host_bin("claude") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("claude-ws");
    let other_ws = env.workspace("other");
    let mut other = env.serve(&other_ws, &[]);
    let body = "please review the parser";
    let model = ModelServer::anthropic(vec![
        Turn::tool(
            "ToolSearch",
            json!({"query": "select:send_agent_message", "max_results": 1}),
        ),
        Turn::tool(
            "mcp__baton__send_agent_message",
            json!({"target_instance_id": "other", "message": body}),
        ),
        Turn::text("Sent the review to other."),
    ]);

    let mcp_config = mcp_config(&env, "claude");
    let mut cmd = claude_cmd(&env, &claude, &ws, &model);
    cmd.args([
        "-p",
        "Hand the review of the parser to the agent named other.",
    ])
    .arg("--mcp-config")
    .arg(&mcp_config)
    // -p asks no one: a tool not allowed is refused ("Claude requested
    // permissions to use ..., but you haven't granted it yet").
    .args(["--allowedTools", "mcp__baton__send_agent_message"]);
    let (host, status) = run_claude(&env, cmd);
    let evidence = || claude_evidence(&host, status, &model);
    assert_eq!(status, Some(0), "{}", evidence());
    assert!(
        host.stdout().contains("Sent the review to other."),
        "{}",
        evidence()
    );

    // Three turns of the script, and with nonessential traffic off,
    // nothing else: no count_tokens, no other endpoint.
    let asked = model.model_requests();
    assert_eq!(asked.len(), 3, "{}", evidence());
    assert_eq!(model.requests().len(), 3, "{}", evidence());
    assert_eq!(model.left(), 0, "{}", evidence());
    let tool = "mcp__baton__send_agent_message";
    // 1: the tool is deferred, listed by name in the request's text.
    assert!(!asked[0].tool_names().iter().any(|t| t == tool));
    assert!(asked[0].tool_names().iter().any(|t| t == "ToolSearch"));
    let first = asked[0].body.to_string();
    for name in [
        "list_agents",
        "send_agent_message",
        "task_status",
        "check_inbox",
        "complete_task",
    ] {
        assert!(
            first.contains(&format!("mcp__baton__{name}")),
            "{name} not among the deferred tools:\n{}",
            evidence()
        );
    }
    // 2: ToolSearch loaded it; it is offered with baton's schema.
    assert!(
        asked[1].tool_names().iter().any(|t| t == tool),
        "{}",
        evidence()
    );
    let schema = asked[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap()["input_schema"]
        .clone();
    assert!(
        schema["properties"]["target_instance_id"].is_object(),
        "{schema}"
    );
    // 3: the tool's answer came back to the model: accepted, with an id.
    let results = tool_results(&asked[2].body);
    let answer = results.last().cloned().unwrap_or_default();
    assert!(answer.contains("accepted"), "{}", evidence());

    // The task is at `other`, sent by Claude's instance.
    let list = env.run(&["inbox", "list", "--json", "other"]);
    assert_eq!(list.status, 0, "{}", list.stderr);
    let list: Value = serde_json::from_str(&list.stdout).unwrap();
    let queued = list["queued"].as_array().unwrap();
    assert_eq!(queued.len(), 1, "{list}\n{}", evidence());
    let task = &queued[0];
    assert_eq!(task["sender"]["name"], "claude", "{task}");
    assert_eq!(
        task["sender"]["workspace"],
        ws.display().to_string(),
        "{task}"
    );
    let id = task["message_id"].as_str().unwrap();
    assert!(
        answer.contains(id),
        "the model was told another id: {answer}"
    );
    let claimed = env.run(&["inbox", "claim", "other"]);
    assert_eq!(claimed.status, 0, "{}", claimed.stderr);
    assert!(claimed.stdout.contains(body), "{}", claimed.stdout);
    assert!(
        claimed.stdout.contains("from=\"claude\""),
        "{}",
        claimed.stdout
    );
    other.term();
}

/// (a), receiving: a task sent to Claude's instance while Claude Code is
/// not running waits in the instance's spool (offline delivery: the
/// instance, `baton mcp --name claude` in the workspace, has run there
/// before). Claude Code starts with `baton mcp` configured; the model
/// loads `check_inbox` and `complete_task` with `ToolSearch`, takes the
/// task with `check_inbox` (Claude Code shows the model the tool's
/// structured content: the message id and the envelope), and completes it
/// with a reply; the sender's `send --wait` prints that reply.
///
/// Claude's instance ends with Claude Code, a second or so after it
/// starts, often before the waiting sender looked for it again: the
/// sender learns the task's end from the spool's receipt then.
#[test]
fn claude_code_takes_a_task_with_check_inbox_and_completes_it() {
    let Some(claude) = host_bin("claude") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("claude-ws");
    let sender_ws = env.workspace("alice");
    // Claude's name is made an address before its host runs: an instance
    // served once for the workspace keeps its spool (a `baton mcp` whose
    // host hangs up at once leaves none, as a health check should).
    let mut first = env.serve(&ws, &["--name", "claude"]);
    assert_eq!(first.term(), 0, "{}", first.stderr());

    let id = "review-1";
    let body = "please review the lexer";
    let mut sender = env.spawn(
        &[
            "send",
            "claude",
            body,
            "--message-id",
            id,
            "--wait",
            "--timeout",
            "170",
        ],
        &sender_ws,
    );
    let queued = wait_for(
        "the task to wait in claude's spool",
        Duration::from_secs(20),
        || {
            let list = env.run(&["inbox", "list", "--json", "claude"]);
            let list: Value = serde_json::from_str(&list.stdout).ok()?;
            let queued = list["queued"].as_array()?;
            (queued.len() == 1).then(|| queued[0].clone())
        },
    );
    assert_eq!(
        queued["message_id"],
        id,
        "{queued}
{}",
        sender.stderr()
    );

    let reply = "the lexer is fine";
    let model = ModelServer::anthropic(vec![
        Turn::tool(
            "ToolSearch",
            json!({"query": "select:check_inbox,complete_task", "max_results": 2}),
        ),
        Turn::tool("mcp__baton__check_inbox", json!({})),
        Turn::tool(
            "mcp__baton__complete_task",
            json!({"message_id": id, "reply": reply}),
        ),
        Turn::text("Reviewed the lexer."),
    ]);
    let mut cmd = claude_cmd(&env, &claude, &ws, &model);
    cmd.args(["-p", "Take the next task from your baton inbox and do it."])
        .arg("--mcp-config")
        .arg(mcp_config(&env, "claude"))
        .args([
            "--allowedTools",
            "mcp__baton__check_inbox,mcp__baton__complete_task",
        ]);
    let mut host = start_claude(&env, cmd);
    let status = host.wait_exit(CLAUDE_RUN);
    let sent = sender.wait_exit(CLAUDE_RUN);
    let evidence = || claude_evidence(&host, status, &model);
    assert_eq!(status, Some(0), "{}", evidence());
    assert_eq!(
        host.stdout().trim(),
        "Reviewed the lexer.",
        "{}",
        evidence()
    );
    let asked = model.model_requests();
    assert_eq!(asked.len(), 4, "{}", evidence());
    assert_eq!(model.left(), 0, "{}", evidence());
    // 2: ToolSearch loaded both tools.
    for tool in ["mcp__baton__check_inbox", "mcp__baton__complete_task"] {
        assert!(
            asked[1].tool_names().iter().any(|t| t == tool),
            "{tool} not offered after ToolSearch:\n{}",
            evidence()
        );
    }
    // 3: check_inbox gave the model the task: its id and its envelope.
    let taken = tool_results(&asked[2].body);
    let taken = taken.last().cloned().unwrap_or_default();
    assert!(
        taken.contains(id) && taken.contains(body) && taken.contains("<agent_relay"),
        "{}",
        evidence()
    );
    // 4: complete_task completed it, and said the reply is kept for the
    // sender, a plain command line (Claude Code shows the model the
    // tool's structured content).
    let completed = tool_results(&asked[3].body);
    let completed = completed.last().cloned().unwrap_or_default();
    assert!(
        completed.contains(id) && completed.contains("completed") && completed.contains("kept"),
        "{completed}\n{}",
        evidence()
    );

    // The sender heard back, with the model's reply.
    assert_eq!(sent, Some(0), "{}\n{}", sender.stderr(), evidence());
    assert!(
        sender.stdout().contains(reply),
        "{}\n{}",
        sender.stdout(),
        evidence()
    );
}

/// JSON-RPC with `codex app-server` on its stdio, newline-delimited; every
/// message both ways is kept, for evidence and for docs/hosts.md.
struct AppServer {
    host: Host,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// `> ` for what the test sent, `< ` for what Codex sent.
    log: Vec<String>,
    next_id: u64,
}

impl AppServer {
    fn start(env: &Env, codex: &Path, codex_home: &Path, cwd: &Path) -> AppServer {
        let mut cmd = env.cmd_for(codex);
        cmd.current_dir(cwd)
            .env("CODEX_HOME", codex_home)
            .arg("app-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut host = Host::spawn(
            cmd,
            &env.root.join("codex.out"),
            &env.root.join("codex.err"),
            true,
        );
        let stdin = host.child.stdin.take().expect("piped");
        let stdout = host.child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        AppServer {
            host,
            stdin,
            lines,
            log: Vec::new(),
            next_id: 0,
        }
    }

    fn send(&mut self, msg: &Value) {
        self.log.push(format!("> {msg}"));
        writeln!(self.stdin, "{msg}").unwrap_or_else(|e| panic!("write to codex: {e}"));
    }

    /// Reads messages until one satisfies `pred`, which it returns.
    #[track_caller]
    fn until(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(format!("< {line}"));
                    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                        panic!("codex wrote a line that is not JSON ({e}): {line}")
                    });
                    if pred(&v) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "timed out after {timeout:?} waiting for {what}\n{}",
                        self.evidence()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "codex app-server closed stdout waiting for {what}\n{}",
                        self.evidence()
                    )
                }
            }
        }
    }

    /// Sends a request and returns its `result`; an error fails the test.
    #[track_caller]
    fn request(&mut self, method: &str, params: Value, timeout: Duration) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = self.until(&format!("the answer to {method}"), timeout, |v| {
            v["id"] == id && v.get("method").is_none()
        });
        if answer.get("error").is_some() {
            panic!("{method} failed: {answer}\n{}", self.evidence());
        }
        answer["result"].clone()
    }

    fn evidence(&self) -> String {
        format!(
            "app-server messages:\n{}\nstderr:\n{}",
            self.log.join("\n"),
            self.host.stderr()
        )
    }
}

/// Codex's app-server, driven as `baton serve --codex` will drive it:
/// initialize, find or start the workspace's thread, start a turn with a
/// text input, read notifications until the turn completes; the turn's
/// final agent message is the model's scripted answer.
#[test]
fn codex_app_server_runs_a_turn_for_an_outside_client() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("codex-ws");
    let answer = "The parser looks fine.";
    let model = ModelServer::openai(vec![Turn::text(answer)]);
    let codex_home = codex_home(&env, &model);

    let mut app = AppServer::start(&env, &codex, &codex_home, &ws);
    let init = app.request(
        "initialize",
        json!({
            "clientInfo": {"name": "baton-test", "version": "0"},
            "capabilities": {"experimentalApi": true},
        }),
        HOST_START,
    );
    assert_eq!(
        init["codexHome"],
        codex_home.display().to_string(),
        "{init}"
    );
    app.send(&json!({"jsonrpc": "2.0", "method": "initialized"}));
    let loaded = app.request("thread/loaded/list", json!({}), HOST_START);
    assert_eq!(loaded["data"], json!([]), "{loaded}");
    let started = app.request("thread/start", json!({"cwd": ws}), HOST_START);
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    assert_eq!(started["cwd"], ws.display().to_string(), "{started}");
    let loaded = app.request("thread/loaded/list", json!({}), HOST_START);
    assert_eq!(loaded["data"], json!([thread]), "{loaded}");

    let task = "<agent_relay from=\"alice\">review the parser</agent_relay>";
    let turn = app.request(
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": task}]}),
        HOST_START,
    );
    let turn_id = turn["turn"]["id"].as_str().unwrap().to_string();
    assert_eq!(turn["turn"]["status"], "inProgress", "{turn}");
    let done = app.until("turn/completed", CODEX_TURN, |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == turn_id.as_str()
    });
    let evidence = format!("{}\n{}", app.evidence(), model.evidence());
    let ended = &done["params"]["turn"];
    assert_eq!(done["params"]["threadId"], thread.as_str(), "{evidence}");
    assert_eq!(ended["status"], "completed", "{evidence}");
    let said: Vec<&str> = ended["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "agentMessage")
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert_eq!(said.last(), Some(&answer), "{evidence}");

    // The model got the task's text as the user's input, once.
    let asked = model.model_requests();
    assert_eq!(asked.len(), 1, "{evidence}");
    assert_eq!(model.requests().len(), 1, "{evidence}");
    assert!(
        !asked.iter().any(|r| r.body.to_string().contains(EXHAUSTED)),
        "{evidence}"
    );
    let input = asked[0].body["input"].to_string();
    assert_eq!(input.matches("review the parser").count(), 1, "{evidence}");
    assert_eq!(asked[0].path, "/v1/responses", "{evidence}");
    drop(app);
}

/// `baton::workers::codex::AppServer` against the real `codex app-server --listen
/// unix://PATH` (PATH a symlink Codex makes to its socket under
/// `/tmp/codex-daemon-$UID/`): it initializes over the WebSocket, finds
/// no thread of the workspace, starts one there, and a turn whose end
/// carries the model's scripted answer.
#[test]
fn codex_client_runs_a_turn_over_the_app_servers_unix_socket() {
    let Some(codex) = host_bin("codex") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("codex-ws");
    let answer = "Nothing to change in the lexer.";
    let model = ModelServer::openai(vec![Turn::text(answer)]);
    let codex_home = codex_home(&env, &model);
    let socket = env.root.join("cx.sock");
    let host = crate::util::codex::listen(&env, &codex, &codex_home, &ws, &socket, 1);
    let evidence = |what: &str| format!("{what}\nstderr:\n{}\n{}", host.stderr(), model.evidence());

    let mut app = CodexClient::connect(&socket, HOST_START)
        .unwrap_or_else(|e| panic!("{}", evidence(&format!("connect: {e}"))));
    assert_eq!(
        app.info().codex_home.as_deref(),
        Some(codex_home.as_path()),
        "{:?}",
        app.info()
    );
    let found = app.workspace_thread(&ws).unwrap();
    assert_eq!(found, None, "a thread before any was started");
    let thread = app.start_thread(&ws).unwrap();
    assert_eq!(thread.cwd, ws);
    assert_eq!(app.loaded_threads().unwrap(), vec![thread.id.clone()]);
    let read = app.read_thread(&thread.id).unwrap();
    assert_eq!((read.id.as_str(), &read.cwd), (thread.id.as_str(), &ws));
    let found = app.workspace_thread(&ws).unwrap();
    assert_eq!(found.map(|t| t.id), Some(thread.id.clone()));

    let task = "<agent_relay from=\"alice\">review the lexer</agent_relay>";
    let turn = app.start_turn(&thread.id, task).unwrap();
    assert_eq!(turn.status, TurnStatus::InProgress, "{turn:?}");
    let end = app
        .wait_turn(&thread.id, &turn.id, CODEX_TURN)
        .unwrap_or_else(|e| panic!("{}", evidence(&format!("the turn's end: {e}"))));
    let evidence = evidence(&format!("{end:?}"));
    assert_eq!(end.status, TurnStatus::Completed, "{evidence}");
    assert_eq!(end.text.as_deref(), Some(answer), "{evidence}");
    assert_eq!(end.error, None, "{evidence}");

    // The model got the task's text as the user's input, once.
    let asked = model.model_requests();
    assert_eq!(asked.len(), 1, "{evidence}");
    let input = asked[0].body["input"].to_string();
    assert_eq!(input.matches("review the lexer").count(), 1, "{evidence}");
    app.close().unwrap();
    // Dropping the guard ends Codex's process group (SIGTERM, then
    // SIGKILL); on SIGTERM Codex removes its socket and the symlink.
    drop(host);
    assert!(
        socket.symlink_metadata().is_err(),
        "{} left behind",
        socket.display()
    );
}

/// Saves docs/hooks.md's script `name` as a user does, executable, in
/// `root/bin` beside a link to `baton`; the PATH that finds both.
fn save_recipe(env: &Env, name: &str) -> String {
    let bin = env.root.join("bin");
    if !bin.exists() {
        fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).unwrap();
    }
    let script = bin.join(name);
    fs::write(&script, crate::hooks::recipe(name)).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The text of the last user message of a Messages API request, one
/// string per text block (Claude Code adds blocks of its own, such as
/// `<system-reminder>`s, beside what the user typed).
fn last_user_texts(body: &Value) -> Vec<String> {
    let Some(last) = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|m| m["role"] == "user")
    else {
        return Vec::new();
    };
    match &last["content"] {
        Value::String(text) => vec![text.clone()],
        blocks => blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .map(str::to_string)
            .collect(),
    }
}

/// (b): the Stop hook of docs/hooks.md, as written there, in the
/// project's `.claude/settings.json`. A task waits when the model ends its
/// first turn: the hook blocks, and Claude Code goes on with the hook's
/// reason; the model claims the task and completes it with `baton inbox`
/// through its Bash tool, and the sender's `send --wait` gets the reply.
/// At the next stop nothing waits, and the hook lets Claude stop.
#[test]
fn claude_code_stop_hook_keeps_it_working_while_a_task_waits() {
    let Some(claude) = host_bin("claude") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("claude-hook");
    let sender_ws = env.workspace("alice");
    let mut inst = env.serve(&ws, &[]);

    // The hook, saved as the page says, on PATH beside `baton`.
    let path = save_recipe(&env, "baton-stop-hook");
    fs::create_dir(ws.join(".claude")).unwrap();
    let settings = json!({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "baton-stop-hook", "timeout": 30}
    ]}]}});
    fs::write(ws.join(".claude/settings.json"), settings.to_string()).unwrap();

    let id = "typo-1";
    let mut sender = env.spawn(
        &[
            "send",
            "claude-hook",
            "fix the typo in README",
            "--message-id",
            id,
            "--wait",
            "--timeout",
            "170",
        ],
        &sender_ws,
    );
    let queued = env.run(&["inbox", "wait", "--timeout", "20", "claude-hook"]);
    assert_eq!(queued.status, 0, "{}{}", queued.stderr, sender.stderr());

    let reply = "fixed the typo";
    let model = ModelServer::anthropic(vec![
        Turn::text("Hello."),
        Turn::tool(
            "Bash",
            json!({"command": "baton inbox claim", "description": "Claim the waiting task"}),
        ),
        Turn::tool(
            "Bash",
            json!({
                "command": format!("baton inbox complete {id} --reply '{reply}'"),
                "description": "Complete the task",
            }),
        ),
        Turn::text("Done."),
    ]);
    let mut cmd = claude_cmd(&env, &claude, &ws, &model);
    cmd.env("PATH", path)
        .args(["-p", "hello", "--allowedTools", "Bash(baton inbox:*)"]);
    let (host, status) = run_claude(&env, cmd);
    let evidence = || claude_evidence(&host, status, &model);
    assert_eq!(status, Some(0), "{}", evidence());
    assert_eq!(host.stdout().trim(), "Done.", "{}", evidence());
    let asked = model.model_requests();
    assert_eq!(asked.len(), 4, "{}", evidence());
    assert_eq!(model.requests().len(), 4, "{}", evidence());
    // 2: the hook's reason, after the first turn.
    let second = asked[1].body["messages"].to_string();
    assert!(
        second.contains("Stop hook blocking error")
            && second.contains(&format!("1 task waits to be claimed; next: {id} from")),
        "{}",
        evidence()
    );
    // 3: the claimed envelope came back from Bash.
    let claimed = tool_results(&asked[2].body).join("\n");
    assert!(
        claimed.contains("<agent_relay") && claimed.contains("fix the typo in README"),
        "{}",
        evidence()
    );
    // The sender heard back.
    let code = sender.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}\n{}", sender.stderr(), evidence());
    assert!(sender.stdout().contains(reply), "{}", sender.stdout());
    inst.term();
}

/// (c): the shell loop of docs/hooks.md (`baton-agent-loop`, as written
/// there) with `claude -p` as its command, in the workspace of a pull
/// instance: the loop claims the task, Claude Code gets its envelope on
/// stdin as the prompt, and what it prints is the reply the sender's
/// `send --wait` prints.
#[test]
fn claude_code_answers_a_task_through_the_agent_loop() {
    let Some(claude) = host_bin("claude") else {
        return;
    };
    let env = Env::new();
    let ws = env.workspace("claude-loop");
    let sender_ws = env.workspace("alice");
    let mut inst = env.serve(&ws, &[]);
    let answer = "Tabs are fine in the tokenizer.";
    let model = ModelServer::anthropic(vec![Turn::text(answer)]);

    let path = save_recipe(&env, "baton-agent-loop");
    let mut cmd = env.cmd_for(env.root.join("bin/baton-agent-loop"));
    cmd.current_dir(&ws)
        .envs(claude_vars(&env, &ws, &model))
        .env("PATH", path)
        .arg(&claude)
        .arg("-p");
    // Its own process group: dropping it ends the loop and any claude.
    let agent_loop = Host::spawn(
        cmd,
        &env.root.join("loop.out"),
        &env.root.join("loop.err"),
        false,
    );

    let body = "do tabs work in the tokenizer?";
    let mut sender = env.spawn(
        &["send", "claude-loop", body, "--wait", "--timeout", "150"],
        &sender_ws,
    );
    let code = sender.wait_exit(CLAUDE_RUN);
    let evidence = || {
        format!(
            "send: exit {code:?}\nstdout:\n{}\nstderr:\n{}\nthe loop's stderr:\n{}\n{}",
            sender.stdout(),
            sender.stderr(),
            agent_loop.stderr(),
            model.evidence()
        )
    };
    assert_eq!(code, Some(0), "{}", evidence());
    assert!(sender.stdout().contains(answer), "{}", evidence());

    // One turn: the model got the task's envelope as the prompt.
    let asked = model.model_requests();
    assert_eq!(asked.len(), 1, "{}", evidence());
    assert_eq!(model.requests().len(), 1, "{}", evidence());
    assert_eq!(model.left(), 0, "{}", evidence());
    let prompt = last_user_texts(&asked[0].body).join("\n");
    assert!(
        prompt.contains("<agent_relay")
            && prompt.contains(body)
            && prompt.contains("</agent_relay>"),
        "{}",
        evidence()
    );
    drop(agent_loop);
    inst.term();
}

/// How long Claude Code's terminal UI may take to show its prompt.
const TUI_START: Duration = Duration::from_secs(60);

/// (d): `baton serve --tmux-pane` types a task into Claude Code's
/// terminal UI, running in a pane of a private tmux server: Claude Code
/// asks for bracketed paste, so the envelope arrives as one paste and the
/// Enter after it submits it. The model gets the envelope as the user's
/// message, once, and nothing typed besides it.
#[test]
fn claude_code_in_a_tmux_pane_gets_a_task_typed_by_serve() {
    let Some(claude) = host_bin("claude") else {
        return;
    };
    if !have("tmux") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("claude-tui");
    let answer = "I will look at the README.";
    let model = ModelServer::anthropic(vec![Turn::text(answer)]);

    // The pane's program gets the tmux server's environment, not ours:
    // a script sets the world's and Claude's.
    let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut vars: Vec<(String, String)> = [
        ("HOME", env.root.join("home")),
        ("BATON_DIR", env.registry.clone()),
        ("XDG_STATE_HOME", env.state.clone()),
        ("TMPDIR", env.root.join("tmp")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.display().to_string()))
    .collect();
    vars.push(("LANG".into(), "C.UTF-8".into()));
    vars.push(("PATH".into(), std::env::var("PATH").unwrap_or_default()));
    vars.extend(
        claude_vars(&env, &ws, &model)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    let mut script = String::new();
    for (k, v) in &vars {
        script.push_str(&format!("export {k}={}\n", q(v)));
    }
    script.push_str(&format!(
        "cd {}\nexec {}\n",
        q(&ws.display().to_string()),
        q(&claude.display().to_string())
    ));
    let launch = env.root.join("claude-tui.sh");
    fs::write(&launch, script).unwrap();
    let mut tmux = crate::tmux::Tmux::new(&env);
    tmux.start_program(&format!("sh {}", launch.display()));
    let screen = || tmux.run(&["capture-pane", "-p", "-t", "t:0.0"]);
    // Ready: the prompt `❯` between its two rules, no dialog before it.
    let mut shown = String::new();
    let ready = poll(TUI_START, PANE_POLL, || {
        shown = screen();
        shown
            .lines()
            .any(|l| l.trim_end() == "\u{276f}")
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "no prompt after {TUI_START:?}; the pane:\n{shown}\n{}",
        model.evidence()
    );

    let (k, v) = tmux.var();
    let mut inst = env.serve_with(&ws, &[(k, v.as_str())], &["--tmux-pane", "t:0.0"]);
    let body = "summarise the README";
    let sent = env.run_stdin(&["send", "claude-tui", "-", "--json"], body.as_bytes());
    assert_eq!(sent.status, 0, "{sent:?}");
    let sent: Value = serde_json::from_str(&sent.stdout).unwrap();
    let id = sent["message_id"].as_str().unwrap().to_string();

    // The model's answer shows in the pane: the turn is over.
    let mut shown = String::new();
    let answered = poll(CLAUDE_RUN, PANE_POLL, || {
        shown = screen();
        shown.contains(answer).then_some(())
    });
    let evidence = |shown: &str| format!("the pane:\n{shown}\n{}", model.evidence());
    assert!(answered.is_some(), "{}", evidence(&shown));

    // The model got the envelope once, as the whole of what was typed:
    // Claude Code 2.1.328 hands a paste to the model inside a
    // `<pasted_content id="N">` element of its own, with nothing else
    // around it but blank lines.
    let asked = model.model_requests();
    assert_eq!(asked.len(), 1, "{}", evidence(&shown));
    assert_eq!(model.requests().len(), 1, "{}", evidence(&shown));
    let typed: Vec<String> = model
        .requests()
        .iter()
        .flat_map(|r| last_user_texts(&r.body))
        .filter(|t| t.contains("agent_relay"))
        .collect();
    assert_eq!(typed.len(), 1, "{typed:?}\n{}", evidence(&shown));
    let pasted = typed[0].trim();
    let envelope = pasted
        .strip_prefix("<pasted_content id=\"")
        .and_then(|rest| {
            let (n, rest) = rest.split_once("\">\n")?;
            rest.strip_suffix(&format!("\n</pasted_content id=\"{n}\">"))
        })
        .unwrap_or_else(|| panic!("not one paste: {pasted:?}\n{}", evidence(&shown)));
    assert!(
        envelope.starts_with("<agent_relay ") && envelope.ends_with("\n</agent_relay>"),
        "{envelope:?}\n{}",
        evidence(&shown)
    );
    assert_eq!(envelope.matches("<agent_relay ").count(), 1, "{envelope:?}");
    assert!(
        envelope
            .lines()
            .next()
            .unwrap()
            .contains(&format!("message_id=\"{id}\"")),
        "{envelope:?}"
    );
    assert!(envelope.contains(&format!("\n{body}\n")), "{envelope:?}");
    assert!(
        envelope.contains("\n[when done: baton inbox complete "),
        "{envelope:?}"
    );
    inst.term();
    drop(tmux);
}
