//! The view does the work of a pull agent: `/claim` takes the next task,
//! `/complete [ID] [--failed]` finishes one, `/reply TEXT` answers the task
//! claimed last and completes it (as `baton inbox complete ID --reply
//! TEXT`), and `/quit` warns once while tasks wait. Each takes the call to
//! the instance as a function, so the logic is tested without a socket.

use super::view::{Open, Role, View};
use crate::base::error::Error;
use crate::base::status::ReplyStatus;
use crate::client::ClientError;
use crate::wire::Outcome;
use crate::wire::answer::{Claimed, ClaimedTask, CompleteParams, Handled, Queue};
use crate::wire::{self, ClaimStatus, Handling, Mode};
use serde_json::Value;
use std::fmt::Display;

/// One call to the view's instance: method, params, result or why not.
pub type Call<'a, E> = &'a mut dyn FnMut(wire::Call, Value) -> Result<Value, E>;

/// An answer read as `R`; Err says why it cannot be.
fn read<R: serde::de::DeserializeOwned, E: Display>(r: Result<Value, E>) -> Result<R, Error> {
    serde_json::from_value(r.map_err(|e| Error::Transport(e.to_string()))?)
        .map_err(|e| Error::Transport(format!("the instance answered what baton cannot read: {e}")))
}

/// `/claim`: the next task, shown with its sender and body, and how to
/// answer it.
pub fn claim<E: Display>(view: &mut View, call: Call<E>) {
    let r: Claimed = match read(call(
        wire::Call::InboxClaim,
        Value::Object(serde_json::Map::new()),
    )) {
        Ok(r) => r,
        Err(e) => return view.push(Role::Refusal, e.to_string()),
    };
    for rej in &r.rejected {
        view.push(
            Role::Refusal,
            format!(
                "a bad task file went to rejected/: {}: {}",
                rej.message_id, rej.reason
            ),
        );
    }
    let reason = r.reason.unwrap_or_default();
    match (r.status.known(), r.task) {
        (Some(ClaimStatus::Claimed), Some(t)) => claimed(view, t),
        (Some(ClaimStatus::Empty), _) => {
            view.push(Role::System, "the inbox is empty: nothing to claim")
        }
        (Some(ClaimStatus::AwaitingApproval), _) => view.push(
            Role::System,
            format!(
                "{reason}: y or n, or /approve {}",
                r.message_id.unwrap_or_default()
            ),
        ),
        (Some(ClaimStatus::Busy), _) => view.push(
            Role::Refusal,
            format!("{reason} (/complete, or /reply TEXT)"),
        ),
        _ => view.push(
            Role::Refusal,
            format!("cannot claim: {}: {reason}", r.status),
        ),
    }
}

fn claimed(view: &mut View, t: ClaimedTask) {
    let from = crate::workers::turn::display_name(&t.sender);
    let replyable = t.sender.instance_id.is_some();
    let mut head = format!("claimed task {} from {from}", t.message_id);
    if let Some(ws) = t.sender.workspace.filter(|w| !w.is_empty()) {
        head.push_str(&format!(" ({ws})"));
    }
    head.push_str(&format!(", {} bytes", t.body.len()));
    if let Some(f) = t.follow_up_of {
        head.push_str(&format!(", a follow-up of {f}"));
    }
    view.push(Role::Relay, format!("{head}:\n{}", t.body));
    view.push(
        Role::System,
        if replyable {
            format!("/reply TEXT answers {from} and completes it; /complete [--failed] completes it without a reply")
        } else {
            format!("{from} cannot be replied to (no instance); /complete [--failed] completes it")
        },
    );
    view.open.retain(|o| o.id != t.message_id);
    view.open.push(Open {
        id: t.message_id,
        from,
        replyable: Some(replyable),
    });
}

/// `/complete [ID] [--failed]`: ID defaults to the task claimed last.
pub fn complete<E: Display>(rest: &str, view: &mut View, call: Call<E>) {
    let mut outcome = Outcome::Done;
    let mut id: Option<String> = None;
    for w in rest.split_whitespace() {
        match w {
            "--failed" => outcome = Outcome::Failed,
            w if !w.starts_with('-') && id.is_none() => id = Some(w.to_string()),
            w => {
                return view.push(
                    Role::Refusal,
                    format!(
                        "/complete: unexpected {}: use /complete [ID] [--failed]",
                        crate::text::sanitize::escape(w)
                    ),
                );
            }
        }
    }
    let Some(id) = id.or_else(|| view.open.last().map(|o| o.id.clone())) else {
        return view.push(
            Role::Refusal,
            "no task is open here: /claim one first, or /complete ID",
        );
    };
    let params = CompleteParams::new(&id, outcome).to_value();
    match read::<Handled, E>(call(wire::Call::InboxComplete, params)) {
        Ok(r) if r.status == Handling::Completed => {
            view.open.retain(|o| o.id != id);
            view.push(Role::System, format!("completed {id} ({outcome})"));
        }
        Ok(r) => view.push(Role::Refusal, not_completed(&id, r)),
        Err(e) => view.push(Role::Refusal, e.to_string()),
    }
}

/// Why `inbox/complete` did not complete task `id`.
fn not_completed(id: &str, r: Handled) -> String {
    let reason = r.reason.unwrap_or_default();
    format!("cannot complete {id}: {}: {reason}", r.status)
}

/// `/reply TEXT`: the `inbox/complete` params that answer the task
/// claimed last with TEXT and complete it as done; Err says why not.
pub fn reply_params(rest: &str, view: &View) -> Result<CompleteParams, Error> {
    let usage = |why: String| Err(Error::Usage(why));
    if rest.is_empty() {
        return usage("usage: /reply TEXT (answers the task claimed last and completes it)".into());
    }
    let Some(open) = view.open.last() else {
        return usage("no task is open here: /claim one first".into());
    };
    if open.replyable == Some(false) {
        return usage(format!(
            "task {} came from {}, which has no instance to reply to: /complete it",
            open.id, open.from
        ));
    }
    Ok(CompleteParams {
        reply: Some(rest.to_string()),
        ..CompleteParams::new(&open.id, Outcome::Done)
    })
}

/// What an `inbox/complete` with a reply came to, as transcript lines.
/// A delivered reply is also shown by its `relay.sent` event.
pub fn reply_outcome(id: &str, r: Result<Value, ClientError>) -> Vec<(Role, String)> {
    let r: Handled = match read(r) {
        Ok(r) => r,
        Err(e) => return vec![(Role::Refusal, format!("not completed {id}: {e}"))],
    };
    if r.status != Handling::Completed {
        return vec![(Role::Refusal, not_completed(id, r))];
    }
    let mut out = vec![(Role::System, format!("completed {id} (done)"))];
    let reply = r.reply.unwrap_or_default();
    match reply.status.parse::<ReplyStatus>() {
        Ok(ReplyStatus::Sending) => out.push((
            Role::System,
            format!("reply {} is on its way; its outcome follows", reply.id()),
        )),
        Ok(ReplyStatus::Ended(s)) if s.delivered() => {}
        Ok(ReplyStatus::Kept) => out.push((
            Role::System,
            "reply kept in the task's receipt (the sender is a plain command line)".into(),
        )),
        _ => out.push((
            Role::Refusal,
            format!(
                "reply not sent: {}: {}",
                reply.status,
                reply.reason.unwrap_or_default()
            ),
        )),
    }
    out
}

/// `/quit`: true when the view may leave. While tasks wait (queued or
/// claimed; for an attached view only a pull instance's, since a handler
/// runs the others) the first `/quit` says so and the next one leaves.
/// `status` is the instance's `control/status`, None when it did not
/// answer; `embedded`: quitting stops the instance.
pub fn quit(view: &mut View, status: Option<&Value>, embedded: bool) -> bool {
    if view.quit_armed {
        return true;
    }
    /// What of `control/status` tells whether tasks wait.
    #[derive(serde::Deserialize)]
    struct Waiting {
        mode: Option<Mode>,
        #[serde(default)]
        queue: Queue,
    }
    let Some(st) = status.and_then(|s| serde_json::from_value::<Waiting>(s.clone()).ok()) else {
        return true;
    };
    let (queued, open) = (st.queue.queued, st.queue.processing);
    let n = queued + open;
    if n == 0 || (!embedded && st.mode != Some(Mode::Pull)) {
        return true;
    }
    let after = if embedded {
        "leaving stops this instance; they stay in its spool for its next start"
    } else {
        "the instance keeps running and they stay in its inbox"
    };
    view.quit_armed = true;
    view.push(
        Role::System,
        format!(
            "{n} task{} wait{} ({queued} queued, {open} claimed); {after}; /quit again to leave",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" },
        ),
    );
    false
}
