//! `serve --tmux-pane PANE`: a pull instance whose tasks are typed into
//! the tmux pane where an interactive agent runs. The foreground claims
//! the head of the queue itself, exactly as `inbox/claim` does, hands the
//! envelope to the tmux helper thread (`crate::workers::tmux`) and hears back on a
//! channel; it never waits on tmux. One task at a time: the next is typed
//! only once the agent ran `baton inbox complete` for this one (the
//! envelope says how), or once `--turn-timeout` ran out (the task then
//! ends `timeout`, as an exec turn that runs out does).
//!
//! A pane tmux cannot reach (no server, no such pane, tmux failing or
//! hanging) is no verdict on a task: a task being typed goes back to its
//! place in the queue, the instance says why once (a `notice` with
//! `tmux_pane`), and asks tmux again after a delay that grows to
//! `LAST_RETRY`, only whether the pane is there; once it is, that is said
//! too and the queue is typed in order. A pane whose foreground program
//! is a shell is waited for the same way (`Trouble::Shell`): nothing is
//! typed into it until an agent runs there.

use super::backoff::Retry;
use super::{Foreground, ServeOptions};
use crate::base::error::{Error, Result};
use crate::spool::Task;
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::ClaimStatus;
use crate::wire::Outcome;
use crate::wire::body::Notice;
use crate::workers::tmux::{self, Job, Report, Trouble};
use crate::workers::turn;
use crossbeam_channel as chan;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The first delay before tmux is asked again after a failure, and the
/// longest.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(1);
/// Closes an envelope (`turn::envelope`).
const CLOSE: &str = "</agent_relay>\n";

/// The pane and what is under way with it.
pub(super) struct Pane {
    target: String,
    typist: chan::Sender<Job>,
    /// A job is with the helper thread.
    asked: bool,
    /// Whether the pane answered the last time: `None` before the first
    /// probe, `Some(false)` from a failure (said) until it answers again.
    up: Option<bool>,
    /// Why nothing is typed now, while `up` is `Some(false)`.
    waiting: Option<Trouble>,
    retry: Retry,
    /// The task typed last, while it is open, and when its turn runs out.
    typed: Option<(String, Option<Instant>)>,
}

/// The pane of `--tmux-pane`, with its helper thread, and the channel the
/// thread reports on (never ready without the option).
pub(super) fn start(
    opts: &ServeOptions,
    instance_id: &str,
) -> Result<(Option<Pane>, chan::Receiver<Report>)> {
    let Some(target) = &opts.tmux_pane else {
        return Ok((None, chan::never()));
    };
    let (tx, rx) = chan::unbounded();
    let typist = tmux::start(target, tx)
        .map_err(|e| Error::Env(format!("cannot start the tmux thread: {e}")))?;
    eprintln!(
        "baton: {instance_id}: typing tasks into tmux pane {}",
        escape(target)
    );
    let pane = Pane {
        target: target.clone(),
        typist,
        asked: false,
        up: None,
        waiting: None,
        retry: Retry::new(FIRST_RETRY, LAST_RETRY),
        typed: None,
    };
    Ok((Some(pane), rx))
}

impl Foreground {
    /// Moves the pane's work on: ends a typed task whose turn ran out,
    /// asks whether the pane is there while that is unknown, or claims
    /// the next task and has it typed. Nothing while a job is out, a task
    /// is open, or the instance is paused.
    pub(super) fn pane_pump(&mut self) {
        let now = Instant::now();
        let Some(p) = self.pane.as_mut() else {
            return;
        };
        if p.asked {
            return;
        }
        if let Some((id, deadline)) = p.typed.clone() {
            if !self.open.iter().any(|o| o.task.message_id == id) {
                p.typed = None;
            } else if deadline.is_some_and(|d| d <= now) {
                p.typed = None;
                self.pane_timed_out(&id);
            }
        }
        let idle = self.open.is_empty() && !self.paused();
        let Some(p) = self.pane.as_mut() else {
            return;
        };
        if !idle || p.retry.due(now).is_some() {
            return;
        }
        if p.up != Some(true) {
            p.asked = p.typist.send(Job::Probe).is_ok();
            return;
        }
        let claimed = self.claim();
        match (claimed.status.known(), claimed.task) {
            (Some(ClaimStatus::Claimed), Some(task)) => {
                let buffer = format!("baton-{}-{}", self.shared.instance_id, task.message_id);
                let job = Job::Type {
                    message_id: task.message_id,
                    buffer,
                    text: task.envelope,
                };
                let p = self.pane.as_mut().expect("checked");
                p.asked = p.typist.send(job).is_ok();
            }
            // A resource ran short (said by the claim): tried again later.
            (Some(ClaimStatus::Error), _) => self.pane.as_mut().expect("checked").retry.later(),
            _ => {}
        }
    }

    /// Applies what the helper thread reported.
    pub(super) fn pane_report(&mut self, report: Report) {
        let Some(p) = self.pane.as_mut() else {
            return;
        };
        p.asked = false;
        match report {
            Report::Probed(Ok(pid)) => self.pane_up(pid),
            Report::Probed(Err(trouble)) => self.pane_down(&trouble, None),
            Report::Typed {
                message_id,
                result: Ok(pid),
            } => {
                self.pane_up(pid);
                let open = self.open.iter().any(|o| o.task.message_id == message_id);
                let deadline = self.opts.turn_timeout.map(|t| Instant::now() + t);
                let p = self.pane.as_mut().expect("checked");
                self.hub.emit(Body::TaskTyped {
                    message_id: &message_id,
                    tmux_pane: &p.target,
                });
                p.typed = open.then_some((message_id, deadline));
            }
            Report::Typed {
                message_id,
                result: Err(trouble),
            } => {
                let put_back = self.pane_put_back(&message_id);
                self.pane_down(&trouble, put_back.then_some(message_id.as_str()));
            }
        }
    }

    /// The pane's next due moment: a retry, or the typed task's timeout.
    pub(super) fn pane_timer(&self) -> Option<Instant> {
        let p = self.pane.as_ref()?;
        let now = Instant::now();
        let retry = p.retry.due(now);
        let timeout = p.typed.as_ref().and_then(|(_, d)| *d);
        retry.into_iter().chain(timeout).min()
    }

    /// The envelope of a task for the agent in the pane: it says how to
    /// finish, and how to reply, with `baton inbox complete` (None without
    /// `--tmux-pane`).
    pub(super) fn pane_envelope(&self, task: &Task) -> Option<String> {
        self.pane.as_ref()?;
        let id = &task.message_id;
        // An id that begins with '-' would read as an option.
        let dashes = if id.starts_with('-') { "-- " } else { "" };
        let target = &self.shared.instance_id;
        let done = format!("baton inbox complete {target} {dashes}{id}");
        let reply = format!("baton inbox complete --reply \"TEXT\" {target} {dashes}{id}");
        let can_reply = task.sender.instance_id.is_some();
        let envelope = turn::envelope(task, can_reply.then_some(reply.as_str()));
        let body = envelope.strip_suffix(CLOSE).unwrap_or(&envelope);
        Some(format!("{body}[when done: {done}]\n{CLOSE}"))
    }

    /// The pane answered, its process `pid` where tmux says: a failure
    /// said before is over, and that is said. The pane's process is the
    /// agent's: it and what it starts may use the agent's doors, not the
    /// operator's (`access`).
    fn pane_up(&mut self, pid: Option<u32>) {
        if let Some(pid) = pid {
            self.shared.agent.store(pid, Ordering::SeqCst);
        }
        let Some(p) = self.pane.as_mut() else {
            return;
        };
        let was_down = p.up == Some(false);
        let was_shell = matches!(p.waiting.take(), Some(Trouble::Shell(_)));
        p.up = Some(true);
        p.retry.at = None;
        if was_down {
            let again = if was_shell {
                "no longer runs a shell"
            } else {
                "answers again"
            };
            let text = format!(
                "tmux pane {} {again}: queued tasks are typed into it",
                p.target
            );
            eprintln!("baton: {}", escape(&text));
            self.hub.emit(Body::Notice(Notice {
                text: &text,
                tmux_pane: Some(&p.target),
                ..Notice::default()
            }));
        }
    }

    /// Why queued tasks are not typed into the pane now, and until when
    /// (`control/status`'s `tmux_wait`); None while they are typed.
    pub(super) fn pane_wait(&self) -> Option<String> {
        let p = self.pane.as_ref()?;
        p.waiting.as_ref().map(Trouble::waiting)
    }

    /// Nothing can be typed into the pane, for `trouble`: said when the
    /// pane was not known to be down, or was for another kind of trouble
    /// (with the task that went back to the queue, if one did), and asked
    /// again after a growing delay.
    fn pane_down(&mut self, trouble: &Trouble, put_back: Option<&str>) {
        let Some(p) = self.pane.as_mut() else {
            return;
        };
        let known = p.waiting.as_ref().is_some_and(|w| w.same_kind(trouble));
        let say = p.up != Some(false) || !known;
        p.up = Some(false);
        p.waiting = Some(trouble.clone());
        p.retry.later();
        if !say {
            return;
        }
        let back = put_back.map_or_else(String::new, |id| {
            format!("task {id} went back to its place in the queue; ")
        });
        let reason = trouble.reason();
        let text = match trouble {
            Trouble::Failed(_) => format!(
                "tmux pane {} cannot be reached ({reason}): {back}queued tasks stay queued and are typed once it answers",
                p.target
            ),
            Trouble::Unbracketed => format!(
                "tmux pane {} is not typed into: {reason}, so a task's lines would arrive as keys, each line submitted alone; {back}queued tasks stay queued and are typed once it asks",
                p.target
            ),
            Trouble::Shell(_) => format!(
                "tmux pane {} is not typed into: {reason}, which would run a task's lines as commands; {back}queued tasks stay queued and are typed once an agent runs there",
                p.target
            ),
        };
        eprintln!("baton: {}", escape(&text));
        self.hub.emit(Body::Notice(Notice {
            message_id: put_back,
            reason: Some(&reason),
            text: &text,
            tmux_pane: Some(&p.target),
            ..Notice::default()
        }));
    }
    /// A claimed task that could not be typed goes back to its place in
    /// the queue, still approved, as a task whose handler could not be
    /// started for want of a resource does; true if it did.
    fn pane_put_back(&mut self, id: &str) -> bool {
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            return false;
        };
        self.open.remove(pos);
        let back = self.unclaim(id);
        self.refresh();
        back
    }

    /// `--turn-timeout` ran out on the typed task: it ends `timeout`, and
    /// the next task can be typed.
    fn pane_timed_out(&mut self, id: &str) {
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            return;
        };
        let seconds = self.opts.turn_timeout.unwrap_or_default().as_secs_f64();
        self.notice(
            Some(id),
            format!(
                "turn timed out: not completed within --turn-timeout {seconds} s of being typed"
            ),
        );
        if let Err(e) = self.finish_turn(pos, Outcome::Timeout, None, None) {
            self.notice(Some(id), e.to_string());
            return;
        }
        self.refresh();
    }
}
