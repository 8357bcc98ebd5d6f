//! What an event says, in words: the one place that writes the text of
//! each kind for every face that shows it (the line of `baton log` and
//! `baton watch`, the view's transcript entry, what `baton mcp` tells its
//! host) and of an approval that waits. The text holds the peers' words as
//! they came: each face escapes it where it meets a terminal.

use crate::base::status::Status;
use crate::text::sanitize::{escape, escape_multiline, is_unsafe};
pub use crate::wire::answer::Asked;
use crate::wire::{Event, EventKind as K, EventMode, TaskMode};

/// How many lines of a body an approval request carries, or the view
/// shows when the request has none, and how many characters of each.
pub const EXCERPT_LINES: usize = 5;
const EXCERPT_WIDTH: usize = 200;

/// Whose words an entry of the view holds (its mark and colour say it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// What the operator typed.
    Local,
    /// A task relayed from another agent.
    Relay,
    /// A handler's output.
    Output,
    /// Notices from baton itself.
    System,
    /// Refusals, errors.
    Refusal,
}

/// What one event says.
pub struct Said {
    /// What `baton log` and `baton watch` print after its time and kind.
    pub line: String,
    /// The view's entry. None for a denial, which ends a wait, and for a
    /// task or tool call that waits, which the view tells with what it
    /// knows of it (`approval_text`).
    pub entry: Option<(Role, String)>,
    /// What `baton mcp` tells its host in a log line.
    pub to_host: Option<String>,
}

impl Said {
    fn new(line: String, role: Role, entry: impl Into<String>) -> Said {
        Said {
            line,
            entry: Some((role, entry.into())),
            to_host: None,
        }
    }

    fn line(line: String) -> Said {
        Said {
            line,
            entry: None,
            to_host: None,
        }
    }
}

/// A notice of baton's own in the view.
fn system(line: String, entry: impl std::fmt::Display) -> Said {
    Said::new(line, Role::System, entry.to_string())
}

/// An optional string member, or empty.
fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// An optional name as spelled, or empty.
pub fn named<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// A string member that is there and not empty.
fn given(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

/// `f` of a member the event has, else nothing.
fn part<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(String::new, f)
}

fn outcome(ev: &Event) -> &'static str {
    ev.outcome.map_or("", |o| o.as_str())
}

/// A number (a pid, a queue position) as the protocol writes it, or `null`.
pub fn num(n: Option<impl std::fmt::Display>) -> String {
    n.map_or_else(|| "null".into(), |n| n.to_string())
}

/// What a resend of a task already kept here reads as (a
/// `message.rejected` of status `duplicate`).
pub const RESENT: &str = "already accepted (duplicate): nothing stored again";

/// What `ev` says, for each face.
pub fn said(ev: &Event) -> Said {
    let Some(kind) = ev.kind else {
        // A kind this version does not know: its members, as JSON.
        let members = ev.unknown.as_ref().map(|u| &u.members);
        let json = members.map_or_else(|| "{}".into(), |m| serde_json::to_string(m).expect("JSON"));
        return system(json, ev.kind_name());
    };
    let (id, from) = (ev.id(), ev.sender().unwrap_or(""));
    let kind_id = || format!("{kind} {id}");
    let decision = ev.decision.map_or("", |d| d.as_str());
    let (rid, text) = (s(&ev.request_id), s(&ev.text));
    match kind {
        K::InstanceStarted => started(ev),
        K::MessageAccepted => accepted(ev, id, from),
        K::LocalInput => local_input(ev, id),
        K::TaskExpired => Said::new(
            format!("{id}: {text}"),
            Role::Refusal,
            format!("task {id} expired: {text}"),
        ),
        K::MessageRejected
            if ev.status.as_ref().and_then(|st| st.known()) == Some(&Status::Duplicate) =>
        {
            // A resend of a task kept here (its sender waits again, or
            // retried): a status, not a refusal to alarm anyone with.
            Said::new(
                format!("{id} from {from} (pid {}): {RESENT}", num(ev.pid)),
                Role::System,
                format!("task {id} from {from} sent again: {RESENT}"),
            )
        }
        K::MessageRejected => {
            let why = format!("{}: {}", named(&ev.status), s(&ev.reason));
            Said::new(
                format!("{id} from {from} (pid {}): {why}", num(ev.pid)),
                Role::Refusal,
                format!("refused task {id} from {from}: {why}"),
            )
        }
        K::TaskClaimed => {
            let of = part(ev.follow_up_of.as_ref(), |of| {
                format!(", a follow-up of {of}")
            });
            system(format!("{id} from {from}{of}"), kind_id())
        }
        K::TaskTyped => system(
            format!("{id} typed into tmux pane {}", s(&ev.tmux_pane)),
            kind,
        ),
        K::TaskDenied => Said::line(format!("{id} by {}", by(ev))),
        K::TaskRejected => system(format!("{id}: {}", s(&ev.reason)), kind_id()),
        K::TaskRequeued => system(format!("{id} is queued again (inbox requeue)"), kind_id()),
        K::TaskEnded => system(task_ended(ev, id), kind),
        K::TaskDiscarded => system(format!("{id} was discarded (inbox discard)"), kind_id()),
        K::TurnStarted => system(
            format!("{id} from {from} (handler pid {})", num(ev.pid)),
            format!("turn {id} started"),
        ),
        K::TurnOutput => turn_output(ev, id),
        K::TurnFinished => turn_finished(ev, id),
        K::RelaySent => relay_sent(ev, id),
        K::StateChanged => system(named(&ev.state), format!("state: {}", named(&ev.state))),
        K::ApprovalRequested => Said::line(approval_requested(ev, id, from)),
        K::ApprovalResolved => system(
            format!("{id} {decision} by {}", by(ev)),
            format!("task {id}: {decision} ({})", s(&ev.by)),
        ),
        K::PermissionRequested => Said::line(format!(
            "tool call {rid} ({}) asked by baton mcp (pid {}): {}",
            s(&ev.tool_name),
            num(ev.pid),
            s(&ev.description)
        )),
        K::PermissionResolved => system(
            format!("tool call {rid} {decision} by {}", by(ev)),
            format!("tool call {rid}: {decision} ({})", s(&ev.by)),
        ),
        K::Notice if id.is_empty() => system(text.into(), text),
        K::Notice => system(format!("{id}: {text}"), text),
    }
}

fn started(ev: &Event) -> Said {
    let (name, ws) = (s(&ev.name), s(&ev.workspace));
    let line = format!(
        "{name} ({}) pid {} in {ws}: {} mode, approve {}, {}",
        s(&ev.instance_id),
        num(ev.pid),
        named(&ev.mode),
        ev.approve.map_or("", |a| a.as_str()),
        named(&ev.state)
    );
    system(line, format!("{name} started in {ws}"))
}

fn local_input(ev: &Event, id: &str) -> Said {
    let body = s(&ev.body);
    if ev.noted {
        let entry = format!("{body}\n(noted: this instance has no --exec handler)");
        return Said::new(
            format!("noted (no --exec handler): {body}"),
            Role::Local,
            entry,
        );
    }
    let line = format!("{id} queued at position {}: {body}", num(ev.queue_position));
    Said::new(line, Role::Local, body)
}

/// Who decided on an approval: `watch (pid 1234)`.
fn by(ev: &Event) -> String {
    decided_by(s(&ev.by), ev.by_pid)
}

/// A decider as a log line says it: the kind of client, and the pid of
/// its connection when known.
pub fn decided_by(kind: &str, pid: Option<impl std::fmt::Display>) -> String {
    format!("{kind}{}", part(pid, |p| format!(" (pid {p})")))
}

fn accepted(ev: &Event, id: &str, from: &str) -> Said {
    let (pid, at) = (num(ev.pid), num(ev.queue_position));
    let steer = (ev.mode.as_ref()).is_some_and(|m| *m == EventMode::Task(TaskMode::Steer));
    let steer = if steer { ", steer" } else { "" };
    let stored = if ev.stored {
        ", stored while the instance was stopped"
    } else {
        ""
    };
    let ws = part(given(s(&ev.workspace)), |w| format!(", {w}"));
    let entry = format!("task {id} from {from} (pid {pid}{ws}):\n{}", s(&ev.body));
    Said {
        line: format!("{id} from {from} (pid {pid}), queue position {at}{steer}{stored}"),
        entry: Some((Role::Relay, entry)),
        to_host: Some(task_news(ev.sender().unwrap_or("?"), id, "arrived")),
    }
}

/// What `baton mcp` tells its host of a task that `arrived`, or `waits`
/// from before the session began.
pub fn task_news(from: &str, id: &str, verb: &str) -> String {
    format!("a task from {from} {verb} ({id}); call check_inbox to take it")
}

fn task_ended(ev: &Event, id: &str) -> String {
    let reply = part(ev.reply.as_ref(), |r| {
        let bytes = r.body.len();
        match &r.message_id {
            Some(rid) => format!(", reply {rid} ({bytes} bytes)"),
            None => format!(", reply kept in the receipt ({bytes} bytes)"),
        }
    });
    format!("{id} {}{reply}", outcome(ev))
}

fn approval_requested(ev: &Event, id: &str, from: &str) -> String {
    let ws = part(given(s(&ev.workspace)), |w| format!(" in {w}"));
    let mode = part(ev.mode.as_ref(), |m| format!(", {m}"));
    let bytes = part(ev.bytes, |b| format!(", {b} bytes"));
    format!("{id} from {from}{ws}{mode}{bytes} waits for approval")
}

/// `turn.output`: after a note of what was dropped, the text, which keeps
/// its lines.
fn turn_output(ev: &Event, id: &str) -> Said {
    let text = s(&ev.text);
    let dropped = ev
        .dropped
        .map(|n| format!("[{n} bytes dropped; the tail follows]"));
    let (line_note, entry_note) = match &dropped {
        Some(d) => (format!("{d} "), format!("{d}\n")),
        None => Default::default(),
    };
    let line = format!(
        "{id} {}: {line_note}{}",
        named(&ev.stream),
        text.trim_end_matches('\n')
    );
    let entry = format!("{entry_note}{}", text.strip_suffix('\n').unwrap_or(text));
    Said::new(line, Role::Output, entry)
}

fn turn_finished(ev: &Event, id: &str) -> Said {
    let outcome = outcome(ev);
    let exit = part(ev.exit_code, |c| format!(", exit {c}"));
    let signal = part(ev.handler.signal, |sig| format!(", signal {sig}"));
    let took = part(ev.duration_ms, |ms| {
        format!(", {:.3} s", ms as f64 / 1000.0)
    });
    let error = part(given(s(&ev.error)), |e| format!(": {e}"));
    let line = format!("{id} {outcome}{exit}{signal}{took}{error}");
    Said::new(line, Role::System, format!("turn {id} {outcome}{exit}"))
}

/// `relay.sent`: where the task went, or why it did not.
fn relay_sent(ev: &Event, id: &str) -> Said {
    let to = ev.target.as_ref().and_then(|t| t.name.as_deref());
    let (status, reason) = (named(&ev.status), s(&ev.reason));
    let why = part(given(reason), |r| format!(": {r}"));
    let of = part(ev.reply_of.as_ref(), |o| format!(" (reply to {o})"));
    let line = format!("{id} to {}: {status}{why}{of}", to.unwrap_or("?"));
    let known = ev.status.as_ref().and_then(crate::wire::Said::known);
    if known.is_some_and(|s| s.delivered()) {
        let at = part(ev.queue_position, |p| format!(" at position {p}"));
        let entry = format!("sent {id} to {}: {status}{at}", to.unwrap_or(""));
        return Said::new(line, Role::System, entry);
    }
    let to = part(to.and_then(given), |t| format!(" to {t}"));
    let entry = format!("not sent {id}{to}: {status}: {reason}{}", candidates(ev));
    Said::new(line, Role::Refusal, entry)
}

/// The candidates a `no_target` names, with the ids `/send` takes (the
/// instance itself is never among them).
fn candidates(ev: &Event) -> String {
    match ev.candidates.as_deref() {
        None => String::new(),
        Some([]) => "; no other live instances".into(),
        Some(list) => {
            let names: Vec<String> = (list.iter())
                .map(|p| format!("{} ({})", s(&p.name), s(&p.instance_id)))
                .collect();
            format!("; candidates: {}", names.join(", "))
        }
    }
}

/// Who asked for a tool call: the host's name and pid, and the connection
/// it asked through (a `permission.requested` event's `host`, `host_pid`
/// and `pid`, or its `approval/request`'s).
pub fn who_asked(host: Option<&str>, host_pid: Option<u64>, pid: Option<u64>) -> String {
    let host = host.and_then(given).unwrap_or("an unnamed MCP host");
    match (host_pid, pid) {
        (Some(h), Some(p)) => format!("{host} (pid {h}) through baton mcp (pid {p})"),
        (Some(h), None) => format!("{host} (pid {h})"),
        (None, Some(p)) => format!("{host}, through a connection of pid {p}"),
        (None, None) => host.to_string(),
    }
}

/// A task waiting for an approval: who sent it and what it says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    pub id: String,
    pub from: String,
    pub workspace: String,
    pub mode: String,
    /// The body's first lines.
    pub excerpt: String,
    pub bytes: Option<u64>,
    /// How many lines the body has, where the event says.
    pub lines: Option<u64>,
    /// How many characters of the whole body (a tool call's description
    /// and input) a terminal is shown escaped (`escaped_count`), once the
    /// whole was read (`approval/list`).
    pub escaped: Option<usize>,
    /// For a tool call an MCP host relayed (`permission.requested`): the
    /// tool; `id` is then its request id.
    pub tool: Option<String>,
    /// The approval's id and the digest of what it shows: an answer names both.
    pub approval_id: String,
    pub digest: String,
}

impl Waiting {
    /// An approval as its request, its event or `approval/list` gives it.
    pub fn of(a: &Asked) -> Waiting {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        let asked = Waiting {
            id: a.subject().to_string(),
            approval_id: s(&a.approval_id),
            digest: a.digest.as_str().unwrap_or("").to_string(),
            ..Waiting::default()
        };
        if a.is_tool() {
            return Waiting {
                from: who_asked(a.host.as_deref(), a.host_pid, a.pid),
                excerpt: format!("{}\n{}", s(&a.description), s(&a.input_preview)),
                tool: Some(s(&a.tool_name)),
                ..asked
            };
        }
        Waiting {
            from: s(&a.from),
            workspace: s(&a.workspace),
            mode: s(&a.mode),
            excerpt: s(&a.excerpt),
            bytes: a.bytes,
            lines: a.lines,
            ..asked
        }
    }
}

/// Who sent a waiting task, from where, in which mode and how big it is:
/// `NAME (WORKSPACE), mode queue, 120 bytes`, leaving out what is unknown.
fn approval_about(w: &Waiting) -> String {
    let from = given(&w.from).unwrap_or("an unknown sender");
    let ws = part(given(&w.workspace), |x| format!(" ({x})"));
    let mode = part(given(&w.mode), |m| format!(", mode {m}"));
    let bytes = part(w.bytes, |n| {
        format!(", {n} byte{}", if n == 1 { "" } else { "s" })
    });
    format!("{from}{ws}{mode}{bytes}{}", whole_read(w))
}

/// What the whole read says, once it was: `, 7 lines, 2 escaped; v reads
/// it whole`.
fn whole_read(w: &Waiting) -> String {
    let Some(n) = w.escaped else {
        return String::new();
    };
    let lines = part(w.lines, |l| format!(", {}", lines_said(l)));
    format!("{lines}, {n} escaped; v reads it whole")
}

/// The view's status row while a task waits: the question and its context.
pub fn approval_prompt(w: &Waiting) -> String {
    match &w.tool {
        Some(tool) => format!(
            "allow tool call {} ({tool}) asked by {}{}? [y/n]",
            w.id,
            w.from,
            whole_read(w)
        ),
        None => format!("approve task {} from {}? [y/n]", w.id, approval_about(w)),
    }
}

/// The view's entry for a task that waits: who, mode, size, and the
/// body's first lines.
pub fn approval_text(w: &Waiting) -> String {
    let mut t = match &w.tool {
        Some(tool) => format!(
            "tool call {} ({tool}) asked by {} waits for permission: y or n, or /approve {}",
            w.id, w.from, w.id
        ),
        None => format!(
            "task {} from {} waits for approval: y or n, or /approve {}",
            w.id,
            approval_about(w),
            w.id
        ),
    };
    for line in w.excerpt.lines() {
        t.push_str(&format!("\n  {line}"));
    }
    t
}

/// The whole of what an approval shows, for the operator to read before
/// deciding: a task's body (from `approval/list`), or a tool call's
/// description and input; or why it could not be read.
pub type Whole = std::result::Result<String, String>;

/// How many characters of `text` a terminal is shown escaped
/// (`sanitize::is_unsafe`), line ends and tabs aside: what the operator
/// cannot read as it stands.
pub fn escaped_count(text: &str) -> usize {
    (text.chars())
        .filter(|&c| c != '\n' && c != '\t' && is_unsafe(c))
        .count()
}

/// The whole text of an approval as `approval/list` with `full` gave it:
/// a task's body, checked against the SHA-256 its approval shows (which
/// the digest an answer names covers); a tool call's description and
/// input, which its request shows whole.
pub fn whole_of(a: &Asked) -> Whole {
    if a.is_tool() {
        let (what, input) = (a.description.as_deref(), a.input_preview.as_deref());
        return Ok(format!("{}\n{}", what.unwrap_or(""), input.unwrap_or("")));
    }
    let Some(body) = &a.body else {
        return Err("its file could not be read".into());
    };
    match &a.body_sha256 {
        Some(want) if *want != crate::base::digest::sha256_hex(body.as_bytes()) => {
            Err("the body read is not the one the approval shows (its SHA-256 differs)".into())
        }
        _ => Ok(body.clone()),
    }
}

/// The whole text, escaped (`escape_multiline`), each line behind `  | `
/// so that no line of it can pass for baton's own.
pub fn show_whole(a: &Asked, whole: &Whole) -> String {
    let what = match a.is_tool() {
        true => format!("tool call {}", escape(a.subject())),
        false => format!("task {}", escape(a.subject())),
    };
    let text = match whole {
        Ok(t) => t,
        Err(why) => return format!("  the whole of {what} cannot be shown: {}\n", escape(why)),
    };
    let mut out = format!(
        "  the whole of {what} ({} bytes, {}):\n",
        text.len(),
        lines_said(text.lines().count() as u64)
    );
    for l in escape_multiline(text).lines() {
        out.push_str(&format!("  | {l}\n"));
    }
    out.push_str(&format!("  (end of {what})\n"));
    out
}

/// `N line(s)`.
fn lines_said(n: u64) -> String {
    format!("{n} line{}", if n == 1 { "" } else { "s" })
}

/// `s` cut after `chars` characters; `…` marks the cut.
pub fn cut(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The first `EXCERPT_LINES` lines of a body, each cut to
/// `EXCERPT_WIDTH` characters.
pub fn first_lines(body: &str) -> Vec<String> {
    (body.lines().take(EXCERPT_LINES))
        .map(|l| cut(l, EXCERPT_WIDTH))
        .collect()
}

/// `first_lines`, and a last `…` when the body has more.
pub fn excerpt(body: &str) -> String {
    let mut out = first_lines(body);
    if body.lines().nth(EXCERPT_LINES).is_some() {
        out.push("…".into());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The kinds in protocol.md's table of events.
    fn documented_kinds() -> Vec<String> {
        let doc = include_str!("../../docs/protocol.md");
        let table = doc
            .split("| kind | other fields | when |")
            .nth(1)
            .expect("protocol.md has the table of event kinds");
        let mut kinds: Vec<String> = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('`').nth(1).map(str::to_string))
            .collect();
        kinds.dedup();
        kinds
    }

    #[test]
    fn every_documented_kind_has_a_line() {
        let documented = documented_kinds();
        assert!(documented.len() >= 19, "{documented:?}");
        let mut listed: Vec<String> = K::ALL.iter().map(|k| k.to_string()).collect();
        let mut doc_sorted = documented.clone();
        listed.sort();
        doc_sorted.sort();
        assert_eq!(
            listed, doc_sorted,
            "KINDS and protocol.md's event table differ"
        );
        for kind in K::ALL {
            let ev = json!({"seq": 1, "time": 0.0, "kind": kind, "message_id": "t-1",
                            "zzz_unknown_member": 1});
            let line = said(&Event::read(&ev)).line;
            assert!(
                !line.contains("zzz_unknown_member"),
                "{kind} has no line of its own: {line}"
            );
        }
        let odd = said(&Event::read(&json!({"time": 0.0, "kind": "x.new", "a": 1}))).line;
        assert!(odd.contains("{\"a\":1}"), "{odd}");
    }

    #[test]
    fn a_resend_of_a_kept_task_is_a_status_not_a_refusal() {
        let ev = |status: &str| {
            Event::read(&json!({"seq": 4, "time": 0.0, "kind": "message.rejected",
                "message_id": "m-1", "from": "(cli)", "pid": 7, "status": status,
                "reason": "this message_id was already accepted with the same body"}))
        };
        let resent = said(&ev("duplicate"));
        assert_eq!(
            resent.line,
            "m-1 from (cli) (pid 7): already accepted (duplicate): nothing stored again"
        );
        let (role, entry) = resent.entry.expect("an entry in the view");
        assert_eq!(role, Role::System);
        assert_eq!(
            entry,
            "task m-1 from (cli) sent again: already accepted (duplicate): nothing stored again"
        );
        let refused = said(&ev("denied")).entry.expect("an entry");
        assert_eq!(refused.0, Role::Refusal);
    }
}
