//! `baton result [TARGET] MESSAGE_ID`: what became of a task, read later
//! (issue 46): its outcome, why (how its handler ended, or the host's
//! error), its reply, and when it was accepted and ended; `--wait` waits
//! for the end as `send --wait` does (`follow::wait`). TARGET is a live
//! instance or a stopped agent's name, whose spool's receipts are read;
//! without TARGET, the one instance, live or stopped, that knows
//! MESSAGE_ID (`front::result`). `--json` is `send --wait --json`'s
//! object (`Waited`). Exit status: 0 ended `done`, 1 ended otherwise, 3
//! not known, 5 not ended (when `--wait` stopped waiting, or at once
//! without `--wait`: docs/decisions.md).

use super::Parsed;
use super::args::{Args, Opt, switch, value};
use super::since::Clock;
use super::{emit, emit_json, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::front::follow::{self, End, Report, Waited, Who};
use crate::front::result::{self as task, Holder, Look};
use crate::registry::{self, lookup};
use crate::text::sanitize::{escape, escape_multiline};
use crate::wire::Outcome;
use crate::wire::answer::{Pending, SendResult};
use std::time::Instant;

pub const WAIT: Opt = switch(
    "wait",
    "wait until the task ends (at most --timeout); exit 0 only if done",
);
pub const TIMEOUT: Opt = value(
    "timeout",
    "with --wait: stop waiting after this many seconds (exit 5; the task is left as it is)",
);

/// `baton result [TARGET] MESSAGE_ID [--json] [--utc] [--wait [--timeout
/// SECONDS]]`.
pub struct TaskResult {
    target: Option<String>,
    id: String,
    json: bool,
    utc: bool,
    wait: bool,
    timeout: Option<std::time::Duration>,
}

impl Parsed for TaskResult {
    fn parse(args: &Args) -> Result<TaskResult> {
        let (target, id) = super::target_and_id(args, "result")?;
        let timeout = args.seconds("result", "timeout")?;
        let wait = args.flag("wait");
        if timeout.is_some() && !wait {
            return Err(Error::Usage(
                "result: --timeout bounds the wait, so it needs --wait".into(),
            ));
        }
        let (json, utc) = (args.flag("json"), args.flag("utc"));
        Ok(TaskResult {
            target,
            id,
            json,
            utc,
            wait,
            timeout,
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let r = &self;
        let (target_arg, id, timeout) = (r.target.as_deref(), r.id.as_str(), r.timeout);
        let (holder, mut look) = match target_arg {
            Some(t) => {
                let holder = target::resolve_or_stopped(config, Some(t))?;
                let look = task::look(config, &holder, id)?;
                (holder, look)
            }
            None => only(config, id)?,
        };
        if r.wait && matches!(look.end, End::TimedOut(_)) {
            let t = holder.target();
            let who = Who {
                name: holder.name().to_string(),
                instance_id: t.instance_id,
                workspace: t.workspace,
                only_workspace: true,
            };
            let end = follow::wait(config, &who, id, timeout.map(|t| Instant::now() + t))?;
            // Where it is now, said afresh, while it has not ended.
            let pending = |l: &Look| matches!(l.end, End::TimedOut(_));
            let afresh = (matches!(end, End::TimedOut(_)).then(|| task::look(config, &holder, id)))
                .and_then(|l| l.ok().filter(pending));
            look = afresh.unwrap_or(Look {
                end,
                queue_position: None,
                ..look
            });
        }
        if let End::Unknown = look.end {
            return Err(Error::NoTarget(format!(
                "{} does not know message {}: it was never accepted there, or its receipt was pruned",
                holder.said(),
                escape(id)
            )));
        }
        Ok(show(r, &holder, id, &look))
    }
}

/// The one instance, live or stopped, that knows the task.
fn only(config: &Config, id: &str) -> Result<(Holder, Look)> {
    let mut found = task::find(config, id)?;
    if found.len() == 1 {
        return Ok(found.pop().expect("one"));
    }
    let id = escape(id);
    if found.is_empty() {
        let dir = registry::ensure_dir(config)?;
        return Err(Error::NoTarget(format!(
            "no instance knows message {id}, live (in {}) or stopped: it was never accepted, or its receipt was pruned",
            escape(&dir.display().to_string())
        )));
    }
    let rows: Vec<[String; 4]> = found.iter().map(|(h, _)| h.candidate()).collect();
    Err(Error::NoTarget(format!(
        "message {id} is known at several instances: name one as TARGET; {}",
        lookup::candidate_list(&rows)
    )))
}

/// Prints what became of the task, and gives the exit code.
fn show(r: &TaskResult, holder: &Holder, id: &str, look: &Look) -> ExitCode {
    let code = match &look.end {
        End::Final {
            outcome: Outcome::Done,
            ..
        } => ExitCode::Ok,
        End::Final { .. } => ExitCode::Refused,
        End::TimedOut(_) => ExitCode::WaitTimedOut,
        End::Unknown => ExitCode::NoTarget,
    };
    if r.json {
        // As `send --wait --json` gives it: the task was accepted.
        let delivery = SendResult {
            queue_position: look.queue_position,
            reason: look.reason.clone(),
            state: holder.state(),
            target: Some(holder.target()),
            ..SendResult::new("accepted", id, None)
        };
        let mut waited = Waited::new(delivery, Some(&look.end), Report::Command);
        waited.accepted_at = Some(look.accepted_at.or(waited.accepted_at.flatten()));
        emit_json(&serde_json::to_value(waited).expect("a result serializes"));
        return code;
    }
    emit(&lines(r.utc, holder, id, look));
    if let End::TimedOut(last) = look.end {
        let place = last.map_or("queued", Pending::as_str);
        let (id, who) = (escape(id), escape(holder.name()));
        let at = match holder {
            Holder::Live(_) => format!("{place} at {who}"),
            Holder::Stopped(_) => {
                format!(
                    "{place} in the spool of {who}, which is stopped and runs it when it starts"
                )
            }
        };
        match r.wait {
            true => eprintln!(
                "baton: stopped waiting after --timeout; message {id} is still {at}, and stays there"
            ),
            false => eprintln!(
                "baton: message {id} has not ended: it is {at}; 'baton result --wait' waits for its end"
            ),
        }
    }
    code
}

/// The `key: value` lines: a value of several lines goes under its key,
/// each line indented by two spaces. Peer text is escaped.
fn lines(utc: bool, holder: &Holder, id: &str, look: &Look) -> String {
    let mut s = String::new();
    // A value that is not there is no line.
    let mut put = |key: &str, text: Option<&str>| {
        let Some(text) = text else { return };
        let text = escape_multiline(text);
        let text = text.trim_end_matches('\n');
        if text.contains('\n') {
            s.push_str(&format!("{key}:\n"));
            for line in text.lines() {
                s.push_str(&format!("  {line}\n"));
            }
        } else {
            s.push_str(&format!("{key}: {text}\n"));
        }
    };
    put("message_id", Some(id));
    put("target", Some(&holder.said()));
    let clock = Clock::new(utc);
    let accepted_at = look.accepted_at.map(|t| clock.stamp(t as f64));
    match &look.end {
        End::Final {
            outcome,
            reply,
            handler,
            finished_at,
            ..
        } => {
            let exit = super::wait::exit_said(handler);
            put("outcome", Some(&format!("{outcome}{exit}")));
            put("reason", look.reason.as_deref());
            put("host", handler.host.as_deref());
            let tail = handler.stderr_tail.as_deref();
            put("stderr_tail", tail.filter(|t| !t.trim().is_empty()));
            put("accepted_at", accepted_at.as_deref());
            put(
                "finished_at",
                finished_at.map(|t| clock.stamp(t)).as_deref(),
            );
            put("reply", Some(reply.as_deref().unwrap_or("(none)")));
        }
        End::TimedOut(last) => {
            let place = last.map_or("queued", Pending::as_str);
            match look.queue_position {
                Some(n) => put("task_status", Some(&format!("{place} (position {n})"))),
                None => put("task_status", Some(place)),
            }
            put("accepted_at", accepted_at.as_deref());
        }
        End::Unknown => put("task_status", Some(Pending::Unknown.as_str())),
    }
    s
}
