//! `baton approvals [TARGET]`: the approvals that wait at an instance (a
//! task's under `--approve ask`, a tool call's an MCP host asks about),
//! read with `approval/list`; and `baton approve|deny [TARGET]
//! APPROVAL_ID…`, which answer them by id in one shot (`approval/respond`,
//! with the digest the list gives). An approval id is never given twice
//! by a spool's instances (docs/protocol.md, `approval/request`), so an
//! id the operator read names the same text when it is answered: one
//! that was decided, or asked again under a new id, no longer waits, and
//! the command says so (exit 1).

use super::approve::{self, Asked, Decision, Whole};
use super::args::Args;
use super::{On, Parsed};
use super::{emit, emit_json, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::registry::Peer;
use crate::text::sanitize::escape;
use crate::wire::Call;
use crate::wire::Handling;
use crate::wire::answer::{ApprovalList, Handled};
use crate::wire::request::{ApprovalListParams, Decided, RespondParams};
use serde_json::Value;

/// Characters of a body's first line the list shows.
const EXCERPT_CHARS: usize = 60;

/// `approval/list` at `peer`: the answer as given, and each approval.
fn list_at(
    config: &Config,
    peer: &Peer,
    params: ApprovalListParams,
) -> Result<(ApprovalList, Vec<Asked>)> {
    let (_, list) = target::call::<ApprovalList>(config, peer, Call::ApprovalList, params)?;
    let asked = list.approvals.iter().map(Asked::read).collect();
    Ok((list, asked))
}

/// The whole of what `req` (an `approval/request`'s params) shows, read
/// from `peer` for a task (`approval/list` with `full`), and only when it
/// still waits as `req` showed it (the same digest).
pub fn fetch_whole(config: &Config, peer: &Peer, req: &Asked) -> Whole {
    if req.is_tool() {
        return approve::whole_of(req);
    }
    let id = req.approval_id.as_deref().unwrap_or("");
    let params = ApprovalListParams {
        approval_id: Some(id.to_string()),
        full: Some(true),
    };
    let listed = list_at(config, peer, params).map_err(|e| e.to_string())?.1;
    match listed.into_iter().next() {
        Some(a) if a.digest == req.digest => approve::whole_of(&a),
        Some(_) => Err("it waits with other text now".into()),
        None => Err("it no longer waits".into()),
    }
}

/// `baton approvals [TARGET] [--json] [--full]`.
pub struct List {
    on: On,
    full: bool,
}

impl Parsed for List {
    fn parse(args: &Args) -> Result<List> {
        let on = On::parse(args, "approvals")?;
        Ok(List {
            on,
            full: args.flag("full"),
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let peer = target::resolve(config, self.on.target())?;
        let params = ApprovalListParams {
            approval_id: None,
            full: Some(self.full),
        };
        let (raw, waiting) = list_at(config, &peer, params)?;
        let name = escape(&peer.manifest.name);
        let text = match (waiting.is_empty(), self.full) {
            (true, _) => format!("no approvals wait at {name}\n"),
            (false, false) => {
                let rows: Vec<[String; 7]> = waiting.iter().map(row).collect();
                let head = [
                    "APPROVAL", "TASK", "FROM", "MODE", "SIZE", "LINES", "EXCERPT",
                ];
                crate::text::table(head, &rows)
            }
            (false, true) => (waiting.iter())
                .map(|a| {
                    let whole = approve::whole_of(a);
                    let id = escape(a.approval_id.as_deref().unwrap_or(""));
                    format!(
                        "approval {id} at {name}: {}{}\n",
                        approve::describe(a, Some(&whole)),
                        approve::show_whole(a, &whole)
                    )
                })
                .collect(),
        };
        super::answer(self.on.json, &raw, &text)
    }
}

/// One approval as the list shows it: its id, the task's id (or the tool
/// call's), who sent or asked, the mode (`tool` for a tool call), size,
/// lines and the first line, all escaped.
fn row(a: &Asked) -> [String; 7] {
    let s = |v: &Option<String>| escape(v.as_deref().unwrap_or("")).into_owned();
    let (from, mode, text, (bytes, lines)) = if a.is_tool() {
        let host = a.host.clone().filter(|h| !h.is_empty());
        let whole = approve::whole_of(a).unwrap_or_default();
        let tool = a.tool_name.as_deref().unwrap_or("");
        let excerpt = format!("{tool}: {}", whole.trim_start());
        let counts = (Some(whole.len() as u64), Some(whole.lines().count() as u64));
        (
            s(&host.or(Some("MCP host".into()))),
            "tool".into(),
            excerpt,
            counts,
        )
    } else {
        let excerpt = a.excerpt.clone().unwrap_or_default();
        (s(&a.from), s(&a.mode), excerpt, (a.bytes, a.lines))
    };
    let mut first = crate::wire::event_text::cut(text.lines().next().unwrap_or(""), EXCERPT_CHARS);
    let more = text.lines().nth(1).is_some() || lines.is_some_and(|n| n > 1);
    if more && !first.ends_with('…') {
        first.push_str(" …");
    }
    let num = |n: Option<u64>| n.map_or("?".into(), |n| n.to_string());
    [
        s(&a.approval_id),
        escape(a.subject()).into_owned(),
        from,
        mode,
        num(bytes),
        num(lines),
        escape(&first).into_owned(),
    ]
}

/// Whether a word is an approval id as instances give them (`ask-<n>`):
/// the first positional is TARGET unless it is one.
fn is_approval_id(word: &str) -> bool {
    word.strip_prefix("ask-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `baton approve` (`APPROVE`) or `baton deny`: `[TARGET] APPROVAL_ID…`.
pub struct Decide<const APPROVE: bool> {
    target: Option<String>,
    ids: Vec<String>,
    json: bool,
}

impl<const APPROVE: bool> Parsed for Decide<APPROVE> {
    fn parse(args: &Args) -> Result<Self> {
        let (target, ids) = match args.positional.split_first() {
            Some((first, rest)) if !is_approval_id(first) => (Some(first.clone()), rest),
            _ => (None, args.positional.as_slice()),
        };
        if ids.is_empty() {
            return Err(Error::Usage(format!(
                "{}: APPROVAL_ID is missing ('baton approvals' lists them)",
                Self::CMD
            )));
        }
        let (ids, json) = (ids.to_vec(), args.flag("json"));
        Ok(Decide { target, ids, json })
    }

    /// Answers each approval id by the digest the instance lists it
    /// with: exit 0 when each was decided, else 1 (`Refused`), each one
    /// not decided said with its reason.
    fn run(self, config: &Config) -> Result<ExitCode> {
        let (cmd, ids) = (Self::CMD, &self.ids);
        let decision = if APPROVE {
            Decision::Approve
        } else {
            Decision::Deny
        };
        let peer = target::resolve(config, self.target.as_deref())?;
        let (_, waiting) = list_at(config, &peer, ApprovalListParams::default())?;
        let name = escape(&peer.manifest.name).into_owned();
        let mut all = true;
        for id in ids {
            let found = waiting
                .iter()
                .find(|a| a.approval_id.as_deref() == Some(id));
            let (raw, h): (Value, Handled) = match found {
                Some(a) => {
                    let answer = RespondParams {
                        approval_id: id.to_string(),
                        by: Some(format!("baton {cmd}")),
                        decision: decision.into(),
                        digest: a.digest.clone(),
                    };
                    target::call(config, &peer, Call::ApprovalRespond, answer)?
                }
                None => {
                    let reason = format!("no approval {id} is waiting");
                    let v = serde_json::to_value(Decided::invalid(id, &reason))
                        .expect("an answer serializes");
                    let h = Handled {
                        approval_id: Some(id.to_string()),
                        ..Handled::new(Handling::Invalid, None, Some(reason))
                    };
                    (v, h)
                }
            };
            let decided = h.status == Handling::Approved || h.status == Handling::Denied;
            all &= decided;
            if self.json {
                emit_json(&raw);
            } else if decided {
                let what = found.map_or(String::new(), |a| {
                    let kind = if a.is_tool() { "tool call" } else { "task" };
                    format!(" ({kind} {})", escape(a.subject()))
                });
                emit(&format!("{} {}{what} at {name}\n", h.status, escape(id)));
            } else {
                eprintln!(
                    "baton: cannot {cmd} {} at {name}: {} (decided already, or asked again under a new id: 'baton approvals {name}' lists what waits)",
                    escape(id),
                    escape(&h.reason.clone().unwrap_or_else(|| h.status.to_string()))
                );
            }
        }
        Ok(if all { ExitCode::Ok } else { ExitCode::Refused })
    }
}

impl<const APPROVE: bool> Decide<APPROVE> {
    const CMD: &str = if APPROVE { "approve" } else { "deny" };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn approval_ids_are_ask_and_a_number() {
        assert!(is_approval_id("ask-1"));
        assert!(is_approval_id("ask-204"));
        assert!(!is_approval_id("ask-"));
        assert!(!is_approval_id("ask-1x"));
        assert!(!is_approval_id("srv"));
    }

    #[test]
    fn a_row_shows_the_first_line_escaped_and_marks_more() {
        let a = Asked::read(
            &json!({"approval_id": "ask-3", "message_id": "m-1", "from": "al\u{1b}",
                                    "mode": "queue", "bytes": 20, "lines": 3, "excerpt": "hi\u{7}\nthere"}),
        );
        assert_eq!(
            row(&a),
            ["ask-3", "m-1", "al\\e", "queue", "20", "3", "hi\\u{7} …"].map(String::from)
        );
        let t = Asked::read(
            &json!({"approval_id": "ask-4", "request_id": "tbxkq", "tool_name": "Bash",
                                    "description": "List", "input_preview": "ls"}),
        );
        assert_eq!(
            row(&t),
            [
                "ask-4",
                "tbxkq",
                "MCP host",
                "tool",
                "7",
                "2",
                "Bash: List …"
            ]
            .map(String::from)
        );
    }
}
