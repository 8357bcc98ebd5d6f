//! An acceptance counts as synced only after a sync of `inbox/` that
//! *started* after its rename has succeeded; concurrent acceptances share
//! such syncs (group commit), and a failed one fails every caller it
//! covered.

use std::fs::File;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

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
    fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once a `run` (a sync of the directory) that started after
    /// this call has succeeded. A failure of that sync, or of any later
    /// one before this caller looked, fails it: after a failed sync
    /// nothing says the rename reached the disk.
    pub(super) fn sync(&self, run: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
        let mut st = self.lock();
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
            st = self.lock();
            st.running = false;
            st.finished = this;
            if let Err(e) = &result {
                st.failed = Some((this, e.to_string()));
            }
            self.done.notify_all();
        }
    }
}

pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    File::open(path)?.sync_all()
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
            while ds.lock().arrived < 5 {
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
    fn a_failed_dir_sync_fails_every_caller_it_covered() {
        let ds = DirSync::default();
        ds.sync(|| Ok(())).unwrap();
        let e = ds
            .sync(|| Err(std::io::Error::other("disk on fire")))
            .unwrap_err();
        assert!(e.to_string().contains("disk on fire"), "{e}");
        // A caller that arrives afterwards gets a sync of its own.
        ds.sync(|| Ok(())).unwrap();
        assert_eq!(ds.lock().started, 3);
    }
}
