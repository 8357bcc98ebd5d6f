//! A task leaves the queue only by rename, and a finished one leaves its
//! receipt in `done/` before its payload goes, so a crash in between can
//! never run it twice. Claim, finish, withdrawal, requeue and expiry.

use super::dirsync::sync_dir;
use super::index::{Entry, Index, Place};
use super::taskfile::{parse_task, read_checked, read_task};
use super::{Claim, HandlerExit, Receipt, ReplyRecord, Spool, Whereabouts, now_f64, now_secs};
use crate::base::error::{Error, Result, SpoolError};
use crate::base::failpoint;
use crate::base::files;
use crate::wire::Outcome;
use std::fs;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

impl Spool {
    /// Moves the oldest inbox entry to `processing/` and reads it back.
    pub fn claim(&self) -> Result<Claim> {
        self.claim_where(None)
    }

    /// Claims one particular queued task (one that was approved while
    /// another jumped ahead of it).
    pub fn claim_id(&self, message_id: &str) -> Result<Claim> {
        self.claim_where(Some(message_id))
    }

    fn claim_where(&self, want: Option<&str>) -> Result<Claim> {
        let (key, id, file, fresh) = {
            let mut idx = match want {
                None => self.wait_for_head(self.idx()),
                Some(_) => self.idx(),
            };
            let found = match want {
                None => idx.inbox.iter().next().map(|(k, id)| (*k, id.clone())),
                Some(w) => idx
                    .entries
                    .get(w)
                    .filter(|e| e.place == Place::Inbox)
                    .map(|e| (e.key, w.to_string())),
            };
            let Some((key, id)) = found else {
                return Ok(Claim::Empty);
            };
            let file = idx.entries[&id].file.clone();
            let fresh = idx.fresh.take(&id);
            (key, id, file, fresh)
        };
        // Read and checked where it waits, without the lock: only the
        // foreground claims, requeues and expires, so the task stays put
        // meanwhile. A resource that ran short is no verdict on the task:
        // it stays queued, in its place.
        let from = self.path("inbox", &file);
        let as_written = fresh.filter(|(_, len)| {
            fs::symlink_metadata(&from).is_ok_and(|m| m.file_type().is_file() && m.len() == *len)
        });
        let parsed = match as_written {
            Some((task, _)) => Ok(task),
            None => read_checked(&from)?.and_then(|b| parse_task(&b, &id)),
        };
        if self.idx().inbox.get(&key).is_none_or(|i| *i != id) {
            return Ok(Claim::Empty);
        }
        match parsed {
            Ok(task) => {
                self.take(key, &id, &file)?;
                Ok(Claim::Task(Box::new(task)))
            }
            Err(reason) => self.reject(key, &id, &file, reason.0),
        }
    }

    /// Moves a checked task from `inbox/` to `processing/`. A move that
    /// cannot be made durable is undone, and the task stays queued.
    fn take(&self, key: (u8, u64), id: &str, file: &str) -> Result<()> {
        let mut idx = self.idx();
        (self.at.inbox)
            .rename_into(file, &self.at.processing)
            .map_err(|e| Error::io("claim", &self.path("inbox", file), e))?;
        idx.inbox.remove(&key);
        idx.processing += 1;
        idx.entries.get_mut(id).expect("indexed").place = Place::Processing;
        drop(idx);
        if self.fsync {
            let synced = failpoint::hit("claim-sync")
                .map_err(|e| Error::io("sync directory", &self.dir, e))
                .and_then(|()| self.sync(&["inbox", "processing"]));
            if let Err(e) = synced {
                // Best effort: the error says what went wrong either way.
                let _ = self.unclaim(id);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Sets a queued task whose file is bad data aside in `rejected/`.
    fn reject(&self, key: (u8, u64), id: &str, file: &str, reason: String) -> Result<Claim> {
        let mut idx = self.idx();
        // A file that is gone leaves nothing to move, and must not stay
        // at the head of the queue.
        let aside = match fs::symlink_metadata(self.path("inbox", file)) {
            Ok(_) => self.set_aside("inbox", file)?,
            Err(_) => file.to_string(),
        };
        idx.inbox.remove(&key);
        let e = idx.entries.get_mut(id).expect("indexed");
        e.place = Place::Rejected;
        e.file = aside;
        e.reason = Some(reason.clone());
        let sender = e.sender_id().map(String::from);
        idx.release(sender.as_deref());
        drop(idx);
        if self.fsync {
            let _ = self.sync(&["inbox", "rejected"]);
        }
        Ok(Claim::Rejected {
            message_id: id.to_string(),
            reason,
        })
    }

    /// Puts a claimed task back where it waited in the queue, as if it had
    /// never been claimed: its handler could not be started for want of a
    /// resource, which is no verdict on the task.
    pub fn unclaim(&self, message_id: &str) -> Result<()> {
        let back = |idx: &mut Index, e: &Entry| {
            idx.inbox.insert(e.key, message_id.to_string());
        };
        self.leave_processing(message_id, ("inbox", Place::Inbox), "put back", back)
    }

    /// Sets a processing task aside as interrupted now, as the next open
    /// would: its turn may have run in part, so it is not run again
    /// unless the operator requeues it.
    pub fn set_interrupted(&self, message_id: &str) -> Result<()> {
        let to = ("interrupted", Place::Interrupted);
        let aside = |idx: &mut Index, e: &Entry| idx.release(e.sender_id());
        self.leave_processing(message_id, to, "move to interrupted/", aside)
    }

    /// Moves a processing task's file to the place `to`, `op` naming the
    /// move in its error, and `update`s the index with its entry.
    fn leave_processing(
        &self,
        message_id: &str,
        (sub, place): (&str, Place),
        op: &'static str,
        update: impl FnOnce(&mut Index, &Entry),
    ) -> Result<()> {
        let mut idx = self.idx();
        let processing = |e: &&Entry| e.place == Place::Processing;
        let entry = idx.entries.get(message_id).filter(processing).cloned();
        let e = entry.ok_or_else(|| not_processing(message_id))?;
        let from = self.path("processing", &e.file);
        files::rename(&from, &self.path(sub, &e.file)).map_err(|err| Error::io(op, &from, err))?;
        idx.processing -= 1;
        update(&mut idx, &e);
        idx.entries.get_mut(message_id).expect("indexed").place = place;
        drop(idx);
        if self.fsync {
            self.sync(&["processing", sub])?;
        }
        Ok(())
    }

    /// Finishes a processing task: receipt first, then the payload goes.
    pub fn finish(&self, message_id: &str, outcome: Outcome) -> Result<()> {
        self.finish_with(message_id, outcome, None)
    }

    /// `finish`, the receipt also remembering the task's reply.
    pub fn finish_with(
        &self,
        message_id: &str,
        outcome: Outcome,
        reply: Option<ReplyRecord>,
    ) -> Result<()> {
        self.finish_turn(message_id, outcome, reply, None)
    }

    /// `finish_with`, the receipt also remembering how the turn's handler
    /// ended, when it failed.
    pub fn finish_turn(
        &self,
        message_id: &str,
        outcome: Outcome,
        reply: Option<ReplyRecord>,
        handler: Option<HandlerExit>,
    ) -> Result<()> {
        let mut idx = self.idx();
        let Some(e) = idx.entries.get(message_id).cloned() else {
            return Err(SpoolError::NoTask(message_id.to_string()).into());
        };
        let sub = match e.place {
            Place::Processing => "processing",
            Place::Interrupted => "interrupted",
            Place::Rejected if outcome == Outcome::Discarded => "rejected",
            _ => return Err(not_processing(message_id)),
        };
        let mut receipt = receipt_of(message_id, &e, outcome);
        receipt.reply = reply;
        receipt.handler = handler.unwrap_or_default();
        (self.retire(&mut idx, &receipt, sub, &e.file))
            .map_err(|err| Error::io("finish task in", &self.dir, err))?;
        if e.place == Place::Processing {
            idx.processing -= 1;
            idx.release(e.sender_id());
        }
        // From now on its receipt answers for it (`receipt_digest`).
        idx.entries.remove(message_id);
        Ok(())
    }

    /// Withdraws a queued task as `outcome` (`task/cancel`, and `baton
    /// cancel` of a stopped agent's task): as `finish` does, its receipt
    /// first, then its file goes, so a crash in between leaves both and
    /// the next open removes the file (`recover`): it never runs.
    pub fn withdraw(&self, message_id: &str, outcome: Outcome) -> Result<()> {
        let mut idx = self.idx();
        let e = match idx.entries.get(message_id) {
            Some(e) if e.place == Place::Inbox => e.clone(),
            _ => return Err(SpoolError::NotQueued(message_id.to_string()).into()),
        };
        let receipt = receipt_of(message_id, &e, outcome);
        (self.retire(&mut idx, &receipt, "inbox", &e.file))
            .map_err(|err| Error::io("withdraw task from", &self.dir, err))?;
        idx.inbox.remove(&e.key);
        idx.fresh.take(message_id);
        idx.release(e.sender_id());
        idx.entries.remove(message_id);
        Ok(())
    }

    /// Appends a task's `receipt`, then removes its file `sub/file`: from
    /// then on the receipt answers for it.
    fn retire(&self, idx: &mut Index, receipt: &Receipt, sub: &str, file: &str) -> io::Result<()> {
        idx.receipts.append(&self.dir, self.fsync, receipt)?;
        files::remove_file(&self.path(sub, file))?;
        if self.fsync {
            sync_dir(&self.dir.join(sub))?;
        }
        Ok(())
    }

    /// Puts an interrupted task back at its original place in the queue.
    pub fn requeue(&self, message_id: &str) -> Result<()> {
        let mut idx = self.idx();
        let (e, sub) = match idx.entries.get(message_id) {
            Some(e) if e.place == Place::Interrupted => (e.clone(), "interrupted"),
            // A rejected task goes back only if its data could be read.
            Some(e) if e.place == Place::Rejected && e.digest.is_some() => (e.clone(), "rejected"),
            _ => return Err(SpoolError::NotSetAside(message_id.to_string()).into()),
        };
        let from = self.path(sub, &e.file);
        let to = self.path("inbox", &e.file);
        files::rename(&from, &to).map_err(|err| Error::io("requeue", &from, err))?;
        // It waits afresh: `--ttl` counts from now, across restarts too.
        let now = SystemTime::now();
        let _ = files::set_modified(&to, now);
        if self.fsync {
            self.sync(&[sub, "inbox"])?;
        }
        idx.inbox.insert(e.key, message_id.to_string());
        idx.hold(e.sender_id());
        let entry = idx.entries.get_mut(message_id).expect("indexed");
        entry.place = Place::Inbox;
        entry.queued_at = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(())
    }

    /// Where a task is: its place in the index, else its receipt. The
    /// receipt is read without the lock (a shortage reads as unreadable:
    /// the answer is informational, never a verdict on the task).
    pub fn whereabouts(&self, message_id: &str) -> Whereabouts {
        let w = {
            let idx = self.idx();
            if let Some(e) = idx.entries.get(message_id) {
                return match e.place {
                    Place::Inbox => Whereabouts::Queued(idx.inbox.range(..e.key).count() + 1),
                    Place::Processing => Whereabouts::Processing,
                    Place::Interrupted => Whereabouts::Interrupted,
                    Place::Rejected => match (&e.reason, &e.digest) {
                        (None, Some(_)) => Whereabouts::Expired,
                        (r, _) => Whereabouts::Rejected(r.clone()),
                    },
                };
            }
            idx.receipts.find(message_id)
        };
        let Some(w) = w else {
            return Whereabouts::Unknown;
        };
        match self.receipt_at(message_id, w) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Whereabouts::Unknown,
            r => Whereabouts::Finished(r.ok().flatten().map(Box::new)),
        }
    }

    /// The verified sender's instance id of a task the index holds
    /// (queued, processing or set aside): `Some(None)` for a plain
    /// sender, `None` when the index does not hold it.
    pub fn sender_of(&self, message_id: &str) -> Option<Option<String>> {
        (self.idx().entries.get(message_id)).map(|e| e.sender_id().map(str::to_string))
    }

    /// How a task the index holds came in: through a bridge (with which
    /// key's label), or not.
    pub fn through(&self, message_id: &str) -> Option<super::Through> {
        (self.idx().entries.get(message_id)).map(|e| super::Through::of(&e.summary.sender))
    }

    /// When a task the index holds (queued, processing or set aside) was
    /// accepted, epoch seconds.
    pub fn accepted_at(&self, message_id: &str) -> Option<u64> {
        (self.idx().entries.get(message_id)).map(|e| e.summary.accepted_at)
    }

    /// Whether the task is queued in `inbox/` (the index alone).
    pub fn is_queued(&self, message_id: &str) -> bool {
        (self.idx().entries.get(message_id)).is_some_and(|e| e.place == Place::Inbox)
    }

    /// A queued task read back where it waits, without claiming it (for
    /// an approval request's context). None when it is not queued or its
    /// file cannot be read now.
    pub fn queued_task(&self, message_id: &str) -> Option<super::Task> {
        let queued = |e: &&Entry| e.place == Place::Inbox;
        let file = (self.idx().entries.get(message_id))
            .filter(queued)?
            .file
            .clone();
        read_task(&self.path("inbox", &file), message_id)
    }

    /// Whether a task was set aside for the operator: `interrupted/`, or
    /// `rejected/` with data that can be read back.
    pub fn is_set_aside(&self, message_id: &str) -> bool {
        let idx = self.idx();
        idx.entries.get(message_id).is_some_and(|e| {
            e.place == Place::Interrupted || (e.place == Place::Rejected && e.digest.is_some())
        })
    }

    /// Moves tasks queued for `ttl` seconds or more (since they were
    /// accepted or requeued) to `rejected/`; returns their ids. Their ids
    /// stay known, so a retry is not run either.
    pub fn expire(&self, ttl: u64) -> Vec<String> {
        let mut idx = self.idx();
        let cutoff = now_secs().saturating_sub(ttl);
        let old: Vec<((u8, u64), String)> = idx
            .inbox
            .iter()
            .filter(|(_, id)| idx.entries[*id].queued_at <= cutoff)
            .map(|(k, id)| (*k, id.clone()))
            .collect();
        let mut out = Vec::new();
        for (key, id) in old {
            let file = idx.entries[&id].file.clone();
            let from = self.path("inbox", &file);
            if files::rename(&from, &self.path("rejected", &file)).is_err() {
                continue;
            }
            idx.inbox.remove(&key);
            idx.fresh.take(&id);
            let e = idx.entries.get_mut(&id).expect("indexed");
            e.place = Place::Rejected;
            let sender = e.sender_id().map(String::from);
            idx.release(sender.as_deref());
            out.push(id);
        }
        if !out.is_empty() && self.fsync {
            let _ = self.sync(&["inbox", "rejected"]);
        }
        out
    }
}

/// The receipt of the task `e` ending now as `outcome`, without a reply
/// or a handler's end.
fn receipt_of(message_id: &str, e: &Entry, outcome: Outcome) -> Receipt {
    Receipt {
        message_id: message_id.to_string(),
        digest: e.digest.clone().unwrap_or_default(),
        outcome,
        accepted_at: Some(e.summary.accepted_at),
        finished_at: now_f64(),
        reply: None,
        sender_instance_id: e.sender_id().map(str::to_string),
        remote: e.summary.sender.remote.is_some(),
        key: e.summary.sender.key.clone(),
        handler: HandlerExit::default(),
    }
}

/// The refusal of a task that is not where a finished turn leaves it.
fn not_processing(message_id: &str) -> Error {
    SpoolError::NotProcessing(message_id.to_string()).into()
}
