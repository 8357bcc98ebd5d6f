//! Error numbers by meaning (part of `sys`, which re-exports it): which
//! errors say a resource ran short for now, and the names the fail points
//! use.

use std::io;

/// What ran short, when `e` says a resource is short for now and may come
/// back (descriptors, memory, processes, a failing device, disk space or
/// quota): such an error is no verdict on the data being read or written.
/// `None` for any other error.
pub fn shortage(e: &io::Error) -> Option<&'static str> {
    Some(match e.raw_os_error()? {
        libc::EMFILE => "out of file descriptors (the process's limit, EMFILE)",
        libc::ENFILE => "out of file descriptors (the system's limit, ENFILE)",
        libc::ENOMEM => "out of memory (ENOMEM)",
        libc::EAGAIN => "out of a resource for now (EAGAIN)",
        libc::EIO => "an input/output error (EIO)",
        libc::ENOSPC => "out of disk space (ENOSPC)",
        libc::EDQUOT => "out of disk quota (EDQUOT)",
        _ => return None,
    })
}

/// An error number by its name, for the fail points: those `shortage`
/// knows but `EDQUOT`.
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
