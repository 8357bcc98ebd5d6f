//! Following an instance across restarts, and a task at it until it
//! ends: the waiting of `baton send --wait` (local and `--via`), `baton
//! inbox wait` and `baton mcp`'s `wait_seconds` and `task_status`.
//!
//! `follow` is the one loop: find an instance of the name (the lookup is
//! the caller's: the registry here, a `bridge --await` there), watch it,
//! and when it is lost find its successor, with a backoff from 0.1 s to
//! 1 s between reconnections and the registry read once a second while
//! none runs. Watching a task is one subscription: subscribe to the
//! receiver's events first, then ask `task/status` on the same
//! connection (so a `task.ended` in between is not missed), then wait for
//! `task.ended` with the task's id.

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::base::status::Status;
use crate::client::{ClientError, Session, request};
use crate::registry::{self, Manifest, Peer};
use crate::text::sanitize::escape;
use crate::wire::answer::{Handled, Pending, Reply, SendResult, TaskState, TaskStatus};
use crate::wire::request::{ReceivedParams, TaskParams};
use crate::wire::{self, Call, Event, EventKind, HandlerExit, Outcome, ReplyRecord};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the registry is read while no instance of the name runs.
pub const REDISCOVER: Duration = Duration::from_secs(1);
/// The backoff between reconnections: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(1);
/// The id of the `task/status` request on a subscribed connection.
const STATUS_ID: &str = "wait-status";

/// What watching one instance came to.
pub enum Step<T> {
    Done(T),
    /// Lost after it had been watched: find its successor, the backoff
    /// starting over.
    Lost,
    /// It could not be watched at all: the error ends the follow if
    /// nothing has been watched yet; else, or without one, try again
    /// after a longer backoff.
    Unwatched(Option<Error>),
}

/// What `follow` looks for and how a stay of absence is told.
pub struct Follow<'a> {
    /// The name, for "NAME is not running; waiting for it to start".
    pub name: &'a str,
    pub deadline: Option<Instant>,
    /// Says the note itself (a `--via` wait says where).
    pub quiet: bool,
}

/// Finds an instance (`find`: None while none runs) and watches it
/// (`watch`, told whether the last one was lost) until it is `Done`, or
/// until the deadline (None).
pub fn follow<P, T>(
    f: &Follow,
    mut find: impl FnMut() -> Result<Option<P>>,
    mut watch: impl FnMut(P) -> Result<Step<T>>,
) -> Result<Option<T>> {
    let mut backoff = BACKOFF_FIRST;
    let mut watched = false;
    let mut said_absent = false;
    loop {
        if f.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        let Some(p) = find()? else {
            if !said_absent && !f.quiet {
                eprintln!(
                    "baton: {} is not running; waiting for it to start",
                    escape(f.name)
                );
            }
            said_absent = true;
            pause(REDISCOVER, f.deadline);
            continue;
        };
        said_absent = false;
        match watch(p)? {
            Step::Done(t) => return Ok(Some(t)),
            Step::Unwatched(Some(e)) if !watched => return Err(e),
            Step::Unwatched(_) => {}
            Step::Lost => {
                watched = true;
                backoff = BACKOFF_FIRST;
            }
        }
        pause(backoff, f.deadline);
        backoff = (backoff * 2).min(BACKOFF_LAST);
    }
}

/// What a sender that waits says on stderr once the receiver kept its
/// task (`status` `accepted`, `duplicate` or `stored`):
/// `accepted: message M to NAME; waiting for it to end`. A resend of a
/// task kept already only waits again, which is a status, not an alarm:
/// `already accepted as M by NAME; waiting for it to end`. Escaped.
pub fn waiting_note(status: &str, message_id: &str, name: &str) -> String {
    let (id, name) = (escape(message_id), escape(name));
    match status.parse() {
        Ok(Status::Duplicate) => {
            format!("already accepted as {id} by {name}; waiting for it to end")
        }
        _ => format!(
            "{}: message {id} to {name}; waiting for it to end",
            escape(status)
        ),
    }
}

/// Sleeps for `d`, or until the deadline if that comes first: the wait
/// between two looks at the registry, which has no event to wait for.
pub fn pause(d: Duration, deadline: Option<Instant>) {
    let d = match deadline {
        Some(end) => d.min(end.saturating_duration_since(Instant::now())),
        None => d,
    };
    std::thread::sleep(d);
}

/// The live native instance with the name, if one answers: `first` the
/// id the task was delivered to, then one in `workspace`, then any
/// (none other with `only_workspace`).
#[derive(Clone)]
pub struct Who {
    pub name: String,
    pub instance_id: Option<String>,
    pub workspace: Option<String>,
    pub only_workspace: bool,
}

impl Who {
    /// Any instance of the name, `instance_id` first.
    pub fn named(name: String, instance_id: Option<String>) -> Who {
        Who {
            name,
            instance_id,
            workspace: None,
            only_workspace: false,
        }
    }

    /// The instance it names now, as a front end following a task or an
    /// inbox across restarts finds it again: the registry's manifests
    /// ranked, and only the best pinged (the next when it does not
    /// answer).
    pub fn find(&self, config: &Config) -> Result<Option<Peer>> {
        let (id, workspace) = (self.instance_id.as_deref(), self.workspace.as_deref());
        let dirs = registry::scan_dirs(&registry::ensure_dir(config)?);
        let keep = |m: &Manifest| {
            m.name == self.name && (!self.only_workspace || workspace == Some(m.workspace.as_str()))
        };
        let rank = |m: &Manifest| {
            let other_id = id != Some(m.instance_id.as_str());
            (other_id, workspace != Some(m.workspace.as_str()))
        };
        Ok(registry::first_answering(
            &dirs,
            config.io_timeout,
            &self.name,
            &keep,
            &rank,
        ))
    }

    /// The end of `message_id` as a spool of the name keeps it in its
    /// receipts, read without a lock: an instance that finished the task
    /// and stopped before the waiter looked again (one that runs for a
    /// moment, as `baton mcp` under a short-lived host) leaves it there.
    fn stored_end(&self, message_id: &str) -> Option<End> {
        let workspace = self.workspace.as_deref().filter(|_| self.only_workspace);
        crate::registry::lookup::known_spools()
            .into_iter()
            .filter(|s| s.name == self.name && workspace.is_none_or(|w| w == s.workspace))
            .find_map(|s| crate::spool::read_receipt(&s.dir, message_id))
            .map(End::receipt)
    }
}

/// Who reports a wait: `send --wait --json` and MCP's `send_message`
/// with `wait_seconds` have always spelled it differently, and each
/// keeps its spelling (`Waited::new`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// `send --wait --json`: every member of how the handler ended (null
    /// where unsaid), and `timed_out` with the last status seen.
    Command,
    /// MCP: the handler's members only where said; a wait that timed out
    /// gives the status it last knew, or the delivery's.
    Tool,
}

/// A delivery waited for: its result, and how the task ended (`outcome`
/// and `reply` null while it has not).
#[derive(Clone, Debug, Serialize)]
pub struct Waited {
    /// `Report::Command`'s, when the wait timed out while the task waited
    /// for an approval.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_approval: bool,
    #[serde(flatten)]
    pub delivery: SendResult,
    #[serde(flatten)]
    pub handler: Handler,
    pub outcome: Option<String>,
    pub reply: Option<String>,
    /// When the task was accepted and when it ended, epoch seconds:
    /// written by `Report::Command` (null where unknown), not by `Tool`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_status: Option<Option<String>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// How a failed turn's handler ended, as a `Report` spells it.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Handler {
    /// The members the receiver said (`Report::Tool`).
    Said(HandlerExit),
    /// All four, null where unsaid (`Report::Command`).
    Every(EveryMember),
}

/// `HandlerExit` with every member written.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EveryMember {
    exit_status: Option<i32>,
    host: Option<String>,
    signal: Option<i32>,
    stderr_tail: Option<String>,
}

impl Waited {
    /// `delivery`, and the `end` of the wait for it (none: not waited).
    pub fn new(delivery: SendResult, end: Option<&End>, report: Report) -> Waited {
        let none = HandlerExit::default();
        let h = match end {
            Some(End::Final { handler, .. }) => handler,
            _ => &none,
        };
        let handler = match report {
            Report::Tool => Handler::Said(h.clone()),
            Report::Command => Handler::Every(EveryMember {
                exit_status: h.exit_status,
                host: h.host.clone(),
                signal: h.signal,
                stderr_tail: h.stderr_tail.clone(),
            }),
        };
        let (outcome, reply) = match end {
            Some(End::Final { outcome, reply, .. }) => (Some(outcome.to_string()), reply.clone()),
            Some(End::Unknown) => (Some(Pending::Unknown.to_string()), None),
            _ => (None, None),
        };
        let last = match end {
            Some(End::TimedOut(last)) => Some(last.map(|l| l.to_string())),
            _ => None,
        };
        let (accepted_at, finished_at) = match end {
            Some(End::Final {
                accepted_at,
                finished_at,
                ..
            }) => (*accepted_at, *finished_at),
            _ => (None, None),
        };
        let command = report == Report::Command;
        let stored = delivery.status() == Some(Status::Stored);
        let task_status = match report {
            Report::Command => last,
            // Not asked (the receiver is not running): as delivered.
            Report::Tool => last.map(|l| match l {
                Some(l) => Some(l),
                None if stored => Some(Status::Stored.to_string()),
                None => Some(Pending::Queued.to_string()),
            }),
        };
        let timed_out = command && task_status.is_some();
        Waited {
            awaiting_approval: timed_out
                && matches!(end, Some(End::TimedOut(Some(Pending::AwaitingApproval)))),
            timed_out,
            delivery,
            handler,
            outcome,
            reply,
            accepted_at: command.then_some(accepted_at),
            finished_at: command.then_some(finished_at),
            task_status,
        }
    }
}

/// How waiting for a task ended.
pub enum End {
    /// The task reached a final outcome, with its reply text if it made
    /// one, and how its handler ended if its turn failed.
    Final {
        outcome: Outcome,
        reply: Option<String>,
        /// The reply's own message id, when it was sent back.
        reply_id: Option<String>,
        handler: HandlerExit,
        /// When it was accepted (epoch seconds), when the receiver said.
        accepted_at: Option<u64>,
        /// When it ended (epoch seconds), when the receiver said.
        finished_at: Option<f64>,
    },
    /// The receiver does not know the task.
    Unknown,
    /// The deadline passed first; the last status seen, if any.
    TimedOut(Option<Pending>),
}

impl End {
    /// What a `task/status` answer says: the task's end, or where it
    /// waits (`TimedOut` there, until a later answer or the deadline).
    pub fn of(st: TaskStatus) -> End {
        match st.status {
            TaskState::Ended(outcome) => {
                let reply = st.reply.flatten();
                End::ended(outcome, reply, st.handler, st.accepted_at, st.finished_at)
            }
            TaskState::Pending(Pending::Unknown) => End::Unknown,
            TaskState::Pending(p) => End::TimedOut(Some(p)),
        }
    }

    /// The end a spool's receipt keeps.
    pub fn receipt(r: crate::spool::Receipt) -> End {
        let finished_at = Some(r.finished_at);
        End::ended(r.outcome, r.reply, r.handler, r.accepted_at, finished_at)
    }

    /// A final end: `reply` as a receipt keeps it (its text, and its own
    /// id when it was sent back).
    fn ended(
        outcome: Outcome,
        reply: Option<ReplyRecord>,
        handler: HandlerExit,
        accepted_at: Option<u64>,
        finished_at: Option<f64>,
    ) -> End {
        End::Final {
            outcome,
            reply_id: reply.as_ref().and_then(|r| r.message_id.clone()),
            reply: reply.map(|r| r.body),
            handler,
            accepted_at,
            finished_at,
        }
    }
}

/// Waits for the task `message_id` at whichever instance `who` finds,
/// until `deadline`. Notes on stderr say when none runs.
pub fn wait(
    config: &Config,
    who: &Who,
    message_id: &str,
    deadline: Option<Instant>,
) -> Result<End> {
    wait_seeing(config, who, message_id, deadline, &mut Seen::default())
}

/// `wait`, telling `seen` where the task waits meanwhile (which says an
/// approval it waits for: `Seen::announcing`).
pub fn wait_seeing(
    config: &Config,
    who: &Who,
    message_id: &str,
    deadline: Option<Instant>,
    seen: &mut Seen,
) -> Result<End> {
    let f = Follow {
        name: &who.name,
        deadline,
        quiet: false,
    };
    let end = follow(
        &f,
        || match who.find(config)? {
            Some(peer) => Ok(Some(Found::Live(Box::new(peer)))),
            None => Ok(who.stored_end(message_id).map(Found::Ended)),
        },
        |found| match found {
            Found::Live(peer) => watch(config, &peer, message_id, deadline, seen),
            Found::Ended(end) => Ok(Step::Done(end)),
        },
    )?;
    Ok(end.unwrap_or(End::TimedOut(seen.place)))
}

/// What a waiter learnt of its task while it has not ended: where it
/// last was (`task/status`, and the events that move it), and the
/// approval it waits for. Announcing, the first news of each approval is
/// said on stderr: `waiting for an approval at NAME (approval ask-N)`.
#[derive(Default)]
pub struct Seen {
    pub place: Option<Pending>,
    /// The approval said already (empty: one an earlier baton did not
    /// name).
    said: Option<String>,
    /// The receiver's name, to announce approvals with.
    announce: Option<String>,
}

impl Seen {
    /// A `Seen` that says each approval the task comes to wait for.
    pub fn announcing(name: &str) -> Seen {
        Seen {
            announce: Some(name.to_string()),
            ..Seen::default()
        }
    }

    /// The task is at `place` now; `approval` is the one it waits for,
    /// where the receiver named it.
    fn now(&mut self, place: Option<Pending>, approval: Option<&str>) {
        self.place = place;
        if place != Some(Pending::AwaitingApproval) {
            return;
        }
        let id = approval.unwrap_or("");
        // Each approval once; one that names no id, once at all.
        if self.said.as_deref() == Some(id) || (id.is_empty() && self.said.is_some()) {
            return;
        }
        self.said = Some(id.to_string());
        let Some(name) = &self.announce else {
            return;
        };
        let which = match id {
            "" => String::new(),
            id => format!(" (approval {})", escape(id)),
        };
        eprintln!("baton: waiting for an approval at {}{which}", escape(name));
    }
}

/// What a waiter finds while it follows a task: the live instance to
/// watch, or, while none runs, the task's end as its spool kept it.
enum Found {
    Live(Box<Peer>),
    Ended(End),
}

/// After a wait handed over the reply `reply_id` to the task
/// `message_id`: tells the instance that sent the task, on `conn`, that
/// its sender has the reply (`inbox/received`), so that the reply queued
/// there is not handed out again as new work. Its answer's `status`.
pub fn tell_received(conn: &mut Session, reply_id: &str, message_id: &str) -> Result<String> {
    let params = ReceivedParams {
        in_reply_to: message_id.to_string(),
        message_id: reply_id.to_string(),
    };
    let h: Handled = conn
        .call(Call::InboxReceived, params)
        .map_err(|e| Error::Transport(format!("inbox/received: {e}")))?;
    Ok(h.status.to_string())
}

/// Asks the instance `who` finds once for `task/status` of `message_id`:
/// its answer, or `None` when none runs.
pub fn ask_status(config: &Config, who: &Who, message_id: &str) -> Result<Option<TaskStatus>> {
    let Some(peer) = who.find(config)? else {
        return Ok(None);
    };
    let socket = Path::new(&peer.manifest.socket);
    let name = escape(&who.name);
    let mut conn = Session::open(socket, config.io_timeout)
        .map_err(|e| Error::Refused(format!("{name} does not answer: {e}")))?;
    conn.call(Call::TaskStatus, TaskParams::new(message_id))
        .map(Some)
        .map_err(|e| Error::Refused(format!("{name} answered task/status with {e}")))
}

/// Subscribes to one instance's events, asks for the task's status, and
/// waits for its end there.
fn watch(
    config: &Config,
    peer: &Peer,
    message_id: &str,
    deadline: Option<Instant>,
    seen: &mut Seen,
) -> Result<Step<End>> {
    // Only live events: the status answer covers what happened before.
    let Ok(mut conn) = subscribed(config, peer) else {
        return Ok(Step::Unwatched(None));
    };
    watch_session(&mut conn, message_id, deadline, seen, None)
}

/// A new connection to `peer`, subscribed to its live events only.
pub fn subscribed(config: &Config, peer: &Peer) -> std::result::Result<Session, ClientError> {
    let mut conn = Session::open(Path::new(&peer.manifest.socket), config.io_timeout)?;
    conn.subscribe(crate::wire::request::SubscribeParams::default())?;
    Ok(conn)
}

/// Asks `task/status` on `conn` and reads what follows until the task's
/// end: its `task.ended` on a subscribed connection, or a final status.
/// With `again`, the question is asked again after that long, doubling
/// up to once a second (a bridge, which may not subscribe).
pub fn watch_session(
    conn: &mut Session,
    message_id: &str,
    deadline: Option<Instant>,
    seen: &mut Seen,
    again: Option<Duration>,
) -> Result<Step<End>> {
    let ask = request(
        STATUS_ID,
        Call::TaskStatus.into(),
        TaskParams::new(message_id),
    );
    let mut every = again;
    loop {
        if conn.write(&ask).is_err() {
            return Ok(Step::Lost);
        }
        let until = match every {
            Some(e) => {
                every = Some((e * 2).min(BACKOFF_LAST));
                let next = Instant::now() + e;
                Some(deadline.map_or(next, |d| d.min(next)))
            }
            None => deadline,
        };
        loop {
            match conn.next(until) {
                Ok(msg) => {
                    if let Some(end) = read(&msg, message_id, seen)? {
                        return Ok(end);
                    }
                }
                Err(ClientError::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(Step::Done(End::TimedOut(seen.place)));
                }
                Err(ClientError::Timeout) => break,
                Err(_) => return Ok(Step::Lost),
            }
        }
    }
}

/// What one line says about the task: its end, a lost cause, or nothing
/// yet (then perhaps where it waits now, which `seen` learns).
fn read(msg: &Value, message_id: &str, seen: &mut Seen) -> Result<Option<Step<End>>> {
    if let Some(ev) = Event::of_notification(msg) {
        if ev.id() != message_id {
            return Ok(None);
        }
        match ev.kind {
            Some(EventKind::TaskEnded) => {}
            // Asked once it reached the head of the queue.
            Some(EventKind::ApprovalRequested) => {
                seen.now(Some(Pending::AwaitingApproval), ev.approval_id.as_deref());
                return Ok(None);
            }
            // Approved: queued again until it runs (denied: it ends).
            Some(EventKind::ApprovalResolved | EventKind::TaskRequeued) => {
                seen.now(Some(Pending::Queued), None);
                return Ok(None);
            }
            Some(EventKind::TaskClaimed | EventKind::TaskTyped | EventKind::TurnStarted) => {
                seen.now(Some(Pending::Running), None);
                return Ok(None);
            }
            _ => return Ok(None),
        }
        let outcome = ev.outcome.unwrap_or(Outcome::Failed);
        let end = End::ended(outcome, ev.reply, ev.handler, None, Some(ev.time));
        return Ok(Some(Step::Done(end)));
    }
    let Ok(line) = serde_json::from_value::<Reply>(msg.clone()) else {
        return Ok(None);
    };
    if line.id.as_ref().and_then(Value::as_str) != Some(STATUS_ID) {
        return Ok(None);
    }
    if let Some(err) = line.error {
        if err.code == wire::METHOD_NOT_FOUND {
            return Err(Error::Refused(
                "the receiver does not answer task/status (an older baton), so its tasks cannot be waited for"
                    .into(),
            ));
        }
        // Shutting down, or too busy to answer: ask its successor.
        return Ok(Some(Step::Lost));
    }
    let Some(st) = line
        .result
        .and_then(|r| serde_json::from_value::<TaskStatus>(r).ok())
    else {
        return Ok(None);
    };
    let approval = st.approval_id.clone();
    match End::of(st) {
        End::TimedOut(p) => {
            seen.now(p, approval.as_deref());
            Ok(None)
        }
        end => Ok(Some(Step::Done(end))),
    }
}

#[cfg(test)]
mod tests {
    use super::waiting_note;

    #[test]
    fn a_resend_that_only_waits_again_reads_as_a_status() {
        assert_eq!(
            waiting_note("accepted", "m-1", "beta"),
            "accepted: message m-1 to beta; waiting for it to end"
        );
        assert_eq!(
            waiting_note("duplicate", "m-1", "beta"),
            "already accepted as m-1 by beta; waiting for it to end"
        );
        assert_eq!(
            waiting_note("duplicate", "m\u{1b}", "b\u{202e}"),
            "already accepted as m\\e by b\\u{202e}; waiting for it to end"
        );
    }
}
