//! A client of Codex's app-server (`baton serve --codex`, issue 33): the
//! JSON-RPC that docs/hosts.md ("Codex app-server as seen") records,
//! over a WebSocket on a Unix socket (`ws`). Only the few calls baton
//! needs: `initialize`, the loaded threads and one thread's cwd and
//! recency, starting a thread and a turn, and reading notifications until
//! a turn completes.
//!
//! Codex's messages carry no `"jsonrpc"` member, and its notifications
//! come at any time, between a request and its answer too: answers are
//! matched by `id`, notifications read on the way are kept for later.
//! It knows no other room but `ws` and `sanitize` (and `sys`, whose
//! connect `reachable` uses for `baton doctor`).

pub mod client;
pub mod driver;
pub mod error;
pub mod proto;

pub use client::{AppServer, Notification, TurnEnd};
pub use error::Error;
pub use proto::{Thread, ThreadStatus, Turn, TurnStatus};

/// Whether the app-server's socket is there and takes a connection, for
/// `baton doctor`: why not, if it does not. Nothing is said on it.
pub fn reachable(socket: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(socket).map_err(|e| e.to_string())?;
    if !meta.file_type().is_socket() {
        return Err("not a socket".into());
    }
    crate::sys::connect_nowait(socket)
        .map(drop)
        .map_err(|e| format!("cannot connect: {e}"))
}

#[cfg(test)]
mod tests;
