//! The approvals that wait at the view's instance: their whole text read
//! once (`approval/list` with `full`) for the counts the prompt shows,
//! `v` and `/body [ID]`, and `y`, `n`, `/approve [ID]` and `/deny [ID]`,
//! which answer by the approval's id and digest (`approval/respond`), as
//! `baton approve` and `baton deny` do, and say what came of it in the
//! same words. The list itself is the view's, kept from the events
//! (`View::waiting`).

use super::Control;
use super::view::{self, Role, View};
use crate::wire::answer::{ApprovalList, Asked, Handled};
use crate::wire::event_text::{escaped_count, show_whole, whole_of};
use crate::wire::request::{ApprovalListParams, RespondParams};
use crate::wire::{Call, Decision, Handling};
use serde_json::Value;
use std::collections::HashSet;

/// The whole of what each approval that waits shows, read once from the
/// instance (`approval/list`): how many of its characters are shown
/// escaped, and its lines, for the prompt.
pub(super) fn count_escaped(ctl: &mut Control, view: &mut View, read: &mut HashSet<String>) {
    if view.waiting.iter().all(|w| read.contains(&w.approval_id)) {
        return;
    }
    let Ok(list) = ctl.call::<ApprovalList>(Call::ApprovalList, full_list(None)) else {
        return;
    };
    let listed: Vec<Asked> = list.approvals.iter().map(Asked::read).collect();
    for w in view.waiting.iter_mut() {
        if read.contains(&w.approval_id) {
            continue;
        }
        let a = listed.iter().find(|a| {
            a.approval_id.as_deref() == Some(&w.approval_id) && a.digest == w.digest.as_str()
        });
        // Read once it was: one not listed yet is asked about again.
        if let Some(Ok(text)) = a.map(whole_of) {
            w.escaped = Some(escaped_count(&text));
            w.lines = Some(text.lines().count() as u64);
            read.insert(w.approval_id.clone());
        }
    }
}

/// `approval/list`'s params for the whole of what waits (`only` that one).
fn full_list(only: Option<String>) -> ApprovalListParams {
    ApprovalListParams {
        approval_id: only,
        full: Some(true),
    }
}

/// The waiting approval `id` names (the approval's own id, or a task's
/// or a tool call's id as shown; empty: the oldest), as the view has it.
fn waiting_as(view: &View, id: &str) -> Result<view::Waiting, String> {
    let found = match id {
        "" => view.waiting.first(),
        id => (view.waiting.iter())
            .find(|w| w.approval_id == id)
            .or_else(|| view.waiting.iter().find(|w| w.id == id)),
    };
    match (found, id) {
        (Some(w), _) => Ok(w.clone()),
        (None, "") => Err("no task is waiting for approval".into()),
        (None, id) => Err(format!("nothing waits for approval as {id}")),
    }
}

/// The approval `id` names as the instance lists it now, for one the
/// view has not heard of (its event came before the transcript the view
/// replayed); None when nothing waits as `id`.
fn listed_as(ctl: &mut Control, id: &str) -> crate::base::error::Result<Option<view::Waiting>> {
    let list = ctl.call::<ApprovalList>(Call::ApprovalList, ApprovalListParams::default())?;
    let listed: Vec<Asked> = list.approvals.iter().map(Asked::read).collect();
    let found = (listed.iter())
        .find(|a| a.approval_id.as_deref() == Some(id))
        .or_else(|| listed.iter().find(|a| a.subject() == id));
    Ok(found.map(view::Waiting::of))
}

/// `v` and `/body [ID]`: the whole of what an approval that waits shows,
/// as the instance has it now and only as its request showed it (the
/// same digest), escaped, each line behind `| `.
pub(super) fn show_body(view: &mut View, ctl: &mut Control, id: &str) {
    let w = match waiting_as(view, id) {
        Ok(w) => w,
        Err(why) => return view.push(Role::Refusal, why),
    };
    let params = full_list(Some(w.approval_id.clone()));
    let listed = match ctl.call::<ApprovalList>(Call::ApprovalList, params) {
        Ok(l) => l.approvals.iter().map(Asked::read).next(),
        Err(e) => return view.push(Role::Refusal, e.to_string()),
    };
    match listed {
        Some(a) if a.digest == w.digest.as_str() => {
            let text = show_whole(&a, &whole_of(&a));
            view.push(Role::System, text.trim().to_string());
        }
        Some(_) => view.push(Role::Refusal, "it waits with other text now"),
        None => view.push(Role::Refusal, "it no longer waits"),
    }
}

/// `y`, `n`, `/approve [ID]` and `/deny [ID]`: answers the approval `id`
/// names (its own id, or a task's or a tool call's id as shown; empty:
/// the oldest) with `approval/respond`, by the approval's id and the
/// digest of what was shown, or, for one the view did not see asked, of
/// what `approval/list` lists, as `baton approve` does. Says what came of
/// it as `baton approve` does: `approved ask-1 (task ID) at NAME`, or why
/// not. Once answered it no longer waits here, whatever the answer: a
/// refusal means this view cannot answer it.
pub(super) fn decide(view: &mut View, ctl: &mut Control, id: &str, decision: Decision) {
    let name = view.header.name.clone();
    let not_waiting = |id: &str| {
        format!(
            "cannot {decision} {id} at {name}: no approval {id} is waiting (decided already, or asked again under a new id)"
        )
    };
    let w = match waiting_as(view, id) {
        Ok(w) => w,
        // Nothing to answer is no refusal.
        Err(why) if id.is_empty() => return view.push(Role::System, why),
        Err(_) => match listed_as(ctl, id) {
            Ok(Some(w)) => w,
            Ok(None) => return view.push(Role::Refusal, not_waiting(id)),
            Err(e) => return view.push(Role::Refusal, e.to_string()),
        },
    };
    let answer = RespondParams {
        approval_id: w.approval_id.clone(),
        by: Some("view".into()),
        decision: decision.into(),
        digest: Value::String(w.digest.clone()),
    };
    let r = ctl.call::<Handled>(Call::ApprovalRespond, answer);
    if r.is_ok() {
        view.waiting.retain(|x| x.approval_id != w.approval_id);
    }
    let kind = w.tool.as_ref().map_or("task", |_| "tool call");
    let aid = &w.approval_id;
    match r {
        Ok(r) if r.status == Handling::Approved || r.status == Handling::Denied => view.push(
            Role::System,
            format!("{} {aid} ({kind} {}) at {name}", r.status, w.id),
        ),
        Ok(r) => {
            let why = r.reason.unwrap_or_else(|| r.status.to_string());
            view.push(
                Role::Refusal,
                format!("cannot {decision} {aid} at {name}: {why}"),
            )
        }
        Err(e) => view.push(Role::Refusal, e.to_string()),
    }
}
