//! A task is answered `accepted` only after its file is whole in `inbox/`
//! (synced, with fsync on) and indexed; until then its id, sequence number
//! and queue slot are reserved, and a failure gives them back and leaves
//! no file. Acceptance: the checks, the reservation, the store, the
//! announcement.

use super::dirsync::sync_dir;
use super::index::{Entry, Index, Place, Reservation, order_key, summary};
use super::receipts::Where;
use super::taskfile::{Body, TaskFile, file_name};
use super::{Admission, Limits, Spool, Task};
use crate::base::error::{Error, Result};
use crate::base::failpoint;
use crate::base::files::{self, Step};
use crate::sys;
use serde_json::value::RawValue;
use std::sync::MutexGuard;

/// How many sequence numbers one write of the `sequence` file reserves.
const SEQ_LEASE: u64 = 1024;

impl Spool {
    /// Offers a task. Checks run in docs/protocol.md §5 order from `duplicate` on;
    /// `paused` is read under the index lock, and `settle` lets a pause
    /// wait for the acceptances that passed it.
    ///
    /// The checks reserve the id, a sequence number and a queue slot; the
    /// file is written and synced outside the lock; then, under it again,
    /// the task is indexed and `announce` runs, so whoever announces an
    /// acceptance does so before any claim can see the task.
    pub fn admit(
        &self,
        mut task: Task,
        body_json: Option<&RawValue>,
        limits: Limits,
        paused: impl Fn() -> bool,
        announce: impl FnOnce(&Task, usize),
    ) -> Result<Admission> {
        let (mut idx, known) = self.known(&task.message_id)?;
        if let Some(digest) = known {
            return Ok(match digest {
                Some(d) if d != task.digest => Admission::Reused,
                Some(_) => Admission::Duplicate,
                None => Admission::Unreadable,
            });
        }
        if idx.closed {
            return Err(Error::Env(
                "the instance is stopping and its spool is being removed".into(),
            ));
        }
        if paused() {
            return Ok(Admission::Paused);
        }
        if let Some(s) = &task.sender.instance_id {
            let n = idx.inflight.get(s).copied().unwrap_or(0);
            if limits.max_inflight > 0 && n >= limits.max_inflight {
                return Ok(Admission::InflightFull {
                    limit: limits.max_inflight,
                });
            }
        }
        if idx.inbox.len() + idx.processing + idx.pending.len() >= limits.max_queue {
            return Ok(Admission::Full {
                limit: limits.max_queue,
            });
        }
        self.lease(&mut idx)
            .map_err(|e| Error::io("write", &self.dir.join("sequence"), e))?;
        task.seq = idx.next_seq;
        idx.next_seq += 1;
        idx.pending
            .insert(task.message_id.clone(), order_key(task.mode, task.seq));
        idx.hold(task.sender.instance_id.as_deref());
        drop(idx);
        let mut reservation = Reservation {
            spool: self,
            id: task.message_id.clone(),
            seq: task.seq,
            give_back: false,
            sender: task.sender.instance_id.clone(),
            settled: false,
        };
        let name = file_name(task.seq, &task.message_id);
        let stored = self.store(&TaskFile::new(&task, body_json), &name);
        let len = stored.map_err(|(e, clean)| {
            reservation.give_back = clean;
            e
        })?;
        let mut idx = self.idx();
        reservation.settled = true;
        idx.pending.remove(&task.message_id);
        let queue_position = idx.inbox.len() + 1 + idx.processing;
        // Under the lock, with the task indexed just below: no claim can
        // see it before it is announced.
        announce(&task, queue_position);
        let key = order_key(task.mode, task.seq);
        let id = task.message_id.clone();
        idx.inbox.insert(key, id.clone());
        idx.entries.insert(
            id,
            Entry {
                digest: Some(task.digest.clone()),
                place: Place::Inbox,
                file: name,
                key,
                queued_at: task.accepted_at,
                summary: summary(&task),
                reason: None,
            },
        );
        // Kept as written, for a claim to hand out (moved, not copied: the
        // body is not copied again).
        idx.fresh.put(task, len);
        self.wake_settled(idx);
        Ok(Admission::Accepted { queue_position })
    }

    /// Makes sure `seq` is covered by the lease in the `sequence` file, so
    /// numbers never go backwards across a crash.
    fn lease(&self, idx: &mut Index) -> std::io::Result<()> {
        if idx.next_seq < idx.leased_to {
            return Ok(());
        }
        let to = idx.next_seq + SEQ_LEASE;
        let tmp = self.path("tmp", "sequence");
        let bytes = format!("{to}\n");
        files::write_private(
            &tmp,
            &self.dir.join("sequence"),
            bytes.as_bytes(),
            self.fsync,
        )?;
        if self.fsync {
            sync_dir(&self.dir)?;
        }
        idx.leased_to = to;
        Ok(())
    }

    /// Whether `message_id` was offered before: `Some` with its body's
    /// digest (`None` when it cannot be read back), and the index, locked,
    /// as it was when that was decided. The same id being stored right now
    /// decides by its outcome. A receipt is read without the lock, so no
    /// acceptance waits on another's read; a read that ran short of a
    /// resource is an error, not a verdict.
    fn known(&self, message_id: &str) -> Result<(MutexGuard<'_, Index>, Option<Option<String>>)> {
        let mut idx = self.idx();
        loop {
            while idx.pending.contains_key(message_id) {
                idx = self.wait_settled(idx);
            }
            if let Some(e) = idx.entries.get(message_id) {
                let digest = e.digest.clone();
                return Ok((idx, Some(digest)));
            }
            let Some(w) = idx.receipts.find(message_id) else {
                return Ok((idx, None));
            };
            drop(idx);
            let receipt = self.receipt_digest(message_id, w)?;
            idx = self.idx();
            // Only an acceptance of the same id can have changed what is
            // known of it meanwhile, or pruning, which forgets it (a
            // receipt read as gone says so).
            if !idx.pending.contains_key(message_id) && !idx.entries.contains_key(message_id) {
                return Ok((idx, receipt));
            }
        }
    }

    /// The body digest a finished task's receipt records: `None` without a
    /// receipt, `Some(None)` when it cannot be read back (it is bad data,
    /// or not a regular file).
    fn receipt_digest(&self, message_id: &str, w: Where) -> Result<Option<Option<String>>> {
        Ok(match self.receipt_at(message_id, w) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) if sys::shortage(&e).is_some() => {
                return Err(Error::io("read the receipt of", &self.dir.join("done"), e));
            }
            r => Some(r.ok().flatten().map(|r| r.digest).filter(|d| !d.is_empty())),
        })
    }

    /// Write, fsync, rename into `inbox/`, fsync the directory (shared with
    /// concurrent acceptances). On any failure the file is removed and
    /// nothing is acknowledged; a failed fsync is never retried on the
    /// same descriptor.
    /// The length of the file written, or an error that says whether the
    /// cleanup left no file behind.
    fn store(&self, task: &TaskFile, name: &str) -> std::result::Result<u64, (Error, bool)> {
        let tmp = self.path("tmp", name);
        let body = match task.body {
            Body::Text(t) => t.len(),
            Body::Json(j) => j.get().len(),
        };
        let mut bytes = Vec::with_capacity(body + 512);
        serde_json::to_writer(&mut bytes, task).expect("a task always serializes");
        let result = (|| -> std::io::Result<()> {
            let dirs = (&self.at.tmp, &self.at.inbox);
            files::write_private_fresh_in(dirs, name, &tmp, &bytes, self.fsync, |step| {
                failpoint::hit(match step {
                    Step::Written => "after-write",
                    Step::Renaming => "after-file-fsync",
                })
            })?;
            failpoint::hit("after-rename")?;
            failpoint::hit("before-dir-fsync")?;
            if self.fsync {
                // A fresh descriptor for every sync: a failed one is never
                // retried on the same descriptor.
                let inbox = self.dir.join("inbox");
                self.dir_sync.sync(|| sync_dir(&inbox))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Nothing is acknowledged, so nothing may stay: the task is
            // refused and a retry writes a new file.
            let gone = |r: std::io::Result<()>| {
                r.is_ok() || r.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            };
            let clean = gone(files::remove_file(&tmp))
                & gone(files::remove_file(&self.path("inbox", name)));
            return Err((Error::io("store task in", &self.dir, e), clean));
        }
        Ok(bytes.len() as u64)
    }
}
