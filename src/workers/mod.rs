//! The workers that run a task: a handler process (`turn`), a tmux pane
//! (`tmux`), Codex's app-server (`codex`, over `ws`) (docs/ARCHITECTURE.md,
//! layer 7).

pub mod codex;
pub mod tmux;
pub mod turn;
pub mod ws;
