//! No task from a peer runs, and no pull agent is handed one, before the
//! approval policy (`--approve`) let it go: under `ask` it waits until a
//! controller or `approval/respond` approves it, under `deny` it is ended
//! as refused. The operator's own input (`turn/local`) needs no approval.

use super::{Approve, Foreground, is_local, str_param};
use crate::sanitize::escape;
use crate::server::RpcError;
use crate::spool::{self, Claim};
use crate::turn;
use serde_json::{Map, Value, json};

/// What the approval policy says of a queued task.
pub(super) enum Gate {
    Go,
    Wait,
    Denied,
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
                    self.hub.emit(
                        "approval.requested",
                        json!({"message_id": id, "from": turn::display_name(&task.sender),
                               "pid": task.sender.pid}),
                    );
                    self.send_approval_request(id, None);
                }
                Gate::Wait
            }
            Approve::Deny => {
                self.deny(id, "--approve deny");
                Gate::Denied
            }
        }
    }

    /// Asks every controller, or only the one subscriber `only`.
    pub(super) fn send_approval_request(&mut self, message_id: &str, only: Option<u64>) {
        let rid = format!("approval-{}", self.next_request);
        self.next_request += 1;
        // A request, not a notification: it carries an id the reply names.
        let bytes = crate::wire::request_line(
            rid.as_str(),
            "approval/request",
            json!({"message_id": message_id}),
        );
        if self.hub.send_to_controllers(&bytes, only) > 0 {
            self.requests.insert(rid.clone(), message_id.to_string());
            if let Some(v) = self.asked.get_mut(message_id) {
                v.push(rid);
            }
        }
    }

    /// Claims a queued task and ends it as refused by the approval policy.
    fn deny(&mut self, message_id: &str, by: &str) {
        self.asked.remove(message_id);
        self.approved.remove(message_id);
        let finished = match self.spool().claim_id(message_id) {
            Ok(Claim::Task(_)) => match self.spool().finish(message_id, "denied") {
                Ok(()) => true,
                Err(e) => {
                    self.hub.emit("notice", json!({"text": e.to_string()}));
                    false
                }
            },
            Ok(_) => false,
            Err(e) => {
                self.hub.emit("notice", json!({"text": e.to_string()}));
                false
            }
        };
        self.hub
            .emit("task.denied", json!({"message_id": message_id, "by": by}));
        if finished {
            self.ended(message_id, "denied", None);
        }
    }

    fn decide(&mut self, message_id: &str, decision: &str, by: &str) -> Value {
        if self.asked.remove(message_id).is_none() {
            return json!({"status": "invalid", "message_id": message_id,
                          "reason": format!("no task {} is waiting for approval", escape(message_id))});
        }
        self.requests.retain(|_, m| m != message_id);
        self.hub.emit(
            "approval.resolved",
            json!({"message_id": message_id, "decision": decision, "by": by}),
        );
        if decision == "approve" {
            self.approved.insert(message_id.to_string());
            json!({"status": "approved", "message_id": message_id})
        } else {
            self.deny(message_id, by);
            json!({"status": "denied", "message_id": message_id})
        }
    }

    pub(super) fn approval_respond(
        &mut self,
        params: &Map<String, Value>,
    ) -> std::result::Result<Value, RpcError> {
        let id = str_param(params, "message_id")?;
        let decision = str_param(params, "decision")?;
        if !matches!(decision.as_str(), "approve" | "deny") {
            return Ok(json!({"status": "invalid", "message_id": id,
                             "reason": "decision is not approve or deny"}));
        }
        Ok(self.decide(&id, &decision, "approval/respond"))
    }

    /// A controller answered an `approval/request`.
    pub(super) fn client_reply(&mut self, reply: &Map<String, Value>) {
        let Some(rid) = reply.get("id").and_then(Value::as_str) else {
            return;
        };
        let Some(message_id) = self.requests.get(rid).cloned() else {
            return;
        };
        let decision = reply
            .get("result")
            .and_then(|r| r.get("decision"))
            .and_then(Value::as_str);
        if let Some(d @ ("approve" | "deny")) = decision {
            self.decide(&message_id, d, "approval/request");
        }
    }
}
