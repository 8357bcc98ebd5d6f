//! The requests of docs/protocol.md as types: for each method its
//! parameters (what a client sends and the server reads, once) and its
//! answer (what the server writes and a client reads). Both ends build and
//! read these and nothing looser; `serde_json` keeps an object's members
//! in sorted order, so each struct's fields are declared sorted too, and
//! the bytes on the wire are those docs/protocol.md shows.

mod control;
mod inbox;
mod params;

pub use control::*;
pub use inbox::*;
pub use params::{Fields, Invalid, NoParams, missing};
