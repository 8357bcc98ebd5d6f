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

impl ExitCode {
    /// The status a baton process exited with, as one of these; a status
    /// baton never gives is a transport failure (something else failed).
    pub fn from_code(code: i32) -> ExitCode {
        match code {
            0 => ExitCode::Ok,
            1 => ExitCode::Refused,
            2 => ExitCode::Usage,
            3 => ExitCode::NoTarget,
            5 => ExitCode::WaitTimedOut,
            _ => ExitCode::Transport,
        }
    }
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
    /// A task is not where an operation on the spool needs it.
    Spool(SpoolError),
}

/// Why the spool would not move a task (`spool/claim.rs`): the words say
/// what, and which task; the front end chooses the exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpoolError {
    /// The spool holds no task with this id.
    NoTask(String),
    /// The task is not being processed (nor interrupted, for a finish).
    NotProcessing(String),
    /// The task is not queued.
    NotQueued(String),
    /// The task is neither interrupted nor rejected with data that can be
    /// read back.
    NotSetAside(String),
}

impl fmt::Display for SpoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpoolError::NoTask(id) => write!(f, "no task {id} in the spool"),
            SpoolError::NotProcessing(id) => write!(f, "task {id} is not being processed"),
            SpoolError::NotQueued(id) => write!(f, "task {id} is not queued"),
            SpoolError::NotSetAside(id) => write!(f, "no interrupted or rejected task {id}"),
        }
    }
}

impl std::error::Error for SpoolError {}

impl From<SpoolError> for Error {
    fn from(e: SpoolError) -> Error {
        Error::Spool(e)
    }
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

impl<S: Into<String>> From<S> for Invalid {
    fn from(s: S) -> Invalid {
        Invalid(s.into())
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
            // A task that is not where the command needs it is a usage
            // error, as a wrong id on the command line is.
            Error::Usage(_) | Error::Env(_) | Error::Io { .. } | Error::Spool(_) => ExitCode::Usage,
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
            Error::Spool(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Spool(e) => Some(e),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::Spool;
    use crate::wire::Outcome;

    /// The spool says which task is not where, as a typed error; the
    /// front end's one `match` gives it exit status 2, as before, with
    /// the words it always had.
    #[test]
    fn a_misplaced_task_is_a_spool_error_with_the_usage_exit() {
        let dir = crate::base::files::scratch("error-misplaced");
        let s = Spool::open(&dir, false, false).unwrap();
        let cases = [
            (
                s.finish("m1", Outcome::Done).unwrap_err(),
                SpoolError::NoTask("m1".into()),
                "no task m1 in the spool",
            ),
            (
                s.withdraw("m2", Outcome::Cancelled).unwrap_err(),
                SpoolError::NotQueued("m2".into()),
                "task m2 is not queued",
            ),
            (
                s.requeue("m3").unwrap_err(),
                SpoolError::NotSetAside("m3".into()),
                "no interrupted or rejected task m3",
            ),
            (
                s.unclaim("m4").unwrap_err(),
                SpoolError::NotProcessing("m4".into()),
                "task m4 is not being processed",
            ),
        ];
        for (got, want, text) in cases {
            assert_eq!(got.to_string(), text);
            assert_eq!(got.exit_code(), ExitCode::Usage, "{text}");
            match got {
                Error::Spool(e) => assert_eq!(e, want),
                other => panic!("{text}: not a spool error: {other:?}"),
            }
        }
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
