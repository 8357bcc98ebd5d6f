//! The disk target: what baton reads back from disk that another process
//! may have written or a crash may have cut short. Shared by the
//! cargo-fuzz target `disk` (tests/fuzz/fuzz_targets/disk.rs) and the
//! std-only loop of tests/reliability/fuzz.rs; it needs std, serde_json
//! and baton only.
//!
//! The first byte of an input picks the file (`% 6`), the rest is its
//! bytes:
//!
//! - 0, a manifest: `registry::parse_manifest` (and `read_manifest` on
//!   the same bytes in a file), under a baton registry directory when the
//!   byte's high bit is set, else a zcoder one;
//! - 1, a task file `<16 digits>-<id>.json` in `inbox/`, `processing/`,
//!   `interrupted/` or `rejected/` (`(byte >> 4) % 4`);
//! - 2, a receipt log `done/receipts-0000000001.jsonl`, next to a task
//!   file of the id its seed holds in `processing/`;
//! - 3, a legacy receipt `done/<id>.json`, the same;
//! - 4, `meta.json`;
//! - 5, `sequence`, next to a queued task.
//!
//! Every spool case writes the bytes into a fresh spool under `scratch`,
//! reads it as a stopped agent's (`read_listing`, `read_queued`,
//! `Holdings::read`), opens it with `Spool::open`, and drives what it
//! holds through the public API (whereabouts, claim, requeue, finish,
//! admit, list), then opens it again. The checks: no panic; `Spool::open`
//! never fails for bad bytes (a resource shortage only); a task file that
//! does not read back is moved to `rejected/` whole, never deleted, and
//! one that does is queued, claimed and finished like any other; a receipt
//! that reads back answers for its id, and only for its id; a log is
//! never written to after a restart; an admission after any `sequence`
//! gets a file the next open finds queued.

use baton::base::digest::sha256_hex;
use baton::base::error::Error;
use baton::registry::{self, RegistryDir, Wire};
use baton::spool::{
    self, Admission, Claim, Holdings, Limits, Meta, Receipt, Sender, Spool, Task, Whereabouts,
};
use baton::wire::Outcome;
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The id every seed file is named for.
pub const ID: &str = "4242-1234567890123456";
/// The name of the task file of `ID` with sequence number 1.
pub const TASK_FILE: &str = "0000000000000001-4242-1234567890123456.json";
/// The receipt log a spool case writes.
pub const LOG: &str = "receipts-0000000001.jsonl";
/// The registry directory of the manifest case (never created).
pub const REGISTRY: &str = "/run/baton-fuzz";
/// Where a task file may be read back from.
pub const PLACES: [&str; 4] = ["inbox", "processing", "interrupted", "rejected"];

/// One input: the first byte picks the file, the rest is its bytes.
/// `scratch` is a directory of the caller's, emptied here as needed.
pub fn run(scratch: &Path, data: &[u8]) {
    let Some((&select, input)) = data.split_first() else {
        return;
    };
    match select % 6 {
        0 => manifest(scratch, input, select & 0x80 != 0),
        1 => task_file(scratch, input, PLACES[usize::from(select >> 4) % 4]),
        2 => receipt_log(scratch, input),
        3 => legacy_receipt(scratch, input),
        4 => meta(scratch, input),
        _ => sequence(scratch, input),
    }
}

/// A task of `id` as baton stores it (sequence number 1).
pub fn seed_task(id: &str) -> Task {
    let sender = Sender {
        instance_id: Some("77-1234567890123456".into()),
        name: Some("ops".into()),
        workspace: Some("/work/ops".into()),
        pid: Some(77),
        remote: None,
        key: None,
    };
    let mut t = spool::new_task(
        id,
        "fix the build: grüße ✓",
        sender,
        1,
        None,
        "queue",
        Some(77),
        "jsonrpc",
    );
    t.seq = 1;
    // Fixed, so that the bytes are the same at every call.
    t.accepted_at = 1_788_012_102;
    t
}

/// The bytes of a task file as baton writes it.
pub fn seed_task_file() -> Vec<u8> {
    serde_json::to_vec(&seed_task(ID)).expect("a task serializes")
}

/// A receipt line of `ID` as baton appends it, finished in 2100 (no age
/// prunes it).
pub fn seed_receipt() -> Vec<u8> {
    let r = Receipt {
        message_id: ID.into(),
        digest: seed_task(ID).digest,
        outcome: Outcome::Done,
        accepted_at: None,
        finished_at: 4_102_444_800.25,
        reply: Some(spool::ReplyRecord {
            message_id: Some("4242-99".into()),
            body: "done ✓".into(),
        }),
        sender_instance_id: Some("77-1234567890123456".into()),
        remote: false,
        key: None,
        handler: Default::default(),
    };
    let mut line = serde_json::to_vec(&r).expect("a receipt serializes");
    line.push(b'\n');
    line
}

/// A manifest of `ID` in `REGISTRY` as baton publishes it.
pub fn seed_manifest() -> Vec<u8> {
    format!(
        r#"{{"protocol":1,"instance_id":"{ID}","pid":4242,"project":"weekly digest","name":"weekly_digest","workspace":"/work/weekly-digest","session_id":"1788012120_10392","profile":"coding","model":"qwen3-coder","socket":"{REGISTRY}/a-{ID}.sock","state":"ready","started_at":1788012102,"wire":"jsonrpc","baton_version":"0.9.0"}}"#
    )
    .into_bytes()
}

/// A spool's `meta.json` as baton writes it.
pub fn seed_meta() -> Vec<u8> {
    br#"{"accept_from":["ops-*"],"created_at":1788012102,"deny_from":[],"name":"weekly_digest","offline":true,"workspace":"/work/weekly digest"}"#.to_vec()
}

// ---------------------------------------------------------------------
// The registry.
// ---------------------------------------------------------------------

fn manifest(scratch: &Path, input: &[u8], baton: bool) {
    let dir = RegistryDir {
        path: PathBuf::from(REGISTRY),
        wire: if baton { Wire::Jsonrpc } else { Wire::Zcoder },
    };
    let parsed = registry::parse_manifest(&dir, ID, input);
    if let Ok(m) = &parsed {
        assert!(registry::valid_id(&m.instance_id) && m.instance_id == ID);
        assert!(m.pid > 0 && m.instance_id.starts_with(&format!("{}-", m.pid)));
        assert!(registry::valid_name(&m.name), "name {:?}", m.name);
        assert!(m.workspace.starts_with('/'));
        assert!(matches!(m.profile.as_str(), "coding" | "sysadmin"));
        assert!(matches!(m.state.as_str(), "ready" | "busy" | "paused"));
        assert_eq!(m.wire, dir.wire.to_string());
        // What was read is a manifest: written out, it reads back the same.
        let again = serde_json::to_vec(m).expect("a manifest serializes");
        assert_eq!(registry::parse_manifest(&dir, ID, &again).as_ref(), Ok(m));
    }
    // The same bytes in a file: the same verdict.
    let path = fresh(scratch).join(format!("a-{ID}.json"));
    fs::write(&path, input).expect("write the manifest");
    let read = registry::read_manifest(&dir, &path);
    assert_eq!(read.is_ok(), parsed.is_ok(), "{read:?} against {parsed:?}");
    if let (Ok(a), Ok(b)) = (&read, &parsed) {
        assert_eq!(a, b);
    }
}

// ---------------------------------------------------------------------
// The spool.
// ---------------------------------------------------------------------

/// `scratch/spool`, empty, made as baton makes it (0700).
fn fresh(scratch: &Path) -> PathBuf {
    let dir = scratch.join("spool");
    match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("clear {dir:?}: {e}"),
        _ => {}
    }
    let mut b = fs::DirBuilder::new();
    b.recursive(true).mode(0o700);
    for sub in [
        "tmp",
        "inbox",
        "processing",
        "done",
        "rejected",
        "interrupted",
    ] {
        b.create(dir.join(sub)).expect("make the spool");
    }
    dir
}

/// `Spool::open`, which bad bytes must never fail; `None` when a resource
/// ran short (no verdict either way).
fn open(dir: &Path) -> Option<Spool> {
    match Spool::open(dir, false, false) {
        Ok(s) => Some(s),
        Err(Error::Io { ref source, .. }) if baton::sys::shortage(source).is_some() => None,
        Err(e) => panic!("Spool::open refused a spool for its bytes: {e}"),
    }
}

/// The offline readers (no lock, nothing moved): they never fail on a
/// spool's bytes, and agree with each other. Whether `ID` reads back
/// queued.
fn read_offline(dir: &Path) -> bool {
    let listing = spool::read_listing(dir).expect("read_listing");
    let holdings = Holdings::read(dir).expect("Holdings::read");
    assert_eq!(holdings.queued, listing.queued.len());
    let queued = spool::read_queued(dir, &[ID]).expect("read_queued");
    assert!(queued.iter().all(|t| t.message_id == ID));
    assert!(
        queued
            .iter()
            .all(|t| sha256_hex(t.body.as_bytes()) == t.digest)
    );
    !queued.is_empty()
}

fn file(dir: &Path, sub: &str, name: &str) -> Option<Vec<u8>> {
    fs::read(dir.join(sub).join(name)).ok()
}

/// The bytes of every file in `rejected/`.
fn rejected(dir: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir.join("rejected")).expect("list rejected/") {
        out.extend(fs::read(e.expect("an entry").path()).ok());
    }
    out
}

/// Claims the head of the queue, which must be `ID`'s task reading back
/// as `bytes` said, and finishes it; its receipt then answers for it.
fn claim_and_finish(s: &Spool) {
    match s.claim().expect("claim") {
        Claim::Task(t) => {
            assert_eq!(t.message_id, ID);
            assert_eq!(sha256_hex(t.body.as_bytes()), t.digest);
        }
        other => panic!("a task that read back at open claims as {other:?}"),
    }
    assert!(matches!(s.whereabouts(ID), Whereabouts::Processing));
    s.finish(ID, Outcome::Done).expect("finish");
    finished(s, ID);
}

/// `id` finished: its receipt reads back, and is its own.
fn finished(s: &Spool, id: &str) {
    match s.whereabouts(id) {
        Whereabouts::Finished(Some(r)) => assert_eq!(r.message_id, id),
        other => panic!("{id} finished, and is {other:?}"),
    }
    let again = admit(s, id);
    assert!(
        !matches!(again, Admission::Accepted { .. }),
        "{id} again: {again:?}"
    );
}

fn admit(s: &Spool, id: &str) -> Admission {
    let limits = Limits {
        max_queue: 100,
        max_inflight: 0,
    };
    s.admit(seed_task(id), None, limits, || false, |_, _| {})
        .expect("admit")
}

/// A task file in `place`: what reads back is served, what does not is
/// moved to `rejected/` whole.
fn task_file(scratch: &Path, input: &[u8], place: &str) {
    let dir = fresh(scratch);
    fs::write(dir.join(place).join(TASK_FILE), input).expect("write the task file");
    let readable = read_offline(&dir);
    let Some(s) = open(&dir) else { return };
    let served = match s.whereabouts(ID) {
        Whereabouts::Queued(1) => {
            assert_eq!(place, "inbox");
            assert_eq!(file(&dir, "inbox", TASK_FILE).as_deref(), Some(input));
            true
        }
        Whereabouts::Interrupted => {
            assert!(matches!(place, "processing" | "interrupted"));
            assert_eq!(file(&dir, "interrupted", TASK_FILE).as_deref(), Some(input));
            s.requeue(ID).expect("requeue an interrupted task");
            true
        }
        Whereabouts::Expired => {
            assert_eq!(place, "rejected");
            s.requeue(ID)
                .expect("requeue a rejected task that reads back");
            true
        }
        Whereabouts::Rejected(why) => {
            assert!(
                rejected(&dir).iter().any(|b| b == input),
                "a task file that does not read back is moved whole to rejected/"
            );
            assert!(why.is_some() || place == "rejected", "{place}: no reason");
            assert!(matches!(s.claim().expect("claim"), Claim::Empty));
            false
        }
        other => panic!("a task file in {place}/ is {other:?}"),
    };
    if place == "inbox" {
        assert_eq!(readable, served, "read_queued and the open disagree");
    }
    if served {
        claim_and_finish(&s);
    }
    drop(s);
    // A second open finds what the first left.
    let Some(s) = open(&dir) else { return };
    if served {
        finished(&s, ID);
    } else {
        assert!(matches!(s.whereabouts(ID), Whereabouts::Rejected(_)));
    }
}

/// The whole lines of a log that read back as receipts of valid ids, as
/// `(id, newest)`, and the newest time among them.
fn receipts_in(log: &[u8]) -> (Vec<String>, u64) {
    let mut ids = Vec::new();
    let (mut newest, mut bad) = (0, false);
    for line in log.split_inclusive(|&b| b == b'\n') {
        if line.last() != Some(&b'\n') {
            break;
        }
        match serde_json::from_slice::<Receipt>(line) {
            Ok(r) if registry::valid_id(&r.message_id) => {
                newest = newest.max(r.finished_at as u64);
                ids.push(r.message_id);
            }
            _ => bad = true,
        }
    }
    // A log with no readable receipt but bad lines has no known age: it
    // is not pruned for one.
    if ids.is_empty() && bad {
        newest = u64::MAX;
    }
    (ids, newest)
}

/// Whether receipts finished at `newest` are pruned by age at an open
/// now; `None` within a minute of the bound, either side.
fn too_old(newest: u64) -> Option<bool> {
    let bound = spool::now_secs().saturating_sub(spool::RECEIPTS_MAX_AGE);
    if newest.saturating_add(60) < bound {
        Some(true)
    } else if newest >= bound.saturating_add(60) {
        Some(false)
    } else {
        None
    }
}

/// The task of `ID` mid-turn, and its receipt in a log: a receipt that
/// reads back as `ID`'s finishes it; else it is interrupted.
fn receipt_log(scratch: &Path, input: &[u8]) {
    let dir = fresh(scratch);
    fs::write(dir.join("processing").join(TASK_FILE), seed_task_file()).expect("write");
    fs::write(dir.join("done").join(LOG), input).expect("write the log");
    let _ = read_offline(&dir);
    let (ids, newest) = receipts_in(input);
    // Pruning by age runs at open: a log whose newest receipt is that old
    // goes whole.
    let Some(old) = too_old(newest) else { return };
    let Some(s) = open(&dir) else { return };
    let log_kept = file(&dir, "done", LOG);
    if old {
        assert_eq!(log_kept, None, "a log past the age bound goes");
    } else {
        assert_eq!(log_kept.as_deref(), Some(input), "a log is never rewritten");
    }
    let mine = ids.iter().any(|i| i == ID);
    if mine {
        assert!(file(&dir, "interrupted", TASK_FILE).is_none());
        assert!(file(&dir, "processing", TASK_FILE).is_none());
        if !old {
            finished(&s, ID);
        }
    } else {
        assert!(matches!(s.whereabouts(ID), Whereabouts::Interrupted));
        s.finish(ID, Outcome::Interrupted).expect("finish");
        finished(&s, ID);
        assert!(file(&dir, "done", "receipts-0000000002.jsonl").is_some());
    }
    for id in ids.iter().filter(|i| !old && *i != ID) {
        finished(&s, id);
    }
    drop(s);
    let Some(s) = open(&dir) else { return };
    if !old {
        assert_eq!(file(&dir, "done", LOG).as_deref(), Some(input));
        for id in ids.iter().filter(|i| !mine || *i != ID) {
            finished(&s, id);
        }
    }
}

/// The task of `ID` mid-turn, and a legacy receipt `done/<ID>.json`.
fn legacy_receipt(scratch: &Path, input: &[u8]) {
    let dir = fresh(scratch);
    let loose = format!("{ID}.json");
    fs::write(dir.join("processing").join(TASK_FILE), seed_task_file()).expect("write");
    fs::write(dir.join("done").join(&loose), input).expect("write the receipt");
    let _ = read_offline(&dir);
    let receipt = serde_json::from_slice::<Receipt>(input).ok();
    let newest = receipt.as_ref().map_or(u64::MAX, |r| r.finished_at as u64);
    let Some(old) = too_old(newest) else { return };
    let mine = receipt.is_some_and(|r| r.message_id == ID);
    let Some(s) = open(&dir) else { return };
    if mine {
        assert!(file(&dir, "interrupted", TASK_FILE).is_none());
        if old {
            assert!(matches!(s.whereabouts(ID), Whereabouts::Unknown));
        } else {
            finished(&s, ID);
        }
    } else {
        // Its payload stays: a receipt that is not its own never ends it.
        assert_eq!(file(&dir, "interrupted", TASK_FILE), Some(seed_task_file()));
        assert!(matches!(s.whereabouts(ID), Whereabouts::Interrupted));
        s.finish(ID, Outcome::Interrupted).expect("finish");
        finished(&s, ID);
    }
    if !old {
        assert_eq!(file(&dir, "done", &loose).as_deref(), Some(input));
    }
    drop(s);
    let Some(s) = open(&dir) else { return };
    if !(mine && old) {
        assert!(!matches!(s.whereabouts(ID), Whereabouts::Unknown));
        let again = admit(&s, ID);
        assert!(!matches!(again, Admission::Accepted { .. }), "{again:?}");
    }
}

/// `meta.json`: read leniently or refused, never a panic; what reads
/// back writes back the same; the spool opens offline whatever it holds.
fn meta(scratch: &Path, input: &[u8]) {
    let dir = fresh(scratch);
    fs::write(dir.join("meta.json"), input).expect("write meta.json");
    if let Ok(m) = Meta::read(&dir) {
        let other = scratch.join("meta");
        let _ = fs::remove_dir_all(&other);
        fs::create_dir_all(other.join("tmp")).expect("mkdir");
        m.write(&other).expect("write meta.json");
        assert_eq!(Meta::read(&other).expect("read it back"), m);
    }
    let _ = read_offline(&dir);
    match Spool::open_offline(&dir, false) {
        Ok(Some(_)) => {}
        Err(Error::Io { ref source, .. }) if baton::sys::shortage(source).is_some() => {}
        Ok(None) => panic!("an offline open found the lock held"),
        Err(e) => panic!("an offline open refused a spool for its meta.json: {e}"),
    }
}

/// `sequence` beside a queued task: an admission after it stores a file
/// the next open finds, queued after the first.
fn sequence(scratch: &Path, input: &[u8]) {
    let dir = fresh(scratch);
    fs::write(dir.join("inbox").join(TASK_FILE), seed_task_file()).expect("write");
    fs::write(dir.join("sequence"), input).expect("write sequence");
    let Some(s) = open(&dir) else { return };
    let other = "4242-2";
    assert_eq!(admit(&s, other), Admission::Accepted { queue_position: 2 });
    drop(s);
    let Some(s) = open(&dir) else { return };
    assert!(matches!(s.whereabouts(other), Whereabouts::Queued(2)));
    claim_and_finish(&s);
    match s.claim().expect("claim") {
        Claim::Task(t) => assert_eq!(t.message_id, other),
        got => panic!("the task admitted after the first claims as {got:?}"),
    }
}
