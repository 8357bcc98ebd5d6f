//! What the front ends share: an instance on a thread of a front end's own
//! (`embedded`) and a task followed to its end (`follow`)
//! (docs/ARCHITECTURE.md, layer 11).

pub mod embedded;
pub mod follow;
