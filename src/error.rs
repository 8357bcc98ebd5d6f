//! The error type the front ends report, and the one `match` that maps it
//! to an exit code (baton(1), EXIT STATUS).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Process exit codes, as documented in baton(1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Done: `accepted`, `duplicate`, `stored`, or any successful command.
    Ok = 0,
    /// The receiver refused (any other delivery status).
    Refused = 1,
    /// Usage or environment error.
    Usage = 2,
    /// No such target, or an ambiguous one.
    NoTarget = 3,
    /// Transport failure or timeout.
    Transport = 4,
    /// `send --wait --timeout`: the time ran out before the task ended; the
    /// task is left as it was.
    WaitTimedOut = 5,
}

#[derive(Debug)]
pub enum Error {
    /// Bad arguments.
    Usage(String),
    /// Bad environment: configuration, unsafe directories, locks.
    Env(String),
    /// An operation on a path failed.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// No target matched, or several did.
    NoTarget(String),
    /// The receiver answered with a refusal; the message is complete.
    Refused(String),
    /// The connection failed or timed out.
    Transport(String),
}

/// What is wrong with a piece of data baton did not write itself (a
/// manifest, a task file, a directory, a body): the words say what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

impl From<String> for Invalid {
    fn from(s: String) -> Invalid {
        Invalid(s)
    }
}

impl From<&str> for Invalid {
    fn from(s: &str) -> Invalid {
        Invalid(s.to_string())
    }
}

impl Error {
    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// What ran short, when this is an I/O error that says a resource is
    /// short for now (`sys::shortage`): no verdict on the data at hand.
    pub fn shortage(&self) -> Option<&'static str> {
        match self {
            Error::Io { source, .. } => crate::sys::shortage(source),
            _ => None,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_) | Error::Env(_) | Error::Io { .. } => ExitCode::Usage,
            Error::NoTarget(_) => ExitCode::NoTarget,
            Error::Refused(_) => ExitCode::Refused,
            Error::Transport(_) => ExitCode::Transport,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m)
            | Error::Env(m)
            | Error::NoTarget(m)
            | Error::Refused(m)
            | Error::Transport(m) => f.write_str(m),
            Error::Io { op, path, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
