//! The only place that calls libc: thin, safe wrappers over the system
//! calls std does not expose (peer credentials, flock, umask, kill(0), the
//! sun_path limit, a peer's working directory, a send and a connect that
//! do not wait, listening again on a passed socket, waiting on pipes or a
//! stop signal, a child that dies with us, local time, and `sysctl` where
//! there is no `/proc`); and SHA-256's rounds on the CPU's SHA extensions,
//! whose intrinsics are `unsafe` too.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};

pub use crate::sys::procfs::{
    ProcEntry, environ_has, is_zombie, lists_processes, pid_namespace, process_cwd, process_start,
    processes,
};
pub use bsd::{environ_values, process};
pub use errno::{errno_named, shortage};
pub use spawn::*;
pub use types::*;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod execargs;
pub mod procfs;

mod bsd;
mod errno;
mod spawn;
mod types;

/// A call's result as C gives it: -1 (any negative value) says `errno`.
fn check(rc: impl Into<i64>) -> io::Result<i64> {
    let rc = rc.into();
    (rc >= 0).then_some(rc).ok_or_else(io::Error::last_os_error)
}

/// `check`, the call made again while a signal interrupts it (EINTR).
fn retrying(mut call: impl FnMut() -> i64) -> io::Result<i64> {
    loop {
        match check(call()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Writes what the socket takes now, without waiting: the number of bytes
/// written, 0 when its buffer is full.
pub fn send_nowait(stream: &UnixStream, bytes: &[u8]) -> io::Result<usize> {
    let (fd, buf, len) = (stream.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
    // SAFETY: the pointer and length describe `bytes`, which outlives the
    // call; the descriptor is owned by `stream`. Rust ignores SIGPIPE, so
    // a gone peer is EPIPE.
    match retrying(|| unsafe { libc::send(fd, buf, len, libc::MSG_DONTWAIT) } as i64) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Reads the peer's credentials (`SO_PEERCRED` on Linux; elsewhere
/// `getpeereid`, and the pid where `bsd::peer_pid` can tell it).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    // SAFETY: an all-zero ucred is a valid value (ids of 0).
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let (fd, out) = (stream.as_raw_fd(), (&mut cred as *mut libc::ucred).cast());
    // SAFETY: the fd is a live socket owned by `stream`; `cred` and `len`
    // point to valid, writable memory of the size passed.
    check(unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, out, &mut len) })?;
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
    check(unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) })?;
    Ok(PeerCred {
        uid,
        pid: bsd::peer_pid(stream),
    })
}

/// The calls `bsd` decodes the answers of: each fills a buffer and says
/// how much of it the kernel wrote.
#[cfg(any(
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
))]
mod kernel {
    use std::ffi::{c_int, c_uint};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// `sysctl(mib)`, into a buffer of `limit` bytes (ENOMEM: the answer
    /// is longer).
    pub(super) fn sysctl_bytes(mib: &[c_int], limit: usize) -> io::Result<Vec<u8>> {
        let (mut mib, mut buf, mut len) = (mib.to_vec(), vec![0u8; limit], limit);
        let (name, n, old) = (mib.as_mut_ptr(), mib.len() as c_uint, buf.as_mut_ptr());
        let new = std::ptr::null_mut();
        // SAFETY: `name` points to `n` integers and `old` to `len` writable
        // bytes, all alive for the call; no new value is set.
        super::check(unsafe { libc::sysctl(name, n, old.cast(), &mut len, new, 0) })?;
        buf.truncate(len);
        Ok(buf)
    }

    /// `getsockopt(level, name)` on `stream`, into a buffer of `len` bytes.
    pub(super) fn sockopt_bytes(
        stream: &UnixStream,
        (level, name): (c_int, c_int),
        len: usize,
    ) -> io::Result<Vec<u8>> {
        let (mut buf, mut n) = (vec![0u8; len], len as libc::socklen_t);
        let (fd, out) = (stream.as_raw_fd(), buf.as_mut_ptr().cast());
        // SAFETY: the fd is a live socket owned by `stream`; `out` points to
        // `n` writable bytes, and `n` is valid for writes.
        super::check(unsafe { libc::getsockopt(fd, level, name, out, &mut n) })?;
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// `proc_pidinfo(pid, flavor)` (macOS), into a buffer of `len` bytes.
    #[cfg(target_os = "macos")]
    pub(super) fn proc_info_bytes(pid: c_int, flavor: c_int, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let (out, size) = (buf.as_mut_ptr().cast(), c_int::try_from(len).unwrap_or(0));
        // SAFETY: `out` points to `size` writable bytes, alive for the call.
        let n = unsafe { libc::proc_pidinfo(pid, flavor, 0, out, size) };
        if n <= 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }
}

/// Connects to the Unix socket at `path` without waiting: Linux completes
/// or refuses a Unix connect within the call, so a listener whose backlog
/// is full is `WouldBlock` (EAGAIN) at once, never a wait. Elsewhere it
/// is std's connect, which does not wait either: the BSDs' and macOS's
/// kernels refuse it at once when the backlog is full (ECONNREFUSED).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn connect_nowait(path: &std::path::Path) -> io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() > max_socket_path() || bytes.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: an all-zero sockaddr_un is a valid value (an empty path).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: socket takes integers and returns a new descriptor or -1.
    let fd = check(unsafe { libc::socket(libc::AF_UNIX, kind, 0) })? as RawFd;
    // SAFETY: just created, owned here only.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let (to, len) = (&addr as *const libc::sockaddr_un, size_of_val(&addr));
    // SAFETY: `to` is a sockaddr_un of `len` bytes whose path ends in a
    // NUL (checked above); the descriptor is owned by `stream`.
    let rc = unsafe { libc::connect(stream.as_raw_fd(), to.cast(), len as libc::socklen_t) };
    check(rc).map(|_| stream)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn connect_nowait(path: &std::path::Path) -> io::Result<UnixStream> {
    UnixStream::connect(path)
}

/// Calls `listen` again on a listening socket another process made (socket
/// activation): the kernel then names this process as its listener to
/// those who connect (`SO_PEERCRED`), as it does for one we bound.
pub fn listen_here(listener: &UnixListener) -> io::Result<()> {
    // SAFETY: the descriptor is owned by `listener`; listen takes integers.
    check(unsafe { libc::listen(listener.as_raw_fd(), libc::SOMAXCONN) }).map(drop)
}

/// This process's soft limit of open files (`ulimit -n`), when it has one.
pub fn open_files_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a live rlimit for getrlimit to fill.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    // `rlim_t` is a u64 on Linux, an i64 on the BSDs.
    #[allow(clippy::unnecessary_cast)]
    let soft = l.rlim_cur as u64;
    (r == 0 && l.rlim_cur != libc::RLIM_INFINITY).then_some(soft)
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Makes this process the reaper of its descendants' orphans (Linux's
/// `PR_SET_CHILD_SUBREAPER`, FreeBSD's `PROC_REAP_ACQUIRE`); false where
/// there is none.
pub fn become_subreaper() -> io::Result<bool> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: prctl takes plain integers and touches no memory.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) })?;
    #[cfg(target_os = "freebsd")]
    // SAFETY: PROC_REAP_ACQUIRE takes no data (null); pid 0 is this one.
    check(unsafe {
        libc::procctl(
            libc::P_PID,
            0,
            libc::PROC_REAP_ACQUIRE,
            std::ptr::null_mut(),
        )
    })?;
    Ok(cfg!(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd"
    )))
}

/// Becomes `who` for good: its groups, its group, then its uid (as root,
/// `setuid` sets all three ids). Only root may; every thread changes.
pub fn become_account(who: &Account) -> io::Result<()> {
    let name = std::ffi::CString::new(who.name.as_str())?;
    // SAFETY: plain integers and a NUL-terminated name; each call changes
    // only this process's credentials.
    unsafe {
        check(libc::initgroups(name.as_ptr(), who.gid as _))?;
        check(libc::setgid(who.gid))?;
        check(libc::setuid(who.uid)).map(drop)
    }
}

/// Sets the process umask, returning the previous one.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask has no preconditions and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Takes an exclusive `flock` without blocking. `Ok(false)` means another
/// process holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: the fd is owned by `file` and stays open for the call.
    match check(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
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

/// Opens `name` in the open directory `dir`: `write`, to create it
/// (mode 0600; it must not exist); else to read, never waiting on what
/// stands there (`files::open_regular`'s flags). Never through a symlink.
pub fn open_at(dir: BorrowedFd<'_>, name: &std::ffi::CStr, write: bool) -> io::Result<File> {
    let flags = match write {
        true => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        false => libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    } | libc::O_NOFOLLOW
        | libc::O_CLOEXEC;
    let mode: libc::c_uint = 0o600;
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is an
    // open descriptor for its duration.
    let fd =
        retrying(|| unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode) }.into())?;
    // SAFETY: a descriptor `openat` just returned, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

/// Renames `name` in the open directory `from` to the same name in `to`.
pub fn rename_at(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> io::Result<()> {
    let (a, b, n) = (from.as_raw_fd(), to.as_raw_fd(), name.as_ptr());
    // SAFETY: `name` is NUL-terminated and outlives the call; both
    // descriptors are open for its duration.
    check(unsafe { libc::renameat(a, n, b, n) }).map(drop)
}

/// kill(2) to `id`: a process with `sign` 1, a process group with -1.
pub(super) fn kill(id: u32, sign: libc::pid_t, sig: i32, bad: &str) -> io::Result<()> {
    if id == 0 || id > i32::MAX as u32 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, bad));
    }
    // SAFETY: kill has no memory-safety preconditions; a positive pid
    // names one process, a negative one a process group.
    check(unsafe { libc::kill(sign * id as libc::pid_t, sig) }).map(drop)
}

/// Waits up to `timeout` (`None`: without end) until one of `fds` can
/// be read (written, where its flag says so), is hung up or failed; says
/// which did (none: the time passed).
pub fn poll_ready(
    fds: &[(BorrowedFd<'_>, bool)],
    timeout: Option<std::time::Duration>,
) -> io::Result<Vec<bool>> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, write)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: if *write { libc::POLLOUT } else { libc::POLLIN },
            revents: 0,
        })
        .collect();
    let (all, n) = (polled.as_mut_ptr(), polled.len() as libc::nfds_t);
    // SAFETY: `all` is a valid, writable array of `n` pollfd for the call,
    // and every descriptor is borrowed, so open.
    // Rounded up, so that a wait never ends early.
    let ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
    });
    retrying(|| unsafe { libc::poll(all, n, ms) }.into())?;
    Ok(polled.iter().map(|p| p.revents != 0).collect())
}

/// Fills `buf` from the kernel's random source in one call (`getrandom`,
/// Linux); an error elsewhere, or when it gives less.
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        if check(n as i64)? as usize == buf.len() {
            return Ok(());
        }
    }
    let _ = buf;
    Err(io::Error::from(io::ErrorKind::UnexpectedEof))
}

/// The session of the process `pid` (0: this one); None when it is gone
/// or not ours to ask about.
pub fn session_of(pid: u32) -> Option<u32> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: getsid has no memory-safety preconditions.
    u32::try_from(unsafe { libc::getsid(pid) }).ok()
}

/// The process group of the process `pid`; None when it is gone.
pub fn group_of(pid: u32) -> Option<u32> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
    // SAFETY: getpgid has no memory-safety preconditions.
    u32::try_from(unsafe { libc::getpgid(pid) }).ok()
}

/// Sets `O_NONBLOCK` on the open file description behind `fd` (for a
/// pipe, this end only).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl(F_GETFL) only reads the flags of a descriptor that is
    // borrowed, so open.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })? as libc::c_int;
    // SAFETY: as above; F_SETFL changes only the status flags.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    check(rc).map(drop)
}

/// waitpid(2) with `flags`: None when WNOHANG finds the child running.
pub(super) fn waitpid(
    pid: u32,
    flags: libc::c_int,
) -> io::Result<Option<(Option<i32>, Option<i32>)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes only `status`, a valid c_int.
    let rc = retrying(|| unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) }.into())?;
    Ok((rc != 0).then(|| exit_of(status)))
}

/// A descriptor that becomes readable when the child `pid` exits
/// (`pidfd_open`, Linux 5.3 and later); an error where there is none.
pub fn exit_notifier(pid: u32) -> io::Result<OwnedFd> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: pidfd_open takes a pid and flags, and returns a new
        // descriptor (close-on-exec) or -1.
        let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })?;
        // SAFETY: just created, owned here only.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = pid;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux_spawn {
    use super::spawn::data::{
        Args, DEFAULT_SLICE, SCHED_FLAG_RESET_ON_FORK, SHORT_SLICE_NS, SchedAttr,
    };
    use super::{Leader, check};
    use crate::sys::execargs::ExecArgs;
    use std::cell::Cell;
    use std::ffi::{c_int, c_void};
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Path;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The child's stack: it only makes system calls.
    const STACK: usize = 64 * 1024;

    pub fn short_slices() -> io::Result<()> {
        let size = std::mem::size_of::<SchedAttr>() as u32;
        let mut attr = SchedAttr::default();
        let into = &mut attr as *mut SchedAttr;
        // SAFETY: sched_getattr writes at most `size` bytes into `attr`.
        check(unsafe { libc::syscall(libc::SYS_sched_getattr, 0, into, size, 0) })?;
        if attr.policy != libc::SCHED_OTHER as u32 || attr.flags & SCHED_FLAG_RESET_ON_FORK != 0 {
            return Ok(());
        }
        let default = SchedAttr {
            size,
            flags: 0,
            runtime: 0,
            ..attr
        };
        let short = SchedAttr {
            runtime: SHORT_SLICE_NS,
            ..default
        };
        let from = &short as *const SchedAttr;
        // SAFETY: sched_setattr reads `short.size` bytes of `short`.
        check(unsafe { libc::syscall(libc::SYS_sched_setattr, 0, from, 0) })?;
        DEFAULT_SLICE.with(|d| d.set(Some(default)));
        Ok(())
    }

    /// A pipe, both ends close-on-exec, each numbered 3 or more (so that
    /// placing the child's ends on 0, 1 and 2 overwrites none of them).
    fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which has room.
        check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
        // SAFETY: both were just created, and are owned here only.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((above_stdio(r)?, above_stdio(w)?))
    }

    fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
        if fd.as_raw_fd() > 2 {
            return Ok(fd);
        }
        // SAFETY: F_DUPFD_CLOEXEC on an open descriptor returns a new one.
        let n = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
        // SAFETY: just created, owned here only.
        Ok(unsafe { OwnedFd::from_raw_fd(n as c_int) })
    }

    pub fn spawn(
        program: &str,
        args: &[&str],
        dir: &Path,
        env: &[(&'static str, String)],
    ) -> io::Result<Leader> {
        let exec = ExecArgs::new(program, args, dir, env)?;
        let (argv, envp) = (exec.argv(), exec.envp());
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let args = Args {
            path: exec.path.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            dir: exec.dir.as_ptr(),
            fds: [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            sched: DEFAULT_SLICE.with(Cell::get),
            errno: AtomicI32::new(0),
        };
        let pid = clone_vfork(&args)?;
        let errno = args.errno.load(Ordering::SeqCst);
        if errno != 0 {
            let _ = super::wait_leader(pid);
            return Err(io::Error::from_raw_os_error(errno));
        }
        // The child's ends close here; it has its own.
        drop((in_r, out_w, err_w));
        Ok(Leader {
            pid,
            stdin: File::from(in_w),
            stdout: File::from(out_r),
            stderr: File::from(err_r),
        })
    }

    /// Starts `child` sharing our memory; returns once it called `execve`
    /// or exited. Every signal is blocked around it, so that no handler of
    /// ours runs on the child's side before it resets them.
    fn clone_vfork(args: &Args) -> io::Result<u32> {
        // Not zeroed: the child writes before it reads.
        let mut stack: Vec<std::mem::MaybeUninit<u8>> = Vec::with_capacity(STACK);
        // SAFETY: one past the end of the allocation; the stack grows
        // down from there. Rounded down to 16 bytes, as the ABI wants.
        let top = unsafe { stack.as_mut_ptr().add(STACK) };
        let top = (top as usize & !15) as *mut c_void;
        // SAFETY: a zeroed sigset_t is a valid value to fill (every
        // signal, and the mask to restore).
        let [mut all, mut old]: [libc::sigset_t; 2] = unsafe { std::mem::zeroed() };
        // SAFETY: sigfillset and pthread_sigmask write only the sets given.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        let arg = args as *const Args as *mut c_void;
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        // SAFETY: `child` gets a stack of its own (`stack`, alive until
        // this returns) and `args`, which outlives it: with CLONE_VFORK
        // this thread is suspended until the child called `execve` or
        // exited, and the child touches nothing else of ours. It makes
        // only async-signal-safe calls, allocates nothing and takes no
        // lock, so the other threads of this process cannot deadlock it.
        let pid = check(unsafe { libc::clone(child, top, flags, arg) });
        // SAFETY: restores this thread's own mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        drop(stack);
        pid.map(|pid| pid as u32)
    }

    /// The child, between clone and exec (`exec`): a step that fails
    /// leaves its errno and exits 127.
    extern "C" fn child(arg: *mut c_void) -> c_int {
        // SAFETY: the parent passed a valid `Args`, alive while we run.
        let a = unsafe { &*(arg as *const Args) };
        let e = exec(a).err().and_then(|e| e.raw_os_error()).unwrap_or(0);
        a.errno
            .store(if e == 0 { libc::EINVAL } else { e }, Ordering::SeqCst);
        // SAFETY: _exit ends the child at once, running nothing of ours.
        unsafe { libc::_exit(127) }
    }

    /// The child's steps: its own process group, the death signal, the
    /// directory and descriptors, default signal handling, then `execve`,
    /// which returns only when it fails.
    fn exec(a: &Args) -> io::Result<()> {
        // SAFETY: each call below takes plain integers or pointers to
        // NUL-terminated strings and arrays the parent prepared; none
        // allocates or takes a lock (async-signal-safe), and neither does
        // `check` or an `io::Error` from an errno.
        unsafe {
            check(libc::setpgid(0, 0))?;
            super::die_with(a.parent)?;
            check(libc::chdir(a.dir))?;
            for (target, fd) in a.fds.iter().enumerate() {
                check(libc::dup2(*fd, target as c_int))?;
            }
            // Not our short slice (kept if this fails: it is only a hint).
            if let Some(sched) = &a.sched {
                libc::syscall(libc::SYS_sched_setattr, 0, sched as *const SchedAttr, 0);
            }
            // What has a handler of ours gets the default (what exec
            // would do), before any signal can arrive; SIGPIPE too, which
            // Rust ignores. Other ignored signals stay ignored, as with
            // fork and exec.
            for sig in 1..libc::SIGRTMAX() + 1 {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                let h = old.sa_sigaction;
                if h != libc::SIG_DFL && (h != libc::SIG_IGN || sig == libc::SIGPIPE) {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            check(libc::execve(a.path, a.argv, a.envp)).map(drop)
        }
    }
}

/// `die_with_parent`'s and `spawn_leader`'s death signal, ESRCH when the
/// parent is no longer `parent`; it allocates nothing, so it may run
/// between fork (or clone) and exec.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn die_with(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl takes plain integers and touches no memory.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) })?;
    // SAFETY: getppid has no preconditions and cannot fail.
    match unsafe { libc::getppid() } == parent {
        true => Ok(()),
        false => Err(io::Error::from_raw_os_error(libc::ESRCH)),
    }
}

/// Makes the process `cmd` starts die with SIGKILL when the thread that
/// starts it ends (`PR_SET_PDEATHSIG`, Linux; elsewhere nothing): for the
/// short `tmux` calls of `--tmux-pane` (handlers use `spawn_leader`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs between fork and exec, so it may only make
    // async-signal-safe calls, which `die_with` does.
    unsafe { cmd.pre_exec(move || die_with(parent)) };
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn die_with_parent(_cmd: &mut std::process::Command) {}

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

/// SHA-256's compression of `blocks` (whole 64-byte blocks) into `state`
/// on the CPU's SHA extensions, if it has them; false, and nothing done,
/// if not (the caller hashes them in portable code: `digest.rs`).
pub fn sha256_blocks(state: &mut [u32; 8], blocks: &[u8], k: &[u32; 64]) -> bool {
    debug_assert_eq!(blocks.len() % 64, 0);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("ssse3")
    {
        // SAFETY: `shani` needs the SHA, SSE4.1 and SSSE3 instructions
        // (SSE2 is in every x86-64 CPU), and this CPU has them, checked
        // just above; it reads and writes only through the references.
        unsafe { shani::compress(state, blocks, k) };
        return true;
    }
    let _ = (state, k);
    false
}

#[cfg(target_arch = "x86_64")]
mod shani {
    use std::arch::x86_64::*;

    /// FIPS 180-4's rounds four at a time, as Intel's SHA extensions
    /// reference code does them: the state held as ABEF and CDGH.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn compress(state: &mut [u32; 8], blocks: &[u8], k: &[u32; 64]) {
        // SAFETY (of the loads and stores): every pointer comes from a
        // reference and reads or writes 16 bytes inside it: `state` is 32
        // bytes, `k` 256, and each block 64 (`chunks_exact`).
        unsafe {
            let order = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
            let at = state.as_mut_ptr().cast::<__m128i>();
            let dcba = _mm_loadu_si128(at);
            let hgfe = _mm_loadu_si128(at.add(1));
            let cdab = _mm_shuffle_epi32(dcba, 0xb1);
            let efgh = _mm_shuffle_epi32(hgfe, 0x1b);
            let mut abef = _mm_alignr_epi8(cdab, efgh, 8);
            let mut cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
            for block in blocks.chunks_exact(64) {
                let (abef_in, cdgh_in) = (abef, cdgh);
                let p = block.as_ptr().cast::<__m128i>();
                let mut w = [
                    _mm_shuffle_epi8(_mm_loadu_si128(p), order),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(1)), order),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(2)), order),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(3)), order),
                ];
                for i in 0..16 {
                    if i >= 4 {
                        // W[i] from W[i-4], W[i-3], W[i-2] and W[i-1].
                        let t = _mm_sha256msg1_epu32(w[i % 4], w[(i + 1) % 4]);
                        let t =
                            _mm_add_epi32(t, _mm_alignr_epi8(w[(i + 3) % 4], w[(i + 2) % 4], 4));
                        w[i % 4] = _mm_sha256msg2_epu32(t, w[(i + 3) % 4]);
                    }
                    let kv = _mm_loadu_si128(k.as_ptr().add(4 * i).cast::<__m128i>());
                    let wk = _mm_add_epi32(w[i % 4], kv);
                    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
                    abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0e));
                }
                abef = _mm_add_epi32(abef, abef_in);
                cdgh = _mm_add_epi32(cdgh, cdgh_in);
            }
            let feba = _mm_shuffle_epi32(abef, 0x1b);
            let dchg = _mm_shuffle_epi32(cdgh, 0xb1);
            _mm_storeu_si128(at, _mm_blend_epi16(feba, dchg, 0xf0));
            _mm_storeu_si128(at.add(1), _mm_alignr_epi8(dchg, feba, 8));
        }
    }
}

#[cfg(test)]
mod tests;

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
    (t != -1).then(|| i64::from(t))
}
