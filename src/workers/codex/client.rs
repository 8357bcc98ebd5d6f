//! `AppServer`: one connection to Codex's app-server, initialized, with
//! typed calls and a bounded read of notifications.

use super::error::Error;
use super::proto::{
    Capabilities, ClientInfo, Incoming, InitializeParams, InitializeResult, InputParams, Outgoing,
    Page, Params, Queued, Thread, Turn, TurnStatus, WithItem, WithThread, WithTurn,
};
use crate::workers::ws;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The name Codex records as a thread's `originator`.
pub const CLIENT_NAME: &str = "baton";

/// The most pages of `thread/loaded/list` read in one call.
const MAX_PAGES: usize = 64;

/// A message the app-server sent unasked: a notification, or a request
/// of its own (an approval, say), which this client does not answer yet.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// How a turn ended: its status, the last agent message's text (the
/// reply of a completed turn), and Codex's error of a failed one.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEnd {
    pub thread_id: String,
    pub turn_id: String,
    pub status: TurnStatus,
    pub text: Option<String>,
    pub error: Option<String>,
}

impl TurnEnd {
    /// How `turn` of `thread_id` ended; its reply is its last agent
    /// message, else `said`, the last one seen while it ran.
    pub fn of(thread_id: String, turn: Turn, said: Option<String>) -> TurnEnd {
        let last = turn.items.iter().rev().find_map(|i| i.agent_text());
        TurnEnd {
            text: last.map(str::to_string).or(said),
            thread_id,
            turn_id: turn.id,
            status: turn.status,
            error: turn.error.map(|e| e.message),
        }
    }
}

pub struct AppServer<S: ws::Stream = UnixStream> {
    ws: ws::Client<S>,
    /// The bound on each request's answer.
    timeout: Duration,
    next_id: u64,
    /// Notifications read while waiting for an answer, oldest first.
    pending: VecDeque<Notification>,
    init: InitializeResult,
}

impl AppServer<UnixStream> {
    /// Connects to the app-server at `socket` (`--listen unix://PATH`, or
    /// the daemon's socket; a symlink is followed) and initializes, each
    /// step bounded by `timeout`.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, Error> {
        let ws = ws::Client::connect(socket, &ws::Options::new(timeout))?;
        AppServer::initialize(ws, timeout)
    }

    /// The app-server's process, as the kernel tells it (`SO_PEERCRED`).
    pub fn peer_pid(&self) -> Option<u32> {
        crate::sys::peer_cred(self.ws.get_ref()).ok()?.pid
    }
}

impl<S: ws::Stream> AppServer<S> {
    /// `initialize` (with `capabilities.experimentalApi`, without which
    /// Codex hides `thread/queue/*`), then `initialized`, over a WebSocket
    /// already upgraded.
    pub fn initialize(ws: ws::Client<S>, timeout: Duration) -> Result<Self, Error> {
        let mut app = AppServer {
            ws,
            timeout,
            next_id: 0,
            pending: VecDeque::new(),
            init: InitializeResult::default(),
        };
        let params = InitializeParams {
            capabilities: Capabilities {
                experimental_api: true,
            },
            client_info: ClientInfo {
                name: CLIENT_NAME,
                version: env!("CARGO_PKG_VERSION"),
            },
        };
        app.init = app.request("initialize", params)?;
        let initialized = Outgoing {
            id: None,
            jsonrpc: "2.0",
            method: "initialized",
            params: None::<Value>,
        };
        app.ws.send_text(&to_text(&initialized))?;
        Ok(app)
    }

    /// What `initialize` answered (`CODEX_HOME`).
    pub fn info(&self) -> &InitializeResult {
        &self.init
    }

    /// The ids of every thread the app-server has loaded, any
    /// connection's, any directory's.
    pub fn loaded_threads(&mut self) -> Result<Vec<String>, Error> {
        let mut ids = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = Params {
                cursor: cursor.as_deref(),
                ..Params::default()
            };
            let page: Page<String> = self.request("thread/loaded/list", params)?;
            ids.extend(page.data);
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(ids)
    }

    /// One thread: its cwd, status and recency (no turns).
    pub fn read_thread(&mut self, id: &str) -> Result<Thread, Error> {
        let params = Params {
            thread_id: Some(id),
            ..Params::default()
        };
        let read: WithThread = self.request("thread/read", params)?;
        Ok(read.thread)
    }

    /// The loaded thread whose working directory is `cwd`, the most
    /// recently active if several. A thread that cannot be read (gone
    /// meanwhile) is passed over.
    pub fn workspace_thread(&mut self, cwd: &Path) -> Result<Option<Thread>, Error> {
        let mut best: Option<Thread> = None;
        for id in self.loaded_threads()? {
            let thread = match self.read_thread(&id) {
                Ok(t) => t,
                Err(Error::Rpc { .. }) => continue,
                Err(e) => return Err(e),
            };
            let newer = best.as_ref().is_none_or(|b| thread.recency() > b.recency());
            if thread.cwd == cwd && !thread.ephemeral && newer {
                best = Some(thread);
            }
        }
        Ok(best)
    }

    /// A new thread in `cwd`, with Codex's defaults otherwise.
    pub fn start_thread(&mut self, cwd: &Path) -> Result<Thread, Error> {
        let params = Params {
            cwd: Some(cwd),
            ..Params::default()
        };
        let started: WithThread = self.request("thread/start", params)?;
        Ok(started.thread)
    }

    /// Starts a turn on `thread_id` with `text` as the user's input; the
    /// turn as first answered (`inProgress`).
    pub fn start_turn(&mut self, thread_id: &str, text: &str) -> Result<Turn, Error> {
        self.start_turn_as(thread_id, None, text)
    }

    /// `start_turn`, the user's input named `client_id` (its
    /// `userMessage` item's `clientId`).
    pub fn start_turn_as(
        &mut self,
        thread_id: &str,
        client_id: Option<&str>,
        text: &str,
    ) -> Result<Turn, Error> {
        let params = InputParams::text(thread_id, client_id, text);
        let started: WithTurn = self.request("turn/start", params)?;
        Ok(started.turn)
    }

    /// Subscribes this connection to the notifications of a thread it
    /// did not start (`thread/resume`); refused for a thread with no turn
    /// yet.
    pub fn resume_thread(&mut self, id: &str) -> Result<Thread, Error> {
        let params = Params {
            exclude_turns: Some(true),
            thread_id: Some(id),
            ..Params::default()
        };
        let resumed: WithThread = self.request("thread/resume", params)?;
        Ok(resumed.thread)
    }

    /// The last `limit` turns of a thread, newest first, with every item.
    pub fn recent_turns(&mut self, thread_id: &str, limit: u32) -> Result<Vec<Turn>, Error> {
        let params = Params {
            items_view: Some("full"),
            limit: Some(limit),
            thread_id: Some(thread_id),
            ..Params::default()
        };
        let page: Page<Turn> = self.request("thread/turns/list", params)?;
        Ok(page.data)
    }

    /// Queues `text` on `thread_id` as the user's input, named
    /// `client_id` (`thread/queue/add`): it starts a turn at once on an
    /// idle thread, and after the current turn on a busy one. Returns the
    /// queued submission's id.
    pub fn queue_add(
        &mut self,
        thread_id: &str,
        client_id: &str,
        text: &str,
    ) -> Result<String, Error> {
        let params = InputParams::text(thread_id, Some(client_id), text);
        let added: Queued = self.request("thread/queue/add", params)?;
        Ok(added.queued_submission.id)
    }

    /// Starts a queued submission now (`thread/queue/start`): the queue
    /// does not move on its own after an interrupted turn.
    pub fn queue_start(&mut self, thread_id: &str, submission: &str) -> Result<(), Error> {
        let params = Params {
            queued_submission_id: Some(submission),
            thread_id: Some(thread_id),
            ..Params::default()
        };
        let _: Value = self.request("thread/queue/start", params)?;
        Ok(())
    }

    /// Adds `text` to the running turn `turn_id` (`turn/steer`).
    pub fn steer(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        client_id: &str,
        text: &str,
    ) -> Result<(), Error> {
        let params = InputParams {
            expected_turn_id: Some(turn_id),
            ..InputParams::text(thread_id, Some(client_id), text)
        };
        let _: Value = self.request("turn/steer", params)?;
        Ok(())
    }

    /// Interrupts the running turn `turn_id` (`turn/interrupt`); its
    /// `turn/completed` says `interrupted`.
    pub fn interrupt(&mut self, thread_id: &str, turn_id: &str) -> Result<(), Error> {
        let params = Params {
            thread_id: Some(thread_id),
            turn_id: Some(turn_id),
            ..Params::default()
        };
        let _: Value = self.request("turn/interrupt", params)?;
        Ok(())
    }

    /// Reads notifications until `turn/completed` of `turn_id` on
    /// `thread_id`, for at most `timeout`. The reply is the last
    /// `agentMessage` of the completed turn's items, else the last one
    /// `item/completed` showed for that turn.
    pub fn wait_turn(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        timeout: Duration,
    ) -> Result<TurnEnd, Error> {
        let deadline = Instant::now() + timeout;
        let mut said: Option<String> = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let n = self.next_notification(left).map_err(|e| match e {
                Error::TimedOut { .. } => Error::TimedOut {
                    what: format!("turn/completed of turn {turn_id}"),
                    after: timeout,
                },
                e => e,
            })?;
            let thread_is = |t: &Option<String>| t.as_deref().is_none_or(|t| t == thread_id);
            match n.method.as_str() {
                "item/completed" => {
                    let item: WithItem = parse("item/completed", n.params)?;
                    let ours =
                        item.turn_id.as_deref() == Some(turn_id) && thread_is(&item.thread_id);
                    if let (true, Some(text)) = (ours, item.item.agent_text()) {
                        said = Some(text.to_string());
                    }
                }
                "turn/completed" => {
                    let done: WithTurn = parse("turn/completed", n.params)?;
                    if done.turn.id != turn_id || !thread_is(&done.thread_id) {
                        continue;
                    }
                    return Ok(TurnEnd::of(thread_id.to_string(), done.turn, said));
                }
                _ => {}
            }
        }
    }

    /// The next message the app-server sent unasked, waiting at most
    /// `timeout` for one.
    pub fn next_notification(&mut self, timeout: Duration) -> Result<Notification, Error> {
        if let Some(n) = self.pending.pop_front() {
            return Ok(n);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let msg = self.recv(deadline, "notification", timeout)?;
            // Else an answer nobody waits for (a request given up on).
            if let Some(method) = msg.method {
                let params = msg.params.unwrap_or(Value::Null);
                return Ok(Notification { method, params });
            }
        }
    }

    /// Sends request `method` and returns its `result` read as `T`;
    /// notifications that come before it are kept for
    /// `next_notification`.
    pub fn request<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, Error> {
        self.next_id += 1;
        let id = self.next_id;
        let msg = Outgoing {
            id: Some(id),
            jsonrpc: "2.0",
            method,
            params: Some(params),
        };
        self.ws.send_text(&to_text(&msg)).map_err(Error::Unsent)?;
        let deadline = Instant::now() + self.timeout;
        let what = format!("answer to {method}");
        loop {
            let msg = self.recv(deadline, &what, self.timeout)?;
            if let Some(method) = msg.method {
                let params = msg.params.unwrap_or(Value::Null);
                self.pending.push_back(Notification { method, params });
                continue;
            }
            if msg.id.as_ref().and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(e) = msg.error {
                return Err(Error::Rpc {
                    method: method.to_string(),
                    code: e.code,
                    message: e.message,
                });
            }
            return parse(&what, msg.result.unwrap_or(Value::Null));
        }
    }

    /// Closes the WebSocket.
    pub fn close(mut self) -> Result<(), Error> {
        self.ws.close()?;
        Ok(())
    }

    /// The next message, by `deadline`; a timeout says `what` waited.
    fn recv(&mut self, deadline: Instant, what: &str, total: Duration) -> Result<Incoming, Error> {
        let timed_out = || Error::TimedOut {
            what: what.to_string(),
            after: total,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        self.ws.set_read_timeout(Some(left));
        let text = match self.ws.recv_text() {
            Ok(Some(text)) => text,
            Ok(None) => return Err(Error::Closed),
            Err(ws::Error::TimedOut { .. }) => return Err(timed_out()),
            Err(e) => return Err(e.into()),
        };
        parse(
            "a message",
            serde_json::from_str::<Value>(&text).map_err(|e| Error::Json {
                what: "a message".into(),
                why: e.to_string(),
            })?,
        )
    }
}

/// `value` read as `T`, or an error naming `what` it was.
fn parse<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Json {
        what: what.to_string(),
        why: e.to_string(),
    })
}

/// A message as the text of one WebSocket frame.
fn to_text(msg: &impl Serialize) -> String {
    serde_json::to_string(msg).expect("a message serializes")
}
