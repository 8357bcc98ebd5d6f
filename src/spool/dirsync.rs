//! An acceptance counts as synced only after a sync of `inbox/` that
//! *started* after its rename has succeeded; concurrent acceptances share
//! such syncs (group commit), and a failed one fails every caller it
//! covered.

use crate::base::lock;
use crate::sys;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Condvar, Mutex};

/// Group commit of the `inbox/` directory sync: an acceptance that renamed
/// its file waits for a sync that *started* after its rename. While one
/// sync runs, the acceptances that arrive queue behind it and the next one
/// covers them all, so N concurrent senders cost far fewer than N syncs.
#[derive(Default)]
pub(super) struct DirSync {
    state: Mutex<SyncState>,
    done: Condvar,
}

#[derive(Default)]
struct SyncState {
    /// Syncs started so far; they run one at a time and finish in order.
    started: u64,
    finished: u64,
    running: bool,
    /// Calls so far (for the tests).
    arrived: u64,
    /// The last sync that failed, and why.
    failed: Option<(u64, String)>,
}

impl DirSync {
    /// Returns once a `run` (a sync of the directory) that started after
    /// this call has succeeded. A failure of that sync, or of any later
    /// one before this caller looked, fails it: after a failed sync
    /// nothing says the rename reached the disk.
    pub(super) fn sync(&self, run: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
        let mut st = lock(&self.state);
        st.arrived += 1;
        let covering = st.started + 1;
        loop {
            if st.finished >= covering {
                return match &st.failed {
                    Some((n, why)) if *n >= covering => Err(std::io::Error::other(format!(
                        "syncing the directory failed: {why}"
                    ))),
                    _ => Ok(()),
                };
            }
            if st.running {
                st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.running = true;
            st.started += 1;
            let this = st.started;
            drop(st);
            let result = run();
            st = lock(&self.state);
            st.running = false;
            st.finished = this;
            if let Err(e) = &result {
                st.failed = Some((this, e.to_string()));
            }
            self.done.notify_all();
        }
    }
}

/// Syncs the directory `path`. It is opened read-only, close-on-exec (as
/// std opens every file), `O_DIRECTORY` and `O_NOFOLLOW`, and without
/// waiting: a symlink, a FIFO or anything else planted in a spool
/// directory's place fails the open at once, never blocks it nor sends
/// the sync elsewhere.
pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    sync_opened(path, sys::O_NOFOLLOW)
}

/// Syncs a directory above a spool that gained an entry (a new spool's
/// own, or one of the directories made for it): as `sync_dir`, but
/// through a symlink too, as a state home may well be one.
pub(super) fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    sync_opened(path, 0)
}

fn sync_opened(path: &Path, flags: i32) -> std::io::Result<()> {
    OpenOptions::new()
        .read(true)
        .custom_flags(sys::O_DIRECTORY | sys::O_NONBLOCK | flags)
        .open(path)?
        .sync_all()?;
    crate::base::files::note!(Op::DirFsync(path.into()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn dir_syncs_are_shared_by_callers_that_wait_together() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let ds = DirSync::default();
        let runs = AtomicU64::new(0);
        let release = AtomicBool::new(false);
        let run = || {
            runs.fetch_add(1, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        };
        std::thread::scope(|s| {
            // The first caller's sync is running and held.
            let first = s.spawn(|| ds.sync(run));
            while runs.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Four more arrive while it runs: none of them may count on
            // it, and one sync after it covers them all.
            let later: Vec<_> = (0..4).map(|_| s.spawn(|| ds.sync(run))).collect();
            let deadline = Instant::now() + Duration::from_secs(10);
            while lock(&ds.state).arrived < 5 {
                assert!(Instant::now() < deadline, "callers did not arrive");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1);
            release.store(true, Ordering::SeqCst);
            first.join().unwrap().unwrap();
            for t in later {
                t.join().unwrap().unwrap();
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 2, "five callers, two syncs");
    }

    #[test]
    fn a_dir_sync_takes_only_a_directory_and_never_through_a_symlink() {
        let dir = crate::base::files::scratch("dirsync");
        std::fs::create_dir(&dir).unwrap();
        let real = dir.join("real");
        std::fs::create_dir(&real).unwrap();
        sync_dir(&real).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(sync_dir(&link).is_err(), "never through a symlink");
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // A FIFO with no writer would block a plain open for reading.
        let e = sync_dir(&fifo).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory, "{e}");
        std::fs::write(dir.join("file"), b"").unwrap();
        assert!(sync_dir(&dir.join("file")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_dir_sync_fails_every_caller_it_covered() {
        let ds = DirSync::default();
        ds.sync(|| Ok(())).unwrap();
        let e = ds
            .sync(|| Err(std::io::Error::other("disk on fire")))
            .unwrap_err();
        assert!(e.to_string().contains("disk on fire"), "{e}");
        // A caller that arrives afterwards gets a sync of its own.
        ds.sync(|| Ok(())).unwrap();
        assert_eq!(lock(&ds.state).started, 3);
    }
}
