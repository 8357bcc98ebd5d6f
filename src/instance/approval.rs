//! No task from a peer runs, and no pull agent is handed one, before the
//! approval policy (`--approve`) let it go: under `ask` it waits until a
//! controller or `approval/respond` approves it, under `deny` it is ended
//! as refused. The operator's own input (`turn/local`) needs no approval.
//! A request carries what the operator decides on (sender, mode, the
//! body's first lines and size); a decision names who made it; a sender
//! that is an instance is told of a denial by a reply.

use super::{Approve, Foreground, is_local, str_param};
use crate::relay::Outbound;
use crate::sanitize::escape;
use crate::server::RpcError;
use crate::spool::{self, Claim, Task};
use crate::turn;
use serde_json::{Map, Value, json};

/// What the approval policy says of a queued task.
pub(super) enum Gate {
    Go,
    Wait,
    Denied,
}

/// Lines of the body an approval request carries, and characters kept of
/// each (a longer line ends in `…`).
const EXCERPT_LINES: usize = 5;
const EXCERPT_LINE_CHARS: usize = 200;
/// The longest kind a client may declare in `by`.
const MAX_BY: usize = 32;

/// Who decided on a task: the kind of client, as it declared it (else the
/// way it answered), and the connection's peer pid from the kernel.
pub(super) struct Decider {
    pub(super) kind: String,
    pub(super) pid: Option<u32>,
}

impl Decider {
    fn policy() -> Decider {
        Decider {
            kind: "--approve deny".into(),
            pid: None,
        }
    }

    /// As a log line says it: `watch (pid 1234)`.
    fn text(&self) -> String {
        match self.pid {
            Some(p) => format!("{} (pid {p})", self.kind),
            None => self.kind.clone(),
        }
    }
}

/// A client's declared kind (`watch`, `view`, `mcp`, ...): 1 to 32 ASCII
/// letters, digits, `-`, `_`, `.` or spaces.
fn valid_by(s: &str) -> bool {
    !s.trim().is_empty()
        && s.len() <= MAX_BY
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
}

/// The first lines of a body, each cut at `EXCERPT_LINE_CHARS`, and how
/// many lines it has in all.
fn excerpt(body: &str) -> (String, usize) {
    let cut = |l: &str| match l.char_indices().nth(EXCERPT_LINE_CHARS) {
        Some((i, _)) => format!("{}…", &l[..i]),
        None => l.to_string(),
    };
    let first: Vec<String> = body.lines().take(EXCERPT_LINES).map(cut).collect();
    (first.join("\n"), body.lines().count())
}

/// What an approval request and its event say of a task (protocol.md,
/// `approval/request`).
fn context(message_id: &str, task: Option<&Task>, summary: Option<&spool::Summary>) -> Value {
    let mut v = json!({"message_id": message_id});
    let (sender, mode) = match (task, summary) {
        (Some(t), _) => (&t.sender, &t.mode),
        (None, Some(s)) => (&s.sender, &s.mode),
        (None, None) => return v,
    };
    v["from"] = json!(turn::display_name(sender));
    v["pid"] = json!(sender.pid);
    v["sender_name"] = json!(sender.name);
    v["workspace"] = json!(sender.workspace);
    v["mode"] = json!(mode);
    if let Some(t) = task {
        let (text, lines) = excerpt(&t.body);
        v["bytes"] = json!(t.body.len());
        v["lines"] = json!(lines);
        v["excerpt"] = json!(text);
    } else if let Some(s) = summary {
        v["bytes"] = json!(s.bytes);
    }
    v
}

impl Foreground {
    /// Applies `--approve` to the task at the head of the queue. Returns
    /// the id that may be claimed now, if any; under `deny` the head is
    /// refused and the next one considered.
    pub(super) fn approved_head(&mut self) -> Option<String> {
        loop {
            let head = self.spool().peek()?;
            match self.gate(&head) {
                Gate::Go => return Some(head.message_id),
                Gate::Wait => return None,
                Gate::Denied => {}
            }
        }
    }

    /// Applies `--approve` to one queued task: it may go, it waits for an
    /// approval (asked for once), or it was refused and ended.
    pub(super) fn gate(&mut self, task: &spool::Summary) -> Gate {
        let id = &task.message_id;
        if is_local(&task.sender) {
            // The operator typed it: there is no one else to ask.
            return Gate::Go;
        }
        match self.opts.approve {
            Approve::Auto => Gate::Go,
            Approve::Ask if self.approved.contains(id) => Gate::Go,
            Approve::Ask => {
                if !self.asked.contains_key(id) {
                    self.asked.insert(id.clone(), Vec::new());
                    let full = self.spool().queued_task(id);
                    let ctx = context(id, full.as_ref(), Some(task));
                    self.hub.emit("approval.requested", ctx.clone());
                    self.send_approval_request(id, None, Some(ctx));
                }
                Gate::Wait
            }
            Approve::Deny => {
                self.deny(id, &Decider::policy());
                Gate::Denied
            }
        }
    }

    /// Asks every controller, or only the one subscriber `only`, with the
    /// task's context (read again from the spool when not given).
    pub(super) fn send_approval_request(
        &mut self,
        message_id: &str,
        only: Option<u64>,
        ctx: Option<Value>,
    ) {
        let ctx = ctx.unwrap_or_else(|| {
            let full = self.spool().queued_task(message_id);
            context(message_id, full.as_ref(), None)
        });
        let rid = format!("approval-{}", self.next_request);
        self.next_request += 1;
        // A request, not a notification: it carries an id the reply names.
        let bytes = crate::wire::request_line(rid.as_str(), "approval/request", ctx);
        if self.hub.send_to_controllers(&bytes, only) > 0 {
            self.requests.insert(rid.clone(), message_id.to_string());
            if let Some(v) = self.asked.get_mut(message_id) {
                v.push(rid);
            }
        }
    }

    /// Claims a queued task and ends it as refused by the approval policy.
    fn deny(&mut self, message_id: &str, by: &Decider) {
        self.asked.remove(message_id);
        self.approved.remove(message_id);
        let task = match self.spool().claim_id(message_id) {
            Ok(Claim::Task(task)) => match self.spool().finish(message_id, "denied") {
                Ok(()) => Some(task),
                Err(e) => {
                    self.hub.emit("notice", json!({"text": e.to_string()}));
                    None
                }
            },
            Ok(_) => None,
            Err(e) => {
                self.hub.emit("notice", json!({"text": e.to_string()}));
                None
            }
        };
        self.hub.emit(
            "task.denied",
            json!({"message_id": message_id, "by": by.kind, "by_pid": by.pid}),
        );
        if let Some(task) = task {
            self.ended(message_id, "denied", None);
            self.tell_denied(&task, by);
        }
    }

    /// A sender that is an instance learns of a denial as a reply to the
    /// denied task, as `--reply` would send one (docs/decisions.md). A
    /// task that is itself a reply gets none, so two instances that deny
    /// each other's notices cannot loop.
    fn tell_denied(&mut self, task: &Task, by: &Decider) {
        let Some(sender) = task.sender.instance_id.clone() else {
            return;
        };
        if task.in_reply_to.is_some() {
            return;
        }
        let body = format!(
            "baton: task {} was denied by {} at {}; it did not run.\n",
            task.message_id,
            by.text(),
            self.origin.name
        );
        let out = Outbound {
            target: sender.clone(),
            body,
            message_id: self.new_message_id(),
            hop: task.hop + 1,
            in_reply_to: Some(task.message_id.clone()),
            mode: "queue".into(),
            only: Some(sender),
            scope: "a denial notice".into(),
            only_spool: task.sender.name.clone().zip(task.sender.workspace.clone()),
        };
        self.spawn_send(out, Some(task.message_id.clone()), None);
    }

    fn decide(&mut self, message_id: &str, decision: &str, by: &Decider) -> Value {
        if self.asked.remove(message_id).is_none() {
            return json!({"status": "invalid", "message_id": message_id,
                          "reason": format!("no task {} is waiting for approval", escape(message_id))});
        }
        self.requests.retain(|_, m| m != message_id);
        self.hub.emit(
            "approval.resolved",
            json!({"message_id": message_id, "decision": decision, "by": by.kind,
                   "by_pid": by.pid}),
        );
        if decision == "approve" {
            self.approved.insert(message_id.to_string());
            json!({"status": "approved", "message_id": message_id})
        } else {
            self.deny(message_id, by);
            json!({"status": "denied", "message_id": message_id})
        }
    }

    /// `approval/respond`, from the connection of peer `pid`.
    pub(super) fn approval_respond(
        &mut self,
        params: &Map<String, Value>,
        pid: Option<u32>,
    ) -> std::result::Result<Value, RpcError> {
        // A tool call (`permission/ask`) is named by its `request_id`.
        let tool_call = params.contains_key("request_id") && !params.contains_key("message_id");
        let key = if tool_call {
            "request_id"
        } else {
            "message_id"
        };
        let id = str_param(params, key)?;
        let decision = str_param(params, "decision")?;
        let by = super::opt_str_param(params, "by")?;
        if !matches!(decision.as_str(), "approve" | "deny") {
            return Ok(json!({"status": "invalid", key: id,
                             "reason": "decision is not approve or deny"}));
        }
        if by.as_deref().is_some_and(|b| !valid_by(b)) {
            return Ok(json!({"status": "invalid", key: id,
                             "reason": "by must be 1 to 32 ASCII letters, digits, '-', '_', '.' or spaces"}));
        }
        let by = Decider {
            kind: by.unwrap_or_else(|| "approval/respond".into()),
            pid,
        };
        Ok(match tool_call {
            true => self.decide_permission(&id, &decision, &by),
            false => self.decide(&id, &decision, &by),
        })
    }

    /// A controller answered an `approval/request`, on the connection of
    /// peer `pid`. A `by` that is not a valid kind is ignored: a reply
    /// gets no answer to say so in.
    pub(super) fn client_reply(&mut self, reply: &Map<String, Value>, pid: Option<u32>) {
        let Some(rid) = reply.get("id").and_then(Value::as_str) else {
            return;
        };
        let (subject, tool_call) = match (self.permission_requests.get(rid), self.requests.get(rid))
        {
            (Some(r), _) => (r.clone(), true),
            (None, Some(m)) => (m.clone(), false),
            (None, None) => return,
        };
        let result = reply.get("result");
        let decision = result
            .and_then(|r| r.get("decision"))
            .and_then(Value::as_str);
        let kind = result
            .and_then(|r| r.get("by"))
            .and_then(Value::as_str)
            .filter(|b| valid_by(b))
            .unwrap_or("approval/request")
            .to_string();
        let by = Decider { kind, pid };
        match decision {
            Some(d @ ("approve" | "deny")) if tool_call => {
                self.decide_permission(&subject, d, &by);
            }
            Some(d @ ("approve" | "deny")) => {
                self.decide(&subject, d, &by);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_keeps_five_lines_and_cuts_long_ones() {
        let body = format!("{}\n2\n3\n4\n5\n6\n7\n", "x".repeat(250));
        let (text, lines) = excerpt(&body);
        assert_eq!(lines, 7);
        assert_eq!(text, format!("{}…\n2\n3\n4\n5", "x".repeat(200)));
        assert_eq!(excerpt("one"), ("one".to_string(), 1));
    }

    #[test]
    fn by_is_a_short_plain_kind() {
        assert!(valid_by("watch"));
        assert!(valid_by("view"));
        assert!(!valid_by(""));
        assert!(!valid_by("  "));
        assert!(!valid_by("a\x1bb"));
        assert!(!valid_by(&"w".repeat(33)));
    }
}
