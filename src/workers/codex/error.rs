//! What can go wrong talking to Codex's app-server.

use crate::text::sanitize;
use crate::workers::ws;
use std::fmt;
use std::time::Duration;

#[derive(Debug)]
pub enum Error {
    /// The WebSocket under it failed (connect, handshake, I/O).
    Ws(ws::Error),
    /// The app-server answered a request with an error.
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
    /// A message that is not the JSON expected.
    Json { what: String, why: String },
    /// A request could not be written (nothing of it reached Codex
    /// whole).
    Unsent(ws::Error),
    /// The app-server closed the connection.
    Closed,
    /// What was waited for did not come in time.
    TimedOut { what: String, after: Duration },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Ws(e) => write!(f, "Codex app-server: {e}"),
            Error::Rpc {
                method,
                code,
                message,
            } => write!(
                f,
                "Codex app-server refused {method}: {} (code {code})",
                sanitize::escape(message)
            ),
            Error::Json { what, why } => write!(
                f,
                "Codex app-server sent {what} that baton cannot read: {}",
                sanitize::escape(why)
            ),
            Error::Unsent(e) => write!(f, "Codex app-server: cannot send a request: {e}"),
            Error::Closed => f.write_str("Codex app-server closed the connection (did it exit?)"),
            Error::TimedOut { what, after } => write!(
                f,
                "Codex app-server: no {what} within {:.1}s",
                after.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Ws(e) | Error::Unsent(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ws::Error> for Error {
    fn from(e: ws::Error) -> Error {
        match e {
            ws::Error::Eof | ws::Error::Closed => Error::Closed,
            e => Error::Ws(e),
        }
    }
}
