//! Starting a handler's leader (part of `sys`, which re-exports it): the
//! entry points, what stands for them where there is no `clone`, and the
//! plain data the child is given; waiting for it, signalling it. The calls, and their `unsafe`, are
//! `linux_spawn`'s, in sys.rs.

/// Starts `program` with `args` (`argv[0]` is `program`) in `dir`, with
/// this process's environment and `env` over it, its stdio piped, as the
/// leader of a process group of its own that dies with SIGKILL when the
/// thread that starts it ends (`PR_SET_PDEATHSIG`): when the instance
/// dies, even of SIGKILL, its handler's leader goes with it. A parent that
/// died before the setting took effect is caught by comparing `getppid`
/// afterwards: the child then fails to start. Linux only; elsewhere
/// `turn` starts it with `Command`, with a process group and no death
/// signal.
///
/// It is started the way `posix_spawn` does, which std's `Command` can
/// not do once it needs a hook between fork and exec: the child shares our
/// memory (`CLONE_VM | CLONE_VFORK`, so no page tables are copied) and
/// this thread waits until it called `execve`. It runs only system calls
/// on a stack of its own, with every signal blocked until its handlers are
/// reset, and with the scheduler's default slice if this thread asked for
/// a short one (`prefer_short_slices`). Reap the leader with `wait_leader`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use super::linux_spawn::spawn as spawn_leader;

/// Asks for short turns on the CPU for the calling thread: a 0.1 ms slice
/// (`sched_setattr`'s `sched_runtime`; Linux 6.12 and later honour it),
/// so that it takes the CPU from a thread with a longer slice as soon as
/// it wakes. Only a normal thread is changed, keeping its nice value;
/// the handlers it starts get the default slice (`spawn_leader`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use super::linux_spawn::short_slices as prefer_short_slices;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn prefer_short_slices() -> std::io::Result<()> {
    Ok(())
}

/// What `linux_spawn` keeps of a thread's scheduling and gives the child.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) mod data {
    use std::cell::Cell;
    use std::ffi::{c_char, c_int};
    use std::sync::atomic::AtomicI32;

    /// `struct sched_attr` (sched_setattr(2)), its first version.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct SchedAttr {
        pub size: u32,
        pub policy: u32,
        pub flags: u64,
        pub nice: i32,
        pub priority: u32,
        pub runtime: u64,
        pub deadline: u64,
        pub period: u64,
    }

    pub const SCHED_FLAG_RESET_ON_FORK: u64 = 1;
    pub const SHORT_SLICE_NS: u64 = 100_000;

    thread_local! {
        /// Set once this thread asked for a short slice: what the
        /// handlers it starts get instead (its policy and nice value, the
        /// default slice).
        pub static DEFAULT_SLICE: Cell<Option<SchedAttr>> = const { Cell::new(None) };
    }

    /// What the child reads (all prepared by the parent, which waits
    /// while it runs) and the errno it leaves when it cannot exec.
    pub struct Args {
        pub path: *const c_char,
        pub argv: *const *const c_char,
        pub envp: *const *const c_char,
        pub dir: *const c_char,
        /// Its stdin, stdout and stderr: descriptors 3 and up.
        pub fds: [c_int; 3],
        pub parent: libc::pid_t,
        /// The scheduling the handler gets, if not ours as it is.
        pub sched: Option<SchedAttr>,
        pub errno: AtomicI32,
    }
}

use super::PidStatus;
use std::io;

/// Whether the process `pid` exists.
pub fn pid_status(pid: u32) -> PidStatus {
    // Signal 0 performs only the existence and permission check; a pid
    // `signal` refuses is unknown.
    match signal(pid, 0).map_err(|e| e.raw_os_error()) {
        Ok(()) | Err(Some(libc::EPERM)) => PidStatus::Alive,
        Err(Some(libc::ESRCH)) => PidStatus::Gone,
        _ => PidStatus::Unknown,
    }
}

/// Sends `sig` to the process `pid` (never a group: 0 and values that
/// would read as negative are refused).
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    super::kill(pid, 1, sig, "bad pid")
}

/// Sends `sig` to every process in the process group `pgid`.
pub fn kill_group(pgid: u32, sig: i32) -> io::Result<()> {
    super::kill(pgid, -1, sig, "bad process group")
}

/// Waits for the child `pid` to exit and reaps it: its exit code, or the
/// signal that ended it.
pub fn wait_leader(pid: u32) -> io::Result<(Option<i32>, Option<i32>)> {
    super::waitpid(pid, 0).map(Option::unwrap_or_default)
}

/// Whether the child `pid` exited, without waiting: reaps it if so.
pub fn try_wait_leader(pid: u32) -> io::Result<Option<(Option<i32>, Option<i32>)>> {
    super::waitpid(pid, libc::WNOHANG)
}
