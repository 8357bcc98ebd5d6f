//! What `check_inbox` says of a task that waits for an operator's
//! approval (`--profile sysadmin`): who sent it, its mode, the start of
//! its body, and how the operator approves it. The task is read from the
//! session's spool, where it waits.

use super::Adapter;
use crate::spool::{self, Task};
use crate::text::sanitize::escape;
use crate::wire::Call;
use crate::wire::answer::ControlStatus;
use crate::wire::request::NoParams;
use crate::workers::turn;
use std::fmt::Write as _;
use std::path::PathBuf;

/// How many lines of the body are shown.
const BODY_LINES: usize = 5;
/// How many characters of one body line are shown.
const LINE_CHARS: usize = 200;

/// The first lines of a body, each escaped for the model and the
/// operator alike, and cut; says how many lines were left out.
fn body_preview(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut out = String::new();
    for line in lines.iter().take(BODY_LINES) {
        let shown: String = line.chars().take(LINE_CHARS).collect();
        let cut = if shown.len() < line.len() { " …" } else { "" };
        let _ = writeln!(out, "  | {}{cut}", escape(&shown));
    }
    if lines.len() > BODY_LINES {
        let _ = writeln!(out, "  | … ({} more lines)", lines.len() - BODY_LINES);
    }
    out
}

/// The whole text, for a task read from the spool.
fn describe(task: &Task, instance: &str) -> String {
    let s = &task.sender;
    let name = escape(&turn::display_name(s)).into_owned();
    let who = match (&s.instance_id, &s.workspace) {
        (Some(id), Some(ws)) => {
            format!("{name} (instance {}, workspace {})", escape(id), escape(ws))
        }
        (Some(id), None) => format!("{name} (instance {})", escape(id)),
        (None, _) => format!("{name} (a command line, not an agent)"),
    };
    format!(
        "awaiting_approval: task {id} waits for an operator's approval before you can take it.\n\
         from: {who}\nmode: {mode}\nbody ({bytes} bytes):\n{preview}\
         An operator approves or denies it with `baton watch {instance} --approve` (answering y or n), \
         or in the terminal view (`baton attach {instance}`, then y, n or /approve). \
         Call check_inbox again once it is approved.",
        id = task.message_id,
        mode = task.mode,
        bytes = task.body.len(),
        preview = body_preview(&task.body),
    )
}

impl Adapter {
    /// The spool directory and name of the session's instance
    /// (`control/status`), asked once.
    pub(super) fn facts(&mut self) -> Option<(PathBuf, String)> {
        if self.facts.is_none() {
            match self.call::<ControlStatus>(Call::ControlStatus, NoParams {}) {
                Ok((_, st)) => self.facts = Some((PathBuf::from(st.spool), st.name)),
                Err(e) => eprintln!("baton mcp: cannot ask the instance its status: {e}"),
            }
        }
        self.facts.clone()
    }

    /// `check_inbox`'s text for a task that waits for an approval; the
    /// instance's own reason when the task cannot be read.
    pub(super) fn awaiting_text(&mut self, id: &str, reason: &str) -> String {
        let fallback = format!("awaiting_approval: {reason}");
        let Some((dir, name)) = self.facts() else {
            return fallback;
        };
        match spool::read_queued(&dir, &[id]).as_deref() {
            Ok([t, ..]) => describe(t, &escape(&name)),
            _ => fallback,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preview_shows_the_first_lines_escaped() {
        let body = "one\ntwo\x1b[31m\nthree\nfour\nfive\nsix\nseven";
        assert_eq!(
            body_preview(body),
            "  | one\n  | two\\e[31m\n  | three\n  | four\n  | five\n  | … (2 more lines)\n"
        );
        let long = "x".repeat(LINE_CHARS + 1);
        assert_eq!(
            body_preview(&long),
            format!("  | {} …\n", "x".repeat(LINE_CHARS))
        );
    }
}
