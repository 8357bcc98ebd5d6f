//! A resource that runs short (file descriptors, memory, processes, a
//! failing device) is no verdict on a task: the task stays queued, in its
//! place; the shortage is said once, on standard error and as a `notice`;
//! an exec agent tries again after a delay that grows (a deadline in the
//! loop's `select!`, never a sleep), and the first task handed out after
//! it says that it is over.

use super::Foreground;
use crate::base::error::Error;
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::ClaimStatus;
use crate::wire::answer::Claimed;
use crate::wire::body::Notice;
use std::time::{Duration, Instant};

/// The first delay before an exec agent tries again, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(50);
const LAST_RETRY: Duration = Duration::from_secs(1);

/// A shortage that was said and is not over yet.
pub(super) struct Shortage {
    what: &'static str,
    retry: Retry,
}

/// When to try again after failures in a row (an exec agent's, a tmux
/// pane's, Codex's): `first` after the first, then twice the last delay,
/// up to `last`.
pub(super) struct Retry {
    first: Duration,
    last: Duration,
    delay: Duration,
    /// The next try: none before the first failure, nor after a success.
    pub(super) at: Option<Instant>,
}

impl Retry {
    pub(super) fn new(first: Duration, last: Duration) -> Retry {
        Retry {
            first,
            last,
            delay: first,
            at: None,
        }
    }

    /// One more failure: the next try comes after a longer delay.
    pub(super) fn later(&mut self) {
        self.delay = match self.at {
            Some(_) => (self.delay * 2).min(self.last),
            None => self.first,
        };
        self.at = Some(Instant::now() + self.delay);
    }

    /// The next try, while it is still to come.
    pub(super) fn due(&self, now: Instant) -> Option<Instant> {
        self.at.filter(|at| *at > now)
    }
}

impl Foreground {
    /// Notes that `what` ran short (`error` says where); says so only when
    /// it starts, and pushes the next try back.
    pub(super) fn short_of(&mut self, what: &'static str, error: &str) {
        match &mut self.short {
            Some(s) if s.what == what => s.retry.later(),
            _ => {
                let text = format!(
                    "{what}: {error}; queued tasks stay queued and are handed out once it is back"
                );
                eprintln!("baton: {}", escape(&text));
                self.hub.emit(Body::Notice(Notice {
                    shortage: Some(what),
                    text: &text,
                    ..Notice::default()
                }));
                let mut retry = Retry::new(FIRST_RETRY, LAST_RETRY);
                retry.later();
                self.short = Some(Shortage { what, retry });
            }
        }
    }

    /// A task was handed out: a shortage said before is over, and that is
    /// said too.
    pub(super) fn supplied(&mut self) {
        if let Some(s) = self.short.take() {
            let text = format!("no longer {}: tasks are handed out again", s.what);
            eprintln!("baton: {text}");
            self.notice(None, text);
        }
    }

    /// Whether an exec agent waits before it tries to start a task again.
    pub(super) fn backing_off(&self, now: Instant) -> bool {
        self.short
            .as_ref()
            .is_some_and(|s| s.retry.due(now).is_some())
    }

    /// When an exec agent tries again, while that is still to come (pull
    /// agents try when they claim). A try that is due needs no timer: the
    /// loop tries at its next pass, or once the turn that runs or the
    /// pause is over.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.opts.exec.as_ref()?;
        self.short.as_ref()?.retry.due(Instant::now())
    }

    /// A claim of `id` failed and left the task queued: it stays
    /// approved. What `inbox/claim` answers.
    pub(super) fn claim_failed(&mut self, id: &str, e: &Error) -> Claimed {
        self.approved.insert(id.to_string());
        match e.shortage() {
            Some(what) => {
                self.short_of(what, &e.to_string());
                let why = format!("{what}: {e}; the task stays queued: claim again later");
                Claimed {
                    temporary: true,
                    ..Claimed::not(ClaimStatus::Error, Some(why))
                }
            }
            None => Claimed::not(ClaimStatus::Error, Some(e.to_string())),
        }
    }

    /// The handler of a claimed task could not be started for want of
    /// `what`: the task goes back to its place in the queue, still
    /// approved.
    pub(super) fn put_back(&mut self, id: &str, what: &'static str, error: &str) {
        self.unclaim(id);
        self.approved.insert(id.to_string());
        self.short_of(what, error);
    }

    /// Puts a claimed task back in its place in the queue, still
    /// approved; true if it went, else said.
    pub(super) fn unclaim(&mut self, id: &str) -> bool {
        let text = |e| {
            format!(
                "cannot put the task back in the queue: {e}; it shows as interrupted at the next start"
            )
        };
        let back = self.spool().unclaim(id);
        let back = back.map_err(|e| self.notice(Some(id), text(e))).is_ok();
        if back {
            self.approved.insert(id.to_string());
        }
        back
    }
}
