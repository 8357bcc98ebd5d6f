//! A send made on the agent's behalf inside a relayed turn goes only back
//! to the verified sender of that turn's task, one hop further: the guards
//! that need the turn (its scope, hop and reply target) are decided here
//! on the foreground, and the delivery runs on a sender thread that
//! reports as `Event::Relayed`. This covers `relay/send`, `--reply` and
//! the reply of `inbox/complete`.

use super::{Foreground, Params, Reply, is_local};
use crate::base::status::{ReplyStatus, Status};
use crate::registry;
use crate::relay::{self, Outbound};
use crate::server::{self, Event, RpcError};
use crate::spool::{ReplyRecord, Task};
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::access::{Caller, Role};
use crate::wire::answer::{Handled, SendResult};
use crate::wire::body::Relayed;
use crate::wire::request::{RelayParams, missing};
use crate::workers::turn;
use crossbeam_channel as chan;
use std::cmp::Reverse;
use std::time::Duration;

/// Why a `--reply` to a plain command line is not sent, and where it is.
pub(super) const PLAIN_SENDER: &str = "the reply stays in the task's receipt, where its sender reads it (send --wait, baton result): the sender is a plain command line, with no inbox to send it to";

/// A planned send, or the refusal to answer with instead.
pub(super) type Plan = Result<Outbound, SendResult>;

/// A `--reply` planned: what the receipt keeps, and the send, or why
/// there is none (the notice's text, said here).
pub(super) struct StdoutReply {
    pub(super) record: Option<ReplyRecord>,
    send: Result<Outbound, String>,
}

impl Foreground {
    /// `--reply`: plans sending the handler's stdout back to the sender,
    /// before the task is finished, so its receipt can name the reply.
    pub(super) fn plan_stdout_reply(&mut self, task: &Task, stdout: Vec<u8>) -> StdoutReply {
        let limit = self.shared.config.max_message_bytes;
        let text = String::from_utf8_lossy(&stdout).into_owned();
        let mut record = (!text.is_empty()).then(|| self.kept(&text, None));
        let send = match (&task.sender.instance_id, &task.in_reply_to) {
            // An answer to an answer would bounce between two `--reply`
            // handlers until the hop limit: a reply is answered only when
            // asked (`inbox complete --reply-to-reply`, `send --reply`).
            (_, Some(of)) => Err(format!(
                "no reply: the task is itself a reply (to {}), and a reply is never answered automatically",
                escape(of)
            )),
            // A line typed in the view: its reply is shown there, from
            // the receipt, and goes to no inbox; nothing to say.
            (None, _) if super::is_local(&task.sender) => Err(String::new()),
            (None, _) => Err(PLAIN_SENDER.into()),
            (Some(_), _) if stdout.len() > limit => Err(format!(
                "no reply: the handler printed more than {limit} bytes (BATON_MAX_MESSAGE_BYTES)"
            )),
            (Some(_), _) if text.trim().is_empty() => {
                Err("no reply: the handler printed nothing".into())
            }
            (Some(sender), None) => {
                let id = self.new_message_id();
                Ok(back_to(task, sender, text, id, "a reply".into()))
            }
        };
        if let (Some(r), Ok(out)) = (record.as_mut(), &send) {
            r.message_id = Some(out.message_id.clone());
        }
        StdoutReply { record, send }
    }

    /// Sends a planned `--reply`, or says why none goes out.
    pub(super) fn send_stdout_reply(&mut self, id: String, plan: StdoutReply) {
        match plan.send {
            Ok(out) => self.spawn_send(out, Some(id), None),
            Err(why) if why.is_empty() => {}
            Err(why) => self.notice(Some(&id), why),
        }
    }

    /// Delivers on a worker thread; the result goes to the transcript and
    /// to whoever waits for it (`Waiter`). The foreground goes on.
    pub(super) fn spawn_send(
        &mut self,
        out: Outbound,
        reply_of: Option<String>,
        waiter: Option<Waiter>,
    ) {
        let origin = self.origin.clone();
        let events = self.events_tx.clone();
        let (result_tx, result_rx) = chan::bounded::<SendResult>(1);
        let message_id = out.message_id.clone();
        let spawned = std::thread::Builder::new()
            .name("baton-send".into())
            .spawn(move || {
                let result = relay::send_as(&origin, &out);
                // The foreground hears of it before whoever waits does: a
                // turn's handler that sent it has not exited yet, so its
                // relay.sent comes before the turn's end (`Foreground::serve`).
                let _ = events.send(Event::Relayed {
                    result: result.clone(),
                    reply_of,
                });
                let _ = crate::base::failpoint::hit("between-send-reports");
                let _ = result_tx.send(result);
            });
        if let Err(e) = spawned {
            let text = format!("cannot start a sender thread: {e}");
            self.notice(None, &text);
            if let Some(w) = waiter {
                w.answer(SendResult::new(Status::Transport, &message_id, Some(text)));
            }
            return;
        }
        let Some(waiter) = waiter else { return };
        let within = self.shared.config.io_timeout;
        // The waiting is a thread's own, never the foreground's.
        let spawned = std::thread::Builder::new()
            .name("baton-send-wait".into())
            .spawn(move || waiter.wait(&result_rx, within, &message_id));
        if let Err(e) = spawned {
            self.notice(None, format!("cannot start a thread to answer a send: {e}"));
        }
    }

    /// A sender thread's result, for the transcript. A reply that was not
    /// delivered is also said as a notice (and on stderr): a handler run
    /// with `--reply` has exited by then, and the operator is who learns.
    pub(super) fn relayed(&mut self, result: SendResult, reply_of: Option<String>) {
        if let Some(r) = &reply_of {
            let delivered = result.status().is_some_and(Status::delivered);
            if !delivered {
                let text = format!(
                    "the reply to {} was not delivered: {}: {}",
                    escape(r),
                    result.status,
                    escape(result.reason.as_deref().unwrap_or(""))
                );
                eprintln!("baton: {text}");
                self.notice(Some(r), text);
            }
        }
        self.hub.emit(Body::RelaySent(Relayed {
            result: &result,
            reply_of: reply_of.as_deref(),
        }));
    }

    /// `relay/send`: the sender-side guards need the turn, so they are
    /// decided here; the delivery itself runs on a worker thread.
    pub(super) fn relay_send(&mut self, params: &Params, reply: Reply, caller: &Caller) {
        let plan = RelayParams::read(params)
            .map_err(RpcError::from)
            .and_then(|p| self.plan_send(p, Some(caller)));
        match plan {
            Ok(Ok(out)) => {
                let reply_of = out.in_reply_to.clone();
                self.spawn_send(out, reply_of, Some(Waiter::Relay(reply)));
            }
            Ok(Err(refusal)) => {
                self.hub.emit(Body::RelaySent(Relayed {
                    result: &refusal,
                    reply_of: None,
                }));
                let _ = reply.send(super::answer(refusal));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The task whose turn a send is made in: the token's (the running
    /// turn's or an open one's), or with no token the running exec turn's,
    /// which holds a send from this agent to its scope all the same
    /// (docs/decisions.md); with neither, for the agent (or the front end
    /// it talks through), the task it holds open: a pull agent's send is
    /// never hop 0 while it holds one (docs/mcp.md). Of several open
    /// tasks of one turn (steer follow-ups), the one with the highest hop,
    /// the first claimed of equals. None: the token names no open turn.
    fn scope_of(&self, turn: Option<&str>, caller: Option<&Caller>) -> Option<Option<Task>> {
        let highest = |t: Option<&str>| {
            let open = self.open.iter().filter(|o| t.is_none_or(|t| o.token == t));
            let first_highest = |(i, o): &(usize, &super::OpenTask)| (o.task.hop, Reverse(*i));
            open.enumerate()
                .max_by_key(first_highest)
                .map(|(_, o)| &o.task)
        };
        let Some(t) = turn else {
            let agent = caller.is_some_and(|c| matches!(c.role, Role::Own | Role::Agent));
            let running = self.running.as_ref().map(|r| &r.task);
            let held = || highest(None).filter(|_| agent);
            return Some(running.or_else(held).cloned());
        };
        let running = self.running.as_ref().filter(|r| r.token == t);
        running
            .map(|r| &r.task)
            .or_else(|| highest(Some(t)))
            .cloned()
            .map(Some)
    }

    /// A process of one of our turns speaks only as that turn, token or
    /// not (docs/security.md): the running turn whose handler it is or
    /// descends from. The refusal's reason when it cannot.
    fn turn_of_process(&self, caller: &Caller, token: Option<&str>) -> Result<(), String> {
        let pid = caller.pid.unwrap_or(0);
        let leader = caller.leader.unwrap_or(0);
        let Some(r) = self.running.as_ref().filter(|r| r.handler.pid == leader) else {
            return Err(format!(
                "pid {pid} belongs to a turn of this instance that has ended (handler pid {leader}): it may not send"
            ));
        };
        match token {
            Some(t) if t != r.token => Err(format!(
                "the turn token names another turn than the one pid {pid} belongs to ({})",
                r.task.message_id
            )),
            _ => Ok(()),
        }
    }

    /// Plans a `relay/send`: a send in a relayed turn, or by the agent
    /// while it holds a claimed task, goes back to that task's verified
    /// sender, one hop further; any other (a local turn, the operator's,
    /// or no turn) goes to any target at hop 0.
    pub(super) fn plan_send(
        &mut self,
        params: RelayParams,
        caller: Option<&Caller>,
    ) -> Result<Plan, RpcError> {
        let RelayParams {
            body, turn, target, ..
        } = params;
        let mode = params.mode.unwrap_or_else(|| "queue".into());
        let is_reply = params.reply.unwrap_or(false);
        let given = params.message_id;
        let valid = given.as_deref().is_none_or(registry::valid_id);
        let message_id = given
            .filter(|_| valid)
            .unwrap_or_else(|| self.new_message_id());
        let refuse = |status: Status, reason: &str| {
            Ok(Err(SendResult::new(
                status,
                &message_id,
                Some(reason.to_string()),
            )))
        };
        if !valid {
            return refuse(Status::Invalid, server::reason::BAD_MESSAGE_ID);
        }
        if !matches!(mode.as_str(), "queue" | "steer") {
            return refuse(Status::Invalid, "mode is not queue or steer");
        }
        let of_turn = caller.filter(|c| c.role == Role::Turn);
        if let Some(Err(reason)) = of_turn.map(|c| self.turn_of_process(c, turn.as_deref())) {
            return refuse(Status::Denied, &reason);
        }
        let Some(task) = self.scope_of(turn.as_deref(), caller) else {
            return refuse(Status::Denied, "the turn token names no open turn here");
        };
        let task = task.filter(|t| !is_local(&t.sender));
        let Some(task) = task else {
            // A local turn (the operator, a script with BATON_SOCKET), or
            // none: any target, hop 0.
            if is_reply {
                return refuse(Status::Invalid, "a reply needs the turn it answers (turn)");
            }
            return Ok(Ok(Outbound {
                target: target.ok_or_else(|| missing("target"))?,
                body,
                message_id,
                hop: 0,
                in_reply_to: None,
                mode,
                only: None,
                scope: String::new(),
                only_spool: None,
            }));
        };
        let from = turn::display_name(&task.sender);
        let Some(sender) = &task.sender.instance_id else {
            let why = format!(
                "this turn runs a task from {from}, a plain command line, which cannot be sent to"
            );
            return refuse(Status::Denied, &why);
        };
        let target = match (is_reply, target) {
            (true, _) => sender.clone(),
            (false, Some(t)) => t,
            (false, None) => return Err(missing("target").into()),
        };
        let scope = format!("this turn runs a task relayed from {}", escape(&from));
        Ok(Ok(Outbound {
            target,
            mode,
            ..back_to(&task, sender, body, message_id, scope)
        }))
    }
}

/// Who waits for a send's result, answered from a thread of its own.
pub(super) enum Waiter {
    /// `relay/send`: the result is the answer.
    Relay(Reply),
    /// `inbox/complete` with a reply: `answer` with the result as its
    /// `reply`. If the send has not ended within the I/O timeout (less a
    /// margin, so the caller's own timeout does not run out first), the
    /// reply is said to be `sending`, and its result goes only to the
    /// transcript (`relay.sent`).
    Complete { reply: Reply, answer: Box<Handled> },
}

impl Waiter {
    fn wait(self, result: &chan::Receiver<SendResult>, io_timeout: Duration, message_id: &str) {
        let got = match &self {
            Waiter::Relay(_) => result.recv().ok(),
            Waiter::Complete { .. } => result.recv_timeout(io_timeout - io_timeout / 5).ok(),
        };
        let got = got.unwrap_or_else(|| {
            let why =
                "no result within the I/O timeout; the outcome goes to the transcript (relay.sent)";
            SendResult::new(ReplyStatus::Sending.as_str(), message_id, Some(why.into()))
        });
        self.answer(got);
    }

    fn answer(self, result: SendResult) {
        match self {
            Waiter::Relay(reply) => {
                let _ = reply.send(super::answer(result));
            }
            Waiter::Complete { reply, answer } => {
                let answer = Handled {
                    reply: Some(result),
                    ..*answer
                };
                let _ = reply.send(super::answer(answer));
            }
        }
    }
}

/// A task sent back along `task`'s way: to its sender's instance
/// `sender` and to it only (`scope` says why), one hop further, queued; to
/// the spool of the sender's name and workspace while it is stopped.
pub(super) fn back_to(
    task: &Task,
    sender: &str,
    body: String,
    message_id: String,
    scope: String,
) -> Outbound {
    let s = &task.sender;
    Outbound {
        target: sender.to_string(),
        body,
        message_id,
        hop: task.hop + 1,
        in_reply_to: Some(task.message_id.clone()),
        mode: "queue".into(),
        only: Some(sender.to_string()),
        scope,
        only_spool: s.name.clone().zip(s.workspace.clone()),
    }
}
