//! The view does the work of a pull agent: `/claim` takes the next task,
//! `/complete [ID] [--failed]` finishes one, `/reply TEXT` answers the task
//! claimed last and completes it (as `baton inbox complete ID --reply
//! TEXT`), and `/quit` warns once while tasks wait. Each takes the call to
//! the instance as a function, so the logic is tested without a socket.

use super::view::{Open, Role, View};
use crate::status::ReplyStatus;
use crate::wire;
use serde_json::{Value, json};

/// One call to the view's instance: method, params, result or the error
/// as text.
pub type Call<'a> = &'a mut dyn FnMut(wire::Call, Value) -> Result<Value, String>;

fn text(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// `/claim`: the next task, shown with its sender and body, and how to
/// answer it.
pub fn claim(view: &mut View, call: Call) {
    let r = match call(wire::Call::InboxClaim, json!({})) {
        Ok(r) => r,
        Err(e) => return view.push(Role::Refusal, e),
    };
    for rej in r["rejected"].as_array().into_iter().flatten() {
        view.push(
            Role::Refusal,
            format!(
                "a bad task file went to rejected/: {}: {}",
                text(rej, "message_id"),
                text(rej, "reason")
            ),
        );
    }
    let (status, reason) = (text(&r, "status"), text(&r, "reason"));
    match status.as_str() {
        "claimed" => claimed(view, &r["task"]),
        "empty" => view.push(Role::System, "the inbox is empty: nothing to claim"),
        "awaiting_approval" => view.push(
            Role::System,
            format!("{reason}: y or n, or /approve {}", text(&r, "message_id")),
        ),
        "busy" => view.push(
            Role::Refusal,
            format!("{reason} (/complete, or /reply TEXT)"),
        ),
        _ => view.push(Role::Refusal, format!("cannot claim: {status}: {reason}")),
    }
}

fn claimed(view: &mut View, t: &Value) {
    let id = text(t, "message_id");
    let sender = &t["sender"];
    let from = sender
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("(cli)")
        .to_string();
    let ws = text(sender, "workspace");
    let body = text(t, "body");
    let replyable = sender.get("instance_id").is_some_and(Value::is_string);
    let mut head = format!("claimed task {id} from {from}");
    if !ws.is_empty() {
        head.push_str(&format!(" ({ws})"));
    }
    head.push_str(&format!(", {} bytes", body.len()));
    if let Some(f) = t.get("follow_up_of").and_then(Value::as_str) {
        head.push_str(&format!(", a follow-up of {f}"));
    }
    view.push(Role::Relay, format!("{head}:\n{body}"));
    view.push(
        Role::System,
        if replyable {
            format!("/reply TEXT answers {from} and completes it; /complete [--failed] completes it without a reply")
        } else {
            format!("{from} cannot be replied to (no instance); /complete [--failed] completes it")
        },
    );
    view.open.retain(|o| o.id != id);
    view.open.push(Open {
        id,
        from,
        replyable: Some(replyable),
    });
}

/// `/complete [ID] [--failed]`: ID defaults to the task claimed last.
pub fn complete(rest: &str, view: &mut View, call: Call) {
    let mut failed = false;
    let mut id: Option<String> = None;
    for w in rest.split_whitespace() {
        match w {
            "--failed" => failed = true,
            w if !w.starts_with('-') && id.is_none() => id = Some(w.to_string()),
            w => {
                return view.push(
                    Role::Refusal,
                    format!(
                        "/complete: unexpected {}: use /complete [ID] [--failed]",
                        crate::sanitize::escape(w)
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
    let outcome = if failed { "failed" } else { "done" };
    match call(
        wire::Call::InboxComplete,
        json!({"message_id": id, "outcome": outcome}),
    ) {
        Ok(r) if r["status"] == "completed" => {
            view.open.retain(|o| o.id != id);
            view.push(Role::System, format!("completed {id} ({outcome})"));
        }
        Ok(r) => view.push(
            Role::Refusal,
            format!(
                "cannot complete {id}: {}: {}",
                text(&r, "status"),
                text(&r, "reason")
            ),
        ),
        Err(e) => view.push(Role::Refusal, e),
    }
}

/// `/reply TEXT`: the `inbox/complete` params that answer the task
/// claimed last with TEXT and complete it as done; Err says why not.
pub fn reply_params(rest: &str, view: &View) -> Result<Value, String> {
    if rest.is_empty() {
        return Err("usage: /reply TEXT (answers the task claimed last and completes it)".into());
    }
    let Some(open) = view.open.last() else {
        return Err("no task is open here: /claim one first".into());
    };
    if open.replyable == Some(false) {
        return Err(format!(
            "task {} came from {}, which has no instance to reply to: /complete it",
            open.id, open.from
        ));
    }
    Ok(json!({"message_id": open.id, "outcome": "done", "reply": rest}))
}

/// What an `inbox/complete` with a reply came to, as transcript lines.
/// A delivered reply is also shown by its `relay.sent` event.
pub fn reply_outcome(id: &str, r: Result<Value, String>) -> Vec<(Role, String)> {
    let r = match r {
        Ok(r) => r,
        Err(e) => return vec![(Role::Refusal, format!("not completed {id}: {e}"))],
    };
    if r["status"] != "completed" {
        return vec![(
            Role::Refusal,
            format!(
                "cannot complete {id}: {}: {}",
                text(&r, "status"),
                text(&r, "reason")
            ),
        )];
    }
    let mut out = vec![(Role::System, format!("completed {id} (done)"))];
    let reply = &r["reply"];
    let st = text(reply, "status");
    match st.parse::<ReplyStatus>() {
        Ok(ReplyStatus::Sending) => out.push((
            Role::System,
            format!(
                "reply {} is on its way; its outcome follows",
                text(reply, "message_id")
            ),
        )),
        Ok(ReplyStatus::Ended(s)) if s.delivered() => {}
        _ => out.push((
            Role::Refusal,
            format!("reply not sent: {st}: {}", text(reply, "reason")),
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
    let Some(st) = status else {
        return true;
    };
    let queued = st["queue"]["queued"].as_u64().unwrap_or(0);
    let open = st["queue"]["processing"].as_u64().unwrap_or(0);
    let n = queued + open;
    if n == 0 || (!embedded && st["mode"] != "pull") {
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
