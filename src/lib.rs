//! baton: agent processes on one host hand tasks to each other through a
//! shared registry directory, Unix-domain sockets and a crash-safe spool.
//! `docs/ARCHITECTURE.md` maps the modules.

pub mod cli;
pub mod client;
pub mod config;
pub mod digest;
pub mod embedded;
pub mod error;
pub mod events;
pub mod failpoint;
pub mod files;
pub mod glob;
pub mod instance;
pub mod mcp;
pub mod registry;
pub mod relay;
pub mod sanitize;
pub mod server;
pub mod spool;
pub mod status;
pub mod sys;
pub mod text;
pub mod tmux;
pub mod tui;
pub mod turn;
pub mod wire;
