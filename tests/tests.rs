//! Integration tests: the real `baton` binary, each test in a private world
//! (its own registry directory, state home and home) from `util`.

mod util;

mod answers;
mod answers_said;
mod answers_show;
mod approvals;
mod approve;
mod bodies;
mod cancel;
mod codex;
mod commands;
mod control;
mod dispatch;
mod docs;
mod drift;
mod hooks;
mod hostile;
mod hosts;
mod inbox_wait;
mod layers;
mod lifecycle;
mod limits;
mod log;
mod mcp;
mod newcomer;
mod offline;
mod outcomes;
mod protocol;
mod registry;
mod replies;
mod security;
mod spool;
mod ssh;
mod stale;
mod stopped;
mod subscribers;
mod tmux;
mod tui;
mod tui_operator;
mod tui_work;
mod turns;
mod wait;
mod waiting;
mod zcoder;
