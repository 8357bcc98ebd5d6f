//! What the operator sees, as data: the header, the transcript entries
//! with their roles, the input line (`editor.rs`), and the pure
//! function that lays them out into a frame of any size. Every string that
//! came from a peer or a handler is escaped before it is laid out.

pub use super::editor::Editor;
use super::term::{Frame, Line, Style};
use crate::sanitize::escape;
use crate::status::Status;
use serde_json::Value;

/// How many lines of a body an approval shows when the request carries
/// no excerpt of its own, and how many characters of each.
pub const EXCERPT_LINES: usize = 5;
const EXCERPT_WIDTH: usize = 200;

/// How many accepted tasks the view remembers (sender, mode, body) for
/// the approvals that follow them.
const REMEMBERED: usize = 256;

/// The transcript keeps at most this many entries in memory.
pub const MAX_ENTRIES: usize = 5000;

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

impl Role {
    fn style(self) -> Style {
        match self {
            Role::Local => Style::Local,
            Role::Relay => Style::Relay,
            Role::Output => Style::Output,
            Role::System => Style::System,
            Role::Refusal => Style::Refusal,
        }
    }

    fn mark(self) -> &'static str {
        match self {
            Role::Local => "> ",
            Role::Relay => "<< ",
            Role::Output => "| ",
            Role::System => "* ",
            Role::Refusal => "! ",
        }
    }
}

/// One transcript entry; `text` may hold several lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub role: Role,
    pub text: String,
}

/// The header's fields.
#[derive(Clone, Debug, Default)]
pub struct Header {
    pub name: String,
    pub id: String,
    pub profile: String,
    pub state: String,
    pub queued: u64,
    pub interrupted: u64,
    pub model: String,
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
    /// For a tool call an MCP host relayed (`permission.requested`): the
    /// tool; `id` is then its request id.
    pub tool: Option<String>,
    /// The approval's id and the digest of what it shows: an answer names both.
    pub approval_id: String,
    pub digest: String,
}

/// A task claimed and not yet completed, as the view learned of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Open {
    pub id: String,
    pub from: String,
    /// Whether its sender can be replied to (it has an instance id);
    /// None when the view only saw the claim as an event.
    pub replyable: Option<bool>,
}

/// What a `message.accepted` event said about a task.
#[derive(Clone, Debug, Default)]
struct Seen {
    id: String,
    from: String,
    workspace: String,
    mode: String,
    body: String,
}

/// Everything the view shows.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub header: Header,
    pub entries: Vec<Entry>,
    pub editor: Editor,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: usize,
    /// Tasks waiting for an approval, oldest first.
    pub waiting: Vec<Waiting>,
    /// Tasks claimed here and not completed, oldest first.
    pub open: Vec<Open>,
    /// `/quit` warned that tasks wait; the next `/quit` leaves.
    pub quit_armed: bool,
    /// Recently accepted tasks, for the approvals that follow them.
    seen: Vec<Seen>,
    /// Why the relay is not there, for a local console.
    pub warning: Option<String>,
}

impl View {
    pub fn push(&mut self, role: Role, text: impl Into<String>) {
        self.entries.push(Entry {
            role,
            text: text.into(),
        });
        if self.entries.len() > MAX_ENTRIES {
            self.entries.drain(..self.entries.len() - MAX_ENTRIES);
        }
    }

    /// Adds what an event means to the transcript, and tracks approvals.
    pub fn apply_event(&mut self, ev: &Value) {
        let s = |k: &str| field(ev, k);
        let id = s("message_id");
        match s("kind").as_str() {
            "local.input" => {
                let mut t = s("body");
                if ev.get("noted").and_then(Value::as_bool) == Some(true) {
                    t.push_str("\n(noted: this instance has no --exec handler)");
                }
                self.push(Role::Local, t);
            }
            "message.accepted" => {
                self.remember(ev, &id);
                self.push(Role::Relay, accepted_text(ev, &id));
            }
            "message.rejected" => self.push(
                Role::Refusal,
                format!(
                    "refused task {id} from {}: {}: {}",
                    s("from"),
                    s("status"),
                    s("reason")
                ),
            ),
            "turn.started" => self.push(Role::System, format!("turn {id} started")),
            "turn.output" => self.push(Role::Output, output_text(ev)),
            "turn.finished" => {
                self.open.retain(|o| o.id != id);
                let mut t = format!("turn {id} {}", s("outcome"));
                if let Some(c) = ev.get("exit_code").filter(|c| !c.is_null()) {
                    t.push_str(&format!(", exit {c}"));
                }
                self.push(Role::System, t);
            }
            "relay.sent" => {
                let (role, text) = relay_sent_entry(ev, &id);
                self.push(role, text);
            }
            "approval.requested" => {
                let w = self.waiting_of(ev, &id);
                self.push(Role::System, approval_text(&w));
                self.wait(w);
            }
            "approval.resolved" => {
                self.waiting.retain(|w| w.approval_id != s("approval_id"));
                self.push(
                    Role::System,
                    format!("task {id}: {} ({})", s("decision"), s("by")),
                );
            }
            "task.denied" => {
                self.waiting.retain(|w| w.tool.is_some() || w.id != id);
            }
            "permission.requested" | "permission.resolved" => self.tool_call(ev),
            "state.changed" => self.push(Role::System, format!("state: {}", s("state"))),
            "task.expired" => self.push(Role::Refusal, format!("task {id} expired: {}", s("text"))),
            "notice" => self.push(Role::System, s("text")),
            "instance.started" => {
                // What waited ended with the last run; it asks again.
                self.waiting.clear();
                self.push(
                    Role::System,
                    format!("{} started in {}", s("name"), s("workspace")),
                );
            }
            "task.claimed" => {
                if !self.open.iter().any(|o| o.id == id) {
                    self.open.push(Open {
                        id: id.clone(),
                        from: s("from"),
                        replyable: None,
                    });
                }
                self.push(Role::System, format!("task.claimed {id}"))
            }
            "task.requeued" | "task.discarded" | "task.rejected" => {
                self.push(Role::System, format!("{} {id}", s("kind")))
            }
            other => self.push(Role::System, other.to_string()),
        }
    }

    /// A tool call an MCP host asks about (`permission.requested`) waits
    /// like a task until it is decided (`permission.resolved`).
    fn tool_call(&mut self, ev: &Value) {
        let s = |k: &str| field(ev, k);
        if s("kind") == "permission.requested" {
            let w = Waiting {
                id: s("request_id"),
                from: crate::instance::who_asked(ev),
                excerpt: format!("{}\n{}", s("description"), s("input_preview")),
                tool: Some(s("tool_name")),
                approval_id: s("approval_id"),
                digest: s("digest"),
                ..Waiting::default()
            };
            self.push(Role::System, approval_text(&w));
            self.wait(w);
        } else {
            let rid = s("request_id");
            self.waiting.retain(|w| w.approval_id != s("approval_id"));
            self.push(
                Role::System,
                format!("tool call {rid}: {} ({})", s("decision"), s("by")),
            );
        }
    }

    /// Keeps what a `message.accepted` event says, for an approval.
    fn remember(&mut self, ev: &Value, id: &str) {
        self.seen.retain(|x| x.id != id);
        self.seen.push(Seen {
            id: id.to_string(),
            from: field(ev, "from"),
            workspace: field(ev, "workspace"),
            mode: field(ev, "mode"),
            body: field(ev, "body"),
        });
        if self.seen.len() > REMEMBERED {
            self.seen.remove(0);
        }
    }

    /// An approval waits, once (a controller's late request repeats none).
    fn wait(&mut self, w: Waiting) {
        if !self.waiting.iter().any(|x| x.approval_id == w.approval_id) {
            self.waiting.push(w);
        }
    }

    /// An `approval.requested` event as a waiting task: the fields the
    /// request carries (`from` as an object with `name` and `workspace`,
    /// or as a string; `mode`, `body_excerpt`, `body_bytes`), else what
    /// the task's `message.accepted` said.
    fn waiting_of(&self, ev: &Value, id: &str) -> Waiting {
        let seen = self.seen.iter().find(|x| x.id == id);
        let or_seen = |v: Option<&str>, f: fn(&Seen) -> &str| -> String {
            v.filter(|x| !x.is_empty())
                .map(str::to_string)
                .or_else(|| seen.map(|x| f(x).to_string()))
                .unwrap_or_default()
        };
        let from = ev.get("from");
        let name = from.and_then(|f| f.get("name").and_then(Value::as_str).or_else(|| f.as_str()));
        let ws = from
            .and_then(|f| f.get("workspace"))
            .or_else(|| ev.get("workspace"))
            .and_then(Value::as_str);
        let excerpt = match ev.get("body_excerpt").and_then(Value::as_str) {
            Some(x) => x.to_string(),
            None => seen.map(|x| excerpt(&x.body)).unwrap_or_default(),
        };
        let bytes = ev
            .get("body_bytes")
            .and_then(Value::as_u64)
            .or_else(|| seen.map(|x| x.body.len() as u64));
        Waiting {
            id: id.to_string(),
            from: or_seen(name, |x| &x.from),
            workspace: or_seen(ws, |x| &x.workspace),
            mode: or_seen(ev.get("mode").and_then(Value::as_str), |x| &x.mode),
            excerpt,
            bytes,
            tool: None,
            approval_id: field(ev, "approval_id"),
            digest: field(ev, "digest"),
        }
    }

    fn header_line(&self, width: usize) -> String {
        let h = &self.header;
        // The whole id: it is what `baton attach ID` and `/send ID` take.
        let mut t = format!(
            " {} ({})  {}  {}  queued {}  interrupted {}",
            h.name, h.id, h.profile, h.state, h.queued, h.interrupted
        );
        if !h.model.is_empty() {
            t.push_str(&format!("  {}", h.model));
        }
        let t = escape(&t);
        // The "baton" label goes first when the line is too long.
        let branded = format!(" baton {t}");
        if branded.chars().count() <= width {
            branded
        } else {
            fit(&t, width)
        }
    }

    /// The transcript as screen lines of at most `width` characters.
    fn transcript_lines(&self, width: usize) -> Vec<Line> {
        let mut out = Vec::new();
        if let Some(w) = &self.warning {
            for l in wrap(&format!("! {}", escape(w)), width) {
                out.push(Line {
                    text: l,
                    style: Style::Refusal,
                });
            }
        }
        for e in &self.entries {
            let mark = e.role.mark();
            let indent = " ".repeat(mark.len());
            // Continuation lines are indented too, so wrapped peer text
            // can never start a screen line with another role's mark.
            let room = width.saturating_sub(mark.len()).max(1);
            for (i, raw) in e.text.split('\n').enumerate() {
                for (j, l) in wrap(&escape(raw), room).into_iter().enumerate() {
                    let lead = if i == 0 && j == 0 { mark } else { &indent };
                    out.push(Line {
                        text: fit(&format!("{lead}{l}"), width),
                        style: e.role.style(),
                    });
                }
            }
        }
        out
    }

    /// Lays the view out on a `cols` x `rows` screen. Below 3 rows only
    /// the input line is left; below 20 columns lines are just cut.
    pub fn render(&self, cols: u16, rows: u16) -> Frame {
        let width = cols.max(1) as usize;
        let rows = rows.max(1) as usize;
        let mut lines = Vec::with_capacity(rows);
        if rows >= 3 {
            lines.push(Line {
                text: self.header_line(width),
                style: Style::Header,
            });
            let area = rows - 3;
            let all = self.transcript_lines(width);
            let end = all
                .len()
                .saturating_sub(self.scroll.min(all.len().saturating_sub(area)));
            let start = end.saturating_sub(area);
            let mut shown: Vec<Line> = all[start..end].to_vec();
            while shown.len() < area {
                shown.push(Line {
                    text: String::new(),
                    style: Style::Normal,
                });
            }
            lines.extend(shown);
            let status = match self.waiting.first() {
                Some(w) => Line {
                    text: fit(&escape(&approval_prompt(w)), width),
                    style: Style::Prompt,
                },
                None => Line {
                    text: fit(
                        &format!(
                            "{} /help for commands{}",
                            "-".repeat(2),
                            if self.scroll > 0 {
                                format!("  (scrolled up {} lines; PgDn)", self.scroll)
                            } else {
                                String::new()
                            }
                        ),
                        width,
                    ),
                    style: Style::Normal,
                },
            };
            lines.push(status);
        }
        // The input line scrolls sideways to keep the cursor in view.
        let prompt = "> ";
        let room = width.saturating_sub(prompt.len()).max(1);
        let skip = (self.editor.cursor + 1).saturating_sub(room);
        let visible: String = self.editor.buf.iter().skip(skip).take(room).collect();
        lines.push(Line {
            text: fit(&format!("{prompt}{}", escape(&visible)), width),
            style: Style::Normal,
        });
        let cx = (prompt.len() + self.editor.cursor - skip).min(width - 1);
        // The input line is the last one drawn (row 0 below 3 rows).
        let input_row = lines.len() - 1;
        Frame {
            lines,
            cursor: (cx as u16, input_row as u16),
        }
    }
}

/// A string field of an event; empty when it is missing.
fn field(ev: &Value, k: &str) -> String {
    ev.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// `message.accepted`: who sent the task, from where, and its body.
fn accepted_text(ev: &Value, id: &str) -> String {
    let ws = field(ev, "workspace");
    let pid = ev.get("pid").map(|p| p.to_string()).unwrap_or_default();
    format!(
        "task {id} from {} (pid {pid}{}{}):\n{}",
        field(ev, "from"),
        if ws.is_empty() { "" } else { ", " },
        ws,
        field(ev, "body")
    )
}

/// Who sent a waiting task, from where, in which mode and how big it is:
/// `NAME (WORKSPACE), mode queue, 120 bytes`, leaving out what is unknown.
fn approval_about(w: &Waiting) -> String {
    let mut t = if w.from.is_empty() {
        "an unknown sender".to_string()
    } else {
        w.from.clone()
    };
    if !w.workspace.is_empty() {
        t.push_str(&format!(" ({})", w.workspace));
    }
    if !w.mode.is_empty() {
        t.push_str(&format!(", mode {}", w.mode));
    }
    if let Some(n) = w.bytes {
        t.push_str(&format!(", {n} byte{}", if n == 1 { "" } else { "s" }));
    }
    t
}

/// The status row while a task waits: the question and its context.
pub fn approval_prompt(w: &Waiting) -> String {
    match &w.tool {
        Some(tool) => format!(
            "allow tool call {} ({tool}) asked by {}? [y/n]",
            w.id, w.from
        ),
        None => format!("approve task {} from {}? [y/n]", w.id, approval_about(w)),
    }
}

/// The transcript entry for a task that waits: who, mode, size, and the
/// body's first lines (escaped when drawn, like every entry).
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

/// The first `EXCERPT_LINES` lines of a body, each cut to
/// `EXCERPT_WIDTH` characters; `…` marks what was left out.
pub fn excerpt(body: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut lines = body.lines();
    for line in lines.by_ref().take(EXCERPT_LINES) {
        let mut l: String = line.chars().take(EXCERPT_WIDTH).collect();
        if line.chars().count() > EXCERPT_WIDTH {
            l.push('…');
        }
        out.push(l);
    }
    if lines.next().is_some() {
        out.push("…".into());
    }
    out.join("\n")
}

/// `turn.output`: the text, after a note of what was dropped.
fn output_text(ev: &Value) -> String {
    let mut t = field(ev, "text");
    if let Some(n) = ev.get("dropped").and_then(Value::as_u64) {
        t = format!("[{n} bytes dropped; the tail follows]\n{t}");
    }
    t.strip_suffix('\n').unwrap_or(&t).to_string()
}

/// `relay.sent`: where the task went, or why it did not.
fn relay_sent_entry(ev: &Value, id: &str) -> (Role, String) {
    let to = ev
        .get("target")
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let status = field(ev, "status");
    let delivered = status.parse::<Status>().is_ok_and(Status::delivered);
    if delivered {
        let pos = ev
            .get("queue_position")
            .map(|p| format!(" at position {p}"))
            .unwrap_or_default();
        (Role::System, format!("sent {id} to {to}: {status}{pos}"))
    } else {
        let to = if to.is_empty() {
            String::new()
        } else {
            format!(" to {to}")
        };
        (
            Role::Refusal,
            format!(
                "not sent {id}{to}: {status}: {}{}",
                field(ev, "reason"),
                candidates_text(ev)
            ),
        )
    }
}

/// The candidates a `no_target` names, with the ids `/send` takes (the
/// instance itself is never among them).
fn candidates_text(ev: &Value) -> String {
    let Some(list) = ev.get("candidates").and_then(Value::as_array) else {
        return String::new();
    };
    if list.is_empty() {
        return "; no other live instances".into();
    }
    let names: Vec<String> = list
        .iter()
        .map(|p| format!("{} ({})", field(p, "name"), field(p, "instance_id")))
        .collect();
    format!("; candidates: {}", names.join(", "))
}

/// Cuts a line to `width` characters.
fn fit(s: &str, width: usize) -> String {
    s.chars().take(width).collect()
}

/// Wraps one line at `width` characters, at a space when there is one.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= width {
        return vec![s.to_string()];
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = (start + width).min(chars.len());
        // A line that ends right before a space needs no earlier cut.
        let cut = if end < chars.len() && chars[end] != ' ' {
            chars[start..end]
                .iter()
                .rposition(|&c| c == ' ')
                .filter(|&sp| sp > 0)
        } else {
            None
        };
        if let Some(sp) = cut {
            end = start + sp + 1;
        }
        out.push(
            chars[start..end]
                .iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        start = end;
        // The space a line was cut at does not start the next one.
        if start < chars.len() && chars[start] == ' ' && end > 0 && chars[end - 1] != ' ' {
            start += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_prefers_spaces() {
        assert_eq!(wrap("aaa bbb ccc", 7), ["aaa bbb", "ccc"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }
}
