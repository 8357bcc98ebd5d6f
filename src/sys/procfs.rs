//! What `/proc` says about other processes (Linux; nothing where there is
//! no `/proc`): plain file reads, no libc. `sys` re-exports it, and asks
//! the kernel itself where there is no `/proc` (the BSDs and macOS:
//! `sys/bsd.rs`), parsing the environment it reads with what is here.

use std::fs::File;
use std::io::Read;

/// The working directory of another process, where the platform exposes it.
pub fn process_cwd(pid: u32) -> Option<std::path::PathBuf> {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
    } else {
        None
    }
}

/// A process as `/proc/PID/stat` (elsewhere the kernel's `kinfo_proc`)
/// shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    /// Its parent; 0 for the first process.
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub zombie: bool,
}

/// Whether `processes` lists this system's processes, and `environ_has`
/// reads their environment: where `/proc` shows this one.
pub fn lists_processes() -> bool {
    process(std::process::id()).is_some()
}

/// Whether `pid` has ended but is not yet reaped (a zombie), which
/// `kill(pid, 0)` does not tell from running; None where there is no
/// `/proc` to say.
pub fn is_zombie(pid: u32) -> Option<bool> {
    std::path::Path::new("/proc/self/stat")
        .exists()
        .then(|| process(pid).is_some_and(|p| p.zombie))
}

/// When `pid` started, in clock ticks after boot (`/proc/PID/stat`,
/// field 22): with the pid, it names one process for the whole boot, so
/// a pid the kernel gave to another process since is told from the one a
/// manifest recorded. None where there is no `/proc` or no such process.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = read_stat(pid)?;
    // Field 3 (the state) is the first after comm; field 22 the 20th.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `/proc/PID/stat`, read bounded.
fn read_stat(pid: u32) -> Option<String> {
    let mut stat = String::new();
    File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .take(4096)
        .read_to_string(&mut stat)
        .ok()?;
    Some(stat)
}

/// This process's pid namespace: the inode of `/proc/self/ns/pid`. None
/// where there is no `/proc`.
/// Asked of the kernel once: a process never changes its own pid
/// namespace (`unshare` and `setns` move its children only).
pub fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    if let Some(ns) = NS.get() {
        return Some(*ns);
    }
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?.ino();
    Some(*NS.get_or_init(|| ns))
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
    let stat = read_stat(pid)?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().take(4).collect();
    Some(ProcEntry {
        pid,
        zombie: *f.first()? == "Z",
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
    })
}

/// Whether the environment process `pid` started with holds `entry`
/// (`NAME=value`) exactly. False when it cannot be read (another user's
/// process, or no `/proc`); only the first 4 MiB are looked at.
pub fn environ_has(pid: u32, entry: &str) -> bool {
    environ(pid, 4 << 20).is_some_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
}

/// The first `limit` bytes of `/proc/PID/environ`.
fn environ(pid: u32, limit: u64) -> Option<Vec<u8>> {
    let mut env = Vec::new();
    let f = File::open(format!("/proc/{pid}/environ")).ok()?;
    f.take(limit).read_to_end(&mut env).ok().map(|_| env)
}

/// The values of `names` in the environment process `pid` started with
/// (`None` each where it is absent or cannot be read: another user's
/// process, or no `/proc`); only the first 256 KiB are looked at.
pub fn environ_values<const N: usize>(pid: u32, names: [&str; N]) -> [Option<String>; N] {
    match environ(pid, ENV_LIMIT as u64) {
        Some(env) => values_in(&env, names),
        None => [const { None }; N],
    }
}

/// How much of an environment `environ_values` looks at.
pub const ENV_LIMIT: usize = 256 << 10;

/// The values of `names` in `env`, `NAME=value` strings each ending in a
/// NUL (the first of each name counts).
pub fn values_in<const N: usize>(env: &[u8], names: [&str; N]) -> [Option<String>; N] {
    let mut out = [const { None }; N];
    for entry in env.split(|b| *b == 0) {
        for (i, name) in names.iter().enumerate() {
            let value = entry
                .strip_prefix(name.as_bytes())
                .and_then(|rest| rest.strip_prefix(b"="));
            if let (Some(v), None) = (value, &out[i]) {
                out[i] = Some(String::from_utf8_lossy(v).into_owned());
            }
        }
    }
    out
}

/// The environment in macOS's `KERN_PROCARGS2` answer: `argc` (an int),
/// the executable's path, NULs to align, `argc` arguments, then the
/// environment, which ends at an empty string (the loader's own strings
/// follow). Every string ends in a NUL.
#[cfg(any(target_os = "macos", test))]
pub fn procargs_env(b: &[u8]) -> &[u8] {
    let Some((argc, rest)) = b.split_first_chunk::<4>() else {
        return &[];
    };
    let after = |s: &[u8]| s.iter().position(|c| *c == 0).map_or(s.len(), |n| n + 1);
    let mut at = after(rest);
    at += rest[at..].iter().take_while(|c| **c == 0).count();
    for _ in 0..usize::try_from(i32::from_ne_bytes(*argc)).unwrap_or(0) {
        at += after(&rest[at..]);
    }
    let env = &rest[at..];
    let mut end = 0;
    while env.get(end).is_some_and(|c| *c != 0) {
        end += after(&env[end..]);
    }
    &env[..end]
}

/// The strings of OpenBSD's `KERN_PROC_ARGS` answer: a NULL-terminated
/// array of pointers to them (our buffer's addresses), then the strings,
/// each ending in a NUL, one after another.
#[cfg(any(target_os = "openbsd", test))]
pub fn vector_strings(b: &[u8]) -> &[u8] {
    let word = size_of::<usize>();
    match b.chunks_exact(word).position(|w| w.iter().all(|c| *c == 0)) {
        Some(n) => &b[(n + 1) * word..],
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 2] = [
        crate::base::config::BATON_TURN,
        crate::base::config::BATON_SOCKET,
    ];

    #[test]
    fn the_environment_in_a_procargs2_answer_is_between_the_arguments_and_an_empty_string() {
        let mut b = 2i32.to_ne_bytes().to_vec();
        b.extend(b"/bin/sh\0\0\0\0sh\0\0BATON_TURN=t-1\0BATON_SOCKET=/s\0\0ptr_munge=\0");
        let env = procargs_env(&b);
        assert_eq!(env, b"BATON_TURN=t-1\0BATON_SOCKET=/s\0");
        assert_eq!(
            values_in(env, NAMES),
            [Some("t-1".into()), Some("/s".into())]
        );
        // An argument named like a variable is an argument.
        let mut b = 1i32.to_ne_bytes().to_vec();
        b.extend(b"/x\0BATON_TURN=arg\0BATON_SOCKET=/s\0");
        assert_eq!(
            values_in(procargs_env(&b), NAMES),
            [None, Some("/s".into())]
        );
        assert_eq!(procargs_env(b"\x01\0"), b"");
        assert_eq!(procargs_env(&9i32.to_ne_bytes()), b"");
    }

    #[test]
    fn the_strings_of_a_pointer_vector_follow_its_null() {
        let mut b = Vec::new();
        for word in [0x1000usize, 0x1010, 0] {
            b.extend(word.to_ne_bytes());
        }
        b.extend(b"BATON_TURN=t-2\0BATON_SOCKET=/o\0");
        let env = vector_strings(&b);
        assert_eq!(
            values_in(env, NAMES),
            [Some("t-2".into()), Some("/o".into())]
        );
        assert_eq!(vector_strings(&[1u8; 12]), b"");
    }
}
