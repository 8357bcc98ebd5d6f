//! `baton mcp` (docs/mcp.md): an MCP server on stdio, backed by a pull-mode
//! instance for its directory.
//!
//! The protocol edges (version negotiation, exact errors, the reply-only
//! scope, log notifications, shutdown) are driven here directly, with JSON
//! lines over the server's pipes, and every line it writes on stdout is
//! checked to be a JSON-RPC message. The end-to-end hand-over between two
//! sessions runs a real MCP client, the Python `mcp` SDK, with
//! `tests/mcp/session.py`; it is skipped with a reason when python3 or the
//! package is missing, and fails instead under BATON_REQUIRE_ALL=1.

mod channel;
mod hops;
mod permission;

use crate::util::{
    Env, POLL, exited, exited_or_killed, manifests, pid_exists, poll, wait_for, wait_until,
};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

/// How long one answer or notification may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `baton mcp` may take to exit once told to.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the Python session may run in all.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(150);
/// The protocol revisions `baton mcp` speaks, newest first.
const SPOKEN: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
pub(crate) const NEWEST: &str = SPOKEN[0];
const TOOLS: [&str; 5] = [
    "list_agents",
    "send_agent_message",
    "task_status",
    "check_inbox",
    "complete_task",
];
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const PARSE_ERROR: i64 = -32700;

/// A fresh file under the test's root for a process's output.
fn log_file(env: &Env, what: &str, ext: &str) -> (PathBuf, File) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = env.root.join(format!(
        "{what}-{}.{ext}",
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let file = File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    (path, file)
}

/// Whether `v` is one JSON-RPC 2.0 message: a request, a notification, or
/// a response with exactly one of `result` and `error`.
fn is_jsonrpc(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    if o.get("jsonrpc") != Some(&json!("2.0")) {
        return false;
    }
    match o.get("method") {
        Some(m) => m.is_string(),
        None => o.contains_key("id") && (o.contains_key("result") != o.contains_key("error")),
    }
}

/// The pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parens.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The manifest files of the instance running as `pid`.
fn manifests_of(registry: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("a-{pid}-");
    manifests(registry)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

/// A `baton mcp` process spoken to over its pipes (the host's side of a
/// session; `tests/security` drives one too).
pub(crate) struct Mcp {
    child: Child,
    /// Under a host of its own (`start_hosted`): `baton mcp`'s pid.
    mcp_pid: Option<u32>,
    stdin: Option<ChildStdin>,
    /// Lines of stdout, from a reader thread; disconnected at EOF.
    lines: mpsc::Receiver<String>,
    /// Notifications that arrived while an answer was awaited.
    pub(crate) notes: Vec<Value>,
    stderr_path: PathBuf,
    next_id: u64,
}

impl Mcp {
    /// Starts `baton mcp <args>` in `workspace`, in the test's world.
    pub(crate) fn start(env: &Env, workspace: &Path, args: &[&str]) -> Mcp {
        Mcp::start_with(env, workspace, &[], args)
    }

    /// Like `start`, with `vars` added to the environment.
    fn start_with(env: &Env, workspace: &Path, vars: &[(&str, &str)], args: &[&str]) -> Mcp {
        let mut cmd = env.cmd();
        cmd.envs(vars.iter().copied()).arg("mcp").args(args);
        Mcp::spawn(env, workspace, cmd, false)
    }

    /// Like `start`, under a host of its own, as an agent host runs it: a
    /// shell that runs `baton mcp` and waits for it. The test's own
    /// connections are then outside the host's process tree, as an
    /// operator's are (docs/security.md).
    pub(crate) fn start_hosted(env: &Env, workspace: &Path, args: &[&str]) -> Mcp {
        let mut cmd = env.cmd_for("/bin/sh");
        cmd.args(["-c", "\"$0\" mcp \"$@\"; exit $?"])
            .arg(env.cmd().get_program())
            .args(args);
        Mcp::spawn(env, workspace, cmd, true)
    }

    fn spawn(env: &Env, workspace: &Path, mut cmd: Command, hosted: bool) -> Mcp {
        let (stderr_path, stderr) = log_file(env, "mcp", "err");
        let mut child = cmd
            .current_dir(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn baton mcp: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { return };
                if tx
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    return;
                }
            }
        });
        let mcp_pid = hosted.then(|| {
            let host = child.id();
            wait_for("baton mcp under its host", READ_TIMEOUT, || {
                // The shell's child once it is baton (not while it forks).
                let list = fs::read_to_string(format!("/proc/{host}/task/{host}/children"));
                list.unwrap_or_default().split_whitespace().find_map(|c| {
                    let comm = fs::read_to_string(format!("/proc/{c}/comm")).ok()?;
                    (comm.trim() == "baton").then(|| c.parse().ok())?
                })
            })
        });
        Mcp {
            stdin: child.stdin.take(),
            mcp_pid,
            child,
            lines,
            notes: Vec::new(),
            stderr_path,
            next_id: 0,
        }
    }

    /// The process that started `baton mcp`: its host.
    pub(crate) fn host_pid(&self) -> u32 {
        match self.mcp_pid {
            Some(_) => self.child.id(),
            None => std::process::id(),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.mcp_pid.unwrap_or_else(|| self.child.id())
    }

    pub(crate) fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Writes one line to the server's stdin.
    pub(crate) fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("writing to baton mcp: {e}\nstderr:\n{}", self.stderr()));
    }

    fn notify(&mut self, method: &str) {
        self.send_line(&json!({"jsonrpc": "2.0", "method": method}).to_string());
    }

    /// Parses one stdout line, which must be a JSON-RPC message.
    fn check(&self, line: &str) -> Value {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line:?}"));
        assert!(
            is_jsonrpc(&v),
            "stdout carried a line that is not a JSON-RPC message: {line}"
        );
        v
    }

    /// The next message on stdout.
    fn read(&mut self) -> Value {
        match self.lines.recv_timeout(READ_TIMEOUT) {
            Ok(line) => self.check(&line),
            Err(e) => panic!(
                "no message from baton mcp within {READ_TIMEOUT:?} ({e:?}); stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// Reads until the response with `id`, keeping notifications.
    fn response(&mut self, id: &Value) -> Value {
        loop {
            let msg = self.read();
            if msg.get("method").is_some() {
                self.notes.push(msg);
                continue;
            }
            assert_eq!(&msg["id"], id, "an answer to another request: {msg}");
            return msg;
        }
    }

    /// Sends `line` and returns the response with `id`.
    fn raw(&mut self, id: Value, line: &str) -> Value {
        self.send_line(line);
        self.response(&id)
    }

    /// A request; the whole response object.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.raw(id, &req.to_string())
    }

    /// `initialize` asking for `version`, then `notifications/initialized`;
    /// the result.
    pub(crate) fn initialize(&mut self, version: &str) -> Value {
        let r = self.request(
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "baton-tests", "version": "0"},
            }),
        );
        self.notify("notifications/initialized");
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {r}"))
    }

    /// `tools/call`; the tool result.
    pub(crate) fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {name} is not a result: {r}"))
    }

    /// The first notification with `method` whose params satisfy `pred`,
    /// waiting for it if it has not come yet.
    pub(crate) fn wait_note(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let found = poll(READ_TIMEOUT, POLL, || {
            loop {
                let at = self
                    .notes
                    .iter()
                    .position(|n| n["method"] == method && pred(&n["params"]));
                if at.is_some() {
                    return Some(at);
                }
                match self.lines.try_recv() {
                    Ok(line) => {
                        let v = self.check(&line);
                        self.notes.push(v);
                    }
                    Err(TryRecvError::Empty) => return None,
                    // Stdout has ended: nothing more can come.
                    Err(TryRecvError::Disconnected) => return Some(None),
                }
            }
        });
        match found.flatten() {
            Some(i) => self.notes.remove(i),
            None => panic!(
                "no {method} notification within {READ_TIMEOUT:?}; got {:?}\nstderr:\n{}",
                self.notes,
                self.stderr()
            ),
        }
    }

    /// The instance's manifest, once it is published.
    pub(crate) fn manifest(&self, env: &Env) -> (PathBuf, Value) {
        let path = wait_for("the manifest of baton mcp", READ_TIMEOUT, || {
            manifests_of(&env.registry, self.pid()).into_iter().next()
        });
        let m: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        (path, m)
    }

    /// Waits for the process to exit; panics after EXIT_TIMEOUT.
    fn wait_exit(&mut self) -> ExitStatus {
        match exited_or_killed(&mut self.child, EXIT_TIMEOUT) {
            Some(status) => status,
            None => panic!(
                "baton mcp (pid {}) still running {EXIT_TIMEOUT:?} after it was told to stop; killed.\nstderr:\n{}",
                self.pid(),
                self.stderr()
            ),
        }
    }

    /// Reads stdout to its end, checking every line left.
    fn drain(&mut self) {
        loop {
            match self.lines.recv_timeout(READ_TIMEOUT) {
                Ok(line) => {
                    let v = self.check(&line);
                    self.notes.push(v);
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => panic!("stdout of baton mcp did not end"),
            }
        }
    }

    /// Closes stdin, as a host does at the end of a session; the server
    /// must exit 0 within the bound, with stdout clean to its end.
    pub(crate) fn finish(mut self) {
        self.stdin = None;
        let status = self.wait_exit();
        assert_eq!(status.code(), Some(0), "stderr:\n{}", self.stderr());
        self.drain();
    }

    fn signal(&mut self, sig: libc::c_int) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is
            // our own child, just seen running and not yet reaped.
            unsafe {
                libc::kill(self.pid() as libc::pid_t, sig);
            }
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        self.signal(libc::SIGTERM);
        if exited(&mut self.child, Duration::from_secs(3)).is_some() {
            return;
        }
        if self.mcp_pid.is_some() {
            self.signal(libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of a tool result's single content item.
pub(crate) fn text(result: &Value) -> &str {
    assert_eq!(
        result["content"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
    assert_eq!(result["content"][0]["type"], "text", "{result}");
    result["content"][0]["text"].as_str().unwrap()
}

/// Asserts a JSON-RPC error with exactly this code and message.
fn assert_error(r: &Value, code: i64, message: &str) {
    assert!(r.get("result").is_none(), "expected an error: {r}");
    assert_eq!(r["error"]["code"], code, "{r}");
    assert_eq!(r["error"]["message"], message, "{r}");
}

/// Asserts a tool result with `isError` true and exactly this text.
fn assert_tool_error(r: &Value, want: &str) {
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(text(r), want, "{r}");
}

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The reason `relay/send` gives inside a task from `from` (`from_id`)
/// for a target other than its sender.
fn denied_reason(from: &str, from_id: &str, to: &str, to_id: &str) -> String {
    format!(
        "this turn runs a task relayed from {from}: only its sender {from_id} may be sent to, not {to} ({to_id})"
    )
}

#[test]
fn initialize_negotiates_the_protocol_version() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let spoken = SPOKEN.map(|v| (v, v));
    // Unknown revisions, later or earlier: the newest one it speaks.
    let unknown = [("2026-07-28", NEWEST), ("1999-01-01", NEWEST)];
    for (asked, answered) in spoken.into_iter().chain(unknown) {
        let mut m = Mcp::start(&env, &ws, &[]);
        let r = m.initialize(asked);
        assert_eq!(r["protocolVersion"], answered, "asked {asked}: {r}");
        assert_eq!(r["serverInfo"]["name"], "baton", "{r}");
        assert_eq!(r["capabilities"]["tools"]["listChanged"], false, "{r}");
        assert!(r["capabilities"]["logging"].is_object(), "{r}");
        let (_, manifest) = m.manifest(&env);
        let id = manifest["instance_id"].as_str().unwrap();
        let instructions = r["instructions"].as_str().unwrap();
        assert!(
            instructions.contains(&format!("you are instance {id}")),
            "{instructions}"
        );
        assert!(
            instructions.contains("only when the user explicitly asked"),
            "{instructions}"
        );
        assert_eq!(m.request("ping", json!({}))["result"], json!({}));
        m.finish();
    }
}

#[test]
fn requests_before_initialize_and_bad_initialize_are_errors() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut m = Mcp::start(&env, &ws, &[]);
    let r = m.request("tools/list", json!({}));
    assert_error(&r, INVALID_REQUEST, "invalid request: initialize first");
    let r = m.request("tools/call", json!({"name": "list_agents"}));
    assert_error(&r, INVALID_REQUEST, "invalid request: initialize first");
    // ping is allowed at any time.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    let r = m.request("initialize", json!({"protocolVersion": 20251125}));
    assert_error(
        &r,
        INVALID_PARAMS,
        "invalid params: protocolVersion must be a string",
    );
    let r = m.request("initialize", json!(["2025-11-25"]));
    assert_error(
        &r,
        INVALID_PARAMS,
        "invalid params: params must be an object",
    );
    let r = m.initialize(NEWEST);
    assert_eq!(r["protocolVersion"], NEWEST);
    m.finish();
}

#[test]
fn tool_calls_and_their_exact_errors() {
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let a = env.serve(&wa, &["--name", "alpha"]);
    let c = env.serve(&wc, &["--name", "gamma"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    assert_eq!(manifest["name"], "beta");
    assert_eq!(manifest["profile"], "coding");
    assert_eq!(manifest["workspace"], wb.to_str().unwrap());

    // The five tools, each with an object input schema.
    let list = b.request("tools/list", json!({}))["result"].clone();
    assert_eq!(tool_names(&list), TOOLS, "{list}");
    for t in list["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(!t["description"].as_str().unwrap().is_empty(), "{t}");
    }

    // JSON-RPC errors, exactly.
    let r = b.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_error(&r, INVALID_PARAMS, "Unknown tool: no_such_tool");
    let r = b.request("tools/call", json!({"arguments": {}}));
    assert_error(&r, INVALID_PARAMS, "invalid params: name must be a string");
    let r = b.request("tools/call", json!({"name": 7}));
    assert_error(&r, INVALID_PARAMS, "invalid params: name must be a string");
    for bad in [json!([1, 2]), json!("x"), json!(3)] {
        let r = b.request(
            "tools/call",
            json!({"name": "list_agents", "arguments": bad}),
        );
        assert_error(
            &r,
            INVALID_PARAMS,
            "invalid params: arguments must be an object",
        );
    }
    let r = b.request("resources/list", json!({}));
    assert_error(&r, METHOD_NOT_FOUND, "method not found: resources/list");
    b.send_line("{not json");
    let r = b.response(&Value::Null);
    assert_eq!(r["error"]["code"], PARSE_ERROR, "{r}");
    let r = b.raw(json!("s1"), r#"{"id":"s1","method":"ping"}"#);
    assert_error(
        &r,
        INVALID_REQUEST,
        "invalid request: \"jsonrpc\" must be \"2.0\"",
    );

    // list_agents: the others, not itself.
    let agents = b.tool("list_agents", json!({}));
    assert_eq!(agents["isError"], false, "{agents}");
    let listed = agents["structuredContent"]["agents"].as_array().unwrap();
    let mut ids: Vec<&str> = listed
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![a.id.as_str(), c.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "{agents}");

    // Body bounds: tool errors with check_body's and check_limit's exact
    // reasons (the receiver's limit, from its manifest: the default).
    for empty in ["", "  \n\t "] {
        let r = b.tool(
            "send_agent_message",
            json!({"target_instance_id": c.id, "message": empty}),
        );
        assert_tool_error(&r, "not delivered: invalid: the message is empty");
        assert_eq!(r["structuredContent"]["status"], "invalid", "{r}");
    }
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": c.id, "message": "x".repeat(1_048_577)}),
    );
    assert_tool_error(
        &r,
        "not delivered: invalid: the message is 1048577 bytes; gamma accepts at most 1048576 \
         (BATON_MAX_MESSAGE_BYTES at gamma)",
    );
    let r = b.tool("send_agent_message", json!({"target_instance_id": c.id}));
    assert_tool_error(
        &r,
        "Input validation error: target_instance_id and message must both be strings",
    );
    // At the bound exactly, the task goes through.
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": c.id, "message": "y".repeat(1_048_576)}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    assert_eq!(r["structuredContent"]["queue_position"], 1, "{r}");
    let first_to_c = r["structuredContent"]["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        text(&r),
        format!(
            "accepted: task {first_to_c} is queued at position 1 on gamma ({}). Acceptance is not completion: the other agent has not done anything yet.",
            c.id
        )
    );

    // Nothing to take yet.
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(text(&r), "The inbox is empty.");
    assert_eq!(r["structuredContent"]["status"], "empty", "{r}");

    // alpha hands beta a task: beta's host hears of it.
    let mut ac = a.client();
    let sent = ac.call(
        1,
        "relay/send",
        json!({"target": b_id, "body": "Summarize the README."}),
    );
    let sent = &sent["result"];
    assert_eq!(sent["status"], "accepted", "{sent}");
    let mid = sent["message_id"].as_str().unwrap().to_string();
    let note = b.wait_note("notifications/message", |p| {
        p["data"].as_str().is_some_and(|d| d.contains(&mid))
    });
    assert_eq!(note["params"]["level"], "info", "{note}");
    assert_eq!(note["params"]["logger"], "baton", "{note}");
    assert_eq!(
        note["params"]["data"],
        format!("a task from alpha arrived ({mid}); call check_inbox to take it")
    );

    // beta takes it.
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    let s = &r["structuredContent"];
    assert_eq!(s["message_id"], mid.as_str(), "{r}");
    assert_eq!(s["sender"]["instance_id"], a.id.as_str(), "{r}");
    assert_eq!(s["in_reply_to"], Value::Null, "{r}");
    let t = text(&r);
    assert!(
        t.starts_with(&format!(
            "<agent_relay from=\"alpha\" instance=\"{}\"",
            a.id
        )),
        "{t}"
    );
    assert!(t.contains("\nSummarize the README.\n"), "{t}");
    assert!(
        t.ends_with(&format!(
            "</agent_relay>\n\nWhen you are done, call complete_task with message_id \"{mid}\" and, if the sender should hear back, a short reply."
        )),
        "{t}"
    );

    // While it is open, beta may send only to alpha.
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": c.id, "message": "Can you help?"}),
    );
    assert_tool_error(
        &r,
        &format!(
            "not delivered: denied: {}",
            denied_reason("alpha", &a.id, "gamma", &c.id)
        ),
    );
    assert_eq!(r["structuredContent"]["status"], "denied", "{r}");
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": a.id, "message": "Which README?"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    let question = r["structuredContent"]["message_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Completing something else is refused; the task stays open.
    let r = b.tool(
        "complete_task",
        json!({"message_id": "1-0000000000000000-9"}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).starts_with("not completed: "), "{r}");
    let r = b.tool("complete_task", json!({"message_id": mid, "reply": 5}));
    assert_tool_error(&r, "Input validation error: reply must be a string");
    let r = b.tool("complete_task", json!({}));
    assert_tool_error(&r, "Input validation error: message_id must be a string");

    let r = b.tool(
        "complete_task",
        json!({"message_id": mid, "reply": "It documents the CLI."}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["reply"]["status"], "accepted", "{r}");
    let rid = r["structuredContent"]["reply"]["message_id"]
        .as_str()
        .unwrap();
    assert_eq!(
        text(&r),
        format!("completed {mid}; the reply ({rid}) is in the sender's queue.")
    );
    assert_eq!(r["structuredContent"]["status"], "completed", "{r}");

    // The scope closed with the task: gamma may be sent to again.
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": c.id, "message": "Can you help?"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    assert_eq!(r["structuredContent"]["queue_position"], 2, "{r}");

    // alpha gets the question, then the reply, which answers its task.
    let mut claimed = Vec::new();
    wait_until("alpha's two tasks from beta", READ_TIMEOUT, || {
        let r = ac.call(2, "inbox/claim", json!({}));
        if r["result"]["status"] == "claimed" {
            let task = r["result"]["task"].clone();
            let id = task["message_id"].as_str().unwrap().to_string();
            let done = ac.call(
                3,
                "inbox/complete",
                json!({"message_id": id, "outcome": "done"}),
            );
            assert_eq!(done["result"]["status"], "completed", "{done}");
            claimed.push(task);
        }
        claimed.len() == 2
    });
    assert_eq!(claimed[0]["message_id"], question.as_str(), "{claimed:?}");
    assert_eq!(claimed[0]["in_reply_to"], mid.as_str(), "{claimed:?}");
    assert_eq!(claimed[1]["in_reply_to"], mid.as_str(), "{claimed:?}");
    assert_eq!(claimed[1]["sender"]["instance_id"], b_id.as_str());
    assert!(
        claimed[1]["envelope"]
            .as_str()
            .unwrap()
            .contains("\nIt documents the CLI.\n"),
        "{claimed:?}"
    );

    b.finish();
    drop(ac);
}

/// The reply-only scope lasts while any claimed task is open: a steer
/// follow-up joins its task's turn, and completing the follow-up first
/// does not lift the scope of the task still open. A task completed
/// another way (`baton inbox complete`) stops scoping the session once
/// `complete_task` learns it is no longer open.
#[test]
fn the_reply_only_scope_lasts_while_any_task_is_open() {
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let a = env.serve(&wa, &["--name", "alpha"]);
    let c = env.serve(&wc, &["--name", "gamma"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    let mut ac = a.client();
    let mut relay = |n: u64, params: Value| -> String {
        let r = ac.call(n, "relay/send", params);
        assert_eq!(r["result"]["status"], "accepted", "{r}");
        r["result"]["message_id"].as_str().unwrap().to_string()
    };
    let denied = denied_reason("alpha", &a.id, "gamma", &c.id);
    let to_gamma = |b: &mut Mcp| {
        b.tool(
            "send_agent_message",
            json!({"target_instance_id": c.id, "message": "Can you help?"}),
        )
    };

    let first = relay(1, json!({"target": b_id, "body": "Task one."}));
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], first.as_str(), "{r}");
    let follow = relay(
        2,
        json!({"target": b_id, "body": "And one more thing.", "mode": "steer"}),
    );
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], follow.as_str(), "{r}");
    let r = b.tool("complete_task", json!({"message_id": follow}));
    assert_eq!(text(&r), format!("completed {follow}."), "{r}");
    // The first task is still open: still only alpha.
    let r = to_gamma(&mut b);
    assert_tool_error(&r, &format!("not delivered: denied: {denied}"));
    let r = b.tool("complete_task", json!({"message_id": first}));
    assert_eq!(text(&r), format!("completed {first}."), "{r}");
    let r = to_gamma(&mut b);
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");

    // Completed behind the session's back.
    let third = relay(3, json!({"target": b_id, "body": "Task three."}));
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], third.as_str(), "{r}");
    let out = env.run(&["inbox", "complete", "beta", &third]);
    assert_eq!(out.status, 0, "{out:?}");
    let r = b.tool("complete_task", json!({"message_id": third}));
    assert_tool_error(
        &r,
        &format!("not completed: invalid: task {third} is not open here"),
    );
    let r = to_gamma(&mut b);
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    b.finish();
}

/// A send by name to an agent that is not running but has a spool is
/// stored there (offline delivery): a success, not an error.
#[test]
fn a_task_stored_for_a_stopped_agent_is_no_error() {
    let env = Env::new();
    let (wb, wc) = (env.workspace("beta"), env.workspace("gamma"));
    let mut c = env.serve(&wc, &["--name", "gamma"]);
    assert_eq!(c.term(), 0, "{}", c.stderr());
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": "gamma", "message": "When you start, rebuild the index."}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["status"], "stored", "{r}");
    assert_eq!(r["structuredContent"]["queue_position"], 1, "{r}");
    let mid = r["structuredContent"]["message_id"].as_str().unwrap();
    assert_eq!(
        text(&r),
        format!(
            "stored: gamma is not running; task {mid} waits in its spool at position 1 and runs when it starts. Acceptance is not completion."
        )
    );
    b.finish();
    // gamma finds it when it starts.
    let c = env.serve(&wc, &["--name", "gamma"]);
    assert_eq!(c.queued(&mut c.client()), 1);
}

/// The instance closes an idle connection (BATON_IDLE_TIMEOUT); the next
/// tool call opens a new one, and arrival notices keep coming.
#[test]
fn tool_calls_outlive_the_idle_timeout() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut m = Mcp::start_with(
        &env,
        &ws,
        &[("BATON_IDLE_TIMEOUT", "1")],
        &["--name", "proj"],
    );
    m.initialize(NEWEST);
    assert_eq!(
        text(&m.tool("check_inbox", json!({}))),
        "The inbox is empty."
    );
    // The instance (in baton mcp) closes the idle connection: its thread
    // for it ends.
    let pid = m.pid();
    let with = crate::util::settled_threads(pid);
    crate::util::wait_until(
        "the idle connection to be closed",
        Duration::from_secs(20),
        || crate::util::threads(pid) < with,
    );
    assert_eq!(
        text(&m.tool("check_inbox", json!({}))),
        "The inbox is empty."
    );
    let out = env.run(&["send", "proj", "Still there?", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let sent: Value = serde_json::from_str(&out.stdout).unwrap();
    let mid = sent["message_id"].as_str().unwrap().to_string();
    let note = m.wait_note("notifications/message", |p| {
        p["data"].as_str().is_some_and(|d| d.contains(&mid))
    });
    assert_eq!(
        note["params"]["data"],
        format!("a task from (cli) arrived ({mid}); call check_inbox to take it")
    );
    let r = m.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], mid.as_str(), "{r}");
    // A plain command line cannot be answered, and the text says so.
    assert!(
        text(&r).ends_with(&format!(
            "call complete_task with message_id \"{mid}\" (this sender cannot be replied to)."
        )),
        "{r}"
    );
    m.finish();
}

/// Starts `baton mcp`, initialized; stops it with `stop`; checks that it
/// exits 0 within the bound and leaves nothing behind.
fn stops_cleanly(stop: impl FnOnce(&mut Mcp)) {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut m = Mcp::start(&env, &ws, &["--name", "proj"]);
    m.initialize(NEWEST);
    let (path, manifest) = m.manifest(&env);
    let socket = PathBuf::from(manifest["socket"].as_str().unwrap());
    assert!(socket.exists(), "{}", socket.display());
    let pid = m.pid();
    // Pull mode runs no handler: nothing but baton itself to stop.
    assert_eq!(children_of(pid), Vec::<u32>::new());

    stop(&mut m);
    let status = m.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr:\n{}", m.stderr());
    wait_until("the pid of baton mcp to be gone", EXIT_TIMEOUT, || {
        !pid_exists(pid)
    });
    assert!(!path.exists(), "manifest {} left behind", path.display());
    assert_eq!(manifests_of(&env.registry, pid), Vec::<PathBuf>::new());
    assert!(!socket.exists(), "socket {} left behind", socket.display());
    m.drain();
}

#[test]
fn closing_stdin_removes_the_manifest_and_exits() {
    stops_cleanly(|m| m.stdin = None);
}

#[test]
fn sigterm_removes_the_manifest_and_exits() {
    stops_cleanly(|m| m.signal(libc::SIGTERM));
}

/// The python3 that can import `mcp`, and the environment it needs for
/// that beyond the test's own world, or None (with the reason printed)
/// when there is none. Under BATON_REQUIRE_ALL=1 that is a failure.
fn python_with_mcp() -> Option<(PathBuf, Vec<(String, String)>)> {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import json, site, sys\n\
             import mcp\n\
             user = site.USER_SITE and mcp.__file__.startswith(site.USER_SITE)\n\
             print(json.dumps({'exe': sys.executable, 'userbase': site.USER_BASE if user else None}))",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let why = match &probe {
        Err(_) => "python3 is not installed",
        Ok(out) if !out.status.success() => {
            "the Python mcp package is not installed (pip install mcp)"
        }
        Ok(out) => match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) if v["exe"].is_string() => {
                let mut vars = Vec::new();
                // An --user install is found through HOME, which the test
                // replaces: name its base instead.
                if let Some(base) = v["userbase"].as_str() {
                    vars.push(("PYTHONUSERBASE".to_string(), base.to_string()));
                }
                return Some((PathBuf::from(v["exe"].as_str().unwrap()), vars));
            }
            _ => "python3 did not say where it is",
        },
    };
    if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
        panic!("{why}, but BATON_REQUIRE_ALL=1 requires it");
    }
    eprintln!("skipped: {why}");
    None
}

/// A pid of a `baton mcp` the Python session started, read from a
/// listing, once it is gone; panics (after killing it) if it lingers.
pub(crate) fn gone_after_session(pid: u32, what: &str) {
    if poll(EXIT_TIMEOUT, POLL, || (!pid_exists(pid)).then_some(())).is_some() {
        return;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if String::from_utf8_lossy(&cmdline).contains("mcp") {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is a
        // `baton mcp` this test started, still running.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    panic!("{what} (pid {pid}) still running {EXIT_TIMEOUT:?} after its session closed");
}

/// The exit status of `child`, a Python session in a process group of its
/// own, named `what`; panics (after killing the group, with what the
/// session wrote to `err_path`) if it runs over PYTHON_TIMEOUT.
pub(crate) fn session_status(child: &mut Child, what: &str, err_path: &Path) -> ExitStatus {
    if let Some(status) = exited(child, PYTHON_TIMEOUT) {
        return status;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; the group is the
    // one this test made for its own unreaped child.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.wait();
    panic!(
        "{what} ran over {PYTHON_TIMEOUT:?}; killed.\nstderr:\n{}",
        fs::read_to_string(err_path).unwrap_or_default()
    );
}

#[test]
fn a_real_mcp_client_hands_a_task_over() {
    let Some((python, py_vars)) = python_with_mcp() else {
        return;
    };
    let env = Env::new();
    let (wa, wb, wc) = (
        env.workspace("alpha"),
        env.workspace("beta"),
        env.workspace("gamma"),
    );
    let c = env.serve(&wc, &["--name", "gamma"]);
    // A task waits in beta's spool before session B starts: beta ran
    // once, so its spool exists, and is stopped when the task is sent.
    let mut first_b = env.serve(&wb, &["--name", "beta"]);
    assert_eq!(first_b.term(), 0, "{}", first_b.stderr());
    let out = env.run(&["send", "beta", "Waiting for you.", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["status"], "stored", "{v}");
    let waiting = v["message_id"].as_str().unwrap().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/session.py");

    // The world of env.cmd(), for Python and the servers it starts.
    let world: Vec<(OsString, OsString)> = env
        .cmd()
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect();
    let (out_path, out) = log_file(&env, "python", "out");
    let (err_path, err) = log_file(&env, "python", "err");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(crate::util::baton_bin())
        .args([&wa, &wb])
        .arg(&c.id)
        .arg(&waiting)
        .env_clear()
        .envs(world)
        .envs(py_vars)
        .current_dir(env.root.path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group, so a hung session can be stopped with
        // the servers it started.
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let status = session_status(&mut child, "the Python session", &err_path);
    let stdout = fs::read_to_string(&out_path).unwrap();
    let stderr = fs::read_to_string(&err_path).unwrap();
    assert!(
        status.success(),
        "session.py failed: {status}\nstderr:\n{stderr}"
    );
    let o: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("session.py printed no JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
    });
    let ctx = format!("session.py saw:\n{o:#}\nstderr:\n{stderr}");

    // Both sessions got the revision the SDK asked for if baton speaks it,
    // else the newest one baton speaks.
    let asked = o["asked"].as_str().unwrap_or_else(|| panic!("{ctx}"));
    let version = if SPOKEN.contains(&asked) {
        asked
    } else {
        NEWEST
    };
    for s in ["initialize_a", "initialize_b"] {
        assert_eq!(o[s]["protocolVersion"], version, "{ctx}");
        assert_eq!(o[s]["serverInfo"]["name"], "baton", "{ctx}");
    }
    assert_eq!(tool_names(&o["tools"]), TOOLS, "{ctx}");
    assert_eq!(o["faults"], json!([]), "{ctx}");

    // Every log message B's logging callback got also reached its message
    // handler, as a notification, in the same order.
    let notes_b = o["notes_b"].as_array().unwrap_or_else(|| panic!("{ctx}"));
    let logged: Vec<&Value> = notes_b
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| &n["params"])
        .collect();
    assert_eq!(
        logged,
        o["logs_b"].as_array().unwrap().iter().collect::<Vec<_>>(),
        "{ctx}"
    );
    let noticed = |mid: &str| -> Vec<&Value> {
        notes_b
            .iter()
            .filter(|n| n.to_string().contains(mid))
            .collect()
    };

    // The task that waited before session B began was announced once the
    // SDK had sent notifications/initialized: B's first notification.
    assert_eq!(
        notes_b.first(),
        Some(&json!({"method": "notifications/message", "params": {
            "level": "info", "logger": "baton",
            "data": format!("a task from (cli) waits ({waiting}); call check_inbox to take it"),
        }})),
        "{ctx}"
    );
    assert_eq!(noticed(&waiting).len(), 1, "{ctx}");
    assert_eq!(
        o["claim_waiting"]["structuredContent"]["message_id"], waiting,
        "{ctx}"
    );
    assert_eq!(
        text(&o["complete_waiting"]),
        format!("completed {waiting}."),
        "{ctx}"
    );

    // list_agents takes no argument: a tool error, not a listing.
    assert_tool_error(
        &o["agents_unknown_argument"],
        "Input validation error: list_agents takes no argument verbose",
    );

    // A sees B and the third instance, B sees A and the third: not
    // themselves.
    let agents = |k: &str| -> Vec<Value> {
        o[k]["structuredContent"]["agents"]
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}"))
            .clone()
    };
    let find = |list: &[Value], ws: &Path| -> Value {
        list.iter()
            .find(|x| x["workspace"] == ws.to_str().unwrap())
            .cloned()
            .unwrap_or_else(|| panic!("no agent in {} listed:\n{ctx}", ws.display()))
    };
    let (seen_by_a, seen_by_b) = (agents("agents_a"), agents("agents_b"));
    assert_eq!(seen_by_a.len(), 2, "{ctx}");
    assert_eq!(seen_by_b.len(), 2, "{ctx}");
    let b = find(&seen_by_a, &wb);
    let a = find(&seen_by_b, &wa);
    assert_eq!(find(&seen_by_a, &wc)["instance_id"], c.id.as_str(), "{ctx}");
    assert_eq!(find(&seen_by_b, &wc)["instance_id"], c.id.as_str(), "{ctx}");
    assert_eq!(
        (a["name"].as_str(), b["name"].as_str()),
        (Some("alpha"), Some("beta"))
    );
    let (a_id, b_id) = (
        a["instance_id"].as_str().unwrap(),
        b["instance_id"].as_str().unwrap(),
    );

    // The task is accepted...
    let sent = &o["send"];
    assert_eq!(sent["isError"], false, "{ctx}");
    assert_eq!(sent["structuredContent"]["status"], "accepted", "{ctx}");
    assert_eq!(sent["structuredContent"]["queue_position"], 1, "{ctx}");
    let mid = sent["structuredContent"]["message_id"].as_str().unwrap();
    assert!(
        text(sent).starts_with(&format!(
            "accepted: task {mid} is queued at position 1 on beta ({b_id})."
        )),
        "{ctx}"
    );

    // ...B's host hears of it...
    let logs = o["logs_b"].as_array().unwrap();
    assert!(
        logs.iter().any(|l| l["level"] == "info"
            && l["logger"] == "baton"
            && l["data"]
                == format!("a task from alpha arrived ({mid}); call check_inbox to take it")),
        "{ctx}"
    );

    // ...B takes it, may not send it on to C, and answers it.
    let claim = &o["claim"];
    assert_eq!(claim["isError"], false, "{ctx}");
    assert_eq!(claim["structuredContent"]["message_id"], mid, "{ctx}");
    assert_eq!(
        claim["structuredContent"]["sender"]["instance_id"], a_id,
        "{ctx}"
    );
    assert!(
        text(claim).contains("\nRun the unit tests in your workspace and tell me how many pass.\n"),
        "{ctx}"
    );
    // The envelope names complete_task as the way to reply, in the text
    // and in structuredContent, and never `baton send --reply`.
    let envelope = claim["structuredContent"]["envelope"]
        .as_str()
        .unwrap_or_else(|| panic!("{ctx}"));
    assert!(
        envelope.ends_with("\n[to reply: complete_task with a reply]\n</agent_relay>\n"),
        "{ctx}"
    );
    assert_eq!(
        text(claim),
        format!(
            "{envelope}\nWhen you are done, call complete_task with message_id \"{mid}\" and, if the sender should hear back, a short reply."
        ),
        "{ctx}"
    );
    for said in [envelope, text(claim)] {
        assert!(!said.contains("baton send"), "{ctx}");
    }
    assert_tool_error(
        &o["denied"],
        &format!(
            "not delivered: denied: {}",
            denied_reason("alpha", a_id, "gamma", &c.id)
        ),
    );
    assert_eq!(o["complete"]["isError"], false, "{ctx}");
    let sent_reply = &o["complete"]["structuredContent"]["reply"];
    assert_eq!(sent_reply["status"], "accepted", "{ctx}");
    assert_eq!(
        text(&o["complete"]),
        format!(
            "completed {mid}; the reply ({}) is in the sender's queue.",
            sent_reply["message_id"].as_str().unwrap()
        )
    );

    // A's inbox holds the reply, which answers its task.
    let reply = &o["reply"];
    assert_eq!(reply["isError"], false, "{ctx}");
    assert_eq!(reply["structuredContent"]["in_reply_to"], mid, "{ctx}");
    assert_eq!(
        reply["structuredContent"]["sender"]["instance_id"], b_id,
        "{ctx}"
    );
    assert!(text(reply).contains("\nAll 12 unit tests pass.\n"), "{ctx}");
    assert!(
        !text(reply).contains("(this sender cannot be replied to)"),
        "{ctx}"
    );
    let rid = reply["structuredContent"]["message_id"].as_str().unwrap();
    assert_eq!(
        text(&o["complete_reply"]),
        format!("completed {rid}."),
        "{ctx}"
    );
    assert_eq!(
        o["inbox_a_after"]["structuredContent"]["status"], "empty",
        "{ctx}"
    );

    assert_eq!(
        o["unknown_tool"],
        json!({"code": INVALID_PARAMS, "message": "Unknown tool: no_such_tool"}),
        "{ctx}"
    );

    // At level error B's host heard nothing of the task A sent then, not
    // even after info brought the notices back and the next task's came.
    assert_eq!(o["set_level_error"], json!({}), "{ctx}");
    assert_eq!(o["set_level_info"], json!({}), "{ctx}");
    for s in ["send_quiet", "send_loud"] {
        assert_eq!(o[s]["structuredContent"]["status"], "accepted", "{ctx}");
    }
    let quiet = o["send_quiet"]["structuredContent"]["message_id"]
        .as_str()
        .unwrap();
    let loud = o["send_loud"]["structuredContent"]["message_id"]
        .as_str()
        .unwrap();
    assert_eq!(o["quiet_noticed_in_wait"], Value::Null, "{ctx}");
    assert_eq!(noticed(quiet), Vec::<&Value>::new(), "{ctx}");
    assert_eq!(
        noticed(loud),
        vec![&json!({"method": "notifications/message", "params": {
            "level": "info", "logger": "baton",
            "data": format!("a task from alpha arrived ({loud}); call check_inbox to take it"),
        }})],
        "{ctx}"
    );

    // The SDK closed both sessions: their instances are gone, and so are
    // their manifests. Only the third instance remains.
    gone_after_session(a["pid"].as_u64().unwrap() as u32, "session A");
    gone_after_session(b["pid"].as_u64().unwrap() as u32, "session B");
    let left = manifests(&env.registry);
    assert_eq!(left, vec![c.manifest_path.clone()], "{ctx}");
}

/// alpha relays a task to the session `beta` and the session takes it;
/// returns alpha's client and the task's id.
fn task_from_alpha(
    a: &crate::util::Served,
    b: &mut Mcp,
    b_id: &str,
    body: &str,
) -> (crate::util::RawClient, String) {
    let mut ac = a.client();
    let r = ac.call(1, "relay/send", json!({"target": b_id, "body": body}));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let mid = r["result"]["message_id"].as_str().unwrap().to_string();
    let r = b.tool("check_inbox", json!({}));
    assert_eq!(r["structuredContent"]["message_id"], mid.as_str(), "{r}");
    (ac, mid)
}

/// Issue 18: a reply to a sender that has stopped was lost (`no_target`
/// in the transcript) while `complete_task` said it was "sending". It is
/// stored in the sender's spool, and `complete_task` says so.
#[test]
fn a_reply_to_a_stopped_sender_is_stored_and_said_so() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let mut a = env.serve(&wa, &["--name", "alpha"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    let (ac, mid) = task_from_alpha(&a, &mut b, &b_id, "Count the tests.");
    drop(ac);
    assert_eq!(a.term(), 0, "{}", a.stderr());

    let r = b.tool(
        "complete_task",
        json!({"message_id": mid, "reply": "There are 12."}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let reply = &r["structuredContent"]["reply"];
    assert_eq!(reply["status"], "stored", "{r}");
    let rid = reply["message_id"].as_str().unwrap();
    assert_eq!(
        text(&r),
        format!(
            "completed {mid}; the sender is not running: the reply ({rid}) waits in its spool and reaches it when it starts."
        )
    );
    // alpha finds the reply when it starts again.
    let a = env.serve(&wa, &["--name", "alpha"]);
    let mut ac = a.client();
    let got = ac.call(2, "inbox/claim", json!({}));
    assert_eq!(got["result"]["status"], "claimed", "{got}");
    assert_eq!(got["result"]["task"]["message_id"], rid, "{got}");
    assert_eq!(got["result"]["task"]["in_reply_to"], mid.as_str(), "{got}");
    b.finish();
}

/// Issue 18: a reply refused for the in-flight window (the session's own
/// tasks fill it) was dropped with a log line. A reply to a task the
/// receiver sent does not count against the window.
#[test]
fn a_reply_is_not_refused_for_the_in_flight_window() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let a = env.serve_with(&wa, &[("BATON_MAX_INFLIGHT", "1")], &["--name", "alpha"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    // A task of beta's own fills its window at alpha.
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": a.id, "message": "Review my branch."}),
    );
    assert_eq!(r["structuredContent"]["status"], "accepted", "{r}");
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": a.id, "message": "And the docs."}),
    );
    assert_eq!(r["structuredContent"]["status"], "inflight_full", "{r}");
    let (_ac, mid) = task_from_alpha(&a, &mut b, &b_id, "Count the tests.");
    // The reply still goes through.
    let r = b.tool(
        "complete_task",
        json!({"message_id": mid, "reply": "There are 12."}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["reply"]["status"], "accepted", "{r}");
    let rid = r["structuredContent"]["reply"]["message_id"]
        .as_str()
        .unwrap();
    assert_eq!(
        text(&r),
        format!("completed {mid}; the reply ({rid}) is in the sender's queue.")
    );
    b.finish();
}

/// Issue 18: a reply that cannot be delivered is reported to whoever
/// wrote it, with its status: `complete_task` is an error naming it.
#[test]
fn complete_task_reports_a_reply_that_was_not_delivered() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let mut a = env.serve(&wa, &["--name", "alpha", "--no-offline"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    let (ac, mid) = task_from_alpha(&a, &mut b, &b_id, "Count the tests.");
    drop(ac);
    assert_eq!(a.term(), 0, "{}", a.stderr());
    let r = b.tool("complete_task", json!({"message_id": mid, "reply": "12."}));
    assert_eq!(r["isError"], true, "{r}");
    let reply = &r["structuredContent"]["reply"];
    assert_eq!(reply["status"], "denied", "{r}");
    assert_eq!(
        text(&r),
        format!(
            "completed {mid}, but the reply was not delivered: denied: alpha is not running and does not take offline delivery (serve --no-offline)"
        )
    );
    b.finish();
}

/// Issue 18: the envelope told an MCP agent to run `baton send --reply`
/// in `structuredContent.envelope` and to call complete_task in the text.
/// One envelope, naming complete_task.
#[test]
fn the_envelope_tells_an_mcp_agent_to_reply_with_complete_task() {
    let env = Env::new();
    let (wa, wb) = (env.workspace("alpha"), env.workspace("beta"));
    let a = env.serve(&wa, &["--name", "alpha"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    let mut ac = a.client();
    let r = ac.call(1, "relay/send", json!({"target": b_id, "body": "Hi."}));
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let r = b.tool("check_inbox", json!({}));
    let envelope = r["structuredContent"]["envelope"].as_str().unwrap();
    assert!(
        envelope.ends_with("\n[to reply: complete_task with a reply]\n</agent_relay>\n"),
        "{envelope}"
    );
    assert!(!envelope.contains("baton send"), "{envelope}");
    assert!(text(&r).starts_with(envelope), "{r}");
    b.finish();
}

/// Issue 18: `logging/setLevel "error"` was acknowledged and ignored. A
/// level above `info` silences the arrival notices; `info` brings them
/// back; an unknown level is an error.
#[test]
fn set_level_is_honoured() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut m = Mcp::start(&env, &ws, &["--name", "proj"]);
    m.initialize(NEWEST);
    let r = m.request("logging/setLevel", json!({"level": "loud"}));
    assert_error(
        &r,
        INVALID_PARAMS,
        "invalid params: level must be one of emergency, alert, critical, error, warning, notice, info, debug",
    );
    let r = m.request("logging/setLevel", json!({"level": "error"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let sent = |env: &Env, body: &str| -> String {
        let out = env.run(&["send", "proj", body, "--json"]);
        assert_eq!(out.status, 0, "{out:?}");
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        v["message_id"].as_str().unwrap().to_string()
    };
    let quiet = sent(&env, "While it is quiet.");
    let r = m.request("logging/setLevel", json!({"level": "info"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let loud = sent(&env, "Now it is not.");
    m.wait_note("notifications/message", |p| {
        p["data"].as_str().is_some_and(|d| d.contains(&loud))
    });
    // Events come in order: the first task's notice would have come first.
    // (The channel push is no log message: the level does not apply to it.)
    assert!(
        !m.notes
            .iter()
            .any(|n| n["method"] == "notifications/message" && n.to_string().contains(&quiet)),
        "{:?}",
        m.notes
    );
    assert!(
        m.notes
            .iter()
            .any(|n| n["method"] == "notifications/claude/channel"
                && n["params"]["meta"]["message_id"] == quiet.as_str()),
        "{:?}",
        m.notes
    );
    m.finish();
}

/// Issue 18: a task waiting when the session starts produced no notice;
/// the host hears of it once it sends `notifications/initialized`.
#[test]
fn a_task_waiting_at_the_start_is_announced() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut s = env.serve(&ws, &["--name", "proj"]);
    assert_eq!(s.term(), 0, "{}", s.stderr());
    let out = env.run(&["send", "proj", "Waiting for you.", "--json"]);
    assert_eq!(out.status, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["status"], "stored", "{v}");
    let mid = v["message_id"].as_str().unwrap().to_string();
    let mut m = Mcp::start(&env, &ws, &["--name", "proj"]);
    m.initialize(NEWEST);
    let note = m.wait_note("notifications/message", |p| {
        p["data"].as_str().is_some_and(|d| d.contains(&mid))
    });
    assert_eq!(note["params"]["level"], "info", "{note}");
    assert_eq!(
        note["params"]["data"],
        format!("a task from (cli) waits ({mid}); call check_inbox to take it")
    );
    m.finish();
}

/// Issue 18: `list_agents` took unknown arguments despite
/// `additionalProperties: false`, and the `no_target` candidates listed
/// the session itself.
#[test]
fn unknown_arguments_are_refused_and_self_is_no_candidate() {
    let env = Env::new();
    let (wb, wc) = (env.workspace("beta"), env.workspace("gamma"));
    let c = env.serve(&wc, &["--name", "gamma"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    let (_, manifest) = b.manifest(&env);
    let b_id = manifest["instance_id"].as_str().unwrap().to_string();
    let r = b.tool("list_agents", json!({"verbose": true}));
    assert_tool_error(
        &r,
        "Input validation error: list_agents takes no argument verbose",
    );
    let r = b.tool("check_inbox", json!({"all": 1}));
    assert_tool_error(
        &r,
        "Input validation error: check_inbox takes no argument all",
    );
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": "nobody", "message": "Hi.", "mode": "steer"}),
    );
    assert_tool_error(
        &r,
        "Input validation error: send_agent_message takes no argument mode",
    );
    let r = b.tool(
        "send_agent_message",
        json!({"target_instance_id": "nobody", "message": "Hi."}),
    );
    assert_eq!(r["structuredContent"]["status"], "no_target", "{r}");
    let ids: Vec<&str> = r["structuredContent"]["candidates"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![c.id.as_str()], "not {b_id}: {r}");
    b.finish();
}

/// Issue 18: a second `baton mcp` for a spool in use answered no
/// `initialize`. It answers with an error naming the process that holds
/// the spool, and exits.
#[test]
fn a_second_session_on_a_spool_in_use_says_who_holds_it() {
    let env = Env::new();
    let ws = env.workspace("proj");
    let mut first = Mcp::start(&env, &ws, &["--name", "proj"]);
    first.initialize(NEWEST);
    let mut second = Mcp::start(&env, &ws, &["--name", "proj"]);
    let r = second.request(
        "initialize",
        json!({"protocolVersion": NEWEST, "capabilities": {},
               "clientInfo": {"name": "baton-tests", "version": "0"}}),
    );
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("baton mcp cannot serve this session: "),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {}", first.pid())),
        "{message}"
    );
    let status = second.wait_exit();
    assert_ne!(status.code(), Some(0), "{}", second.stderr());
    second.drain();
    first.finish();
}

/// `send_agent_message` with `wait_seconds` waits for the outcome and the
/// reply of an exec agent with `--reply`; `task_status` then says done.
/// A target that keeps the task queued (a pull agent nobody serves) is
/// "still queued" when the bound passes, which is no error; `task_status`
/// knows only this session's tasks, and `wait_seconds` is checked.
#[test]
fn send_waits_for_the_outcome_and_task_status_follows_it() {
    let env = Env::new();
    let (wb, wr, wq) = (
        env.workspace("beta"),
        env.workspace("echo"),
        env.workspace("idle"),
    );
    let mut r = env.serve(
        &wr,
        &[
            "--name",
            "echo",
            "--exec",
            "cat >/dev/null; echo hi",
            "--reply",
        ],
    );
    let mut q = env.serve(&wq, &["--name", "idle"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);

    let list = b.request("tools/list", json!({}))["result"].clone();
    let tools = list["tools"].as_array().unwrap();
    let send = tools
        .iter()
        .find(|t| t["name"] == "send_agent_message")
        .unwrap();
    let w = &send["inputSchema"]["properties"]["wait_seconds"];
    assert_eq!(
        (&w["type"], &w["minimum"], &w["maximum"]),
        (&json!("integer"), &json!(0), &json!(600)),
        "{send}"
    );
    let ts = tools.iter().find(|t| t["name"] == "task_status").unwrap();
    assert_eq!(ts["inputSchema"]["required"], json!(["message_id"]), "{ts}");
    assert_eq!(ts["inputSchema"]["additionalProperties"], false, "{ts}");

    let res = b.tool(
        "send_agent_message",
        json!({"target_instance_id": r.id, "message": "say hi", "wait_seconds": 60}),
    );
    assert_eq!(res["isError"], false, "{res}");
    let sc = &res["structuredContent"];
    assert_eq!(sc["status"], "accepted", "{res}");
    assert_eq!(sc["outcome"], "done", "{res}");
    assert_eq!(sc["reply"], "hi\n", "{res}");
    assert_eq!(text(&res), "done: hi\n");
    let mid = sc["message_id"].as_str().unwrap().to_string();

    let st = b.tool("task_status", json!({"message_id": mid}));
    assert_eq!(st["isError"], false, "{st}");
    assert_eq!(st["structuredContent"]["status"], "done", "{st}");
    assert_eq!(st["structuredContent"]["message_id"], mid.as_str(), "{st}");
    assert_eq!(st["structuredContent"]["reply"]["body"], "hi\n", "{st}");
    assert_eq!(text(&st), "done: hi\n");

    // Nobody takes the task at idle: still queued after the bound.
    let started = Instant::now();
    let res = b.tool(
        "send_agent_message",
        json!({"target_instance_id": q.id, "message": "wait here", "wait_seconds": 1}),
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < READ_TIMEOUT,
        "{took:?} {res}"
    );
    assert_eq!(res["isError"], false, "{res}");
    let sc = &res["structuredContent"];
    assert_eq!(sc["status"], "accepted", "{res}");
    assert_eq!(sc["outcome"], Value::Null, "{res}");
    assert_eq!(sc["reply"], Value::Null, "{res}");
    assert_eq!(sc["task_status"], "queued", "{res}");
    let qid = sc["message_id"].as_str().unwrap().to_string();
    assert!(
        text(&res).ends_with(&format!(
            "It is still queued after 1 s; call task_status with message_id \"{qid}\" to ask again."
        )),
        "{res}"
    );
    let st = b.tool("task_status", json!({"message_id": qid}));
    assert_eq!(st["isError"], false, "{st}");
    assert_eq!(st["structuredContent"]["status"], "queued", "{st}");
    assert_eq!(st["structuredContent"]["queue_position"], 1, "{st}");
    // wait_seconds 0 asks once.
    let res = b.tool(
        "send_agent_message",
        json!({"target_instance_id": "idle", "message": "and this", "wait_seconds": 0}),
    );
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["structuredContent"]["task_status"], "queued", "{res}");

    // Checked arguments.
    for bad in [json!(601), json!(-1), json!(1.5), json!("5")] {
        let res = b.tool(
            "send_agent_message",
            json!({"target_instance_id": q.id, "message": "x", "wait_seconds": bad}),
        );
        assert_tool_error(
            &res,
            "Input validation error: wait_seconds must be an integer from 0 to 600",
        );
    }
    let res = b.tool("task_status", json!({"message_id": "not-ours"}));
    assert_tool_error(
        &res,
        "task_status knows only the tasks this session sent with send_agent_message, and not-ours is not one of them.",
    );
    let res = b.tool("task_status", json!({"message_id": 7}));
    assert_tool_error(&res, "Input validation error: message_id must be a string");
    let res = b.tool("task_status", json!({"message_id": "x", "target": "idle"}));
    assert_tool_error(
        &res,
        "Input validation error: task_status takes no argument target",
    );

    b.finish();
    assert_eq!(q.term(), 0, "{}", q.stderr());
    assert_eq!(r.term(), 0, "{}", r.stderr());
}

/// A wait in progress does not hold the session past SIGTERM.
#[test]
fn sigterm_ends_a_session_that_is_waiting() {
    let env = Env::new();
    let (wb, wq) = (env.workspace("beta"), env.workspace("idle"));
    let mut q = env.serve(&wq, &["--name", "idle"]);
    let mut b = Mcp::start(&env, &wb, &["--name", "beta"]);
    b.initialize(NEWEST);
    b.next_id += 1;
    let id = json!(b.next_id);
    let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "send_agent_message",
        "arguments": {"target_instance_id": q.id, "message": "wait here", "wait_seconds": 600},
    }});
    b.send_line(&req.to_string());
    wait_until("the task queued at idle", READ_TIMEOUT, || {
        q.queued(&mut q.client()) == 1
    });
    let started = Instant::now();
    b.signal(libc::SIGTERM);
    let status = b.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", b.stderr());
    assert!(started.elapsed() < EXIT_TIMEOUT);
    let r = b.response(&id);
    assert!(
        text(&r["result"]).ends_with("The session is ending, so the wait stopped."),
        "{r}"
    );
    assert_eq!(q.term(), 0, "{}", q.stderr());
}
