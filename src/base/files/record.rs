//! What the file-system layer did, op by op, for the crash-state explorer
//! (`tests/reliability/explore.rs`): compiled in only with the
//! `failpoints` feature. While a `Recorder` is active, every operation
//! `files.rs` and `spool/dirsync.rs` perform that changes what a crash
//! could leave (a file created, written, truncated or synced; a name
//! renamed or unlinked; a directory made or synced) is noted once it has
//! succeeded, with enough to replay it: paths as the caller gave them,
//! and the bytes of each write with their offset.
//!
//! A recorder for this thread sees only the operations this thread
//! performs (tests that run side by side do not mix); a global one sees
//! every thread's.

use crate::base::lock;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One operation, as performed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A regular file opened with `O_CREAT`: a new, empty file if nothing
    /// was there (`O_EXCL` made sure of it for the spool's own files).
    Create(PathBuf),
    /// `bytes` written at `offset`.
    Write {
        path: PathBuf,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// The file cut (or extended) to `len` bytes.
    Truncate {
        path: PathBuf,
        len: u64,
    },
    /// fsync (or fdatasync) of a regular file: its data and size.
    Fsync(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Unlink(PathBuf),
    Mkdir(PathBuf),
    /// fsync of a directory: its entries.
    DirFsync(PathBuf),
}

thread_local! {
    static MINE: RefCell<Option<Vec<Op>>> = const { RefCell::new(None) };
}
static GLOBAL: Mutex<Option<Vec<Op>>> = Mutex::new(None);
static GLOBAL_ON: AtomicBool = AtomicBool::new(false);

/// Notes an operation that succeeded; `op` is built only while a
/// recorder listens.
pub fn note(op: impl FnOnce() -> Op) {
    let mine = MINE.with(|m| m.borrow().is_some());
    let global = GLOBAL_ON.load(Ordering::SeqCst);
    if !mine && !global {
        return;
    }
    let op = op();
    if global {
        if let Some(ops) = lock(&GLOBAL).as_mut() {
            ops.push(op.clone());
        }
    }
    if mine {
        MINE.with(|m| m.borrow_mut().as_mut().map(|ops| ops.push(op)));
    }
}

/// Whose operations a recorder sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    ThisThread,
    /// Every thread's; one global recorder at a time.
    Global,
}

/// Records while it lives; `ops` reads what it has so far, `finish`
/// stops it and returns them.
pub struct Recorder {
    scope: Scope,
}

impl Recorder {
    /// Starts recording. Panics if a recorder of the same scope is active.
    pub fn start(scope: Scope) -> Recorder {
        match scope {
            Scope::ThisThread => MINE.with(|m| {
                let mut m = m.borrow_mut();
                assert!(m.is_none(), "this thread already records");
                *m = Some(Vec::new());
            }),
            Scope::Global => {
                let mut g = lock(&GLOBAL);
                assert!(g.is_none(), "a global recorder is already active");
                *g = Some(Vec::new());
                GLOBAL_ON.store(true, Ordering::SeqCst);
            }
        }
        Recorder { scope }
    }

    /// How many operations it has recorded so far.
    pub fn len(&self) -> usize {
        self.ops().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operations recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        match self.scope {
            Scope::ThisThread => MINE.with(|m| m.borrow().clone().unwrap_or_default()),
            Scope::Global => lock(&GLOBAL).clone().unwrap_or_default(),
        }
    }

    /// Stops recording and returns what it recorded.
    pub fn finish(self) -> Vec<Op> {
        let ops = self.ops();
        drop(self);
        ops
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        match self.scope {
            Scope::ThisThread => MINE.with(|m| *m.borrow_mut() = None),
            Scope::Global => {
                GLOBAL_ON.store(false, Ordering::SeqCst);
                *lock(&GLOBAL) = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_recorder_sees_only_its_thread() {
        let rec = Recorder::start(Scope::ThisThread);
        note(|| Op::Unlink("a".into()));
        std::thread::spawn(|| note(|| Op::Unlink("b".into())))
            .join()
            .unwrap();
        assert_eq!(rec.finish(), vec![Op::Unlink("a".into())]);
        note(|| panic!("not built without a recorder"));
    }
}
