//! What every room rests on: errors, configuration, accounts, digests,
//! fail points, the status line, files written safely, and the reaping of
//! children (docs/ARCHITECTURE.md, layer 2).

pub mod accounts;
pub mod config;
pub mod digest;
pub mod error;
pub mod failpoint;
#[macro_use]
pub mod files;
pub mod reaper;
pub mod status;
