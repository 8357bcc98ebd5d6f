//! Tool calls an MCP host asks its user to allow, relayed to the
//! instance's controllers (Claude Code's permission relay, docs/mcp.md):
//! `baton mcp` hands each request it gets from its host to its instance
//! (`permission/ask`), a controller (`baton watch --approve`) is asked as
//! for a task, and the decision is recorded (`permission.resolved`), which
//! `baton mcp` turns into its answer to the host. The host keeps its own
//! dialog open meanwhile and takes whichever answer comes first; it never
//! says when it answered itself, so a request waits until a controller
//! decides, the instance stops, or `MAX_WAITING` newer ones push it out.
//! The host's request id is for display only: a request is decided by the
//! id the instance gave it (`approval.rs`, `Pending`), which `baton mcp`
//! gets back and matches the decision by, so a host's id asked again, by
//! anyone, never inherits a decision on other text.

use super::approval::plain;
use super::{Answer, Foreground, Params, answer};
use crate::wire::Body;
use crate::wire::Handling;
use crate::wire::event_text;
use crate::wire::request::{AskParams, Asking, Shown, ToolShown};

/// The most tool-call requests that wait at once.
const MAX_WAITING: usize = 32;
/// Characters kept of a tool's name, description and input preview.
const FIELD_CHARS: usize = 2000;
/// Characters kept of the host's name.
const HOST_CHARS: usize = 64;

/// `s` cut after `FIELD_CHARS` characters (then `…`).
fn cut(s: &str) -> String {
    event_text::cut(s, FIELD_CHARS)
}

impl Foreground {
    /// `permission/ask`, from the connection of peer `pid`.
    pub(super) fn permission_ask(&mut self, params: &Params, pid: Option<u32>) -> Answer {
        let ask = AskParams::read(params)?;
        let request_id = ask.request_id;
        let invalid = |reason: String| answer(Asking::invalid(&request_id, reason));
        // Claude Code's are five lowercase letters.
        if !plain(&request_id, 64, "-_") {
            return invalid("request_id must be 1 to 64 ASCII letters, digits, '-' or '_'".into());
        }
        if (self.permissions.iter()).any(|p| p.params.request_id() == Some(request_id.as_str())) {
            return invalid(format!(
                "permission request {request_id} is already waiting"
            ));
        }
        if self.permissions.len() >= MAX_WAITING {
            let old = self.permissions.remove(0);
            self.requests.retain(|_, a| *a != old.id);
            let text = format!(
                "permission request {} ({}) no longer waits: {MAX_WAITING} newer ones do",
                old.params.request_id().unwrap_or(""),
                old.id
            );
            self.notice(None, text);
        }
        // `baton mcp` runs its instance in its own process, so a request
        // asked on a connection of this process comes from the host that
        // started this process. Of any other asker the host is unknown.
        let host_pid = (pid == Some(std::process::id())).then(std::os::unix::process::parent_id);
        let shown = Shown::Tool(ToolShown {
            approval_id: None,
            description: cut(&ask.description),
            digest: None,
            host: ask.host.map(|h| event_text::cut(&h, HOST_CHARS)),
            host_pid,
            input_preview: cut(&ask.input_preview),
            kind: None,
            pid,
            request_id: request_id.clone(),
            tool_name: cut(&ask.tool_name),
        });
        let (p, controllers) = self.ask(|p| Body::PermissionRequested(p), shown);
        let approval_id = p.id.clone();
        self.permissions.push(p);
        answer(Asking {
            approval_id: Some(approval_id),
            controllers: Some(controllers),
            reason: None,
            request_id,
            status: Handling::Waiting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_short_and_plain() {
        let valid_request_id = |s: &str| plain(s, 64, "-_");
        assert!(valid_request_id("tbxkq"));
        assert!(valid_request_id("req-1_A"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
        assert!(!valid_request_id("x\u{1b}"));
        assert!(!valid_request_id(&"a".repeat(65)));
        assert_eq!(cut(&"é".repeat(2001)), format!("{}…", "é".repeat(2000)));
        assert_eq!(cut("ls"), "ls");
        assert_eq!(event_text::cut("abc", 2), "ab…");
    }

    #[test]
    fn who_asked_names_the_host_its_pid_and_the_connection() {
        let asked = event_text::who_asked;
        assert_eq!(
            asked(Some("claude"), Some(8), Some(9)),
            "claude (pid 8) through baton mcp (pid 9)"
        );
        assert_eq!(
            asked(None, None, Some(9)),
            "an unnamed MCP host, through a connection of pid 9"
        );
        assert_eq!(asked(Some(""), None, None), "an unnamed MCP host");
    }
}
