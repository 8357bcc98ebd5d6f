//! `baton inbox list|claim|complete|requeue|discard`: the pull side of an
//! instance. `list` reads every page of `inbox/list` and shows them as one.
//! `wait` is cli::inbox_wait.

use super::Parsed;
use super::args::Args;
use super::{emit, emit_json, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::base::status::{ReplyStatus, Status};
use crate::registry;
use crate::registry::lookup::KnownSpool;
use crate::spool::{self, Receipt};
use crate::text::sanitize::{escape, escape_multiline};
use crate::text::table;
use crate::wire::Said;
use crate::wire::answer::{Claimed, CompleteParams, ControlStatus, Handled, InboxPage, SendResult};
use crate::wire::request::NoParams;
use crate::wire::{Call, ClaimStatus, Handling};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The finished tasks `inbox list --all` shows: the last this many.
const FINISHED_SHOWN: usize = 100;

/// `baton inbox ACTION [TARGET] [MESSAGE_ID] [--json]`, `wait` included.
pub struct Inbox {
    target: Option<String>,
    json: bool,
    action: Action,
}

enum Action {
    List {
        all: bool,
    },
    Claim,
    Wait(Option<Duration>),
    /// `held`: no MESSAGE_ID, so the one task the agent holds.
    Complete {
        params: CompleteParams,
        held: bool,
    },
    Requeue(String),
    Discard(String),
}

impl Parsed for Inbox {
    fn parse(args: &Args) -> Result<Inbox> {
        let Some(action) = args.positional.first().map(String::as_str) else {
            return Err(Error::Usage(
                "inbox: say list, claim or complete (see 'baton help inbox')".into(),
            ));
        };
        if action != "wait" && args.flag("timeout") {
            return Err(Error::Usage(format!(
                "inbox {}: --timeout is for inbox wait",
                escape(action)
            )));
        }
        let rest = &args.positional[1..];
        // How many arguments follow the action: TARGET, and MESSAGE_ID.
        let most = match action {
            "list" | "claim" | "wait" => 1,
            "complete" | "requeue" | "discard" => 2,
            other => {
                return Err(Error::Usage(format!(
                    "inbox: unknown action {}: use list, claim, wait, complete, requeue or discard",
                    escape(other)
                )));
            }
        };
        if let Some(extra) = rest.get(most) {
            return Err(Error::Usage(format!(
                "inbox {action}: unexpected argument {}",
                escape(extra)
            )));
        }
        let (target, id) = match rest.split_last() {
            _ if most == 1 => (rest.first().cloned(), None),
            Some((id, t)) => (t.first().cloned(), Some(id.clone())),
            // The one task the agent holds, found once the target is
            // (`held`).
            None if action == "complete" => (None, None),
            None => {
                return Err(Error::Usage(format!(
                    "inbox {action}: MESSAGE_ID is missing"
                )));
            }
        };
        let action = match (action, id) {
            ("list", _) => Action::List {
                all: args.flag("all"),
            },
            ("claim", _) => Action::Claim,
            ("wait", _) => {
                for opt in ["outcome", "reply"] {
                    if args.flag(opt) {
                        return Err(Error::Usage(format!(
                            "inbox wait: --{opt} is for inbox complete"
                        )));
                    }
                }
                Action::Wait(args.seconds("inbox wait", "timeout")?)
            }
            ("complete", id) => complete(args, id)?,
            ("requeue", id) => Action::Requeue(id.unwrap_or_default()),
            (_, id) => Action::Discard(id.unwrap_or_default()),
        };
        let json = args.flag("json");
        Ok(Inbox {
            target,
            json,
            action,
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let (target, json) = (self.target.as_deref(), self.json);
        // Only `list` reads a stopped agent's spool; the others need it running.
        let peer = match self.action {
            Action::Wait(timeout) => return super::inbox_wait::run(config, target, timeout, json),
            Action::List { all } => match target::resolve_or_stopped(config, target)? {
                target::Resolved::Live(peer) => *peer,
                target::Resolved::Stopped(spool) => {
                    return list_stopped(json, all, &spool, target);
                }
            },
            _ => target::resolve(config, target)?,
        };
        let (call, handled, params) = match self.action {
            Action::List { all } => {
                let mut conn = target::connect(config, &peer)?;
                let page = target::list_all(&mut conn, &peer)?;
                let finished = match all {
                    true => {
                        let st: ControlStatus = (conn.call(Call::ControlStatus, NoParams {}))
                            .map_err(|e| target::transport(&peer, e))?;
                        spool::read_recent(Path::new(&st.spool), FINISHED_SHOWN)
                    }
                    false => Vec::new(),
                };
                return print_list(json, all, &page, &finished, target);
            }
            Action::Claim => {
                let (r, c) = target::call::<Claimed>(config, &peer, Call::InboxClaim, NoParams {})?;
                if !json {
                    print_claim(&c, &peer.manifest.name);
                }
                let ok = c.status == ClaimStatus::Claimed || c.status == ClaimStatus::Empty;
                return super::done(json, &r, ok);
            }
            Action::Complete { mut params, held } => {
                if held {
                    params.message_id = held_task(config, &peer)?;
                }
                (Call::InboxComplete, Handling::Completed, params.to_value())
            }
            Action::Requeue(id) => (Call::InboxRequeue, Handling::Requeued, task(&id)),
            Action::Discard(id) => (Call::InboxDiscard, Handling::Discarded, task(&id)),
            Action::Wait(_) => unreachable!("inbox wait ran above"),
        };
        let (r, h) = target::call::<Handled>(config, &peer, call, params)?;
        if !json {
            print_outcome(&h, call.as_str().trim_start_matches("inbox/"));
        }
        super::done(json, &r, h.status == handled)
    }
}

/// `{"message_id": id}`.
fn task(id: &str) -> Value {
    serde_json::to_value(crate::wire::request::TaskParams::new(id)).expect("a string serializes")
}

/// `inbox complete [[TARGET] MESSAGE_ID]`'s params (an empty id without
/// one).
fn complete(args: &Args, id: Option<String>) -> Result<Action> {
    let outcome = Said::spelled(args.value("outcome").unwrap_or("done"));
    let mut params = CompleteParams {
        reply: args.value("reply").map(str::to_string),
        ..CompleteParams::new(id.as_deref().unwrap_or(""), outcome)
    };
    if args.flag("reply-to-reply") {
        if params.reply.is_none() {
            return Err(Error::Usage(
                "inbox complete: --reply-to-reply sends the --reply TEXT to a task that is itself a reply, so it needs --reply".into(),
            ));
        }
        params.reply_to_reply = Some(true);
    }
    let held = id.is_none();
    Ok(Action::Complete { params, held })
}

/// `inbox complete` without MESSAGE_ID: the id of the one task `peer` is
/// processing for its agent; an error names them when it holds none or
/// several.
fn held_task(config: &Config, peer: &registry::Peer) -> Result<String> {
    let mut conn = target::connect(config, peer)?;
    let all = target::list_all(&mut conn, peer)?;
    let name = escape(&peer.manifest.name);
    let ids: Vec<&str> = all
        .processing
        .iter()
        .map(|t| t.message_id.as_str())
        .collect();
    match ids[..] {
        [one] => Ok(one.to_string()),
        [] => Err(Error::Usage(format!(
            "inbox complete: {name} holds no task (none is processing); nothing to complete"
        ))),
        _ => Err(Error::Usage(format!(
            "inbox complete: {name} holds {} tasks ({}): say which with MESSAGE_ID",
            ids.len(),
            ids.iter().map(|i| escape(i)).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `inbox list` of a stopped agent: its spool's directories as they are,
/// in the live listing's shape. Nothing is claimed, moved or locked.
fn list_stopped(
    json: bool,
    all: bool,
    spool: &KnownSpool,
    target: Option<&str>,
) -> Result<ExitCode> {
    super::watch::say_stopped(spool, false);
    let l = crate::spool::read_listing(&spool.dir)?;
    let finished = match all {
        true => spool::read_recent(&spool.dir, FINISHED_SHOWN),
        false => Vec::new(),
    };
    let page = InboxPage {
        queued: l.queued,
        processing: l.processing,
        interrupted: l.interrupted,
        rejected: l.rejected,
        ..InboxPage::default()
    };
    print_list(json, all, &page, &finished, target)
}

/// `inbox claim` of `name`'s inbox: the envelope on stdout (it says how
/// to reply).
fn print_claim(c: &Claimed, name: &str) {
    for rej in &c.rejected {
        let rej = serde_json::to_string(rej).expect("serializes");
        eprintln!("baton: a bad task file went to rejected/: {}", escape(&rej));
    }
    match (c.status.known(), &c.task) {
        // The envelope says how to reply ([to reply: ...]).
        (Some(ClaimStatus::Claimed), Some(t)) => emit(&escape_multiline(&t.envelope)),
        (Some(ClaimStatus::Empty), _) => {
            eprintln!("baton: nothing to claim: {}'s inbox is empty", escape(name))
        }
        _ => eprintln!(
            "baton: cannot claim: {}: {}",
            c.status,
            escape(c.reason.as_deref().unwrap_or(""))
        ),
    }
}

/// `inbox complete|requeue|discard`: what became of the task (and its
/// reply).
fn print_outcome(h: &Handled, action: &str) {
    let id = escape(h.message_id.as_deref().unwrap_or(""));
    match h.status.known() {
        Some(Handling::Completed) => {
            emit(&format!("completed {id} ({})\n", h.outcome_said()));
            if let Some(reply) = &h.reply {
                print_reply(reply);
            }
        }
        Some(status @ (Handling::Requeued | Handling::Discarded)) => {
            emit(&format!("{status} {id}\n"))
        }
        _ => eprintln!(
            "baton: cannot {action}: {}: {}",
            h.status,
            escape(h.reason.as_deref().unwrap_or(""))
        ),
    }
}

/// Where the reply of `inbox complete --reply` went, in words: its final
/// status as the sender side knows it.
fn print_reply(reply: &SendResult) {
    let id = escape(reply.id());
    let to = (reply.target.as_ref())
        .and_then(|t| t.name.as_deref())
        .map_or_else(|| "the sender".into(), escape);
    match reply.status.parse::<ReplyStatus>() {
        Ok(ReplyStatus::Ended(Status::Accepted)) => emit(&format!("reply {id} accepted by {to}\n")),
        Ok(ReplyStatus::Ended(Status::Duplicate)) => {
            emit(&format!("reply {id} was already accepted by {to}\n"))
        }
        Ok(ReplyStatus::Ended(Status::Stored)) => emit(&format!(
            "reply {id} stored for {to}, which is not running: it gets it when it starts\n"
        )),
        Ok(ReplyStatus::Kept) => emit(
            "reply kept in the task's receipt: the sender is a plain command line, which reads it there (send --wait, baton result)\n",
        ),
        // No result within the I/O timeout: the send goes on.
        Ok(ReplyStatus::Sending) => emit(&format!(
            "reply {id} is still being sent to {to}; its outcome will be in 'baton log'\n"
        )),
        _ => eprintln!(
            "baton: reply not sent: {}: {}",
            escape(&reply.status),
            escape(reply.reason.as_deref().unwrap_or(""))
        ),
    }
}

/// A whole inbox, as a table or (`--json`) as one page. A queued task
/// waiting for an approval is shown `awaiting approval`, and stderr names
/// the command that answers it. With `--all`, the tasks that finished
/// last follow (`finished`), each with its outcome for its place.
fn print_list(
    json: bool,
    with_finished: bool,
    all: &InboxPage,
    finished: &[Receipt],
    target: Option<&str>,
) -> Result<ExitCode> {
    if json {
        /// A finished task as `--all --json` lists it.
        #[derive(serde::Serialize)]
        struct Finished<'a> {
            finished_at: f64,
            message_id: &'a str,
            outcome: crate::wire::Outcome,
        }
        /// The page, and with `--all` the tasks that finished.
        #[derive(serde::Serialize)]
        struct Listed<'a> {
            #[serde(flatten)]
            page: &'a InboxPage,
            #[serde(skip_serializing_if = "Option::is_none")]
            finished: Option<Vec<Finished<'a>>>,
        }
        let finished = with_finished.then(|| {
            (finished.iter())
                .map(|r| Finished {
                    finished_at: r.finished_at,
                    message_id: &r.message_id,
                    outcome: r.outcome,
                })
                .collect()
        });
        // Through a `Value`, whose members are in sorted order.
        let listed = Listed {
            page: all,
            finished,
        };
        emit_json(&serde_json::to_value(listed).expect("a listing serializes"));
        return Ok(ExitCode::Ok);
    }
    // `rejected`: expired or bad tasks, which the operator may requeue or
    // discard.
    let rows: Vec<[String; 5]> = all
        .tasks()
        .map(|(place, t)| {
            let asked = place == "queued" && all.awaiting_approval.contains(&t.message_id);
            [
                if asked { "awaiting approval" } else { place }.to_string(),
                escape(&t.message_id).into_owned(),
                escape(&crate::workers::turn::display_name(&t.sender)).into_owned(),
                t.sender.pid.map_or_else(|| "-".into(), |p| p.to_string()),
                t.bytes.to_string(),
            ]
        })
        .chain(finished.iter().map(|r| {
            let dash = || "-".to_string();
            let id = escape(&r.message_id).into_owned();
            [r.outcome.to_string(), id, dash(), dash(), dash()]
        }))
        .collect();
    if rows.is_empty() {
        eprintln!("baton: no tasks");
    } else {
        emit(&table(
            ["PLACE", "MESSAGE_ID", "FROM", "PID", "BYTES"],
            &rows,
        ));
    }
    let n = all.awaiting_approval.len();
    if n > 0 {
        let tasks = if n == 1 { "task awaits" } else { "tasks await" };
        eprintln!(
            "baton: {n} {tasks} approval: answer with {}",
            super::approve::answer_with(target)
        );
    }
    Ok(ExitCode::Ok)
}
