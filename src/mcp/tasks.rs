//! Following the tasks a `baton mcp` session sent: `send_agent_message`
//! with `wait_seconds`, and `task_status`. Both ask the receiver, as
//! `baton send --wait` does (`follow`): the receiver's `task/status`
//! and its `task.ended` event.

use super::follow::{self as wait, End};
use super::{Adapter, tool_result};
use crate::error::Error;
use crate::sanitize::escape;
use crate::status::Status;
use crossbeam_channel::{self as chan, select};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

/// The longest `wait_seconds` a `send_agent_message` takes.
pub const MAX_WAIT_SECONDS: u64 = 600;
/// How many sent tasks a session remembers for `task_status`.
const SENT_KEPT: usize = 1000;

/// A task this session delivered, and where to.
pub struct Sent {
    message_id: String,
    name: String,
    instance_id: Option<String>,
}

/// The `wait_seconds` argument: absent, or an integer 0..=600.
pub fn wait_seconds(args: &Map<String, Value>) -> std::result::Result<Option<u64>, String> {
    match args.get("wait_seconds") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_WAIT_SECONDS => Ok(Some(n)),
            _ => Err(format!(
                "Input validation error: wait_seconds must be an integer from 0 to {MAX_WAIT_SECONDS}"
            )),
        },
    }
}

/// What `task_status` says of a `task/status` answer.
fn status_text(id: &str, who: &str, v: &Value) -> String {
    let status = v["status"].as_str().unwrap_or("unknown");
    match status {
        "queued" => format!(
            "queued: task {id} is at position {} on {who}.",
            v["queue_position"]
        ),
        "awaiting_approval" => {
            format!("awaiting_approval: task {id} waits for an approval on {who}.")
        }
        "running" => format!("running: {who} is working on task {id}."),
        "unknown" => unknown_text(id, who),
        _ => ended_text(id, who, status, v["reply"]["body"].as_str()),
    }
}

fn unknown_text(id: &str, who: &str) -> String {
    format!(
        "unknown: {who} does not know task {id} (its record is gone, or another agent has the name now)."
    )
}

/// A final outcome: `done: <reply>`, or that it ended with no reply.
fn ended_text(id: &str, who: &str, outcome: &str, reply: Option<&str>) -> String {
    match reply {
        Some(body) => format!("{}: {body}", escape(outcome)),
        None => format!(
            "{}: task {id} ended on {who} with no reply.",
            escape(outcome)
        ),
    }
}

impl Adapter {
    /// Remembers a delivered task for `task_status`.
    pub(super) fn remember(&mut self, r: &Value, target: &str) {
        let Some(id) = r["message_id"].as_str() else {
            return;
        };
        if self.sent.len() >= SENT_KEPT {
            self.sent.remove(0);
        }
        self.sent.retain(|s| s.message_id != id);
        self.sent.push(Sent {
            message_id: id.to_string(),
            name: r["target"]["name"].as_str().unwrap_or(target).to_string(),
            instance_id: r["target"]["instance_id"].as_str().map(str::to_string),
        });
    }

    /// After a delivery: waits up to `secs` for the task's end and says
    /// how far it got. Not reaching the end is no error.
    pub(super) fn follow(&mut self, delivered: String, secs: u64, mut r: Value) -> Value {
        let Some(sent) = self.sent.last() else {
            return tool_result(delivered, false, Some(r));
        };
        let (id, name, instance_id) = (
            sent.message_id.clone(),
            sent.name.clone(),
            sent.instance_id.clone(),
        );
        let who = escape(&name).into_owned();
        let deadline = Instant::now() + Duration::from_secs(secs);
        let end = match self.wait_or_stop(&name, instance_id.as_deref(), &id, deadline) {
            Some(Ok(end)) => end,
            Some(Err(e)) => {
                r["outcome"] = Value::Null;
                r["reply"] = Value::Null;
                return tool_result(
                    format!("{delivered} It cannot be waited for: {e}"),
                    false,
                    Some(r),
                );
            }
            None => {
                r["outcome"] = Value::Null;
                r["reply"] = Value::Null;
                return tool_result(
                    format!("{delivered} The session is ending, so the wait stopped."),
                    false,
                    Some(r),
                );
            }
        };
        // A wait of 0 s ends before the receiver is asked: ask it once.
        let end = match end {
            End::TimedOut(None) => self.ask_once(&name, instance_id.as_deref(), &id),
            other => other,
        };
        let text = match &end {
            End::Final { outcome, reply } => {
                r["outcome"] = json!(outcome);
                r["reply"] = json!(reply);
                ended_text(&id, &who, outcome, reply.as_deref())
            }
            End::Unknown => {
                r["outcome"] = json!("unknown");
                r["reply"] = Value::Null;
                unknown_text(&id, &who)
            }
            End::TimedOut(last) => {
                // Not asked (the receiver is not running): as delivered.
                let last = match last {
                    Some(l) => l.clone(),
                    None if r["status"] == Status::Stored.as_str() => Status::Stored.to_string(),
                    None => "queued".to_string(),
                };
                r["outcome"] = Value::Null;
                r["reply"] = Value::Null;
                r["task_status"] = json!(last);
                format!(
                    "{delivered} It is still {} after {secs} s; call task_status with message_id \"{id}\" to ask again.",
                    escape(&last)
                )
            }
        };
        tool_result(text, false, Some(r))
    }

    /// `wait::wait_for_outcome` on a thread of its own, so that the
    /// instance stopping (SIGTERM) ends the session at once: `None` then.
    fn wait_or_stop(
        &mut self,
        name: &str,
        instance_id: Option<&str>,
        id: &str,
        deadline: Instant,
    ) -> Option<crate::error::Result<End>> {
        let (tx, rx) = chan::bounded(1);
        let config = self.config.clone();
        let (name, instance_id, id) = (
            name.to_string(),
            instance_id.map(str::to_string),
            id.to_string(),
        );
        let spawned = std::thread::Builder::new()
            .name("baton-mcp-wait".into())
            .spawn(move || {
                let r = wait::wait_for_outcome(
                    &config,
                    &name,
                    instance_id.as_deref(),
                    &id,
                    Some(deadline),
                );
                let _ = tx.send(r);
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

    /// One `task/status` as an `End`; a receiver that is not running, or
    /// does not answer, leaves the task as the delivery said.
    fn ask_once(&self, name: &str, instance_id: Option<&str>, id: &str) -> End {
        match wait::ask_status(&self.config, name, instance_id, id) {
            Ok(Some(v)) => match v["status"].as_str().unwrap_or("") {
                "queued" | "awaiting_approval" | "running" | "" => {
                    End::TimedOut(v["status"].as_str().map(str::to_string))
                }
                "unknown" => End::Unknown,
                outcome => End::Final {
                    outcome: outcome.to_string(),
                    reply: v["reply"]["body"].as_str().map(str::to_string),
                },
            },
            _ => End::TimedOut(None),
        }
    }

    /// `task_status`: asks the target of a task this session sent.
    pub(super) fn task_status(&mut self, args: &Map<String, Value>) -> Value {
        let Some(Value::String(id)) = args.get("message_id") else {
            return tool_result(
                "Input validation error: message_id must be a string".into(),
                true,
                None,
            );
        };
        let Some(sent) = self.sent.iter().find(|s| &s.message_id == id) else {
            return tool_result(
                format!(
                    "task_status knows only the tasks this session sent with send_agent_message, and {} is not one of them.",
                    escape(id)
                ),
                true,
                None,
            );
        };
        let who = escape(&sent.name).into_owned();
        match wait::ask_status(&self.config, &sent.name, sent.instance_id.as_deref(), id) {
            Ok(Some(v)) => tool_result(status_text(id, &who, &v), false, Some(v)),
            Ok(None) => tool_result(
                format!(
                    "{who} is not running, so it cannot say; a task stored for it runs when it starts."
                ),
                true,
                None,
            ),
            Err(e) => tool_result(format!("{e}"), true, None),
        }
    }
}
