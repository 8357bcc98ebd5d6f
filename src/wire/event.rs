//! An event as a front end reads it (docs/protocol.md §3, Events): the
//! members every event has, typed, and those of each kind as options.
//! Read leniently: an event of a kind this version does not know (a newer
//! instance's), or with a member it cannot read, is still an event, whose
//! kind is unknown and which keeps its members as they came.

use super::TaskMode;
pub use super::answer::Target;
use super::{
    Approve, Decision, EventKind, HandlerExit, Mode, Outcome, ReplyRecord, Said, State, Stream,
};
use crate::base::status::Status;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// One event: the members front ends read (a member the event does not
/// have is `None`, or `false`). Read one with `Event::read`, which keeps
/// what an unknown kind carries.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Event {
    pub seq: u64,
    /// Epoch seconds, with milliseconds.
    pub time: f64,
    /// `None` for a kind this version does not know: `unknown` has it.
    #[serde(deserialize_with = "known_kind")]
    pub kind: Option<EventKind>,
    #[serde(skip)]
    pub unknown: Option<Unknown>,

    pub message_id: Option<String>,
    pub from: Option<Shown>,
    /// A connection's peer pid; the instance's own in `instance.started`,
    /// the handler's in `turn.started`.
    pub pid: Option<u32>,
    pub workspace: Option<String>,
    /// `exec` or `pull` (`instance.started`), else a task's: `queue` or `steer`.
    pub mode: Option<Said<EventMode>>,
    pub body: Option<String>,
    pub queue_position: Option<u64>,
    pub sender_id: Option<String>,
    pub remote: Option<String>,
    /// A bridged sender's key label (`baton bridge --key`).
    pub key: Option<String>,
    pub stored: bool,
    pub noted: bool,
    pub instance_id: Option<String>,
    pub name: Option<String>,
    pub approve: Option<Approve>,
    pub tmux_pane: Option<String>,
    /// The instance's state; in `relay.sent` the target's, as it answered
    /// (a zcoder peer's own words).
    pub state: Option<Said<State>>,
    /// A delivery status; in `relay.sent` as the target answered.
    pub status: Option<Said<Status>>,
    pub reason: Option<String>,
    pub text: Option<String>,
    pub follow_up_of: Option<String>,
    pub outcome: Option<Outcome>,
    pub reply: Option<ReplyRecord>,
    pub stream: Option<Said<Stream>>,
    pub dropped: Option<u64>,
    pub exit_code: Option<i32>,
    /// `task.ended`'s `exit_status`, `signal`, `stderr_tail` and `host`:
    /// how a failed turn's handler ended; `signal` is `turn.finished`'s
    /// too, and `host` `permission.requested`'s MCP host.
    #[serde(flatten)]
    pub handler: HandlerExit,
    pub duration_ms: Option<u64>,
    pub error: Option<String>,
    pub target: Option<Target>,
    pub candidates: Option<Vec<Target>>,
    pub reply_of: Option<String>,
    pub approval_id: Option<String>,
    pub digest: Option<String>,
    pub bytes: Option<u64>,
    /// `approval.requested`'s: the body's line count and first lines.
    pub lines: Option<u64>,
    pub excerpt: Option<String>,
    pub decision: Option<Decision>,
    pub by: Option<String>,
    pub by_pid: Option<u32>,
    pub request_id: Option<String>,
    pub tool_name: Option<String>,
    pub description: Option<String>,
    pub input_preview: Option<String>,
    pub host_pid: Option<u32>,
    /// Not the protocol's (its `excerpt` and `bytes`): what an approval
    /// shows, which the view still reads from an `approval.requested` that
    /// carries it.
    pub body_excerpt: Option<String>,
    pub body_bytes: Option<u64>,
}

/// `mode`: an instance's in `instance.started`, else a task's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum EventMode {
    Task(TaskMode),
    Instance(Mode),
}

impl std::fmt::Display for EventMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventMode::Task(m) => m.fmt(f),
            EventMode::Instance(m) => m.fmt(f),
        }
    }
}

/// An event this version cannot read: its kind as spelled (`?` without
/// one) and every member but `seq`, `time` and `kind`.
#[derive(Clone, Debug, Default)]
pub struct Unknown {
    pub kind: String,
    pub members: Map<String, Value>,
}

/// `from`: how the sender is shown. An object with `name` and
/// `workspace`, as an approval request once gave it, is read too.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Shown {
    Name(String),
    Sender {
        name: Option<String>,
        workspace: Option<String>,
    },
}

fn known_kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EventKind>, D::Error> {
    let kind = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    Ok(kind.parse().ok())
}

impl Event {
    /// An event's members, `params` of an `event` notification or a line
    /// of the transcript.
    pub fn read(v: &Value) -> Event {
        match Event::deserialize(v) {
            Ok(ev) if ev.kind.is_some() => ev,
            _ => {
                let mut members = v.as_object().cloned().unwrap_or_default();
                let (seq, time) = (members.remove("seq"), members.remove("time"));
                let kind = members.remove("kind");
                let kind = kind.as_ref().and_then(Value::as_str).unwrap_or("?").into();
                Event {
                    seq: seq.and_then(|s| s.as_u64()).unwrap_or(0),
                    time: time.and_then(|t| t.as_f64()).unwrap_or(0.0),
                    unknown: Some(Unknown { kind, members }),
                    ..Event::default()
                }
            }
        }
    }

    /// The event an `event` notification carries; `None` for any other
    /// message.
    pub fn of_notification(msg: &Value) -> Option<Event> {
        (msg.get("method")? == "event").then(|| msg.get("params").map(Event::read))?
    }

    /// The kind as spelled, known or not.
    pub fn kind_name(&self) -> &str {
        match (&self.kind, &self.unknown) {
            (Some(k), _) => k.as_str(),
            (None, Some(u)) => &u.kind,
            (None, None) => "?",
        }
    }

    /// `message_id`, or empty.
    pub fn id(&self) -> &str {
        self.message_id.as_deref().unwrap_or("")
    }

    /// How the sender is shown (`from`), when the event says.
    pub fn sender(&self) -> Option<&str> {
        match self.from.as_ref()? {
            Shown::Name(s) => Some(s),
            Shown::Sender { name, .. } => name.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kind_this_version_does_not_know_keeps_its_members() {
        let ev = Event::read(&json!({"seq": 3, "time": 1.5, "kind": "task.moved",
                                     "message_id": "m", "to": {"x": 1}}));
        assert_eq!(
            (ev.seq, ev.time, ev.kind, ev.kind_name()),
            (3, 1.5, None, "task.moved")
        );
        let members = ev.unknown.unwrap().members;
        assert_eq!(
            Value::Object(members),
            json!({"message_id": "m", "to": {"x": 1}})
        );
        // A member of another type than the protocol's is read the same way.
        let odd = Event::read(&json!({"kind": "task.ended", "outcome": 7}));
        assert_eq!((odd.kind, odd.kind_name()), (None, "task.ended"));
        assert_eq!(Event::read(&json!([])).kind_name(), "?");
    }

    #[test]
    fn a_known_kind_is_typed() {
        let ev = Event::read(&json!({"seq": 9, "time": 2.0, "kind": "task.ended",
            "message_id": "m-1", "outcome": "done", "from": "alpha", "pid": null,
            "reply": {"message_id": null, "body": "ok"}, "zzz": 1}));
        assert_eq!(ev.kind, Some(EventKind::TaskEnded));
        assert_eq!((ev.id(), ev.sender(), ev.pid), ("m-1", Some("alpha"), None));
        assert_eq!(ev.outcome, Some(Outcome::Done));
        assert_eq!(ev.reply.unwrap().body, "ok");
        let note = json!({"jsonrpc": "2.0", "method": "event", "params": {"kind": "notice"}});
        assert_eq!(
            Event::of_notification(&note).unwrap().kind,
            Some(EventKind::Notice)
        );
        assert!(Event::of_notification(&json!({"id": 1, "result": {}})).is_none());
    }

    #[test]
    fn names_are_typed_and_a_newer_word_is_kept() {
        let ev = Event::read(&json!({"kind": "turn.output", "stream": "stderr", "mode": "steer"}));
        assert_eq!(ev.stream, Some(Said::Known(Stream::Stderr)));
        assert_eq!(ev.mode, Some(Said::Known(EventMode::Task(TaskMode::Steer))));
        let started = Event::read(&json!({"kind": "instance.started", "mode": "pull",
                                         "state": "paused"}));
        assert_eq!(
            started.mode,
            Some(Said::Known(EventMode::Instance(Mode::Pull)))
        );
        assert!(started.state.is_some_and(|s| s == State::Paused));
        let newer = Event::read(&json!({"kind": "relay.sent", "status": "later",
                                       "state": "thinking", "stream": "fd3"}));
        assert_eq!(newer.kind, Some(EventKind::RelaySent));
        assert_eq!(newer.status, Some(Said::Other("later".into())));
        assert_eq!(newer.state.unwrap().to_string(), "thinking");
        assert_eq!(newer.stream.unwrap().to_string(), "fd3");
    }
}
