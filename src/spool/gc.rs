//! Spools that hold nothing worth keeping, removed: at its instance's
//! stop, a spool that never held a task (`Spool::remove_if_unused`), and,
//! for `baton gc --spools`, a stopped name's spool that holds nothing but
//! receipts and has not been used for a while (`stale`, `remove`). Either
//! removal runs under the spool's lock, `meta.json` first, so neither a
//! starting instance nor an offline sender has the spool open while it
//! goes; an instance that waited on the lock of a removed spool starts on
//! a new one (`Spool::open`). What counts as "never held a task" is in
//! docs/decisions.md.

use super::events::{self, TRANSCRIPT, TRANSCRIPT_OLD};
use super::forget::Removal;
use super::{Meta, Spool, check_private_dir, remove_locked, try_lock};
use crate::base::error::Result;
use crate::base::files;
use crate::wire::EventKind;
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `gc --spools` without `--older-than`: 30 days.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(30 * 24 * 3600);

/// Where a task may be: a spool that has an entry in any of them holds
/// a task (or a receipt, `done/`).
const PLACES: [&str; 4] = ["inbox", "processing", "interrupted", "rejected"];

/// The events that say a task came through this spool: one stored here
/// (live or by an offline sender), a line the operator typed, a send made
/// from here (its reply may come back here).
const USED: [EventKind; 3] = [
    EventKind::MessageAccepted,
    EventKind::LocalInput,
    EventKind::RelaySent,
];

/// Whether `dir/sub` has any entry; one that cannot be read counts.
fn has_entries(dir: &Path, sub: &str) -> bool {
    match fs::read_dir(dir.join(sub)) {
        Ok(mut rd) => rd.next().is_some(),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Whether the transcript says the spool was used: it rotated (an
/// unused spool never writes that much), or an event of `USED` is in it.
/// A transcript that cannot be read counts as used.
fn transcript_used(dir: &Path) -> bool {
    if fs::symlink_metadata(dir.join(TRANSCRIPT_OLD)).is_ok() {
        return true;
    }
    let path = dir.join(TRANSCRIPT);
    let f = match files::open_regular(&path, OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    let used = |l: events::Recorded| {
        let kind = l.kind.as_ref().and_then(Value::as_str).unwrap_or("");
        USED.iter().any(|k| k.as_str() == kind)
    };
    (BufReader::new(f).split(b'\n'))
        .map_while(|l| l.ok())
        .filter_map(|l| serde_json::from_slice(&l).ok())
        .any(used)
}

/// Whether the spool at `dir` never held a task: no task in any place, no
/// receipt, and nothing in its transcript of a task stored, typed or sent.
pub fn never_used(dir: &Path) -> bool {
    !PLACES.iter().any(|p| has_entries(dir, p))
        && !has_entries(dir, "done")
        && !transcript_used(dir)
}

impl Spool {
    /// At its instance's stop: removes the spool if it never held a task
    /// (`never_used`), and says whether it did. From the moment it looks
    /// the spool takes no more tasks (`admit` refuses them, so no task is
    /// acknowledged into a spool that then goes); it holds the lock for its
    /// whole life, so no other instance or sender has it open.
    pub fn remove_if_unused(&self) -> bool {
        let mut idx = self.idx();
        if !(idx.entries.is_empty() && idx.pending.is_empty() && never_used(&self.dir)) {
            return false;
        }
        idx.closed = true;
        remove_locked(&self.dir, false).is_ok()
    }
}

/// A stopped name's spool that `gc --spools` may remove (`stale`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stale {
    pub dir: PathBuf,
    pub name: String,
    pub workspace: String,
    /// Receipts it keeps (`done/`); it holds nothing else.
    pub receipts: usize,
    /// When it was last used, in epoch seconds: the latest of its newest
    /// receipt, the last event its instance recorded and its last start
    /// (`meta.json` written).
    pub last_used: f64,
}

/// When the spool at `dir` was last used (`Stale::last_used`).
fn last_used(dir: &Path) -> f64 {
    let receipt = super::read_recent(dir, 1).first().map(|r| r.finished_at);
    let written = |name: &str| Some(super::modified_at(&dir.join(name))?.as_secs_f64());
    let mut latest: f64 = 0.0;
    for t in [receipt, events::last_time(dir), written("meta.json")] {
        latest = latest.max(t.unwrap_or(0.0));
    }
    // Receipts of earlier versions, one file each: their file's time.
    if let Ok(names) = super::taskfile::list(&dir.join("done")) {
        for n in names.iter().filter(|n| !n.starts_with("receipts-")) {
            latest = latest.max(written(&format!("done/{n}")).unwrap_or(0.0));
        }
    }
    latest
}

/// `dir` as a stale spool at `now` (epoch seconds), if it is one: its
/// `meta.json` names it, it holds no task and nothing but receipts, and it
/// was last used more than `older_than` before `now`. Its lock is not
/// looked at.
fn judge(dir: &Path, older_than: Duration, now: f64) -> Option<Stale> {
    check_private_dir(dir, "spool").ok()?;
    let meta = Meta::read(dir).ok()?;
    if PLACES.iter().any(|p| has_entries(dir, p)) {
        return None;
    }
    let last_used = last_used(dir);
    if now - last_used <= older_than.as_secs_f64() {
        return None;
    }
    Some(Stale {
        dir: dir.to_path_buf(),
        name: meta.name,
        workspace: meta.workspace,
        receipts: super::receipts::count_in(dir),
        last_used,
    })
}

/// The spools under `spools` (`$XDG_STATE_HOME/baton/spool`) of stopped
/// names (no instance holds the lock) that hold nothing but receipts and
/// were last used more than `older_than` before `now` (epoch seconds), by
/// name then workspace. Nothing is changed. `baton gc --spools` lists
/// these, `--older-than DAYS` being `older_than` (`DEFAULT_OLDER_THAN`
/// without it), and removes each with `remove` unless `--dry-run`.
pub fn stale(spools: &Path, older_than: Duration, now: f64) -> Vec<Stale> {
    let Ok(rd) = fs::read_dir(spools) else {
        return Vec::new();
    };
    let mut out: Vec<Stale> = (rd.filter_map(|e| e.ok()))
        .filter_map(|e| judge(&e.path(), older_than, now))
        // No instance and no sender holds its lock right now (it is
        // taken and let go at once).
        .filter(|s| try_lock(&s.dir).is_ok_and(|l| l.is_some()))
        .collect();
    out.sort_by(|a, b| (&a.name, &a.workspace).cmp(&(&b.name, &b.workspace)));
    out
}

/// Removes one spool `stale` found, under its lock: `Removal::InUse` (and
/// nothing removed) when an instance started meanwhile or a sender is
/// storing a task, `Removal::Changed` when it is no longer stale at `now`
/// (it holds a task, or was used since); `Removed` otherwise.
pub fn remove(spool: &Stale, older_than: Duration, now: f64) -> Result<Removal> {
    check_private_dir(&spool.dir, "spool")?;
    let Some(lock) = try_lock(&spool.dir)? else {
        return Ok(Removal::InUse);
    };
    let again = judge(&spool.dir, older_than, now);
    if again.is_none_or(|s| s.name != spool.name || s.workspace != spool.workspace) {
        return Ok(Removal::Changed);
    }
    remove_locked(&spool.dir, false)?;
    drop(lock);
    Ok(Removal::Removed)
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
