//! What became of a task, for its sender (issue 19): every final outcome
//! is recorded once as `task.ended`, and `task/status` answers where a
//! task is from the spool (its place, or its receipt) and the approvals
//! waiting, so it holds across restarts. Reading a receipt is a local
//! disk read, which the foreground may do.

use super::{Answer, Foreground, Params};
use crate::spool::{HandlerExit, ReplyRecord, Through, Whereabouts};
use crate::wire::Body;
use crate::wire::Outcome;
use crate::wire::access::Caller;
use crate::wire::answer::{Pending, TaskState, TaskStatus};
use crate::wire::body::Ended;
use crate::wire::request::TaskParams;

impl Foreground {
    /// A reply as a receipt keeps it, sent as `message_id`: at most
    /// `max_message_bytes` of its text, cut on a character boundary.
    pub(super) fn kept(&self, text: &str, message_id: Option<String>) -> ReplyRecord {
        let mut end = text.len().min(self.shared.config.max_message_bytes);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let body = text[..end].to_string();
        ReplyRecord { message_id, body }
    }

    /// Records a task's final outcome at this receiver, with its reply
    /// when it finished with one, and how the turn's handler ended when it
    /// failed.
    pub(super) fn ended(
        &self,
        message_id: &str,
        outcome: Outcome,
        reply: Option<&ReplyRecord>,
        handler: Option<&HandlerExit>,
    ) {
        let ended = Ended::new(message_id, outcome, reply, handler);
        self.hub.emit(Body::TaskEnded(ended));
    }

    /// Whether the task `id` (at `w`) came through a bridge whose key had
    /// `label`; a task the spool does not know is nobody's, and its
    /// answer says so (true).
    pub(super) fn bridged_with(&self, id: &str, w: &Whereabouts, label: Option<&str>) -> bool {
        let through = match w {
            Whereabouts::Unknown | Whereabouts::Finished(None) => return true,
            Whereabouts::Finished(Some(r)) => Some(r.through()),
            _ => self.spool().through(id),
        };
        through.is_none_or(|t| t == Through::Bridge(label.map(String::from)))
    }

    /// `task/status`.
    pub(super) fn task_status(&self, params: &Params, caller: &Caller) -> Answer {
        let TaskParams {
            message_id: id,
            sender_instance_id: asker,
        } = TaskParams::read(params)?;
        let mut v = TaskStatus {
            accepted_at: None,
            approval_id: None,
            finished_at: None,
            handler: HandlerExit::default(),
            message_id: id.clone(),
            queue_position: None,
            reason: None,
            reply: None,
            status: TaskState::Pending(Pending::Unknown),
        };
        let answer = |v: TaskStatus| super::answer(v);
        let whereabouts = self.spool().whereabouts(&id);
        // A remote key hears about what came through a bridge of its own
        // label, nothing else (docs/security.md).
        if let Some(key) = &caller.bridge {
            let label = key.label.as_deref();
            if !self.bridged_with(&id, &whereabouts, label) {
                v.reason = Some(format!(
                    "it was not sent through a bridge {}: a bridge asks only about the tasks sent through one with its own key's label",
                    with_label(label)
                ));
                return answer(v);
            }
        }
        // Checked by the connection (`verify_asker`): a verified asker
        // hears about its own tasks only.
        if let Some(asker) = asker.as_deref() {
            let sender = match &whereabouts {
                Whereabouts::Finished(Some(r)) => Some(r.sender_instance_id.clone()),
                Whereabouts::Unknown | Whereabouts::Finished(None) => None,
                _ => self.spool().sender_of(&id),
            };
            if sender.is_some_and(|s| s.as_deref() != Some(asker)) {
                v.reason = Some(format!(
                    "instance {asker} did not send it: an instance asks only about its own tasks"
                ));
                return answer(v);
            }
        }
        v.accepted_at = match &whereabouts {
            Whereabouts::Finished(Some(r)) => r.accepted_at,
            Whereabouts::Finished(None) | Whereabouts::Unknown => None,
            _ => self.spool().accepted_at(&id),
        };
        v.status = match whereabouts {
            Whereabouts::Queued(_) if self.asked.contains_key(&id) => {
                v.approval_id = self.asked.get(&id).map(|p| p.id.clone());
                TaskState::Pending(Pending::AwaitingApproval)
            }
            Whereabouts::Queued(n) => {
                v.queue_position = Some(n);
                TaskState::Pending(Pending::Queued)
            }
            Whereabouts::Processing => TaskState::Pending(Pending::Running),
            Whereabouts::Interrupted => TaskState::Ended(Outcome::Interrupted),
            Whereabouts::Expired => TaskState::Ended(Outcome::Expired),
            Whereabouts::Rejected(reason) => {
                v.reason = reason;
                TaskState::Ended(Outcome::Rejected)
            }
            Whereabouts::Finished(Some(r)) => {
                v.finished_at = Some(r.finished_at);
                v.reply = Some(r.reply);
                v.handler = r.handler;
                TaskState::Ended(r.outcome)
            }
            Whereabouts::Finished(None) => {
                v.reason = Some("its receipt cannot be read back".into());
                TaskState::Pending(Pending::Unknown)
            }
            Whereabouts::Unknown => TaskState::Pending(Pending::Unknown),
        };
        answer(v)
    }
}

/// A bridge's key as its refusals name it: `with --key LABEL`, or
/// `without --key`.
pub(super) fn with_label(label: Option<&str>) -> String {
    match label {
        Some(l) => format!("with --key {l}"),
        None => "without --key".into(),
    }
}
