//! The spool's unit tests: acceptance, claims and recovery together.

use super::index::Reservation;
use super::taskfile::{TaskFile, file_name, list};
use super::*;
use serde_json::value::RawValue;
use std::time::{Duration, Instant};

fn tmpdir(tag: &str) -> PathBuf {
    crate::base::files::scratch(&format!("spool-{tag}"))
}

fn task(id: &str, body: &str) -> Task {
    new_task(
        id,
        body,
        Sender::default(),
        0,
        None,
        "queue",
        None,
        "jsonrpc",
    )
}

const LIMITS: Limits = Limits {
    max_queue: 3,
    max_inflight: 4,
};

/// Offers `task(id, body)` under `LIMITS`, unpaused.
fn offer(s: &Spool, id: &str, body: &str) -> Admission {
    s.admit(task(id, body), None, LIMITS, || false, |_, _| {})
        .unwrap()
}

/// `accepted` at `queue_position`.
fn accepted(queue_position: usize) -> Admission {
    Admission::Accepted { queue_position }
}

/// Claims the head of the queue, which must be a task.
fn claimed(s: &Spool) -> Box<Task> {
    let Claim::Task(t) = s.claim().unwrap() else {
        panic!("no task claimed")
    };
    t
}

/// Ends the reservation of `id` as a store that failed would.
fn unreserve(s: &Spool, id: &str) {
    drop(Reservation {
        spool: s,
        id: id.into(),
        seq: 0,
        give_back: false,
        sender: None,
        settled: false,
    });
}

#[test]
fn a_task_file_is_the_task_whichever_way_its_body_comes() {
    let mut t = task("m", "a\"b\n\u{e9}\u{1b}");
    t.in_reply_to = Some("r".into());
    t.peer_pid = Some(7);
    let text = serde_json::to_string(&TaskFile::new(&t, None)).unwrap();
    assert_eq!(text, serde_json::to_string(&t).unwrap());
    let escaped = serde_json::value::to_raw_value(&t.body).unwrap();
    let json = serde_json::to_string(&TaskFile::new(&t, Some(&escaped))).unwrap();
    assert_eq!(json, text);
    // As a sender may spell it: other escapes, the same string.
    let spelled = RawValue::from_string(r#""a\"b\n\u00e9\u001b""#.into()).unwrap();
    let other = serde_json::to_string(&TaskFile::new(&t, Some(&spelled))).unwrap();
    assert_ne!(other, text);
    assert_eq!(serde_json::from_str::<Task>(&other).unwrap(), t);

    // Stored that way and claimed, it is the same task.
    let dir = tmpdir("spelled");
    let s = Spool::open(&dir, false, false).unwrap();
    let t = task("m2", "a\"b\n\u{e9}\u{1b}");
    let r = s.admit(t.clone(), Some(&spelled), LIMITS, || false, |_, _| {});
    assert_eq!(r.unwrap(), accepted(1));
    let got = claimed(&s);
    assert_eq!(*got, Task { seq: got.seq, ..t });
    drop(s);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn accept_claim_finish_and_duplicates() {
    let dir = tmpdir("acf");
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(offer(&s, "x-1", "a"), accepted(1));
    assert_eq!(offer(&s, "1", "b"), accepted(2));
    assert_eq!(offer(&s, "x-1", "a"), Admission::Duplicate);
    assert_eq!(offer(&s, "x-1", "z"), Admission::Reused);
    assert_eq!(
        s.admit(task("p", "a"), None, LIMITS, || true, |_, _| {})
            .unwrap(),
        Admission::Paused
    );
    offer(&s, "3", "c");
    assert_eq!(offer(&s, "4", "d"), Admission::Full { limit: 3 });
    assert_eq!(claimed(&s).message_id, "x-1");
    s.finish("x-1", Outcome::Done).unwrap();
    assert_eq!(offer(&s, "x-1", "a"), Admission::Duplicate);
    drop(s);
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(offer(&s, "x-1", "a"), Admission::Duplicate);
    assert_eq!(claimed(&s).message_id, "1");
    drop(s);
    // "1" was mid-turn when the spool closed: it is interrupted now.
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(s.counts().interrupted, 1);
    assert_eq!(claimed(&s).message_id, "3");
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn second_open_is_refused_naming_the_pid() {
    let dir = tmpdir("lock");
    let _s = Spool::open(&dir, false, false).unwrap();
    let e = Spool::open(&dir, false, false).err().unwrap().to_string();
    assert!(
        e.contains(&format!("in use by pid {}", std::process::id())),
        "{e}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_inbox_file_goes_to_rejected() {
    let dir = tmpdir("bad");
    let s = Spool::open(&dir, false, false).unwrap();
    offer(&s, "good", "a");
    drop(s);
    let bad = dir.join("inbox").join(file_name(0, "bad"));
    fs::write(&bad, b"{oops").unwrap();
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(s.recovery_notes.len(), 1, "{:?}", s.recovery_notes);
    assert!(dir.join("rejected").join(file_name(0, "bad")).exists());
    assert_eq!(claimed(&s).message_id, "good");
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_task_file_whose_mode_is_neither_queue_nor_steer_goes_to_rejected() {
    let dir = tmpdir("bad-mode");
    let s = Spool::open(&dir, false, false).unwrap();
    offer(&s, "odd", "a");
    drop(s);
    let file = fs::read_dir(dir.join("inbox"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.contains(r#""mode":"queue""#), "{text}");
    fs::write(
        &file,
        text.replace(r#""mode":"queue""#, r#""mode":"sideways""#),
    )
    .unwrap();
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(s.recovery_notes.len(), 1, "{:?}", s.recovery_notes);
    assert!(
        s.recovery_notes[0].contains(r#"unknown task mode "sideways""#),
        "{:?}",
        s.recovery_notes
    );
    assert!(matches!(s.claim().unwrap(), Claim::Empty));
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_of_many_concurrent_offers_of_an_id_is_accepted() {
    let dir = tmpdir("same-id");
    let s = Spool::open(&dir, true, false).unwrap();
    let limits = Limits {
        max_queue: 100,
        max_inflight: 0,
    };
    let answers: Vec<Admission> = std::thread::scope(|sc| {
        let ts: Vec<_> = (0..8)
            .map(|_| sc.spawn(|| s.admit(task("same", "a"), None, limits, || false, |_, _| {})))
            .collect();
        ts.into_iter().map(|t| t.join().unwrap().unwrap()).collect()
    });
    let accepted = answers
        .iter()
        .filter(|a| matches!(a, Admission::Accepted { .. }))
        .count();
    let dups = answers
        .iter()
        .filter(|a| **a == Admission::Duplicate)
        .count();
    assert_eq!((accepted, dups), (1, 7), "{answers:?}");
    assert_eq!(list(&dir.join("inbox")).unwrap().len(), 1);
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_claim_waits_for_an_earlier_acceptance_still_storing() {
    let dir = tmpdir("order");
    let s = Spool::open(&dir, false, false).unwrap();
    offer(&s, "later", "b");
    // An acceptance with an earlier sequence number, between its
    // reservation and its answer.
    s.idx().pending.insert("earlier".into(), (1, 0));
    std::thread::scope(|sc| {
        let claim = sc.spawn(|| s.claim());
        // It waits for the reservation (or took the later task at once).
        waiting_or_done(&s, &claim);
        assert!(!claim.is_finished(), "the claim overtook a pending task");
        // Its store failed: the reservation goes, the claim goes on.
        unreserve(&s, "earlier");
        let Claim::Task(t) = claim.join().unwrap().unwrap() else {
            panic!("no task claimed")
        };
        assert_eq!(t.message_id, "later");
    });
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn settle_waits_for_pending_acceptances_and_no_longer_than_asked() {
    let dir = tmpdir("settle");
    let s = Spool::open(&dir, false, false).unwrap();
    let t0 = Instant::now();
    s.settle(Duration::from_secs(10));
    assert!(t0.elapsed() < Duration::from_secs(5), "nothing was pending");
    s.idx().pending.insert("p".into(), (1, 0));
    let t0 = Instant::now();
    s.settle(Duration::from_millis(200));
    assert!(t0.elapsed() >= Duration::from_millis(200));
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| s.settle(Duration::from_secs(10)));
        waiting_or_done(&s, &waiter);
        assert!(!waiter.is_finished());
        unreserve(&s, "p");
        waiter.join().unwrap();
    });
    drop(s);
    fs::remove_dir_all(&dir).unwrap();
}

/// A claim soon after an acceptance hands the task out as it was written,
/// without reading the file back, while the file is still in place with
/// the length written; a file whose length changed is read and checked.
#[test]
fn a_task_just_stored_is_claimed_as_written_while_its_file_is_in_place() {
    let dir = tmpdir("fresh");
    let s = Spool::open(&dir, false, false).unwrap();
    for id in ["f1", "f2"] {
        assert!(matches!(offer(&s, id, "hello"), Admission::Accepted { .. }));
    }
    let inbox = dir.join("inbox");
    let files = list(&inbox).unwrap();
    let edit = |name: &str, to: &str| {
        let p = inbox.join(name);
        let text = fs::read_to_string(&p).unwrap().replace("hello", to);
        fs::write(&p, text).unwrap();
    };
    // The same length, other bytes: not read, so handed out as written.
    edit(&files[0], "jello");
    let Claim::Task(got) = s.claim().unwrap() else {
        panic!("f1 was not handed out as written")
    };
    assert_eq!(
        (got.message_id.as_str(), got.body.as_str()),
        ("f1", "hello")
    );
    s.finish("f1", Outcome::Done).unwrap();
    // Another length: read, and its body no longer matches its digest.
    edit(&files[1], "hello, world");
    match s.claim().unwrap() {
        Claim::Rejected { message_id, reason } => {
            assert_eq!(message_id, "f2");
            assert!(reason.contains("digest"), "{reason}");
        }
        _ => panic!("f2 was not read back and checked"),
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn forget_removes_a_spool_only_unlocked_and_holding_what_was_shown() {
    let dir = tmpdir("forget");
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(offer(&s, "f1", "x"), accepted(1));
    fs::write(dir.join("meta.json"), "{}").unwrap();
    let shown = Holdings::read(&dir).unwrap();
    assert_eq!(
        shown.to_string(),
        "1 queued, 0 processing, 0 interrupted, 0 rejected and 0 done (receipts)"
    );
    // Its instance holds the lock.
    assert_eq!(forget(&dir, &shown).unwrap(), Removal::InUse);
    drop(s);
    let before = Holdings { queued: 0, ..shown };
    assert_eq!(forget(&dir, &before).unwrap(), Removal::Changed);
    assert!(dir.join("meta.json").exists());
    assert_eq!(forget(&dir, &shown).unwrap(), Removal::Removed);
    assert!(!dir.exists());
}

/// Returns once `t` waits on the spool's index for a reservation to
/// settle, or has ended; either within 10 s.
fn waiting_or_done<T>(s: &Spool, t: &std::thread::ScopedJoinHandle<'_, T>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.idx().waiting == 0 && !t.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the thread neither waited nor ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receipts are bounded by count (issue 32): past RECEIPTS_KEEP, whole
/// logs of the oldest go as new ones fill, while running and at open;
/// the newest still answer (`task/status`, a resend is a duplicate), the
/// pruned ones are unknown, and a torn last line is skipped at open.
#[test]
fn receipts_are_pruned_by_whole_logs_past_the_count() {
    let dir = tmpdir("receipts");
    let s = Spool::open(&dir, false, false).unwrap();
    let limits = Limits {
        max_queue: 10,
        max_inflight: 10,
    };
    let n = RECEIPTS_KEEP + 2 * LOG_RECEIPTS + 10;
    for i in 0..n {
        let id = format!("r{i:05}");
        let a = s.admit(task(&id, "x"), None, limits, || false, |_, _| {});
        assert_eq!(a.unwrap(), accepted(1));
        assert_eq!(claimed(&s).message_id, id);
        s.finish(&id, Outcome::Done).unwrap();
    }
    let logs = || list(&dir.join("done")).unwrap();
    let kept = |s: &Spool| s.idx().receipts.count();
    assert_eq!(kept(&s), RECEIPTS_KEEP + 10, "{:?}", logs());
    assert_eq!(logs().len(), RECEIPTS_KEEP / LOG_RECEIPTS + 1);
    let first_kept = format!("r{:05}", 2 * LOG_RECEIPTS);
    assert!(matches!(s.whereabouts("r00000"), Whereabouts::Unknown));
    assert!(matches!(
        s.whereabouts(&first_kept),
        Whereabouts::Finished(Some(_))
    ));
    let last = format!("r{:05}", n - 1);
    match s.whereabouts(&last) {
        Whereabouts::Finished(Some(r)) => assert_eq!(r.outcome, Outcome::Done),
        w => panic!("{w:?}"),
    }
    assert_eq!(offer(&s, &last, "x"), Admission::Duplicate);
    drop(s);

    // A torn last line (a crash mid-append) is skipped at open, and the
    // next process writes a log of its own.
    let current = dir.join("done").join(logs().last().unwrap());
    let mut f = fs::OpenOptions::new().append(true).open(&current).unwrap();
    std::io::Write::write_all(&mut f, b"{\"message_id\":\"torn\",\"dig").unwrap();
    let s = Spool::open(&dir, false, false).unwrap();
    assert_eq!(kept(&s), RECEIPTS_KEEP + 10);
    assert!(s.recovery_notes.is_empty(), "{:?}", s.recovery_notes);
    assert!(matches!(
        s.whereabouts(&last),
        Whereabouts::Finished(Some(_))
    ));
    assert_eq!(offer(&s, "r00000", "x"), accepted(1));
    assert_eq!(claimed(&s).message_id, "r00000");
    s.finish("r00000", Outcome::Done).unwrap();
    assert_eq!(logs().len(), RECEIPTS_KEEP / LOG_RECEIPTS + 2);
    fs::remove_dir_all(&dir).unwrap();
}
