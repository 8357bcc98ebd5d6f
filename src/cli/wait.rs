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
//! (docs/decisions.md). Through a bridge (`--via`) no subscription is
//! allowed, and `task/status` is asked again with a bounded backoff
//! instead (`follow::watch_session`). Ctrl-C keeps its default action: the process ends
//! by SIGINT (the shell sees 130) and the task is left as it was.

use super::bridge::Remote;
use super::{emit, emit_json};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::base::status::Status;
use crate::client::Session;
use crate::front::follow::{self, End, Follow, Report, Seen, Waited, Who};
use crate::text::sanitize::{escape, escape_multiline};
use crate::wire::answer::{Pending, SendResult, Target};
use crate::wire::{HandlerExit, Outcome};
use std::path::Path;
use std::time::{Duration, Instant};

/// `send --wait [--timeout SECONDS]`, and `--json`: how its end is shown.
#[derive(Clone, Copy)]
pub struct Wait {
    pub timeout: Option<Duration>,
    pub json: bool,
}

/// A delivery the receiver kept: what to wait for, and until when.
struct Kept {
    message_id: String,
    name: String,
    /// The instance it reached, when one did.
    target: Target,
    /// Where `--timeout` ends the wait.
    deadline: Option<Instant>,
}

/// A delivery the receiver did not keep is reported as it is, with no
/// outcome (`Err`, the exit code); a kept one is waited for, which is
/// said on stderr (not with `--json`).
fn kept(w: Wait, asked: &str, r: &SendResult) -> Result<std::result::Result<Kept, ExitCode>> {
    let status = r.status();
    if !matches!(
        status,
        Some(Status::Accepted | Status::Duplicate | Status::Stored)
    ) {
        if w.json {
            // The delivery with no outcome.
            let waited = Waited::new(r.clone(), None, Report::Command);
            emit_json(&serde_json::to_value(waited).expect("a result serializes"));
            return Ok(Err(status.map_or(ExitCode::Refused, Status::exit_code)));
        }
        return super::sent::report(w.json, r).map(Err);
    }
    let target = r.target.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_else(|| asked.to_string());
    if !w.json {
        let status = r.status.to_string();
        eprintln!("baton: {}", follow::waiting_note(&status, r.id(), &name));
    }
    Ok(Ok(Kept {
        message_id: r.id().to_string(),
        name,
        target,
        deadline: w.timeout.map(|t| Instant::now() + t),
    }))
}

/// After a delivery: waits for the task when the receiver kept it, then
/// reports the delivery and the outcome together. A refused delivery is
/// reported as it is, with no outcome.
///
/// A reply printed here was also sent back to `sender` (the instance the
/// task went out as) as a task: once printed, that instance is told it
/// was received (`inbox/received`), so it is not handed out again.
pub fn run(
    w: Wait,
    asked: &str,
    config: &Config,
    delivery: &SendResult,
    sender: Option<&Path>,
) -> Result<ExitCode> {
    let k = match kept(w, asked, delivery)? {
        Ok(k) => k,
        Err(code) => return Ok(code),
    };
    let who = Who {
        workspace: k.target.workspace.clone(),
        ..Who::named(k.name.clone(), k.target.instance_id.clone())
    };
    let mut seen = Seen::announcing(&k.name);
    let end = follow::wait_seeing(config, &who, &k.message_id, k.deadline, &mut seen)?;
    let reply_id = match &end {
        End::Final { reply_id, .. } => reply_id.clone(),
        _ => None,
    };
    let code = show(w.json, delivery, &k.name, &k.message_id, end);
    if let (Some(reply_id), Some(socket)) = (reply_id, sender) {
        received(config, socket, &reply_id, &k.message_id);
    }
    Ok(code)
}

/// Tells the sending instance at `socket` that the reply `reply_id` was
/// handed over here; if it cannot be told, says that the reply stays in
/// its inbox as a task.
fn received(config: &Config, socket: &Path, reply_id: &str, message_id: &str) {
    let told = Session::open(socket, config.io_timeout)
        .map_err(|e| Error::Transport(e.to_string()))
        .and_then(|mut conn| follow::tell_received(&mut conn, reply_id, message_id));
    if let Err(e) = told {
        eprintln!(
            "baton: the reply {} could not be recorded as received ({e}); it stays queued as a task for the sending instance",
            escape(reply_id)
        );
    }
}

/// `send --via ... --wait`: after a delivery through the bridge, waits on
/// a bridge, which joins stdio to the live instance's socket byte for
/// byte: it asks `task/status` until the task ends, since a bridge may not
/// subscribe (`watch_session`, asking again). `first` is the bridge the
/// task went through when a live instance took it. With none (the task
/// was `stored` for a stopped agent), or when a bridge ends before the
/// outcome (the instance restarted), the wait goes on through `reopen`,
/// `VIA baton bridge --await TARGET` until a deadline: the remote baton waits there until an
/// instance of the name runs (reading its registry once a second, as a
/// local wait for a stored task does) and then joins. Only a bridge that
/// cannot be opened at all (ssh fails) ends the wait early: exit 4, the
/// task left as it is.
pub fn run_via(
    w: Wait,
    delivery: &SendResult,
    mut first: Option<Remote>,
    target: &str,
    mut reopen: impl FnMut(Option<Instant>) -> Result<Option<Remote>>,
) -> Result<ExitCode> {
    let k = match kept(w, target, delivery)? {
        Ok(k) => k,
        Err(code) => return Ok(code),
    };
    let deadline = k.deadline;
    let mut why = "is not running there; waiting for it to start";
    let mut seen = Seen::announcing(&k.name);
    let f = Follow {
        name: &k.name,
        deadline,
        quiet: true,
    };
    let find = || {
        let r = match first.take() {
            Some(r) => Some(r),
            None => {
                eprintln!("baton: {} {why}", escape(&k.name));
                reopen(deadline)?
            }
        };
        // A bridge found and then lost is the instance gone meanwhile.
        why = "went away there (restarting?); waiting for it to answer again";
        Ok(r)
    };
    let watch = |mut r: Remote| {
        let reached = r.session.hello.instance.as_ref();
        if reached.is_none_or(|i| i.name != k.name && i.instance_id != target) {
            return Err(Error::Refused(format!(
                "the bridge reached {} while waiting for {}; message {} is left as it is",
                escape(reached.map_or("a stopped agent's stand-in", |i| i.name.as_str())),
                escape(&k.name),
                escape(&k.message_id)
            )));
        }
        let again = Some(Duration::from_millis(100));
        follow::watch_session(&mut r.session, &k.message_id, deadline, &mut seen, again)
    };
    let end = follow::follow(&f, find, watch)?;
    let end = end.unwrap_or(End::TimedOut(seen.place));
    Ok(show(w.json, delivery, &k.name, &k.message_id, end))
}

/// After `ended failed at NAME`: ` (exit status N)` or ` (killed by
/// signal N)`, when the receiver said.
pub(super) fn exit_said(h: &HandlerExit) -> String {
    match (h.exit_status, h.signal) {
        (Some(code), _) => format!(" (exit status {code})"),
        (None, Some(sig)) => format!(" (killed by signal {sig})"),
        (None, None) => String::new(),
    }
}

/// The end of the failed handler's stderr, when it wrote any, or the
/// error of the agent host that ran the turn (`Codex's error:`): a line
/// that says which, then each of its lines indented by two spaces,
/// escaped (the receiver escaped it; a receiver is not trusted to).
fn say_stderr(h: &HandlerExit) {
    let Some(tail) = h.stderr_tail.as_deref().filter(|t| !t.trim().is_empty()) else {
        return;
    };
    match h.host_said() {
        Some(host) => eprintln!("baton: {host}'s error:"),
        None => eprintln!("baton: the handler's stderr ended with:"),
    }
    for line in escape_multiline(tail).lines() {
        eprintln!("  {line}");
    }
}

/// Prints how the wait ended and gives the exit code.
fn show(json: bool, delivery: &SendResult, name: &str, message_id: &str, end: End) -> ExitCode {
    let none = HandlerExit::default();
    let (reply, handler) = match &end {
        End::Final { reply, handler, .. } => (reply.as_deref(), handler),
        _ => (None, &none),
    };
    let done = matches!(&end, End::Final { outcome, .. } if *outcome == Outcome::Done);
    let code = match &end {
        End::TimedOut(_) => ExitCode::WaitTimedOut,
        _ if done => ExitCode::Ok,
        _ => ExitCode::Refused,
    };
    if json {
        let waited = Waited::new(delivery.clone(), Some(&end), Report::Command);
        emit_json(&serde_json::to_value(waited).expect("a result serializes"));
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
        _ if done && reply.is_some() => {}
        // Exit 0 and nothing on stdout would read as a lost reply.
        _ if done => eprintln!(
            "baton: message {id} ended done at {who} with no reply (an --exec handler's output goes back only under serve --reply; a pull agent replies with inbox complete --reply)"
        ),
        End::Final { outcome, .. } => {
            eprintln!(
                "baton: message {id} ended {outcome} at {who}{}",
                exit_said(handler)
            );
            say_stderr(handler);
        }
        End::Unknown => eprintln!(
            "baton: {who} does not know message {id} (its record is gone, or another agent has the name now)"
        ),
        End::TimedOut(last) => eprintln!(
            "baton: stopped waiting after --timeout; message {id} is still {} at {who} and stays there",
            last.map_or("queued", Pending::as_str)
        ),
    }
    code
}
