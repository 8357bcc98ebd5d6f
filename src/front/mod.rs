//! What the front ends share: an instance on a thread of a front end's own
//! (`embedded`), a task followed to its end (`follow`) and what became of
//! a task, live or in a stopped agent's spool (`result`)
//! (docs/ARCHITECTURE.md, layer 11).

pub mod embedded;
pub mod follow;
pub mod result;
