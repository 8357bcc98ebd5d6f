//! `serve --codex`: a pull instance whose tasks are handed, one at a
//! time, to the Codex session of its workspace through Codex's
//! app-server (docs/hosts.md). The foreground claims the head of the queue
//! itself, exactly as `inbox/claim` does, and hands the envelope to the
//! Codex thread (`crate::workers::codex::driver`), which reports back on a channel;
//! it never waits on Codex. The turn's end is the task's: `completed` is
//! `done` with the turn's last agent message as the reply, `interrupted`
//! is `cancelled` (`timeout` when `--turn-timeout` ran out), `failed` is
//! `failed` with Codex's error as the task's stderr tail.
//!
//! An app-server that cannot be reached is no verdict on a task: a task
//! whose input never reached it goes back to its place in the queue; one
//! whose input may have reached it (the connection broke under its turn)
//! is set aside as `interrupted`, for the operator to requeue or discard,
//! never delivered twice. Either way the instance says why once (a
//! `notice` with `codex`), shows it in its status, and tries again after
//! a delay that grows to `LAST_RETRY`.

use super::backoff::Retry;
use super::{Foreground, ServeOptions};
use crate::base::error::{Error, Result};
use crate::spool::Task;
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::answer::CodexStatus;
use crate::wire::body::Notice;
use crate::wire::{CODEX_HOST, ClaimStatus, HandlerExit, Outcome, TaskMode};
use crate::workers::codex::driver::{self, Job, Lost, Report};
use crate::workers::codex::{TurnEnd, TurnStatus};
use crate::workers::turn;
use crossbeam_channel as chan;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(2);
/// What the envelope says about replying.
const HOW_TO_REPLY: &str = "your last message in this turn is the reply; baton sends it back";

/// The app-server and what is under way with it.
pub(super) struct Codex {
    socket: PathBuf,
    driver: chan::Sender<Job>,
    /// A probe is with the thread.
    asked: bool,
    /// Whether it answered the last time: `None` before the first probe,
    /// `Some(false)` from a failure (said) until it answers again.
    up: Option<bool>,
    why_down: Option<String>,
    thread: Option<String>,
    retry: Retry,
    /// The task handed over, while it is open: when its turn runs out,
    /// and whether it is being ended for that.
    task: Option<Handed>,
}

#[derive(Default)]
struct Handed {
    message_id: String,
    deadline: Option<Instant>,
    timed_out: bool,
    /// Its turn began (only then can a steer task join it).
    started: bool,
    /// Steer tasks of its sender handed over to join its turn.
    followers: Vec<String>,
}

/// The app-server's socket of `--codex-socket`, else the daemon's socket
/// of `$CODEX_HOME` (`~/.codex` when unset).
pub fn default_socket(codex_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let dir = match (codex_home, home) {
        (Some(c), _) => c.to_path_buf(),
        (None, Some(h)) => h.join(".codex"),
        (None, None) => return None,
    };
    Some(
        dir.join("app-server-control")
            .join("app-server-control.sock"),
    )
}

/// The Codex thread of `--codex`, and the channel it reports on (never
/// ready without the option).
pub(super) fn start(
    opts: &ServeOptions,
    workspace: &Path,
    instance_id: &str,
) -> Result<(Option<Codex>, chan::Receiver<Report>)> {
    let Some(socket) = &opts.codex else {
        return Ok((None, chan::never()));
    };
    let (tx, rx) = chan::unbounded();
    let driver = driver::start(socket.clone(), workspace.to_path_buf(), tx)
        .map_err(|e| Error::Env(format!("cannot start the Codex thread: {e}")))?;
    eprintln!(
        "baton: {instance_id}: handing tasks to Codex's app-server at {}",
        escape(&socket.display().to_string())
    );
    let codex = Codex {
        socket: socket.clone(),
        driver,
        asked: false,
        up: None,
        why_down: None,
        thread: None,
        retry: Retry::new(FIRST_RETRY, LAST_RETRY),
        task: None,
    };
    Ok((Some(codex), rx))
}

impl Foreground {
    /// Moves Codex's work on: ends a turn that ran out, asks whether the
    /// app-server is there while that is unknown, or claims the next task
    /// and hands it over. Nothing while a probe is out, a task is open, or
    /// the instance is paused.
    pub(super) fn codex_pump(&mut self) {
        let now = Instant::now();
        let Some(c) = self.codex.as_mut() else {
            return;
        };
        if let Some(h) = c.task.as_mut() {
            let ran_out = !h.timed_out && h.deadline.is_some_and(|d| d <= now);
            let id = h.message_id.clone();
            h.timed_out |= ran_out;
            let follow = h.started && !h.timed_out;
            if ran_out {
                let _ = c.driver.send(Job::Interrupt {
                    message_id: id.clone(),
                });
                let seconds = self.opts.turn_timeout.unwrap_or_default().as_secs_f64();
                self.notice(
                    Some(&id),
                    format!("turn timed out: not ended within --turn-timeout {seconds} s; Codex's turn is interrupted"),
                );
            }
            if follow && !self.paused() {
                self.codex_follow_up();
            }
            return;
        }
        let idle = self.open.is_empty() && !self.paused();
        let Some(c) = self.codex.as_mut() else {
            return;
        };
        if c.asked || !idle || c.retry.due(now).is_some() {
            return;
        }
        if c.up != Some(true) {
            c.asked = c.driver.send(Job::Probe).is_ok();
            return;
        }
        let claimed = self.claim();
        match (claimed.status.known(), claimed.task) {
            (Some(ClaimStatus::Claimed), Some(task)) => {
                let steer = task.mode == TaskMode::Steer.to_string();
                let deadline = self.opts.turn_timeout.map(|t| Instant::now() + t);
                let c = self.codex.as_mut().expect("checked");
                c.task = Some(Handed {
                    message_id: task.message_id.clone(),
                    deadline,
                    ..Handed::default()
                });
                let _ = c.driver.send(Job::Deliver {
                    message_id: task.message_id,
                    text: task.envelope,
                    steer,
                });
            }
            (Some(ClaimStatus::Error), _) => self.codex.as_mut().expect("checked").retry.later(),
            _ => {}
        }
    }

    /// A steer task of the handed task's sender, if one waits, is
    /// claimed as `inbox/claim` claims it (a follow-up) and handed over to
    /// join the running turn.
    fn codex_follow_up(&mut self) {
        let claimed = self.claim();
        let (true, Some(task)) = (claimed.status == ClaimStatus::Claimed, claimed.task) else {
            return;
        };
        let Some(h) = self.codex.as_mut().and_then(|c| c.task.as_mut()) else {
            return;
        };
        h.followers.push(task.message_id.clone());
        let c = self.codex.as_ref().expect("checked");
        let _ = c.driver.send(Job::Deliver {
            message_id: task.message_id,
            text: task.envelope,
            steer: true,
        });
    }

    /// A steer task that could not join the running turn goes back to its
    /// place in the queue, still approved; said.
    fn codex_back(&mut self, id: &str, why: &str) {
        if let Some(h) = self.codex.as_mut().and_then(|c| c.task.as_mut()) {
            h.followers.retain(|f| f != id);
            // Not tried again before the next turn.
            h.started = false;
        }
        if let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) {
            self.open.remove(pos);
            self.unclaim(id);
        }
        self.notice(
            Some(id),
            format!("{why}: it went back to its place in the queue"),
        );
        self.refresh();
    }

    /// Applies what the Codex thread reported.
    pub(super) fn codex_report(&mut self, report: Report) {
        if self.codex.is_none() {
            return;
        }
        match report {
            Report::Up { thread_id, pid } => {
                let c = self.codex.as_mut().expect("checked");
                c.asked = false;
                // The app-server runs the agent's turns and their commands:
                // its processes may use the agent's doors, not the
                // operator's (`access`), as a pane's do.
                if let Some(pid) = pid {
                    self.shared.agent.store(pid, Ordering::SeqCst);
                }
                self.codex_up(thread_id);
            }
            Report::Down { why, lost } => {
                let c = self.codex.as_mut().expect("checked");
                c.asked = false;
                c.task = None;
                let what = lost.map(|l| self.codex_lost(&l));
                self.codex_down(&why, what.as_deref());
            }
            Report::Back { message_id, why } => self.codex_back(&message_id, &why),
            Report::Refused { message_id, why } => {
                self.codex_ended(&message_id, Outcome::Failed, None, Some(why));
            }
            Report::Started {
                message_id,
                thread_id,
                turn_id,
            } => {
                self.codex_up(thread_id.clone());
                if let Some(h) = self.codex.as_mut().and_then(|c| c.task.as_mut()) {
                    h.started |= h.message_id == message_id;
                }
                self.hub.emit(Body::Notice(Notice {
                    codex_thread: Some(&thread_id),
                    codex_turn: Some(&turn_id),
                    message_id: Some(&message_id),
                    text: &format!("Codex turn {turn_id} started on thread {thread_id}"),
                    ..Notice::default()
                }));
            }
            Report::Ended {
                message_id,
                followers,
                end,
            } => {
                for f in &followers {
                    self.codex_follower_ended(f, end.status);
                }
                self.codex_turn_ended(&message_id, end);
            }
        }
    }

    /// A steer task that joined a turn ends with it; the turn's reply
    /// goes to the sender once, with the task the turn was started for.
    fn codex_follower_ended(&mut self, id: &str, status: TurnStatus) {
        let outcome = match status {
            TurnStatus::Completed => Outcome::Done,
            TurnStatus::Interrupted => Outcome::Cancelled,
            _ => Outcome::Failed,
        };
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            return;
        };
        if let Err(e) = self.finish_turn(pos, outcome, None, None) {
            self.notice(Some(id), e.to_string());
        }
    }

    fn codex_turn_ended(&mut self, id: &str, end: TurnEnd) {
        let timed_out = self
            .codex
            .as_ref()
            .and_then(|c| c.task.as_ref())
            .is_some_and(|h| h.message_id == id && h.timed_out);
        let (outcome, reply, error) = match end.status {
            TurnStatus::Completed => (Outcome::Done, end.text, None),
            TurnStatus::Interrupted if timed_out => (Outcome::Timeout, None, None),
            TurnStatus::Interrupted => (Outcome::Cancelled, None, None),
            TurnStatus::Failed => (Outcome::Failed, None, end.error),
            TurnStatus::InProgress | TurnStatus::Other => (
                Outcome::Failed,
                None,
                Some("Codex ended the turn with a status baton does not know".into()),
            ),
        };
        self.codex_ended(id, outcome, reply, error);
    }

    /// Finishes the handed task as `outcome`: a reply goes back to a
    /// sender that is an instance, as `inbox complete --reply` sends it,
    /// and is kept in the receipt either way.
    fn codex_ended(
        &mut self,
        id: &str,
        outcome: Outcome,
        reply: Option<String>,
        error: Option<String>,
    ) {
        if let Some(c) = self.codex.as_mut() {
            if c.task.as_ref().is_some_and(|h| h.message_id == id) {
                c.task = None;
            }
        }
        // Cancelled here meanwhile (`task/cancel`): already finished.
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            return;
        };
        let task = &self.open[pos].task;
        let answers_a_sender = task.sender.instance_id.is_some() && task.in_reply_to.is_none();
        if let (Some(body), true) = (&reply, answers_a_sender) {
            let complete = crate::wire::answer::CompleteParams {
                message_id: id.to_string(),
                outcome: None,
                reply: Some(body.clone()),
                reply_to_reply: None,
            };
            let serde_json::Value::Object(params) = complete.to_value() else {
                unreachable!("params serialize as an object")
            };
            // The answer is the foreground's own: nobody waits for it.
            let (tx, _rx) = chan::bounded(1);
            self.complete(&params, tx);
            return;
        }
        let record = reply.map(|body| self.kept(&body, None));
        let handler = error.map(|e| HandlerExit {
            stderr_tail: Some(crate::text::sanitize::escape_tail(
                &e,
                turn::STDERR_TAIL_BYTES,
            )),
            host: Some(CODEX_HOST.into()),
            ..HandlerExit::default()
        });
        if let Some(e) = &handler.as_ref().and_then(|h| h.stderr_tail.clone()) {
            self.notice(Some(id), format!("Codex: {e}"));
        }
        if let Err(e) = self.finish_turn(pos, outcome, record, handler) {
            self.notice(Some(id), e.to_string());
        }
        self.refresh();
    }

    /// The task that was under way when the connection broke: back in the
    /// queue if Codex never had it, else set aside as interrupted. Says
    /// which.
    fn codex_lost(&mut self, l: &Lost) -> String {
        let Some(pos) = self
            .open
            .iter()
            .position(|o| o.task.message_id == l.message_id)
        else {
            return String::new();
        };
        let id = l.message_id.clone();
        if !l.sent {
            self.open.remove(pos);
            self.unclaim(&id);
            self.refresh();
            return format!("task {id} went back to its place in the queue; ");
        }
        self.open.remove(pos);
        for f in &l.followers {
            if let Some(p) = self.open.iter().position(|o| &o.task.message_id == f) {
                self.open.remove(p);
                match self.spool().set_interrupted(f) {
                    Ok(()) => self.ended(f, Outcome::Interrupted, None, None),
                    Err(e) => self.notice(Some(f), e.to_string()),
                }
            }
        }
        match self.spool().set_interrupted(&id) {
            Ok(()) => {
                self.ended(&id, Outcome::Interrupted, None, None);
                self.refresh();
                format!(
                    "task {id} may have run in part and is set aside as interrupted (baton inbox requeue or discard); "
                )
            }
            Err(e) => {
                self.notice(Some(&id), e.to_string());
                format!("task {id} shows as interrupted at the next start; ")
            }
        }
    }

    /// The app-server answered, with the workspace's thread.
    fn codex_up(&mut self, thread: String) {
        let Some(c) = self.codex.as_mut() else {
            return;
        };
        let was_down = c.up == Some(false);
        c.up = Some(true);
        c.why_down = None;
        c.thread = Some(thread.clone());
        c.retry.at = None;
        if was_down {
            let text = format!(
                "Codex's app-server at {} answers again (thread {thread}): queued tasks are handed to it",
                c.socket.display()
            );
            eprintln!("baton: {}", escape(&text));
            self.hub.emit(Body::Notice(Notice {
                codex: true,
                text: &text,
                ..Notice::default()
            }));
        }
    }

    /// The app-server cannot be reached: said when it was not known to be
    /// down, and asked again after a growing delay.
    fn codex_down(&mut self, why: &str, lost: Option<&str>) {
        let Some(c) = self.codex.as_mut() else {
            return;
        };
        let say = c.up != Some(false) || lost.is_some_and(|l| !l.is_empty());
        c.up = Some(false);
        c.why_down = Some(why.to_string());
        c.retry.later();
        if !say {
            return;
        }
        let text = format!(
            "Codex's app-server at {} cannot be reached ({why}): {}queued tasks stay queued and are handed over once it answers",
            c.socket.display(),
            lost.unwrap_or("")
        );
        eprintln!("baton: {}", escape(&text));
        self.hub.emit(Body::Notice(Notice {
            codex: true,
            reason: Some(why),
            text: &text,
            ..Notice::default()
        }));
    }
    /// The next due moment: a retry, or the handed task's timeout.
    pub(super) fn codex_timer(&self) -> Option<Instant> {
        let c = self.codex.as_ref()?;
        let now = Instant::now();
        let retry = c.retry.due(now);
        let timeout = c
            .task
            .as_ref()
            .filter(|h| !h.timed_out)
            .and_then(|h| h.deadline);
        retry.into_iter().chain(timeout).min()
    }

    /// A task finished here while Codex still runs its turn (a cancel, an
    /// operator's `inbox complete`): the turn is interrupted, and the next
    /// task waits for its end. No-op once the turn has ended.
    pub(super) fn codex_cancelled(&mut self, id: &str) {
        if let Some(c) = self.codex.as_ref() {
            if c.task.as_ref().is_some_and(|h| h.message_id == id) {
                let _ = c.driver.send(Job::Interrupt {
                    message_id: id.to_string(),
                });
            }
        }
    }

    /// The envelope of a task for Codex: its last message is the reply
    /// (None without `--codex`).
    pub(super) fn codex_envelope(&self, task: &Task) -> Option<String> {
        self.codex.as_ref()?;
        let can_reply = task.sender.instance_id.is_some();
        Some(turn::envelope(task, can_reply.then_some(HOW_TO_REPLY)))
    }

    /// What `control/status` says of the app-server.
    pub(super) fn codex_status(&self) -> Option<CodexStatus> {
        let c = self.codex.as_ref()?;
        Some(CodexStatus {
            socket: c.socket.display().to_string(),
            connected: c.up == Some(true),
            thread: c.thread.clone(),
            reason: c.why_down.clone(),
        })
    }
}
