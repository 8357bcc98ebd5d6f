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

// The folders are the layers of docs/ARCHITECTURE.md, lowest first.
#[allow(unsafe_code)]
pub mod sys;
#[macro_use]
pub mod text;
pub mod base;
pub mod cli;
pub mod client;
pub mod front;
pub mod instance;
pub mod mcp;
pub mod registry;
pub mod relay;
pub mod server;
pub mod spool;
pub mod tui;
pub mod wire;
pub mod workers;

/// Writes `text` to stderr in one write(2) (the kernel may still split a
/// write to a pipe beyond `PIPE_BUF`; error lines are far shorter). Where
/// std's `eprintln!` panics, a stderr that is gone is ignored: it must not
/// end the process.
#[doc(hidden)]
pub fn stderr_once(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
