//! The only place that calls libc: thin, safe wrappers over the few system
//! calls std does not expose (peer credentials, flock, umask, kill(0),
//! the sun_path limit, the working directory of a peer, a send that does
//! not wait, waiting on a pipe or a stop signal, a child that dies with
//! its parent, local time), and what /proc says about other processes.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::Command;

/// Writes what the socket takes now, without waiting: the number of bytes
/// written, 0 when its buffer is full.
pub fn send_nowait(stream: &UnixStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe `bytes`, which outlives
        // the call; the descriptor is owned by `stream`.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                // Rust ignores SIGPIPE, so a gone peer is EPIPE.
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(0),
            _ => return Err(e),
        }
    }
}

/// `O_NOFOLLOW`, for `OpenOptionsExt::custom_flags`.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// `O_NONBLOCK`, for `OpenOptionsExt::custom_flags`: opening a FIFO or a
/// device that stands where a file should be never waits.
pub const O_NONBLOCK: i32 = libc::O_NONBLOCK;

/// What ran short, when `e` says a resource is short for now and may come
/// back (descriptors, memory, processes, a failing device): such an error
/// is no verdict on the data being read. `None` for any other error.
pub fn shortage(e: &io::Error) -> Option<&'static str> {
    Some(match e.raw_os_error()? {
        libc::EMFILE => "out of file descriptors (the process's limit, EMFILE)",
        libc::ENFILE => "out of file descriptors (the system's limit, ENFILE)",
        libc::ENOMEM => "out of memory (ENOMEM)",
        libc::EAGAIN => "out of a resource for now (EAGAIN)",
        libc::EIO => "an input/output error (EIO)",
        _ => return None,
    })
}

/// An error number by its name, for the fail points: those `shortage`
/// knows, and `ENOSPC` (a full disk).
pub fn errno_named(name: &str) -> Option<i32> {
    Some(match name {
        "emfile" => libc::EMFILE,
        "enfile" => libc::ENFILE,
        "enomem" => libc::ENOMEM,
        "eagain" => libc::EAGAIN,
        "eio" => libc::EIO,
        "enospc" => libc::ENOSPC,
        _ => return None,
    })
}

/// Credentials of the process at the other end of a Unix stream, as the
/// kernel recorded them at connect time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub uid: u32,
    /// `None` where the platform does not report the peer pid.
    pub pid: Option<u32>,
}

/// Reads the peer's credentials (`SO_PEERCRED` on Linux, `getpeereid`
/// elsewhere).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `stream`; `cred` and `len`
    // point to valid, writable memory of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        uid: cred.uid,
        pid: (cred.pid > 0).then_some(cred.pid as u32),
    })
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut uid: libc::uid_t = 0;
    let mut gid: libc::gid_t = 0;
    // SAFETY: the fd is a live socket owned by `stream`; both out-pointers
    // are valid for writes.
    let rc = unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred { uid, pid: None })
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Sets the process umask, returning the previous one.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask has no preconditions and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// What `kill(pid, 0)` says about a pid.
#[derive(Debug, PartialEq, Eq)]
pub enum PidStatus {
    Alive,
    Gone,
    Unknown,
}

pub fn pid_status(pid: u32) -> PidStatus {
    if pid == 0 || pid > i32::MAX as u32 {
        return PidStatus::Unknown;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc == 0 {
        return PidStatus::Alive;
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => PidStatus::Gone,
        Some(libc::EPERM) => PidStatus::Alive,
        _ => PidStatus::Unknown,
    }
}

/// Takes an exclusive `flock` without blocking. `Ok(false)` means another
/// process holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: the fd is owned by `file` and stays open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Caps glibc's malloc arenas at two. By default each thread that
/// allocates may get an arena of its own (up to eight per core), and each
/// keeps resident memory; an instance's threads (one per connection and
/// per watcher) are mostly idle, so they share. `MALLOC_ARENA_MAX` in the
/// environment still wins. Elsewhere this does nothing.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called
        // at start, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// The longest socket path `bind` accepts here (`sun_path` less the NUL).
pub fn max_socket_path() -> usize {
    std::mem::size_of::<libc::sockaddr_un>() - std::mem::offset_of!(libc::sockaddr_un, sun_path) - 1
}

/// The working directory of another process, where the platform exposes it.
pub fn process_cwd(pid: u32) -> Option<PathBuf> {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
    } else {
        None
    }
}

/// Sends `sig` to the process `pid` (never a group: 0 and values that
/// would read as negative are refused).
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad pid"));
    }
    // SAFETY: kill has no memory-safety preconditions; a positive pid
    // names one process.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `sig` to every process in the process group `pgid`.
pub fn kill_group(pgid: u32, sig: i32) -> io::Result<()> {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad process group",
        ));
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid names
    // a process group.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What `wait_ready` saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Ready {
    /// The descriptor can be read (or written) without blocking, or it
    /// hung up or failed: the read or write that follows says which.
    Io,
    /// `stop` is readable or hung up: whoever waits should stop.
    Stop,
}

/// Waits, without a deadline, until `fd` can be read (written, with
/// `write`) or `stop` is readable or hung up; `stop` wins when both are.
pub fn wait_ready(fd: BorrowedFd<'_>, write: bool, stop: BorrowedFd<'_>) -> io::Result<Ready> {
    let events = if write { libc::POLLOUT } else { libc::POLLIN };
    let mut fds = [
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfd
        // for the call, and both descriptors are borrowed, so open.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if rc >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(if fds[0].revents != 0 {
        Ready::Stop
    } else {
        Ready::Io
    })
}

/// Sets `O_NONBLOCK` on the open file description behind `fd` (for a
/// pipe, this end only).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl(F_GETFL) only reads the flags of a descriptor that is
    // borrowed, so open.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL changes only the status flags.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the process `cmd` starts die with SIGKILL when the thread that
/// starts it ends (`PR_SET_PDEATHSIG`, Linux): when the instance dies, even
/// of SIGKILL, its handler's leader goes with it. A parent that died
/// before the setting took effect is caught by comparing `getppid`
/// afterwards: the child then fails to start. Elsewhere this does nothing.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    let hook = move || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches
        // no memory; it is async-signal-safe, as this hook must be.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: getppid has no preconditions and cannot fail.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it calls prctl and getppid,
    // allocates nothing (an `io::Error` from an errno does not) and takes
    // no lock.
    unsafe {
        cmd.pre_exec(hook);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn die_with_parent(_cmd: &mut Command) {}

/// A process as `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub zombie: bool,
}

/// Every process `/proc` lists (Linux); none where there is no `/proc`.
pub fn processes() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(process)
        .collect()
}

/// `/proc/PID/stat`, read bounded: `pid (comm) state ppid pgrp session …`,
/// where comm may hold anything but ends at the last `)`.
pub fn process(pid: u32) -> Option<ProcEntry> {
    let mut stat = String::new();
    File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .take(4096)
        .read_to_string(&mut stat)
        .ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().take(4).collect();
    Some(ProcEntry {
        pid,
        zombie: *f.first()? == "Z",
        pgid: f.get(2)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
    })
}

/// Whether the environment process `pid` started with holds `entry`
/// (`NAME=value`) exactly. False when it cannot be read (another user's
/// process, or no `/proc`); only the first 4 MiB are looked at.
pub fn environ_has(pid: u32, entry: &str) -> bool {
    let mut env = Vec::new();
    let read = File::open(format!("/proc/{pid}/environ"))
        .and_then(|f| f.take(4 << 20).read_to_end(&mut env));
    read.is_ok() && env.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// The listening socket systemd passed (socket activation): fd 3, when
/// `LISTEN_PID` is this process, `LISTEN_FDS` is at least 1 and fd 3 is a
/// socket. The variables are removed so that children do not see them.
pub fn activated_listener() -> Option<UnixListener> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || fds < 1 {
        return None;
    }
    // SAFETY: removing variables happens before any other thread of this
    // process reads the environment (startup, single-threaded).
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    const FD: RawFd = 3;
    // SAFETY: LISTEN_PID naming this process means the manager passed fd 3
    // open, for this process to own (the socket-activation protocol), and
    // nothing else here takes it; it is owned once, and handed back
    // unclosed below unless it is a socket.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(FD) });
    match file.metadata() {
        Ok(m) if m.file_type().is_socket() => Some(UnixListener::from(OwnedFd::from(file))),
        _ => {
            // Not ours to close: left as it was found.
            let _ = file.into_raw_fd();
            None
        }
    }
}

pub const SIGTERM: i32 = libc::SIGTERM;
pub const SIGKILL: i32 = libc::SIGKILL;
pub const ECONNREFUSED: i32 = libc::ECONNREFUSED;
pub const ENOENT: i32 = libc::ENOENT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pid_is_alive() {
        assert_eq!(pid_status(std::process::id()), PidStatus::Alive);
    }

    #[test]
    fn peer_cred_of_socketpair_is_self() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(&a).unwrap();
        assert_eq!(cred.uid, euid());
        if cfg!(target_os = "linux") {
            assert_eq!(cred.pid, Some(std::process::id()));
        }
    }

    #[test]
    fn sun_path_limit_is_plausible() {
        let n = max_socket_path();
        assert!((90..=1023).contains(&n), "{n}");
    }
}

/// A date and time of day on the wall clock, as `struct tm` holds it but
/// with the month from 1 and the full year.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// `epoch` (seconds) in the local time zone (`TZ`, else the system's).
// time_t is 64 bits here, 32 on some other targets.
#[allow(clippy::useless_conversion)]
pub fn local_time(epoch: i64) -> Option<Civil> {
    let t: libc::time_t = epoch.try_into().ok()?;
    // SAFETY: an all-zero `tm` is valid (its one pointer, tm_zone, null).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers point to live values of the right types;
    // localtime_r writes only into `tm` and is thread-safe.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    Some(Civil {
        year: tm.tm_year + 1900,
        month: u32::try_from(tm.tm_mon + 1).ok()?,
        day: u32::try_from(tm.tm_mday).ok()?,
        hour: u32::try_from(tm.tm_hour).ok()?,
        minute: u32::try_from(tm.tm_min).ok()?,
        second: u32::try_from(tm.tm_sec).ok()?,
    })
}

/// The epoch seconds of a local wall-clock time (`mktime`; in a daylight
/// saving change the C library picks one of the two readings). None when
/// it is out of range.
#[allow(clippy::useless_conversion)]
pub fn local_to_epoch(c: Civil) -> Option<i64> {
    // SAFETY: an all-zero `tm` is valid (its one pointer, tm_zone, null).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = c.year - 1900;
    tm.tm_mon = i32::try_from(c.month).ok()? - 1;
    tm.tm_mday = i32::try_from(c.day).ok()?;
    tm.tm_hour = i32::try_from(c.hour).ok()?;
    tm.tm_min = i32::try_from(c.minute).ok()?;
    tm.tm_sec = i32::try_from(c.second).ok()?;
    tm.tm_isdst = -1;
    // SAFETY: `tm` is a live, initialized struct; mktime reads and
    // normalizes it in place.
    let t = unsafe { libc::mktime(&mut tm) };
    if t == -1 {
        return None;
    }
    Some(i64::from(t))
}
