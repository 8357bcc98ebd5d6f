//! What can go wrong talking WebSocket to a server, in words that say
//! what to check.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug)]
pub enum Error {
    /// The socket could not be reached.
    Connect { path: PathBuf, source: io::Error },
    /// Reading from or writing to the connection failed.
    Io { op: &'static str, source: io::Error },
    /// Nothing (or not enough) came within the time allowed.
    TimedOut { op: &'static str, after: Duration },
    /// The server did not accept the upgrade to WebSocket.
    Handshake(String),
    /// The server broke RFC 6455 (the connection cannot go on).
    Protocol(String),
    /// A message was larger than the bound the client was given.
    TooLarge { limit: usize },
    /// A binary message came where text was expected (it is dropped;
    /// the connection goes on).
    NotText { len: usize },
    /// The connection ended without a WebSocket close.
    Eof,
    /// The WebSocket is closed; nothing more can be sent.
    Closed,
    /// A request path that cannot go in the request line.
    RequestPath(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect { path, source } => write!(
                f,
                "cannot connect to {}: {source} (is the server running, and is this its socket?)",
                path.display()
            ),
            Error::Io { op, source } => write!(f, "WebSocket {op} failed: {source}"),
            Error::TimedOut { op, after } => write!(
                f,
                "WebSocket {op} timed out after {:.1}s (is the server stuck, or busy?)",
                after.as_secs_f64()
            ),
            Error::Handshake(why) => write!(f, "the server refused the WebSocket upgrade: {why}"),
            Error::Protocol(why) => write!(f, "the server broke the WebSocket protocol: {why}"),
            Error::TooLarge { limit } => write!(
                f,
                "a WebSocket message from the server is larger than the limit of {limit} bytes"
            ),
            Error::NotText { len } => write!(
                f,
                "the server sent a binary WebSocket message ({len} bytes) where text was expected"
            ),
            Error::Eof => f.write_str(
                "the server closed the connection without a WebSocket close (did it exit?)",
            ),
            Error::Closed => f.write_str("the WebSocket is closed; connect again to go on"),
            Error::RequestPath(path) => write!(
                f,
                "the WebSocket request path {path:?} must start with '/' and hold no spaces or control characters"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect { source, .. } | Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `op` failed with `source`: a timeout when the kernel says so (a read
/// past `SO_RCVTIMEO` is `WouldBlock`, EAGAIN), else an I/O error.
pub(crate) fn io(op: &'static str, after: Duration) -> impl Fn(io::Error) -> Error {
    move |source| match source.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::TimedOut { op, after },
        _ => Error::Io { op, source },
    }
}
