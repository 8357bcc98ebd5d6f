//! What `baton mcp` tells its host unasked, once the host has sent
//! `notifications/initialized`. For each task that arrives for the
//! session's instance (and each that waited before the session began):
//!
//! - `notifications/claude/channel` (Claude Code's channel convention),
//!   whose `content` is the task's envelope, so that a host that honours
//!   it starts a turn with the task. Each task is pushed once a session.
//! - `notifications/message` at level `info`, a log line for hosts
//!   without channels, which then learn of the task at their next
//!   `check_inbox`.
//!
//! Both follow the instance's events (`message.accepted`): nothing polls.

use super::proto::{ChannelMeta, ChannelParams, LogParams};
use super::{Adapter, LEVELS, notify};
use crate::spool::{self, Sender, Task};
use crate::text::sanitize::escape;
use crate::wire::Summary;
use crate::wire::answer::InboxPage;
use crate::wire::event_text;
use crate::wire::{Call, Event, EventKind};
use crate::workers::turn;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};

/// The key of `capabilities.experimental` that makes the server a
/// channel for Claude Code.
pub const CHANNEL: &str = "claude/channel";
/// The notification that pushes a task.
const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// The severity of baton's log notifications (`info`).
const INFO: usize = 6;
/// How many waiting tasks a session is told of in log lines when it
/// starts (all of them are pushed on the channel).
const WAITING_NOTICES: usize = 20;
/// How many tasks one `inbox/list` page asks for.
const PAGE: usize = 100;

/// The ids of the tasks pushed this session: one is pushed once. An id
/// leaves the set when its task is claimed or ends, and the oldest leaves
/// past `cap` (the queue's bound), so the set stays as small as the queue.
pub struct Pushed {
    ids: HashSet<String>,
    order: VecDeque<String>,
    cap: usize,
}

impl Pushed {
    pub fn new(cap: usize) -> Pushed {
        Pushed {
            ids: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Records `id`; false if it was pushed already.
    fn first(&mut self, id: &str) -> bool {
        if !self.ids.insert(id.to_string()) {
            return false;
        }
        if self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
        self.order.push_back(id.to_string());
        true
    }

    fn forget(&mut self, id: &str) {
        if self.ids.remove(id) {
            self.order.retain(|o| o != id);
        }
    }
}

/// The task a `message.accepted` event describes, as its envelope shows
/// it: the event carries the body and the sender as recorded.
fn arrived(ev: &Event) -> Option<Task> {
    let from = ev.sender().unwrap_or("");
    // `from` is the sender's display name: its name, its instance id, or
    // `(cli)` for a command line and `(remote LABEL)` for a bridge, which
    // have neither.
    let plain = from == "(cli)" || ev.remote.is_some();
    let name = (ev.sender_id.is_some() || !plain).then(|| from.to_string());
    let sender = Sender {
        instance_id: ev.sender_id.clone(),
        name,
        workspace: ev.workspace.clone(),
        pid: ev.pid,
        remote: ev.remote.clone(),
        key: ev.key.clone(),
    };
    let mode = event_text::named(&ev.mode);
    let (id, body) = (ev.message_id.as_deref()?, ev.body.clone()?);
    Some(spool::new_task(id, body, sender, 0, None, &mode, None, ""))
}

/// What a push says: the envelope `check_inbox` gives, then how to take
/// and finish the task.
pub fn content(task: &Task) -> String {
    let replyable = task.sender.instance_id.is_some();
    let envelope = turn::envelope(task, replyable.then_some(turn::REPLY_BY_TOOL));
    format!(
        "{envelope}Take it with check_inbox (tasks come in queue order); when you are done, call complete_task with message_id \"{}\"{}.",
        task.message_id,
        super::reply_hint(replyable)
    )
}

impl Adapter {
    /// An event of the instance: a task that arrived is pushed and logged.
    pub(super) fn on_event(&mut self, msg: &Value) {
        let Some(ev) = Event::of_notification(msg) else {
            return;
        };
        match ev.kind {
            Some(EventKind::MessageAccepted) => {
                // A reply a wait already returned is no new task.
                let task = arrived(&ev).filter(|t| !self.got_by_wait(&t.message_id));
                if let Some(task) = task {
                    self.push(&task);
                }
                if let Some(news) = event_text::said(&ev).to_host {
                    self.log_info(ev.time, news);
                }
            }
            Some(EventKind::TaskClaimed | EventKind::TaskEnded) => {
                if let Some(id) = &ev.message_id {
                    self.pushed.forget(id);
                }
            }
            Some(EventKind::PermissionResolved) => self.permission_resolved(&ev),
            _ => {}
        }
    }

    /// Pushes a task on the channel, once, if the host is ready.
    fn push(&mut self, task: &Task) {
        if !self.notifying || !self.pushed.first(&task.message_id) {
            return;
        }
        let from = turn::display_name(&task.sender);
        let params = ChannelParams {
            content: content(task),
            meta: ChannelMeta {
                from,
                message_id: task.message_id.clone(),
            },
        };
        notify(CHANNEL_METHOD, params);
    }

    /// The host sent `notifications/initialized`: the tasks that waited
    /// before, which no event announced, are pushed (all) and logged (the
    /// first `WAITING_NOTICES`), in queue order.
    pub(super) fn announce_waiting(&mut self) {
        let mut after: Option<String> = None;
        let mut logged = 0;
        loop {
            let params = crate::wire::request::ListParams {
                after: after.clone(),
                limit: Some(PAGE as u64),
            };
            let listed = match self.call::<InboxPage>(Call::InboxList, params) {
                Ok((_, l)) if l.status.is_none() => l,
                refused => {
                    let why = refused.map_or_else(|e| e.to_string(), |(raw, _)| raw.to_string());
                    eprintln!("baton mcp: cannot list the waiting tasks: {why}");
                    return;
                }
            };
            self.push_listed(&listed.queued);
            for t in listed
                .queued
                .iter()
                .take(WAITING_NOTICES.saturating_sub(logged))
            {
                let from = turn::display_name(&t.sender);
                let news = event_text::task_news(&escape(&from), &t.message_id, "waits");
                self.log_info(crate::spool::events::now(), news);
                logged += 1;
            }
            match listed.next {
                Some(next) => after = Some(next),
                None => return,
            }
        }
    }

    /// Pushes the listed tasks, read from the spool (a listing has no
    /// bodies), in the listing's order.
    fn push_listed(&mut self, queued: &[Summary]) {
        let ids: Vec<&str> = queued.iter().map(|t| t.message_id.as_str()).collect();
        if ids.is_empty() {
            return;
        }
        let Some((dir, _)) = self.facts() else {
            return;
        };
        let read = spool::read_queued(&dir, &ids)
            .inspect_err(|e| eprintln!("baton mcp: cannot read the waiting tasks: {e}"));
        let Ok(mut tasks) = read else {
            return;
        };
        tasks.sort_by_key(|t| ids.iter().position(|i| *i == t.message_id));
        for t in &tasks {
            self.push(t);
        }
    }

    /// A `notifications/message` at level `info` about what happened at
    /// `at`, if the host has said it is ready for notifications and wanted
    /// that level then.
    pub(super) fn log_info(&self, at: f64, data: String) {
        let level = self
            .levels
            .iter()
            .rev()
            .find(|(since, _)| *since <= at)
            .or(self.levels.first())
            .map_or(LEVELS.len() - 1, |(_, l)| *l);
        if !self.notifying || level < INFO {
            return;
        }
        let params = LogParams {
            data,
            level: LEVELS[INFO],
            logger: "baton",
        };
        notify("notifications/message", params);
    }
}
