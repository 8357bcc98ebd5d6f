//! `gc`'s unit tests: what a spool that never held a task is, and which
//! stopped spools `gc --spools` finds and removes.

use super::*;
use crate::spool::{Admission, Limits, Sender, new_task};
use crate::wire::Outcome;

const LIMITS: Limits = Limits {
    max_queue: 8,
    max_inflight: 8,
};
const DAY: f64 = 24.0 * 3600.0;

/// A test's scratch directory, removed with all it holds when dropped.
struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A spool directory named `name` under a fresh `spool/` directory, opened
/// once with its `meta.json` written, then closed: a stopped agent's. The
/// whole is removed when the `Root` is dropped.
fn stopped_spool(tag: &str, name: &str) -> (Root, PathBuf, PathBuf) {
    let root = Root(crate::base::files::scratch(&format!("gc-{tag}")));
    let spools = root.0.join("spool");
    let dir = spools.join(format!("{name}-0123456789abcdef"));
    let s = Spool::open(&dir, false, false).unwrap();
    meta(name).write(&dir).unwrap();
    drop(s);
    (root, spools, dir)
}

fn meta(name: &str) -> Meta {
    Meta {
        accept_from: Vec::new(),
        created_at: Some(1),
        deny_from: Vec::new(),
        name: name.into(),
        offline: true,
        workspace: format!("/w/{name}"),
    }
}

fn offer(s: &Spool, id: &str) -> crate::base::error::Result<Admission> {
    let t = new_task(
        id,
        "body",
        Sender::default(),
        0,
        None,
        "queue",
        None,
        "jsonrpc",
    );
    s.admit(t, None, LIMITS, || false, |_, _| {})
}

fn later(days: f64) -> f64 {
    super::super::now_f64() + days * DAY
}

#[test]
fn a_spool_that_never_held_a_task_is_removed_and_takes_no_more() {
    let (_root, _, dir) = stopped_spool("unused", "idle");
    assert!(never_used(&dir));
    let s = Spool::open(&dir, false, false).unwrap();
    assert!(s.remove_if_unused());
    assert!(
        fs::symlink_metadata(&dir).is_err(),
        "{} is gone",
        dir.display()
    );
    // Nothing is acknowledged into a spool that went.
    assert!(offer(&s, "late").is_err());
}

#[test]
fn a_spool_that_held_a_task_is_kept() {
    let (_root, _, dir) = stopped_spool("queued", "busy");
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(
        offer(&s, "m1").unwrap(),
        Admission::Accepted { queue_position: 1 }
    );
    assert!(!s.remove_if_unused());
    // Finished, it leaves a receipt: still kept.
    let crate::spool::Claim::Task(t) = s.claim().unwrap() else {
        panic!("no task")
    };
    s.finish(&t.message_id, Outcome::Done).unwrap();
    drop(s);
    assert!(!never_used(&dir));
    let s = Spool::open(&dir, false, false).unwrap();
    assert!(!s.remove_if_unused());
    assert!(dir.join("meta.json").exists());
    // The spool still takes tasks after looking.
    assert!(matches!(offer(&s, "m2"), Ok(Admission::Accepted { .. })));
}

#[test]
fn a_send_or_a_stored_task_in_the_transcript_counts_as_used() {
    for kind in ["relay.sent", "message.accepted", "local.input"] {
        let (_root, _, dir) = stopped_spool("sent", "sender");
        let line = format!("{{\"seq\":1,\"time\":1.0,\"kind\":\"{kind}\"}}\n");
        fs::write(dir.join(TRANSCRIPT), line).unwrap();
        assert!(!never_used(&dir), "{kind}");
    }
    let (_root, _, dir) = stopped_spool("notice", "quiet");
    fs::write(
        dir.join(TRANSCRIPT),
        "{\"seq\":1,\"time\":1.0,\"kind\":\"instance.started\"}\n",
    )
    .unwrap();
    assert!(never_used(&dir));
}

/// How many descriptors of this process have `path` open.
fn opened(path: &Path) -> usize {
    let fds = fs::read_dir("/proc/self/fd").unwrap();
    fds.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p == path)
        .count()
}

#[test]
fn an_instance_waiting_for_the_lock_of_a_removed_spool_starts_on_a_new_one() {
    let (_root, _, dir) = stopped_spool("race", "again");
    let first = Spool::open(&dir, false, false).unwrap();
    let dir2 = dir.clone();
    let second = std::thread::spawn(move || Spool::open(&dir2, false, false));
    // The second open waits on the lock (up to LOCK_WAIT) while the
    // first removes the spool under it: once it has the lock file open.
    let lock = dir.join("lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while opened(&lock) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second open never waited"
        );
        std::thread::yield_now();
    }
    assert!(first.remove_if_unused());
    drop(first);
    let second = second.join().unwrap().expect("opened afresh");
    assert!(dir.join("inbox").is_dir());
    assert!(matches!(
        offer(&second, "m"),
        Ok(Admission::Accepted { .. })
    ));
}

#[test]
fn gc_finds_stopped_spools_of_receipts_only_past_the_age() {
    let (_root, spools, dir) = stopped_spool("stale", "old");
    let empty = spools.join("empty-0123456789abcdef");
    drop(Spool::open(&empty, false, false).unwrap());
    meta("empty").write(&empty).unwrap();
    {
        let s = Spool::open(&dir, false, false).unwrap();
        offer(&s, "m1").unwrap();
        let crate::spool::Claim::Task(t) = s.claim().unwrap() else {
            panic!("no task")
        };
        s.finish(&t.message_id, Outcome::Done).unwrap();
    }
    let month = DEFAULT_OLDER_THAN;
    // Used today: nothing is stale yet.
    assert_eq!(stale(&spools, month, later(0.0)), Vec::new());
    let found = stale(&spools, month, later(31.0));
    let names: Vec<(&str, usize)> = found
        .iter()
        .map(|s| (s.name.as_str(), s.receipts))
        .collect();
    assert_eq!(names, [("empty", 0), ("old", 1)]);
    // A queued task keeps a spool, however old.
    {
        let s = Spool::open(&empty, false, false).unwrap();
        offer(&s, "q").unwrap();
    }
    let found = stale(&spools, month, later(31.0));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, "old");
    // A running instance's spool is not stopped: not found, not removed.
    let live = Spool::open(&dir, false, false).unwrap();
    assert_eq!(stale(&spools, month, later(31.0)), Vec::new());
    assert_eq!(
        remove(&found[0], month, later(31.0)).unwrap(),
        Removal::InUse
    );
    drop(live);
    // A child another test thread is starting holds a copy of the lock's
    // descriptor until it execs: the lock is free once that copy closes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let removed = loop {
        match remove(&found[0], month, later(31.0)).unwrap() {
            Removal::InUse if std::time::Instant::now() < deadline => std::thread::yield_now(),
            r => break r,
        }
    };
    assert_eq!(removed, Removal::Removed);
    assert!(fs::symlink_metadata(&dir).is_err());
    assert!(empty.join("meta.json").exists());
}

#[test]
fn gc_does_not_remove_a_spool_used_since_it_was_listed() {
    let (_root, spools, dir) = stopped_spool("since", "busy");
    let found = stale(&spools, DEFAULT_OLDER_THAN, later(40.0));
    assert_eq!(found.len(), 1);
    {
        let s = Spool::open(&dir, false, false).unwrap();
        offer(&s, "m").unwrap();
    }
    let again = remove(&found[0], DEFAULT_OLDER_THAN, later(40.0)).unwrap();
    assert_eq!(again, Removal::Changed);
    assert!(dir.join("inbox").is_dir());
}
