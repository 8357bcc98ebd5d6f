//! Tool calls an MCP host asks its user to allow, relayed to the
//! instance's controllers (Claude Code's permission relay, docs/mcp.md):
//! `baton mcp` hands each request it gets from its host to its instance
//! (`permission/ask`), a controller (`baton watch --approve`) is asked as
//! for a task, and the decision is recorded (`permission.resolved`), which
//! `baton mcp` turns into its answer to the host. The host keeps its own
//! dialog open meanwhile and takes whichever answer comes first; it never
//! says when it answered itself, so a request waits until a controller
//! decides, the instance stops, or `MAX_WAITING` newer ones push it out.

use super::approval::Decider;
use super::{Foreground, opt_str_param, str_param};
use crate::sanitize::escape;
use crate::server::RpcError;
use serde_json::{Map, Value, json};

/// The most tool-call requests that wait at once.
const MAX_WAITING: usize = 32;
/// Characters kept of a tool's name, description and input preview.
const FIELD_CHARS: usize = 2000;

/// A host's request id: 1 to 64 ASCII letters, digits, `-` or `_`
/// (Claude Code's are five lowercase letters).
fn valid_request_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// `s` cut after `FIELD_CHARS` characters (then `…`).
fn cut(s: &str) -> String {
    match s.char_indices().nth(FIELD_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl Foreground {
    /// `permission/ask`, from the connection of peer `pid`.
    pub(super) fn permission_ask(
        &mut self,
        params: &Map<String, Value>,
        pid: Option<u32>,
    ) -> Result<Value, RpcError> {
        let request_id = str_param(params, "request_id")?;
        let tool_name = str_param(params, "tool_name")?;
        let description = opt_str_param(params, "description")?.unwrap_or_default();
        let input_preview = opt_str_param(params, "input_preview")?.unwrap_or_default();
        if !valid_request_id(&request_id) {
            return Ok(json!({"status": "invalid", "request_id": request_id,
                             "reason": "request_id must be 1 to 64 ASCII letters, digits, '-' or '_'"}));
        }
        if self.permissions.iter().any(|(r, _)| *r == request_id) {
            return Ok(json!({"status": "invalid", "request_id": request_id,
                             "reason": format!("permission request {request_id} is already waiting")}));
        }
        if self.permissions.len() >= MAX_WAITING {
            let (old, _) = self.permissions.remove(0);
            self.permission_requests.retain(|_, r| *r != old);
            self.hub.emit(
                "notice",
                json!({"text": format!("permission request {old} no longer waits: {MAX_WAITING} newer ones do")}),
            );
        }
        let ctx = json!({"request_id": request_id, "tool_name": cut(&tool_name),
                         "description": cut(&description), "input_preview": cut(&input_preview),
                         "pid": pid});
        self.hub.emit("permission.requested", ctx.clone());
        self.permissions.push((request_id.clone(), ctx.clone()));
        let controllers = self.send_permission_request(&request_id, None, ctx);
        Ok(json!({"status": "waiting", "request_id": request_id, "controllers": controllers}))
    }

    /// Asks every controller, or only the subscriber `only`, to decide on
    /// a tool call; how many were asked.
    pub(super) fn send_permission_request(
        &mut self,
        request_id: &str,
        only: Option<u64>,
        ctx: Value,
    ) -> usize {
        let rid = format!("approval-{}", self.next_request);
        self.next_request += 1;
        let bytes = crate::wire::request_line(rid.as_str(), "approval/request", ctx);
        let n = self.hub.send_to_controllers(&bytes, only);
        if n > 0 {
            self.permission_requests.insert(rid, request_id.to_string());
        }
        n
    }

    /// A decision on the tool call `request_id`: recorded for `baton mcp`
    /// to pass on, and no longer asked.
    pub(super) fn decide_permission(
        &mut self,
        request_id: &str,
        decision: &str,
        by: &Decider,
    ) -> Value {
        let Some(at) = self.permissions.iter().position(|(r, _)| r == request_id) else {
            return json!({"status": "invalid", "request_id": request_id,
                          "reason": format!("no permission request {} is waiting", escape(request_id))});
        };
        self.permissions.remove(at);
        self.permission_requests.retain(|_, r| r != request_id);
        self.hub.emit(
            "permission.resolved",
            json!({"request_id": request_id, "decision": decision, "by": by.kind,
                   "by_pid": by.pid}),
        );
        let status = if decision == "approve" {
            "approved"
        } else {
            "denied"
        };
        json!({"status": status, "request_id": request_id})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_short_and_plain() {
        assert!(valid_request_id("tbxkq"));
        assert!(valid_request_id("req-1_A"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
        assert!(!valid_request_id("x\u{1b}"));
        assert!(!valid_request_id(&"a".repeat(65)));
        assert_eq!(cut(&"é".repeat(2001)), format!("{}…", "é".repeat(2000)));
        assert_eq!(cut("ls"), "ls");
    }
}
