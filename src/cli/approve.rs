//! `baton watch --approve`: the operator's answers, matched to approval
//! requests. An answer is `y`/`yes` or `n`/`no`, alone (the oldest request
//! waiting) or with a task id or a unique prefix of one (`y ID`). Answers
//! read before a request waits are kept in order, so a piped
//! `printf 'y\nn\n'` answers the first request y and the second n.

use crate::error::{Error, Result};
use crate::event_text::who_asked;
use crate::sanitize::escape;
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;

pub use crate::wire::Decision;

/// The command that answers the approvals of TARGET (as the operator
/// named it, or nothing for the instance a command without TARGET finds),
/// as `status` and `inbox list` name it beside a waiting task.
pub fn answer_with(target: Option<&str>) -> String {
    let mut with = match target {
        Some(t) => format!("baton watch --approve {}", escape(t)),
        None => "baton watch --approve".into(),
    };
    if let Some(who) = crate::accounts::target() {
        with.push_str(&format!(" --user {}", escape(&who.name)));
    }
    with
}

/// One line the operator typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    /// A task id, or the start of one.
    pub id: Option<String>,
}

/// What the answers say: `y`, `yes`, `n`, `no` (any case), then an
/// optional task id. Blank lines say nothing.
pub fn parse_answer(line: &str) -> Result<Option<Answer>> {
    let mut words = line.split_whitespace();
    let Some(word) = words.next() else {
        return Ok(None);
    };
    let decision = match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Decision::Approve,
        "n" | "no" => Decision::Deny,
        _ => {
            return Err(Error::Usage(format!(
                "not an answer: {}: type y or n, or y ID / n ID",
                escape(line.trim())
            )));
        }
    };
    let id = words.next().map(str::to_string);
    if let Some(extra) = words.next() {
        return Err(Error::Usage(format!(
            "not an answer: {}: one task id at most ({} is one too many)",
            escape(line.trim()),
            escape(extra)
        )));
    }
    Ok(Some(Answer { decision, id }))
}

/// A request waiting for the operator: the request's id (echoed in the
/// reply), the task's id or the tool call's (`tool`: a request an MCP
/// host relayed, `permission/ask`), the approval's id, and the digest of
/// what was shown, which the reply carries back.
#[derive(Debug)]
pub struct Waiting {
    pub rid: Value,
    pub message_id: String,
    pub tool: bool,
    pub approval_id: String,
    pub digest: Value,
}

impl Waiting {
    /// The request `req`, whose id is `rid`, as it waits.
    pub fn of(rid: Value, req: Request) -> Waiting {
        let tool = req.message_id.is_none();
        let id = if tool { req.request_id } else { req.message_id };
        Waiting {
            rid,
            message_id: id.unwrap_or_default(),
            tool,
            approval_id: req.approval_id.unwrap_or_default(),
            digest: req.digest,
        }
    }
}

/// A decision to send, and the request it answers.
pub type Decided = (Waiting, Decision);

/// The requests that wait and the answers that came first.
#[derive(Default)]
pub struct Approvals {
    waiting: VecDeque<Waiting>,
    early: VecDeque<Answer>,
}

impl Approvals {
    /// A request arrived: an answer read before it decides it at once (one
    /// naming its id first, else the oldest without an id); otherwise it
    /// waits.
    pub fn request(&mut self, w: Waiting) -> Option<Decided> {
        let pos = self
            .early
            .iter()
            .position(|a| a.id.as_deref().is_some_and(|p| w.message_id.starts_with(p)))
            .or_else(|| self.early.iter().position(|a| a.id.is_none()));
        if let Some(a) = pos.and_then(|i| self.early.remove(i)) {
            return Some((w, a.decision));
        }
        self.waiting.push_back(w);
        None
    }

    /// The operator answered: the request it decides, or `None` when it is
    /// kept for a request still to come. An id prefix that matches more
    /// than one waiting task is an error.
    pub fn answer(&mut self, a: Answer) -> Result<Option<Decided>> {
        let p = a.id.as_deref().unwrap_or("");
        let ids: Vec<_> = (self.waiting.iter())
            .filter(|w| w.message_id.starts_with(p))
            .map(|w| escape(&w.message_id))
            .collect();
        if ids.len() > 1 && a.id.is_some() {
            return Err(Error::Usage(format!(
                "{} matches more than one waiting task: {}",
                escape(p),
                ids.join(", ")
            )));
        }
        let i = self
            .waiting
            .iter()
            .position(|w| w.message_id.starts_with(p));
        if let Some(w) = i.and_then(|i| self.waiting.remove(i)) {
            return Ok(Some((w, a.decision)));
        }
        self.early.push_back(a);
        Ok(None)
    }

    /// An approval was decided elsewhere (another controller, the view):
    /// its request no longer waits here.
    pub fn resolved(&mut self, approval_id: &str) {
        self.waiting.retain(|w| w.approval_id != approval_id);
    }

    /// The oldest request still waiting, for the prompt: its id, and
    /// whether it is a tool call.
    pub fn next_waiting(&self) -> Option<(&str, bool)> {
        self.waiting
            .front()
            .map(|w| (w.message_id.as_str(), w.tool))
    }
}

/// The params of an `approval/request` (docs/protocol.md): a task's
/// (its id, who sent it, its mode, size and first lines) or a tool call's
/// that an MCP host relayed (`request_id`, the tool, who asked, what it
/// does and its input), with the approval's id and the digest of what
/// they show. One with a member of another type reads as empty.
#[derive(Default, Deserialize)]
#[serde(default)]
pub struct Request {
    message_id: Option<String>,
    from: Option<String>,
    workspace: Option<String>,
    pid: Option<u64>,
    mode: Option<String>,
    bytes: Option<u64>,
    lines: Option<u64>,
    excerpt: Option<String>,
    request_id: Option<String>,
    tool_name: Option<String>,
    host: Option<String>,
    host_pid: Option<u64>,
    description: Option<String>,
    input_preview: Option<String>,
    approval_id: Option<String>,
    digest: Value,
}

impl Request {
    /// An `approval/request`'s `params`.
    pub fn read(params: &Value) -> Request {
        Request::deserialize(params).unwrap_or_default()
    }

    /// What the operator reads before deciding: who sent the task, from
    /// where, its mode, size and first lines; or for a tool call, the
    /// tool, who asked, what it does, its input (all escaped).
    pub fn describe(&self) -> String {
        let s = |v: &Option<String>| v.as_deref().map(|v| escape(v).into_owned());
        if self.message_id.is_none() && self.request_id.is_some() {
            let mut out = format!(
                "tool call {} waits for permission\n  tool:  {}\n",
                s(&self.request_id).unwrap_or_default(),
                s(&self.tool_name).unwrap_or_default()
            );
            let who = who_asked(self.host.as_deref(), self.host_pid, self.pid);
            out.push_str(&format!("  asked: by {}\n", escape(&who)));
            for (label, v) in [("what", &self.description), ("input", &self.input_preview)] {
                for l in v.as_deref().unwrap_or("").lines() {
                    out.push_str(&format!("  {label}: {}\n", escape(l)));
                }
            }
            return out;
        }
        let id = s(&self.message_id).unwrap_or_default();
        let mut out = format!("task {id} waits for approval\n");
        let from = s(&self.from).unwrap_or_else(|| "?".into());
        out.push_str(&format!("  from:  {from}"));
        if let Some(ws) = s(&self.workspace) {
            out.push_str(&format!(", workspace {ws}"));
        }
        if let Some(pid) = self.pid {
            out.push_str(&format!(", pid {pid}"));
        }
        out.push('\n');
        if let Some(mode) = s(&self.mode) {
            out.push_str(&format!("  mode:  {mode}\n"));
        }
        let lines = self.lines.unwrap_or(0);
        if let Some(bytes) = self.bytes {
            let plural = if lines == 1 { "" } else { "s" };
            out.push_str(&format!("  body:  {bytes} bytes, {lines} line{plural}\n"));
        }
        if let Some(ex) = &self.excerpt {
            let shown = ex.lines().count() as u64;
            for l in ex.lines() {
                out.push_str(&format!("  | {}\n", escape(l)));
            }
            if lines > shown {
                out.push_str(&format!("  | … {} more lines\n", lines - shown));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn w(rid: &str, id: &str) -> Waiting {
        Waiting {
            rid: json!(rid),
            message_id: id.into(),
            tool: false,
            approval_id: format!("ask-{id}"),
            digest: json!(format!("digest of {id}")),
        }
    }

    fn ans(line: &str) -> Answer {
        parse_answer(line).unwrap().unwrap()
    }

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer("  ").unwrap(), None);
        assert_eq!(ans("Y").decision, Decision::Approve);
        assert_eq!(ans("no").decision, Decision::Deny);
        assert_eq!(ans("n abc").id.as_deref(), Some("abc"));
        assert!(
            parse_answer("maybe")
                .unwrap_err()
                .to_string()
                .contains("type y or n")
        );
        assert!(parse_answer("y a b").is_err());
    }

    #[test]
    fn early_answers_apply_in_order() {
        let mut a = Approvals::default();
        assert!(a.answer(ans("y")).unwrap().is_none());
        assert!(a.answer(ans("no")).unwrap().is_none());
        let (w1, d1) = a.request(w("approval-1", "t-1")).unwrap();
        assert_eq!((w1.message_id.as_str(), d1), ("t-1", Decision::Approve));
        let (w2, d2) = a.request(w("approval-2", "t-2")).unwrap();
        assert_eq!((w2.message_id.as_str(), d2), ("t-2", Decision::Deny));
        assert!(a.request(w("approval-3", "t-3")).is_none());
        assert_eq!(a.next_waiting(), Some(("t-3", false)));
    }

    #[test]
    fn answers_by_id_and_prefix() {
        let mut a = Approvals::default();
        assert!(a.request(w("r1", "abc-1")).is_none());
        assert!(a.request(w("r2", "abc-2")).is_none());
        assert!(
            a.answer(ans("y abc"))
                .unwrap_err()
                .to_string()
                .contains("more than one")
        );
        let (w2, d) = a.answer(ans("n abc-2")).unwrap().unwrap();
        assert_eq!((w2.rid, d), (json!("r2"), Decision::Deny));
        assert_eq!(w2.digest, json!("digest of abc-2"));
        // An id not waiting yet is kept for its request.
        assert!(a.answer(ans("y zz")).unwrap().is_none());
        assert!(a.request(w("r3", "other")).is_none());
        let (_, d) = a.request(w("r4", "zz-9")).unwrap();
        assert_eq!(d, Decision::Approve);
        a.resolved("ask-abc-1");
        a.resolved("ask-other");
        assert_eq!(a.next_waiting(), None);
    }

    #[test]
    fn describe_shows_context_escaped() {
        let p = json!({"message_id": "t-1", "from": "alice", "workspace": "/w\x1b", "pid": 7,
                       "mode": "queue", "bytes": 30, "lines": 7, "excerpt": "a\nb\x07"});
        let d = Request::read(&p).describe();
        assert!(d.contains("from:  alice, workspace /w\\e, pid 7"), "{d}");
        assert!(d.contains("body:  30 bytes, 7 lines"), "{d}");
        assert!(
            d.contains("  | a\n  | b\\u{7}\n  | … 5 more lines\n"),
            "{d}"
        );
    }

    #[test]
    fn a_tool_call_shows_the_tool_and_its_input_escaped() {
        let p = json!({"request_id": "tbxkq", "tool_name": "Bash", "pid": 9,
                       "host": "claude\x07", "host_pid": 8,
                       "description": "List files", "input_preview": "{\"command\":\"ls\x1b\"}"});
        let d = Request::read(&p).describe();
        assert_eq!(
            d,
            "tool call tbxkq waits for permission\n  tool:  Bash\n  \
             asked: by claude\\u{7} (pid 8) through baton mcp (pid 9)\n  \
             what: List files\n  input: {\"command\":\"ls\\e\"}\n"
        );
    }
}
