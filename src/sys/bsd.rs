//! What the BSDs' and macOS's kernels say of other processes and of a
//! socket's peer (part of `sys`, which re-exports it; elsewhere `/proc`
//! answers, `procfs`): a process's parent, group, session and state
//! (`kinfo_proc` from `sysctl`; macOS: `proc_pidinfo`), the environment
//! it started with (`sysctl`), and the pid at the other end of a Unix
//! socket (`getsockopt`). Safe code over the bytes `sys::kernel` reads:
//! each field is read at the offset, and with the type, that the libc
//! crate gives it, which follow the system's headers.

#[cfg(not(any(
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
)))]
pub use crate::sys::procfs::{environ_values, process};
#[cfg(any(
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
))]
pub use kinfo::{environ_values, peer_pid, process};

/// Where the kernel reports only the peer's uid (`getpeereid`).
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
)))]
pub fn peer_pid(_stream: &std::os::unix::net::UnixStream) -> Option<u32> {
    None
}

#[cfg(any(
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "macos"
))]
mod kinfo {
    use super::super::kernel;
    use crate::sys::procfs::{self, ProcEntry};
    use std::ffi::c_int;
    use std::os::unix::net::UnixStream;

    /// The `$t` at `$at` bytes into `$b`, in native byte order; None
    /// where `$b` is too short.
    macro_rules! at {
        ($b:expr, $at:expr, $t:ty) => {
            $b.get($at..$at + size_of::<$t>())
                .and_then(|b| b.try_into().ok())
                .map(<$t>::from_ne_bytes)
        };
    }

    /// Field `$f` of the struct `$s` the kernel wrote into `$b`, which
    /// libc declares of type `$t` (the closure compiles only if it is).
    macro_rules! field {
        ($b:expr, $s:ty, $f:ident: $t:ty) => {{
            let _declared: fn(&$s) -> $t = |s| s.$f;
            at!($b, std::mem::offset_of!($s, $f), $t)
        }};
    }

    #[cfg(not(target_os = "macos"))]
    fn entry(pid: u32, [ppid, pgid, sid]: [i32; 3], zombie: bool) -> Option<ProcEntry> {
        Some(ProcEntry {
            pid,
            ppid: u32::try_from(ppid).ok()?,
            pgid: u32::try_from(pgid).ok()?,
            sid: u32::try_from(sid).ok()?,
            zombie,
        })
    }

    /// `KERN_PROC_PID`: one `kinfo_proc`.
    #[cfg(target_os = "freebsd")]
    pub fn process(pid: u32) -> Option<ProcEntry> {
        use libc::pid_t;
        type K = libc::kinfo_proc;
        let mib = [
            libc::CTL_KERN,
            libc::KERN_PROC,
            libc::KERN_PROC_PID,
            c_int::try_from(pid).ok()?,
        ];
        let b = kernel::sysctl_bytes(&mib, size_of::<K>()).ok()?;
        // Of another size, it is of another layout.
        let size = field!(b, K, ki_structsize: c_int)?;
        if usize::try_from(size) != Ok(size_of::<K>()) {
            return None;
        }
        let ids = [
            field!(b, K, ki_ppid: pid_t)?,
            field!(b, K, ki_pgid: pid_t)?,
            field!(b, K, ki_sid: pid_t)?,
        ];
        let zombie = field!(b, K, ki_stat: libc::c_char)? == libc::SZOMB;
        entry(pid, ids, zombie)
    }

    // sys/user.h: KINFO_PROC_SIZE, which the kernel asserts.
    #[cfg(all(target_os = "freebsd", target_arch = "x86_64"))]
    const _: () = assert!(size_of::<libc::kinfo_proc>() == 1088);

    /// `KERN_PROC` (OpenBSD) or `KERN_PROC2` (NetBSD) by pid: one
    /// element of the size we give, which the kernel fills as far as it
    /// goes (a newer kernel's struct only grows at its end).
    #[cfg(any(target_os = "openbsd", target_os = "netbsd"))]
    pub fn process(pid: u32) -> Option<ProcEntry> {
        #[cfg(target_os = "openbsd")]
        use libc::{KERN_PROC as WHICH, kinfo_proc as K};
        #[cfg(target_os = "netbsd")]
        use libc::{KERN_PROC2 as WHICH, kinfo_proc2 as K};
        // sys/proc.h: SZOMB 5 and SDEAD 6, both of which ps(1) shows as Z.
        const SZOMB: i8 = 5;
        const SDEAD: i8 = 6;
        let size = c_int::try_from(size_of::<K>()).ok()?;
        let mib = [
            libc::CTL_KERN,
            WHICH,
            libc::KERN_PROC_PID,
            c_int::try_from(pid).ok()?,
            size,
            1,
        ];
        let b = kernel::sysctl_bytes(&mib, size_of::<K>()).ok()?;
        field!(b, K, p_pid: i32).filter(|p| *p == mib[3])?;
        let ids = [
            field!(b, K, p_ppid: i32)?,
            field!(b, K, p__pgid: i32)?,
            field!(b, K, p_sid: i32)?,
        ];
        let stat = field!(b, K, p_stat: i8)?;
        entry(pid, ids, stat == SZOMB || stat == SDEAD)
    }

    /// `proc_pidinfo`'s `PROC_PIDTBSDINFO`, and the session from `getsid`
    /// (which `proc_bsdinfo` does not hold).
    #[cfg(target_os = "macos")]
    pub fn process(pid: u32) -> Option<ProcEntry> {
        type B = libc::proc_bsdinfo;
        let ask = c_int::try_from(pid).ok()?;
        let b = kernel::proc_info_bytes(ask, libc::PROC_PIDTBSDINFO, size_of::<B>()).ok()?;
        field!(b, B, pbi_pid: u32).filter(|p| *p == pid)?;
        Some(ProcEntry {
            pid,
            ppid: field!(b, B, pbi_ppid: u32)?,
            pgid: field!(b, B, pbi_pgid: u32)?,
            sid: super::super::session_of(pid)?,
            zombie: field!(b, B, pbi_status: u32)? == libc::SZOMB,
        })
    }

    /// The values of `names` in the environment process `pid` started
    /// with (`None` each where it is absent or cannot be read: another
    /// user's process, or on the BSDs one larger than `procfs::ENV_LIMIT`).
    pub fn environ_values<const N: usize>(pid: u32, names: [&str; N]) -> [Option<String>; N] {
        match c_int::try_from(pid).ok().and_then(environment) {
            Some(env) => procfs::values_in(&env, names),
            None => [const { None }; N],
        }
    }

    /// FreeBSD's `KERN_PROC_ENV`: the strings, each ending in a NUL.
    #[cfg(target_os = "freebsd")]
    fn environment(pid: c_int) -> Option<Vec<u8>> {
        let mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_ENV, pid];
        kernel::sysctl_bytes(&mib, procfs::ENV_LIMIT).ok()
    }

    /// `KERN_PROC_ARGS`' `KERN_PROC_ENV`: NetBSD gives the strings, each
    /// ending in a NUL; OpenBSD a vector of pointers to them first.
    #[cfg(any(target_os = "openbsd", target_os = "netbsd"))]
    fn environment(pid: c_int) -> Option<Vec<u8>> {
        let mib = [
            libc::CTL_KERN,
            libc::KERN_PROC_ARGS,
            pid,
            libc::KERN_PROC_ENV,
        ];
        let b = kernel::sysctl_bytes(&mib, procfs::ENV_LIMIT).ok()?;
        #[cfg(target_os = "openbsd")]
        let b = procfs::vector_strings(&b).to_vec();
        Some(b)
    }

    /// macOS's `KERN_PROCARGS2`, into a buffer of `KERN_ARGMAX` bytes, as
    /// ps(1) asks: the whole area fits, and of a smaller buffer the kernel
    /// need not fill the area's start.
    #[cfg(target_os = "macos")]
    fn environment(pid: c_int) -> Option<Vec<u8>> {
        let max = kernel::sysctl_bytes(&[libc::CTL_KERN, libc::KERN_ARGMAX], size_of::<c_int>());
        let max = usize::try_from(at!(max.ok()?, 0, c_int)?).ok()?;
        let b = kernel::sysctl_bytes(&[libc::CTL_KERN, libc::KERN_PROCARGS2, pid], max).ok()?;
        Some(procfs::procargs_env(&b).to_vec())
    }

    /// The pid at the other end of `stream`, as the kernel recorded it:
    /// the client's when it connected; to a client, the server's when it
    /// listened (FreeBSD) or bound (OpenBSD, NetBSD), or the last process
    /// to use the server's end (macOS). None where the kernel says none.
    pub fn peer_pid(stream: &UnixStream) -> Option<u32> {
        u32::try_from(raw_peer_pid(stream)?).ok().filter(|p| *p > 0)
    }

    /// `LOCAL_PEERCRED`'s `xucred`: `cr_pid` (FreeBSD 13 and later; 0
    /// before) is the first member of the union that ends it.
    #[cfg(target_os = "freebsd")]
    fn raw_peer_pid(stream: &UnixStream) -> Option<libc::pid_t> {
        type X = libc::xucred;
        // sys/un.h: SOL_LOCAL is 0 (libc 0.2.169 does not name it here).
        let b = kernel::sockopt_bytes(stream, (0, libc::LOCAL_PEERCRED), size_of::<X>()).ok()?;
        field!(b, X, cr_version: libc::c_uint).filter(|v| *v == libc::XUCRED_VERSION)?;
        at!(
            b,
            std::mem::offset_of!(X, cr_pid__c_anonymous_union),
            libc::pid_t
        )
    }

    /// `SO_PEERCRED`'s `sockpeercred`.
    #[cfg(target_os = "openbsd")]
    fn raw_peer_pid(stream: &UnixStream) -> Option<libc::pid_t> {
        type P = libc::sockpeercred;
        let opt = (libc::SOL_SOCKET, libc::SO_PEERCRED);
        let b = kernel::sockopt_bytes(stream, opt, size_of::<P>()).ok()?;
        field!(b, P, pid: libc::pid_t)
    }

    /// `LOCAL_PEEREID`'s `unpcbid`.
    #[cfg(target_os = "netbsd")]
    fn raw_peer_pid(stream: &UnixStream) -> Option<libc::pid_t> {
        type U = libc::unpcbid;
        // sys/un.h: SOL_LOCAL is 0 (libc does not name it here).
        let b = kernel::sockopt_bytes(stream, (0, libc::LOCAL_PEEREID), size_of::<U>()).ok()?;
        field!(b, U, unp_pid: libc::pid_t)
    }

    /// `LOCAL_PEERPID`: a `pid_t`.
    #[cfg(target_os = "macos")]
    fn raw_peer_pid(stream: &UnixStream) -> Option<libc::pid_t> {
        let opt = (libc::SOL_LOCAL, libc::LOCAL_PEERPID);
        let b = kernel::sockopt_bytes(stream, opt, size_of::<libc::pid_t>()).ok()?;
        at!(b, 0, libc::pid_t)
    }
}
