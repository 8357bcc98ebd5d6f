//! The index mirrors the directories: each entry names its file in the
//! place it says, the inbox order is the claim order, and the counts
//! (processing, in flight per sender) match the entries; reservations
//! (`pending`) are the only tasks it holds that have no file yet. One
//! mutex guards it, and every update leaves it consistent. Also here: what
//! reads it (peek, counts, listings) and the waits on pending acceptances.

use super::receipts::Receipts;
use super::{Counts, Listing, Spool, Summary, Task};
use crate::wire::TaskMode;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Inbox,
    Processing,
    Interrupted,
    Rejected,
}

#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// `None` when the stored data could not be read back.
    pub(super) digest: Option<String>,
    pub(super) place: Place,
    pub(super) file: String,
    /// Order key in the inbox: steer before queue, then sequence.
    pub(super) key: (u8, u64),
    pub(super) summary: Summary,
    /// When it last entered the queue (epoch seconds): accepted, or
    /// requeued by the operator. `--ttl` counts from here.
    pub(super) queued_at: u64,
    /// Why it went to `rejected/` as bad data, when that is known.
    pub(super) reason: Option<String>,
}

impl Entry {
    /// The verified sender's instance id, if it had one.
    pub(super) fn sender_id(&self) -> Option<&str> {
        self.summary.sender.instance_id.as_deref()
    }
}

#[derive(Default)]
pub(super) struct Index {
    pub(super) next_seq: u64,
    pub(super) leased_to: u64,
    pub(super) entries: HashMap<String, Entry>,
    pub(super) inbox: BTreeMap<(u8, u64), String>,
    pub(super) processing: usize,
    pub(super) inflight: HashMap<String, usize>,
    /// Where the receipt of every kept finished task is, by a 64-bit hash
    /// of its id: a new id (the common case) is known to have none without
    /// a lookup on disk, and a hit reads that one receipt.
    pub(super) receipts: Receipts,
    /// Ids reserved by an acceptance that is storing its file right now,
    /// with their order keys: they count against the limits, make a
    /// second offer of the same id wait for the first one's outcome, and
    /// keep a claim from overtaking them (`wait_for_head`).
    pub(super) pending: HashMap<String, (u8, u64)>,
    /// Threads waiting on `Spool::settled`: without any, a settling
    /// acceptance skips the wake-up call.
    pub(super) waiting: usize,
    /// Tasks this process has just stored, as written (`Fresh`).
    pub(super) fresh: Fresh,
    /// The spool is going (`Spool::remove_if_unused`): no task is
    /// accepted into it any more.
    pub(super) closed: bool,
}

/// The tasks this process stored last, each as it was written and with
/// the length of its file: a claim that comes soon after (an exec agent
/// claims as soon as a task is announced) hands the task out without
/// reading its file back, when the file is still in place, a regular
/// file of that length. Anything else (a file changed or replaced, a task
/// stored by an earlier process) is read and checked as always. Bounded
/// in tasks and in body bytes; the oldest go first.
#[derive(Default)]
pub(super) struct Fresh {
    tasks: HashMap<String, (Task, u64)>,
    order: VecDeque<String>,
    bytes: usize,
}

impl Fresh {
    const MAX_TASKS: usize = 64;
    const MAX_BYTES: usize = 256 * 1024;

    /// Whether a task with a body of `bytes` is kept at all.
    pub(super) fn keeps(bytes: usize) -> bool {
        bytes <= Self::MAX_BYTES
    }

    /// Remembers `task`, stored in a file of `len` bytes.
    pub(super) fn put(&mut self, task: Task, len: u64) {
        if !Self::keeps(task.body.len()) {
            return;
        }
        self.bytes += task.body.len();
        let id = task.message_id.clone();
        if let Some((old, _)) = self.tasks.insert(id.clone(), (task, len)) {
            self.bytes -= old.body.len();
        } else {
            self.order.push_back(id);
        }
        while self.tasks.len() > Self::MAX_TASKS || self.bytes > Self::MAX_BYTES {
            let Some(id) = self.order.pop_front() else {
                break;
            };
            if let Some((t, _)) = self.tasks.remove(&id) {
                self.bytes -= t.body.len();
            }
        }
    }

    /// Takes the task stored as `id` out, if it is here.
    pub(super) fn take(&mut self, id: &str) -> Option<(Task, u64)> {
        let got = self.tasks.remove(id)?;
        self.bytes -= got.0.body.len();
        self.order.retain(|o| o != id);
        Some(got)
    }
}

impl Index {
    pub(super) fn new() -> Index {
        Index {
            next_seq: 1,
            ..Index::default()
        }
    }

    /// Counts one more unfinished task of a verified sender (a plain
    /// one, `None`, is not counted).
    pub(super) fn hold(&mut self, sender: Option<&str>) {
        if let Some(s) = sender {
            *self.inflight.entry(s.to_owned()).or_default() += 1;
        }
    }

    /// Counts one fewer.
    pub(super) fn release(&mut self, sender: Option<&str>) {
        let Some(s) = sender else { return };
        if let Some(n) = self.inflight.get_mut(s) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.inflight.remove(s);
            }
        }
    }
}

/// An acceptance between its reservation and its answer. Dropped before
/// it is settled (an error, or a panic while storing), it gives the
/// reservation back.
pub(super) struct Reservation<'a> {
    pub(super) spool: &'a Spool,
    pub(super) id: String,
    pub(super) seq: u64,
    /// Whether the sequence number may go back: only after a failed store
    /// that left no file behind (never after a panic).
    pub(super) give_back: bool,
    pub(super) sender: Option<String>,
    pub(super) settled: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut idx = self.spool.idx();
        idx.pending.remove(&self.id);
        // The number goes back if no later one was taken, so sequence
        // numbers stay dense across refusals; a file left with it would
        // share its place in the queue with the next task.
        if self.give_back && idx.next_seq == self.seq + 1 {
            idx.next_seq = self.seq;
        }
        idx.release(self.sender.as_deref());
        self.spool.wake_settled(idx);
    }
}

/// What the index keeps of a task (the rest is in its file).
pub(super) fn summary(task: &Task) -> Summary {
    Summary {
        bytes: task.body.len(),
        message_id: task.message_id.clone(),
        sender: task.sender.clone(),
        accepted_at: task.accepted_at,
        mode: task.mode,
    }
}

/// `summary` of the task `id` whose file did not read back, if it did
/// not: its id alone.
pub(super) fn summary_or_id(task: Option<Task>, id: &str) -> Summary {
    task.as_ref().map(summary).unwrap_or(Summary {
        message_id: id.to_string(),
        sender: Default::default(),
        accepted_at: 0,
        mode: TaskMode::Queue,
        bytes: 0,
    })
}

pub(super) fn order_key(mode: TaskMode, seq: u64) -> (u8, u64) {
    (if mode == TaskMode::Steer { 0 } else { 1 }, seq)
}

impl Spool {
    /// Waits while an acceptance still storing its file comes before the
    /// head of the queue, so that tasks are handed out in acceptance
    /// order. Each such wait lasts one file and one directory sync.
    pub(super) fn wait_for_head<'a>(
        &'a self,
        mut idx: MutexGuard<'a, Index>,
    ) -> MutexGuard<'a, Index> {
        let behind = |idx: &Index| {
            let head = idx.inbox.keys().next();
            head.is_some_and(|h| idx.pending.values().any(|p| p < h))
        };
        while behind(&idx) {
            idx = self.wait_settled(idx);
        }
        idx
    }

    /// Waits once for a reservation to settle.
    pub(super) fn wait_settled<'a>(
        &'a self,
        mut idx: MutexGuard<'a, Index>,
    ) -> MutexGuard<'a, Index> {
        idx.waiting += 1;
        idx = self.settled.wait(idx).unwrap_or_else(|e| e.into_inner());
        idx.waiting -= 1;
        idx
    }

    pub(super) fn wake_settled(&self, idx: MutexGuard<'_, Index>) {
        let anyone = idx.waiting > 0;
        drop(idx);
        if anyone {
            self.settled.notify_all();
        }
    }

    /// Waits, up to `max`, until every acceptance that passed its checks
    /// has been answered: after a pause, then, no task is answered
    /// `accepted` that the pause did not see stored.
    pub fn settle(&self, max: Duration) {
        let deadline = Instant::now() + max;
        let mut idx = self.idx();
        while !idx.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            idx.waiting += 1;
            idx = self
                .settled
                .wait_timeout(idx, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            idx.waiting -= 1;
        }
    }

    /// The task a claim would take next: its id and summary.
    pub fn peek(&self) -> Option<Summary> {
        let idx = self.wait_for_head(self.idx());
        let id = idx.inbox.values().next()?;
        Some(idx.entries[id].summary.clone())
    }

    /// The oldest queued steer task from a sender instance.
    pub fn first_steer_from(&self, sender: &str) -> Option<Summary> {
        let idx = self.idx();
        idx.inbox
            .iter()
            .filter(|((rank, _), _)| *rank == 0)
            .map(|(_, id)| &idx.entries[id])
            .find(|e| e.sender_id() == Some(sender))
            .map(|e| e.summary.clone())
    }

    /// When the task queued longest entered the queue (epoch seconds).
    pub fn oldest_queued(&self) -> Option<u64> {
        let idx = self.idx();
        idx.inbox.values().map(|id| idx.entries[id].queued_at).min()
    }

    pub fn counts(&self) -> Counts {
        let idx = self.idx();
        Counts {
            queued: idx.inbox.len(),
            processing: idx.processing,
            interrupted: idx
                .entries
                .values()
                .filter(|e| e.place == Place::Interrupted)
                .count(),
        }
    }

    /// Queued tasks in claim order, then processing, interrupted and
    /// rejected ones.
    pub fn list(&self) -> Listing {
        let idx = self.idx();
        let queued = idx
            .inbox
            .values()
            .map(|id| idx.entries[id].summary.clone())
            .collect();
        let by = |place| {
            let mut v: Vec<&Entry> = idx.entries.values().filter(|e| e.place == place).collect();
            v.sort_by_key(|e| e.key.1);
            v.into_iter().map(|e| e.summary.clone()).collect::<Vec<_>>()
        };
        Listing {
            queued,
            processing: by(Place::Processing),
            interrupted: by(Place::Interrupted),
            rejected: by(Place::Rejected),
        }
    }
}
