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

use super::{Answer, Foreground, Params, answer};
use crate::registry;
use crate::spool::{Claim, Whereabouts};
use crate::text::sanitize::escape;
use crate::wire::answer::Handled;
use crate::wire::request::ReceivedParams;
use crate::wire::{Handling, Outcome};
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
        let ReceivedParams {
            in_reply_to: of,
            message_id: id,
        } = ReceivedParams::read(params)?;
        let handled = |status, reason| Handled::new(status, Some(&id), reason);
        let ended = |outcome: Option<Outcome>| Handled {
            outcome: Some(outcome.map(Into::into)),
            ..handled(Handling::Ended, None)
        };
        if !registry::valid_id(&id) || !registry::valid_id(&of) {
            let why = crate::server::reason::BAD_MESSAGE_ID.to_string();
            return answer(handled(Handling::Invalid, Some(why)));
        }
        let h = match self.spool().whereabouts(&id) {
            Whereabouts::Queued(_) => match self.answers(&id) {
                Some(o) if o == of => self.record_received(&id, &of),
                _ => {
                    let why = format!("task {} is not a reply to {}", escape(&id), escape(&of));
                    handled(Handling::Invalid, Some(why))
                }
            },
            Whereabouts::Unknown => {
                self.expected.expect(id.clone(), of);
                handled(Handling::Expected, None)
            }
            Whereabouts::Processing | Whereabouts::Interrupted => {
                handled(Handling::HandedOut, None)
            }
            Whereabouts::Finished(r) => ended(r.map(|r| r.outcome)),
            Whereabouts::Expired => ended(Some(Outcome::Expired)),
            Whereabouts::Rejected(_) => ended(Some(Outcome::Rejected)),
        };
        answer(h)
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
        let h = self.record_received(id, &of);
        h.status == Handling::Received
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
    fn record_received(&mut self, id: &str, of: &str) -> Handled {
        self.expected.forget(id);
        if let Some(p) = self.asked.remove(id) {
            self.requests.retain(|_, a| *a != p.id);
        }
        self.approved.remove(id);
        let failed = |e: crate::base::error::Error| {
            Handled::new(Handling::Error, Some(id), Some(e.to_string()))
        };
        match self.spool().claim_id(id) {
            Ok(Claim::Task(_)) => {}
            Ok(_) => return Handled::new(Handling::HandedOut, Some(id), None),
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
        self.ended(id, Outcome::Received, None, None);
        Handled::new(Handling::Received, Some(id), None)
    }
}
