//! After open, nothing is half-done: `tmp/` is empty, `processing/` is
//! empty, a finished task has a receipt and no payload, and the index is
//! rebuilt from what the directories hold, bad data set aside in
//! `rejected/`. Recovery runs in five phases, in this order, before the
//! spool takes any task. It never waits on what stands in a file's place
//! (a FIFO, a device), and a resource that runs short meanwhile (EMFILE,
//! EIO...) fails the open, leaving every file where it was: only bytes
//! that are really bad are set aside.

use super::index::{Entry, Index, Place, order_key, summary_or_id};
use super::receipts::Receipts;
use super::taskfile::{SEQ_LIMIT, list, parse_file_name, parse_task, read_checked};
use super::{Spool, now_secs};
use crate::base::error::{Error, Result};
use crate::base::files;
use crate::wire::Outcome;
use crate::wire::TaskMode;
use std::fs;

/// Where a task that has its receipt may still have its payload: where
/// `finish` and `withdraw` remove it from.
const FINISHED_FROM: [&str; 4] = ["inbox", "processing", "interrupted", "rejected"];

impl Spool {
    pub(super) fn recover(&mut self) -> Result<()> {
        let mut notes = Vec::new();
        self.kill_recorded_handler(&mut notes);
        self.set_aside_odd_files(&mut notes)?;
        self.sweep_tmp(&mut notes)?;
        let mut receipts = Receipts::load(&self.dir, &mut notes)?;
        self.remove_finished_payloads(&receipts, &mut notes)?;
        // Receipts are read first (phase 2 needs them); old ones go once
        // no payload needs them.
        receipts.prune(&self.dir, now_secs());
        let mut ended = self.interrupt_processing(&mut notes)?;
        // Built apart and put in place whole: no file is read under the
        // index lock.
        let mut idx = Index::new();
        idx.receipts = receipts;
        let max_seq = self.index_tasks(&mut idx, &mut notes, &mut ended)?;
        let seq_path = self.dir.join("sequence");
        // A lease past the limit is not one baton wrote: numbering goes
        // on from the task files instead.
        let stored: u64 = read_checked(&seq_path)?
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&s| s < SEQ_LIMIT)
            .unwrap_or(0);
        idx.next_seq = stored.max(max_seq + 1).max(1);
        idx.leased_to = idx.next_seq;
        *self.idx() = idx;
        self.recovery_notes = notes;
        self.ended_at_open = ended;
        Ok(())
    }

    /// Before the phases: `meta.json` is replaced whole, by rename, and
    /// the transcript (`events`) is appended to; what stands in their
    /// place and is not a regular file (a FIFO, a directory, a symlink) is
    /// not baton's, and is set aside rather than replaced, or waited on.
    /// (`sequence` is only read without waiting: what is not a regular
    /// file there reads as no lease.)
    fn set_aside_odd_files(&self, notes: &mut Vec<String>) -> Result<()> {
        for name in ["meta.json", "transcript.jsonl", "transcript.1.jsonl"] {
            let p = self.dir.join(name);
            let Ok(kind) = fs::symlink_metadata(&p).map(|m| m.file_type()) else {
                continue;
            };
            if !kind.is_file() {
                let aside = self.set_aside_path(&p, name)?;
                notes.push(format!(
                    "{name} is {}, not a regular file; moved to rejected/{aside}",
                    files::kind_of(kind)
                ));
            }
        }
        Ok(())
    }

    /// Phase 1. A crash between create and rename leaves only
    /// unacknowledged data, in files; anything else (a directory, a FIFO)
    /// is not baton's, and is set aside rather than deleted.
    fn sweep_tmp(&self, notes: &mut Vec<String>) -> Result<()> {
        for name in list(&self.dir.join("tmp"))? {
            let p = self.path("tmp", &name);
            let kind = fs::symlink_metadata(&p).map(|m| m.file_type());
            match kind {
                Ok(k) if !k.is_file() && !k.is_symlink() => {
                    let aside = self.set_aside("tmp", &name)?;
                    notes.push(format!(
                        "tmp/{name} is {}, not a file baton writes; moved to rejected/{aside}",
                        files::kind_of(k)
                    ));
                }
                _ => match files::remove_file(&p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io("remove", &p, e));
                    }
                    _ => {}
                },
            }
        }
        Ok(())
    }

    /// Phase 2. A crash during `finish` or `withdraw`, after the receipt
    /// landed in done/ but before the payload was removed, leaves both:
    /// the task finished, so the payload goes now rather than being set
    /// aside or queued (and maybe run a second time).
    fn remove_finished_payloads(&self, receipts: &Receipts, notes: &mut Vec<String>) -> Result<()> {
        let mut finished = false;
        for sub in FINISHED_FROM {
            for name in list(&self.dir.join(sub))? {
                let Some((_, id)) = parse_file_name(&name) else {
                    continue;
                };
                let p = self.path(sub, &name);
                // Only a task file can be a payload; anything else is set
                // aside when it is indexed.
                if !fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                    continue;
                }
                let receipt = match receipts.find(id).map(|w| self.receipt_at(id, w)) {
                    Some(Err(e)) if crate::sys::shortage(&e).is_some() => {
                        return Err(Error::io("read the receipt of", &p, e));
                    }
                    r => r.and_then(|r| r.ok().flatten()),
                };
                if receipt.is_some() {
                    files::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
                    notes.push(format!(
                        "{sub}/{name} had finished (its receipt is in done/); removed"
                    ));
                    finished = true;
                }
            }
        }
        if finished && self.fsync {
            self.sync(&FINISHED_FROM)?;
        }
        Ok(())
    }

    /// Phase 3. Work that was mid-turn is never rerun on its own. Returns
    /// the ids of the tasks it set aside, each `interrupted`.
    fn interrupt_processing(&self, notes: &mut Vec<String>) -> Result<Vec<(String, Outcome)>> {
        let mut moved = false;
        let mut ended = Vec::new();
        for name in list(&self.dir.join("processing"))? {
            let from = self.path("processing", &name);
            let to = self.path("interrupted", &name);
            files::rename(&from, &to).map_err(|e| Error::io("move to interrupted/", &from, e))?;
            notes.push(format!(
                "task file {name} was mid-turn and is now in interrupted/"
            ));
            if let Some((_, id)) = parse_file_name(&name) {
                ended.push((id.to_string(), Outcome::Interrupted));
            }
            moved = true;
        }
        if moved && self.fsync {
            self.sync(&["processing", "interrupted"])?;
        }
        Ok(ended)
    }

    /// Phase 4. Indexes the task files of `inbox/`, `interrupted/` and
    /// `rejected/`; returns the highest sequence number among them. A
    /// queued task set aside as bad data is `rejected` in `ended`.
    fn index_tasks(
        &self,
        idx: &mut Index,
        notes: &mut Vec<String>,
        ended: &mut Vec<(String, Outcome)>,
    ) -> Result<u64> {
        let mut max_seq = 0;
        for (sub, place) in [
            ("inbox", Place::Inbox),
            ("interrupted", Place::Interrupted),
            ("rejected", Place::Rejected),
        ] {
            for name in list(&self.dir.join(sub))? {
                let Some((seq, id)) = parse_file_name(&name) else {
                    if place != Place::Rejected {
                        let aside = self.set_aside(sub, &name)?;
                        notes.push(format!(
                            "{sub}/{name} is not a task file name; moved to rejected/{aside}"
                        ));
                    }
                    continue;
                };
                max_seq = max_seq.max(seq);
                let id = id.to_string();
                let mut entry = self.read_entry(sub, place, &name, seq, &id, notes)?;
                // A file set aside from `inbox/` is met again in
                // `rejected/`: the reason found the first time stays.
                if entry.reason.is_none() {
                    entry.reason = idx.entries.get(&id).and_then(|o| o.reason.clone());
                }
                if place == Place::Inbox && entry.place == Place::Rejected {
                    ended.push((id.clone(), Outcome::Rejected));
                }
                if entry.place == Place::Inbox {
                    idx.inbox.insert(entry.key, id.clone());
                    idx.hold(entry.sender_id());
                }
                idx.entries.insert(id, entry);
            }
        }
        Ok(max_seq)
    }

    /// The index entry of the task file `sub/name`; one that cannot be
    /// read back outside `rejected/` moves there.
    fn read_entry(
        &self,
        sub: &str,
        place: Place,
        name: &str,
        seq: u64,
        id: &str,
        notes: &mut Vec<String>,
    ) -> Result<Entry> {
        let parsed = read_checked(&self.path(sub, name))?.and_then(|b| parse_task(&b, id));
        let mut file = name.to_string();
        let mut why = None;
        let (mut task, place) = match parsed {
            Ok(t) => (Some(t), place),
            Err(reason) if place != Place::Rejected => {
                file = self.set_aside(sub, name)?;
                notes.push(format!("{sub}/{name}: {reason}; moved to rejected/{file}"));
                why = Some(reason.0);
                (None, Place::Rejected)
            }
            Err(_) => (None, Place::Rejected),
        };
        let rejected = place == Place::Rejected;
        let sub = if rejected { "rejected" } else { sub };
        let mode = task.as_ref().map_or(TaskMode::Queue, |t| t.mode);
        let key = order_key(mode, seq);
        // A requeue touches the file: its time outlives a restart.
        let touched = super::modified_at(&self.path(sub, &file)).map_or(0, |d| d.as_secs());
        let queued_at = task.as_ref().map_or(0, |t| t.accepted_at).max(touched);
        let digest = task.as_mut().map(|t| std::mem::take(&mut t.digest));
        Ok(Entry {
            reason: why,
            queued_at,
            digest,
            place,
            file,
            key,
            summary: summary_or_id(task, id),
        })
    }
}
