//! Receipts: what each finished task left, kept in bounded disk. A receipt
//! is one JSON line appended to a log, `done/receipts-N.jsonl`, and made
//! durable (`fdatasync`) before the task's file goes. A log takes up to
//! `LOG_RECEIPTS` lines or `LOG_BYTES`, then the next number starts; every
//! process starts a log of its own, so a log a crash cut short is never
//! appended to. Logs are pruned whole, oldest first: one goes once the
//! newer ones hold `RECEIPTS_KEEP` receipts, or once its newest receipt is
//! older than `RECEIPTS_MAX_AGE`. Receipts of earlier versions, one file
//! `done/<id>.json` each, are read and pruned as logs of one receipt.
//!
//! The index keeps a 64-bit hash of each kept id with where its receipt
//! is, never the receipt: memory is bounded by the number kept.

use super::taskfile::{MAX_TASK_FILE, list, receipt_name};
use super::{Receipt, Spool};
use crate::base::error::{Error, Result};
use crate::base::files;
use std::collections::{HashMap, VecDeque};
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Receipts a log takes before the next one starts.
pub const LOG_RECEIPTS: usize = 1_000;
/// Bytes after which a log takes no more (a receipt keeps its reply).
pub const LOG_BYTES: u64 = 1024 * 1024;
/// Receipts kept at least (fewer only past the age bound): a resend of an
/// id among them is a duplicate, never a second run.
pub const RECEIPTS_KEEP: usize = 5_000;
/// A log whose newest receipt is older than this goes.
pub const RECEIPTS_MAX_AGE: u64 = 7 * 24 * 3600;

/// Where a kept receipt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Where {
    /// `done/<id>.json`, from an earlier version.
    Loose,
    /// In log `n`, at this byte offset.
    Log { n: u64, offset: u64 },
}

/// A log, or a loose receipt: what pruning removes at once.
struct Group {
    /// Its file in `done/`.
    file: String,
    /// The hashes of the ids it holds.
    ids: Vec<u64>,
    /// When its newest receipt was written (epoch seconds).
    newest: u64,
}

/// The log being appended to.
struct Current {
    n: u64,
    bytes: u64,
}

/// The receipts the spool keeps, as the index knows them.
#[derive(Default)]
pub(super) struct Receipts {
    at: HashMap<u64, Where>,
    /// Oldest first; the current log, if any, is last.
    groups: VecDeque<Group>,
    current: Option<Current>,
    next_log: u64,
}

pub(super) fn log_name(n: u64) -> String {
    format!("receipts-{n:010}.jsonl")
}

fn parse_log_name(name: &str) -> Option<u64> {
    let n = name.strip_prefix("receipts-")?.strip_suffix(".jsonl")?;
    (n.len() == 10).then(|| n.parse().ok())?
}

/// The key of an id among the receipts.
fn id_hash(id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

impl Receipts {
    /// Where the receipt of `id` is, if one is kept.
    pub(super) fn find(&self, id: &str) -> Option<Where> {
        self.at.get(&id_hash(id)).copied()
    }

    /// How many receipts are kept.
    pub(super) fn count(&self) -> usize {
        self.groups.iter().map(|g| g.ids.len()).sum()
    }

    /// Appends `receipt` to the current log (starting one if need be) and,
    /// with `fsync`, makes it durable. A failed append cuts the log back
    /// and ends it: the next receipt starts a new one, after no torn line.
    /// The log is opened for each append and closed after it: finishing a
    /// task never holds more than one descriptor at a time, so one that
    /// comes back after a shortage is enough.
    pub(super) fn append(
        &mut self,
        dir: &Path,
        fsync: bool,
        receipt: &Receipt,
    ) -> std::io::Result<()> {
        let done = dir.join("done");
        if self.current.is_none() {
            let n = self.next_log.max(1);
            let name = log_name(n);
            drop(files::create_new(&done.join(&name), true)?);
            self.next_log = n + 1;
            if fsync {
                super::dirsync::sync_dir(&done)?;
            }
            self.current = Some(Current { n, bytes: 0 });
            self.groups.push_back(Group {
                file: name,
                ids: Vec::new(),
                newest: 0,
            });
        }
        let cur = self.current.as_mut().expect("a current log");
        let path = done.join(log_name(cur.n));
        let mut line = serde_json::to_vec(receipt).expect("a receipt serializes");
        line.push(b'\n');
        let mut file = match files::open_regular(&path, OpenOptions::new().append(true)) {
            Ok(f) => f,
            Err(e) => {
                self.current = None;
                return Err(e);
            }
        };
        let written = crate::base::failpoint::hit("receipt-append")
            .and_then(|()| files::write_all(&mut file, &path, &line))
            .and_then(|()| {
                if fsync {
                    files::sync_file(&file, &path)
                } else {
                    Ok(())
                }
            });
        if let Err(e) = written {
            let _ = files::truncate(&file, &path, cur.bytes);
            self.current = None;
            return Err(e);
        }
        drop(file);
        let hash = id_hash(&receipt.message_id);
        let w = Where::Log {
            n: cur.n,
            offset: cur.bytes,
        };
        cur.bytes += line.len() as u64;
        let full = cur.bytes >= LOG_BYTES;
        let group = self.groups.back_mut().expect("the current log's group");
        group.ids.push(hash);
        group.newest = super::now_secs();
        let full = full || group.ids.len() >= LOG_RECEIPTS;
        self.at.insert(hash, w);
        if full {
            self.current = None;
            self.prune(dir, super::now_secs());
        }
        Ok(())
    }

    /// Removes the oldest logs past the bounds (never the current one).
    /// A log that cannot be removed now stays, and so do the newer ones.
    pub(super) fn prune(&mut self, dir: &Path, now: u64) {
        let mut kept = self.count();
        while self.groups.len() > usize::from(self.current.is_some()) {
            let oldest = &self.groups[0];
            let old = oldest.newest < now.saturating_sub(RECEIPTS_MAX_AGE);
            if !old && kept - oldest.ids.len() < RECEIPTS_KEEP {
                break;
            }
            match files::remove_file(&dir.join("done").join(&oldest.file)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => break,
                _ => {}
            }
            let gone = self.groups.pop_front().expect("a group");
            kept -= gone.ids.len();
            let name = gone.file;
            for h in gone.ids {
                // A later receipt of a colliding id keeps its place.
                let mine = match self.at.get(&h) {
                    Some(Where::Log { n, .. }) => log_name(*n) == name,
                    Some(Where::Loose) => !name.starts_with("receipts-"),
                    None => false,
                };
                if mine {
                    self.at.remove(&h);
                }
            }
        }
    }

    /// Reads every receipt kept in `done/`, without pruning. Unreadable
    /// entries are noted; a log's torn last line (a crash mid-append,
    /// before its task was finished) is skipped without a word.
    pub(super) fn load(dir: &Path, notes: &mut Vec<String>) -> Result<Receipts> {
        let done = dir.join("done");
        let mut loose = Vec::new();
        let mut logs = Vec::new();
        let mut r = Receipts::default();
        let names = list(&done)?;
        for name in &names {
            if let Some(n) = parse_log_name(name) {
                r.next_log = r.next_log.max(n + 1);
                if let Some(g) = load_log(&done, name, n, &mut r.at, notes)? {
                    logs.push((n, g));
                }
            }
        }
        // Read after the logs: a file named for an id is what answers for it.
        for name in names {
            let Some(id) = name
                .strip_suffix(".json")
                .filter(|id| crate::wire::valid_text_id(id))
            else {
                continue;
            };
            let hash = id_hash(id);
            r.at.insert(hash, Where::Loose);
            // A receipt that is not a regular file stays: its id is kept
            // (a resend is refused as unreadable, never run again), which
            // moving it away would forget.
            let receipt: Option<Receipt> = match super::taskfile::read_checked(&done.join(&name))? {
                Ok(b) => serde_json::from_slice(&b).ok(),
                Err(why) => {
                    notes.push(format!(
                        "done/{name} cannot be read ({why}): a resend of its id is refused as unreadable"
                    ));
                    None
                }
            };
            // One that cannot be read holds its id's place: no age
            // prunes it.
            let newest = receipt.map_or(u64::MAX, |r| r.finished_at as u64);
            loose.push(Group {
                file: name,
                ids: vec![hash],
                newest,
            });
        }
        loose.sort_by_key(|g| g.newest);
        logs.sort_by_key(|(n, _)| *n);
        r.groups = loose
            .into_iter()
            .chain(logs.into_iter().map(|(_, g)| g))
            .collect();
        Ok(r)
    }
}

/// Reads one log into `at`: its group, or `None` when it cannot be read
/// (noted; a shortage is an error, which fails the open).
fn load_log(
    done: &Path,
    name: &str,
    n: u64,
    at: &mut HashMap<u64, Where>,
    notes: &mut Vec<String>,
) -> Result<Option<Group>> {
    let path = done.join(name);
    let file = match files::open_regular(&path, OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(e) if crate::sys::shortage(&e).is_some() => return Err(Error::io("read", &path, e)),
        Err(e) => {
            notes.push(format!(
                "done/{name} cannot be read ({e}): its receipts are not kept"
            ));
            return Ok(None);
        }
    };
    let mut reader = BufReader::new(file);
    let mut group = Group {
        file: name.to_string(),
        ids: Vec::new(),
        newest: 0,
    };
    let (mut offset, mut bad) = (0u64, 0usize);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_TASK_FILE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io("read", &path, e))?;
        if read == 0 {
            break;
        }
        let whole = line.last() == Some(&b'\n');
        match serde_json::from_slice::<Receipt>(&line) {
            Ok(r) if whole && crate::wire::valid_text_id(&r.message_id) => {
                let hash = id_hash(&r.message_id);
                at.insert(hash, Where::Log { n, offset });
                group.ids.push(hash);
                group.newest = group.newest.max(r.finished_at as u64);
            }
            // A torn last line: the append never finished.
            _ if !whole => break,
            _ => bad += 1,
        }
        offset += read as u64;
    }
    if bad > 0 {
        notes.push(format!(
            "done/{name}: {bad} lines cannot be read as receipts; skipped"
        ));
        if group.ids.is_empty() {
            // Its age is unknown: it is not removed for it.
            group.newest = u64::MAX;
        }
    }
    Ok(Some(group))
}

/// The bytes of each log in `dir`'s `done/`, newest first, read without
/// a lock as they are reached; one that cannot be read is passed over.
fn logs_newest_first(dir: &Path) -> impl Iterator<Item = Vec<u8>> {
    let done = dir.join("done");
    let mut logs: Vec<String> = list(&done).unwrap_or_default();
    logs.retain(|name| parse_log_name(name).is_some());
    (logs.into_iter().rev()).filter_map(move |name| {
        files::read_regular(&done.join(name), LOG_BYTES + MAX_TASK_FILE).ok()
    })
}

/// The newest `n` receipts in the logs of `dir`'s `done/`, oldest first
/// (`baton inbox list --all`), read without a lock: a log cut short or
/// pruned meanwhile gives fewer. Receipts of earlier versions (one file
/// each) are not among them.
pub fn read_recent(dir: &Path, n: usize) -> Vec<Receipt> {
    let mut got: Vec<Receipt> = Vec::new();
    let mut logs = logs_newest_first(dir);
    while got.len() < n {
        let Some(bytes) = logs.next() else {
            break;
        };
        let lines = bytes.split(|b| *b == b'\n').rev();
        got.extend(lines.filter_map(|l| serde_json::from_slice::<Receipt>(l).ok()));
    }
    got.truncate(n);
    got.reverse();
    got
}

/// The receipt of `message_id` in the logs of `dir`'s `done/`, newest
/// log first, read without a lock: how a waiter learns the end of a task
/// whose receiver is no longer running (`follow::wait`).
pub fn read_receipt(dir: &Path, message_id: &str) -> Option<Receipt> {
    let quoted = serde_json::to_string(message_id).ok()?;
    logs_newest_first(dir).find_map(|bytes| {
        let mut lines = bytes.split(|b| *b == b'\n').rev();
        lines.find_map(|l| {
            // Only a line that names the id is parsed.
            let names = l.windows(quoted.len()).any(|w| w == quoted.as_bytes());
            let r = names.then(|| serde_json::from_slice::<Receipt>(l).ok())??;
            (r.message_id == message_id).then_some(r)
        })
    })
}

/// How many receipts `done/` holds (for `forget`), read without a lock.
pub fn count_in(dir: &Path) -> usize {
    let Ok(names) = list(&dir.join("done")) else {
        return 0;
    };
    names
        .iter()
        .map(|name| {
            if parse_log_name(name).is_none() {
                return usize::from(name.ends_with(".json"));
            }
            let f =
                files::open_regular(&dir.join("done").join(name), OpenOptions::new().read(true));
            f.map_or(0, |f| {
                BufReader::new(f).split(b'\n').map_while(|l| l.ok()).count()
            })
        })
        .sum()
}

impl Spool {
    /// `id`'s receipt where `w` says it is, its file or its line of a log:
    /// `None` when that is not a receipt of `id`; not found when it was
    /// pruned meanwhile.
    pub(super) fn receipt_at(&self, id: &str, w: Where) -> std::io::Result<Option<Receipt>> {
        let bytes = match w {
            Where::Loose => super::taskfile::read_bounded(&self.path("done", &receipt_name(id)))?,
            Where::Log { n, offset } => {
                let path = self.path("done", &log_name(n));
                let mut f = files::open_regular(&path, OpenOptions::new().read(true))?;
                f.seek(SeekFrom::Start(offset))?;
                let mut line = Vec::new();
                BufReader::new(f)
                    .take(MAX_TASK_FILE + 1)
                    .read_until(b'\n', &mut line)?;
                line
            }
        };
        let receipt = serde_json::from_slice::<Receipt>(&bytes).ok();
        Ok(receipt.filter(|r| r.message_id == id))
    }
}
