//! `baton inbox wait [--timeout SECONDS] [TARGET]`: blocks until a task
//! waits to be claimed at a pull instance, says so in one line and exits 0;
//! exit 5 when `--timeout` passes first. What a hook or a shell loop runs
//! to wake an agent that does not poll (docs/hooks.md).
//!
//! It does not poll. It subscribes to the instance's events first, then
//! asks once (`control/status`, `inbox/list`, on a second connection) what
//! already waits, so an arrival in between is not missed; then it waits
//! for an event, read by the waiting thread itself (one blocking read,
//! bounded by `--timeout`). Under `--approve auto` a `message.accepted` is the wake-up
//! itself; an event that may make a queued task claimable without saying
//! which (`task.requeued`, an approving `approval.resolved`, a resume) is
//! followed by the same one question. A lost subscription (the instance
//! stopped or restarted) is found again by name and workspace, as
//! `send --wait` finds its receiver (cli::wait): with a bounded backoff,
//! and the registry read once a second while no such instance runs.
//!
//! "Waits to be claimed" (docs/decisions.md): queued, at a running pull
//! instance that is not paused, and ahead of the first queued task that
//! waits for an approval.

use super::{emit, emit_json, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::client::ClientError;
use crate::front::follow::{self, Follow, Step, Who};
use crate::registry::{self, Peer};
use crate::text::sanitize::escape;
use crate::wire::answer::ControlStatus;
use crate::wire::{Approve, Call, Decision, Event, EventKind, Mode, State};
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What waits: how many tasks, and the one `inbox claim` takes first.
struct Waiting {
    count: usize,
    message_id: String,
    from: String,
}

/// What one look at the instance found.
struct Seen {
    paused: bool,
    ask: bool,
    waiting: Option<Waiting>,
}

pub fn run(
    config: &Config,
    target: Option<&str>,
    timeout: Option<Duration>,
    json: bool,
) -> Result<ExitCode> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let peer = target::resolve(config, target)?;
    if peer.wire != registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "{} is a zcoder instance: it has no inbox to wait on",
            escape(&peer.manifest.name)
        )));
    }
    let who = Who {
        workspace: Some(peer.manifest.workspace.clone()),
        only_workspace: true,
        ..Who::named(peer.manifest.name.clone(), None)
    };
    let f = Follow {
        name: &who.name,
        deadline,
        quiet: false,
    };
    let mut first = Some(peer);
    let found = follow::follow(
        &f,
        || match first.take() {
            Some(p) => Ok(Some(p)),
            None => who.find(config),
        },
        |peer| watch(config, &peer, deadline),
    )?;
    Ok(report(json, &who.name, found.flatten()))
}

/// `--json`'s object: what waits, or that none did before the timeout.
fn line(name: &str, w: Option<&Waiting>) -> Value {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<&'a str>,
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        timed_out: Option<bool>,
        waiting: usize,
    }
    let line = Line {
        from: w.map(|w| w.from.as_str()),
        message_id: w.map(|w| w.message_id.as_str()),
        name,
        timed_out: w.is_none().then_some(true),
        waiting: w.map_or(0, |w| w.count),
    };
    serde_json::to_value(line).expect("strings serialize")
}

/// Prints the one line (or object) and gives the exit code.
fn report(json: bool, name: &str, found: Option<Waiting>) -> ExitCode {
    let Some(w) = found else {
        if json {
            emit_json(&line(name, None));
        } else {
            eprintln!(
                "baton: no task waits to be claimed at {} (--timeout passed)",
                escape(name)
            );
        }
        return ExitCode::WaitTimedOut;
    };
    if json {
        emit_json(&line(name, Some(&w)));
    } else {
        let tasks = if w.count == 1 {
            "task waits"
        } else {
            "tasks wait"
        };
        emit(&format!(
            "{}: {} {tasks} to be claimed; next: {} from {}\n",
            escape(name),
            w.count,
            escape(&w.message_id),
            escape(&w.from)
        ));
    }
    ExitCode::Ok
}

/// Subscribes to one instance's events, looks once at what waits, and
/// waits for an event that makes a task claimable: `Done(None)` when the
/// deadline passes first.
fn watch(config: &Config, peer: &Peer, deadline: Option<Instant>) -> Result<Step<Option<Waiting>>> {
    // Only live events: the look that follows covers what came before.
    let mut sub = match follow::subscribed(config, peer) {
        Ok(s) => s,
        Err(why) => {
            return Ok(Step::Unwatched(Some(Error::Transport(format!(
                "{peer}: cannot subscribe to its events: {why}"
            )))));
        }
    };
    let mut seen = match look(config, peer) {
        Ok(s) => s,
        Err(error @ Error::Transport(_)) => return Ok(Step::Unwatched(Some(error))),
        Err(e) => return Err(e),
    };
    loop {
        if let Some(w) = seen.waiting.take() {
            return Ok(Step::Done(Some(w)));
        }
        let msg = match sub.next(deadline) {
            Ok(v) => v,
            Err(ClientError::Timeout) => return Ok(Step::Done(None)),
            Err(_) => return Ok(Step::Lost),
        };
        if on_event(&msg, &mut seen) {
            seen = match look(config, peer) {
                Ok(s) => s,
                Err(Error::Transport(_)) => return Ok(Step::Lost),
                Err(e) => return Err(e),
            };
        }
    }
}

/// Applies one line of the subscription to what was seen; true when the
/// instance must be looked at again (a task may be claimable now, but
/// the event does not say which).
fn on_event(msg: &Value, seen: &mut Seen) -> bool {
    let Some(ev) = Event::of_notification(msg) else {
        return false;
    };
    match ev.kind {
        Some(EventKind::StateChanged) => {
            let was = seen.paused;
            seen.paused = ev.state.as_ref().is_some_and(|s| *s == State::Paused);
            was && !seen.paused
        }
        // Under `--approve auto` an accepted task is claimable at once;
        // under `ask` it waits for an approval first.
        Some(EventKind::MessageAccepted) if !seen.ask && !seen.paused => {
            seen.waiting = Some(Waiting {
                count: 1,
                message_id: ev.id().to_string(),
                from: ev.sender().unwrap_or("").to_string(),
            });
            false
        }
        Some(EventKind::TaskRequeued) => !seen.paused,
        Some(EventKind::ApprovalResolved) => ev.decision == Some(Decision::Approve) && !seen.paused,
        _ => false,
    }
}

/// Asks the instance once what waits: `control/status`, then the queue.
fn look(config: &Config, peer: &Peer) -> Result<Seen> {
    let mut conn = target::connect(config, peer)?;
    let st: ControlStatus = conn
        .call(Call::ControlStatus, crate::wire::request::NoParams {})
        .map_err(|e| target::transport(peer, e))?;
    let name = escape(&peer.manifest.name);
    if st.mode == Mode::Exec {
        return Err(Error::Refused(format!(
            "{name} runs its tasks with --exec: baton starts each one itself, so none waits to be claimed"
        )));
    }
    if st.approve == Approve::Deny {
        return Err(Error::Refused(format!(
            "{name} runs with --approve deny: every task is refused before it could be claimed"
        )));
    }
    let mut seen = Seen {
        paused: st.paused,
        ask: st.approve == Approve::Ask,
        waiting: None,
    };
    if seen.paused || st.queue.queued == 0 {
        return Ok(seen);
    }
    let all = target::list_all(&mut conn, peer)?;
    let asked: HashSet<&str> = all.awaiting_approval.iter().map(String::as_str).collect();
    let count = all
        .queued
        .iter()
        .take_while(|t| !asked.contains(t.message_id.as_str()))
        .count();
    if count > 0 {
        let t = &all.queued[0];
        seen.waiting = Some(Waiting {
            count,
            message_id: t.message_id.clone(),
            // As `message.accepted`'s `from` names the sender.
            from: crate::workers::turn::display_name(&t.sender),
        });
    }
    Ok(seen)
}
