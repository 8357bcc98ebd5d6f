//! The event stream of an instance (docs/protocol.md §3, Events): every event gets a
//! sequence number, is appended to the JSONL transcript in the spool
//! (bounded by rotation), and is fanned out to live subscribers. The
//! foreground emits, and so do connection threads for what they decide
//! alone (a task accepted or refused); one lock orders them all.
//! Subscribers that fall behind are dropped, never waited for, and what
//! they had queued is freed when they are.

use crate::base::lock;
use crate::wire::{Body, EventKind};
use crossbeam_channel as chan;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// The live transcript file in a spool.
pub const TRANSCRIPT: &str = "transcript.jsonl";
/// The one older generation kept by rotation.
pub const TRANSCRIPT_OLD: &str = "transcript.1.jsonl";
/// A transcript rotates when it grows past this size, so the two files
/// together stay under twice this.
pub const ROTATE_BYTES: u64 = 4 * 1024 * 1024;
pub use crate::wire::{SUBSCRIBER_BACKLOG, SUBSCRIBER_LINE};
/// Bytes a subscriber may have waiting before it is dropped, counting the
/// line its connection is writing; a line longer than this is still
/// queued for a subscriber with nothing waiting.
pub const SUBSCRIBER_BYTES: usize = 4 * 1024 * 1024;

/// One encoded line for subscribers (an `event` notification or a server
/// request), `\n` included, shared by every subscriber.
pub type Line = Arc<Vec<u8>>;

/// A live subscriber: a connection thread drains `rx`, and tells
/// `backlog` of every line it is done with.
pub struct Subscription {
    pub id: u64,
    pub next_seq: u64,
    pub rx: chan::Receiver<Line>,
    pub backlog: Arc<Backlog>,
}

/// What one subscriber has waiting, shared by the hub, which queues its
/// lines, and the connection thread that writes them.
#[derive(Default)]
pub struct Backlog {
    /// Bytes queued and not yet written.
    bytes: AtomicUsize,
    /// Set once the subscriber is dropped (or its connection failed):
    /// nothing more is queued or written.
    cut: AtomicBool,
}

impl Backlog {
    /// A line taken from the queue was written (or given up on).
    pub fn done(&self, line: &[u8]) {
        self.bytes.fetch_sub(line.len(), Ordering::SeqCst);
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Stops the subscriber from the connection's side (a write failed).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

struct Subscriber {
    id: u64,
    tx: chan::Sender<Line>,
    /// The queue's own end, to empty it when the subscriber is dropped
    /// while its connection thread is still writing.
    rx: chan::Receiver<Line>,
    backlog: Arc<Backlog>,
    controller: bool,
    /// The first sequence number it hears live; earlier ones it replays.
    from: u64,
}

impl Subscriber {
    /// Queues a line; false when the subscriber is gone, cut off, or has
    /// `SUBSCRIBER_BACKLOG` lines or `SUBSCRIBER_BYTES` waiting already.
    fn offer(&self, line: &Line) -> bool {
        if self.backlog.is_cut() || self.tx.len() >= SUBSCRIBER_BACKLOG {
            return false;
        }
        let held = self.backlog.bytes.fetch_add(line.len(), Ordering::SeqCst);
        if (held > 0 && held + line.len() > SUBSCRIBER_BYTES)
            || self.tx.send(Arc::clone(line)).is_err()
        {
            self.backlog.done(line);
            return false;
        }
        true
    }
}

impl Drop for Subscriber {
    /// A subscriber that is dropped (it fell behind, or its connection
    /// ended) gets nothing more, and the lines it had waiting are freed at
    /// once rather than when its connection thread gets to them.
    fn drop(&mut self) {
        self.backlog.cut();
        for line in self.rx.try_iter() {
            self.backlog.done(&line);
        }
    }
}

/// Sequence numbers, the transcript and the subscribers. An event is
/// numbered and its line queued under a short lock (`Queue`), which may be
/// taken while the spool's index lock is held (an acceptance is numbered
/// while its task is indexed), never the reverse. The lines are written to
/// the transcript and fanned out by one flusher at a time, outside that
/// lock, in `seq` order: a caller that finds a flush running leaves its
/// lines to it, so no thread waits for another's transcript write and
/// nobody holds the index lock across one.
pub struct Hub {
    queue: Mutex<Queue>,
    /// Signalled after a flush writes, when someone waits (`subscribe`).
    written: Condvar,
    out: Mutex<Out>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flushing {
    Idle,
    /// A flush is running; it writes whatever is pending when it looks.
    Active,
    /// A bounded flush left lines behind and asked for a `flush`, which
    /// takes over; until then the lines wait.
    Handed,
}

struct Queue {
    next_seq: u64,
    /// Numbered lines not yet written, with their sequence numbers.
    pending: Vec<(u64, Vec<u8>)>,
    flushing: Flushing,
    /// Every line up to this sequence number is written.
    written: u64,
    /// Callers waiting on `Hub::written`.
    waiting: usize,
}

/// The transcript and the subscribers: touched by the flusher, and by the
/// few calls that change the subscribers.
struct Out {
    dir: PathBuf,
    file: Option<File>,
    size: u64,
    /// Events that could not be written since the last line that was.
    gap: Option<Gap>,
    next_sub: u64,
    subs: Vec<Subscriber>,
}

/// A run of events the transcript lost: while it lasts, each event tries
/// the write again, and the first line written after it is a `notice`
/// that says what was lost (docs/protocol.md §3, Events).
struct Gap {
    lost: u64,
    /// The numbers of the first and of the last event lost.
    first_seq: u64,
    last_seq: u64,
    /// The time of the first and of the last event lost.
    from: f64,
    until: f64,
    /// Why the last write failed.
    why: String,
    /// A failed write may have left part of a line: the file is cut back
    /// to `size` before the next one.
    torn: bool,
}

impl Gap {
    fn new(now: f64) -> Gap {
        Gap {
            lost: 0,
            first_seq: 0,
            last_seq: 0,
            from: now,
            until: now,
            why: String::new(),
            torn: false,
        }
    }
}

/// The line that stands for a gap: a `notice` numbered as the last event
/// lost, with how many were lost, and when.
fn gap_notice(gap: &Gap) -> Vec<u8> {
    #[derive(Serialize)]
    struct Lost<'a> {
        seq: u64,
        time: f64,
        kind: EventKind,
        text: &'a str,
        lost: u64,
        lost_from: f64,
        lost_until: f64,
    }
    let hms = |t: f64| match crate::sys::local_time(t as i64) {
        Some(c) => format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second),
        None => format!("{t:.0}"),
    };
    let text = format!(
        "the transcript lost {} events (seq {} to {}, {} to {}): writing it failed: {}",
        gap.lost,
        gap.first_seq,
        gap.last_seq,
        hms(gap.from),
        hms(gap.until),
        gap.why
    );
    let notice = Lost {
        seq: gap.last_seq,
        time: now(),
        kind: EventKind::Notice,
        text: &text,
        lost: gap.lost,
        lost_from: gap.from,
        lost_until: gap.until,
    };
    let mut line = serde_json::to_vec(&notice).expect("a notice serializes");
    line.push(b'\n');
    line
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
        let path = dir.join(TRANSCRIPT);
        let last = last_seq(&path).or_else(|| last_seq(&dir.join(TRANSCRIPT_OLD)));
        let file = open_append(&path);
        let size = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        if file.is_none() {
            eprintln!(
                "baton: cannot open {}: events are not recorded until it can be",
                path.display()
            );
        }
        let next_seq = last.map_or(1, |s| s + 1);
        Hub {
            queue: Mutex::new(Queue {
                next_seq,
                pending: Vec::new(),
                flushing: Flushing::Idle,
                written: next_seq - 1,
                waiting: 0,
            }),
            written: Condvar::new(),
            out: Mutex::new(Out {
                dir: dir.to_path_buf(),
                file,
                size,
                gap: None,
                next_sub: 1,
                subs: Vec::new(),
            }),
        }
    }

    /// Records one event and sends it to every subscriber. Returns its
    /// sequence number.
    pub fn emit(&self, body: Body<'_>) -> u64 {
        let seq = self.record(&body);
        self.flush();
        seq
    }

    /// Numbers and queues an event, to be written to the transcript and to
    /// subscribers by the next `flush` (or `emit`) of anyone: a connection
    /// thread records an acceptance under the spool's lock, answers its
    /// client, and then flushes.
    pub fn record(&self, body: &Body<'_>) -> u64 {
        /// An event as recorded: its number, time and kind, then its body.
        #[derive(Serialize)]
        struct Numbered<'a, 'b> {
            seq: u64,
            time: f64,
            kind: EventKind,
            #[serde(flatten)]
            body: &'a Body<'b>,
        }
        let mut q = lock(&self.queue);
        let seq = q.next_seq;
        q.next_seq += 1;
        let event = Numbered {
            seq,
            time: now(),
            kind: body.kind(),
            body,
        };
        let mut line = Vec::with_capacity(512);
        serde_json::to_writer(&mut line, &event).expect("an event serializes");
        line.push(b'\n');
        q.pending.push((seq, line));
        seq
    }

    /// Sees that every queued event gets written: writes them, or leaves
    /// them to the flush that is running, which looks again before it ends.
    pub fn flush(&self) {
        let q = lock(&self.queue);
        if q.flushing == Flushing::Active || (q.flushing == Flushing::Idle && q.pending.is_empty())
        {
            return;
        }
        self.drain(q, usize::MAX);
    }

    /// A connection thread's flush: one batch at most, so that under load
    /// one sender is not kept writing everybody's lines. If more came
    /// meanwhile, `hand_over` must see that someone calls `flush` soon (the
    /// foreground), which writes them.
    pub fn flush_once(&self, hand_over: impl FnOnce()) {
        let q = lock(&self.queue);
        if q.flushing != Flushing::Idle || q.pending.is_empty() {
            return;
        }
        if !self.drain(q, 1) {
            hand_over();
        }
    }

    /// Writes batches of pending lines until none is left (true) or
    /// `batches` are written; then the flush is `Handed` on (false).
    fn drain<'a>(&'a self, mut q: MutexGuard<'a, Queue>, batches: usize) -> bool {
        q.flushing = Flushing::Active;
        let mut lines = Vec::new();
        for _ in 0..batches {
            if q.pending.is_empty() {
                break;
            }
            std::mem::swap(&mut lines, &mut q.pending);
            drop(q);
            let last = lines.last().map(|(seq, _)| *seq);
            lock(&self.out).write(lines.drain(..));
            q = lock(&self.queue);
            q.written = last.unwrap_or(q.written);
            if q.waiting > 0 {
                self.written.notify_all();
            }
        }
        let done = q.pending.is_empty();
        q.flushing = if done {
            Flushing::Idle
        } else {
            Flushing::Handed
        };
        done
    }

    /// Adds a subscriber; it will receive every event from `next_seq` on,
    /// and every earlier one is in the transcript when this returns.
    pub fn subscribe(&self, controller: bool) -> Subscription {
        // Registered while nothing can be numbered, so it hears live every
        // line from `next_seq` on: a batch being written holds only
        // earlier ones. (The flusher never takes `queue` while it holds
        // `out`, so this order of the two locks is safe.)
        let sub = {
            let q = lock(&self.queue);
            lock(&self.out).subscribe(controller, q.next_seq)
        };
        self.written_before(sub.next_seq);
        sub
    }

    /// Returns once every line numbered before `next_seq` is written.
    fn written_before(&self, next_seq: u64) {
        let mut q = lock(&self.queue);
        while q.written + 1 < next_seq {
            if q.flushing == Flushing::Active {
                // Woken after each batch the flusher writes.
                q.waiting += 1;
                q = self.written.wait(q).unwrap_or_else(|e| e.into_inner());
                q.waiting -= 1;
            } else {
                // Nobody writes (or a bounded flush handed its rest on,
                // perhaps to this very thread): write them here.
                self.drain(q, usize::MAX);
                q = lock(&self.queue);
            }
        }
    }

    pub fn unsubscribe(&self, id: u64) {
        lock(&self.out).subs.retain(|s| s.id != id);
    }

    /// Sends a prepared line (a server-to-client request) to controllers
    /// only, or to the one controller `only`. Returns how many received it.
    /// It follows every event recorded before it (a controller hears of
    /// `approval.requested` before the request), even while another
    /// thread's flush is writing that event.
    pub fn send_to_controllers(&self, line: &[u8], only: Option<u64>) -> usize {
        let next_seq = lock(&self.queue).next_seq;
        self.written_before(next_seq);
        let line = Arc::new(line.to_vec());
        let mut n = 0;
        lock(&self.out).subs.retain(|s| {
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

impl Drop for Hub {
    fn drop(&mut self) {
        // Nobody else can be flushing now.
        let q = lock(&self.queue);
        self.drain(q, usize::MAX);
        // A gap still open is noted on the way out, if it can be: the
        // next start numbers on from its last event.
        let mut out = lock(&self.out);
        if out.gap.is_some() && out.try_append(&[]).is_ok() {
            out.gap = None;
        }
    }
}

impl Out {
    /// Appends lines to the transcript and sends them to the subscribers
    /// that hear them live, in order.
    fn write(&mut self, lines: impl Iterator<Item = (u64, Vec<u8>)>) {
        for (seq, line) in lines {
            self.append(seq, &line);
            if self.subs.iter().any(|s| s.from <= seq) {
                let note = Arc::new(crate::wire::notification_with_params(
                    "event",
                    &line[..line.len() - 1],
                ));
                self.subs.retain(|s| s.from > seq || s.offer(&note));
            }
        }
    }

    /// Appends one line. A line that cannot be written is counted in the
    /// gap, and the next one tries again, after a line about the gap.
    fn append(&mut self, seq: u64, line: &[u8]) {
        if self.size + line.len() as u64 > ROTATE_BYTES && self.size > 0 {
            let cur = self.dir.join(TRANSCRIPT);
            let _ = fs::rename(&cur, self.dir.join(TRANSCRIPT_OLD));
            self.file = None;
            self.size = 0;
            if let Some(gap) = &mut self.gap {
                // A torn piece went with the old generation.
                gap.torn = false;
            }
        }
        match self.try_append(line) {
            Ok(()) => {
                if let Some(gap) = self.gap.take() {
                    eprintln!(
                        "baton: the transcript is written again; {} events were lost",
                        gap.lost
                    );
                }
            }
            Err(e) => {
                let now = now();
                let gap = self.gap.get_or_insert_with(|| Gap::new(now));
                if gap.lost == 0 {
                    eprintln!(
                        "baton: writing the transcript failed ({e}): events are not recorded until it can be written again"
                    );
                    gap.from = now;
                    gap.first_seq = seq;
                }
                gap.lost += 1;
                gap.last_seq = seq;
                gap.until = now;
                gap.why = e.to_string();
            }
        }
    }

    /// Writes the line, preceded by the gap's notice if there is a gap.
    /// The notice takes the number of the last event lost, which no other
    /// line has, so the transcript's numbers still only grow.
    fn try_append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            let path = self.dir.join(TRANSCRIPT);
            let f =
                open_append(&path).ok_or_else(|| std::io::Error::other("it cannot be opened"))?;
            if !self.gap.as_ref().is_some_and(|g| g.torn) {
                self.size = f.metadata()?.len();
            }
            self.file = Some(f);
        }
        let f = self.file.as_mut().expect("opened");
        // Only after a gap is the line copied, behind the gap's notice.
        let mut after_gap = Vec::new();
        if let Some(gap) = &mut self.gap {
            if gap.torn {
                f.set_len(self.size)?;
                gap.torn = false;
            }
            after_gap = gap_notice(gap);
            after_gap.extend_from_slice(line);
        }
        let bytes = if self.gap.is_some() {
            &after_gap[..]
        } else {
            line
        };
        let written =
            crate::base::failpoint::hit("transcript-write").and_then(|()| f.write_all(bytes));
        if let Err(e) = written {
            // Part of it may be in the file: cut back before the next try.
            self.gap.get_or_insert_with(|| Gap::new(now())).torn = true;
            return Err(e);
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn subscribe(&mut self, controller: bool, from: u64) -> Subscription {
        // Unbounded with a length check rather than bounded: a bounded
        // channel allocates all its slots up front (64 KiB per
        // subscriber), an unbounded one grows with what is waiting.
        let (tx, rx) = chan::unbounded();
        let id = self.next_sub;
        self.next_sub += 1;
        let backlog = Arc::new(Backlog::default());
        self.subs.push(Subscriber {
            id,
            tx,
            rx: rx.clone(),
            backlog: Arc::clone(&backlog),
            controller,
            from,
        });
        Subscription {
            id,
            next_seq: from,
            rx,
            backlog,
        }
    }
}

/// The transcript for appending: a regular file or nothing (a FIFO or
/// anything else planted in its place is never waited on, and the
/// transcript is off).
fn open_append(path: &Path) -> Option<File> {
    crate::base::files::open_regular(
        path,
        OpenOptions::new().create(true).append(true).mode(0o600),
    )
    .ok()
}

/// The sequence number of the last complete line of a transcript file.
fn last_seq(path: &Path) -> Option<u64> {
    last_line(path, |l| l.seq?.as_u64())
}

/// The members of a transcript line the spool reads back, each as it
/// came (one of another type is read as if absent where it is used).
#[derive(Deserialize)]
pub(super) struct Recorded {
    seq: Option<Value>,
    time: Option<Value>,
    stored: Option<Value>,
    pub(super) kind: Option<Value>,
}

/// What `pick` finds in the last complete line where it finds anything,
/// among the last 64 KiB of a transcript file.
fn last_line<T>(path: &Path, pick: impl Fn(Recorded) -> Option<T>) -> Option<T> {
    let mut f = crate::base::files::open_regular(path, OpenOptions::new().read(true)).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(64 * 1024);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.take(64 * 1024).read_to_end(&mut tail).ok()?;
    tail.split(|&b| b == b'\n')
        .rev()
        .filter_map(|l| serde_json::from_slice::<Recorded>(l).ok())
        .find_map(pick)
}

/// The time of the last event the instance itself recorded in the
/// transcript of the spool `dir` (either generation; what other commands
/// wrote while it was stopped, marked `stored`, does not count: a task a
/// sender stored, a task `baton cancel` withdrew): when a
/// stopped agent was last heard of. None when the last 64 KiB hold none.
pub fn last_time(dir: &Path) -> Option<f64> {
    let own = |l: Recorded| match l.stored {
        Some(Value::Bool(true)) => None,
        _ => l.time?.as_f64(),
    };
    [TRANSCRIPT, TRANSCRIPT_OLD]
        .iter()
        .find_map(|name| last_line(&dir.join(name), own))
}

/// Calls `each` with every recorded event line whose sequence number is in
/// `since..until`, oldest first, from both transcript generations. Lines
/// that do not parse (a torn last line) are skipped.
pub fn replay(dir: &Path, since: u64, until: u64, mut each: impl FnMut(&[u8]) -> bool) {
    for name in [TRANSCRIPT_OLD, TRANSCRIPT] {
        let Ok(f) =
            crate::base::files::open_regular(&dir.join(name), OpenOptions::new().read(true))
        else {
            continue;
        };
        for line in BufReader::new(f).split(b'\n') {
            let Ok(line) = line else {
                break;
            };
            let recorded = serde_json::from_slice::<Recorded>(&line);
            let Some(seq) = recorded.ok().and_then(|r| r.seq?.as_u64()) else {
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
#[path = "events_tests.rs"]
mod tests;
