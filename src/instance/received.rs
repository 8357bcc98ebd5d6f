//! A reply is handed over once (docs/protocol.md, `inbox/received`): a
//! front end that waited for a task of ours and printed or returned its
//! reply (`baton send --wait`, MCP's `wait_seconds`) says so, and the
//! reply, which is also a task in our queue, is finished as `received`
//! instead of being handed out as new work. A reply that has not arrived
//! yet is expected: it is recorded as received when it is about to be
//! handed out, or as soon as the foreground looks at the queue. The
//! expectation is kept in memory only, `EXPECTED_KEPT` at most: after a
//! restart, or past the bound, the reply is handed out as ordinary work
//! (once more, never lost).

use super::{Answer, Foreground, Params, need_str};
use crate::registry;
use crate::spool::{Claim, Whereabouts};
use crate::text::sanitize::escape;
use crate::wire::Outcome;
use serde_json::{Value, json};
use std::collections::VecDeque;

/// Replies expected at most; the oldest expectation goes first.
pub const EXPECTED_KEPT: usize = 1024;

/// Replies expected to arrive, each with the task it answers.
#[derive(Default)]
pub(super) struct Expected {
    ids: VecDeque<(String, String)>,
}

impl Expected {
    pub(super) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn expect(&mut self, id: String, of: String) {
        if self.ids.iter().any(|(i, _)| *i == id) {
            return;
        }
        if self.ids.len() >= EXPECTED_KEPT {
            self.ids.pop_front();
        }
        self.ids.push_back((id, of));
    }

    /// The task the reply `id` answers, if it is expected.
    fn answering(&self, id: &str) -> Option<&str> {
        let found = self.ids.iter().find(|(i, _)| i == id);
        found.map(|(_, of)| of.as_str())
    }

    fn forget(&mut self, id: &str) {
        self.ids.retain(|(i, _)| i != id);
    }
}

impl Foreground {
    /// `inbox/received {message_id, in_reply_to}`.
    pub(super) fn received(&mut self, params: &Params) -> Answer {
        let id = need_str(params, "message_id")?;
        let of = need_str(params, "in_reply_to")?;
        let answer = |status: &str| json!({"status": status, "message_id": id});
        if !registry::valid_id(&id) || !registry::valid_id(&of) {
            let mut v = answer("invalid");
            v["reason"] = json!(crate::server::reason::BAD_MESSAGE_ID);
            return Ok(v);
        }
        Ok(match self.spool().whereabouts(&id) {
            Whereabouts::Queued(_) => match self.answers(&id) {
                Some(o) if o == of => self.record_received(&id, &of),
                _ => {
                    let mut v = answer("invalid");
                    v["reason"] = json!(format!(
                        "task {} is not a reply to {}",
                        escape(&id),
                        escape(&of)
                    ));
                    v
                }
            },
            Whereabouts::Unknown => {
                self.expected.expect(id.clone(), of);
                answer("expected")
            }
            Whereabouts::Processing | Whereabouts::Interrupted => answer("handed_out"),
            Whereabouts::Finished(r) => {
                let mut v = answer("ended");
                v["outcome"] = json!(r.map(|r| r.outcome));
                v
            }
            Whereabouts::Expired => ended(answer("ended"), Outcome::Expired),
            Whereabouts::Rejected(_) => ended(answer("ended"), Outcome::Rejected),
        })
    }

    /// The task a queued task answers (`in_reply_to`), read back.
    fn answers(&self, id: &str) -> Option<String> {
        self.spool().queued_task(id)?.in_reply_to
    }

    /// Whether the queued task `id` is an expected reply, which is then
    /// recorded as received: the caller hands out the next task instead.
    pub(super) fn received_on_arrival(&mut self, id: &str) -> bool {
        let Some(of) = self.expected.answering(id).map(str::to_string) else {
            return false;
        };
        if self.answers(id).as_deref() != Some(&*of) {
            return false;
        }
        let v = self.record_received(id, &of);
        v["status"] == "received"
    }

    /// Records every expected reply that is queued now.
    pub(super) fn settle_received(&mut self) {
        if self.expected.is_empty() {
            return;
        }
        let queued: Vec<String> = (self.expected.ids.iter())
            .filter(|(id, _)| self.spool().is_queued(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in queued {
            self.received_on_arrival(&id);
        }
    }

    /// Finishes the queued reply `id` (to `of`) as received, with a
    /// receipt; a spool that fails leaves it queued.
    fn record_received(&mut self, id: &str, of: &str) -> Value {
        self.expected.forget(id);
        if let Some(p) = self.asked.remove(id) {
            self.requests.retain(|_, a| *a != p.id);
        }
        self.approved.remove(id);
        let failed = |e: crate::base::error::Error| json!({"status": "error", "message_id": id, "reason": e.to_string()});
        match self.spool().claim_id(id) {
            Ok(Claim::Task(_)) => {}
            Ok(_) => return json!({"status": "handed_out", "message_id": id}),
            Err(e) => return failed(e),
        }
        if let Err(e) = self.spool().finish(id, Outcome::Received) {
            let _ = self.spool().unclaim(id);
            return failed(e);
        }
        self.notice(
            Some(id),
            format!(
                "reply {} to {} reached its sender through a wait: recorded as received, not handed out",
                escape(id),
                escape(of)
            ),
        );
        self.ended(id, Outcome::Received, None);
        json!({"status": "received", "message_id": id})
    }
}

fn ended(mut v: Value, outcome: Outcome) -> Value {
    v["outcome"] = json!(outcome);
    v
}
