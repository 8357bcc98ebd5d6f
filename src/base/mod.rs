//! What every room rests on: errors, configuration, accounts, digests,
//! fail points, the status line, files written safely, the reaping of
//! children, and a lock that outlives a panic (docs/ARCHITECTURE.md,
//! layer 2).

pub mod accounts;
pub mod config;
pub mod digest;
pub mod error;
pub mod failpoint;
#[macro_use]
pub mod files;
pub mod reaper;
pub mod status;

use std::sync::{Mutex, MutexGuard};

/// Takes `m`, even if a thread panicked while it held it: every lock
/// baton takes guards data each update leaves consistent, so a panic
/// elsewhere does not take the rest down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
