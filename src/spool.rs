//! The crash-safe, rename-based queue of one instance (DESIGN §5).
//!
//! Files move `tmp/ → inbox/ → processing/ → (receipt in done/)`; a task is
//! acknowledged only after its file is renamed into `inbox/` and the
//! directory is synced. One mutex guards the in-memory index (ids, digests,
//! order, per-sender counts), which is rebuilt from the directories at open.
//! An acceptance takes it twice: to check and reserve (id, sequence number,
//! queue slot), and, once the file is durable, to index and announce the
//! task. The writing and syncing in between run outside it, so concurrent
//! acceptances write in parallel and share directory syncs (`DirSync`).

use crate::digest::sha256_hex;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::sys;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long an instance waits for a spool lock an offline sender holds.
const LOCK_WAIT: Duration = Duration::from_secs(2);

const DIRS: [&str; 6] = [
    "tmp",
    "inbox",
    "processing",
    "done",
    "rejected",
    "interrupted",
];
/// How many sequence numbers one write of the `sequence` file reserves.
const SEQ_LEASE: u64 = 1024;
const SEQ_WIDTH: usize = 16;
/// Receipts are kept for at least this many tasks and this long.
pub const RECEIPTS_KEEP: usize = 10_000;
pub const RECEIPTS_MIN_AGE: u64 = 7 * 24 * 3600;
/// The largest spool file read back; anything bigger is bad data.
const MAX_TASK_FILE: u64 = 4 * 1024 * 1024;

/// Who sent a task, as the receiver recorded it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sender {
    /// The sender instance id, present only when verified.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub workspace: Option<String>,
    /// The kernel's peer pid for the connection that delivered the task.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pid: Option<u32>,
}

/// One task as stored in the spool: the accepted request plus what the
/// receiver learned.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Task {
    pub message_id: String,
    pub body: String,
    pub sender: Sender,
    pub hop: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub in_reply_to: Option<String>,
    pub mode: String,
    pub accepted_at: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer_pid: Option<u32>,
    pub wire: String,
    /// SHA-256 of the body, hex.
    pub digest: String,
    pub seq: u64,
}

/// A body on its way into a task file or an event: its text, or its JSON
/// string already escaped (as a request line spelled it), which is copied
/// rather than escaped again.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(untagged)]
pub enum Body<'a> {
    Text(&'a str),
    Json(&'a RawValue),
}

impl<'a> Body<'a> {
    /// `json` must be the JSON string of `text`.
    pub fn new(text: &'a str, json: Option<&'a RawValue>) -> Body<'a> {
        json.map_or(Body::Text(text), Body::Json)
    }
}

/// A task as its file holds it: `Task`'s fields in `Task`'s order, with
/// the body as a `Body`.
#[derive(Serialize)]
struct TaskFile<'a> {
    message_id: &'a str,
    body: Body<'a>,
    sender: &'a Sender,
    hop: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_reply_to: &'a Option<String>,
    mode: &'a str,
    accepted_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_pid: Option<u32>,
    wire: &'a str,
    digest: &'a str,
    seq: u64,
}

impl<'a> TaskFile<'a> {
    fn new(t: &'a Task, body_json: Option<&'a RawValue>) -> TaskFile<'a> {
        TaskFile {
            message_id: &t.message_id,
            body: Body::new(&t.body, body_json),
            sender: &t.sender,
            hop: t.hop,
            in_reply_to: &t.in_reply_to,
            mode: &t.mode,
            accepted_at: t.accepted_at,
            peer_pid: t.peer_pid,
            wire: &t.wire,
            digest: &t.digest,
            seq: t.seq,
        }
    }
}

/// The receipt kept in `done/` after a task finished.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Receipt {
    pub message_id: String,
    pub digest: String,
    pub outcome: String,
    pub finished_at: u64,
}

/// What the spool says about a task offered for acceptance.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Accepted {
        queue_position: usize,
    },
    Duplicate,
    Reused,
    /// The id is known but its digest could not be read back.
    Unreadable,
    Paused,
    InflightFull {
        limit: usize,
    },
    Full {
        limit: usize,
    },
}

/// Limits the spool enforces at acceptance.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_queue: usize,
    pub max_inflight: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Inbox,
    Processing,
    Interrupted,
    Rejected,
}

#[derive(Clone, Debug)]
struct Entry {
    /// `None` when the stored data could not be read back.
    digest: Option<String>,
    place: Place,
    file: String,
    /// Order key in the inbox: steer before queue, then sequence.
    key: (u8, u64),
    summary: Summary,
    /// When it last entered the queue (epoch seconds): accepted, or
    /// requeued by the operator. `--ttl` counts from here.
    queued_at: u64,
}

impl Entry {
    /// The verified sender's instance id, if it had one.
    fn sender_id(&self) -> Option<&str> {
        self.summary.sender.instance_id.as_deref()
    }
}

/// What `inbox/list` shows of a task without reading its file.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub message_id: String,
    pub sender: Sender,
    pub accepted_at: u64,
    pub mode: String,
    pub bytes: usize,
}

struct Index {
    next_seq: u64,
    leased_to: u64,
    entries: HashMap<String, Entry>,
    inbox: BTreeMap<(u8, u64), String>,
    processing: usize,
    inflight: HashMap<String, usize>,
    receipts: usize,
    /// A 64-bit hash of every id with a receipt in `done/`: a new id (the
    /// common case) is known to have none without a lookup on disk. A hit
    /// reads the receipt, so a collision costs a read, never a refusal.
    finished: HashSet<u64>,
    /// Ids reserved by an acceptance that is storing its file right now,
    /// with their order keys: they count against the limits, make a
    /// second offer of the same id wait for the first one's outcome, and
    /// keep a claim from overtaking them (`wait_for_head`).
    pending: HashMap<String, (u8, u64)>,
    /// Threads waiting on `Spool::settled`: without any, a settling
    /// acceptance skips the wake-up call.
    waiting: usize,
}

/// Group commit of the `inbox/` directory sync: an acceptance that renamed
/// its file waits for a sync that *started* after its rename. While one
/// sync runs, the acceptances that arrive queue behind it and the next one
/// covers them all, so N concurrent senders cost far fewer than N syncs.
#[derive(Default)]
struct DirSync {
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
    fn sync(&self, run: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
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

/// An acceptance between its reservation and its answer. Dropped before
/// it is settled (an error, or a panic while storing), it gives the
/// reservation back.
struct Reservation<'a> {
    spool: &'a Spool,
    id: String,
    seq: u64,
    /// Whether the sequence number may go back: only after a failed store
    /// that left no file behind (never after a panic).
    give_back: bool,
    sender: Option<String>,
    settled: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut idx = self.spool.idx();
        idx.pending.remove(&self.id);
        // The number goes back if no later one was taken, so sequence
        // numbers stay dense across refusals; a file left with it would
        // share its place in the queue with the next task.
        if self.give_back && idx.next_seq == self.seq + 1 {
            idx.next_seq = self.seq;
        }
        if let Some(s) = &self.sender {
            release(&mut idx.inflight, s);
        }
        self.spool.wake_settled(idx);
    }
}

/// The key of an id in `Index::finished`.
fn id_hash(id: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// An open, locked spool.
pub struct Spool {
    dir: PathBuf,
    fsync: bool,
    ephemeral: bool,
    index: Mutex<Index>,
    /// Signalled whenever a reservation settles (`Index::pending`).
    settled: Condvar,
    dir_sync: DirSync,
    /// Held for the spool's whole life; the flock goes with it.
    _lock: File,
    /// Problems found while opening (bad files moved to `rejected/`).
    pub recovery_notes: Vec<String>,
}

/// The spool directory for a name and a canonical workspace under the
/// state home.
pub fn spool_dir(state_home: &Path, name: &str, workspace: &Path) -> PathBuf {
    let hash = sha256_hex(workspace.as_os_str().as_encoded_bytes());
    state_home
        .join("baton")
        .join("spool")
        .join(format!("{name}-{}", &hash[..16]))
}

/// `$XDG_STATE_HOME`, or `~/.local/state`.
pub fn state_home() -> Result<PathBuf> {
    if let Some(v) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        if !p.is_absolute() {
            return Err(Error::Env(format!(
                "XDG_STATE_HOME={} is not an absolute path",
                p.display()
            )));
        }
        return Ok(p);
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) if Path::new(&h).is_absolute() => Ok(PathBuf::from(h).join(".local/state")),
        _ => Err(Error::Env(
            "neither XDG_STATE_HOME nor HOME is set to an absolute path: no place for the spool"
                .into(),
        )),
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn file_name(seq: u64, id: &str) -> String {
    // By hand rather than `format!`: one of these per accepted task.
    if seq >= 10u64.pow(SEQ_WIDTH as u32) {
        return format!("{seq}-{id}.json");
    }
    let mut digits = [b'0'; SEQ_WIDTH];
    let mut n = seq;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let mut name = String::with_capacity(SEQ_WIDTH + id.len() + 6);
    name.push_str(std::str::from_utf8(&digits).expect("ASCII digits"));
    name.push('-');
    name.push_str(id);
    name.push_str(".json");
    name
}

fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let stem = name.strip_suffix(".json")?;
    let (seq, id) = stem.split_once('-')?;
    if seq.len() != SEQ_WIDTH || !crate::registry::valid_id(id) {
        return None;
    }
    Some((seq.parse().ok()?, id))
}

fn receipt_name(id: &str) -> String {
    format!("{id}.json")
}

/// Checks that an existing directory is ours alone and not a symlink.
pub fn check_private_dir(path: &Path, what: &str) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::io("inspect", path, e))?;
    let bad = |reason: String| Err(Error::Env(format!("{what} {}: {reason}", path.display())));
    if meta.file_type().is_symlink() {
        return bad("is a symlink".into());
    }
    if !meta.is_dir() {
        return bad("is not a directory".into());
    }
    if meta.uid() != sys::euid() {
        return bad(format!(
            "is owned by uid {}, not by you (uid {})",
            meta.uid(),
            sys::euid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return bad(format!(
            "has mode {:04o}, which gives group or other access (chmod 700 it)",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn mkdir_private(path: &Path) -> Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("create directory", path, e)),
    }
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    File::open(path)?.sync_all()
}

/// Reads a small file without following a symlink in its last component.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(sys::O_NOFOLLOW)
        .open(path)?;
    let mut out = Vec::new();
    (&mut f).take(MAX_TASK_FILE + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_TASK_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "file is larger than any task",
        ));
    }
    Ok(out)
}

/// Parses and checks a task file: valid JSON, the id in its name, and a
/// body that matches its digest.
fn parse_task(bytes: &[u8], id: &str) -> std::result::Result<Task, String> {
    let task: Task = serde_json::from_slice(bytes).map_err(|e| format!("not a task: {e}"))?;
    if task.message_id != id {
        return Err(format!(
            "file name says {id:?} but the task says {:?}",
            task.message_id
        ));
    }
    if sha256_hex(task.body.as_bytes()) != task.digest {
        return Err("body does not match its digest".into());
    }
    Ok(task)
}

/// What the index keeps of a task (the rest is in its file).
fn summary(task: Task) -> Summary {
    Summary {
        bytes: task.body.len(),
        message_id: task.message_id,
        sender: task.sender,
        accepted_at: task.accepted_at,
        mode: task.mode,
    }
}

fn order_key(mode: &str, seq: u64) -> (u8, u64) {
    (if mode == "steer" { 0 } else { 1 }, seq)
}

/// A task handed to the agent by `claim`.
#[derive(Debug)]
pub enum Claim {
    Task(Box<Task>),
    Empty,
    /// The oldest entry was bad data and went to `rejected/`.
    Rejected {
        message_id: String,
        reason: String,
    },
}

/// The tasks of a spool by place.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub queued: Vec<Summary>,
    pub processing: Vec<Summary>,
    pub interrupted: Vec<Summary>,
    pub rejected: Vec<Summary>,
}

/// Counts of tasks by place.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub queued: usize,
    pub processing: usize,
    pub interrupted: usize,
}

impl Spool {
    /// Opens (creating if needed) and locks a spool, then recovers it:
    /// `tmp/` swept, `processing/` moved to `interrupted/`, index rebuilt.
    pub fn open(dir: &Path, fsync: bool, ephemeral: bool) -> Result<Spool> {
        match Spool::open_inner(dir, fsync, ephemeral, true, LOCK_WAIT)? {
            Ok(spool) => Ok(spool),
            Err(holder) => Err(Error::Env(format!(
                "spool {} is in use by pid {holder}: another instance with the same name and workspace is running",
                dir.display(),
            ))),
        }
    }

    /// Opens an existing spool for offline delivery: never creates one,
    /// and `None` when its lock is held (its instance is running, or
    /// another sender is storing right now).
    pub fn open_offline(dir: &Path, fsync: bool) -> Result<Option<Spool>> {
        if fs::symlink_metadata(dir.join("meta.json")).is_err() {
            return Err(Error::Env(format!("{} is not a spool", dir.display())));
        }
        Ok(Spool::open_inner(dir, fsync, false, false, Duration::ZERO)?.ok())
    }

    /// `Err(holder pid)` when the lock stayed held for `wait`.
    fn open_inner(
        dir: &Path,
        fsync: bool,
        ephemeral: bool,
        create: bool,
        wait: Duration,
    ) -> Result<std::result::Result<Spool, String>> {
        if !create {
            check_private_dir(dir, "spool")?;
        } else if let Some(parent) = dir.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| Error::io("create directory", parent, e))?;
        }
        if create {
            mkdir_private(dir)?;
            check_private_dir(dir, "spool")?;
        }
        let lock_path = dir.join("lock");
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(sys::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| Error::io("open lock file", &lock_path, e))?;
        // An offline sender holds the lock only while it stores one task:
        // an instance that starts meanwhile waits for it, briefly.
        let deadline = Instant::now() + wait;
        while !sys::try_lock_exclusive(&lock).map_err(|e| Error::io("lock", &lock_path, e))? {
            if Instant::now() >= deadline {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = holder.trim();
                return Ok(Err(if holder.is_empty() {
                    "?".into()
                } else {
                    holder.to_string()
                }));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        lock.set_len(0)
            .map_err(|e| Error::io("write", &lock_path, e))?;
        writeln!(lock, "{}", std::process::id()).map_err(|e| Error::io("write", &lock_path, e))?;
        for d in DIRS {
            let p = dir.join(d);
            mkdir_private(&p)?;
            check_private_dir(&p, "spool directory")?;
        }
        let mut spool = Spool {
            dir: dir.to_path_buf(),
            fsync,
            ephemeral,
            index: Mutex::new(Index {
                next_seq: 1,
                leased_to: 0,
                entries: HashMap::new(),
                inbox: BTreeMap::new(),
                processing: 0,
                inflight: HashMap::new(),
                receipts: 0,
                finished: HashSet::new(),
                pending: HashMap::new(),
                waiting: 0,
            }),
            settled: Condvar::new(),
            dir_sync: DirSync::default(),

            _lock: lock,
            recovery_notes: Vec::new(),
        };
        spool.recover()?;
        Ok(Ok(spool))
    }

    /// The index; a panic elsewhere while it was held does not take the
    /// spool down with it (every update leaves the index consistent).
    fn idx(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// `<dir>/<sub>/<name>`, built in one allocation (one per accepted
    /// task goes through here twice).
    fn path(&self, sub: &str, name: &str) -> PathBuf {
        let dir = self.dir.as_os_str();
        let mut p = std::ffi::OsString::with_capacity(dir.len() + sub.len() + name.len() + 2);
        p.push(dir);
        p.push("/");
        p.push(sub);
        p.push("/");
        p.push(name);
        PathBuf::from(p)
    }

    fn recover(&mut self) -> Result<()> {
        let mut notes = Vec::new();
        // A crash between create and rename leaves only unacknowledged data.
        for name in list(&self.dir.join("tmp"))? {
            let p = self.path("tmp", &name);
            fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
        }
        // A crash during `finish`, after the receipt landed in done/ but
        // before the payload was removed, leaves both: the task finished,
        // so the payload goes now rather than being set aside (and maybe
        // requeued and run a second time).
        let mut finished = false;
        for sub in ["processing", "interrupted", "rejected"] {
            for name in list(&self.dir.join(sub))? {
                let Some((_, id)) = parse_file_name(&name) else {
                    continue;
                };
                let receipt: Option<Receipt> = read_bounded(&self.path("done", &receipt_name(id)))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok());
                if receipt.is_some_and(|r| r.message_id == id) {
                    let p = self.path(sub, &name);
                    fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
                    notes.push(format!(
                        "{sub}/{name} had finished (its receipt is in done/); removed"
                    ));
                    finished = true;
                }
            }
        }
        if finished && self.fsync {
            self.sync(&["processing", "interrupted", "rejected"])?;
        }
        // Work that was mid-turn is never rerun on its own.
        let mut moved = false;
        for name in list(&self.dir.join("processing"))? {
            let from = self.path("processing", &name);
            let to = self.path("interrupted", &name);
            fs::rename(&from, &to).map_err(|e| Error::io("move to interrupted/", &from, e))?;
            notes.push(format!(
                "task file {name} was mid-turn and is now in interrupted/"
            ));
            moved = true;
        }
        if moved && self.fsync {
            self.sync(&["processing", "interrupted"])?;
        }
        let mut idx = self.idx();
        let mut max_seq = 0;
        for (sub, place) in [
            ("inbox", Place::Inbox),
            ("interrupted", Place::Interrupted),
            ("rejected", Place::Rejected),
        ] {
            for name in list(&self.dir.join(sub))? {
                let Some((seq, id)) = parse_file_name(&name) else {
                    if place != Place::Rejected {
                        let from = self.path(sub, &name);
                        let to = self.path("rejected", &name);
                        let _ = fs::rename(&from, &to);
                        notes.push(format!(
                            "{sub}/{name} is not a task file name; moved to rejected/"
                        ));
                    }
                    continue;
                };
                max_seq = max_seq.max(seq);
                let id = id.to_string();
                let parsed = read_bounded(&self.path(sub, &name))
                    .map_err(|e| e.to_string())
                    .and_then(|b| parse_task(&b, &id));
                let (task, place) = match parsed {
                    Ok(t) => (Some(t), place),
                    Err(reason) if place != Place::Rejected => {
                        let from = self.path(sub, &name);
                        let to = self.path("rejected", &name);
                        fs::rename(&from, &to)
                            .map_err(|e| Error::io("move to rejected/", &from, e))?;
                        notes.push(format!("{sub}/{name}: {reason}; moved to rejected/"));
                        (None, Place::Rejected)
                    }
                    Err(_) => (None, Place::Rejected),
                };
                let mode = task.as_ref().map_or("queue", |t| t.mode.as_str());
                let key = order_key(mode, seq);
                // A requeue touches the file: its time outlives a restart.
                let touched = fs::symlink_metadata(self.path(sub, &name))
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let queued_at = task.as_ref().map_or(0, |t| t.accepted_at).max(touched);
                let mut task = task;
                let digest = task.as_mut().map(|t| std::mem::take(&mut t.digest));
                let entry = Entry {
                    queued_at,
                    digest,
                    place,
                    file: name.clone(),
                    key,
                    summary: task.map(summary).unwrap_or(Summary {
                        message_id: id.clone(),
                        sender: Sender::default(),
                        accepted_at: 0,
                        mode: "queue".into(),
                        bytes: 0,
                    }),
                };
                if place == Place::Inbox {
                    idx.inbox.insert(key, id.clone());
                    if let Some(s) = entry.sender_id() {
                        *idx.inflight.entry(s.to_owned()).or_default() += 1;
                    }
                }
                idx.entries.insert(id, entry);
            }
        }
        // Finished tasks stay out of the index: a retry finds their
        // receipt on disk (`receipt_digest`), so memory does not grow
        // with every task ever run.
        let mut receipts = Vec::new();
        for name in list(&self.dir.join("done"))? {
            let Some(id) = name
                .strip_suffix(".json")
                .filter(|id| crate::registry::valid_id(id))
            else {
                continue;
            };
            idx.finished.insert(id_hash(id));
            let p = self.path("done", &name);
            let r: Option<Receipt> = read_bounded(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let finished = r.as_ref().map_or(0, |r| r.finished_at);
            receipts.push((finished, name));
        }
        // Prune only past both bounds: more than RECEIPTS_KEEP receipts,
        // and only those older than RECEIPTS_MIN_AGE, oldest first.
        idx.receipts = receipts.len();
        if receipts.len() > RECEIPTS_KEEP {
            receipts.sort();
            let cutoff = now_secs().saturating_sub(RECEIPTS_MIN_AGE);
            let excess = receipts.len() - RECEIPTS_KEEP;
            for (finished, name) in receipts.into_iter().take(excess) {
                if finished >= cutoff {
                    break;
                }
                if fs::remove_file(self.path("done", &name)).is_ok()
                    && let Some(id) = name.strip_suffix(".json")
                {
                    idx.finished.remove(&id_hash(id));
                }
                idx.receipts -= 1;
            }
        }
        let seq_path = self.dir.join("sequence");
        let stored: u64 = read_bounded(&seq_path)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        idx.next_seq = stored.max(max_seq + 1).max(1);
        idx.leased_to = idx.next_seq;
        drop(idx);
        self.recovery_notes = notes;
        Ok(())
    }

    fn sync(&self, subs: &[&str]) -> Result<()> {
        for s in subs {
            let p = self.dir.join(s);
            sync_dir(&p).map_err(|e| Error::io("sync directory", &p, e))?;
        }
        Ok(())
    }

    /// Makes sure `seq` is covered by the lease in the `sequence` file, so
    /// numbers never go backwards across a crash.
    fn lease(&self, idx: &mut Index) -> std::io::Result<()> {
        if idx.next_seq < idx.leased_to {
            return Ok(());
        }
        let to = idx.next_seq + SEQ_LEASE;
        let tmp = self.path("tmp", "sequence");
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(sys::O_NOFOLLOW)
            .open(&tmp)?;
        writeln!(f, "{to}")?;
        if self.fsync {
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join("sequence"))?;
        if self.fsync {
            sync_dir(&self.dir)?;
        }
        idx.leased_to = to;
        Ok(())
    }

    /// The body digest a finished task's receipt records: `None` without a
    /// receipt, `Some(None)` when it cannot be read back.
    fn receipt_digest(&self, idx: &Index, message_id: &str) -> Option<Option<String>> {
        if !idx.finished.contains(&id_hash(message_id)) {
            return None;
        }
        match read_bounded(&self.path("done", &receipt_name(message_id))) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => Some(None),
            Ok(b) => Some(
                serde_json::from_slice::<Receipt>(&b)
                    .ok()
                    .map(|r| r.digest)
                    .filter(|d| !d.is_empty()),
            ),
        }
    }

    /// Offers a task. Checks run in DESIGN §4 order from `duplicate` on;
    /// `paused` is read under the index lock, and `settle` lets a pause
    /// wait for the acceptances that passed it.
    ///
    /// The checks reserve the id, a sequence number and a queue slot; the
    /// file is written and synced outside the lock; then, under it again,
    /// the task is indexed and `announce` runs, so whoever announces an
    /// acceptance does so before any claim can see the task.
    pub fn admit(
        &self,
        mut task: Task,
        body_json: Option<&RawValue>,
        limits: Limits,
        paused: impl Fn() -> bool,
        announce: impl FnOnce(&Task, usize),
    ) -> Result<Admission> {
        let mut idx = self.idx();
        // The same id being stored right now: its outcome decides ours.
        while idx.pending.contains_key(&task.message_id) {
            idx = self.wait_settled(idx);
        }
        let known = match idx.entries.get(&task.message_id) {
            Some(e) => Some(e.digest.clone()),
            None => self.receipt_digest(&idx, &task.message_id),
        };
        if let Some(digest) = known {
            return Ok(match digest {
                Some(d) if d != task.digest => Admission::Reused,
                Some(_) => Admission::Duplicate,
                None => Admission::Unreadable,
            });
        }
        if paused() {
            return Ok(Admission::Paused);
        }
        if let Some(s) = &task.sender.instance_id {
            let n = idx.inflight.get(s).copied().unwrap_or(0);
            if limits.max_inflight > 0 && n >= limits.max_inflight {
                return Ok(Admission::InflightFull {
                    limit: limits.max_inflight,
                });
            }
        }
        if idx.inbox.len() + idx.processing + idx.pending.len() >= limits.max_queue {
            return Ok(Admission::Full {
                limit: limits.max_queue,
            });
        }
        self.lease(&mut idx)
            .map_err(|e| Error::io("write", &self.dir.join("sequence"), e))?;
        task.seq = idx.next_seq;
        idx.next_seq += 1;
        idx.pending
            .insert(task.message_id.clone(), order_key(&task.mode, task.seq));
        if let Some(s) = &task.sender.instance_id {
            *idx.inflight.entry(s.clone()).or_default() += 1;
        }
        drop(idx);
        let mut reservation = Reservation {
            spool: self,
            id: task.message_id.clone(),
            seq: task.seq,
            give_back: false,
            sender: task.sender.instance_id.clone(),
            settled: false,
        };
        let name = file_name(task.seq, &task.message_id);
        if let Err((e, clean)) = self.store(&TaskFile::new(&task, body_json), &name) {
            reservation.give_back = clean;
            return Err(e);
        }
        let mut idx = self.idx();
        reservation.settled = true;
        idx.pending.remove(&task.message_id);
        let queue_position = idx.inbox.len() + 1 + idx.processing;
        // Under the lock, with the task indexed just below: no claim can
        // see it before it is announced.
        announce(&task, queue_position);
        let key = order_key(&task.mode, task.seq);
        let id = task.message_id.clone();
        let digest = std::mem::take(&mut task.digest);
        let queued_at = task.accepted_at;
        idx.inbox.insert(key, id.clone());
        idx.entries.insert(
            id,
            Entry {
                digest: Some(digest),
                place: Place::Inbox,
                file: name,
                key,
                queued_at,
                summary: summary(task),
            },
        );
        self.wake_settled(idx);
        Ok(Admission::Accepted { queue_position })
    }

    /// Waits while an acceptance still storing its file comes before the
    /// head of the queue, so that tasks are handed out in acceptance
    /// order. Each such wait lasts one file and one directory sync.
    fn wait_for_head<'a>(&'a self, mut idx: MutexGuard<'a, Index>) -> MutexGuard<'a, Index> {
        loop {
            let head = idx.inbox.keys().next().copied();
            let first_pending = idx.pending.values().min().copied();
            match (head, first_pending) {
                (Some(h), Some(p)) if p < h => {
                    idx = self.wait_settled(idx);
                }
                _ => return idx,
            }
        }
    }

    /// Waits once for a reservation to settle.
    fn wait_settled<'a>(&'a self, mut idx: MutexGuard<'a, Index>) -> MutexGuard<'a, Index> {
        idx.waiting += 1;
        idx = self.settled.wait(idx).unwrap_or_else(|e| e.into_inner());
        idx.waiting -= 1;
        idx
    }

    fn wake_settled(&self, idx: MutexGuard<'_, Index>) {
        let anyone = idx.waiting > 0;
        drop(idx);
        if anyone {
            self.settled.notify_all();
        }
    }

    /// Waits, up to `max`, until every acceptance that passed its checks
    /// has been answered: after a pause, then, no task is answered
    /// `accepted` that the pause did not see stored.
    pub fn settle(&self, max: Duration) {
        let deadline = Instant::now() + max;
        let mut idx = self.idx();
        while !idx.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            idx.waiting += 1;
            idx = self
                .settled
                .wait_timeout(idx, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            idx.waiting -= 1;
        }
    }

    /// Write, fsync, rename into `inbox/`, fsync the directory (shared with
    /// concurrent acceptances). On any failure the file is removed and
    /// nothing is acknowledged; a failed fsync is never retried on the
    /// same descriptor.
    /// The error says whether the cleanup left no file behind.
    fn store(&self, task: &TaskFile, name: &str) -> std::result::Result<(), (Error, bool)> {
        let tmp = self.path("tmp", name);
        let body = match task.body {
            Body::Text(t) => t.len(),
            Body::Json(j) => j.get().len(),
        };
        let mut bytes = Vec::with_capacity(body + 512);
        serde_json::to_writer(&mut bytes, task).expect("a task always serializes");
        let result = (|| -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(sys::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            failpoint::hit("after-write")?;
            if self.fsync {
                f.sync_all()?;
            }
            failpoint::hit("after-file-fsync")?;
            drop(f);
            fs::rename(&tmp, self.path("inbox", name))?;
            failpoint::hit("after-rename")?;
            failpoint::hit("before-dir-fsync")?;
            if self.fsync {
                // A fresh descriptor for every sync: a failed one is never
                // retried on the same descriptor.
                let inbox = self.dir.join("inbox");
                self.dir_sync.sync(|| sync_dir(&inbox))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Nothing is acknowledged, so nothing may stay: the task is
            // refused and a retry writes a new file.
            let gone = |r: std::io::Result<()>| {
                r.is_ok() || r.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            };
            let clean =
                gone(fs::remove_file(&tmp)) & gone(fs::remove_file(self.path("inbox", name)));
            return Err((Error::io("store task in", &self.dir, e), clean));
        }
        Ok(())
    }

    /// The task a claim would take next: its id and summary.
    pub fn peek(&self) -> Option<Summary> {
        let idx = self.wait_for_head(self.idx());
        let id = idx.inbox.values().next()?;
        Some(idx.entries[id].summary.clone())
    }

    /// The oldest queued steer task from a sender instance.
    pub fn first_steer_from(&self, sender: &str) -> Option<Summary> {
        let idx = self.idx();
        idx.inbox
            .iter()
            .filter(|((rank, _), _)| *rank == 0)
            .map(|(_, id)| &idx.entries[id])
            .find(|e| e.sender_id() == Some(sender))
            .map(|e| e.summary.clone())
    }

    /// Moves the oldest inbox entry to `processing/` and reads it back.
    pub fn claim(&self) -> Result<Claim> {
        self.claim_where(None)
    }

    /// Claims one particular queued task (one that was approved while
    /// another jumped ahead of it).
    pub fn claim_id(&self, message_id: &str) -> Result<Claim> {
        self.claim_where(Some(message_id))
    }

    fn claim_where(&self, want: Option<&str>) -> Result<Claim> {
        let mut idx = match want {
            None => self.wait_for_head(self.idx()),
            Some(_) => self.idx(),
        };
        let found = match want {
            None => idx.inbox.iter().next().map(|(k, id)| (*k, id.clone())),
            Some(w) => idx
                .entries
                .get(w)
                .filter(|e| e.place == Place::Inbox)
                .map(|e| (e.key, w.to_string())),
        };
        let Some((key, id)) = found else {
            return Ok(Claim::Empty);
        };
        idx.inbox.remove(&key);
        let file = idx.entries[&id].file.clone();
        let from = self.path("inbox", &file);
        let to = self.path("processing", &file);
        if let Err(e) = fs::rename(&from, &to) {
            idx.inbox.insert(key, id);
            return Err(Error::io("claim", &from, e));
        }
        if self.fsync {
            self.sync(&["inbox", "processing"])?;
        }
        let parsed = read_bounded(&to)
            .map_err(|e| e.to_string())
            .and_then(|b| parse_task(&b, &id));
        match parsed {
            Ok(task) => {
                idx.processing += 1;
                idx.entries.get_mut(&id).expect("indexed").place = Place::Processing;
                Ok(Claim::Task(Box::new(task)))
            }
            Err(reason) => {
                let rej = self.path("rejected", &file);
                fs::rename(&to, &rej).map_err(|e| Error::io("move to rejected/", &to, e))?;
                let e = idx.entries.get_mut(&id).expect("indexed");
                e.place = Place::Rejected;
                if let Some(s) = e.sender_id().map(String::from) {
                    release(&mut idx.inflight, &s);
                }
                Ok(Claim::Rejected {
                    message_id: id,
                    reason,
                })
            }
        }
    }

    /// Finishes a processing task: receipt first, then the payload goes.
    pub fn finish(&self, message_id: &str, outcome: &str) -> Result<()> {
        let mut idx = self.idx();
        let Some(e) = idx.entries.get(message_id).cloned() else {
            return Err(Error::Usage(format!("no task {message_id} in the spool")));
        };
        let sub = match e.place {
            Place::Processing => "processing",
            Place::Interrupted => "interrupted",
            Place::Rejected if outcome == "discarded" => "rejected",
            _ => {
                return Err(Error::Usage(format!(
                    "task {message_id} is not being processed"
                )));
            }
        };
        let receipt = Receipt {
            message_id: message_id.to_string(),
            digest: e.digest.clone().unwrap_or_default(),
            outcome: outcome.to_string(),
            finished_at: now_secs(),
        };
        let name = receipt_name(message_id);
        let tmp = self.path("tmp", &format!("receipt-{name}"));
        let dest = self.path("done", &name);
        let write = (|| -> std::io::Result<()> {
            let _ = fs::remove_file(&tmp);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(sys::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(&receipt).expect("serializes"))?;
            if self.fsync {
                f.sync_all()?;
            }
            fs::rename(&tmp, &dest)?;
            if self.fsync {
                sync_dir(&self.dir.join("done"))?;
            }
            fs::remove_file(self.path(sub, &e.file))?;
            if self.fsync {
                sync_dir(&self.dir.join(sub))?;
            }
            Ok(())
        })();
        write.map_err(|err| Error::io("finish task in", &self.dir, err))?;
        if e.place == Place::Processing {
            idx.processing -= 1;
            if let Some(s) = e.sender_id() {
                release(&mut idx.inflight, s);
            }
        }
        idx.receipts += 1;
        idx.finished.insert(id_hash(message_id));
        // From now on its receipt answers for it (`receipt_digest`).
        idx.entries.remove(message_id);
        Ok(())
    }

    /// Puts an interrupted task back at its original place in the queue.
    pub fn requeue(&self, message_id: &str) -> Result<()> {
        let mut idx = self.idx();
        let (e, sub) = match idx.entries.get(message_id) {
            Some(e) if e.place == Place::Interrupted => (e.clone(), "interrupted"),
            // A rejected task goes back only if its data could be read.
            Some(e) if e.place == Place::Rejected && e.digest.is_some() => (e.clone(), "rejected"),
            _ => {
                return Err(Error::Usage(format!(
                    "no interrupted or rejected task {message_id}"
                )));
            }
        };
        let from = self.path(sub, &e.file);
        let to = self.path("inbox", &e.file);
        fs::rename(&from, &to).map_err(|err| Error::io("requeue", &from, err))?;
        // It waits afresh: `--ttl` counts from now, across restarts too.
        let now = SystemTime::now();
        let _ = OpenOptions::new()
            .write(true)
            .custom_flags(sys::O_NOFOLLOW)
            .open(&to)
            .and_then(|f| f.set_modified(now));
        if self.fsync {
            self.sync(&[sub, "inbox"])?;
        }
        idx.inbox.insert(e.key, message_id.to_string());
        if let Some(s) = e.sender_id() {
            *idx.inflight.entry(s.to_owned()).or_default() += 1;
        }
        let entry = idx.entries.get_mut(message_id).expect("indexed");
        entry.place = Place::Inbox;
        entry.queued_at = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(())
    }

    /// Whether a task was set aside for the operator: `interrupted/`, or
    /// `rejected/` with data that can be read back.
    pub fn is_set_aside(&self, message_id: &str) -> bool {
        let idx = self.idx();
        idx.entries.get(message_id).is_some_and(|e| {
            e.place == Place::Interrupted || (e.place == Place::Rejected && e.digest.is_some())
        })
    }

    /// Moves tasks queued for `ttl` seconds or more (since they were
    /// accepted or requeued) to `rejected/`; returns their ids. Their ids
    /// stay known, so a retry is not run either.
    pub fn expire(&self, ttl: u64) -> Vec<String> {
        let mut idx = self.idx();
        let cutoff = now_secs().saturating_sub(ttl);
        let old: Vec<((u8, u64), String)> = idx
            .inbox
            .iter()
            .filter(|(_, id)| idx.entries[*id].queued_at <= cutoff)
            .map(|(k, id)| (*k, id.clone()))
            .collect();
        let mut out = Vec::new();
        for (key, id) in old {
            let file = idx.entries[&id].file.clone();
            let from = self.path("inbox", &file);
            if fs::rename(&from, self.path("rejected", &file)).is_err() {
                continue;
            }
            idx.inbox.remove(&key);
            let e = idx.entries.get_mut(&id).expect("indexed");
            e.place = Place::Rejected;
            if let Some(s) = e.sender_id().map(String::from) {
                release(&mut idx.inflight, &s);
            }
            out.push(id);
        }
        if !out.is_empty() && self.fsync {
            let _ = self.sync(&["inbox", "rejected"]);
        }
        out
    }

    /// When the task queued longest entered the queue (epoch seconds).
    pub fn oldest_queued(&self) -> Option<u64> {
        let idx = self.idx();
        idx.inbox.values().map(|id| idx.entries[id].queued_at).min()
    }

    /// Whether a task is currently in `processing/`.
    pub fn is_processing(&self, message_id: &str) -> bool {
        let idx = self.idx();
        idx.entries
            .get(message_id)
            .is_some_and(|e| e.place == Place::Processing)
    }

    pub fn counts(&self) -> Counts {
        let idx = self.idx();
        Counts {
            queued: idx.inbox.len(),
            processing: idx.processing,
            interrupted: idx
                .entries
                .values()
                .filter(|e| e.place == Place::Interrupted)
                .count(),
        }
    }

    /// Queued tasks in claim order, then processing, interrupted and
    /// rejected ones.
    pub fn list(&self) -> Listing {
        let idx = self.idx();
        let queued = idx
            .inbox
            .values()
            .map(|id| idx.entries[id].summary.clone())
            .collect();
        let by = |place| {
            let mut v: Vec<&Entry> = idx.entries.values().filter(|e| e.place == place).collect();
            v.sort_by_key(|e| e.key.1);
            v.into_iter().map(|e| e.summary.clone()).collect::<Vec<_>>()
        };
        Listing {
            queued,
            processing: by(Place::Processing),
            interrupted: by(Place::Interrupted),
            rejected: by(Place::Rejected),
        }
    }

    /// Removes an ephemeral spool directory; persistent spools are kept.
    pub fn remove_if_ephemeral(&self) {
        if self.ephemeral {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn release(inflight: &mut HashMap<String, usize>, sender: &str) {
    if let Some(n) = inflight.get_mut(sender) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            inflight.remove(sender);
        }
    }
}

/// Names of the regular files in a spool subdirectory, sorted.
fn list(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))? {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        if let Ok(name) = entry.file_name().into_string() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Builds a task from an accepted request.
#[allow(clippy::too_many_arguments)]
pub fn new_task(
    message_id: &str,
    body: impl Into<String>,
    sender: Sender,
    hop: u64,
    in_reply_to: Option<String>,
    mode: &str,
    peer_pid: Option<u32>,
    wire: &str,
) -> Task {
    let body = body.into();
    Task {
        message_id: message_id.to_string(),
        digest: sha256_hex(body.as_bytes()),
        body,
        sender,
        hop,
        in_reply_to,
        mode: mode.to_string(),
        accepted_at: now_secs(),
        peer_pid,
        wire: wire.to_string(),
        seq: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "baton-spool-test-{}-{tag}-{}",
            std::process::id(),
            now_secs()
        ));
        let _ = fs::remove_dir_all(&p);
        p
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
        assert_eq!(r.unwrap(), Admission::Accepted { queue_position: 1 });
        let Claim::Task(got) = s.claim().unwrap() else {
            panic!("no task")
        };
        assert_eq!(*got, Task { seq: got.seq, ..t });
        drop(s);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_names_are_the_zero_padded_sequence_then_the_id() {
        for seq in [0, 7, 1234567, 10u64.pow(16) - 1, 10u64.pow(16), u64::MAX] {
            assert_eq!(
                file_name(seq, "a.b-c"),
                format!("{seq:0width$}-a.b-c.json", width = SEQ_WIDTH)
            );
        }
        assert_eq!(parse_file_name(&file_name(42, "x")), Some((42, "x")));
    }

    #[test]
    fn accept_claim_finish_and_duplicates() {
        let dir = tmpdir("acf");
        let s = Spool::open(&dir, false, false).unwrap();
        let never = || false;
        assert_eq!(
            s.admit(task("x-1", "a"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Accepted { queue_position: 1 }
        );
        assert_eq!(
            s.admit(task("1", "b"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Accepted { queue_position: 2 }
        );
        assert_eq!(
            s.admit(task("x-1", "a"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Duplicate
        );
        assert_eq!(
            s.admit(task("x-1", "z"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Reused
        );
        assert_eq!(
            s.admit(task("p", "a"), None, LIMITS, || true, |_, _| {})
                .unwrap(),
            Admission::Paused
        );
        s.admit(task("3", "c"), None, LIMITS, never, |_, _| {})
            .unwrap();
        assert_eq!(
            s.admit(task("4", "d"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Full { limit: 3 }
        );
        let Claim::Task(t) = s.claim().unwrap() else {
            panic!()
        };
        assert_eq!(t.message_id, "x-1");
        s.finish("x-1", "done").unwrap();
        assert_eq!(
            s.admit(task("x-1", "a"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Duplicate
        );
        drop(s);
        let s = Spool::open(&dir, false, false).unwrap();
        assert_eq!(
            s.admit(task("x-1", "a"), None, LIMITS, never, |_, _| {})
                .unwrap(),
            Admission::Duplicate
        );
        let Claim::Task(t) = s.claim().unwrap() else {
            panic!()
        };
        assert_eq!(t.message_id, "1");
        drop(s);
        // "1" was mid-turn when the spool closed: it is interrupted now.
        let s = Spool::open(&dir, false, false).unwrap();
        assert_eq!(s.counts().interrupted, 1);
        let Claim::Task(t) = s.claim().unwrap() else {
            panic!()
        };
        assert_eq!(t.message_id, "3");
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
        s.admit(task("good", "a"), None, LIMITS, || false, |_, _| {})
            .unwrap();
        drop(s);
        let bad = dir.join("inbox").join(file_name(0, "bad"));
        fs::write(&bad, b"{oops").unwrap();
        let s = Spool::open(&dir, false, false).unwrap();
        assert_eq!(s.recovery_notes.len(), 1, "{:?}", s.recovery_notes);
        assert!(dir.join("rejected").join(file_name(0, "bad")).exists());
        let Claim::Task(t) = s.claim().unwrap() else {
            panic!()
        };
        assert_eq!(t.message_id, "good");
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

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
        s.admit(task("later", "b"), None, LIMITS, || false, |_, _| {})
            .unwrap();
        // An acceptance with an earlier sequence number, between its
        // reservation and its answer.
        s.idx().pending.insert("earlier".into(), (1, 0));
        std::thread::scope(|sc| {
            let claim = sc.spawn(|| s.claim());
            std::thread::sleep(Duration::from_millis(100));
            assert!(!claim.is_finished(), "the claim overtook a pending task");
            // Its store failed: the reservation goes, the claim goes on.
            drop(Reservation {
                spool: &s,
                id: "earlier".into(),
                seq: 0,
                give_back: false,
                sender: None,
                settled: false,
            });
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
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiter.is_finished());
            drop(Reservation {
                spool: &s,
                id: "p".into(),
                seq: 0,
                give_back: false,
                sender: None,
                settled: false,
            });
            waiter.join().unwrap();
        });
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }
}
