//! `task/cancel` (issue 31; docs/protocol.md): a task's sender, or the
//! operator, withdraws a queued task or stops its running turn; either
//! way it ends `cancelled`, recorded as `task.ended`, which the sender's
//! wait reports. The access table lets the instance's own front end, the
//! operator, its agent and a bridge call it; here the agent is held to
//! the tasks this instance sent itself, a bridge to those that came
//! through a bridge of its own key's label, and a verified asker (`sender_instance_id`) to its
//! own. A task set aside (interrupted, expired, rejected) is the
//! operator's to requeue or discard, not cancelled; `inbox/discard` keeps
//! that meaning.

use super::{Answer, Foreground, Params};
use crate::server::RpcError;
use crate::spool::events::Hub;
use crate::spool::{Spool, Whereabouts};
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::Handling;
use crate::wire::access::{Caller, Role};
use crate::wire::answer::Handled;
use crate::wire::body::{Ended, Notice};
use crate::wire::request::TaskParams;
use crate::wire::{self, Outcome};

impl Foreground {
    /// `task/cancel`.
    pub(super) fn task_cancel(&mut self, params: &Params, caller: &Caller) -> Answer {
        let params = TaskParams::read(params)?;
        let id = params.message_id.clone();
        let whereabouts = self.spool().whereabouts(&id);
        self.may_cancel(&params, &whereabouts, caller)?;
        let by = cancelled_by(caller);
        let handled = match whereabouts {
            Whereabouts::Queued(_) => self.withdraw(&id, &by),
            Whereabouts::Processing => self.stop_turn(&id, &by),
            w => not_pending(&id, &w),
        };
        super::answer(handled)
    }

    /// Holds the agent, a bridge and a verified asker to their own tasks:
    /// `Err` is the refusal, which says who the caller is taken for. A
    /// task the spool does not know is nobody's: its answer says so.
    fn may_cancel(&self, p: &TaskParams, w: &Whereabouts, caller: &Caller) -> Result<(), RpcError> {
        let id = p.message_id.as_str();
        let sender = match w {
            Whereabouts::Unknown | Whereabouts::Finished(None) => return Ok(()),
            Whereabouts::Finished(Some(r)) => r.sender_instance_id.clone(),
            _ => self.spool().sender_of(id).flatten(),
        };
        let name = self.origin.name.clone();
        let ours = &self.shared.instance_id;
        let sent_by = match &sender {
            Some(s) => format!("instance {}", escape(s)),
            None => "a sender that is no instance".into(),
        };
        let shown = |p: Option<u32>| p.map_or_else(|| "?".to_string(), |p| p.to_string());
        let asker = p.sender_instance_id.as_deref();
        let label = caller.bridge.as_ref().map(|b| b.label.as_deref());
        let why = if let Some(label) = label.filter(|l| !self.bridged_with(id, w, *l)) {
            let with = super::outcome::with_label(label);
            Some(format!(
                "not permitted: this key is limited to sending to {name}, and cancels only the tasks sent through a bridge {with}; task {} was not",
                escape(id)
            ))
        } else if caller.capped
            && matches!(caller.role, Role::Own | Role::Agent)
            && sender.as_deref() != Some(ours.as_str())
        {
            Some(format!(
                "not permitted: pid {} runs as {name}'s own account, which serve --operator makes at most its agent: it cancels only the tasks {name} sent; task {} was sent by {sent_by}",
                shown(caller.pid),
                escape(id)
            ))
        } else if caller.role == Role::Agent && sender.as_deref() != Some(ours.as_str()) {
            Some(format!(
                "not permitted: pid {} is a process of the agent {name} serves (pid {}), which cancels only the tasks {name} sent; task {} was sent by {sent_by}",
                shown(caller.pid),
                shown(caller.agent),
                escape(id)
            ))
        } else if asker.is_some_and(|a| sender.as_deref() != Some(a)) {
            Some(format!(
                "not permitted: instance {} did not send task {}: an instance cancels only its own tasks",
                escape(asker.unwrap_or_default()),
                escape(id)
            ))
        } else {
            None
        };
        match why {
            None => Ok(()),
            Some(message) => Err(RpcError {
                code: wire::NOT_PERMITTED,
                message,
                data: Some(crate::wire::answer::ErrorData::role(caller.role.as_str())),
            }),
        }
    }

    /// A queued task leaves the queue with a receipt `cancelled`, and any
    /// approval it waited for goes with it.
    fn withdraw(&mut self, id: &str, by: &str) -> Handled {
        if let Some(p) = self.asked.remove(id) {
            self.requests.retain(|_, a| *a != p.id);
        }
        self.approved.remove(id);
        if let Err(e) = self.spool().withdraw(id, Outcome::Cancelled) {
            return handled(Handling::Error, id, Some(e.to_string()));
        }
        self.notice(
            Some(id),
            format!("cancelled by {by}: withdrawn from the queue"),
        );
        self.ended(id, Outcome::Cancelled, None, None);
        self.refresh();
        cancelled(id, "queued")
    }

    /// The turn of a processing task: an exec handler's process group is
    /// stopped as `turn/cancel` stops it (the outcome is `cancelled`, said
    /// once the handler exits); a pull agent's open task ends at once, and
    /// the agent's later `inbox/complete` hears that it was cancelled.
    fn stop_turn(&mut self, id: &str, by: &str) -> Handled {
        if let Some(r) = self.running.as_ref().filter(|r| r.task.message_id == id) {
            if let Some(o) = r.ended_by {
                let why = format!("the turn of task {} is already ending ({o})", escape(id));
                return handled(Handling::Invalid, id, Some(why));
            }
            self.end_running(Outcome::Cancelled, &format!("turn cancelled by {by}"));
            return cancelled(id, "running");
        }
        let Some(pos) = self.open.iter().position(|o| o.task.message_id == id) else {
            let why = format!(
                "task {} is being processed, but no turn of it is open here",
                escape(id)
            );
            return handled(Handling::Invalid, id, Some(why));
        };
        if let Err(e) = self.finish_turn(pos, Outcome::Cancelled, None, None) {
            return handled(Handling::Error, id, Some(e.to_string()));
        }
        self.notice(Some(id), format!("cancelled by {by}: its open turn ended"));
        self.refresh();
        cancelled(id, "open")
    }
}

/// Who cancelled, as the transcript's notice says it.
fn cancelled_by(caller: &Caller) -> String {
    let pid = caller
        .pid
        .map_or_else(String::new, |p| format!(" (pid {p})"));
    match caller.role {
        Role::Own => "this instance's own front end".into(),
        Role::Agent => format!("its agent{pid}"),
        Role::Bridge => match caller.bridge.as_ref().and_then(|b| b.label.as_deref()) {
            Some(label) => format!("the bridge key {label}"),
            None => "a bridge key".into(),
        },
        _ => format!("the operator{pid}"),
    }
}

fn handled(status: Handling, id: &str, reason: Option<String>) -> Handled {
    Handled::new(status, Some(id), reason)
}

/// The answer for the task `id`, cancelled where it `was`.
fn cancelled(id: &str, was: &str) -> Handled {
    Handled {
        was: Some(was.into()),
        ..handled(Handling::Cancelled, id, None)
    }
}

/// The answer for a task that is neither queued nor processing: set
/// aside for the operator, already ended (with its outcome), or unknown.
fn not_pending(id: &str, w: &Whereabouts) -> Handled {
    let shown = escape(id);
    let aside = |place: &str| {
        let why = format!(
            "task {shown} is {place}, set aside for the operator, not queued or running: requeue or discard it (baton inbox requeue|discard)"
        );
        handled(Handling::Invalid, id, Some(why))
    };
    let ended = |o: Option<Outcome>| {
        let why = match o {
            Some(o) => format!("task {shown} already ended {o}: there is nothing to cancel"),
            None => format!("task {shown} already ended (its receipt cannot be read back)"),
        };
        Handled {
            outcome: o.map(|o| Some(o.into())),
            ..handled(Handling::Ended, id, Some(why))
        }
    };
    match w {
        Whereabouts::Interrupted => aside("interrupted"),
        Whereabouts::Expired => aside("expired"),
        Whereabouts::Rejected(_) => aside("rejected"),
        Whereabouts::Finished(r) => ended(r.as_ref().map(|r| r.outcome)),
        Whereabouts::Queued(_) | Whereabouts::Processing | Whereabouts::Unknown => {
            let why =
                format!("no task {shown} here: it was never accepted, or its record was pruned");
            handled(Handling::Unknown, id, Some(why))
        }
    }
}

/// `baton cancel` of a stopped agent's task, in its spool, which the
/// caller opened and so holds the lock of: a queued task is withdrawn as
/// its live instance would withdraw it, and its `task.ended` recorded in
/// the spool's transcript, where a sender's wait reads it. Nothing of a
/// stopped agent runs: what is not queued gets `task/cancel`'s answer.
pub fn cancel_stopped(spool: &Spool, id: &str) -> Handled {
    let w = spool.whereabouts(id);
    if !matches!(w, Whereabouts::Queued(_)) {
        return not_pending(id, &w);
    }
    if let Err(e) = spool.withdraw(id, Outcome::Cancelled) {
        return handled(Handling::Error, id, Some(e.to_string()));
    }
    let hub = Hub::open(spool.dir());
    let pid = std::process::id();
    // Marked `stored`, as a task stored while it was stopped is: written
    // by another command, never a sign that the agent ran then.
    hub.emit(Body::Notice(Notice {
        message_id: Some(id),
        stored: true,
        text: &format!(
            "cancelled by the operator (pid {pid}) while stopped: withdrawn from the queue"
        ),
        ..Notice::default()
    }));
    let mut ended = Ended::new(id, Outcome::Cancelled, None, None);
    ended.stored = true;
    hub.emit(Body::TaskEnded(ended));
    hub.flush();
    cancelled(id, "queued")
}
