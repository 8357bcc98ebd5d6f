//! `baton inbox list|claim|complete|requeue|discard`: the pull side of an
//! instance. `list` reads every page of `inbox/list` and shows them as one.
//! `wait` is cli::inbox_wait.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::client::Connection;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry;
use crate::sanitize::{escape, escape_multiline};
use crate::status::{ReplyStatus, Status};
use crate::text::table;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

/// The places of `inbox/list`, each an array of task summaries.
const PLACES: [&str; 4] = ["queued", "processing", "interrupted", "rejected"];
/// How often `inbox list` starts over when the task its next page would
/// follow left the inbox meanwhile.
const LIST_ATTEMPTS: usize = 5;

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    let Some(action) = args.positional.first().map(String::as_str) else {
        return Err(Error::Usage(
            "inbox: say list, claim or complete (see 'baton help inbox')".into(),
        ));
    };
    if args.flag("timeout") {
        return Err(Error::Usage(format!(
            "inbox {}: --timeout is for inbox wait",
            escape(action)
        )));
    }
    let (target_arg, params) = request(args, action)?;
    let peer = match target::resolve(config, target_arg.map(String::as_str)) {
        Ok(peer) => peer,
        Err(Error::NoTarget(why)) if action == "list" => {
            return list_stopped(args, config, target_arg.map(String::as_str), why);
        }
        Err(e) => return Err(e),
    };
    let mut conn = target::connect(config, &peer)?;
    let r = if action == "list" {
        list_all(&mut conn, &peer)?
    } else {
        conn.call(&format!("inbox/{action}"), params)
            .map_err(|e| target::transport(&peer, e))?
    };
    let status = r.get("status").and_then(Value::as_str).unwrap_or("");
    let reason = escape(r.get("reason").and_then(Value::as_str).unwrap_or("")).into_owned();
    let code = match (action, status) {
        ("list", _)
        | ("claim", "claimed" | "empty")
        | ("complete", "completed")
        | ("requeue", "requeued")
        | ("discard", "discarded") => ExitCode::Ok,
        _ => ExitCode::Refused,
    };
    if args.flag("json") {
        emit_json(&r);
        return Ok(code);
    }
    match action {
        "list" => print_list(&r),
        "claim" => print_claim(&r, status, &reason),
        _ => print_outcome(&r, action, status, &reason),
    }
    Ok(code)
}

/// The target the command names, if any, and the call's params.
fn request<'a>(args: &'a Args, action: &str) -> Result<(Option<&'a String>, Value)> {
    let rest = &args.positional[1..];
    match action {
        "list" | "claim" => {
            if rest.len() > 1 {
                return Err(Error::Usage(format!(
                    "inbox {action}: unexpected argument {}",
                    escape(&rest[1])
                )));
            }
            Ok((rest.first(), json!({})))
        }
        "complete" | "requeue" | "discard" => {
            let (t, id) = match rest {
                [id] => (None, id),
                [t, id] => (Some(t), id),
                [] => {
                    return Err(Error::Usage(format!(
                        "inbox {action}: MESSAGE_ID is missing"
                    )));
                }
                _ => {
                    return Err(Error::Usage(format!(
                        "inbox {action}: unexpected argument {}",
                        escape(&rest[2])
                    )));
                }
            };
            let mut params = json!({"message_id": id});
            if action == "complete" {
                params["outcome"] = json!(args.value("outcome").unwrap_or("done"));
                if let Some(reply) = args.value("reply") {
                    params["reply"] = json!(reply);
                }
            }
            Ok((t, params))
        }
        other => Err(Error::Usage(format!(
            "inbox: unknown action {}: use list, claim, wait, complete, requeue or discard",
            escape(other)
        ))),
    }
}

/// Every page of `inbox/list`, as one listing: the members of a page
/// without `next`. A task listed twice (it moved while the pages were
/// read) is shown where it was seen last.
pub(super) fn list_all(conn: &mut Connection, peer: &registry::Peer) -> Result<Value> {
    for _ in 0..LIST_ATTEMPTS {
        if let Some(all) = list_pages(conn, peer)? {
            return Ok(all);
        }
    }
    Err(Error::Transport(format!(
        "{}: the inbox kept changing while it was listed; try again",
        escape(&peer.manifest.name)
    )))
}

/// The pages from the first to the last; None when the task a page was
/// to follow left the inbox meanwhile.
fn list_pages(conn: &mut Connection, peer: &registry::Peer) -> Result<Option<Value>> {
    let mut seen: Vec<Option<(&str, Value)>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut waiting = HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let params = match &after {
            Some(a) => json!({"after": a}),
            None => json!({}),
        };
        let r = conn
            .call("inbox/list", params)
            .map_err(|e| target::transport(peer, e))?;
        if r.get("status").is_some() {
            return Ok(None);
        }
        let mut n = 0;
        for place in PLACES {
            for t in r.get(place).and_then(Value::as_array).into_iter().flatten() {
                let id = t["message_id"].as_str().unwrap_or("").to_string();
                if let Some(earlier) = at.insert(id, seen.len()) {
                    seen[earlier] = None;
                }
                seen.push(Some((place, t.clone())));
                n += 1;
            }
        }
        let ids = r.get("awaiting_approval").and_then(Value::as_array);
        waiting.extend(
            ids.into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string),
        );
        match r.get("next").and_then(Value::as_str) {
            None => break,
            Some(_) if n == 0 => {
                return Err(Error::Transport(format!(
                    "{}: inbox/list answered a page without tasks that is not the last",
                    escape(&peer.manifest.name)
                )));
            }
            Some(next) => after = Some(next.to_string()),
        }
    }
    let mut all: Map<String, Value> = PLACES
        .iter()
        .map(|p| (p.to_string(), Value::Array(Vec::new())))
        .collect();
    let mut asked = Vec::new();
    for (place, t) in seen.into_iter().flatten() {
        if place == "queued"
            && t["message_id"]
                .as_str()
                .is_some_and(|id| waiting.contains(id))
        {
            asked.push(t["message_id"].clone());
        }
        if let Some(Value::Array(v)) = all.get_mut(place) {
            v.push(t);
        }
    }
    all.insert("awaiting_approval".into(), Value::Array(asked));
    Ok(Some(Value::Object(all)))
}

/// `inbox list` of a stopped agent: its spool's directories as they are,
/// in the live listing's shape. Nothing is claimed, moved or locked.
fn list_stopped(
    args: &Args,
    config: &Config,
    target_arg: Option<&str>,
    why: String,
) -> Result<ExitCode> {
    let spool = super::watch::stopped(config, target_arg, why)?;
    let listing = crate::spool::read_listing(&spool.dir)?;
    let mut r = serde_json::to_value(&listing).expect("a listing serializes");
    r["awaiting_approval"] = json!([]);
    if args.flag("json") {
        emit_json(&r);
    } else {
        print_list(&r);
    }
    Ok(ExitCode::Ok)
}

/// `inbox claim`: the envelope on stdout (it says how to reply).
fn print_claim(r: &Value, status: &str, reason: &str) {
    for rej in r
        .get("rejected")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        eprintln!(
            "baton: a bad task file went to rejected/: {}",
            escape(&rej.to_string())
        );
    }
    match status {
        "claimed" => {
            let t = &r["task"];
            // The envelope says how to reply ([to reply: ...]).
            emit(&escape_multiline(t["envelope"].as_str().unwrap_or("")));
        }
        "empty" => eprintln!("baton: the inbox is empty"),
        _ => eprintln!("baton: cannot claim: {status}: {reason}"),
    }
}

/// `inbox complete|requeue|discard`: what became of the task (and its
/// reply).
fn print_outcome(r: &Value, action: &str, status: &str, reason: &str) {
    match status {
        "completed" => {
            emit(&format!(
                "completed {} ({})\n",
                escape(r["message_id"].as_str().unwrap_or("")),
                r["outcome"].as_str().unwrap_or("")
            ));
            if let Some(reply) = r.get("reply") {
                print_reply(reply);
            }
        }
        "requeued" | "discarded" => emit(&format!(
            "{status} {}\n",
            escape(r["message_id"].as_str().unwrap_or(""))
        )),
        _ => eprintln!("baton: cannot {action}: {status}: {reason}"),
    }
}

/// Where the reply of `inbox complete --reply` went, in words: its final
/// status as the sender side knows it.
fn print_reply(reply: &Value) {
    let st = reply["status"].as_str().unwrap_or("");
    let id = escape(reply["message_id"].as_str().unwrap_or("")).into_owned();
    let to = reply["target"]["name"]
        .as_str()
        .map(|n| escape(n).into_owned())
        .unwrap_or_else(|| "the sender".into());
    match st.parse::<ReplyStatus>() {
        Ok(ReplyStatus::Ended(Status::Accepted)) => emit(&format!("reply {id} accepted by {to}\n")),
        Ok(ReplyStatus::Ended(Status::Duplicate)) => {
            emit(&format!("reply {id} was already accepted by {to}\n"))
        }
        Ok(ReplyStatus::Ended(Status::Stored)) => emit(&format!(
            "reply {id} stored for {to}, which is not running: it gets it when it starts\n"
        )),
        // No result within the I/O timeout: the send goes on.
        Ok(ReplyStatus::Sending) => emit(&format!(
            "reply {id} is still being sent to {to}; its outcome will be in 'baton log'\n"
        )),
        _ => eprintln!(
            "baton: reply not sent: {}: {}",
            escape(st),
            escape(reply["reason"].as_str().unwrap_or(""))
        ),
    }
}

fn print_list(r: &Value) {
    let mut rows = Vec::new();
    // `rejected`: expired or bad tasks, which the operator may requeue or
    // discard.
    for place in PLACES {
        for t in r.get(place).and_then(Value::as_array).into_iter().flatten() {
            let sender = &t["sender"];
            let from = sender
                .get("name")
                .and_then(Value::as_str)
                .map(|s| escape(s).into_owned())
                .unwrap_or_else(|| "(cli)".into());
            rows.push([
                place.to_string(),
                escape(t["message_id"].as_str().unwrap_or("")).into_owned(),
                from,
                sender
                    .get("pid")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "-".into()),
                t["bytes"].to_string(),
            ]);
        }
    }
    if rows.is_empty() {
        eprintln!("baton: no tasks");
    } else {
        emit(&table(
            ["PLACE", "MESSAGE_ID", "FROM", "PID", "BYTES"],
            &rows,
        ));
    }
}
