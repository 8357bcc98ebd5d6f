//! The work methods: `inbox/*`, `task/*`, `relay/send`, `turn/*` and
//! `message/send`. Each params type is built by the clients and read by
//! the instance with `read`, once, which refuses a bad member with the
//! protocol's own words (`params::Fields`).

use super::params::{Fields, Invalid};
use crate::wire::answer::{CompleteParams, Target};
use crate::wire::{Outcome, Said, Summary};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The params of a call about one task: `inbox/requeue`,
/// `inbox/discard`, `task/status` and `task/cancel`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TaskParams {
    pub message_id: String,
    /// The instance that asks, for its own tasks: checked by the
    /// connection before the call reaches the foreground.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_instance_id: Option<String>,
}

impl TaskParams {
    /// About `message_id`.
    pub fn new(message_id: &str) -> TaskParams {
        TaskParams {
            message_id: message_id.to_string(),
            sender_instance_id: None,
        }
    }

    pub fn read(p: &Map<String, Value>) -> Result<TaskParams, Invalid> {
        let f = Fields(p);
        Ok(TaskParams {
            message_id: f.need_text("message_id")?,
            sender_instance_id: f.checked_text("sender_instance_id"),
        })
    }
}

/// `turn/cancel`'s params: the turn of `message_id`, or whichever runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TurnCancelParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

impl TurnCancelParams {
    pub fn read(p: &Map<String, Value>) -> Result<TurnCancelParams, Invalid> {
        Ok(TurnCancelParams {
            message_id: Fields(p).text("message_id")?,
        })
    }
}

/// `turn/local`'s params: a line the operator typed.
#[derive(Clone, Debug, Serialize)]
pub struct LocalParams {
    pub text: String,
}

impl LocalParams {
    pub fn read(p: &Map<String, Value>) -> Result<LocalParams, Invalid> {
        Ok(LocalParams {
            text: Fields(p).need_text("text")?,
        })
    }
}

/// `inbox/received`'s params: the reply `message_id` to our task
/// `in_reply_to` reached us through a wait.
#[derive(Clone, Debug, Serialize)]
pub struct ReceivedParams {
    pub in_reply_to: String,
    pub message_id: String,
}

impl ReceivedParams {
    pub fn read(p: &Map<String, Value>) -> Result<ReceivedParams, Invalid> {
        let f = Fields(p);
        Ok(ReceivedParams {
            message_id: f.need_text("message_id")?,
            in_reply_to: f.need_text("in_reply_to")?,
        })
    }
}

/// `inbox/list`'s params: the page after `after`, `limit` tasks at most.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl ListParams {
    pub fn read(p: &Map<String, Value>) -> Result<ListParams, Invalid> {
        let f = Fields(p);
        let positive = |v: &Value| v.as_u64().filter(|n| *n > 0);
        Ok(ListParams {
            limit: f.opt("limit", "a positive integer", positive)?,
            after: f.text("after")?,
        })
    }
}

impl CompleteParams {
    /// As the instance reads them: `outcome` is still as given (`None`
    /// for `done`); the instance judges it.
    pub fn read(p: &Map<String, Value>) -> Result<CompleteParams, Invalid> {
        let f = Fields(p);
        Ok(CompleteParams {
            message_id: f.need_text("message_id")?,
            outcome: f.text("outcome")?.map(|o| Said::spelled(&o)),
            reply: f.text("reply")?,
            reply_to_reply: f.opt("reply_to_reply", "a boolean", Value::as_bool)?,
        })
    }

    /// The outcome asked for, if it is one a pull agent may give.
    pub fn completes(&self) -> Option<Outcome> {
        match &self.outcome {
            None => Some(Outcome::Done),
            Some(Said::Known(o)) if o.completes() => Some(*o),
            Some(_) => None,
        }
    }
}

/// `relay/send`'s params: a send the agent (or the operator) makes
/// through its instance; the instance decides the target within a turn.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RelayParams {
    pub body: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Back to the sender of the turn's task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The turn token it is sent in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}

impl RelayParams {
    pub fn read(p: &Map<String, Value>) -> Result<RelayParams, Invalid> {
        let f = Fields(p);
        Ok(RelayParams {
            body: f.need_text("body")?,
            turn: f.text("turn")?,
            target: f.text("target")?,
            mode: f.text("mode")?,
            reply: f.opt("reply", "a boolean", Value::as_bool)?,
            message_id: f.text("message_id")?,
        })
    }
}

/// `message/send`'s params as a sender builds them (the instance reads
/// them as `server::SendRequest`, straight from the line when it can).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SendParams {
    pub body: String,
    pub hop: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    pub message_id: String,
    /// As given (`queue` or `steer`): the receiver judges it.
    pub mode: String,
    /// Who sends, as it says: nothing from a plain command line, which
    /// the receiver knows by its peer credentials.
    pub sender: SendSender,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_instance_id: Option<String>,
}

/// `message/send`'s `sender`: the instance a task is sent for, named as
/// a send's `Target` is.
pub type SendSender = Target;

/// One page of `inbox/list` as the instance writes it: every place, and
/// `next` (null on the last page). `answer::InboxPage` reads it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Page {
    pub awaiting_approval: Vec<String>,
    pub interrupted: Vec<Summary>,
    pub next: Option<String>,
    pub processing: Vec<Summary>,
    pub queued: Vec<Summary>,
    pub rejected: Vec<Summary>,
}

impl Page {
    /// A place's list by its name (`processing`, `rejected`,
    /// `interrupted`, `queued`).
    pub fn place_mut(&mut self, place: &str) -> &mut Vec<Summary> {
        match place {
            "queued" => &mut self.queued,
            "processing" => &mut self.processing,
            "interrupted" => &mut self.interrupted,
            _ => &mut self.rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn params_are_read_with_the_protocols_refusals() {
        let e = TaskParams::read(&map(json!({"message_id": 1}))).unwrap_err();
        assert_eq!(e.to_string(), "invalid params: message_id must be a string");
        let e = ReceivedParams::read(&map(json!({"message_id": "a"}))).unwrap_err();
        assert_eq!(e.to_string(), "invalid params: in_reply_to is missing");
        let e = ListParams::read(&map(json!({"limit": 0}))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid params: limit must be a positive integer"
        );
        let e = CompleteParams::read(&map(json!({"message_id": "m", "reply_to_reply": 1})));
        assert_eq!(
            e.unwrap_err().to_string(),
            "invalid params: reply_to_reply must be a boolean"
        );
        let c = CompleteParams::read(&map(json!({"message_id": "m"}))).unwrap();
        assert_eq!(c.completes(), Some(Outcome::Done));
        let c = CompleteParams::read(&map(json!({"message_id": "m", "outcome": "timeout"})));
        assert_eq!(c.unwrap().completes(), None);
    }

    #[test]
    fn params_are_written_as_the_maps_they_replace() {
        let t = serde_json::to_string(&TaskParams::new("m")).unwrap();
        assert_eq!(t, json!({"message_id": "m"}).to_string());
        let r = ReceivedParams {
            in_reply_to: "a".into(),
            message_id: "b".into(),
        };
        let want = json!({"message_id": "b", "in_reply_to": "a"}).to_string();
        assert_eq!(serde_json::to_string(&r).unwrap(), want);
        let page = serde_json::to_string(&Page::default()).unwrap();
        let want = json!({"processing": [], "rejected": [], "interrupted": [], "queued": [],
                          "awaiting_approval": [], "next": null});
        assert_eq!(page, want.to_string());
    }
}

/// A `message/send` request with well-typed fields, as the server reads
/// its params (or its fast path its line, or a zcoder `enqueue`); values
/// are not yet checked (`server::deliver` judges them).
#[derive(Debug, PartialEq)]
pub struct SendRequest {
    pub message_id: String,
    pub target_instance_id: String,
    pub body: String,
    pub sender_instance_id: Option<String>,
    pub sender_name: Option<String>,
    pub sender_workspace: Option<String>,
    /// `None` for a negative hop, a value error rather than a type error.
    pub hop: Option<u64>,
    pub in_reply_to: Option<String>,
    pub mode: String,
}

impl SendRequest {
    /// `message/send`'s params, their JSON types checked.
    pub fn read(p: &Map<String, Value>) -> Result<SendRequest, Invalid> {
        let f = Fields(p);
        let sender = Fields(f.need("sender", "an object", Value::as_object)?);
        // A negative hop is a value error (`None`), not a type error.
        let hop = f.opt("hop", "an integer", |v| {
            v.as_u64().map(Some).or_else(|| v.is_i64().then_some(None))
        })?;
        Ok(SendRequest {
            message_id: f.need_text("message_id")?,
            target_instance_id: f.need_text("target_instance_id")?,
            body: f.need_text("body")?,
            sender_instance_id: sender.text("sender.instance_id")?,
            sender_name: sender.text("sender.name")?,
            sender_workspace: sender.text("sender.workspace")?,
            hop: hop.unwrap_or(Some(0)),
            in_reply_to: f.text("in_reply_to")?,
            mode: f.text("mode")?.unwrap_or_else(|| "queue".into()),
        })
    }
}
