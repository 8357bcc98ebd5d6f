//! `baton send --wait`: after a delivery the receiver kept (`accepted`,
//! `duplicate`, `stored`), wait for the task's final outcome there and
//! print its reply.
//!
//! Waiting is an event subscription, not polling: subscribe to the
//! receiver's events first, then ask `task/status` on the same connection
//! (so a `task.ended` in between is not missed), then wait for `task.ended`
//! with the task's id. A lost connection (the receiver restarted: its id
//! changes, its name does not) is found again by name and asked again,
//! with a bounded backoff. The one exception is a receiver that is not
//! running (`stored`): nothing can be subscribed to, so the registry is
//! read again once a second until an instance of that name answers
//! (docs/decisions.md). Ctrl-C keeps its default action: the process ends
//! by SIGINT (the shell sees 130) and the task is left as it was.

use super::args::Args;
use super::{emit, emit_json};
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::mcp::follow::{End, Hint, wait};
use crate::sanitize::{escape, escape_multiline};
use crate::status::Status;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Checks `--wait` and `--timeout` against the rest of the command line,
/// before anything is sent.
pub fn check(args: &Args) -> Result<Option<Duration>> {
    let timeout = match args.value("timeout") {
        None => None,
        Some(v) => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 1e9 && !v.contains(['e', 'E']) => {
                Some(Duration::from_secs_f64(s))
            }
            _ => {
                return Err(Error::Usage(format!(
                    "send: --timeout {}: use a number of seconds above 0",
                    escape(v)
                )));
            }
        },
    };
    if !args.flag("wait") {
        if timeout.is_some() {
            return Err(Error::Usage(
                "send: --timeout bounds the wait, so it needs --wait".into(),
            ));
        }
        return Ok(None);
    }
    if args.flag("reply") {
        return Err(Error::Usage(
            "send: --reply answers a turn's sender, who gets no outcome back, so it does not take --wait"
                .into(),
        ));
    }
    if args.value("via").is_some() {
        return Err(Error::Usage(
            "send: --wait does not work with --via yet: send, then follow the task with 'ssh HOST baton watch NAME'"
                .into(),
        ));
    }
    Ok(timeout)
}

/// After a delivery: waits for the task when the receiver kept it, then
/// reports the delivery and the outcome together. A refused delivery is
/// reported as it is, with no outcome.
pub fn run(args: &Args, config: &Config, delivery: &Value) -> Result<ExitCode> {
    let timeout = check(args)?;
    let spelled = delivery.get("status").and_then(Value::as_str).unwrap_or("");
    let kept = matches!(
        spelled.parse::<Status>(),
        Ok(Status::Accepted | Status::Duplicate | Status::Stored)
    );
    if !kept {
        if args.flag("json") {
            let mut r = delivery.clone();
            r["outcome"] = Value::Null;
            r["reply"] = Value::Null;
            emit_json(&r);
            let code = spelled
                .parse::<Status>()
                .map_or(ExitCode::Refused, Status::exit_code);
            return Ok(code);
        }
        return super::send::report(args, delivery);
    }
    let message_id = delivery["message_id"].as_str().unwrap_or("").to_string();
    let target = &delivery["target"];
    let name = target["name"]
        .as_str()
        .or(args.positional.first().map(String::as_str))
        .unwrap_or("")
        .to_string();
    let hint = Hint {
        instance_id: target["instance_id"].as_str().map(str::to_string),
        workspace: target["workspace"].as_str().map(str::to_string),
    };
    if !args.flag("json") {
        eprintln!(
            "baton: {spelled}: message {} to {}; waiting for it to end",
            escape(&message_id),
            escape(&name)
        );
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let end = wait(config, &name, &hint, &message_id, deadline)?;
    Ok(show(args, delivery, &name, &message_id, end))
}

/// Prints how the wait ended and gives the exit code.
fn show(args: &Args, delivery: &Value, name: &str, message_id: &str, end: End) -> ExitCode {
    let (outcome, reply, last) = match &end {
        End::Final { outcome, reply } => (Some(outcome.as_str()), reply.as_deref(), None),
        End::Unknown => (Some("unknown"), None, None),
        End::TimedOut(last) => (None, None, last.as_deref()),
    };
    let code = match (&end, outcome) {
        (End::TimedOut(_), _) => ExitCode::WaitTimedOut,
        (_, Some("done")) => ExitCode::Ok,
        _ => ExitCode::Refused,
    };
    if args.flag("json") {
        let mut r = delivery.clone();
        r["outcome"] = json!(outcome);
        r["reply"] = json!(reply);
        if let End::TimedOut(_) = end {
            r["timed_out"] = json!(true);
            r["task_status"] = json!(last);
        }
        emit_json(&r);
        return code;
    }
    if let Some(text) = reply {
        let mut text = escape_multiline(text).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        emit(&text);
    }
    let (id, who) = (escape(message_id), escape(name));
    match end {
        End::Final { outcome, .. } if outcome == "done" => {}
        End::Final { outcome, .. } => {
            eprintln!("baton: message {id} ended {} at {who}", escape(&outcome))
        }
        End::Unknown => eprintln!(
            "baton: {who} does not know message {id} (its record is gone, or another agent has the name now)"
        ),
        End::TimedOut(last) => eprintln!(
            "baton: stopped waiting after --timeout; message {id} is still {} at {who} and stays there",
            escape(last.as_deref().unwrap_or("queued"))
        ),
    }
    code
}
