//! Integration tests: the real `baton` binary, each test in a private world
//! (its own registry directory, state home and home) from `util`.

mod util;

mod control;
mod dispatch;
mod docs;
mod hostile;
mod lifecycle;
mod limits;
mod mcp;
mod offline;
mod outcomes;
mod protocol;
mod registry;
mod spool;
mod ssh;
mod stopped;
mod tui;
mod turns;
mod wait;
mod zcoder;
