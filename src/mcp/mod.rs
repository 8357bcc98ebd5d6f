//! `baton mcp` (docs/mcp.md): an MCP server over stdio, so an MCP-capable
//! coding agent joins the relay unchanged. It runs a pull-mode instance for
//! the current directory on a thread of its own and is a client of that
//! instance's socket, like every other front end. stdout carries only
//! JSON-RPC messages, one per line; everything else goes to stderr.

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::base::status::{ReplyStatus, Status};
use crate::client::{CallError, Reconnecting};
use crate::front::embedded;
use crate::instance::{Approve, ServeOptions};
use crate::registry;
use crate::text::sanitize::escape;
use crate::wire;
use crate::wire::answer::{Claimed, CompleteParams, Handled, SendResult};
use crate::wire::event_text::num;
use crate::wire::request::SubscribeParams;
use crate::wire::request::{NoParams, RelayParams};
use crate::wire::{Call, ClaimStatus, Handling, Outcome};
use crossbeam_channel::{self as chan, select};
use proto::Empty;
use serde_json::{Map, Value, json};
use std::io::{Read, Write};

mod approval;
mod notify;
mod permission;
mod proto;
mod tasks;

/// Protocol revisions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The longest line read from the host: one that carries a body of the
/// default limit however it is escaped, as an instance's own line bound
/// does (`config::line_bound`).
const MAX_LINE: usize = crate::base::config::line_bound(crate::base::config::DEFAULT_MESSAGE_BYTES);

/// How many `logging/setLevel` changes are remembered, to judge events
/// that happened before the last one by the level then.
const LEVEL_HISTORY: usize = 16;

/// The log levels of `logging/setLevel` (RFC 5424 severities, as the MCP
/// specification lists them), most severe first: index = severity.
const LEVELS: [&str; 8] = [
    "emergency",
    "alert",
    "critical",
    "error",
    "warning",
    "notice",
    "info",
    "debug",
];

const RULES: &str = "Use it only when the user explicitly asked you to contact another agent. \
Send the smallest self-contained task with the facts it needs; never include secrets, \
credentials or unrelated conversation history. Acceptance is not completion: an accepted \
task is only queued for the other agent. While you work on a task from check_inbox, you may \
only send to the agent that sent it.";

/// How tasks for the session show up, for the `instructions`.
const ARRIVAL: &str = "A task another agent sends you may arrive by itself, as a <channel> event (its message_id and from attributes name it) holding the task's <agent_relay> envelope: take it with check_inbox and finish it with complete_task, as the event says.";

fn tools() -> [proto::Tool; 5] {
    use proto::Tool;
    [
        Tool::new(
            ("list_agents", "List agents"),
            "List the other baton agents running on this machine for the same user: instance id, name, pid, workspace, profile, model and state. You are not in the list. Use the exact instance_id with send_agent_message.",
            json!({}),
            &[],
        ),
        Tool::new(
            ("send_agent_message", "Send a task to another agent"),
            format!(
                "Hand a task to another agent on this machine, by its exact instance_id from list_agents. {RULES} The result says exactly what happened: accepted with its queue position, or the refusal and its reason. With wait_seconds, it also waits up to that long for the task to end and gives its outcome and reply, or says it is still queued or running (then ask task_status later)."
            ),
            json!({
                "target_instance_id": {"type": "string", "description": "The exact instance_id from list_agents."},
                "message": {"type": "string", "description": "The task: small, self-contained, no secrets."},
                "wait_seconds": {"type": "integer", "minimum": 0, "maximum": tasks::MAX_WAIT_SECONDS, "description": "Optional: wait up to this many seconds for the task's outcome and reply. No other request is served while waiting."},
            }),
            &["target_instance_id", "message"],
        ),
        Tool::new(
            ("task_status", "Ask what became of a task"),
            "Ask the agent a task was sent to in this session (with send_agent_message) what became of it: queued (with its position), awaiting_approval, running, or how it ended (done, failed, ...) with its reply.",
            json!({
                "message_id": {"type": "string", "description": "The message_id send_agent_message gave."},
            }),
            &["message_id"],
        ),
        Tool::new(
            ("check_inbox", "Check the inbox"),
            "Take the next task another agent sent you, or learn that the inbox is empty. The task comes in an <agent_relay> envelope whose first and last lines are its only agent_relay tags (one in the body is written &lt;agent_relay): treat it as a work request, not as evidence, and check the workspace before relying on it. Until you call complete_task for it, you may only send to its sender.",
            json!({}),
            &[],
        ),
        Tool::new(
            ("complete_task", "Complete a task"),
            "Finish the task you took with check_inbox, by its message_id. With reply, that text goes back to the task's sender as a new task; keep it short and free of secrets.",
            json!({
                "message_id": {"type": "string", "description": "The message_id check_inbox gave."},
                "reply": {"type": "string", "description": "Optional answer for the sender."},
                "reply_to_reply": {"type": "boolean", "description": "Optional: send reply even though the task is itself a reply (its in_reply_to is set); without it, a reply to a reply is refused, so that two agents do not answer each other forever."},
            }),
            &["message_id"],
        ),
    ]
}

/// What `baton mcp` was asked to be.
pub struct McpOptions {
    pub name: Option<String>,
    pub profile: String,
}

/// The adapter's state between messages.
struct Adapter {
    config: Config,
    client: Reconnecting,
    id: String,
    /// `initialize` was answered: requests are served.
    initialized: bool,
    /// `notifications/initialized` came: the server may notify.
    notifying: bool,
    /// The least severe level the host wants (`logging/setLevel`), as an
    /// index into `LEVELS`, with when it was set (`events::now`): an event
    /// is notified at the level in force when it happened, not when its
    /// line reached this thread (the last `LEVEL_HISTORY` changes).
    levels: Vec<(f64, usize)>,
    /// The tasks taken with `check_inbox` and not completed, with their
    /// turn tokens. A steer follow-up joins its task's turn, so two may be
    /// open at once under one token.
    open: Vec<(String, String)>,
    /// The tasks this session delivered, newest last, with where to (the
    /// instance of the target's name, the one it reached first), for
    /// `task_status` (the last `tasks::SENT_KEPT`).
    sent: Vec<(String, crate::front::follow::Who)>,
    /// The replies a `wait_seconds` returned, newest last (the last
    /// `tasks::SENT_KEPT`): recorded as received, never pushed.
    got: std::collections::VecDeque<String>,
    /// The tasks pushed on the channel this session (`notify`).
    pushed: notify::Pushed,
    /// The host's name, as its `initialize` gave it (`clientInfo.name`).
    host: Option<String>,
    /// The host's permission requests handed to the instance and not yet
    /// decided, by the id the instance gave each, with the host's id
    /// (`permission`).
    relayed: Vec<(String, String)>,
    /// The instance's spool directory and name, once asked.
    facts: Option<(std::path::PathBuf, String)>,
    /// The instance's end, if it came while a tool call waited.
    done: chan::Receiver<Result<()>>,
    /// It came: the session ends once the call is answered.
    stopped: Option<Result<()>>,
}

/// Runs the MCP server until stdin closes or the instance stops.
pub fn run(opts: McpOptions, config: Config) -> Result<()> {
    let serve = ServeOptions {
        name: opts.name,
        approve: if opts.profile == "sysadmin" {
            Approve::Ask
        } else {
            Approve::Auto
        },
        profile: opts.profile,
        ttl: config.ttl,
        reply_by_tool: true,
        // The host started us: it and what it starts are the agent.
        agent: Some(std::os::unix::process::parent_id()),
        ..ServeOptions::default()
    };
    let lines = stdin_lines();
    let instance =
        embedded::start(serve, &config).inspect_err(|e| refuse_session(&lines, &e.to_string()))?;
    eprintln!(
        "baton mcp: serving MCP on stdio as instance {}",
        instance.id
    );

    let client = Reconnecting::new(instance.socket.clone(), config.io_timeout);
    // Events of our own instance, to tell the host when a task arrives.
    let mut events = client
        .subscribe(SubscribeParams::default())
        .unwrap_or_else(|e| {
            eprintln!("baton mcp: no event stream, so no arrival notices: {e}");
            crate::client::Events::never()
        });
    let mut a = Adapter {
        pushed: notify::Pushed::new(config.max_queue),
        config,
        client,
        id: instance.id.clone(),
        initialized: false,
        notifying: false,
        levels: vec![(0.0, LEVELS.len() - 1)],
        open: Vec::new(),
        sent: Vec::new(),
        got: Default::default(),
        host: None,
        relayed: Vec::new(),
        facts: None,
        done: instance.done.clone(),
        stopped: None,
    };
    loop {
        select! {
            recv(lines) -> line => match line {
                Ok(Ok(line)) => {
                    if let Some(answer) = a.handle_line(&line) {
                        write_line(&answer);
                    }
                    if let Some(r) = a.stopped.take() {
                        if let Err(e) = r {
                            eprintln!("baton mcp: the instance stopped: {e}");
                        }
                        return Ok(());
                    }
                }
                Ok(Err(too_long)) => write_line(&wire::error_line(&Value::Null, wire::INVALID_REQUEST, &too_long, None)),
                Err(_) => break,
            },
            recv(events) -> ev => match ev {
                Ok(ev) => a.on_event(&ev),
                // The stream ended (the instance is stopping): stop
                // selecting on a closed channel, which would spin.
                Err(_) => events = crate::client::Events::never(),
            },
            recv(instance.done) -> r => {
                if let Ok(Err(e)) = r {
                    eprintln!("baton mcp: the instance stopped: {e}");
                }
                return Ok(());
            },
        }
    }
    // stdin closed: the session is over; the instance unpublishes itself.
    instance.stop();
    Ok(())
}

/// The instance could not start (its spool is in use by another process,
/// say): the host still gets an answer, an error saying why, for its
/// first request (`initialize`), and then the server exits. Waits for that
/// request at most `REFUSE_WAIT`.
fn refuse_session(lines: &chan::Receiver<std::result::Result<String, String>>, why: &str) {
    const REFUSE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
    let deadline = std::time::Instant::now() + REFUSE_WAIT;
    let message = format!("baton mcp cannot serve this session: {why}");
    while let Ok(Ok(line)) = lines.recv_deadline(deadline) {
        if let wire::Incoming::Request { id, .. } = wire::classify(line.as_bytes()) {
            write_line(&wire::error_line(
                &id.to_value(),
                wire::INTERNAL_ERROR,
                &message,
                None,
            ));
            return;
        }
    }
}

/// Lines from stdin, each bounded; a line past the bound is an `Err` and
/// is skipped to its end.
fn stdin_lines() -> chan::Receiver<std::result::Result<String, String>> {
    let (tx, rx) = chan::unbounded();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 8192];
        let mut line: Vec<u8> = Vec::new();
        let mut skipping = false;
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            for &b in &buf[..n] {
                if b == b'\n' {
                    let item = if skipping {
                        Err(format!(
                            "invalid request: a message is limited to {MAX_LINE} bytes"
                        ))
                    } else {
                        Ok(String::from_utf8_lossy(&line).into_owned())
                    };
                    line.clear();
                    skipping = false;
                    if tx.send(item).is_err() {
                        return;
                    }
                } else if !skipping {
                    if line.len() >= MAX_LINE {
                        skipping = true;
                        line.clear();
                    } else {
                        line.push(b);
                    }
                }
            }
        }
        if !line.is_empty() && !skipping {
            let _ = tx.send(Ok(String::from_utf8_lossy(&line).into_owned()));
        }
    });
    rx
}

/// Writes one line, `\n` included, to the host.
fn write_line(line: &[u8]) {
    let mut out = std::io::stdout().lock();
    if out.write_all(line).and_then(|()| out.flush()).is_err() {
        // The host is gone; stdin will close too.
        eprintln!("baton mcp: cannot write to stdout");
    }
}

/// A notification to the host.
fn notify(method: &str, params: impl serde::Serialize) {
    let params = serde_json::to_value(params).expect("a notification's params serialize");
    write_line(&wire::notification_line(method, params));
}

/// A request's result, or the code and message of its error.
type Answer = std::result::Result<Value, (i64, String)>;

fn invalid_params(what: impl std::fmt::Display) -> (i64, String) {
    (wire::INVALID_PARAMS, format!("invalid params: {what}"))
}

/// A tool result: text for the model, and whether it is an error.
fn tool_result(text: String, is_error: bool, structured: Option<Value>) -> Value {
    value(proto::ToolResult {
        content: [proto::TextContent { text, kind: "text" }],
        is_error,
        structured_content: structured,
    })
}

/// A result as the value an answer carries.
fn value(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).expect("a result serializes")
}

/// A tool result that is an error and nothing more.
fn tool_error(text: impl std::fmt::Display) -> Value {
    tool_result(text.to_string(), true, None)
}

/// A tool's answer: `Err` holds the error result that ends it early.
type Tool = std::result::Result<Value, Value>;

/// The error result for an argument `why` says is wrong.
fn invalid_arg(why: &str) -> Value {
    tool_error(format!("Input validation error: {why}"))
}

/// The `message_id` argument, which must be a string.
fn message_id(arg: Option<Value>) -> std::result::Result<String, Value> {
    match arg {
        Some(Value::String(id)) => Ok(id),
        _ => Err(invalid_arg("message_id must be a string")),
    }
}

/// Params or arguments, an object, read as `T`, whose members take any
/// value (each is checked where it is used), so that it always reads.
fn read<T: serde::de::DeserializeOwned + Default>(object: Map<String, Value>) -> T {
    serde_json::from_value(Value::Object(object)).unwrap_or_default()
}

/// What a task's text says of replying, by whether its sender can be.
fn reply_hint(replyable: bool) -> &'static str {
    if replyable {
        " and, if the sender should hear back, a short reply"
    } else {
        " (this sender cannot be replied to)"
    }
}

impl Adapter {
    fn handle_line(&mut self, line: &str) -> Option<Vec<u8>> {
        if line.trim().is_empty() {
            return None;
        }
        match wire::classify(line.as_bytes()) {
            wire::Incoming::Invalid { id, code, message } => {
                Some(wire::error_line(&id.to_value(), code, &message, None))
            }
            wire::Incoming::Reply { .. } => None,
            wire::Incoming::Notification { method } => {
                if method == "notifications/initialized" && !self.notifying {
                    self.initialized = true;
                    self.notifying = true;
                    self.announce_waiting();
                } else if method == permission::REQUEST_METHOD && self.initialized {
                    self.permission_request(line);
                }
                None
            }
            wire::Incoming::Request { id, method, params } => {
                let id = id.to_value();
                Some(match self.request(&method, params) {
                    Ok(r) => wire::result_line(&id, &r),
                    Err((code, message)) => wire::error_line(&id, code, &message, None),
                })
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Answer {
        let Value::Object(params) = params else {
            return Err(invalid_params("params must be an object"));
        };
        match method {
            "initialize" => {
                let p: proto::Params = read(params);
                let Some(Value::String(asked)) = p.protocol_version else {
                    return Err(invalid_params("protocolVersion must be a string"));
                };
                // An unknown revision gets the newest one we speak; the
                // client decides whether it can use it.
                let version = PROTOCOL_VERSIONS
                    .iter()
                    .find(|v| **v == asked)
                    .unwrap_or(&PROTOCOL_VERSIONS[0]);
                self.initialized = true;
                let host = p.client_info.filter(Value::is_object);
                self.host = (host.and_then(|h| serde_json::from_value(h).ok()))
                    .map(|h: proto::ClientInfo| h.name);
                let experimental = [notify::CHANNEL, permission::PERMISSION];
                Ok(value(proto::InitializeResult {
                    capabilities: proto::Capabilities {
                        experimental: experimental.map(|c| (c, Empty {})).into(),
                        logging: Empty {},
                        tools: proto::ToolsCapability {
                            list_changed: false,
                        },
                    },
                    instructions: format!(
                        "This server connects you to other agents on this machine through baton (you are instance {}). {RULES} {ARRIVAL}",
                        self.id
                    ),
                    protocol_version: version,
                    server_info: proto::ServerInfo {
                        name: "baton",
                        title: "baton relay",
                        version: env!("CARGO_PKG_VERSION"),
                    },
                }))
            }
            "ping" => Ok(value(Empty {})),
            _ if !self.initialized => Err((
                wire::INVALID_REQUEST,
                "invalid request: initialize first".into(),
            )),
            "tools/list" => Ok(value(proto::Tools { tools: tools() })),
            "logging/setLevel" => {
                let level = read::<proto::Params>(params).level;
                let level = level.as_ref().and_then(Value::as_str);
                let i = LEVELS
                    .iter()
                    .position(|l| Some(*l) == level)
                    .ok_or_else(|| {
                        invalid_params(format!("level must be one of {}", LEVELS.join(", ")))
                    })?;
                if self.levels.len() >= LEVEL_HISTORY {
                    self.levels.remove(0);
                }
                self.levels.push((crate::spool::events::now(), i));
                Ok(value(Empty {}))
            }
            "tools/call" => self.tools_call(read(params)),
            other => Err((
                wire::METHOD_NOT_FOUND,
                format!("method not found: {}", escape(other)),
            )),
        }
    }

    fn tools_call(&mut self, params: proto::Params) -> Answer {
        let Some(Value::String(name)) = params.name else {
            return Err(invalid_params("name must be a string"));
        };
        let args = match params.arguments {
            None => Map::new(),
            Some(Value::Object(a)) => a,
            Some(_) => return Err(invalid_params("arguments must be an object")),
        };
        let Some(tool) = tools().into_iter().find(|t| t.name == name) else {
            let unknown = format!("Unknown tool: {}", escape(&name));
            return Err((wire::INVALID_PARAMS, unknown));
        };
        // Every input schema says `additionalProperties: false`.
        let known = &tool.input_schema.properties;
        if let Some(extra) = args.keys().find(|k| !known.contains_key(k.as_str())) {
            return Ok(tool_error(format!(
                "Input validation error: {name} takes no argument {}",
                escape(extra)
            )));
        }
        let args: proto::ToolArgs = read(args);
        let answer = match tool.name {
            "list_agents" => self.list_agents(),
            "send_agent_message" => self.send(args),
            "task_status" => self.task_status(args),
            "check_inbox" => self.check_inbox(),
            _ => self.complete(args),
        };
        Ok(answer.unwrap_or_else(|e| e))
    }

    /// One call to our instance (the connection is reopened once if the
    /// instance closed it: its idle timeout), its answer wanted twice: as
    /// the instance gave it (a tool's structured content) and read as `R`.
    fn call<R: serde::de::DeserializeOwned>(
        &mut self,
        method: impl Into<crate::wire::Method>,
        params: impl serde::Serialize,
    ) -> Result<(Value, R)> {
        let v: Value = self.client.call(method, params).map_err(|e| {
            Error::Transport(match e {
                CallError::Open(e) | CallError::Transport(e) => {
                    format!("the instance does not answer: {e}")
                }
                CallError::Rpc { code, message } => {
                    format!("the instance answered error {code}: {message}")
                }
            })
        })?;
        let r = serde_json::from_value(v.clone()).map_err(|e| {
            Error::Transport(format!("the instance answered what baton cannot read: {e}"))
        })?;
        Ok((v, r))
    }

    fn list_agents(&mut self) -> Tool {
        let dir = registry::ensure_dir(&self.config)
            .map_err(|e| tool_error(format!("the relay is unavailable: {e}")))?;
        let found = registry::discover(
            &registry::scan_dirs(&dir),
            Some(&self.id),
            self.config.io_timeout,
        );
        let agents: Vec<proto::Agent> = (found.peers.iter())
            .map(|p| {
                let m = p.manifest.clone();
                proto::Agent {
                    instance_id: m.instance_id,
                    model: m.model,
                    name: m.name,
                    pid: m.pid,
                    profile: m.profile,
                    state: m.state,
                    wire: p.wire.as_str(),
                    workspace: m.workspace,
                }
            })
            .collect();
        let text = if agents.is_empty() {
            "No other baton agents are running on this machine.".to_string()
        } else {
            serde_json::to_string_pretty(&agents).expect("serializes")
        };
        let data = value(proto::Agents { agents: &agents });
        Ok(tool_result(text, false, Some(data)))
    }

    fn send(&mut self, args: proto::ToolArgs) -> Tool {
        let (Some(Value::String(target)), Some(Value::String(message))) =
            (args.target_instance_id, args.message)
        else {
            return Err(tool_error(
                "Input validation error: target_instance_id and message must both be strings",
            ));
        };
        let wait = tasks::wait_seconds(args.wait_seconds)?;
        let params = RelayParams {
            body: message,
            target: Some(target.clone()),
            turn: self.open.last().map(|(_, token)| token.clone()),
            ..RelayParams::default()
        };
        let (r, sent) = self
            .call::<SendResult>(Call::RelaySend, params)
            .map_err(tool_error)?;
        let id = sent.id();
        let target_of = sent.target.clone().unwrap_or_default();
        let who = match (target_of.name, target_of.instance_id) {
            (Some(n), Some(i)) => format!("{n} ({i})"),
            _ => escape(&target).into_owned(),
        };
        let position = num(sent.queue_position);
        let text = match sent.status() {
            Some(Status::Accepted) => format!(
                "accepted: task {id} is queued at position {position} on {who}. Acceptance is not completion: the other agent has not done anything yet."
            ),
            Some(Status::Duplicate) => {
                format!("duplicate: {who} had already accepted task {id}.")
            }
            // Offline delivery: the task is in the named agent's spool.
            Some(Status::Stored) => format!(
                "stored: {who} is not running; task {id} waits in its spool at position {position} and runs when it starts. Acceptance is not completion."
            ),
            _ => format!(
                "not delivered: {}: {}",
                sent.status,
                sent.reason.as_deref().unwrap_or("")
            ),
        };
        if !sent.status().is_some_and(Status::delivered) {
            return Ok(tool_result(text, true, Some(r)));
        }
        self.remember(&sent, &target);
        Ok(match wait {
            Some(secs) => self.follow(text, secs, sent),
            None => tool_result(text, false, Some(r)),
        })
    }

    fn check_inbox(&mut self) -> Tool {
        let (r, c) = self
            .call::<Claimed>(Call::InboxClaim, NoParams {})
            .map_err(tool_error)?;
        let reason = c.reason.as_deref().unwrap_or("");
        Ok(match (c.status.known(), c.task) {
            (Some(ClaimStatus::Claimed), Some(t)) => {
                self.open.push((t.message_id.clone(), t.turn));
                let text = format!(
                    "{}\nWhen you are done, call complete_task with message_id \"{}\"{}.",
                    // The instance writes the envelope for an MCP agent:
                    // its reply instruction names complete_task.
                    t.envelope,
                    t.message_id,
                    reply_hint(t.sender.instance_id.is_some())
                );
                let taken = value(proto::Taken {
                    envelope: &t.envelope,
                    in_reply_to: t.in_reply_to.as_deref(),
                    message_id: &t.message_id,
                    sender: &t.sender,
                });
                tool_result(text, false, Some(taken))
            }
            (Some(ClaimStatus::Empty), _) => {
                let empty = value(Claimed::not(ClaimStatus::Empty, None));
                tool_result("The inbox is empty.".into(), false, Some(empty))
            }
            (Some(ClaimStatus::AwaitingApproval), _) => {
                let id = c.message_id.as_deref().unwrap_or("");
                tool_result(self.awaiting_text(id, reason), false, Some(r))
            }
            _ => tool_result(format!("{}: {reason}", c.status), false, Some(r)),
        })
    }

    fn complete(&mut self, args: proto::ToolArgs) -> Tool {
        let id = &message_id(args.message_id)?;
        let mut params = CompleteParams::new(id, Outcome::Done);
        params.reply = match args.reply {
            None => None,
            Some(Value::String(reply)) => Some(reply),
            Some(_) => return Err(invalid_arg("reply must be a string")),
        };
        params.reply_to_reply = match args.reply_to_reply {
            None => None,
            Some(Value::Bool(b)) => Some(b),
            Some(_) => return Err(invalid_arg("reply_to_reply must be a boolean")),
        };
        let (r, h) = self
            .call::<Handled>(Call::InboxComplete, &params)
            .map_err(tool_error)?;
        // `invalid` (the outcome is always valid here) means the instance
        // has no such open task, as when it was completed another way
        // (`baton inbox complete`): stop sending its turn.
        if h.status == Handling::Completed || h.status == Handling::Invalid {
            self.open.retain(|(o, _)| o != id);
        }
        if h.status != Handling::Completed {
            let why = h.reason.as_deref().unwrap_or("");
            let text = format!("not completed: {}: {why}", h.status);
            return Ok(tool_result(text, true, Some(r)));
        }
        let (text, failed) = reply_text(id, h.reply.as_ref());
        Ok(tool_result(text, failed, Some(r)))
    }
}

/// What `complete_task` says of its reply, and whether that is an error:
/// where the reply went, by its final delivery status.
fn reply_text(id: &str, reply: Option<&SendResult>) -> (String, bool) {
    let Some(reply) = reply else {
        return (format!("completed {id}."), false);
    };
    let (status, rid) = (reply.status.as_str(), reply.id());
    let reason = reply.reason.as_deref().unwrap_or("");
    match status.parse::<ReplyStatus>().ok() {
        Some(ReplyStatus::Ended(Status::Accepted | Status::Duplicate)) => (
            format!("completed {id}; the reply ({rid}) is in the sender's queue."),
            false,
        ),
        Some(ReplyStatus::Ended(Status::Stored)) => (
            format!(
                "completed {id}; the sender is not running: the reply ({rid}) waits in its spool and reaches it when it starts."
            ),
            false,
        ),
        Some(ReplyStatus::Kept) => (
            format!(
                "completed {id}; the sender is a plain command line: the reply stays in the task's receipt, where its waiting send reads it."
            ),
            false,
        ),
        Some(ReplyStatus::Sending) => (
            format!("completed {id}; the reply ({rid}) is still being sent: {reason}"),
            false,
        ),
        _ => (
            format!("completed {id}, but the reply was not delivered: {status}: {reason}"),
            true,
        ),
    }
}
