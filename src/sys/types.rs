//! The flags, numbers and plain types of `sys`'s calls (part of `sys`,
//! which re-exports them): values libc names, and the structs the calls
//! take and give; nothing here calls into libc.

use std::fs::File;

/// Flags for `OpenOptionsExt::custom_flags` (`O_NONBLOCK`: opening a FIFO
/// or a device that stands where a file should be never waits;
/// `O_NOCTTY`: a terminal device planted there never becomes our
/// controlling terminal; `O_DIRECTORY`: the open fails unless the path is
/// a directory), and the signals and error numbers callers name.
pub use libc::{ECONNREFUSED, ENOENT, O_DIRECTORY, O_NOCTTY, O_NOFOLLOW, O_NONBLOCK};
pub use libc::{SIGKILL, SIGTERM};

/// The longest socket path `bind` accepts here (`sun_path` less the NUL).
pub fn max_socket_path() -> usize {
    std::mem::size_of::<libc::sockaddr_un>() - std::mem::offset_of!(libc::sockaddr_un, sun_path) - 1
}

/// Credentials of the process at the other end of a Unix stream, as the
/// kernel recorded them at connect time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub uid: u32,
    /// `None` where the platform does not report the peer pid.
    pub pid: Option<u32>,
}

/// An account of the system's user database (`sys::account`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: std::path::PathBuf,
}

/// A date and time of day on the wall clock, as `struct tm` holds it but
/// with the month from 1 and the full year (`local_time`, `local_to_epoch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// What `kill(pid, 0)` says about a pid.
#[derive(Debug, PartialEq, Eq)]
pub enum PidStatus {
    Alive,
    Gone,
    Unknown,
}

/// A handler's leader as `spawn_leader` started it: its pid, which is
/// also its process group, and our ends of its stdin, stdout and stderr
/// (close-on-exec).
pub struct Leader {
    pub pid: u32,
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
}

/// A wait status: the exit code, or the signal that ended the process.
pub(super) fn exit_of(status: libc::c_int) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// Whether the kernel names a Unix socket's peer pid here (and baton reads
/// the ancestry): Linux, the BSDs and macOS.
pub const KNOWS_PEER_PID: bool = cfg!(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
));

/// A directory for a unit test, `tag` naming it: removed if a run before
/// left it, and not created.
#[cfg(test)]
pub(crate) fn scratch(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("baton-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}
