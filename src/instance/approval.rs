//! No task from a peer runs, and no pull agent is handed one, before the
//! approval policy (`--approve`) let it go: under `ask` it waits until a
//! controller or `approval/respond` approves it, under `deny` it is ended
//! as refused. The operator's own input (`turn/local`) needs no approval.
//! A request carries what the operator decides on (sender, mode, the
//! body's first lines and size); a decision names who made it; a sender
//! that is an instance is told of a denial by a reply.
//!
//! Every approval that waits, a task's or a tool call's (`permission.rs`),
//! is a `Pending`: an id the instance chose and the digest of what it
//! shows. An answer names both, so it decides only the text its
//! controller was shown: a request id a host or sender chose can be asked
//! again with other text, an `ask-<n>` cannot.

use super::outbound::back_to;
use super::{Answer, Approve, Foreground, Params, answer, is_local};
use crate::spool::{self, Claim, Task};
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::request::{
    ApprovalListParams, ApprovalsShown, ControllerReply, Decided, RespondParams, Shown, TaskShown,
};
use crate::wire::{Decision, Handling, Outcome, Said};
use crate::workers::turn;
use serde_json::Value;

/// What the approval policy says of a queued task.
pub(super) enum Gate {
    Go,
    Wait,
    Denied,
    /// A reply its sender already got (`received`): recorded, not run.
    Received,
}

/// The longest kind a client may declare in `by`.
const MAX_BY: usize = 32;

/// An approval that waits: its id (`ask-<n>`, given once in the
/// instance's life), the digest of what it shows, and the params of its
/// `approval/request`s (what it shows, with the id and the digest).
pub(super) struct Pending {
    pub(super) id: String,
    digest: String,
    pub(super) params: Shown,
}

/// What an approval waits on, found by its id.
enum Subject {
    Task(String),
    /// The index in `permissions`.
    Tool(usize),
}

/// The digest of what an approval shows: SHA-256, in hex, of its members
/// as compact JSON with the keys in order (`serde_json`'s `Map` is
/// sorted), so that a controller can compute it from the request too.
fn digest_of(shown: &impl serde::Serialize) -> String {
    crate::base::digest::sha256_hex(&serde_json::to_vec(shown).expect("serializes"))
}

/// Who decided on a task: the kind of client, as it declared it (else the
/// way it answered), and the connection's peer pid from the kernel.
pub(super) struct Decider {
    pub(super) kind: String,
    pub(super) pid: Option<u32>,
}

/// Whether `s` is 1 to `max` ASCII letters, digits or characters of
/// `also`, not only spaces: a client's declared kind (`watch`, `view`,
/// `mcp`, ...: 1 to 32, `also` `-_. `), a host's request id (1 to 64,
/// `also` `-_`).
pub(super) fn plain(s: &str, max: usize, also: &str) -> bool {
    !s.trim().is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || also.contains(c))
}

/// The first lines of a body (`event_text::first_lines`), and how many
/// lines it has in all.
fn excerpt(body: &str) -> (String, usize) {
    let first = crate::wire::event_text::first_lines(body);
    (first.join("\n"), body.lines().count())
}

/// What an approval request and its event say of a queued task: its
/// summary, and its first lines and its body's SHA-256 where its file
/// reads back (protocol.md, `approval/request`). The SHA-256 is there so
/// that the digest an answer names covers the whole body, not only the
/// lines shown (`approval/list` gives the rest to read).
fn context(s: &spool::Summary, task: Option<&Task>) -> Shown {
    let (sender, mode) = task.map_or((&s.sender, &s.mode), |t| (&t.sender, &t.mode));
    let mut v = TaskShown {
        approval_id: None,
        body: None,
        body_sha256: None,
        bytes: s.bytes,
        digest: None,
        excerpt: None,
        from: turn::display_name(sender),
        kind: None,
        lines: None,
        message_id: s.message_id.clone(),
        mode: *mode,
        pid: sender.pid,
        sender_name: sender.name.clone(),
        workspace: sender.workspace.clone(),
    };
    if let Some(t) = task {
        let (text, lines) = excerpt(&t.body);
        v.bytes = t.body.len();
        v.lines = Some(lines);
        v.excerpt = Some(text);
        // Checked against the body each time the task file is read.
        v.body_sha256 = Some(t.digest.clone());
    }
    Shown::Task(v)
}

/// The number in an approval's id (`ask-<n>`), for the oldest first.
fn number(p: &Pending) -> u64 {
    p.id.strip_prefix("ask-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
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
                Gate::Denied | Gate::Received => {}
            }
        }
    }

    /// Applies `--approve` to one queued task: it may go, it waits for an
    /// approval (asked for once), or it was refused and ended.
    pub(super) fn gate(&mut self, task: &spool::Summary) -> Gate {
        let id = &task.message_id;
        if self.received_on_arrival(id) {
            return Gate::Received;
        }
        if is_local(&task.sender) {
            // The operator typed it: there is no one else to ask.
            return Gate::Go;
        }
        match self.opts.approve {
            Approve::Auto => Gate::Go,
            Approve::Ask if self.approved.contains(id) => Gate::Go,
            Approve::Ask => {
                if !self.asked.contains_key(id) {
                    let full = self.spool().queued_task(id);
                    let shown = context(task, full.as_ref());
                    let (p, _) = self.ask(|p| Body::ApprovalRequested(p), shown);
                    self.asked.insert(id.clone(), p);
                }
                Gate::Wait
            }
            Approve::Deny => {
                let policy = Decider {
                    kind: "--approve deny".into(),
                    pid: None,
                };
                self.deny(id, &policy);
                Gate::Denied
            }
        }
    }

    /// A new approval of what `shown` shows, recorded as a `kind` event
    /// (`Body::ApprovalRequested` or `Body::PermissionRequested`)
    /// and asked of every controller: it, and how many were asked. Its id
    /// and digest are added to the params its requests and its event carry.
    pub(super) fn ask(&mut self, kind: fn(&Value) -> Body<'_>, shown: Shown) -> (Pending, usize) {
        let id = format!("ask-{}", self.next_approval);
        self.next_approval += 1;
        let digest = digest_of(&shown);
        let params = shown.with_id(&id, &digest);
        self.hub.emit(kind(&params.to_value()));
        let asked = self.send_request(&id, &params, None);
        (Pending { id, digest, params }, asked)
    }

    /// Asks every controller, or only the one subscriber `only`, to decide
    /// on the approval `approval_id`; how many were asked.
    pub(super) fn send_request(
        &mut self,
        approval_id: &str,
        params: &Shown,
        only: Option<u64>,
    ) -> usize {
        let rid = format!("approval-{}", self.next_request);
        self.next_request += 1;
        // A request, not a notification: it carries an id the reply names.
        let bytes = crate::wire::request_line(rid.as_str(), "approval/request", params.to_value());
        let n = self.hub.send_to_controllers(&bytes, only);
        if n > 0 {
            self.requests.insert(rid, approval_id.to_string());
        }
        n
    }

    /// A controller that subscribes late still hears of every approval
    /// that waits; the others were asked already.
    pub(super) fn ask_late_controller(&mut self, sub_id: u64) {
        let waiting: Vec<(String, Shown)> = (self.asked.values())
            .chain(&self.permissions)
            .map(|p| (p.id.clone(), p.params.clone()))
            .collect();
        for (id, params) in waiting {
            self.send_request(&id, &params, Some(sub_id));
        }
    }

    /// Claims a queued task and ends it as refused by the approval policy.
    fn deny(&mut self, message_id: &str, by: &Decider) {
        if let Some(p) = self.asked.remove(message_id) {
            self.requests.retain(|_, a| *a != p.id);
        }
        self.approved.remove(message_id);
        let claimed = self.spool().claim_id(message_id).and_then(|c| match c {
            Claim::Task(task) => {
                (self.spool().finish(message_id, Outcome::Denied)).map(|()| Some(task))
            }
            _ => Ok(None),
        });
        let task = claimed.unwrap_or_else(|e| {
            self.notice(None, e.to_string());
            None
        });
        self.hub.emit(Body::TaskDenied {
            by: &by.kind,
            by_pid: by.pid,
            message_id,
        });
        if let Some(task) = task {
            self.ended(message_id, Outcome::Denied, None, None);
            self.tell_denied(&task, by);
        }
    }

    /// A sender that is an instance learns of a denial as a reply to the
    /// denied task, as `--reply` would send one (docs/decisions.md). A
    /// task that is itself a reply gets none, so two instances that deny
    /// each other's notices cannot loop.
    fn tell_denied(&mut self, task: &Task, by: &Decider) {
        let sender = task.sender.instance_id.clone();
        let Some(sender) = sender.filter(|_| task.in_reply_to.is_none()) else {
            return;
        };
        let body = format!(
            "baton: task {} was denied by {} at {}; it did not run.\n",
            task.message_id,
            crate::wire::event_text::decided_by(&by.kind, by.pid),
            self.origin.name
        );
        let id = self.new_message_id();
        let out = back_to(task, &sender, body, id, "a denial notice".into());
        self.spawn_send(out, Some(task.message_id.clone()), None);
    }

    /// A decision on the approval `approval_id`, taken only when `digest`
    /// is that of what it shows: an answer for other text decides nothing
    /// (`Err`: why). A task's decision names the task; a tool call's is
    /// recorded for `baton mcp` to pass on, by the host's request id.
    fn decide_approval(
        &mut self,
        approval_id: &str,
        digest: &str,
        decision: Decision,
        by: &Decider,
    ) -> Result<Decided, String> {
        // What waits under `approval_id`, and whether `digest` is that of
        // what it shows.
        let task = (self.asked.iter().find(|(_, p)| p.id == approval_id))
            .map(|(m, p)| (Subject::Task(m.clone()), p.digest == digest));
        let found = task.or_else(|| {
            let at = self.permissions.iter().position(|p| p.id == approval_id)?;
            Some((Subject::Tool(at), self.permissions[at].digest == digest))
        });
        let subject = match found {
            None => return Err(format!("no approval {} is waiting", escape(approval_id))),
            Some((_, false)) => {
                return Err(format!(
                    "digest does not match what approval {approval_id} shows"
                ));
            }
            Some((subject, true)) => subject,
        };
        self.requests.retain(|_, a| a != approval_id);
        let (by_kind, by_pid) = (&by.kind, by.pid);
        let said = Said::spelled(decision.as_str());
        let approved = decision == Decision::Approve;
        let (message_id, request_id) = match subject {
            Subject::Task(m) => {
                self.asked.remove(&m);
                self.hub.emit(Body::ApprovalResolved {
                    approval_id,
                    by: by_kind,
                    by_pid,
                    decision: said,
                    message_id: &m,
                });
                if approved {
                    self.approved.insert(m.clone());
                } else {
                    self.deny(&m, by);
                }
                (Some(m), None)
            }
            Subject::Tool(at) => {
                let p = self.permissions.remove(at);
                let request_id = p.params.request_id().unwrap_or_default().to_string();
                self.hub.emit(Body::PermissionResolved {
                    approval_id,
                    by: by_kind,
                    by_pid,
                    decision: said,
                    request_id: &request_id,
                });
                (None, Some(request_id))
            }
        };
        let status = match approved {
            true => Handling::Approved,
            false => Handling::Denied,
        };
        Ok(Decided {
            approval_id: approval_id.to_string(),
            message_id,
            reason: None,
            request_id,
            status,
        })
    }

    /// `approval/list`: the approvals that wait, oldest first, each as its
    /// `approval/request` shows it (`kind`: `task` or `tool`); with
    /// `full`, a task's whole body too, read from its file. `approval_id`
    /// keeps that one only.
    pub(super) fn approval_list(&mut self, params: &Params) -> Answer {
        let ApprovalListParams { approval_id, full } = ApprovalListParams::read(params)?;
        let mut waiting: Vec<&Pending> = (self.asked.values())
            .chain(&self.permissions)
            .filter(|p| approval_id.as_ref().is_none_or(|id| *id == p.id))
            .collect();
        waiting.sort_by_key(|p| number(p));
        let listed: Vec<Shown> = waiting.into_iter().map(|p| p.params.clone()).collect();
        let full = full == Some(true);
        let approvals = (listed.iter())
            .map(|p| p.listed(full, |m| self.spool().queued_task(m).map(|t| t.body)))
            .collect();
        answer(ApprovalsShown { approvals })
    }

    /// `approval/respond`, from the connection of peer `pid`.
    pub(super) fn approval_respond(&mut self, params: &Params, pid: Option<u32>) -> Answer {
        let p = RespondParams::read(params)?;
        let approval_id = p.approval_id;
        let invalid = |reason: &str| answer(Decided::invalid(&approval_id, reason));
        let Said::Known(decision) = p.decision else {
            return invalid("decision is not approve or deny");
        };
        if p.by.as_deref().is_some_and(|b| !plain(b, MAX_BY, "-_. ")) {
            return invalid("by must be 1 to 32 ASCII letters, digits, '-', '_', '.' or spaces");
        }
        let by = Decider {
            kind: p.by.unwrap_or_else(|| "approval/respond".into()),
            pid,
        };
        let digest = p.digest.as_str().unwrap_or_default();
        match self.decide_approval(&approval_id, digest, decision, &by) {
            Ok(decided) => answer(decided),
            Err(why) => invalid(&why),
        }
    }

    /// A controller answered an `approval/request`, on the connection of
    /// peer `pid`. A reply gets no answer: one without a decision is
    /// dropped, and one that decides nothing (its digest is missing or is
    /// not that of what waits) is said in a notice. A `by` that is not a
    /// valid kind is ignored.
    pub(super) fn client_reply(&mut self, reply: &Params, pid: Option<u32>) {
        let r = ControllerReply::read(reply);
        let Some(rid) = r.id else {
            return;
        };
        let Some(approval_id) = self.requests.get(&rid).cloned() else {
            return;
        };
        let Some(Ok(decision)) = r.decision.map(|d| d.parse::<Decision>()) else {
            return;
        };
        let kind = (r.by.filter(|b| plain(b, MAX_BY, "-_. ")))
            .unwrap_or_else(|| "approval/request".into());
        let by = Decider { kind, pid };
        let decided = match r.digest {
            Some(digest) => self.decide_approval(&approval_id, &digest, decision, &by),
            None => Err("digest is missing".into()),
        };
        if let Err(why) = decided {
            self.notice(None, format!("a reply to {rid} decided nothing: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn excerpt_keeps_five_lines_and_cuts_long_ones() {
        let body = format!("{}\n2\n3\n4\n5\n6\n7\n", "x".repeat(250));
        let (text, lines) = excerpt(&body);
        assert_eq!(lines, 7);
        assert_eq!(text, format!("{}…\n2\n3\n4\n5", "x".repeat(200)));
        assert_eq!(excerpt("one"), ("one".to_string(), 1));
    }

    #[test]
    fn the_digest_is_of_what_is_shown_with_the_keys_in_order() {
        let shown = json!({"tool_name": "Bash", "request_id": "bbbbb"});
        let canonical = br#"{"request_id":"bbbbb","tool_name":"Bash"}"#;
        assert_eq!(
            digest_of(&shown),
            crate::base::digest::sha256_hex(canonical)
        );
        let other = json!({"tool_name": "Read", "request_id": "bbbbb"});
        assert_ne!(digest_of(&shown), digest_of(&other));
    }

    #[test]
    fn by_is_a_short_plain_kind() {
        let valid_by = |s: &str| plain(s, MAX_BY, "-_. ");
        assert!(valid_by("watch"));
        assert!(valid_by("view"));
        assert!(!valid_by(""));
        assert!(!valid_by("  "));
        assert!(!valid_by("a\x1bb"));
        assert!(!valid_by(&"w".repeat(33)));
    }
}
