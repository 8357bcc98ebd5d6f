//! Following the tasks a `baton mcp` session sent: `send_agent_message`
//! with `wait_seconds`, and `task_status`. Both ask the receiver, as
//! `baton send --wait` does (`follow`): the receiver's `task/status`
//! and its `task.ended` event.

use super::{Adapter, Tool, invalid_arg, message_id, tool_error, tool_result, value};
use crate::base::error::{Error, Result};
use crate::base::status::Status;
use crate::front::follow::{self, End, Report, Waited, Who};
use crate::text::sanitize::{escape, escape_multiline};
use crate::wire::answer::{Pending, SendResult, TaskState, TaskStatus};
use crate::wire::event_text::num;
use crate::wire::request::ReceivedParams;
use crate::wire::{Call, HandlerExit, Outcome};
use crossbeam_channel::{self as chan, select};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The longest `wait_seconds` a `send_agent_message` takes.
pub const MAX_WAIT_SECONDS: u64 = 600;
/// How many sent tasks a session remembers for `task_status`.
const SENT_KEPT: usize = 1000;

/// The `wait_seconds` argument: absent, or an integer 0..=600.
pub fn wait_seconds(arg: Option<Value>) -> std::result::Result<Option<u64>, Value> {
    match arg {
        None => Ok(None),
        Some(v) => (v.as_u64().filter(|n| *n <= MAX_WAIT_SECONDS).map(Some)).ok_or_else(|| {
            invalid_arg(&format!(
                "wait_seconds must be an integer from 0 to {MAX_WAIT_SECONDS}"
            ))
        }),
    }
}

/// What `task_status` says of a `task/status` answer.
fn status_text(id: &str, who: &str, st: &TaskStatus) -> String {
    match st.status {
        TaskState::Pending(Pending::Queued) => format!(
            "queued: task {id} is at position {} on {who}.",
            num(st.queue_position)
        ),
        TaskState::Pending(Pending::AwaitingApproval) => {
            format!("awaiting_approval: task {id} waits for an approval on {who}.")
        }
        TaskState::Pending(Pending::Running) => format!("running: {who} is working on task {id}."),
        TaskState::Pending(Pending::Unknown) => unknown_text(id, who),
        TaskState::Ended(outcome) => {
            let reply = st.reply.as_ref().and_then(|r| r.as_ref());
            ended_text(
                id,
                who,
                outcome,
                reply.map(|r| r.body.as_str()),
                &st.handler,
            )
        }
    }
}

fn unknown_text(id: &str, who: &str) -> String {
    format!(
        "unknown: {who} does not know task {id} (its record is gone, or another agent has the name now)."
    )
}

/// A final outcome: `done: <reply>`, or that it ended with no reply;
/// then, for a failed turn, how its handler ended and the end of its
/// stderr, or the error of the agent host that ran it (escaped by the
/// receiver, and again here).
fn ended_text(
    id: &str,
    who: &str,
    outcome: Outcome,
    reply: Option<&str>,
    handler: &HandlerExit,
) -> String {
    let mut text = match reply {
        // Peer text: what the model reads is what its user can see.
        Some(body) => format!("{outcome}: {}", escape_multiline(body)),
        None => format!("{outcome}: task {id} ended on {who} with no reply."),
    };
    match (handler.exit_status, handler.signal) {
        (Some(code), _) => text.push_str(&format!(" Its handler exited with status {code}.")),
        (None, Some(sig)) => text.push_str(&format!(" Its handler was killed by signal {sig}.")),
        (None, None) => {}
    }
    let tail = handler
        .stderr_tail
        .as_deref()
        .filter(|t| !t.trim().is_empty());
    if let Some(tail) = tail {
        match handler.host_said() {
            Some(host) => text.push_str(&format!(" {host}'s error:\n")),
            None => text.push_str(" Its stderr ended with:\n"),
        }
        text.push_str(&escape_multiline(tail));
    }
    text
}

impl Adapter {
    /// Remembers a delivered task for `task_status`.
    pub(super) fn remember(&mut self, r: &SendResult, target: &str) {
        if self.sent.len() >= SENT_KEPT {
            self.sent.remove(0);
        }
        self.sent.retain(|(id, _)| id != r.id());
        let to = r.target.clone().unwrap_or_default();
        let name = to.name.unwrap_or_else(|| target.to_string());
        self.sent
            .push((r.id().to_string(), Who::named(name, to.instance_id)));
    }

    /// After a delivery: waits up to `secs` for the task's end and says
    /// how far it got. Not reaching the end is no error.
    pub(super) fn follow(&mut self, delivered: String, secs: u64, sent: SendResult) -> Value {
        let Some((id, to)) = self.sent.last().cloned() else {
            return tool_result(delivered, false, Some(value(&sent)));
        };
        let who = escape(&to.name).into_owned();
        let deadline = Instant::now() + Duration::from_secs(secs);
        // Null unless the task is found to have ended.
        let r = value(Waited::new(sent.clone(), None, Report::Tool));
        let end = match self.wait_or_stop(to.clone(), &id, deadline) {
            Some(Ok(end)) => end,
            Some(Err(e)) => {
                let text = format!("{delivered} It cannot be waited for: {e}");
                return tool_result(text, false, Some(r));
            }
            None => {
                let text = format!("{delivered} The session is ending, so the wait stopped.");
                return tool_result(text, false, Some(r));
            }
        };
        // A wait of 0 s ends before the receiver is asked: ask it once. A
        // receiver that is not running, or does not answer, leaves the task
        // as the delivery said.
        let end = match end {
            End::TimedOut(None) => (follow::ask_status(&self.config, &to, &id).ok().flatten())
                .map_or(End::TimedOut(None), End::of),
            other => other,
        };
        let text = match &end {
            End::Final {
                outcome,
                reply,
                reply_id,
                handler,
                ..
            } => {
                if let Some(reply_id) = reply_id {
                    self.received(reply_id, &id);
                }
                ended_text(&id, &who, *outcome, reply.as_deref(), handler)
            }
            End::Unknown => unknown_text(&id, &who),
            End::TimedOut(last) => {
                // Not asked (the receiver is not running): as delivered.
                let last = match last {
                    Some(l) => l.to_string(),
                    None if sent.status() == Some(Status::Stored) => Status::Stored.to_string(),
                    None => "queued".to_string(),
                };
                format!(
                    "{delivered} It is still {} after {secs} s; call task_status with message_id \"{id}\" to ask again.",
                    escape(&last)
                )
            }
        };
        let waited = Waited::new(sent, Some(&end), Report::Tool);
        tool_result(text, false, Some(value(&waited)))
    }

    /// The reply `reply_id` to the task `id` is returned by this wait:
    /// the instance records it as received (`inbox/received`), and it is
    /// not pushed as a new task. One that cannot be told stays queued
    /// there as a task (nothing is lost).
    fn received(&mut self, reply_id: &str, id: &str) {
        if self.got.len() >= SENT_KEPT {
            self.got.pop_front();
        }
        self.got.push_back(reply_id.to_string());
        let params = ReceivedParams {
            in_reply_to: id.to_string(),
            message_id: reply_id.to_string(),
        };
        let _ = self.call::<Value>(Call::InboxReceived, params);
    }

    /// Whether `id` is a reply a wait of this session returned.
    pub(super) fn got_by_wait(&self, id: &str) -> bool {
        self.got.iter().any(|g| g == id)
    }

    /// `follow::wait` on a thread of its own, so that the
    /// instance stopping (SIGTERM) ends the session at once: `None` then.
    fn wait_or_stop(&mut self, who: Who, id: &str, deadline: Instant) -> Option<Result<End>> {
        let (tx, rx) = chan::bounded(1);
        let (config, id) = (self.config.clone(), id.to_string());
        let spawned = std::thread::Builder::new()
            .name("baton-mcp-wait".into())
            .spawn(move || {
                let _ = tx.send(follow::wait(&config, &who, &id, Some(deadline)));
            });
        if let Err(e) = spawned {
            return Some(Err(Error::Env(format!("cannot start a thread: {e}"))));
        }
        select! {
            recv(rx) -> r => Some(r.unwrap_or_else(|_| Err(Error::Env("the wait ended early".into())))),
            recv(self.done) -> r => {
                self.stopped = Some(r.unwrap_or(Ok(())));
                None
            },
        }
    }

    /// `task_status`: asks the target of a task this session sent.
    pub(super) fn task_status(&mut self, args: super::proto::ToolArgs) -> Tool {
        let id = &message_id(args.message_id)?;
        let Some((_, to)) = self.sent.iter().find(|(sent, _)| sent == id) else {
            return Err(tool_error(format!(
                "task_status knows only the tasks this session sent with send_agent_message, and {} is not one of them.",
                escape(id)
            )));
        };
        let who = escape(&to.name).into_owned();
        match follow::ask_status(&self.config, to, id) {
            Ok(Some(st)) => Ok(tool_result(
                status_text(id, &who, &st),
                false,
                Some(value(&st)),
            )),
            Ok(None) => Err(tool_error(format!(
                "{who} is not running, so it cannot say; a task stored for it runs when it starts."
            ))),
            Err(e) => Err(tool_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ended_text;
    use crate::wire::{CODEX_HOST, HandlerExit, Outcome};

    /// A failed turn's tail is the handler's stderr, or, when an agent
    /// host ran the turn, that host's error: said as such, never as a
    /// stderr.
    #[test]
    fn a_failed_turn_says_whose_words_its_tail_is() {
        let mut h = HandlerExit {
            exit_status: Some(1),
            stderr_tail: Some("failing on purpose\n".into()),
            ..HandlerExit::default()
        };
        let said = ended_text("m-1", "beta", Outcome::Failed, None, &h);
        assert_eq!(
            said,
            "failed: task m-1 ended on beta with no reply. Its handler exited with status 1. \
             Its stderr ended with:\nfailing on purpose\n"
        );
        h.exit_status = None;
        h.stderr_tail = Some("stream disconnected before completion".into());
        h.host = Some(CODEX_HOST.into());
        let said = ended_text("m-2", "cx", Outcome::Failed, None, &h);
        assert_eq!(
            said,
            "failed: task m-2 ended on cx with no reply. \
             Codex's error:\nstream disconnected before completion"
        );
    }
}
