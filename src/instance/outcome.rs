//! What became of a task, for its sender (issue 19): every final outcome
//! is recorded once as `task.ended`, and `task/status` answers where a
//! task is from the spool (its place, or its receipt) and the approvals
//! waiting, so it holds across restarts. Reading a receipt is a local
//! disk read, which the foreground may do.

use super::{Foreground, str_param};
use crate::access::{Caller, Role};
use crate::server::RpcError;
use crate::spool::{ReplyRecord, Whereabouts};
use crate::wire::Outcome;
use serde_json::{Map, Value, json};

impl Foreground {
    /// Records a task's final outcome at this receiver, with its reply
    /// when it finished with one.
    pub(super) fn ended(&self, message_id: &str, outcome: Outcome, reply: Option<&ReplyRecord>) {
        self.hub.emit(
            "task.ended",
            json!({"message_id": message_id, "outcome": outcome, "reply": reply}),
        );
    }

    /// `task/status`.
    pub(super) fn task_status(
        &self,
        params: &Map<String, Value>,
        caller: &Caller,
    ) -> std::result::Result<Value, RpcError> {
        let id = str_param(params, "message_id")?;
        let mut v = json!({"message_id": id});
        let whereabouts = self.spool().whereabouts(&id);
        // A remote key hears about what came through a bridge, nothing
        // else (docs/security.md).
        if caller.role == Role::Bridge {
            let remote = match &whereabouts {
                Whereabouts::Finished(Some(r)) => r.remote,
                Whereabouts::Unknown | Whereabouts::Finished(None) => true,
                _ => self.spool().remote_sent(&id).unwrap_or(true),
            };
            if !remote {
                v["status"] = json!("unknown");
                v["reason"] = json!(
                    "it did not come through a bridge: a bridge asks only about the tasks sent through one"
                );
                return Ok(v);
            }
        }
        // Checked by the connection (`verify_asker`): a verified asker
        // hears about its own tasks only.
        if let Some(asker) = params.get("sender_instance_id").and_then(Value::as_str) {
            let sender = match &whereabouts {
                Whereabouts::Finished(Some(r)) => Some(r.sender_instance_id.clone()),
                Whereabouts::Unknown | Whereabouts::Finished(None) => None,
                _ => self.spool().sender_of(&id),
            };
            if sender.is_some_and(|s| s.as_deref() != Some(asker)) {
                v["status"] = json!("unknown");
                v["reason"] = json!(format!(
                    "instance {asker} did not send it: an instance asks only about its own tasks"
                ));
                return Ok(v);
            }
        }
        let status = match whereabouts {
            Whereabouts::Queued(_) if self.asked.contains_key(&id) => "awaiting_approval",
            Whereabouts::Queued(n) => {
                v["queue_position"] = json!(n);
                "queued"
            }
            Whereabouts::Processing => "running",
            Whereabouts::Interrupted => Outcome::Interrupted.as_str(),
            Whereabouts::Expired => Outcome::Expired.as_str(),
            Whereabouts::Rejected(reason) => {
                if let Some(r) = reason {
                    v["reason"] = json!(r);
                }
                Outcome::Rejected.as_str()
            }
            Whereabouts::Finished(Some(r)) => {
                v["finished_at"] = json!(r.finished_at);
                v["reply"] = json!(r.reply);
                r.outcome.as_str()
            }
            Whereabouts::Finished(None) => {
                v["reason"] = json!("its receipt cannot be read back");
                "unknown"
            }
            Whereabouts::Unknown => "unknown",
        };
        v["status"] = json!(status);
        Ok(v)
    }
}

/// A reply's text as a receipt keeps it: at most `limit` bytes, cut on a
/// character boundary.
pub(super) fn bounded(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
