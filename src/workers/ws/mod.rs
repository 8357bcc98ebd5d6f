//! A WebSocket client (RFC 6455) over a Unix-domain socket, for Codex's
//! app-server (`baton serve --codex`, issue 33), written here rather than
//! taken from a crate: the handshake's SHA-1 and base64, frames and
//! their masking, each tested against its published vectors.
//!
//! Only what a client of a local server needs: no TLS, no extensions,
//! text messages sent in one frame each. It knows no other room but
//! `sys` (its connect and its random bytes) and `sanitize` (the server's
//! words in an error).

pub mod base64;
pub mod client;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod sha1;

pub use client::{Client, Options, Stream};
pub use error::Error;

#[cfg(test)]
mod tests;
