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

/// Locks `m`, taking over a lock whose holder panicked: what it guards
/// is used on, rather than every later caller failing too.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
