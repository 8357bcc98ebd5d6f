//! What the operator sees, as data: the header, the transcript entries
//! with their roles, what waits and what is open, the input line, and the
//! pure function that lays them out into a frame of any size. What an
//! event says is `event_text`'s; every string that came from a peer or a
//! handler is escaped here, as it is laid out.

pub use super::editor::Editor;
use super::term::{Frame, Line, Style};
use crate::text::sanitize::escape;
use crate::wire::answer::Asked;
use crate::wire::event_text::{self, approval_text, named};
pub use crate::wire::event_text::{Role, Waiting, approval_prompt, excerpt};
use crate::wire::{Event, EventKind, Shown};
use serde_json::Value;

/// How many accepted tasks the view remembers (sender, mode, body) for
/// the approvals that follow them.
const REMEMBERED: usize = 256;

/// The approvals that wait listed one a line; the rest are counted.
const LISTED: usize = 5;

/// The transcript keeps at most this many entries in memory.
pub const MAX_ENTRIES: usize = 5000;

impl Role {
    /// The mark that starts an entry, and its colour.
    fn look(self) -> (&'static str, Style) {
        match self {
            Role::Local => ("> ", Style::Local),
            Role::Relay => ("<< ", Style::Relay),
            Role::Output => ("| ", Style::Output),
            Role::System => ("* ", Style::System),
            Role::Refusal => ("! ", Style::Refusal),
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

/// A task claimed and not yet completed, as the view learned of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Open {
    pub id: String,
    pub from: String,
    /// Whether its sender can be replied to (it has an instance id);
    /// None when the view only saw the claim as an event.
    pub replyable: Option<bool>,
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
    /// Recently accepted tasks (their `message.accepted`), for the
    /// approvals that follow them.
    seen: Vec<Event>,
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

    /// Adds what an event means to the transcript, and tracks what waits
    /// and what is open.
    pub fn apply_event(&mut self, v: &Value) {
        let ev = &Event::read(v);
        let id = ev.id();
        let approval_id = named(&ev.approval_id);
        match ev.kind {
            Some(EventKind::MessageAccepted) => self.remember(ev),
            Some(EventKind::TurnFinished) => self.open.retain(|o| o.id != id),
            Some(EventKind::ApprovalRequested) => self.wait(self.waiting_of(ev)),
            // A tool call: what its `approval/request` carries.
            Some(EventKind::PermissionRequested) => self.wait(Waiting::of(&Asked::read(v))),
            Some(EventKind::ApprovalResolved | EventKind::PermissionResolved) => {
                self.waiting.retain(|w| w.approval_id != approval_id)
            }
            // A task cancelled (or set aside) while it waited ends without
            // an answer to its approval.
            Some(EventKind::TaskDenied | EventKind::TaskEnded) => {
                self.waiting.retain(|w| w.tool.is_some() || w.id != id)
            }
            // What waited ended with the last run; it asks again.
            Some(EventKind::InstanceStarted) => self.waiting.clear(),
            Some(EventKind::TaskClaimed) if !self.open.iter().any(|o| o.id == id) => {
                self.open.push(Open {
                    id: id.to_string(),
                    from: ev.sender().unwrap_or("").to_string(),
                    replyable: None,
                })
            }
            _ => {}
        }
        if let Some((role, text)) = event_text::said(ev).entry {
            self.push(role, text);
        }
    }

    /// Keeps what a `message.accepted` event says, for an approval.
    fn remember(&mut self, ev: &Event) {
        self.seen.retain(|x| x.id() != ev.id());
        self.seen.push(ev.clone());
        if self.seen.len() > REMEMBERED {
            self.seen.remove(0);
        }
    }

    /// An approval waits, said in the transcript, and kept once (a
    /// controller's late request repeats none).
    fn wait(&mut self, w: Waiting) {
        self.push(Role::System, approval_text(&w));
        if !self.waiting.iter().any(|x| x.approval_id == w.approval_id) {
            self.waiting.push(w);
        }
    }

    /// A task's approval as what waits: what the event carries (`from`,
    /// as a string or an object with `name` and `workspace`; `mode`,
    /// `body_excerpt`, `body_bytes`), else what the task's
    /// `message.accepted` said.
    fn waiting_of(&self, ev: &Event) -> Waiting {
        let (approval_id, digest) = (named(&ev.approval_id), named(&ev.digest));
        let seen = self.seen.iter().find(|x| x.id() == ev.id());
        let or_seen = |v: Option<&str>, f: fn(&Event) -> Option<&str>| -> String {
            let v = v.filter(|x| !x.is_empty()).or_else(|| seen.and_then(f));
            v.unwrap_or("").to_string()
        };
        let ws = match &ev.from {
            Some(Shown::Sender {
                workspace: Some(w), ..
            }) => Some(w.as_str()),
            _ => ev.workspace.as_deref(),
        };
        let seen_body = seen.map(|x| x.body.as_deref().unwrap_or(""));
        let seen_bytes = seen_body.map(|b| b.len() as u64);
        let shown = ev.excerpt.as_ref().or(ev.body_excerpt.as_ref()).cloned();
        Waiting {
            id: ev.id().to_string(),
            from: or_seen(ev.sender(), Event::sender),
            workspace: or_seen(ws, |x| x.workspace.as_deref()),
            mode: named(&ev.mode.clone().or(seen.and_then(|x| x.mode.clone()))),
            excerpt: shown.unwrap_or_else(|| seen_body.map(excerpt).unwrap_or_default()),
            bytes: ev.bytes.or(ev.body_bytes).or(seen_bytes),
            lines: ev.lines.or(seen_body.map(|b| b.lines().count() as u64)),
            approval_id,
            digest,
            ..Waiting::default()
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
        let warning = self.warning.iter();
        let warned = warning.flat_map(|w| wrap(&format!("! {}", escape(w)), width));
        let mut out: Vec<Line> = warned.map(|l| line(l, Style::Refusal)).collect();
        for e in &self.entries {
            let (mark, style) = e.role.look();
            let indent = " ".repeat(mark.len());
            // Continuation lines are indented too, so wrapped peer text
            // can never start a screen line with another role's mark.
            let room = width.saturating_sub(mark.len()).max(1);
            for (i, raw) in e.text.split('\n').enumerate() {
                for (j, l) in wrap(&escape(raw), room).into_iter().enumerate() {
                    let lead = if i == 0 && j == 0 { mark } else { &indent };
                    out.push(line(fit(&format!("{lead}{l}"), width), style));
                }
            }
        }
        out
    }

    /// The approvals that wait, above the status line, in at most `room`
    /// lines (none below 2): a heading, then one line each, oldest first
    /// (at most `LISTED`): the approval's id, who sent or asked, and the
    /// first line of what it shows, escaped.
    fn waiting_lines(&self, width: usize, room: usize) -> Vec<Line> {
        let n = self.waiting.len();
        let room = room.min(LISTED + 1);
        if n == 0 || room < 2 {
            return Vec::new();
        }
        let heading = format!("waiting for approval ({n}): /approve ID, /deny ID, /body ID");
        let mut out = vec![line(fit(&heading, width), Style::Prompt)];
        // The last line says how many more when not all fit.
        let slots = room - 1;
        let shown = if n <= slots { n } else { slots - 1 };
        for w in &self.waiting[..shown] {
            let mut first = w.excerpt.lines().next().unwrap_or("").to_string();
            if w.excerpt.lines().nth(1).is_some() || w.lines.is_some_and(|l| l > 1) {
                first.push_str(" …");
            }
            let text = match &w.tool {
                Some(tool) => format!(
                    "  {}  tool {tool} asked by {}: {first}",
                    w.approval_id, w.from
                ),
                None => format!("  {}  from {}: {first}", w.approval_id, w.from),
            };
            out.push(line(fit(&escape(&text), width), Style::Prompt));
        }
        if shown < n {
            let more = format!("  and {} more", n - shown);
            out.push(line(fit(&more, width), Style::Prompt));
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
            lines.push(line(self.header_line(width), Style::Header));
            let listed = self.waiting_lines(width, (rows - 3) / 2);
            let area = rows - 3 - listed.len();
            let all = self.transcript_lines(width);
            let end = all
                .len()
                .saturating_sub(self.scroll.min(all.len().saturating_sub(area)));
            let start = end.saturating_sub(area);
            lines.extend_from_slice(&all[start..end]);
            lines.resize(1 + area, line(String::new(), Style::Normal));
            lines.extend(listed);
            let scrolled = match self.scroll {
                0 => String::new(),
                n => format!("  (scrolled up {n} lines; PgDn)"),
            };
            lines.push(match self.waiting.first() {
                Some(w) => line(fit(&escape(&approval_prompt(w)), width), Style::Prompt),
                None => line(
                    fit(&format!("-- /help for commands{scrolled}"), width),
                    Style::Normal,
                ),
            });
        }
        // The input line scrolls sideways to keep the cursor in view.
        let prompt = "> ";
        let room = width.saturating_sub(prompt.len()).max(1);
        let skip = (self.editor.cursor + 1).saturating_sub(room);
        let visible: String = self.editor.buf.iter().skip(skip).take(room).collect();
        lines.push(line(
            fit(&format!("{prompt}{}", escape(&visible)), width),
            Style::Normal,
        ));
        let cx = (prompt.len() + self.editor.cursor - skip).min(width - 1);
        // The input line is the last one drawn (row 0 below 3 rows).
        let input_row = lines.len() - 1;
        Frame {
            lines,
            cursor: (cx as u16, input_row as u16),
        }
    }
}

fn line(text: String, style: Style) -> Line {
    Line { text, style }
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
        let l: String = chars[start..end].iter().collect();
        out.push(l.trim_end().to_string());
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
