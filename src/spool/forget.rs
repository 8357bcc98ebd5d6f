//! Removing a stopped agent's spool (`baton forget`): what it holds, read
//! without the lock to show first, and its removal under the lock, only
//! while it still holds what was shown.

use super::{check_private_dir, read_listing, remove_locked, try_lock};
use crate::base::error::Result;
use std::fmt;
use std::path::Path;

/// What a spool holds, by place.
#[derive(Debug, PartialEq, Eq)]
pub struct Holdings {
    pub queued: usize,
    pub processing: usize,
    pub interrupted: usize,
    pub rejected: usize,
    /// Receipts in `done/`.
    pub done: usize,
}

impl Holdings {
    /// Reads a spool's places as `read_listing` does: no lock, nothing
    /// moved.
    pub fn read(dir: &Path) -> Result<Holdings> {
        let l = read_listing(dir)?;
        let done = super::receipts::count_in(dir);
        Ok(Holdings {
            queued: l.queued.len(),
            processing: l.processing.len(),
            interrupted: l.interrupted.len(),
            rejected: l.rejected.len(),
            done,
        })
    }
}

impl fmt::Display for Holdings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} queued, {} processing, {} interrupted, {} rejected and {} done (receipts)",
            self.queued, self.processing, self.interrupted, self.rejected, self.done
        )
    }
}

/// What `forget` did with a spool.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// Its lock is held: its agent is starting or running, or a sender is
    /// storing a task. Nothing was removed.
    InUse,
    /// It no longer holds what was shown. Nothing was removed.
    Changed,
}

/// Removes the spool at `dir` while holding its lock, so that neither its
/// agent (starting meanwhile) nor a sender storing a task has it open, and
/// only if it still holds `shown`.
pub fn forget(dir: &Path, shown: &Holdings) -> Result<Removal> {
    check_private_dir(dir, "spool")?;
    let Some(lock) = try_lock(dir)? else {
        return Ok(Removal::InUse);
    };
    if Holdings::read(dir)? != *shown {
        return Ok(Removal::Changed);
    }
    // It must still have its meta.json.
    remove_locked(dir, true)?;
    drop(lock);
    Ok(Removal::Removed)
}
