//! The foreground answers every event and call without blocking: what
//! takes time (a pause settling, a send, a handler) is waited for on a
//! helper thread that reports back on a channel of the loop. Here the
//! events are dispatched, the calls answered, the state recomputed and
//! published, and the timers armed.

use super::{Answer, Approve, EPHEMERAL_GRACE, Foreground, Params, Reply};
use crate::registry;
use crate::server::{Event, State};
use crate::spool::{self, Spool};
use crate::wire::Body;
use crate::wire::Call;
use crate::wire::Handling;
use crate::wire::Mode;
use crate::wire::Outcome;
use crate::wire::access::Caller;
use crate::wire::answer::{ControlStatus, Handled, Paused, Queue, RunningTurn};
use crate::wire::body::Notice;
use crate::wire::request::{ListParams, Page};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a pause waits for acceptances already past their checks to be
/// stored (each takes one file sync and one directory sync). The one wait
/// the foreground may make itself (when no settle thread can be started):
/// it stays below the time a connection thread, and `baton pause`, wait
/// for the answer.
const SETTLE_WAIT: Duration = Duration::from_secs(4);
const _: () = assert!(SETTLE_WAIT.as_millis() < crate::server::ANSWER_WAIT_MIN.as_millis());

/// The tasks an `inbox/list` page holds when `limit` does not say (fewer
/// when they would make its result longer than `LIST_RESULT_BYTES`).
const LIST_LIMIT: usize = 1000;
/// The most an `inbox/list` result holds, in bytes as it is written: its
/// summaries and ids stop this much short, which leaves room for the
/// members' names and `next`.
const LIST_RESULT_BYTES: usize = 1024 * 1024;
const LIST_ROOM: usize = 1024;
/// The order `inbox/list` pages walk the places in: a claim, an expiry
/// and a requeue move a task to an earlier place, so a task that is not
/// yet listed cannot move back past the page's end, and a moved `after`
/// makes tasks be listed again, not skipped.
const LIST_ORDER: [&str; 4] = ["processing", "rejected", "interrupted", "queued"];

/// The bytes `v` takes as a page writes it.
fn written(v: &impl serde::Serialize) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// A `control/pause` whose earlier acceptances are stored: it can be
/// answered.
pub(super) struct Settled {
    reply: Reply,
    changed: bool,
}

impl Foreground {
    /// Tells connection threads whether a newly accepted task would make
    /// the foreground act: start a turn, put it to the approval policy, or
    /// arm the `--ttl` timer. A running turn or a pause ends with a look
    /// at the queue anyway.
    pub(super) fn publish_wait(&self) {
        let waits = self.opts.ttl.is_some()
            || !self.expected.is_empty()
            || (self.running.is_none()
                && !self.paused()
                && (self.opts.exec.is_some()
                    || self.opts.tmux_pane.is_some()
                    || self.opts.codex.is_some()
                    || self.opts.approve != Approve::Auto));
        self.shared.wake_on_accept.store(waits, Ordering::SeqCst);
    }

    /// Publishes how many approvals wait, a task's or a tool call's, for
    /// `ping` to say (`list`). Every change of them is made by an event
    /// the loop handles, and the loop publishes before it waits again.
    pub(super) fn publish_approvals(&self) {
        let n = self.asked.len() + self.permissions.len();
        self.shared.approvals.store(n, Ordering::SeqCst);
    }

    pub(super) fn spool(&self) -> &Spool {
        &self.shared.spool
    }

    pub(super) fn paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// A `notice`, of the task `id` or of the instance's own.
    pub(super) fn notice(&self, id: Option<&str>, text: impl Into<String>) {
        self.hub.emit(Body::Notice(Notice {
            message_id: id,
            text: &text.into(),
            ..Notice::default()
        }));
    }

    pub(super) fn new_message_id(&mut self) -> String {
        let n = self.next_out;
        self.next_out += 1;
        format!("{}-{n}", self.shared.instance_id)
    }

    /// Recomputes the state; publishes the manifest and an event when it
    /// changed. Waiting for an approval is not busy.
    pub(super) fn refresh(&mut self) {
        let want = if self.paused() {
            State::Paused
        } else if self.running.is_some() || !self.open.is_empty() {
            State::Busy
        } else {
            State::Ready
        };
        if want == self.shared.state() {
            return;
        }
        self.shared.set_state(want);
        let m = self.shared.lock_manifest().clone();
        if let Err(e) = registry::publish(&self.origin.registry, &m) {
            eprintln!("baton: {}", crate::text::sanitize::escape(&e.to_string()));
        }
        if let Some((zdir, zsock)) = &self.zcoder {
            let z = registry::zcoder_manifest(&m, zsock);
            if let Err(e) = registry::publish_value(zdir, &m.instance_id, &z) {
                eprintln!("baton: {}", crate::text::sanitize::escape(&e.to_string()));
            }
        }
        self.hub.emit(Body::StateChanged { state: want });
    }

    /// The earliest moment a timer must fire.
    pub(super) fn next_timer(&self) -> Option<Instant> {
        let mut at: Vec<Instant> = Vec::new();
        if let Some(r) = &self.running {
            at.extend(r.deadline.filter(|_| r.ended_by.is_none()));
            at.extend(r.kill_at);
            at.extend(r.drain_until);
        }
        if self.opts.ephemeral {
            at.extend(self.idle_since.map(|t| t + EPHEMERAL_GRACE));
        }
        at.extend(self.retry_at());
        at.extend(self.pane_timer());
        at.extend(self.codex_timer());
        // Only with --ttl: finding the oldest task walks the whole queue,
        // and this runs at every turn of the foreground loop.
        let ttl_due = self
            .opts
            .ttl
            .and_then(|ttl| Some(self.spool().oldest_queued()? + ttl.as_secs()));
        if let Some(due) = ttl_due {
            let left = due.saturating_sub(spool::now_secs());
            at.push(Instant::now() + Duration::from_secs(left) + Duration::from_millis(10));
        }
        at.into_iter().min()
    }

    /// `--ttl`: sets aside what waited too long, visibly.
    pub(super) fn expire(&mut self) {
        let Some(ttl) = self.opts.ttl else {
            return;
        };
        for id in self.shared.spool.expire(ttl.as_secs()) {
            self.asked.remove(&id);
            self.approved.remove(&id);
            self.hub.emit(Body::TaskExpired {
                message_id: &id,
                reason: Outcome::Expired.as_str(),
                text: &format!(
                    "waited longer than --ttl {} s; moved to rejected/",
                    ttl.as_secs()
                ),
            });
            self.ended(&id, Outcome::Expired, None, None);
        }
    }

    /// Handles due timers; true when an ephemeral instance should stop.
    pub(super) fn on_timer(&mut self) -> bool {
        self.expire();
        let now = Instant::now();
        self.turn_timers(now);
        self.opts.ephemeral
            && self.clients == 0
            && self.idle_since.is_some_and(|t| t + EPHEMERAL_GRACE <= now)
    }

    pub(super) fn handle(&mut self, ev: Event) {
        match ev {
            // The loop looks at the queue after every event.
            Event::Queued => {}
            Event::Flush => self.hub.flush(),
            Event::Call {
                method,
                params,
                reply,
                caller,
            } => self.call(method, &params, reply, &caller),
            Event::Subscribe { controller, reply } => {
                let sub = self.hub.subscribe(controller);
                let sub_id = sub.id;
                let _ = reply.send(sub);
                if controller {
                    self.ask_late_controller(sub_id);
                }
            }
            Event::Unsubscribe { id } => self.hub.unsubscribe(id),
            Event::ClientReply { reply, pid } => self.client_reply(&reply, pid),
            Event::Connected => {
                self.clients += 1;
                self.seen_client = true;
                self.idle_since = None;
            }
            Event::Disconnected => {
                self.clients = self.clients.saturating_sub(1);
                if self.clients == 0 && self.seen_client {
                    self.idle_since = Some(Instant::now());
                }
            }
            Event::Relayed { result, reply_of } => self.relayed(result, reply_of),
            Event::Undelivered { message_id, turn } => self.claim_undelivered(&message_id, &turn),
        }
    }

    /// Answers a call on `reply`: at once, or, for `relay/send`,
    /// `inbox/complete` with a reply and `control/pause`, once their helper
    /// thread reports.
    fn call(&mut self, method: Call, params: &Params, reply: Reply, caller: &Caller) {
        let answer = match method {
            Call::RelaySend => return self.relay_send(params, reply, caller),
            Call::ControlPause => return self.pause(reply),
            Call::ControlResume => {
                let changed = self.shared.paused.swap(false, Ordering::SeqCst);
                return self.answer_pause(Settled { reply, changed });
            }
            Call::ControlStatus => self.status(),
            Call::InboxList => self.inbox_list(params),
            Call::InboxClaim => return self.answer_claim(reply),
            Call::InboxComplete => return self.complete(params, reply),
            Call::InboxRequeue | Call::InboxDiscard => self.interrupted(method, params),
            Call::InboxReceived => self.received(params),
            Call::ApprovalRespond => self.approval_respond(params, caller.pid),
            Call::ApprovalList => self.approval_list(params),
            Call::TurnCancel => self.cancel(params),
            Call::TurnLocal => self.local(params),
            Call::TaskStatus => self.task_status(params, caller),
            Call::TaskCancel => self.task_cancel(params, caller),
            Call::PermissionAsk => self.permission_ask(params, caller.pid),
        };
        // A `list` after `baton approve` answered counts what it decided.
        self.publish_approvals();
        let _ = reply.send(answer);
    }

    /// `inbox/claim`. A task handed out to a caller that is gone (its
    /// connection thread stopped waiting, or it closed) goes back to the
    /// head of the queue: no one else could ever claim it.
    fn answer_claim(&mut self, reply: Reply) {
        let claimed = self.claim();
        let handed = (claimed.task.as_ref()).map(|t| (t.message_id.clone(), t.turn.clone()));
        let answer = super::answer(claimed);
        let _ = crate::base::failpoint::hit("claim-answer");
        if reply.send(answer).is_err() {
            if let Some((id, turn)) = handed {
                self.claim_undelivered(&id, &turn);
            }
        }
    }

    /// `control/pause`. The flag is set at once: from here on every offer
    /// is refused at its check (read under the spool's index lock), and no
    /// task is claimed or started. Offers that passed the check before it
    /// are still storing, and the pause is exact: it is answered only once
    /// they are stored and queued, so the queue it answers over holds
    /// exactly the tasks answered `accepted`. That wait (one file and one
    /// directory sync each, bounded by `SETTLE_WAIT`) is a helper thread's;
    /// the foreground goes on, and answers when it reports (`answer_pause`).
    /// Only when no thread can be started does the foreground wait itself.
    fn pause(&mut self, reply: Reply) {
        let changed = !self.shared.paused.swap(true, Ordering::SeqCst);
        let spool = Arc::clone(&self.shared.spool);
        let pauses = self.pauses_tx.clone();
        let settled = Settled {
            reply: reply.clone(),
            changed,
        };
        let spawned = crate::base::failpoint::hit("settle-spawn").and_then(|()| {
            std::thread::Builder::new()
                .name("baton-settle".into())
                .spawn(move || {
                    spool.settle(SETTLE_WAIT);
                    let _ = pauses.send(settled);
                })
        });
        if let Err(e) = spawned {
            // The last resort, the one wait the foreground makes itself:
            // bounded by SETTLE_WAIT, below every caller's answer wait.
            self.notice(None, format!("cannot start a settle thread: {e}"));
            self.spool().settle(SETTLE_WAIT);
            self.answer_pause(Settled { reply, changed });
        }
    }

    /// Answers a `control/pause` once the acceptances before it are stored
    /// (and a `control/resume` at once). The state is published here,
    /// after them, as when the foreground waited itself; a
    /// `control/resume` that came meanwhile wins, and the answer says so.
    pub(super) fn answer_pause(&mut self, settled: Settled) {
        self.refresh();
        let answer = Paused {
            changed: settled.changed,
            state: self.shared.state(),
        };
        let _ = settled.reply.send(super::answer(answer));
    }

    /// `inbox/list`: one page of the tasks after `after`, at most `limit`
    /// of them and `LIST_RESULT_BYTES` in all, with the next page's
    /// `after` in `next` (null on the last page).
    fn inbox_list(&self, params: &Params) -> Answer {
        let ListParams { after, limit } = ListParams::read(params)?;
        let limit = limit.map_or(LIST_LIMIT, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let l = self.spool().list();
        let mut tasks = [l.processing, l.rejected, l.interrupted, l.queued]
            .into_iter()
            .zip(LIST_ORDER)
            .flat_map(|(v, place)| v.into_iter().map(move |t| (place, t)));
        if let Some(id) = &after {
            if !tasks.any(|(_, t)| t.message_id == *id) {
                let why = format!(
                    "task {id} is not listed (it left the inbox): list again from the start"
                );
                let refused = Handled::new(Handling::Invalid, Some(id), Some(why));
                return super::answer(refused);
            }
        }
        let mut page = Page::default();
        let (mut bytes, mut taken, mut last) = (0, 0, None);
        for (place, t) in tasks {
            let asked = place == "queued" && self.asked.contains_key(&t.message_id);
            // Each with its comma; an id in `awaiting_approval` too.
            let mut size = written(&t) + 1;
            if asked {
                size += written(&t.message_id) + 1;
            }
            if taken == limit || (taken > 0 && bytes + size > LIST_RESULT_BYTES - LIST_ROOM) {
                page.next = last;
                break;
            }
            if asked {
                page.awaiting_approval.push(t.message_id.clone());
            }
            let id = t.message_id.clone();
            page.place_mut(place).push(t);
            (bytes, taken, last) = (bytes + size, taken + 1, Some(id));
        }
        super::answer(page)
    }

    fn status(&self) -> Answer {
        let m = self.shared.lock_manifest().clone();
        let c = self.spool().counts();
        let turn = self.running.as_ref().map(|r| RunningTurn {
            message_id: r.task.message_id.clone(),
            pid: r.handler.pid,
            seconds: r.started.elapsed().as_secs_f64(),
        });
        let exec = self.opts.exec.is_some();
        let status = ControlStatus {
            approve: self.opts.approve,
            awaiting_approval: self.asked.keys().cloned().collect(),
            instance_id: m.instance_id,
            mode: if exec { Mode::Exec } else { Mode::Pull },
            model: m.model,
            name: m.name,
            open_task: self.open.first().map(|o| o.task.message_id.clone()),
            paused: self.paused(),
            pid: m.pid,
            profile: m.profile,
            queue: Queue {
                interrupted: c.interrupted,
                max: self.shared.config.max_queue,
                processing: c.processing,
                queued: c.queued,
            },
            socket: m.socket,
            spool: self.spool().dir().display().to_string(),
            started_at: m.started_at,
            state: self.shared.state(),
            tmux_pane: self.opts.tmux_pane.clone(),
            tmux_wait: self.pane_wait(),
            codex: self.codex_status(),
            turn,
            workspace: m.workspace,
            operators: m.operators,
        };
        super::answer(status)
    }
}
