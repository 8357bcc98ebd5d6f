//! `baton watch --approve`: the operator's answers, matched to approval
//! requests. An answer is `y`/`yes` or `n`/`no`, alone (the oldest request
//! waiting) or with a task id or a unique prefix of one (`y ID`). Answers
//! read before a request waits are kept in order, so a piped
//! `printf 'y\nn\n'` answers the first request y and the second n. `v`
//! (or `v ID`) prints the whole of what waits, escaped, before answering.
//! What a request shows is said here for `baton approvals` too.

use crate::base::error::{Error, Result};
use crate::text::sanitize::escape;
use crate::wire::event_text::who_asked;
use serde_json::Value;
use std::collections::VecDeque;

pub use crate::wire::Decision;
pub use crate::wire::answer::Asked;
pub use crate::wire::event_text::{Whole, escaped_count, show_whole, whole_of};

/// The command that answers the approvals of TARGET (as the operator
/// named it, or nothing for the instance a command without TARGET finds),
/// as `status` and `inbox list` name it beside a waiting task.
pub fn answer_with(target: Option<&str>) -> String {
    let mut with = match target {
        Some(t) => format!("baton watch --approve {}", escape(t)),
        None => "baton watch --approve".into(),
    };
    if let Some(who) = crate::base::accounts::target() {
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

/// A line that says something: an answer, or `v [ID]`, to read the whole
/// of what waits (the oldest, or the one ID starts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Answer(Answer),
    View(Option<String>),
}

/// What a line says: `y`, `yes`, `n`, `no` (any case), or `v` or `view`
/// to read the whole of what waits, then an optional task id. Blank
/// lines say nothing.
pub fn parse_line(line: &str) -> Result<Option<Line>> {
    let mut words = line.split_whitespace();
    let Some(word) = words.next() else {
        return Ok(None);
    };
    let decision = match word.to_ascii_lowercase().as_str() {
        "v" | "view" => None,
        "y" | "yes" => Some(Decision::Approve),
        "n" | "no" => Some(Decision::Deny),
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
    Ok(Some(match decision {
        Some(decision) => Line::Answer(Answer { decision, id }),
        None => Line::View(id),
    }))
}

/// A request waiting for the operator: the request's id (echoed in the
/// reply), the task's id or the tool call's (`tool`: a request an MCP
/// host relayed, `permission/ask`), the approval's id, the digest of
/// what was shown, which the reply carries back, and what it shows.
#[derive(Debug)]
pub struct Waiting {
    pub rid: Value,
    pub message_id: String,
    pub tool: bool,
    pub approval_id: String,
    pub digest: Value,
    /// What `v` prints.
    pub shown: Option<(Asked, Whole)>,
}

impl Waiting {
    /// The request `req`, whose id is `rid`, as it waits, and the whole of
    /// what it shows.
    pub fn of(rid: Value, req: Asked, whole: Whole) -> Waiting {
        Waiting {
            rid,
            message_id: req.subject().to_string(),
            tool: req.is_tool(),
            approval_id: req.approval_id.clone().unwrap_or_default(),
            digest: req.digest.clone(),
            shown: Some((req, whole)),
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
    /// Whether answers read before their requests still wait for them.
    pub fn has_early(&self) -> bool {
        !self.early.is_empty()
    }

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

    /// The one waiting request whose id starts with `prefix` (any: the
    /// oldest); `None` when none does. A prefix of more than one is an
    /// error.
    pub fn find(&self, prefix: Option<&str>) -> Result<Option<&Waiting>> {
        let p = prefix.unwrap_or("");
        let matching: Vec<&Waiting> = (self.waiting.iter())
            .filter(|w| w.message_id.starts_with(p))
            .collect();
        if matching.len() > 1 && prefix.is_some() {
            let ids: Vec<_> = matching.iter().map(|w| escape(&w.message_id)).collect();
            return Err(Error::Usage(format!(
                "{} matches more than one waiting task: {}",
                escape(p),
                ids.join(", ")
            )));
        }
        Ok(matching.first().copied())
    }

    /// The operator answered: the request it decides, or `None` when it is
    /// kept for a request still to come. An id prefix that matches more
    /// than one waiting task is an error.
    pub fn answer(&mut self, a: Answer) -> Result<Option<Decided>> {
        let id = self.find(a.id.as_deref())?.map(|w| w.approval_id.clone());
        let i = id.and_then(|id| self.waiting.iter().position(|w| w.approval_id == id));
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

/// What the operator reads before deciding: who sent the task, from
/// where, its mode, size and first lines; or for a tool call, the tool,
/// who asked, what it does, its input (all escaped); and, where the whole
/// was read (`whole`), how many of its characters are shown escaped.
pub fn describe(a: &Asked, whole: Option<&Whole>) -> String {
    let s = |v: &Option<String>| v.as_deref().map(|v| escape(v).into_owned());
    let escaped = match whole {
        Some(Ok(text)) => format!(
            "  escaped: {} characters; v shows it whole\n",
            escaped_count(text)
        ),
        Some(Err(why)) => format!("  escaped: unknown ({})\n", escape(why)),
        None => String::new(),
    };
    if a.is_tool() {
        let mut out = format!(
            "tool call {} waits for permission\n  tool:  {}\n",
            s(&a.request_id).unwrap_or_default(),
            s(&a.tool_name).unwrap_or_default()
        );
        let who = who_asked(a.host.as_deref(), a.host_pid, a.pid);
        out.push_str(&format!("  asked: by {}\n", escape(&who)));
        for (label, v) in [("what", &a.description), ("input", &a.input_preview)] {
            for l in v.as_deref().unwrap_or("").lines() {
                out.push_str(&format!("  {label}: {}\n", escape(l)));
            }
        }
        out.push_str(&escaped);
        return out;
    }
    let id = s(&a.message_id).unwrap_or_default();
    let mut out = format!("task {id} waits for approval\n");
    let from = s(&a.from).unwrap_or_else(|| "?".into());
    out.push_str(&format!("  from:  {from}"));
    if let Some(ws) = s(&a.workspace) {
        out.push_str(&format!(", workspace {ws}"));
    }
    if let Some(pid) = a.pid {
        out.push_str(&format!(", pid {pid}"));
    }
    out.push('\n');
    if let Some(mode) = s(&a.mode) {
        out.push_str(&format!("  mode:  {mode}\n"));
    }
    let lines = a.lines.unwrap_or(0);
    if let Some(bytes) = a.bytes {
        let plural = if lines == 1 { "" } else { "s" };
        out.push_str(&format!("  body:  {bytes} bytes, {lines} line{plural}\n"));
    }
    out.push_str(&escaped);
    if let Some(ex) = &a.excerpt {
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
            shown: None,
        }
    }

    fn ans(line: &str) -> Answer {
        match parse_line(line).unwrap().unwrap() {
            Line::Answer(a) => a,
            Line::View(_) => panic!("{line} is no answer"),
        }
    }

    #[test]
    fn answers_parse() {
        assert_eq!(parse_line("  ").unwrap(), None);
        assert_eq!(ans("Y").decision, Decision::Approve);
        assert_eq!(ans("no").decision, Decision::Deny);
        assert_eq!(ans("n abc").id.as_deref(), Some("abc"));
        assert!(
            parse_line("maybe")
                .unwrap_err()
                .to_string()
                .contains("type y or n")
        );
        assert!(parse_line("y a b").is_err());
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
        let d = describe(&Asked::read(&p), None);
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
        let d = describe(&Asked::read(&p), None);
        assert_eq!(
            d,
            "tool call tbxkq waits for permission\n  tool:  Bash\n  \
             asked: by claude\\u{7} (pid 8) through baton mcp (pid 9)\n  \
             what: List files\n  input: {\"command\":\"ls\\e\"}\n"
        );
    }

    #[test]
    fn v_asks_for_the_whole_text() {
        let v = |l: &str| parse_line(l).unwrap();
        assert_eq!(v("v"), Some(Line::View(None)));
        assert_eq!(v(" View ab-1 "), Some(Line::View(Some("ab-1".into()))));
        assert!(matches!(v("y"), Some(Line::Answer(_))));
        assert_eq!(v(""), None);
        assert!(parse_line("v a b").is_err());
        assert!(parse_line("vv").is_err());
    }

    #[test]
    fn escaped_characters_are_counted_but_line_ends_and_tabs_are_not() {
        assert_eq!(escaped_count("a\tb\nc\r\n\x1b[2J\u{202e}"), 3);
        assert_eq!(escaped_count("plain\n"), 0);
    }

    #[test]
    fn the_whole_body_is_shown_escaped_behind_bars_when_its_digest_matches() {
        let body = "one\n\x1b]0;x\x07two\n";
        let sha = crate::base::digest::sha256_hex(body.as_bytes());
        let p = json!({"message_id": "t-1", "body": body, "body_sha256": sha});
        let a = Asked::read(&p);
        let whole = whole_of(&a);
        assert_eq!(whole.as_deref(), Ok(body));
        let shown = show_whole(&a, &whole);
        assert_eq!(
            shown,
            "  the whole of task t-1 (14 bytes, 2 lines):\n  | one\n  | \\e]0;x\\u{7}two\n  (end of task t-1)\n"
        );
        let d = describe(&a, Some(&whole));
        assert!(
            d.contains("  escaped: 2 characters; v shows it whole\n"),
            "{d}"
        );
        let forged = json!({"message_id": "t-1", "body": "other", "body_sha256": sha});
        assert!(whole_of(&Asked::read(&forged)).is_err());
        assert!(whole_of(&Asked::read(&json!({"message_id": "t-2"}))).is_err());
    }

    #[test]
    fn v_finds_the_oldest_or_the_one_an_id_starts() {
        let mut a = Approvals::default();
        assert!(a.find(None).unwrap().is_none());
        assert!(a.request(w("r1", "abc-1")).is_none());
        assert!(a.request(w("r2", "abc-2")).is_none());
        assert_eq!(a.find(None).unwrap().unwrap().message_id, "abc-1");
        assert_eq!(a.find(Some("abc-2")).unwrap().unwrap().message_id, "abc-2");
        assert!(a.find(Some("abc")).is_err());
        assert!(a.find(Some("zz")).unwrap().is_none());
    }
}
