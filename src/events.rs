//! The event stream of an instance (DESIGN §4, §6): every event gets a
//! sequence number, is appended to the JSONL transcript in the spool
//! (bounded by rotation), and is fanned out to live subscribers. The
//! foreground emits, and so do connection threads for what they decide
//! alone (a task accepted or refused); one lock orders them all.
//! Subscribers that fall behind are dropped, never waited for.

use crossbeam_channel as chan;
use serde::Serialize;
use serde_json::{Map, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The live transcript file in a spool.
pub const TRANSCRIPT: &str = "transcript.jsonl";
/// The one older generation kept by rotation.
pub const TRANSCRIPT_OLD: &str = "transcript.1.jsonl";
/// A transcript rotates when it grows past this size, so the two files
/// together stay under twice this.
pub const ROTATE_BYTES: u64 = 4 * 1024 * 1024;
/// Events a subscriber may have waiting before it is dropped.
pub const SUBSCRIBER_BACKLOG: usize = 4096;

/// One encoded line for subscribers (an `event` notification or a server
/// request), `\n` included, shared by every subscriber.
pub type Line = Arc<Vec<u8>>;

/// A live subscriber: a connection thread drains `rx`.
pub struct Subscription {
    pub id: u64,
    pub next_seq: u64,
    pub rx: chan::Receiver<Line>,
}

struct Subscriber {
    id: u64,
    tx: chan::Sender<Line>,
    controller: bool,
}

impl Subscriber {
    /// Queues a line; false when the subscriber is gone or has
    /// `SUBSCRIBER_BACKLOG` lines waiting already.
    fn offer(&self, line: &Line) -> bool {
        self.tx.len() < SUBSCRIBER_BACKLOG && self.tx.send(Arc::clone(line)).is_ok()
    }
}

/// Sequence numbers, the transcript and the subscribers, behind one lock
/// so that sequence numbers, transcript lines and what subscribers hear
/// are in the same order. Callers never hold another lock taken after
/// this one: the spool's index lock may be held while emitting (an
/// acceptance is emitted while its task is indexed), never the reverse.
pub struct Hub {
    inner: std::sync::Mutex<Inner>,
}

struct Inner {
    dir: PathBuf,
    file: Option<File>,
    size: u64,
    next_seq: u64,
    next_sub: u64,
    subs: Vec<Subscriber>,
    /// Lines numbered and not yet written (see `Hub::record`).
    pending: Vec<Vec<u8>>,
}

/// Seconds since the epoch, with milliseconds.
pub fn now() -> f64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

impl Hub {
    /// Opens the transcript in `dir`, continuing its sequence numbers.
    pub fn open(dir: &Path) -> Hub {
        Hub {
            inner: std::sync::Mutex::new(Inner::open(dir)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one event and sends it to every subscriber. Returns its
    /// sequence number. `fields` is an object; its own `seq`, `time` or
    /// `kind` would be dropped.
    pub fn emit(&self, kind: &str, fields: Value) -> u64 {
        let mut fields = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        for k in ["seq", "time", "kind"] {
            fields.remove(k);
        }
        let mut hub = self.lock();
        let seq = hub.number(kind, &fields);
        hub.flush();
        seq
    }

    /// Numbers and records an event now, but writes it to the transcript
    /// and to subscribers only at the next `flush` or `emit`: a connection
    /// thread records an acceptance under the spool's lock, answers its
    /// client, and then flushes. Every event is still written in `seq`
    /// order. `fields` serialize as a struct with none of the names `seq`,
    /// `time` and `kind`.
    pub fn record<T: Serialize>(&self, kind: &str, fields: &T) -> u64 {
        self.lock().number(kind, fields)
    }

    /// Writes the events recorded and not yet written.
    pub fn flush(&self) {
        self.lock().flush();
    }

    /// Adds a subscriber; it will receive every event from `next_seq` on.
    pub fn subscribe(&self, controller: bool) -> Subscription {
        let mut hub = self.lock();
        // What a subscriber is told precedes it is in the transcript.
        hub.flush();
        hub.subscribe(controller)
    }

    pub fn unsubscribe(&self, id: u64) {
        self.lock().subs.retain(|s| s.id != id);
    }

    /// Sends a prepared line (a server-to-client request) to controllers
    /// only, or to the one controller `only`. Returns how many received it.
    pub fn send_to_controllers(&self, line: &[u8], only: Option<u64>) -> usize {
        self.lock().send_to_controllers(line, only)
    }

    pub fn controllers(&self) -> usize {
        self.lock().subs.iter().filter(|s| s.controller).count()
    }
}

impl Inner {
    fn open(dir: &Path) -> Inner {
        let path = dir.join(TRANSCRIPT);
        let last = last_seq(&path).or_else(|| last_seq(&dir.join(TRANSCRIPT_OLD)));
        let file = open_append(&path);
        let size = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        if file.is_none() {
            eprintln!(
                "baton: cannot open {}: the transcript is off",
                path.display()
            );
        }
        Inner {
            dir: dir.to_path_buf(),
            file,
            size,
            next_seq: last.map_or(1, |s| s + 1),
            next_sub: 1,
            subs: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Gives an event its number and time and queues its line.
    fn number<T: Serialize>(&mut self, kind: &str, fields: &T) -> u64 {
        /// An event as recorded: its number, time and kind, then its fields.
        #[derive(Serialize)]
        struct Numbered<'a, T> {
            seq: u64,
            time: f64,
            kind: &'a str,
            #[serde(flatten)]
            fields: &'a T,
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let event = Numbered {
            seq,
            time: now(),
            kind,
            fields,
        };
        let mut line = serde_json::to_vec(&event).expect("an event serializes");
        line.push(b'\n');
        self.pending.push(line);
        seq
    }

    /// Appends the queued lines to the transcript and sends them to the
    /// subscribers, in order.
    fn flush(&mut self) {
        let mut lines = std::mem::take(&mut self.pending);
        for line in lines.drain(..) {
            self.append(&line);
            if !self.subs.is_empty() {
                let note = Arc::new(crate::wire::notification_with_params(
                    "event",
                    &line[..line.len() - 1],
                ));
                self.subs.retain(|s| s.offer(&note));
            }
        }
        self.pending = lines;
    }

    fn append(&mut self, line: &[u8]) {
        if self.size + line.len() as u64 > ROTATE_BYTES && self.size > 0 {
            let cur = self.dir.join(TRANSCRIPT);
            let _ = fs::rename(&cur, self.dir.join(TRANSCRIPT_OLD));
            self.file = open_append(&cur);
            self.size = 0;
        }
        if let Some(f) = &mut self.file {
            if f.write_all(line).is_ok() {
                self.size += line.len() as u64;
            } else {
                eprintln!("baton: writing the transcript failed: it is off from now on");
                self.file = None;
            }
        }
    }

    fn subscribe(&mut self, controller: bool) -> Subscription {
        // Unbounded with a length check rather than bounded: a bounded
        // channel allocates all its slots up front (64 KiB per
        // subscriber), an unbounded one grows with what is waiting.
        let (tx, rx) = chan::unbounded();
        let id = self.next_sub;
        self.next_sub += 1;
        self.subs.push(Subscriber { id, tx, controller });
        Subscription {
            id,
            next_seq: self.next_seq,
            rx,
        }
    }

    fn send_to_controllers(&mut self, line: &[u8], only: Option<u64>) -> usize {
        let line = Arc::new(line.to_vec());
        let mut n = 0;
        self.subs.retain(|s| {
            if !s.controller || only.is_some_and(|o| o != s.id) {
                return true;
            }
            let ok = s.offer(&line);
            n += ok as usize;
            ok
        });
        n
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.flush();
    }
}

fn open_append(path: &Path) -> Option<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(path)
        .ok()
}

/// The sequence number of the last complete line of a transcript file.
fn last_seq(path: &Path) -> Option<u64> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(64 * 1024);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.take(64 * 1024).read_to_end(&mut tail).ok()?;
    tail.split(|&b| b == b'\n')
        .rev()
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .find_map(|v| v.get("seq").and_then(Value::as_u64))
}

/// Calls `each` with every recorded event line whose sequence number is in
/// `since..until`, oldest first, from both transcript generations. Lines
/// that do not parse (a torn last line) are skipped.
pub fn replay(dir: &Path, since: u64, until: u64, mut each: impl FnMut(&[u8]) -> bool) {
    for name in [TRANSCRIPT_OLD, TRANSCRIPT] {
        let Ok(f) = File::open(dir.join(name)) else {
            continue;
        };
        for line in BufReader::new(f).split(b'\n') {
            let Ok(line) = line else {
                break;
            };
            let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let Some(seq) = v.get("seq").and_then(Value::as_u64) else {
                continue;
            };
            if seq >= until {
                return;
            }
            if seq >= since {
                let mut l = line;
                l.push(b'\n');
                if !each(&l) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sequence_continues_across_reopen_and_rotation_keeps_order() {
        let dir = std::env::temp_dir().join(format!("baton-events-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let hub = Hub::open(&dir);
        let sub = hub.subscribe(false);
        assert_eq!(sub.next_seq, 1);
        for i in 0..3 {
            hub.emit("notice", json!({"i": i}));
        }
        assert_eq!(sub.rx.len(), 3);
        drop(hub);
        let hub = Hub::open(&dir);
        assert_eq!(hub.emit("notice", json!({})), 4);
        // Force a rotation and check replay spans both files.
        hub.lock().size = ROTATE_BYTES;
        assert_eq!(hub.emit("notice", json!({})), 5);
        assert!(dir.join(TRANSCRIPT_OLD).exists());
        let mut seen = Vec::new();
        replay(&dir, 2, 5, |l| {
            let v: Value = serde_json::from_slice(l).unwrap();
            seen.push(v["seq"].as_u64().unwrap());
            true
        });
        assert_eq!(seen, [2, 3, 4]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_subscriber_is_dropped_not_waited_for() {
        let dir = std::env::temp_dir().join(format!("baton-events-full-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let hub = Hub::open(&dir);
        let _slow = hub.subscribe(true);
        for _ in 0..=SUBSCRIBER_BACKLOG {
            hub.emit("notice", json!({}));
        }
        assert_eq!(hub.controllers(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
