//! An event as an instance writes it (docs/protocol.md §3, Events): one
//! variant of `Body` per `EventKind`, with the members that kind carries.
//! The hub numbers it (`seq`, `time`, `kind` first) and writes these after.
//! Members are declared in the byte order of their names, as the events
//! were once written from sorted JSON objects; `message.accepted` (and a
//! queued `local.input`) keeps the order it has always had. Reading an
//! event is `Event`'s, which is lenient; this side is exact.

use super::{Approve, Decision, EventKind, Mode, Outcome, ReplyRecord, Said, State, Stream};
use super::{HandlerExit, Task, TaskMode};
use crate::base::status::Status;
use serde::Serialize;
use serde::ser::Serializer;
use serde_json::Value;
use serde_json::value::RawValue;

/// A message's body on its way into a task file or an event: its text,
/// or its JSON string already escaped (as a request line spelled it),
/// which is copied rather than escaped again.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(untagged)]
pub enum BodyText<'a> {
    Text(&'a str),
    Json(&'a RawValue),
}

impl<'a> BodyText<'a> {
    /// `json` must be the JSON string of `text`.
    pub fn new(text: &'a str, json: Option<&'a RawValue>) -> BodyText<'a> {
        json.map_or(BodyText::Text(text), BodyText::Json)
    }
}

/// What one event says, but its number, time and kind.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Body<'a> {
    InstanceStarted {
        approve: Approve,
        instance_id: &'a str,
        mode: Mode,
        name: &'a str,
        pid: u32,
        /// The manifest's.
        state: Said<State>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tmux_pane: Option<&'a str>,
        workspace: &'a str,
    },
    MessageAccepted(Accepted<'a>),
    LocalInput(Local<'a>),
    TaskExpired {
        message_id: &'a str,
        /// `expired`.
        reason: &'a str,
        text: &'a str,
    },
    MessageRejected {
        from: &'a str,
        message_id: &'a str,
        pid: Option<u32>,
        reason: &'a str,
        status: Status,
    },
    TaskClaimed {
        follow_up_of: Option<&'a str>,
        from: &'a str,
        message_id: &'a str,
    },
    TaskTyped {
        message_id: &'a str,
        tmux_pane: &'a str,
    },
    TaskDenied {
        by: &'a str,
        by_pid: Option<u32>,
        message_id: &'a str,
    },
    TaskRejected {
        message_id: &'a str,
        reason: &'a str,
    },
    TaskRequeued {
        message_id: &'a str,
    },
    #[serde(serialize_with = "sorted")]
    TaskEnded(Ended<'a>),
    TaskDiscarded {
        message_id: &'a str,
    },
    TurnStarted {
        from: &'a str,
        hop: u64,
        message_id: &'a str,
        pid: u32,
        sender_id: Option<&'a str>,
    },
    TurnOutput {
        /// The last piece of a stream that was cut: its tail, and how
        /// many bytes were not sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        message_id: &'a str,
        stream: Stream,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        tail: bool,
        text: &'a str,
    },
    TurnFinished(Finished<'a>),
    #[serde(serialize_with = "sorted")]
    RelaySent(Relayed<'a>),
    StateChanged {
        state: State,
    },
    /// The approval's params, as its `approval/request` carries them.
    ApprovalRequested(&'a Value),
    ApprovalResolved {
        approval_id: &'a str,
        by: &'a str,
        by_pid: Option<u32>,
        decision: Said<Decision>,
        message_id: &'a str,
    },
    /// The tool call's params, as its `approval/request` carries them.
    PermissionRequested(&'a Value),
    PermissionResolved {
        approval_id: &'a str,
        by: &'a str,
        by_pid: Option<u32>,
        decision: Said<Decision>,
        request_id: &'a str,
    },
    Notice(Notice<'a>),
}

impl<'a> Body<'a> {
    pub fn kind(&self) -> EventKind {
        use EventKind as K;
        match self {
            Body::InstanceStarted { .. } => K::InstanceStarted,
            Body::MessageAccepted(_) => K::MessageAccepted,
            Body::LocalInput(_) => K::LocalInput,
            Body::TaskExpired { .. } => K::TaskExpired,
            Body::MessageRejected { .. } => K::MessageRejected,
            Body::TaskClaimed { .. } => K::TaskClaimed,
            Body::TaskTyped { .. } => K::TaskTyped,
            Body::TaskDenied { .. } => K::TaskDenied,
            Body::TaskRejected { .. } => K::TaskRejected,
            Body::TaskRequeued { .. } => K::TaskRequeued,
            Body::TaskEnded(_) => K::TaskEnded,
            Body::TaskDiscarded { .. } => K::TaskDiscarded,
            Body::TurnStarted { .. } => K::TurnStarted,
            Body::TurnOutput { .. } => K::TurnOutput,
            Body::TurnFinished(_) => K::TurnFinished,
            Body::RelaySent(_) => K::RelaySent,
            Body::StateChanged { .. } => K::StateChanged,
            Body::ApprovalRequested(_) => K::ApprovalRequested,
            Body::ApprovalResolved { .. } => K::ApprovalResolved,
            Body::PermissionRequested(_) => K::PermissionRequested,
            Body::PermissionResolved { .. } => K::PermissionResolved,
            Body::Notice(_) => K::Notice,
        }
    }

    /// A `notice` of `text` alone.
    pub fn notice(text: &'a str) -> Body<'a> {
        Body::Notice(Notice {
            text,
            ..Notice::default()
        })
    }

    /// `turn.finished` with no more than its outcome.
    pub fn turn_finished(message_id: &'a str, outcome: Outcome) -> Body<'a> {
        Body::TurnFinished(Finished::new(message_id, outcome))
    }
}

/// `message.accepted`, and a queued `local.input`: in the order they have
/// always been recorded.
#[derive(Debug, Serialize)]
pub struct Accepted<'a> {
    message_id: &'a str,
    from: &'a str,
    pid: Option<u32>,
    queue_position: usize,
    mode: TaskMode,
    body: BodyText<'a>,
    sender_id: &'a Option<String>,
    workspace: &'a Option<String>,
    /// A task through a bridge: the remote end, and its key's label.
    #[serde(skip_serializing_if = "Option::is_none")]
    remote: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: &'a Option<String>,
    /// Set by an offline sender that stored the task itself
    /// (docs/protocol.md §8).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stored: bool,
}

impl<'a> Accepted<'a> {
    pub fn new(
        task: &'a Task,
        body_json: Option<&'a RawValue>,
        from: &'a str,
        pid: Option<u32>,
        queue_position: usize,
    ) -> Accepted<'a> {
        Accepted {
            message_id: &task.message_id,
            from,
            pid,
            queue_position,
            mode: task.mode,
            body: BodyText::new(&task.body, body_json),
            sender_id: &task.sender.instance_id,
            workspace: &task.sender.workspace,
            remote: &task.sender.remote,
            key: &task.sender.key,
            stored: false,
        }
    }
}

/// `local.input`: a line queued as a local turn, or only noted (no
/// `--exec` handler).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Local<'a> {
    Queued(Accepted<'a>),
    Noted {
        body: &'a str,
        from: &'a str,
        /// `true`.
        noted: bool,
    },
}

/// `task.ended`: its reply as the receipt keeps it, and how a failed
/// turn's handler ended (`HandlerExit`'s members, among the others in
/// order: `sorted`).
#[derive(Debug, Serialize)]
pub struct Ended<'a> {
    message_id: &'a str,
    outcome: Outcome,
    reply: Option<&'a ReplyRecord>,
    #[serde(flatten)]
    handler: Option<&'a HandlerExit>,
    /// Written by `baton cancel` in a stopped agent's spool.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stored: bool,
}

impl<'a> Ended<'a> {
    pub fn new(
        message_id: &'a str,
        outcome: Outcome,
        reply: Option<&'a ReplyRecord>,
        handler: Option<&'a HandlerExit>,
    ) -> Ended<'a> {
        Ended {
            message_id,
            outcome,
            reply,
            handler,
            stored: false,
        }
    }
}

/// A body's members, and theirs, in the byte order of their names: a
/// JSON `Map` keeps them so.
fn sorted<T: Serialize, S: Serializer>(body: &T, s: S) -> Result<S::Ok, S::Error> {
    let members = serde_json::to_value(body).map_err(serde::ser::Error::custom)?;
    members.serialize(s)
}

/// `turn.finished`: the outcome; an exec handler's exit and bytes, or
/// why it could not start. `exit_code` and `signal` are `null` where the
/// handler has none, and absent where no handler ran.
#[derive(Debug, Serialize)]
pub struct Finished<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<Option<i32>>,
    pub message_id: &'a str,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<Option<i32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<u64>,
}

impl<'a> Finished<'a> {
    /// A turn's outcome, and nothing more.
    pub fn new(message_id: &'a str, outcome: Outcome) -> Finished<'a> {
        Finished {
            dropped_bytes: None,
            duration_ms: None,
            error: None,
            exit_code: None,
            message_id,
            outcome,
            signal: None,
            stderr_bytes: None,
            stdout_bytes: None,
        }
    }
}

/// `relay.sent`: the `relay/send` result as it came, with `reply_of`
/// among its members in order (`sorted`) when the send was a reply.
#[derive(Debug, Serialize)]
pub struct Relayed<'a> {
    #[serde(flatten)]
    pub result: &'a super::answer::SendResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_of: Option<&'a str>,
}

/// A `notice`: its text, and what it is about (docs/protocol.md §3).
#[derive(Debug, Default, Serialize)]
pub struct Notice<'a> {
    /// About Codex's app-server (`--codex`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub codex: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codex_thread: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codex_turn: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// The resource that ran short (docs/protocol.md §8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortage: Option<&'a str>,
    /// Written by `baton cancel` in a stopped agent's spool.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stored: bool,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmux_pane: Option<&'a str>,
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
