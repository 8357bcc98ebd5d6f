//! The few messages of Codex's app-server protocol baton reads, as
//! docs/hosts.md records them (Codex 0.169.0). Every field not used here
//! is ignored, and a field that may be missing or null is an `Option` or
//! has a default, so a newer Codex that adds members still reads.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A message from the app-server: an answer (`id` with `result` or
/// `error`), a notification (`method` without `id`) or a request of its
/// own (`method` with `id`). No `"jsonrpc"` member is required.
#[derive(Debug, Deserialize)]
pub struct Incoming {
    pub id: Option<Value>,
    pub method: Option<String>,
    pub params: Option<Value>,
    pub result: Option<Value>,
    pub error: Option<RpcError>,
}

#[derive(Debug, Deserialize)]
pub struct RpcError {
    #[serde(default)]
    pub code: i64,
    #[serde(default)]
    pub message: String,
}

/// `initialize`'s answer.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub codex_home: Option<PathBuf>,
}

/// A page of an answer: `thread/loaded/list`'s (thread ids), and
/// `thread/turns/list`'s (turns).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    #[serde(default = "Vec::new")]
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

/// The answer of `thread/read` and `thread/start`, and the params of
/// `thread/started`: `{"thread": {...}}` with more beside it.
#[derive(Debug, Deserialize)]
pub struct WithThread {
    pub thread: Thread,
}

/// A thread: its id, working directory, state and recency (seconds since
/// the epoch).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    pub id: String,
    pub cwd: PathBuf,
    #[serde(default)]
    pub status: ThreadStatus,
    pub updated_at: Option<i64>,
    pub recency_at: Option<i64>,
    /// A thread that keeps no rollout (one Codex makes for itself, as for
    /// a title): it takes no queued input, so baton never picks it.
    #[serde(default)]
    pub ephemeral: bool,
}

impl Thread {
    /// When it was last active, as well as it says.
    pub fn recency(&self) -> i64 {
        self.recency_at.or(self.updated_at).unwrap_or(0)
    }
}

/// `thread.status`: `{"type": "idle"}`, `{"type": "active", ...}`, ...
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadStatus {
    Idle,
    Active,
    /// Another state, or none given.
    #[default]
    #[serde(other)]
    Other,
}

/// The answer of `turn/start` and the params of `turn/started` and
/// `turn/completed` (with `threadId` beside it in the notifications).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithTurn {
    pub thread_id: Option<String>,
    pub turn: Turn,
}

/// A turn. In `turn/completed` of a completed turn, `items` holds its
/// final `agentMessage` (`itemsView: "summary"`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Turn {
    pub id: String,
    pub status: TurnStatus,
    #[serde(default)]
    pub items: Vec<Item>,
    pub error: Option<TurnError>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    InProgress,
    Completed,
    Interrupted,
    Failed,
    /// A status this client does not know.
    #[serde(other)]
    Other,
}

/// A turn's failure, in Codex's own words.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TurnError {
    #[serde(default)]
    pub message: String,
}

/// One item of a turn; only what baton reads of it: its kind (`type`:
/// `agentMessage`, `userMessage`, ...), an agent message's text, a user
/// message's `clientId`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub client_id: Option<String>,
}

impl Item {
    pub fn agent_text(&self) -> Option<&str> {
        match self.kind == "agentMessage" {
            true => self.text.as_deref(),
            false => None,
        }
    }
}

/// The params of `item/started` and `item/completed`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithItem {
    pub item: Item,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
}

/// `thread/queue/add`'s answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued {
    pub queued_submission: Submission,
}

#[derive(Debug, Deserialize)]
pub struct Submission {
    pub id: String,
}

// What baton sends. Each message is written as the map it replaces was:
// members in sorted order (as bytes: `clientInfo` after `capabilities`),
// a missing one left out, a null written where the map wrote one.

/// A request (`id`) or a notification (none) to the app-server.
#[derive(Debug, Serialize)]
pub struct Outgoing<'a, P> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    pub jsonrpc: &'static str,
    pub method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
}

/// `initialize`'s params: who asks, and that it wants the experimental
/// API (`thread/queue/*`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams<'a> {
    pub capabilities: Capabilities,
    pub client_info: ClientInfo<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub experimental_api: bool,
}

#[derive(Debug, Serialize)]
pub struct ClientInfo<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

/// The params of `thread/loaded/list` (the page after `cursor`),
/// `thread/read`, `thread/start`, `thread/resume`, `thread/turns/list`,
/// `thread/queue/start` and `turn/interrupt`: each request sets its own
/// members, and the others are left out.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Params<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a Path>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_turns: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_view: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_submission_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<&'a str>,
}

/// The user's input to a thread: `turn/start`, `thread/queue/add` and
/// (with the turn it expects) `turn/steer`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputParams<'a> {
    /// Null when the input has no name.
    pub client_user_message_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_turn_id: Option<&'a str>,
    pub input: [TextInput<'a>; 1],
    pub thread_id: &'a str,
}

/// One piece of input: text.
#[derive(Debug, Serialize)]
pub struct TextInput<'a> {
    pub text: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl<'a> InputParams<'a> {
    /// `text` as the input to `thread_id`, named `client_id`.
    pub fn text(thread_id: &'a str, client_id: Option<&'a str>, text: &'a str) -> Self {
        InputParams {
            client_user_message_id: client_id,
            expected_turn_id: None,
            input: [TextInput { text, kind: "text" }],
            thread_id,
        }
    }
}
