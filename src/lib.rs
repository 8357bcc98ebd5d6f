//! baton: agent processes on one host hand tasks to each other through a
//! shared registry directory, Unix-domain sockets and a crash-safe spool.
//! `docs/ARCHITECTURE.md` maps the modules.

// The compiler keeps `unsafe` in `sys` (docs/ARCHITECTURE.md, Invariants):
// every other module is refused it.
#![deny(unsafe_code)]

// Every line baton writes to stderr goes out in one write(2): std's
// `eprintln!` writes a formatted message piece by piece to the unbuffered
// stderr, so a handler's pipe that baton writes into (the instance turns
// each read into a `turn.output` event) showed one error as five entries.
// These shadow std's macros in the whole crate.
macro_rules! eprintln {
    ($($arg:tt)+) => {
        $crate::stderr_once(&format!("{}\n", format_args!($($arg)+)))
    };
}

macro_rules! eprint {
    ($($arg:tt)+) => {
        $crate::stderr_once(&format!($($arg)+))
    };
}

#[macro_use]
pub mod spelled;

pub mod access;
pub mod accounts;

pub mod cli;
pub mod client;
pub mod codex;
pub mod config;
pub mod digest;
pub mod embedded;
pub mod error;
pub mod event_text;
pub mod events;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod execargs;
pub mod failpoint;
pub mod files;
pub mod follow;
pub mod glob;
pub mod instance;
pub mod lookup;
pub mod mcp;
pub mod procfs;
pub mod reaper;
pub mod registry;
pub mod relay;
pub mod sanitize;
pub mod server;
pub mod spool;
pub mod status;
#[allow(unsafe_code)]
pub mod sys;
pub mod text;
pub mod tmux;
pub mod tui;
pub mod turn;
pub mod wire;
pub mod ws;

/// Writes `text` to stderr in one write(2) (the kernel may still split a
/// write to a pipe beyond `PIPE_BUF`; error lines are far shorter). Where
/// std's `eprintln!` panics, a stderr that is gone is ignored: it must not
/// end the process.
#[doc(hidden)]
pub fn stderr_once(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
