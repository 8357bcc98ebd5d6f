//! A task is acknowledged only once its file is whole in `inbox/` and,
//! with fsync on, that directory is synced: the crash-safe, rename-based
//! queue of one instance (docs/protocol.md §8).
//!
//! Files move `tmp/ → inbox/ → processing/ → (receipt in done/)`. One mutex
//! guards the in-memory index (ids, digests, order, per-sender counts),
//! which is rebuilt from the directories at open. An acceptance takes it
//! twice: to check and reserve (id, sequence number, queue slot), and, once
//! the file is durable, to index and announce the task. The writing and
//! syncing in between run outside it, so concurrent acceptances write in
//! parallel and share directory syncs (`DirSync`).
//!
//! This file holds the public types and opening; the rooms: `admit`
//! (acceptance), `claim` (claim, finish, requeue, expire), `index` (the
//! in-memory index and what reads it), `recover` (rebuilding it at open),
//! `taskfile` (the files' names and contents), `dirsync` (shared directory
//! syncs), `meta` (`meta.json`), `forget` (removing a stopped agent's
//! spool) and `gc` (removing a spool that holds nothing worth keeping).

pub mod events;

mod admit;
mod claim;
mod dirsync;
mod forget;
pub mod gc;
mod handler;
mod index;
mod meta;
mod receipts;
mod recover;
mod taskfile;

pub use forget::{Holdings, Removal, forget};
pub use meta::Meta;
pub use taskfile::Body;

use crate::base::digest::sha256_hex;
use crate::base::error::{Error, Result};
use crate::base::failpoint;
use crate::base::files::{self, DirError};
use crate::sys;
use crate::wire::Outcome;
use crate::wire::TaskMode;
use dirsync::{DirSync, sync_dir, sync_parent_dir};
use index::Index;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::Read;
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

pub use receipts::{
    LOG_BYTES, LOG_RECEIPTS, RECEIPTS_KEEP, RECEIPTS_MAX_AGE, read_receipt, read_recent,
};

pub use crate::wire::{HandlerExit, ReplyRecord, Sender, Summary, Task};

/// The receipt kept in `done/` after a task finished (`receipts`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Receipt {
    pub message_id: String,
    pub digest: String,
    pub outcome: Outcome,
    /// When it was accepted, epoch seconds (receipts before issue 46
    /// hold none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<u64>,
    /// Epoch seconds, with a fraction (receipts before issue 19 hold an
    /// integer, which reads the same).
    pub finished_at: f64,
    /// The reply text the task finished with, if any.
    #[serde(default)]
    pub reply: Option<ReplyRecord>,
    /// The verified sender's instance id, if it had one: `task/status`
    /// answers a verified asker about its own tasks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_instance_id: Option<String>,
    /// It came through a bridge: `task/status` answers a bridge about
    /// such tasks only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
    /// The label of the bridge's key it came through (`baton bridge
    /// --key`); receipts before issue 44 hold none, which reads as no
    /// label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// How a failed or timed-out turn's handler ended: `exit_status`,
    /// `signal`, `stderr_tail`, each absent when unknown (receipts before
    /// issue 31, and every other ending, hold none).
    #[serde(flatten)]
    pub handler: HandlerExit,
}

/// How a task came in, as a bridge's `task/status` and `task/cancel`
/// match it: a bridge reaches only `Bridge` of its own key's label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Through {
    /// Not through a bridge: a local sender.
    Local,
    /// Through a bridge whose key had this label (`None`: no `--key`).
    Bridge(Option<String>),
}

impl Through {
    /// How the task of `sender` came in.
    pub fn of(sender: &Sender) -> Through {
        match sender.remote {
            Some(_) => Through::Bridge(sender.key.clone()),
            None => Through::Local,
        }
    }
}

impl Receipt {
    /// How its task came in.
    pub fn through(&self) -> Through {
        match self.remote {
            true => Through::Bridge(self.key.clone()),
            false => Through::Local,
        }
    }
}

/// Where a task is, as `task/status` tells it from the spool alone.
#[derive(Clone, Debug)]
pub enum Whereabouts {
    /// In `inbox/`, at this position in the claim order (1 = next).
    Queued(usize),
    /// In `processing/`: a turn runs it, or a pull agent holds it.
    Processing,
    Interrupted,
    /// In `rejected/` after `--ttl`: its data reads back.
    Expired,
    /// In `rejected/` as bad data, with the reason when known.
    Rejected(Option<String>),
    /// Finished: its receipt (`None` when it cannot be read back), boxed:
    /// the largest variant by far.
    Finished(Option<Box<Receipt>>),
    /// Never accepted here, or its receipt was pruned.
    Unknown,
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

/// An open, locked spool.
pub struct Spool {
    dir: PathBuf,
    fsync: bool,
    ephemeral: bool,
    index: Mutex<Index>,
    /// Signalled whenever a reservation settles (`Index::pending`).
    settled: Condvar,
    dir_sync: DirSync,
    /// `tmp/`, `inbox/` and `processing/` held open: an acceptance and a
    /// claim find their names without walking the spool's path.
    at: Dirs,
    /// Held for the spool's whole life; the flock goes with it.
    _lock: File,
    /// Problems found while opening (bad files moved to `rejected/`).
    pub recovery_notes: Vec<String>,
    /// The ids of the tasks this open found mid-turn and set aside in
    /// `interrupted/`, and of those it set aside in `rejected/` as bad
    /// data: their outcome is decided now (`task.ended`).
    pub ended_at_open: Vec<(String, Outcome)>,
}

/// The spool's busiest directories, held open (`Spool::at`).
struct Dirs {
    tmp: files::Dir,
    inbox: files::Dir,
    processing: files::Dir,
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

/// `$XDG_STATE_HOME`, or `~/.local/state`: of the account `--user`
/// named, when it did, unless `XDG_STATE_HOME` names it.
pub fn state_home() -> Result<PathBuf> {
    let given = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty());
    if let (Some(who), None) = (crate::base::accounts::target(), &given) {
        return Ok(who.home.join(".local/state"));
    }
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

/// Now, in epoch seconds with a fraction.
pub fn now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// When the file at `path` (not followed if a symlink) was last
/// written, since the epoch.
pub fn modified_at(path: &Path) -> Option<Duration> {
    let t = fs::symlink_metadata(path).ok()?.modified().ok()?;
    t.duration_since(UNIX_EPOCH).ok()
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
        // Every caller has checked it (deliver.rs, the command line).
        mode: mode.parse().unwrap_or_default(),
        accepted_at: now_secs(),
        peer_pid,
        wire: wire.to_string(),
        seq: 0,
    }
}

/// What a stopped agent's spool holds, read from its directories as they
/// are: no lock, no recovery, nothing created, moved or written, so a
/// starting instance is never kept waiting and nothing is consumed. Each
/// file is read without waiting on what stands in its place
/// (`files::read_regular`); one that cannot be read back is listed by the
/// id in its name alone, and a name that is not a task file's is skipped.
pub fn read_listing(dir: &Path) -> Result<Listing> {
    check_private_dir(dir, "spool")?;
    let place = |sub: &str| -> Result<Vec<Summary>> {
        let d = dir.join(sub);
        if fs::symlink_metadata(&d).is_err() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for name in taskfile::list(&d)? {
            let Some((seq, id)) = taskfile::parse_file_name(&name) else {
                continue;
            };
            let task = taskfile::read_task(&d.join(&name), id);
            let key = match sub {
                "inbox" => index::order_key(task.as_ref().map_or(TaskMode::Queue, |t| t.mode), seq),
                _ => (0, seq),
            };
            found.push((key, index::summary_or_id(task, id)));
        }
        found.sort_by_key(|(k, _)| *k);
        Ok(found.into_iter().map(|(_, s)| s).collect())
    };
    Ok(Listing {
        queued: place("inbox")?,
        processing: place("processing")?,
        interrupted: place("interrupted")?,
        rejected: place("rejected")?,
    })
}

/// The tasks with these ids that wait in `inbox/`, read as `read_listing`
/// reads (no lock, nothing moved), for a front end that shows a queued
/// task's body. One that left the queue, or cannot be read back, is not
/// returned.
pub fn read_queued(dir: &Path, ids: &[&str]) -> Result<Vec<Task>> {
    check_private_dir(dir, "spool")?;
    let inbox = dir.join("inbox");
    let names = taskfile::list(&inbox)?;
    let queued = names
        .iter()
        .filter_map(|n| Some((n, taskfile::parse_file_name(n)?.1)));
    let wanted = queued.filter(|(_, id)| ids.contains(id));
    Ok(wanted
        .filter_map(|(n, id)| taskfile::read_task(&inbox.join(n), id))
        .collect())
}

/// Checks that an existing directory is ours alone and not a symlink.
pub fn check_private_dir(path: &Path, what: &str) -> Result<()> {
    private_dir(path, false, what)
}

/// `files::private_dir`, its refusal worded for the spool: `what` names
/// the directory.
fn private_dir(path: &Path, create: bool, what: &str) -> Result<()> {
    files::private_dir(path, create).map_err(|e| match e {
        DirError::Create(e) => Error::io("create directory", path, e),
        DirError::Inspect(e) => Error::io("inspect", path, e),
        DirError::Unsafe(reason) => Error::Env(format!("{what} {}: {reason}", path.display())),
    })
}

/// Opens a spool's lock file (`lock`, created 0600 if missing), never
/// following a link nor waiting on what stands in its place.
pub fn open_lock(dir: &Path) -> Result<File> {
    let lock_path = dir.join("lock");
    files::open_or_create(&lock_path).map_err(|e| Error::io("open lock file", &lock_path, e))
}

/// Takes the spool's lock without waiting (`open_lock`): `None` when an
/// instance or a sender holds it.
fn try_lock(dir: &Path) -> Result<Option<File>> {
    let lock = open_lock(dir)?;
    let taken =
        sys::try_lock_exclusive(&lock).map_err(|e| Error::io("lock", &dir.join("lock"), e))?;
    Ok(taken.then_some(lock))
}

/// Removes `dir`, `meta.json` first: from then on it is no spool to a
/// sender or to `list --offline`. The caller holds its lock. A missing
/// `meta.json` is an error when `strict`.
fn remove_locked(dir: &Path, strict: bool) -> Result<()> {
    let meta = dir.join("meta.json");
    match fs::remove_file(&meta) {
        Err(e) if strict || e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove", &meta, e));
        }
        _ => {}
    }
    fs::remove_dir_all(dir).map_err(|e| Error::io("remove", dir, e))
}

/// Opens and takes the spool's lock file and writes our pid in it (with
/// a note when that fails). Offline, `None` when it is held; else a
/// holder is waited for up to `LOCK_WAIT`, and one that stays is an error
/// that names its pid.
fn take_lock(dir: &Path, offline: bool) -> Result<Option<(File, Option<String>)>> {
    let lock_path = dir.join("lock");
    let mut lock = open_lock(dir)?;
    let kind = lock
        .metadata()
        .map_err(|e| Error::io("inspect", &lock_path, e))?
        .file_type();
    if !kind.is_file() {
        return Err(Error::Env(format!(
            "spool lock file {} is {}, not a regular file: move it away",
            lock_path.display(),
            files::kind_of(kind)
        )));
    }
    // An offline sender holds the lock only while it stores one task:
    // an instance that starts meanwhile waits for it, briefly.
    let deadline = Instant::now() + if offline { Duration::ZERO } else { LOCK_WAIT };
    while !sys::try_lock_exclusive(&lock).map_err(|e| Error::io("lock", &lock_path, e))? {
        if offline {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            let mut holder = String::new();
            // It holds a pid; a longer file is not ours to read whole.
            let _ = (&lock).take(64).read_to_string(&mut holder);
            let holder = Some(holder.trim()).filter(|h| !h.is_empty());
            return Err(Error::Env(format!(
                "spool {} is in use by pid {}: another instance with the same name and workspace is running",
                dir.display(),
                holder.unwrap_or("?"),
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The pid only tells a second instance who holds the lock: a full
    // disk that refuses it does not keep the spool from being served.
    let pid = (|| {
        failpoint::hit("lock-write")?;
        let pid = format!("{}\n", std::process::id());
        files::replace_contents(&mut lock, &lock_path, pid.as_bytes())
    })();
    let note = pid.err().map(|e| {
        format!(
            "cannot write our pid in {} ({e}): a second instance will not be told who holds the spool",
            lock_path.display()
        )
    });
    Ok(Some((lock, note)))
}

/// Makes sure `dir` is there (when `create`) and takes its lock
/// (`take_lock`), as a lock still in place: a spool removed while we
/// waited for its lock (`forget`, `gc`, its last instance's stop) leaves
/// us holding the lock of a file no longer there. Then it is made afresh
/// (offline: `None`, there is no spool to store in any more).
fn lock_in_place(
    dir: &Path,
    create: bool,
    offline: bool,
) -> Result<Option<(File, Option<String>)>> {
    use std::os::unix::fs::MetadataExt;
    for _ in 0..3 {
        private_dir(dir, create, "spool")?;
        let Some((lock, note)) = take_lock(dir, offline)? else {
            return Ok(None);
        };
        let held = lock.metadata().ok().map(|m| (m.dev(), m.ino()));
        let there = fs::symlink_metadata(dir.join("lock")).ok();
        if there.is_some_and(|m| Some((m.dev(), m.ino())) == held) {
            return Ok(Some((lock, note)));
        }
        if offline {
            return Ok(None);
        }
    }
    Err(Error::Env(format!(
        "spool {} was removed three times while this instance waited for its lock: try again",
        dir.display()
    )))
}

/// The highest of `dir` and its ancestors that is missing, if any.
fn highest_missing(dir: &Path) -> Option<PathBuf> {
    let missing = |p: &&Path| !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_err();
    dir.ancestors()
        .take_while(missing)
        .last()
        .map(Path::to_path_buf)
}

/// Syncs what gained an entry when an open made directories: `dir`
/// when its own directories were `missing`, and, when `made` (the
/// highest directory made) is there, every parent from `dir`'s up to
/// `made`'s. Until then a power cut could take a new spool, and the
/// tasks it acknowledged, away whole (the crash-state explorer's
/// `a_new_spool_survives_a_power_cut_after_its_first_acceptance`).
fn sync_made(dir: &Path, missing: bool, made: Option<&Path>) -> Result<()> {
    if missing || made.is_some() {
        sync_dir(dir).map_err(|e| Error::io("sync directory", dir, e))?;
    }
    let Some(top) = made.and_then(Path::parent) else {
        return Ok(());
    };
    for parent in dir.ancestors().skip(1) {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        sync_parent_dir(parent).map_err(|e| Error::io("sync directory", parent, e))?;
        if parent == top || !parent.starts_with(top) {
            break;
        }
    }
    Ok(())
}

impl Spool {
    /// Opens (creating if needed) and locks a spool, then recovers it:
    /// `tmp/` swept, `processing/` moved to `interrupted/`, index rebuilt.
    pub fn open(dir: &Path, fsync: bool, ephemeral: bool) -> Result<Spool> {
        let spool = Spool::open_inner(dir, fsync, ephemeral, false)?;
        Ok(spool.expect("only an offline open passes a held lock by"))
    }

    /// Opens an existing spool for offline delivery: never creates one,
    /// and `None` when its lock is held (its instance is running, or
    /// another sender is storing right now).
    pub fn open_offline(dir: &Path, fsync: bool) -> Result<Option<Spool>> {
        if fs::symlink_metadata(dir.join("meta.json")).is_err() {
            return Err(Error::Env(format!("{} is not a spool", dir.display())));
        }
        Spool::open_inner(dir, fsync, false, true)
    }

    /// Offline: never created, and `None` when the lock is held.
    fn open_inner(
        dir: &Path,
        fsync: bool,
        ephemeral: bool,
        offline: bool,
    ) -> Result<Option<Spool>> {
        let create = !offline;
        // The highest directory this open makes: its entry, and those
        // below it, survive a power cut only once their parents are
        // synced.
        let made = create.then(|| highest_missing(dir)).flatten();
        if let Some(parent) = dir.parent().filter(|_| create) {
            files::create_dir_all(parent, 0o700)
                .map_err(|e| Error::io("create directory", parent, e))?;
        }
        let Some((lock, note)) = lock_in_place(dir, create, offline)? else {
            return Ok(None);
        };
        let missing = DIRS
            .iter()
            .any(|d| fs::symlink_metadata(dir.join(d)).is_err());
        for d in DIRS {
            private_dir(&dir.join(d), true, "spool directory")?;
        }
        if fsync {
            sync_made(dir, missing, made.as_deref())?;
        }
        let open = |sub: &str| {
            let p = dir.join(sub);
            files::Dir::open(&p).map_err(|e| Error::io("open directory", &p, e))
        };
        let at = Dirs {
            tmp: open("tmp")?,
            inbox: open("inbox")?,
            processing: open("processing")?,
        };
        let mut spool = Spool {
            dir: dir.to_path_buf(),
            fsync,
            ephemeral,
            index: Mutex::new(Index::new()),
            settled: Condvar::new(),
            dir_sync: DirSync::default(),
            at,
            _lock: lock,
            recovery_notes: Vec::new(),
            ended_at_open: Vec::new(),
        };
        spool.recover()?;
        spool.recovery_notes.extend(note);
        Ok(Some(spool))
    }

    /// The index; a panic elsewhere while it was held does not take the
    /// spool down with it (every update leaves the index consistent).
    fn idx(&self) -> MutexGuard<'_, Index> {
        crate::base::lock(&self.index)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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

    /// Moves `<sub>/<name>` into `rejected/`, set aside for the operator
    /// and never deleted: under its own name, or, when something is there
    /// already, `<name>.1`, `<name>.2`... Returns the name it has there.
    fn set_aside(&self, sub: &str, name: &str) -> Result<String> {
        self.set_aside_path(&self.path(sub, name), name)
    }

    /// `set_aside` for the file at `from`, named `name`.
    fn set_aside_path(&self, from: &Path, name: &str) -> Result<String> {
        let mut aside = name.to_string();
        let mut n = 0;
        while fs::symlink_metadata(self.path("rejected", &aside)).is_ok() {
            n += 1;
            aside = format!("{name}.{n}");
        }
        files::rename(from, &self.path("rejected", &aside))
            .map_err(|e| Error::io("move to rejected/", from, e))?;
        Ok(aside)
    }

    fn sync(&self, subs: &[&str]) -> Result<()> {
        for s in subs {
            let p = self.dir.join(s);
            sync_dir(&p).map_err(|e| Error::io("sync directory", &p, e))?;
        }
        Ok(())
    }

    /// Removes an ephemeral spool directory; persistent spools are kept.
    pub fn remove_if_ephemeral(&self) {
        if self.ephemeral {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests;
