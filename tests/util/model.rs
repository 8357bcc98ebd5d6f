//! Stand-in model servers for the real agent hosts (tests/hosts.rs): an
//! HTTP/1.1 server on 127.0.0.1 that answers as Anthropic's Messages API
//! (`POST /v1/messages`, Claude Code) or OpenAI's Responses API (`POST
//! /v1/responses`, Codex) does, with server-sent events, from a script the
//! test gives: a queue of model turns, each a text message or one tool
//! call. Every request it gets is recorded, headers and body, as evidence
//! of what the host sent the model.
//!
//! One thread accepts, one thread serves each connection; every response
//! ends with `Connection: close` (a streamed one is close-delimited), so
//! no connection is kept alive between requests. Any other request (Claude
//! Code's `count_tokens`, a request without `stream`, an unknown path) is
//! recorded and answered minimally: it never takes a turn of the script.
//! A request that finds the script empty gets the text `(script
//! exhausted)`, so a host that asks once too often ends its turn instead
//! of waiting. A turn can be held (`ModelServer::hold`): its answer waits
//! until the test opens the gate, as a slow model's would, so the test
//! can look at the world while the host waits in the middle of a run.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a connection may sit silent before its thread gives up.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// What a model says when the script has no turn left.
pub const EXHAUSTED: &str = "(script exhausted)";

/// One turn of the model.
#[derive(Clone, Debug)]
pub enum Turn {
    /// An assistant message with this text; the turn ends.
    Text(String),
    /// A call of the tool `name` with `input`; the host runs it and asks
    /// again with the result.
    Tool { name: String, input: Value },
    /// The model fails the request with this message (the Responses API's
    /// `response.failed`, the Messages API's `error` event).
    Fail(String),
}

impl Turn {
    pub fn text(text: &str) -> Turn {
        Turn::Text(text.to_string())
    }

    pub fn fail(message: &str) -> Turn {
        Turn::Fail(message.to_string())
    }

    pub fn tool(name: &str, input: Value) -> Turn {
        Turn::Tool {
            name: name.to_string(),
            input,
        }
    }
}

/// What a held turn waits for: the test opens it once, from any thread.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub fn open(&self) {
        let (open, cv) = &*self.0;
        *lock(open) = true;
        cv.notify_all();
    }

    /// Waits until the gate is open, or `timeout` has passed.
    fn wait(&self, timeout: Duration) {
        let (open, cv) = &*self.0;
        let deadline = Instant::now() + timeout;
        let mut is_open = lock(open);
        while !*is_open {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            is_open = cv
                .wait_timeout(is_open, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Which API the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAi,
}

/// One request as the server got it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The request target, query included (`/v1/messages?beta=true`).
    pub path: String,
    /// Header names in lower case, in the order they came.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; a string when it is not JSON, null when empty.
    pub body: Value,
    /// The turn of the script it was answered with (0-based), if any.
    pub turn: Option<usize>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The names of the tools the request offers the model.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| {
                        t["name"]
                            .as_str()
                            .or_else(|| t["function"]["name"].as_str())
                    })
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A short account for a failure message.
    fn summary(&self) -> String {
        let body = self.body.to_string();
        let cut = body.len().saturating_sub(1500);
        let tail = body.get(cut..).unwrap_or(&body);
        format!(
            "{} {} (turn {:?}; tools {:?}) body ...{tail}",
            self.method,
            self.path,
            self.turn,
            self.tool_names()
        )
    }
}

struct Shared {
    api: Api,
    script: Mutex<VecDeque<Turn>>,
    /// How many turns of the script have been handed out.
    turns: Mutex<usize>,
    requests: Mutex<Vec<Request>>,
    /// The turns whose answers wait for a gate, by number (0-based).
    held: Mutex<HashMap<usize, Gate>>,
    stop: AtomicBool,
}

/// A stand-in model server on 127.0.0.1; stops accepting when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl ModelServer {
    /// An Anthropic Messages API that plays `script`.
    pub fn anthropic(script: Vec<Turn>) -> ModelServer {
        ModelServer::start(Api::Anthropic, script)
    }

    /// An OpenAI Responses API that plays `script`.
    pub fn openai(script: Vec<Turn>) -> ModelServer {
        ModelServer::start(Api::OpenAi, script)
    }

    fn start(api: Api, script: Vec<Turn>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr");
        let shared = Arc::new(Shared {
            api,
            script: Mutex::new(script.into()),
            turns: Mutex::new(0),
            requests: Mutex::new(Vec::new()),
            held: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    // A failed connection is the host's business; what it
                    // sent before is recorded.
                    let _ = serve_conn(&s, conn);
                });
            }
        });
        ModelServer { addr, shared }
    }

    /// The URL a host's base URL setting takes (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in the order they arrived.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.shared.requests).clone()
    }

    /// The requests answered with a turn of the script, in script order.
    pub fn model_requests(&self) -> Vec<Request> {
        let mut found: Vec<Request> = self
            .requests()
            .into_iter()
            .filter(|r| r.turn.is_some())
            .collect();
        found.sort_by_key(|r| r.turn);
        found
    }

    /// Holds the answer to turn `n` (0-based) until the returned gate is
    /// opened; the request is recorded when it comes. A gate never opened
    /// lets the answer go after the connection's I/O timeout (60 s).
    pub fn hold(&self, n: usize) -> Gate {
        let gate = Gate::default();
        lock(&self.shared.held).insert(n, gate.clone());
        gate
    }

    /// How many turns of the script are left.
    pub fn left(&self) -> usize {
        lock(&self.shared.script).len()
    }

    /// Every request, one per line, for a failure message.
    pub fn evidence(&self) -> String {
        let all = self.requests();
        let mut out = format!("{} request(s) to the stand-in model:\n", all.len());
        for r in &all {
            out.push_str(&r.summary());
            out.push('\n');
        }
        out
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads one request from `conn`, records it, answers it and closes.
fn serve_conn(shared: &Shared, conn: TcpStream) -> io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if find("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        (&conn).write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let raw = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(&mut reader)?
    } else {
        let len: usize = find("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut buf = vec![0; len];
        reader.read_exact(&mut buf)?;
        buf
    };
    let body = if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()))
    };
    let bare = path.split('?').next().unwrap_or("");
    let streams = method == "POST" && body["stream"] == json!(true);
    let scripted = streams
        && match shared.api {
            Api::Anthropic => bare.ends_with("/v1/messages"),
            Api::OpenAi => bare.ends_with("/responses"),
        };
    // The turn is taken and the request recorded under one lock, so the
    // record's order is the script's.
    let (turn, n) = {
        let mut requests = lock(&shared.requests);
        let taken = scripted.then(|| {
            let mut turns = lock(&shared.turns);
            let n = *turns;
            *turns += 1;
            (lock(&shared.script).pop_front(), n)
        });
        requests.push(Request {
            method: method.clone(),
            path: path.clone(),
            headers,
            body: body.clone(),
            turn: taken.as_ref().map(|(_, n)| *n),
        });
        match taken {
            Some((turn, n)) => (Some(turn.unwrap_or_else(|| Turn::text(EXHAUSTED))), n),
            None => (None, 0),
        }
    };
    let mut out = &conn;
    match turn {
        Some(turn) => {
            let gate = lock(&shared.held).get(&n).cloned();
            if let Some(gate) = gate {
                gate.wait(IO_TIMEOUT);
            }
            out.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Cache-Control: no-cache\r\nConnection: close\r\n\r\n",
            )?;
            let events = match shared.api {
                Api::Anthropic => anthropic_events(n, &body, &turn),
                Api::OpenAi => openai_events(n, &body, &turn),
            };
            for (name, data) in events {
                write!(out, "event: {name}\ndata: {data}\n\n")?;
            }
            out.flush()?;
        }
        None => {
            let (status, answer) = minimal_answer(shared.api, &method, bare, &body);
            let text = answer.to_string();
            write!(
                out,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            )?;
            out.flush()?;
        }
    }
    conn.shutdown(Shutdown::Both)
}

/// A chunked request body, decoded.
fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let hex = size.trim().split(';').next().unwrap_or("");
        let n = usize::from_str_radix(hex, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
        if n == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut t = String::new();
                if reader.read_line(&mut t)? == 0 || t.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + n, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// The answer to a request the script does not play: a token count, a
/// one-shot message, or not found.
fn minimal_answer(api: Api, method: &str, path: &str, body: &Value) -> (&'static str, Value) {
    match (api, method) {
        (Api::Anthropic, "POST") if path.ends_with("/count_tokens") => {
            ("200 OK", json!({"input_tokens": 1}))
        }
        (Api::Anthropic, "POST") if path.ends_with("/v1/messages") => (
            "200 OK",
            json!({
                "id": "msg_standin_oneshot",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }),
        ),
        _ => (
            "404 Not Found",
            json!({"type": "error", "error": {"type": "not_found_error", "message": "stand-in"}}),
        ),
    }
}

/// Turn `n` as the Messages API streams it.
fn anthropic_events(n: usize, body: &Value, turn: &Turn) -> Vec<(&'static str, Value)> {
    let (block, delta, stop) = match turn {
        Turn::Fail(message) => {
            let error = json!({"type": "api_error", "message": message});
            return vec![("error", json!({"type": "error", "error": error}))];
        }
        Turn::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            "end_turn",
        ),
        Turn::Tool { name, input } => (
            json!({"type": "tool_use", "id": format!("toolu_standin_{n}"), "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            "tool_use",
        ),
    };
    vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
                "id": format!("msg_standin_{n}"),
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// Turn `n` as the Responses API streams it.
fn openai_events(n: usize, body: &Value, turn: &Turn) -> Vec<(&'static str, Value)> {
    let id = format!("resp_standin_{n}");
    let item = match turn {
        Turn::Text(text) => json!({
            "type": "message",
            "id": format!("msg_standin_{n}"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Turn::Tool { name, input } => json!({
            "type": "function_call",
            "id": format!("fc_standin_{n}"),
            "call_id": format!("call_standin_{n}"),
            "name": name,
            "arguments": input.to_string(),
            "status": "completed",
        }),
        Turn::Fail(_) => Value::Null,
    };
    let response = |status: &str, output: Value| {
        json!({
            "id": id,
            "object": "response",
            "created_at": 0,
            "status": status,
            "model": body["model"],
            "output": output,
            "usage": {
                "input_tokens": 1,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 2,
            },
        })
    };
    let created = (
        "response.created",
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    );
    if let Turn::Fail(message) = turn {
        let mut failed = response("failed", json!([]));
        failed["error"] = json!({"code": "server_error", "message": message});
        return vec![
            created,
            (
                "response.failed",
                json!({"type": "response.failed", "response": failed}),
            ),
        ];
    }
    vec![
        created,
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": response("completed", json!([item]))}),
        ),
    ]
}
