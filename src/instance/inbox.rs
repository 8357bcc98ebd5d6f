//! A pull agent has at most one task open at a time: `inbox/claim` hands
//! out the next approved task only when none is open (a `steer` task from
//! the open task's sender joins its turn instead), and `inbox/complete`
//! ends it. Here too: putting interrupted tasks back, or discarding them.

use super::outbound::{Plan, Waiter};
use super::{Answer, Foreground, OpenTask, Params, Reply, answer};
use crate::base::status::{ReplyStatus, Status};
use crate::server::{self, RpcError};
use crate::spool::{Claim, ReplyRecord, Task, Whereabouts};
use crate::text::sanitize::escape;
use crate::wire::ClaimStatus;
use crate::wire::HandlerExit;
use crate::wire::Outcome;
use crate::wire::answer::{
    Claimed, ClaimedTask, CompleteParams, Handled, RejectedTask, SendResult,
};
use crate::wire::request::{RelayParams, TaskParams};
use crate::wire::{Call, Handling};
use crate::workers::turn;

use super::approval::Gate;
use crate::wire::Body;
use crate::wire::body::Relayed;

/// The `notice` of a claimed task put back because its caller is gone.
pub(crate) const UNDELIVERED: &str = "the answer to inbox/claim did not reach its caller (it stopped waiting or closed its connection): the task went back to its place at the head of the queue";

/// `plan_send`'s answer for the reply of `inbox/complete`.
type PlannedReply = Result<Plan, RpcError>;

impl Foreground {
    /// Pull mode: hands out the next task and opens its turn.
    pub(super) fn claim(&mut self) -> Claimed {
        if self.opts.exec.is_some() {
            let why = "this instance runs its tasks with --exec; there is nothing to claim";
            return Claimed::not(ClaimStatus::Invalid, Some(why.to_string()));
        }
        if self.paused() {
            return Claimed::not(
                ClaimStatus::Paused,
                Some(server::reason::PAUSED.to_string()),
            );
        }
        let mut rejected = Vec::new();
        let mut result = loop {
            // A steer task from the sender of the open task joins its turn,
            // wherever it waits in the queue.
            let follow_up = self.open.first().and_then(|o| {
                let sender = o.task.sender.instance_id.as_deref()?;
                let steer = self.spool().first_steer_from(sender)?;
                Some((steer, o.token.clone()))
            });
            if let (None, Some(o)) = (&follow_up, self.open.first()) {
                let id = o.task.message_id.clone();
                let why = format!("task {id} is still open: complete it first");
                break Claimed {
                    message_id: Some(id),
                    ..Claimed::not(ClaimStatus::Busy, Some(why))
                };
            }
            let next = match &follow_up {
                Some((steer, _)) => match self.gate(steer) {
                    Gate::Go => Some(steer.message_id.clone()),
                    Gate::Wait => None,
                    Gate::Denied | Gate::Received => continue,
                },
                None => self.approved_head(),
            };
            let Some(id) = next else {
                let waiting = follow_up
                    .as_ref()
                    .map(|(s, _)| s.message_id.clone())
                    .or_else(|| self.asked.keys().next().cloned());
                break match waiting {
                    Some(w) => Claimed {
                        reason: Some(format!("task {w} waits for approval")),
                        message_id: Some(w),
                        ..Claimed::not(ClaimStatus::AwaitingApproval, None)
                    },
                    None => Claimed::not(ClaimStatus::Empty, None),
                };
            };
            self.approved.remove(&id);
            match self.spool().claim_id(&id) {
                Ok(Claim::Task(task)) => {
                    self.supplied();
                    let token = follow_up.map_or_else(Self::new_token, |(_, t)| t);
                    break self.open_turn(*task, token);
                }
                Ok(Claim::Empty) => break Claimed::not(ClaimStatus::Empty, None),
                Ok(Claim::Rejected { message_id, reason }) => {
                    eprintln!(
                        "baton: task {} is bad data and went to rejected/: {}",
                        escape(&message_id),
                        escape(&reason)
                    );
                    self.hub.emit(Body::TaskRejected {
                        message_id: &message_id,
                        reason: &reason,
                    });
                    self.ended(&message_id, Outcome::Rejected, None, None);
                    rejected.push(RejectedTask { message_id, reason });
                }
                Err(e) => break self.claim_failed(&id, &e),
            }
        };
        self.refresh();
        result.rejected = rejected;
        result
    }

    /// The answer that handed out `id` under `turn` never reached its
    /// caller: if the task is still open under that turn, it goes back to
    /// its place in the queue (the head, unless a task sent earlier was
    /// put back meanwhile), still approved, and a `notice` says so. Once:
    /// a task completed meanwhile, or claimed again, is left alone.
    pub(super) fn claim_undelivered(&mut self, id: &str, turn: &str) {
        let open = |o: &OpenTask| o.task.message_id == id && o.token == turn;
        let Some(pos) = self.open.iter().position(open) else {
            return;
        };
        self.open.remove(pos);
        if self.unclaim(id) {
            self.notice(Some(id), UNDELIVERED);
        }
        self.refresh();
    }

    /// Opens the turn of a claimed task (or adds it to the open turn whose
    /// token it gets) and says so.
    fn open_turn(&mut self, task: Task, token: String) -> Claimed {
        let how = if self.opts.reply_by_tool {
            turn::REPLY_BY_TOOL.to_string()
        } else {
            turn::reply_by_inbox(&self.origin.name, &task.message_id)
        };
        let envelope = self.pane_envelope(&task);
        let envelope = envelope.or_else(|| self.codex_envelope(&task));
        let envelope = envelope.unwrap_or_else(|| {
            turn::envelope(&task, task.sender.instance_id.is_some().then_some(&*how))
        });
        let follows = self.open.first().map(|o| o.task.message_id.clone());
        self.hub.emit(Body::TaskClaimed {
            follow_up_of: follows.as_deref(),
            from: &turn::display_name(&task.sender),
            message_id: &task.message_id,
        });
        let v = Claimed {
            task: Some(claimed_task(&task, envelope, &token, follows)),
            ..Claimed::not(ClaimStatus::Claimed, None)
        };
        self.open.push(OpenTask { task, token });
        v
    }

    /// Puts an interrupted task back in the queue (`inbox/requeue`), or
    /// discards it with a receipt, so a retry of its id stays a duplicate
    /// (`inbox/discard`).
    pub(super) fn interrupted(&mut self, call: Call, params: &Params) -> Answer {
        let id = TaskParams::read(params)?.message_id;
        let handled = |status, reason| answer(Handled::new(status, Some(&id), reason));
        if !self.spool().is_set_aside(&id) {
            let why = format!("no interrupted or rejected task {}", escape(&id));
            return handled(Handling::Invalid, Some(why));
        }
        let done = match call {
            Call::InboxDiscard => self.spool().finish(&id, Outcome::Discarded).map(|()| {
                self.hub.emit(Body::TaskDiscarded { message_id: &id });
                self.ended(&id, Outcome::Discarded, None, None);
                Handling::Discarded
            }),
            _ => self.spool().requeue(&id).map(|()| {
                self.hub.emit(Body::TaskRequeued { message_id: &id });
                Handling::Requeued
            }),
        };
        match done {
            Ok(status) => handled(status, None),
            Err(e) => handled(Handling::Error, Some(e.to_string())),
        }
    }

    /// `inbox/complete`. With `reply`, the answer waits for the reply's
    /// delivery (on a thread, `Waiter::Complete`), so it says where the
    /// reply went; the task is finished either way.
    pub(super) fn complete(&mut self, params: &Params, answer_to: Reply) {
        let finished = self.finish_open(params);
        // The state is published before the answer goes out: a client
        // that reads the manifest after its answer sees the task ended.
        self.refresh();
        match finished {
            Ok((answer, Some((id, plan)))) => self.reply_from(id, plan, answer, answer_to),
            done => {
                let _ = answer_to.send(done.and_then(|(handled, _)| answer(handled)));
            }
        }
    }

    /// Finishes an open task: the answer, and the planned reply when one
    /// is to go out (planned first, so the receipt can name its id).
    fn finish_open(
        &mut self,
        params: &Params,
    ) -> Result<(Handled, Option<(String, PlannedReply)>), RpcError> {
        let params = CompleteParams::read(params)?;
        let (id, reply) = (params.message_id.clone(), params.reply.clone());
        let reply_to_reply = params.reply_to_reply.unwrap_or(false);
        let handled = |status, reason| Handled::new(status, Some(&id), reason);
        let invalid = |reason: String| Ok((handled(Handling::Invalid, Some(reason)), None));
        let Some(outcome) = params.completes() else {
            return invalid("outcome is not done or failed".into());
        };
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            // Cancelled while it was open (`task/cancel`): say so.
            let cancelled = matches!(self.spool().whereabouts(&id),
                Whereabouts::Finished(Some(r)) if r.outcome == Outcome::Cancelled);
            let why = if cancelled { ": it was cancelled" } else { "" };
            return invalid(format!("task {} is not open here{why}", escape(&id)));
        };
        let of = self.open[pos].task.in_reply_to.as_deref();
        if let (Some(of), Some(_), false) = (of, &reply, reply_to_reply) {
            // Two agents that answer every reply would never stop.
            return invalid(format!(
                "task {} is itself a reply (to {}): its reply would go back to the agent that answered; complete it without a reply, or ask for one with reply_to_reply (baton inbox complete --reply-to-reply)",
                escape(&id),
                escape(of)
            ));
        }
        // A plain command line has no inbox: the reply stays in the
        // receipt, where its waiting sender reads it, and that is said.
        let plain = self.open[pos].task.sender.instance_id.is_none();
        if let (true, Some(body)) = (plain, &reply) {
            let record = self.kept(body, None);
            if let Err(e) = self.finish_turn(pos, outcome, Some(record), None) {
                return Ok((handled(Handling::Error, Some(e.to_string())), None));
            }
            let why = super::outbound::PLAIN_SENDER.to_string();
            let kept = SendResult::new(ReplyStatus::Kept.as_str(), "", Some(why));
            let result = Handled {
                reply: Some(kept),
                ..completed(&id, outcome)
            };
            return Ok((result, None));
        }
        let planned = reply.map(|body| {
            let p = RelayParams {
                body: body.clone(),
                reply: Some(true),
                turn: Some(self.open[pos].token.clone()),
                ..RelayParams::default()
            };
            let plan = self.plan_send(p, None);
            let sent = plan.as_ref().ok().and_then(|p| p.as_ref().ok());
            let record = self.kept(&body, sent.map(|out| out.message_id.clone()));
            (plan, record)
        });
        let record = planned.as_ref().map(|(_, r)| r.clone());
        if let Err(e) = self.finish_turn(pos, outcome, record, None) {
            return Ok((handled(Handling::Error, Some(e.to_string())), None));
        }
        let result = completed(&id, outcome);
        Ok((result, planned.map(|(plan, _)| (id, plan))))
    }

    /// Finishes the task of the open turn at `pos` as `outcome`, with the
    /// reply it finished with and, for a failed Codex turn, Codex's error:
    /// the turn is over, unless the spool fails.
    pub(super) fn finish_turn(
        &mut self,
        pos: usize,
        outcome: Outcome,
        reply: Option<ReplyRecord>,
        handler: Option<HandlerExit>,
    ) -> crate::base::error::Result<()> {
        let id = self.open[pos].task.message_id.clone();
        self.spool()
            .finish_turn(&id, outcome, reply.clone(), handler.clone())?;
        self.open.remove(pos);
        self.codex_cancelled(&id);
        self.hub.emit(Body::turn_finished(&id, outcome));
        self.ended(&id, outcome, reply.as_ref(), handler.as_ref());
        Ok(())
    }

    /// `inbox/complete` with `reply`: the reply goes out like `baton send
    /// --reply` from the turn just completed (planned while it was open),
    /// on a sender thread, and `answer` goes to `answer_to` with the
    /// reply's result once it is known (bounded by the I/O timeout).
    fn reply_from(&mut self, id: String, plan: PlannedReply, done: Handled, answer_to: Reply) {
        let refused = match plan {
            Ok(Ok(out)) => {
                let waiter = Waiter::Complete {
                    reply: answer_to,
                    answer: Box::new(done),
                };
                return self.spawn_send(out, Some(id), Some(waiter));
            }
            Ok(Err(refusal)) => {
                self.hub.emit(Body::RelaySent(Relayed {
                    result: &refusal,
                    reply_of: Some(&id),
                }));
                refusal
            }
            Err(e) => SendResult {
                message_id: None,
                ..SendResult::new(Status::Invalid, "", Some(e.message))
            },
        };
        let done = Handled {
            reply: Some(refused),
            ..done
        };
        let _ = answer_to.send(answer(done));
    }
}

/// `inbox/complete`'s answer for the task `id`, finished as `outcome`.
fn completed(id: &str, outcome: Outcome) -> Handled {
    Handled {
        outcome: Some(Some(outcome.into())),
        ..Handled::new(Handling::Completed, Some(id), None)
    }
}

/// What `inbox/claim` hands out of a claimed task: the task as its sender
/// gave it, with its envelope, its turn's token and the open task it
/// follows up, if any.
fn claimed_task(
    task: &Task,
    envelope: String,
    token: &str,
    follows: Option<String>,
) -> ClaimedTask {
    ClaimedTask {
        accepted_at: task.accepted_at,
        body: task.body.clone(),
        envelope,
        follow_up_of: follows,
        hop: task.hop,
        in_reply_to: task.in_reply_to.clone(),
        message_id: task.message_id.clone(),
        mode: task.mode.to_string(),
        sender: task.sender.clone(),
        turn: token.to_string(),
        wire: task.wire.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Sender;
    use serde_json::json;

    /// The claim the foreground hands its own pane and Codex is the typed
    /// answer itself, and on the wire it reads as `inbox/claim` always
    /// answered (docs/protocol.md): every task field, absent ones null.
    #[test]
    fn a_claim_is_typed_and_reads_on_the_wire_as_before() {
        let sender = Sender {
            instance_id: Some("i-1".into()),
            name: Some("alice".into()),
            ..Sender::default()
        };
        let task = crate::spool::new_task("m1", "hi", sender, 2, None, "steer", None, "jsonrpc");
        let claimed = Claimed {
            task: Some(claimed_task(&task, "ENVELOPE".into(), "tok", None)),
            rejected: vec![RejectedTask {
                message_id: "m0".into(),
                reason: "bad".into(),
            }],
            ..Claimed::not(ClaimStatus::Claimed, None)
        };
        let t = claimed.task.as_ref().unwrap();
        assert_eq!((t.envelope.as_str(), t.turn.as_str()), ("ENVELOPE", "tok"));
        assert_eq!(t.mode, "steer");
        let want = json!({
            "status": "claimed",
            "task": {
                "message_id": "m1", "body": "hi", "hop": 2, "in_reply_to": null,
                "sender": {"instance_id": "i-1", "name": "alice"},
                "mode": "steer", "accepted_at": task.accepted_at, "wire": "jsonrpc",
                "envelope": "ENVELOPE", "turn": "tok", "follow_up_of": null,
            },
            "rejected": [{"message_id": "m0", "reason": "bad"}],
        });
        assert_eq!(serde_json::to_value(&claimed).unwrap(), want);

        // Without a task, only what the status says is there.
        let busy = Claimed {
            message_id: Some("m1".into()),
            ..Claimed::not(ClaimStatus::Busy, Some("open".into()))
        };
        let want = json!({"status": "busy", "message_id": "m1", "reason": "open"});
        assert_eq!(serde_json::to_value(&busy).unwrap(), want);
        let short = Claimed {
            temporary: true,
            ..Claimed::not(ClaimStatus::Error, Some("short".into()))
        };
        let want = json!({"status": "error", "temporary": true, "reason": "short"});
        assert_eq!(serde_json::to_value(&short).unwrap(), want);
        let empty = serde_json::to_value(Claimed::not(ClaimStatus::Empty, None)).unwrap();
        assert_eq!(empty, json!({"status": "empty"}));
    }
}
