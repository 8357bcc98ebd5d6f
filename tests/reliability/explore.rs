//! The crash-state explorer: each spool transition runs once on a real
//! spool with its file-system operations recorded (`baton::base::files::record`);
//! every state a crash during it could leave (`crash_states.rs`) is
//! written to a scratch directory and opened by the real code, and
//! checked:
//!
//! - opening never panics nor refuses the spool;
//! - opened twice (open, drop, open), it holds the same files and tells
//!   every task's place the same way;
//! - a task accepted before the crash (already in the spool before the
//!   transition, or accepted by it once it returned) is there exactly
//!   once: one task file (queued, processing, interrupted or rejected) or
//!   its receipt;
//! - each task is where it was before the transition or where it is
//!   after it (opened the same way), never elsewhere: nothing is
//!   finished that was not, nothing finished comes back; and once the
//!   transition returned (its answer may have been sent), where it is
//!   after.
//!
//! A transition is one small function of a `Trial`: it builds the state
//! before with the real spool, then calls `record` around the one step.

use crate::crash_states::{
    Node, Recording, Tree, fingerprint, materialise, materialise_from, snapshot,
};
use baton::base::files::record::{Recorder, Scope};
use baton::spool::{self, Admission, Claim, Limits, Receipt, ReplyRecord, Spool, Whereabouts};
use baton::wire::Outcome;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// A transition: its name and the function that runs it.
pub type Transition = (&'static str, fn(&mut Trial));

/// Every transition, in the order the explorer runs them.
pub const TRANSITIONS: &[Transition] = &[
    ("admit", admit),
    ("admit_within_a_lease", admit_within_a_lease),
    ("admit_into_a_new_spool", admit_into_a_new_spool),
    ("claim", claim),
    ("put_back", put_back),
    ("complete", complete),
    ("complete_with_reply", complete_with_reply),
    ("complete_in_a_log", complete_in_a_log),
    ("requeue", requeue),
    ("discard", discard),
    ("discard_expired", discard_expired),
    ("cancel_queued", cancel_queued),
    ("expire", expire),
    ("recover_at_open", recover_at_open),
    ("prune_at_open", prune_at_open),
];

const LIMITS: Limits = Limits {
    max_queue: 100,
    max_inflight: 100,
};

/// The first acceptance after an open, which leases sequence numbers
/// (writes `sequence`) before it stores the task.
fn admit(t: &mut Trial) {
    drop(t.queued(&["a1"]));
    let s = t.open();
    t.record(|_| offer(&s, "a2"));
}

/// An acceptance within the lease: the task file alone.
fn admit_within_a_lease(t: &mut Trial) {
    let s = t.queued(&["b1"]);
    t.record(|_| offer(&s, "b2"));
}

/// The first acceptance of a spool that did not exist: the open that
/// creates it, then the acceptance.
fn admit_into_a_new_spool(t: &mut Trial) {
    t.record(|t| offer(&t.open(), "n1"));
}

fn claim(t: &mut Trial) {
    let s = t.queued(&["c1", "c2"]);
    t.record(|_| claimed(&s, "c1"));
}

fn complete(t: &mut Trial) {
    let s = t.queued(&["d1", "d2"]);
    claimed(&s, "d1");
    t.record(|_| s.finish("d1", Outcome::Done).unwrap());
}

fn complete_with_reply(t: &mut Trial) {
    let s = t.queued(&["r1"]);
    claimed(&s, "r1");
    let reply = ReplyRecord {
        message_id: Some("r1-reply".into()),
        body: "the reply".into(),
    };
    t.record(|_| s.finish_with("r1", Outcome::Done, Some(reply)).unwrap());
}

/// A claimed task put back (its handler could not be started).
fn put_back(t: &mut Trial) {
    let s = t.queued(&["u1", "u2"]);
    claimed(&s, "u1");
    t.record(|_| s.unclaim("u1").unwrap());
}

fn requeue(t: &mut Trial) {
    t.interrupted(&["q1"], &["q2"]);
    let s = t.open();
    t.record(|_| s.requeue("q1").unwrap());
}

fn discard(t: &mut Trial) {
    t.interrupted(&["x1"], &[]);
    let s = t.open();
    t.record(|_| s.finish("x1", Outcome::Discarded).unwrap());
}

fn discard_expired(t: &mut Trial) {
    let s = t.queued(&["y1", "y2"]);
    assert_eq!(s.expire(0).len(), 2);
    t.record(|_| s.finish("y1", Outcome::Discarded).unwrap());
}

/// A queued task withdrawn (`task/cancel`, `baton cancel`): its receipt,
/// then its file goes; the task behind it stays queued.
fn cancel_queued(t: &mut Trial) {
    let s = t.queued(&["w1", "w2"]);
    t.record(|_| s.withdraw("w1", Outcome::Cancelled).unwrap());
}

fn expire(t: &mut Trial) {
    let s = t.queued(&["e1", "e2"]);
    t.record(|_| assert_eq!(s.expire(0), ["e1", "e2"]));
}

/// A spool left mid-way: a task mid-turn, a finished one whose payload
/// is still in `processing/`, a file half-written in `tmp/`; opened.
fn recover_at_open(t: &mut Trial) {
    let s = t.queued(&["m1", "m2", "m3"]);
    claimed(&s, "m1");
    claimed(&s, "m2");
    let payload = t.dir().join("processing").join(task_file(2, "m2"));
    let bytes = std::fs::read(&payload).unwrap();
    s.finish("m2", Outcome::Done).unwrap();
    drop(s);
    std::fs::write(&payload, bytes).unwrap();
    std::fs::write(t.dir().join("tmp").join(task_file(9, "m9")), b"{\"mess").unwrap();
    t.watch("m9");
    t.record(|t| drop(t.open()));
}

/// More receipts than the spool keeps, in logs as the spool writes them
/// (one a week old, and three of an earlier version, one of those a week
/// old too): the old ones, and the oldest log past the count, are pruned
/// at open.
fn prune_at_open(t: &mut Trial) {
    drop(t.open());
    let now = spool::now_f64();
    let receipt = |id: &str, finished_at: f64| Receipt {
        message_id: id.to_string(),
        digest: "0".repeat(64),
        outcome: Outcome::Done,
        accepted_at: None,
        finished_at,
        reply: None,
        sender_instance_id: None,
        remote: false,
        key: None,
        handler: Default::default(),
    };
    let done = t.dir().join("done");
    let logs = spool::RECEIPTS_KEEP / spool::LOG_RECEIPTS + 2;
    for log in 0..logs {
        let mut bytes = Vec::new();
        for k in 0..spool::LOG_RECEIPTS {
            let id = format!("p{log}-{k}");
            let at = if log == 0 { 1000.0 } else { now };
            serde_json::to_writer(&mut bytes, &receipt(&id, at)).unwrap();
            bytes.push(b'\n');
            if k == 0 {
                t.watch(&id);
            }
        }
        std::fs::write(done.join(format!("receipts-{:010}.jsonl", log + 1)), bytes).unwrap();
    }
    for (n, at) in [(0, 1000.0), (1, now), (2, now)] {
        let id = format!("old{n}");
        let bytes = serde_json::to_vec(&receipt(&id, at)).unwrap();
        std::fs::write(done.join(format!("{id}.json")), bytes).unwrap();
        t.watch(&id);
    }
    t.record(|t| drop(t.open()));
}

/// A second finish in the same process: an append to the log the first
/// one started.
fn complete_in_a_log(t: &mut Trial) {
    let s = t.queued(&["l1", "l2"]);
    claimed(&s, "l1");
    s.finish("l1", Outcome::Done).unwrap();
    claimed(&s, "l2");
    t.record(|_| s.finish("l2", Outcome::Failed).unwrap());
}

/// `<seq>-<id>.json`, as the spool names a task file.
fn task_file(seq: u64, id: &str) -> String {
    format!("{seq:016}-{id}.json")
}

fn offer(s: &Spool, id: &str) {
    let task = spool::new_task(
        id,
        format!("body of {id}"),
        Default::default(),
        0,
        None,
        "queue",
        None,
        "jsonrpc",
    );
    let a = s.admit(task, None, LIMITS, || false, |_, _| {}).unwrap();
    assert!(matches!(a, Admission::Accepted { .. }), "{id}: {a:?}");
}

fn claimed(s: &Spool, id: &str) {
    match s.claim().unwrap() {
        Claim::Task(t) => assert_eq!(t.message_id, id),
        other => panic!("claimed {other:?}, not {id}"),
    }
}

/// One transition's run: a scratch world whose `spool/` is the spool,
/// the ids it watches, and its recording.
pub struct Trial {
    world: PathBuf,
    ids: Vec<String>,
    recorded: Option<(Tree, Vec<baton::base::files::record::Op>)>,
}

impl Trial {
    fn new(name: &str) -> Trial {
        let world =
            std::env::temp_dir().join(format!("baton-explore-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&world);
        std::fs::create_dir_all(world.join("world")).unwrap();
        Trial {
            world,
            ids: Vec::new(),
            recorded: None,
        }
    }

    /// The root of the recorded world: `spool/` and nothing else.
    fn root(&self) -> PathBuf {
        self.world.join("world")
    }

    fn dir(&self) -> PathBuf {
        self.root().join("spool")
    }

    fn open(&self) -> Spool {
        Spool::open(&self.dir(), true, false).unwrap()
    }

    fn watch(&mut self, id: &str) {
        self.ids.push(id.to_string());
    }

    /// The spool, open, with `ids` accepted in that order (and watched).
    fn queued(&mut self, ids: &[&str]) -> Spool {
        let s = self.open();
        for id in ids {
            offer(&s, id);
            self.watch(id);
        }
        s
    }

    /// `interrupted` claimed (mid-turn when the spool closes, so they are
    /// in `interrupted/` at the next open) and `queued` after them.
    fn interrupted(&mut self, interrupted: &[&str], queued: &[&str]) {
        let s = self.queued(interrupted);
        for id in interrupted {
            claimed(&s, id);
        }
        for id in queued {
            offer(&s, id);
            self.watch(id);
        }
    }

    /// Runs the transition's step with its operations recorded, from a
    /// snapshot of the world taken just before.
    fn record(&mut self, step: impl FnOnce(&Trial)) {
        let before = snapshot(&self.root());
        let rec = Recorder::start(Scope::ThisThread);
        step(self);
        self.recorded = Some((before, rec.finish()));
    }
}

impl Drop for Trial {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.world);
    }
}

/// What an open of a state shows: every watched task's place, and the
/// files of the spool after it.
#[derive(PartialEq, Eq, Debug)]
struct Seen {
    places: BTreeMap<String, String>,
    tree: Tree,
}

/// A task's place in words: `queued`, `finished done reply ...`...
fn place(w: Whereabouts) -> String {
    match w {
        Whereabouts::Queued(_) => "queued".into(),
        Whereabouts::Processing => "processing".into(),
        Whereabouts::Interrupted => "interrupted".into(),
        Whereabouts::Expired => "expired".into(),
        Whereabouts::Rejected(why) => format!("rejected ({why:?})"),
        Whereabouts::Finished(Some(r)) => format!("finished {} {:?}", r.outcome, r.reply),
        Whereabouts::Finished(None) => "finished, its receipt unreadable".into(),
        Whereabouts::Unknown => "unknown".into(),
    }
}

/// Opens the spool in `root/spool` as the real code does and reads what
/// it shows; a refusal or a panic is an error.
fn observe(root: &Path, ids: &[String]) -> Result<Seen, String> {
    let dir = root.join("spool");
    let opened = std::panic::catch_unwind(|| Spool::open(&dir, true, false));
    let s = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("the open refused the spool: {e}")),
        Err(_) => return Err("the open panicked".into()),
    };
    let places = ids
        .iter()
        .map(|id| (id.clone(), place(s.whereabouts(id))))
        .collect();
    drop(s);
    Ok(Seen {
        places,
        tree: snapshot(&dir),
    })
}

/// The ids of the task files and receipts in a world's tree, up to 50
/// of each (a larger tree watches the ids its transition names).
/// The ids of the whole receipts in the receipt logs of `done/`, once for
/// each line (a torn last line, without its newline, is no receipt).
fn logged(tree: &Tree) -> Vec<String> {
    let logs = tree.iter().filter(|(p, _)| {
        p.parent() == Some(Path::new("done"))
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("receipts-"))
    });
    let mut ids = Vec::new();
    for (_, node) in logs {
        let Node::File(bytes) = node else { continue };
        let whole = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(&bytes[..0], |end| &bytes[..end]);
        for line in whole.split(|&b| b == b'\n') {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
            ids.extend(v["message_id"].as_str().map(str::to_string));
        }
    }
    ids
}

fn ids_in(tree: &Tree) -> impl Iterator<Item = String> + '_ {
    let ids = tree.keys().filter_map(|p| {
        let name = p.file_name()?.to_str()?.strip_suffix(".json")?;
        let dir = p.parent()?.file_name()?.to_str()?;
        Some(match dir {
            "done" => name.to_string(),
            "inbox" | "processing" | "interrupted" | "rejected" => name.get(17..)?.to_string(),
            _ => return None,
        })
    });
    ids.chain(logged(tree)).take(50)
}

/// How many times `id` is in the spool's files: task files in the four
/// places, and its receipt.
fn copies(tree: &Tree, id: &str) -> usize {
    let file = format!("-{id}.json");
    let receipts = logged(tree).iter().filter(|r| *r == id).count();
    receipts
        + tree
            .keys()
            .filter(|p| {
                let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                    return false;
                };
                let name = name.to_string_lossy();
                let task = ["inbox", "processing", "interrupted", "rejected"]
                    .iter()
                    .any(|d| dir == Path::new(d))
                    && name.len() > 16
                    && name[16..].starts_with(&file)
                    && (name[16..] == file || name[16 + file.len()..].starts_with('.'));
                task || (dir == Path::new("done") && name == format!("{id}.json"))
            })
            .count()
}

/// The problems with one crash state, opened as `seen`; `last` when the
/// transition had returned.
fn problems(ids: &[String], seen: &Seen, before: &Seen, after: &Seen, last: bool) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        let (now, was, will) = (&seen.places[id], &before.places[id], &after.places[id]);
        // Accepted: there before and after, or there after once the
        // transition returned.
        let accepted = will != "unknown" && (was != "unknown" || last);
        let n = copies(&seen.tree, id);
        if n > 1 || (accepted && n != 1) {
            out.push(format!("{id} is in the spool {n} times"));
        }
        if now != was && now != will {
            out.push(format!(
                "{id} is {now}: it was {was} before, and {will} after"
            ));
        } else if last && now != will {
            out.push(format!(
                "{id} is {now}, though the transition returned with it {will}"
            ));
        }
    }
    out
}

/// What the explorer found in one transition.
pub struct Explored {
    pub name: &'static str,
    pub operations: usize,
    pub states: usize,
    pub violations: Vec<String>,
}

/// Runs a transition and checks every state a crash during it could
/// leave.
pub fn explore(name: &'static str, transition: fn(&mut Trial)) -> Explored {
    let mut t = Trial::new(name);
    transition(&mut t);
    let (before, ops) = t.recorded.take().expect("the transition recorded its step");
    let after = snapshot(&t.root());
    let rec = Recording::new(&t.root(), &before, &ops);
    let scratch = t.world.join("state");
    let mut ids = t.ids.clone();
    ids.extend(ids_in(&before).chain(ids_in(&after)));
    ids.sort();
    ids.dedup();
    // What the scratch directory holds, when known: the next state is
    // written as a difference from it.
    let on_disk: RefCell<Option<Tree>> = RefCell::new(None);
    let view = |tree: &Tree| -> Result<Seen, String> {
        materialise_from(on_disk.take().as_ref(), tree, &scratch);
        let first = observe(&scratch, &ids)?;
        let second = observe(&scratch, &ids)?;
        if first != second {
            return Err(format!("a second open differs: {first:?} then {second:?}"));
        }
        let spool = Path::new("spool");
        let mut now = Tree::from([(spool.to_path_buf(), Node::Dir)]);
        now.extend(first.tree.iter().map(|(p, n)| (spool.join(p), n.clone())));
        on_disk.replace(Some(now));
        Ok(first)
    };
    let ref_before = view(&before).expect("the state before opens");
    let ref_after = view(&after).expect("the state after opens");
    let mut seen = HashSet::new();
    let mut violations = Vec::new();
    for k in 0..=rec.len() {
        let last = k == rec.len();
        rec.crash_states(k, &mut |tree| {
            if !seen.insert((fingerprint(&tree), last)) {
                return;
            }
            let found = match view(&tree) {
                Ok(s) => problems(&ids, &s, &ref_before, &ref_after, last),
                Err(e) => vec![e],
            };
            if !found.is_empty() {
                let at = k.checked_sub(1).map(|i| format!("{:?}", ops[i]));
                violations.push(format!(
                    "{name}: crash after {k} of {} operations (the last {}): {}; the files: {:?}",
                    ops.len(),
                    at.unwrap_or_else(|| "none".into()),
                    found.join("; "),
                    tree.keys().collect::<Vec<_>>(),
                ));
            }
        });
    }
    let states = seen.iter().map(|(f, _)| *f).collect::<HashSet<_>>().len();
    Explored {
        name,
        operations: ops.len(),
        states,
        violations,
    }
}

/// The states a crash could leave once the first acceptance into a new
/// spool had returned in which that task is not queued, opened: the
/// explorer's first find (the spool's own directory entry, and those of
/// the directories made for it, were never synced, so a power cut could
/// take the new spool and its acknowledged task with it). Returns what
/// each such state shows of the task.
pub fn new_spool_states_without_its_first_task() -> Vec<String> {
    let mut t = Trial::new("new-spool");
    admit_into_a_new_spool(&mut t);
    let (before, ops) = t.recorded.take().expect("recorded");
    let rec = Recording::new(&t.root(), &before, &ops);
    let queued = Path::new("spool/inbox").join(task_file(1, "n1"));
    let mut lost = Vec::new();
    rec.crash_states(rec.len(), &mut |tree| {
        if !tree.contains_key(&queued) {
            materialise(&tree, &t.world.join("state"));
            let seen = observe(&t.world.join("state"), &["n1".to_string()]);
            lost.push(format!(
                "{seen:?} from {:?}",
                tree.keys().collect::<Vec<_>>()
            ));
        }
    });
    lost
}
