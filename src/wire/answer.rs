//! The answers of the native protocol's methods (docs/protocol.md §2-§4),
//! typed once: what the instance builds and what every client reads.
//! Members are declared in the order a JSON map gives them, so a typed
//! answer is written as the map it replaces was. A member a newer
//! instance adds is ignored by an older client; one it leaves out reads
//! as its default where the protocol allows that.

use super::{
    Approve, ClaimStatus, HandlerExit, Handling, Manifest, Mode, Outcome, ReplyRecord, Said,
    Sender, State, Summary,
};
use crate::base::status::Status;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A program's name and version, as `initialize` exchanges them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Software {
    pub name: String,
    pub version: String,
}

impl Software {
    /// This baton, as it names itself.
    pub fn baton(name: &str) -> Software {
        Software {
            name: name.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// What a bridge says of the key it serves (`initialize`'s `bridge`).
#[derive(Clone, Debug, Serialize)]
pub struct BridgeParams {
    /// The key's label (`baton bridge --key LABEL`), when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub remote: Option<String>,
    pub target: String,
}

/// `initialize`'s parameters: the one place a client builds them, and
/// the server reads them (`read`).
#[derive(Clone, Debug, Serialize)]
pub struct HelloParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeParams>,
    pub client: Software,
    /// An integer, as given: only `PROTOCOL` is served.
    pub protocol_version: serde_json::Number,
}

impl HelloParams {
    /// A client that names itself `name` (`baton`, `baton bridge`).
    pub fn new(name: &str) -> HelloParams {
        HelloParams {
            bridge: None,
            client: Software::baton(name),
            protocol_version: super::PROTOCOL.into(),
        }
    }
}

/// `inbox/complete`'s parameters: the one place a client builds them
/// (the CLI, the view and `baton mcp`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompleteParams {
    pub message_id: String,
    /// As given: the instance answers `invalid` for one that does not
    /// complete (`completes`); none is `done`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Said<Outcome>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_reply: Option<bool>,
}

impl CompleteParams {
    /// Completes `message_id` with `outcome`, without a reply.
    pub fn new(message_id: &str, outcome: impl Into<Said<Outcome>>) -> CompleteParams {
        CompleteParams {
            message_id: message_id.to_string(),
            outcome: Some(outcome.into()),
            ..CompleteParams::default()
        }
    }

    /// The params as a call sends them.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("strings and a boolean serialize")
    }
}

/// The stopped agent a `bridge --offline` stands in for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Offline {
    pub name: String,
}

/// `initialize`'s answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Hello {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// The instance's manifest; null from a stopped agent's stand-in.
    pub instance: Option<Manifest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<Offline>,
    pub protocol_version: u64,
    pub server: Software,
}

/// `ping`'s answer (and a zcoder ping's, in the same shape).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pong {
    /// The approvals waiting there, a task's or a tool call's (what
    /// `approval/list` lists). Absent from a zcoder peer, an earlier
    /// baton, and an instance that refused the connection for its cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<usize>,
    pub instance_id: String,
    /// The tasks in its queue (`inbox/`), those waiting for an approval
    /// among them. Absent where `approvals` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<usize>,
    pub state: State,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<String>,
}

impl Pong {
    /// What waits there, where it said.
    pub fn load(&self) -> Option<Load> {
        Some(Load {
            approvals: self.approvals?,
            queued: self.queued?,
        })
    }
}

/// What waits at an instance, as its `ping` counts it: the tasks in its
/// queue, and the approvals waiting (a task's or a tool call's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub approvals: usize,
    pub queued: usize,
}

/// The running turn `control/status` names.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunningTurn {
    pub message_id: String,
    pub pid: u32,
    pub seconds: f64,
}

/// The queue as `control/status` counts it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Queue {
    pub interrupted: usize,
    pub max: usize,
    pub processing: usize,
    pub queued: usize,
}

/// `control/status`'s answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ControlStatus {
    pub approve: Approve,
    #[serde(default)]
    pub awaiting_approval: Vec<String>,
    pub instance_id: String,
    pub mode: Mode,
    pub model: String,
    pub name: String,
    pub open_task: Option<String>,
    pub paused: bool,
    pub pid: u32,
    pub profile: String,
    pub queue: Queue,
    pub socket: String,
    pub spool: String,
    pub started_at: u64,
    pub state: State,
    pub tmux_pane: Option<String>,
    /// `serve --tmux-pane`: why queued tasks are not typed into the pane
    /// now, and until when; `None` while they are.
    #[serde(default)]
    pub tmux_wait: Option<String>,
    /// `serve --codex`: the app-server, and whether it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex: Option<CodexStatus>,
    pub turn: Option<RunningTurn>,
    pub workspace: String,
    /// `serve --operator`: the uids of the accounts that operate it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operators: Vec<u32>,
}

/// What `control/status` says of the Codex app-server of `serve --codex`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CodexStatus {
    pub socket: String,
    pub connected: bool,
    /// The workspace's thread there, once found.
    pub thread: Option<String>,
    /// Why it cannot be reached, while it cannot.
    pub reason: Option<String>,
}

/// `control/pause`'s and `control/resume`'s answer: the state, and
/// whether the call changed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Paused {
    #[serde(default)]
    pub changed: bool,
    pub state: State,
}

spelled! {
    /// Where a task is, for `task/status`, when it has not ended: the
    /// other answers are its `Outcome` (`interrupted`, `expired` and
    /// `rejected` among them: a waiting sender is done waiting).
    pub enum Pending ("task status") {
        Queued = "queued",
        AwaitingApproval = "awaiting_approval",
        Running = "running",
        Unknown = "unknown",
    }
}

/// `task/status`'s `status`: still pending, or ended with an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TaskState {
    Pending(Pending),
    Ended(Outcome),
}

/// `task/status`'s answer. `reply` is there (null or the reply) for a
/// finished task alone; `exit_status`, `signal`, `stderr_tail` and `host`
/// (`handler`) for a finished task whose turn failed or timed out;
/// `accepted_at` wherever the spool knows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<u64>,
    /// `awaiting_approval`'s: the approval it waits for (`ask-<n>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<f64>,
    #[serde(flatten)]
    pub handler: HandlerExit,
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reply: Option<Option<ReplyRecord>>,
    pub status: TaskState,
}

/// A member that is there, null or not: `Some(None)` for a null.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The instance a send reached (`target` of `relay/send` and of a CLI
/// send's result).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Target {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// One instance a target could have meant: a live one, or a stopped
/// agent's spool (its id empty, its pid null).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Candidate {
    pub instance_id: String,
    pub name: String,
    pub pid: Option<u32>,
    pub workspace: String,
}

/// `message/send`'s and `relay/send`'s answer, and every delivery's
/// result on its way (`relay`): a delivery status, and for a sender-side
/// one what the sender learned. `inbox/complete`'s `reply` too (`sending`
/// while it goes on, `kept` for a plain sender's, and without an id when
/// the reply could not even be planned).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SendResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<Candidate>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// As spelled: a status this version does not know (a zcoder peer's)
    /// is a refusal, shown as it came.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
}

impl SendResult {
    /// A result with `status`, for `message_id`, and why.
    pub fn new(status: impl ToString, message_id: &str, reason: Option<String>) -> SendResult {
        SendResult {
            message_id: Some(message_id.to_string()),
            reason,
            status: status.to_string(),
            ..SendResult::default()
        }
    }

    /// The status, if this version knows it.
    pub fn status(&self) -> Option<Status> {
        self.status.parse().ok()
    }

    /// The message id it names ("" for none).
    pub fn id(&self) -> &str {
        self.message_id.as_deref().unwrap_or("")
    }
}

/// One page of `inbox/list`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InboxPage {
    pub awaiting_approval: Vec<String>,
    pub interrupted: Vec<Summary>,
    /// The `after` of the next page; None on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    pub processing: Vec<Summary>,
    pub queued: Vec<Summary>,
    pub rejected: Vec<Summary>,
    /// `invalid` when `after` names no listed task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A task as `inbox/claim` hands it over (a member an older instance
/// leaves out reads empty).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ClaimedTask {
    pub accepted_at: u64,
    pub body: String,
    pub envelope: String,
    pub follow_up_of: Option<String>,
    pub hop: u64,
    pub in_reply_to: Option<String>,
    pub message_id: String,
    pub mode: String,
    pub sender: Sender,
    pub turn: String,
    pub wire: String,
}

/// A task that went to `rejected/` as bad data on the way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RejectedTask {
    pub message_id: String,
    pub reason: String,
}

/// `inbox/claim`'s answer: `claimed` with the task, or why not
/// (`empty`, `busy`, `paused`, `awaiting_approval`, `invalid`, `error`).
/// The foreground builds it and hands it to its own pane and Codex as it
/// is: nothing is written out and read back within one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Claimed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedTask>,
    pub status: Said<ClaimStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<ClaimedTask>,
    /// With `error`: a resource ran short; the task stays queued.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub temporary: bool,
}

impl Claimed {
    /// An answer without a task: `status`, and why when `reason` says.
    pub fn not(status: ClaimStatus, reason: Option<String>) -> Claimed {
        Claimed {
            status: status.into(),
            reason,
            ..Claimed::default()
        }
    }
}

/// `events/subscribe`'s answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Subscribed {
    #[serde(default)]
    pub controller: bool,
    pub next_seq: u64,
    pub subscribed: bool,
}

/// What a call that handles one thing answers (`inbox/complete`,
/// `requeue`, `discard`, `turn/*`, `task/cancel`, `approval/respond`,
/// `permission/ask`):
/// its status, and why when it did nothing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Handled {
    /// `permission/ask`'s, while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(default)]
    pub message_id: Option<String>,
    /// How the task ended (`completed`, `ended`): null when its receipt
    /// cannot be read back.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub outcome: Option<Option<Said<Outcome>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `inbox/complete`'s: where its reply went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<SendResult>,
    pub status: Said<Handling>,
    /// `task/cancel`'s, when it cancelled: where the task was (`queued`,
    /// `running`, `open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
}

impl Handled {
    /// `status` of the task `message_id`, and why when `reason` says.
    pub fn new(status: Handling, message_id: Option<&str>, reason: Option<String>) -> Handled {
        Handled {
            message_id: message_id.map(str::to_string),
            reason,
            status: status.into(),
            ..Handled::default()
        }
    }

    /// The outcome it names, as spelled ("" for none).
    pub fn outcome_said(&self) -> String {
        let said = self.outcome.as_ref().and_then(Option::as_ref);
        said.map_or_else(String::new, Said::to_string)
    }
}

/// An approval that waits, as its `approval/request` shows it and
/// `approval/list` lists it: a task's (its id, who sent it, its mode,
/// size, first lines and the SHA-256 of its body) or a tool call's that
/// an MCP host relayed (`request_id`, the tool, who asked, what it does
/// and its input), with the approval's id and the digest of what they
/// show. `kind` and `body` are `approval/list`'s. A member of another
/// type leaves the whole approval empty (`Asked::read`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Asked {
    pub approval_id: Option<String>,
    pub digest: Value,
    /// `task` or `tool` (`approval/list`).
    pub kind: Option<String>,
    pub message_id: Option<String>,
    pub from: Option<String>,
    pub workspace: Option<String>,
    pub pid: Option<u64>,
    pub mode: Option<String>,
    pub bytes: Option<u64>,
    pub lines: Option<u64>,
    pub excerpt: Option<String>,
    pub body_sha256: Option<String>,
    /// The whole body (`approval/list` with `full`); `None` when its
    /// file could not be read.
    pub body: Option<String>,
    pub request_id: Option<String>,
    pub tool_name: Option<String>,
    pub host: Option<String>,
    pub host_pid: Option<u64>,
    pub description: Option<String>,
    pub input_preview: Option<String>,
}

impl Asked {
    /// An `approval/request`'s `params`, or one entry of `approval/list`.
    pub fn read(params: &Value) -> Asked {
        Asked::deserialize(params).unwrap_or_default()
    }

    /// Whether it is a tool call an MCP host asks about.
    pub fn is_tool(&self) -> bool {
        self.message_id.is_none() && self.request_id.is_some()
    }

    /// The task's id, or the tool call's.
    pub fn subject(&self) -> &str {
        let id = if self.is_tool() {
            &self.request_id
        } else {
            &self.message_id
        };
        id.as_deref().unwrap_or("")
    }
}

/// `approval/list`'s answer: the approvals that wait, oldest first, as
/// the instance gave them (read each with `Asked::read`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApprovalList {
    #[serde(default)]
    pub approvals: Vec<Value>,
}

/// One line a client reads, as far as telling answers apart needs: an
/// answer (`id` with `result` or `error`), or a notification or request
/// of the instance's (`method`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Reply {
    pub id: Option<Value>,
    pub method: Option<String>,
    pub result: Option<Value>,
    pub error: Option<ErrorObject>,
}

impl Reply {
    /// Whether it answers the request with this numeric id.
    pub fn answers(&self, id: u64) -> bool {
        self.id.as_ref().and_then(Value::as_u64) == Some(id)
    }
}

/// A JSON-RPC error, with what a refusal for the connection cap names
/// (`data`: the instance and its state).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: Option<ErrorData>,
}

/// An error's `data`: the instance and its state (a refusal for the
/// connection cap), or the caller's role (`not permitted`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorData {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl ErrorData {
    /// A refusal's data naming the caller's role.
    pub fn role(role: &str) -> Value {
        let data = ErrorData {
            role: Some(role.to_string()),
            ..ErrorData::default()
        };
        serde_json::to_value(data).expect("strings serialize")
    }

    /// A refusal's data naming the instance and its state.
    pub fn instance(instance_id: &str, state: State) -> Value {
        let data = ErrorData {
            instance_id: Some(instance_id.to_string()),
            state: Some(state.as_str().to_string()),
            ..ErrorData::default()
        };
        serde_json::to_value(data).expect("strings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn complete_params_are_written_as_the_map_they_replace() {
        let plain = CompleteParams::new("m", Outcome::Failed);
        let plain_map = json!({"message_id": "m", "outcome": "failed"});
        assert_eq!(plain.to_value().to_string(), plain_map.to_string());
        let reply = CompleteParams {
            reply: Some("r".into()),
            reply_to_reply: Some(false),
            ..CompleteParams::new("m", Said::spelled("sideways"))
        };
        let reply_map = json!({"message_id": "m", "outcome": "sideways", "reply": "r",
                               "reply_to_reply": false});
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            reply_map.to_string()
        );
    }

    #[test]
    fn task_status_reads_a_pending_place_or_an_outcome_and_keeps_a_null_reply() {
        let queued: TaskStatus = serde_json::from_value(
            json!({"message_id": "m", "status": "queued", "queue_position": 2}),
        )
        .unwrap();
        assert_eq!(queued.status, TaskState::Pending(Pending::Queued));
        assert!(queued.reply.is_none());
        let done: TaskStatus = serde_json::from_value(
            json!({"message_id": "m", "status": "done", "reply": null, "finished_at": 5.5}),
        )
        .unwrap();
        assert_eq!(done.status, TaskState::Ended(Outcome::Done));
        assert!(matches!(done.reply, Some(None)));
        // Written back, a finished task's null reply stays there; a
        // pending one has none.
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            json!({"message_id": "m", "status": "done", "reply": null, "finished_at": 5.5})
        );
        assert_eq!(
            serde_json::to_value(&queued).unwrap(),
            json!({"message_id": "m", "status": "queued", "queue_position": 2})
        );
        assert!(
            serde_json::from_value::<TaskStatus>(json!({"message_id": "m", "status": "gone"}))
                .is_err()
        );
    }
}
