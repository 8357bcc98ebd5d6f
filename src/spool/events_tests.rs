//! The event hub's unit tests.
use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// The sequence numbers `replay` gives for `since..until`.
fn replayed(dir: &Path, since: u64, until: u64) -> Vec<u64> {
    let mut seen = Vec::new();
    replay(dir, since, until, |l| {
        let v: Value = serde_json::from_slice(l).unwrap();
        seen.push(v["seq"].as_u64().unwrap());
        true
    });
    seen
}

/// An empty directory of this test process's own.
fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baton-events-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn sequence_continues_across_reopen_and_rotation_keeps_order() {
    let dir = fresh_dir("seq");
    let hub = Hub::open(&dir);
    let sub = hub.subscribe(false);
    assert_eq!(sub.next_seq, 1);
    for i in 0..3 {
        hub.emit(Body::notice(&i.to_string()));
    }
    assert_eq!(sub.rx.len(), 3);
    drop(hub);
    let hub = Hub::open(&dir);
    assert_eq!(hub.emit(Body::notice("")), 4);
    // Force a rotation and check replay spans both files.
    lock(&hub.out).size = ROTATE_BYTES;
    assert_eq!(hub.emit(Body::notice("")), 5);
    assert!(dir.join(TRANSCRIPT_OLD).exists());
    assert_eq!(replayed(&dir, 2, 5), [2, 3, 4]);
    fs::remove_dir_all(&dir).unwrap();
}

/// A write that fails loses its event, not the transcript: the next
/// event tries again, and the first line written after the gap is a
/// notice numbered as the last event lost, saying how many were lost.
/// A torn piece of a failed write is cut away first.
#[test]
fn the_transcript_comes_back_after_failed_writes() {
    let dir = fresh_dir("gap");
    let hub = Hub::open(&dir);
    let sub = hub.subscribe(false);
    hub.emit(Body::notice("one"));
    let path = dir.join(TRANSCRIPT);
    {
        // A descriptor that cannot write, standing for a full disk,
        // and a torn piece of a line at the end of the file.
        let mut out = lock(&hub.out);
        out.file = Some(File::open(&path).unwrap());
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":2,\"ti").unwrap();
    }
    hub.emit(Body::notice("two"));
    hub.emit(Body::notice("three"));
    lock(&hub.out).file = None;
    hub.emit(Body::notice("four"));
    // Subscribers heard every event live.
    assert_eq!(sub.rx.len(), 4);
    let lines: Vec<Value> = fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 3, 4], "{lines:?}");
    assert_eq!(lines[1]["kind"], "notice");
    assert_eq!(lines[1]["lost"], 2);
    let text = lines[1]["text"].as_str().unwrap();
    assert!(
        text.starts_with("the transcript lost 2 events (seq 2 to 3, "),
        "{text}"
    );
    assert_eq!(lines[2]["text"], "four");
    // The next start numbers on from the notice.
    drop(hub);
    assert_eq!(Hub::open(&dir).emit(Body::notice("")), 5);
    fs::remove_dir_all(&dir).unwrap();
}

/// Threads numbering and flushing at once, and a subscriber joining
/// midway: the transcript holds every event once, in order, and what
/// the subscriber replays plus what it hears live is every event once.
#[test]
fn concurrent_flushes_write_in_order_and_a_late_subscriber_misses_nothing() {
    let dir = fresh_dir("race");
    let hub = Arc::new(Hub::open(&dir));
    let (threads, each) = (4, 500_usize);
    // Plays the foreground: takes over what bounded flushes hand on,
    // and subscribes midway, as the real one does, so a subscribe that
    // waited for a flush handed to its own thread would hang here.
    let (handed, hand) = chan::unbounded::<()>();
    let (subscribed, sub_rx) = chan::bounded(1);
    let foreground = {
        let (hub, dir) = (Arc::clone(&hub), dir.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            let sub = hub.subscribe(false);
            let replayed = replayed(&dir, 1, sub.next_seq);
            subscribed.send(()).unwrap();
            for () in hand {
                hub.flush();
            }
            (sub, replayed)
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (hub, handed) = (Arc::clone(&hub), handed.clone());
            std::thread::spawn(move || {
                for i in 0..each {
                    hub.record(&Body::notice(&format!("{t} {i}")));
                    match i % 3 {
                        0 => drop(hub.emit(Body::notice(&t.to_string()))),
                        1 => hub.flush(),
                        _ => hub.flush_once(|| handed.send(()).unwrap()),
                    }
                }
            })
        })
        .collect();
    drop(handed);
    sub_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("subscribe returned within 10 s");
    for w in workers {
        w.join().unwrap();
    }
    let (sub, replayed) = foreground.join().unwrap();
    // No flush here: every line must be written already.
    let total = (threads * (each + each.div_ceil(3))) as u64;
    let live: Vec<u64> = sub
        .rx
        .try_iter()
        .map(|l| {
            let v: Value = serde_json::from_slice(&l).unwrap();
            v["params"]["seq"].as_u64().unwrap()
        })
        .collect();
    let heard: Vec<u64> = replayed.into_iter().chain(live).collect();
    assert_eq!(heard, (1..=total).collect::<Vec<_>>());
    let text = fs::read_to_string(dir.join(TRANSCRIPT)).unwrap();
    let written: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(written, (1..=total).collect::<Vec<_>>());
    fs::remove_dir_all(&dir).unwrap();
}

/// The foreground both subscribes and takes over the flushes handed to
/// it: a subscribe waiting for a flush that ends by handing its rest on
/// must write that rest itself, not wait for its own thread.
#[test]
fn a_subscribe_takes_over_a_flush_handed_on_while_it_waits() {
    let dir = fresh_dir("hand");
    let hub = Arc::new(Hub::open(&dir));
    hub.record(&Body::notice("1"));
    // As if a bounded flush were running.
    lock(&hub.queue).flushing = Flushing::Active;
    let (tx, rx) = chan::bounded(1);
    let h = Arc::clone(&hub);
    std::thread::spawn(move || tx.send(h.subscribe(false).next_seq).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock(&hub.queue).waiting == 0 {
        assert!(Instant::now() < deadline, "subscribe never waited");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The flush ends with lines left, handing them on.
    {
        let mut q = lock(&hub.queue);
        q.flushing = Flushing::Handed;
        hub.written.notify_all();
    }
    let next = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("subscribe returned within 10 s");
    assert_eq!(next, 2);
    let text = fs::read_to_string(dir.join(TRANSCRIPT)).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    fs::remove_dir_all(&dir).unwrap();
}

/// A request to controllers, sent while another thread's flush is
/// still writing an earlier event, reaches them after that event.
#[test]
fn a_controller_request_follows_the_events_recorded_before_it() {
    let dir = fresh_dir("request");
    let hub = Arc::new(Hub::open(&dir));
    let ctl = hub.subscribe(true);
    hub.record(&Body::ApprovalRequested(&json!({"message_id": "m"})));
    // Another thread's flush has begun and not yet written the event.
    lock(&hub.queue).flushing = Flushing::Active;
    let flusher = {
        let hub = Arc::clone(&hub);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let q = lock(&hub.queue);
            hub.drain(q, usize::MAX);
        })
    };
    assert_eq!(hub.send_to_controllers(b"request\n", None), 1);
    flusher.join().unwrap();
    let first = ctl.rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("approval.requested"),
        "the request came first: {}",
        String::from_utf8_lossy(&first)
    );
    assert_eq!(ctl.rx.recv().unwrap().as_slice(), b"request\n");
    fs::remove_dir_all(&dir).unwrap();
}

/// Dropped for its lines, and what it had queued is freed at once:
/// its connection thread finds nothing more to write.
#[test]
fn a_full_subscriber_is_dropped_not_waited_for() {
    let dir = fresh_dir("full");
    let hub = Hub::open(&dir);
    let slow = hub.subscribe(true);
    for _ in 0..=SUBSCRIBER_BACKLOG {
        hub.emit(Body::notice(""));
    }
    assert_eq!(
        lock(&hub.out).subs.iter().filter(|s| s.controller).count(),
        0
    );
    assert!(slow.backlog.is_cut());
    assert_eq!(slow.rx.len(), 0, "the dropped subscriber's lines are kept");
    assert_eq!(slow.backlog.bytes.load(Ordering::SeqCst), 0);
    fs::remove_dir_all(&dir).unwrap();
}

/// Dropped for its bytes, long before its lines: 64 KiB events fill
/// `SUBSCRIBER_BYTES` in 64 lines; a line the connection has taken
/// still counts until it is written; one line longer than the bound
/// still reaches a subscriber with nothing waiting.
#[test]
fn a_subscriber_is_dropped_at_its_byte_bound() {
    let dir = fresh_dir("bytes");
    let hub = Hub::open(&dir);
    let slow = hub.subscribe(false);
    let ok = hub.subscribe(false);
    let big = "b".repeat(64 * 1024);
    let mut queued = 0;
    while !slow.backlog.is_cut() {
        assert!(queued < 200, "{queued} lines of 64 KiB queued");
        hub.emit(Body::notice(&big));
        queued += 1;
        // One subscriber keeps up, writing each line as it comes.
        let line = ok.rx.try_recv().unwrap();
        ok.backlog.done(&line);
    }
    assert!((60..=70).contains(&queued), "cut after {queued} lines");
    assert_eq!(slow.rx.len(), 0);
    assert!(!ok.backlog.is_cut());
    // A line taken but not yet written counts.
    hub.emit(Body::notice(&big));
    let taken = ok.rx.try_recv().unwrap();
    let huge = "h".repeat(SUBSCRIBER_BYTES + 1);
    hub.emit(Body::notice(&huge));
    assert!(
        ok.backlog.is_cut(),
        "a second line past the bound was queued"
    );
    ok.backlog.done(&taken);
    let alone = hub.subscribe(false);
    hub.emit(Body::notice(&huge));
    assert_eq!(alone.rx.len(), 1, "a long line for an idle subscriber");
    fs::remove_dir_all(&dir).unwrap();
}

/// `SUBSCRIBER_LINE` holds the longest request line an instance may be
/// configured to read, with room for what an event adds to it.
#[test]
fn a_subscribers_longest_line_holds_the_longest_request_line() {
    let max_bytes = |n: usize| {
        crate::base::config::Config::from_lookup(|name| {
            (name == "BATON_MAX_BYTES").then(|| n.to_string().into())
        })
        .map(|c| c.max_bytes)
    };
    let longest = SUBSCRIBER_LINE - 64 * 1024;
    assert_eq!(max_bytes(longest).unwrap(), longest);
    assert!(max_bytes(longest + 1).is_err());
}
