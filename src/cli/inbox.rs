//! `baton inbox list|claim|complete`: the pull side of an instance.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry;
use crate::sanitize::{escape, escape_multiline};
use crate::text::table;
use serde_json::{Value, json};

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    let Some(action) = args.positional.first().map(String::as_str) else {
        return Err(Error::Usage(
            "inbox: say list, claim or complete (see 'baton help inbox')".into(),
        ));
    };
    let (target_arg, params) = request(args, action)?;
    let peer = target::resolve(config, target_arg.map(String::as_str))?;
    let mut conn = target::connect(config, &peer)?;
    let r = conn
        .call(&format!("inbox/{action}"), params)
        .map_err(|e| target::transport(&peer, e))?;
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
        "claim" => print_claim(&r, status, &reason, &peer),
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
            "inbox: unknown action {}: use list, claim, complete, requeue or discard",
            escape(other)
        ))),
    }
}

/// `inbox claim`: the envelope on stdout, how to reply on stderr.
fn print_claim(r: &Value, status: &str, reason: &str, peer: &registry::Peer) {
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
            emit(&escape_multiline(t["envelope"].as_str().unwrap_or("")));
            if t["sender"].get("instance_id").is_some_and(Value::is_string) {
                let id = escape(t["message_id"].as_str().unwrap_or("")).into_owned();
                eprintln!(
                    "baton: to reply: baton inbox complete {} {id} --reply TEXT, or inside the turn BATON_SOCKET={} BATON_TURN={} baton send --reply TEXT",
                    escape(&peer.manifest.name),
                    escape(&peer.manifest.socket),
                    t["turn"].as_str().unwrap_or("")
                );
            }
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
                let st = reply["status"].as_str().unwrap_or("");
                match st {
                    "sending" => emit(&format!(
                        "reply {} sent to the sender; its outcome is in 'baton log'\n",
                        escape(reply["message_id"].as_str().unwrap_or(""))
                    )),
                    _ => eprintln!(
                        "baton: reply not sent: {}: {}",
                        escape(st),
                        escape(reply["reason"].as_str().unwrap_or(""))
                    ),
                }
            }
        }
        "requeued" | "discarded" => emit(&format!(
            "{status} {}\n",
            escape(r["message_id"].as_str().unwrap_or(""))
        )),
        _ => eprintln!("baton: cannot {action}: {status}: {reason}"),
    }
}

fn print_list(r: &Value) {
    let mut rows = Vec::new();
    for (place, key) in [
        ("queued", "queued"),
        ("processing", "processing"),
        ("interrupted", "interrupted"),
        // Expired or bad tasks, which the operator may requeue or discard.
        ("rejected", "rejected"),
    ] {
        for t in r.get(key).and_then(Value::as_array).into_iter().flatten() {
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
