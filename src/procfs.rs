//! What `/proc` says about other processes (Linux; nothing where there is
//! no `/proc`): plain file reads, no libc. `sys` re-exports it.

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

/// A process as `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    /// Its parent; 0 for the first process.
    pub ppid: u32,
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
        ppid: f.get(1)?.parse().ok()?,
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

/// The values of `names` in the environment process `pid` started with
/// (`None` each where it is absent or cannot be read: another user's
/// process, or no `/proc`); only the first 256 KiB are looked at.
pub fn environ_values<const N: usize>(pid: u32, names: [&str; N]) -> [Option<String>; N] {
    let mut out = [const { None }; N];
    let mut env = Vec::new();
    if File::open(format!("/proc/{pid}/environ"))
        .and_then(|f| f.take(256 << 10).read_to_end(&mut env))
        .is_err()
    {
        return out;
    }
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
