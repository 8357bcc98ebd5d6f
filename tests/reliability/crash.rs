//! The crash loop: senders keep handing sequence-numbered tasks to a
//! receiver that is killed with SIGKILL at a random moment and restarted,
//! and after every kill the spool is checked against what was
//! acknowledged (docs/protocol.md §8: never lost, at most once, in order). And a
//! handler does not outlive its killed instance: an interrupted task did
//! not finish.

use crate::util::reliability::{
    body_for, env, logging_handler, percentile, read_spool, runs, seeded_rng, spool, spool_dir,
};
use crate::util::{RawClient, Serve, published, wait_for, wait_until};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const SENDERS: usize = 4;
/// The receiver is killed this long, at most, after it was started.
const KILL_WINDOW_MS: u64 = 60;
const NAME: &str = "crashloop";

/// Where the senders should deliver, and the rendezvous after each kill.
struct Coord {
    state: Mutex<CoordState>,
    cv: Condvar,
}

struct CoordState {
    /// Changes at every start and kill.
    generation: u64,
    target: Option<(PathBuf, String)>,
    /// Senders waiting, for the generation in which the target went away.
    parked: usize,
    stop: bool,
    failure: Option<String>,
}

fn task_id(sender: usize, k: u64) -> String {
    format!("s{sender}-{k:06}")
}

/// `s<sender>-<k>` back to its parts.
fn parse_id(id: &str) -> (usize, u64) {
    let (s, k) = id[1..].split_once('-').unwrap();
    (s.parse().unwrap(), k.parse().unwrap())
}

/// Statistics a sender keeps.
#[derive(Default)]
struct Counts {
    accepted: AtomicU64,
    duplicate: AtomicU64,
    full: AtomicU64,
    lost_answers: AtomicU64,
}

/// One sender: task k+1 only after task k was acknowledged (accepted or
/// duplicate); a task without an answer is retried with the same id.
fn sender(s: usize, coord: Arc<Coord>, acked: Arc<Vec<AtomicU64>>, counts: Arc<Counts>) {
    let mut k = 0u64;
    let mut parked_in = u64::MAX;
    loop {
        let (socket, id, generation) = {
            let mut st = coord.state.lock().unwrap();
            loop {
                if st.stop {
                    return;
                }
                if let Some((sock, id)) = &st.target {
                    break (sock.clone(), id.clone(), st.generation);
                }
                if parked_in != st.generation {
                    parked_in = st.generation;
                    st.parked += 1;
                    coord.cv.notify_all();
                }
                st = coord
                    .cv
                    .wait_timeout(st, Duration::from_millis(100))
                    .unwrap()
                    .0;
            }
        };
        let mut session = || -> std::io::Result<()> {
            let mut c = RawClient::connect_timeout(&socket, Duration::from_secs(10))?;
            c.try_initialize()?;
            loop {
                if coord.state.lock().unwrap().generation != generation {
                    return Ok(());
                }
                let mid = task_id(s, k);
                let body = body_for(&mid);
                let p = json!({"message_id": mid, "target_instance_id": id, "body": body, "sender": {}});
                // No answer (the receiver died): retried. A JSON-RPC error
                // from a live receiver is a failure of the test.
                let r = match c.try_call("message/send", p) {
                    Ok(r) => r,
                    Err(e) => {
                        counts.lost_answers.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    }
                };
                match r["result"]["status"].as_str() {
                    Some("accepted") => {
                        counts.accepted.fetch_add(1, Ordering::Relaxed);
                        k += 1;
                        acked[s].store(k, Ordering::SeqCst);
                    }
                    Some("duplicate") => {
                        counts.duplicate.fetch_add(1, Ordering::Relaxed);
                        k += 1;
                        acked[s].store(k, Ordering::SeqCst);
                    }
                    Some("full") => {
                        counts.full.fetch_add(1, Ordering::Relaxed);
                        thread::sleep(Duration::from_millis(2));
                    }
                    _ => {
                        let mut st = coord.state.lock().unwrap();
                        st.failure
                            .get_or_insert(format!("sender {s}: task {mid} answered {r}"));
                        st.stop = true;
                        coord.cv.notify_all();
                        return Ok(());
                    }
                }
            }
        };
        if session().is_err() {
            // The receiver is gone (or going): wait for the next one
            // without spinning on a dead socket.
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// What a check of a dead receiver's spool leaves for its next start.
struct Leftovers {
    /// Names in `tmp/`, which the next start must sweep.
    tmp: Vec<String>,
    /// Payloads of tasks whose receipt is already in `done/`: a kill cut
    /// their finish short (receipt first, then the payload goes). The next
    /// start must remove them, not set them aside again.
    cut_short: Vec<PathBuf>,
}

/// Checks the spool of a dead (or cleanly stopped, with `strict`)
/// receiver against what the senders know.
fn check(dir: &Path, log: &Path, acked: &[u64], cycle: usize, strict: bool) -> Leftovers {
    let view = read_spool(dir)
        .unwrap_or_else(|bad| panic!("cycle {cycle}: bad files in the spool:\n{}", bad.join("\n")));
    assert!(
        view.rejected.is_empty(),
        "cycle {cycle}: files were rejected: {:?}",
        view.rejected
    );
    // Where every id is.
    let mut places: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for i in &view.items {
        assert_eq!(
            i.body,
            body_for(&i.id),
            "cycle {cycle}: {}/{} holds another body",
            i.place,
            i.id
        );
        places.entry(i.id.clone()).or_default().push(i.place);
    }
    for (id, r) in &view.done {
        assert_eq!(
            r["digest"],
            baton::base::digest::sha256_hex(body_for(id).as_bytes()),
            "cycle {cycle}: the receipt of {id} names another digest"
        );
        assert_eq!(r["outcome"], "done", "cycle {cycle}: receipt {r}");
        places.entry(id.clone()).or_default().push("done");
    }
    let mut cut_short = Vec::new();
    for (id, p) in &places {
        let (s, k) = parse_id(id);
        let finishing = matches!(p.as_slice(), ["processing" | "interrupted", "done"]);
        if finishing && !strict {
            let i = view.items.iter().find(|i| i.id == *id).unwrap();
            cut_short.push(dir.join(i.place).join(format!("{:016}-{id}.json", i.seq)));
        } else {
            assert!(
                p.len() == 1,
                "cycle {cycle}: task {id} is in more than one place: {p:?}"
            );
        }
        assert!(
            k <= acked[s],
            "cycle {cycle}: task {id} is in the spool but was never sent (sender {s} has {} acknowledged)",
            acked[s]
        );
    }
    // Runs: at most once each, and every receipt is of a task that ran.
    let ran = runs(log);
    let mut seen = BTreeSet::new();
    for id in &ran {
        assert!(seen.insert(id.clone()), "cycle {cycle}: {id} ran twice");
    }
    // A finished task's receipt may have been pruned (issue 32), once at
    // least RECEIPTS_KEEP newer ones are kept; it ran.
    let pruning = view.done.len() >= baton::spool::RECEIPTS_KEEP;
    for (s, &n) in acked.iter().enumerate() {
        for k in 0..n {
            let id = task_id(s, k);
            assert!(
                places.contains_key(&id) || (pruning && seen.contains(&id)),
                "cycle {cycle}: acknowledged task {id} is missing from the spool"
            );
        }
    }
    for id in view.done.keys() {
        assert!(
            seen.contains(id),
            "cycle {cycle}: {id} has a receipt but never ran"
        );
    }
    // FIFO per sender: inbox files in acceptance (sequence) order carry
    // increasing task numbers; everything that was taken out of the inbox
    // (ran, processing, interrupted, done) comes before everything still
    // in it; and runs happened in order. A task interrupted by a kill may
    // have its handler finish after the restart, so interrupted tasks are
    // left out of the order of runs.
    let mut inbox = view.in_place("inbox");
    inbox.sort_by_key(|i| i.seq);
    let out_of_inbox: BTreeSet<&str> = view
        .items
        .iter()
        .filter(|i| i.place != "inbox")
        .map(|i| i.id.as_str())
        .collect();
    for s in 0..acked.len() {
        let mine: Vec<u64> = inbox
            .iter()
            .map(|i| parse_id(&i.id))
            .filter(|(x, _)| *x == s)
            .map(|(_, k)| k)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "cycle {cycle}: sender {s}'s tasks are out of order in inbox/: {mine:?}"
        );
        let first_queued = mine.first().copied().unwrap_or(u64::MAX);
        let taken = ran
            .iter()
            .map(String::as_str)
            .chain(out_of_inbox.iter().copied())
            .chain(view.done.keys().map(String::as_str))
            .map(parse_id)
            .filter(|(x, _)| *x == s)
            .map(|(_, k)| k);
        for k in taken {
            assert!(
                k < first_queued,
                "cycle {cycle}: sender {s}'s task {k} left the inbox before its task {first_queued}"
            );
        }
        let order: Vec<u64> = ran
            .iter()
            .filter(|id| !out_of_inbox.contains(id.as_str()))
            .map(|id| parse_id(id))
            .filter(|(x, _)| *x == s)
            .map(|(_, k)| k)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "cycle {cycle}: sender {s}'s tasks ran out of order: {order:?}"
        );
    }
    Leftovers {
        tmp: view.tmp,
        cut_short,
    }
}

/// Runs `cycles` start–send–kill cycles, then a clean start that drains
/// the inbox, and checks everything after every kill and at the end. A
/// cycle starts when the receiver is spawned, and the kill falls uniformly
/// 0–60 ms after that: about a third land during start-up (recovery of the
/// last kill included), the rest while tasks are accepted, run and
/// finished.
pub fn crash_loop(test: &str, cycles: usize) {
    let mut rng = seeded_rng(test);
    let env = env();
    let ws = env.workspace("ws");
    let log = env.root.join("runs.log");
    let handler = logging_handler(&log);
    let dir = spool_dir(&env, NAME, &ws);
    let args = ["--name", NAME, "--exec", handler.as_str()];
    let vars = [("BATON_MAX_QUEUE", "100000")];

    let coord = Arc::new(Coord {
        state: Mutex::new(CoordState {
            generation: 0,
            target: None,
            parked: 0,
            stop: false,
            failure: None,
        }),
        cv: Condvar::new(),
    });
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..SENDERS).map(|_| AtomicU64::new(0)).collect());
    let counts = Arc::new(Counts::default());
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (c, a, n) = (Arc::clone(&coord), Arc::clone(&acked), Arc::clone(&counts));
            thread::spawn(move || sender(s, c, a, n))
        })
        .collect();
    // Stops the senders however the test ends.
    struct StopOnDrop(Arc<Coord>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            st.stop = true;
            self.0.cv.notify_all();
        }
    }
    let _stop = StopOnDrop(Arc::clone(&coord));

    let started = Instant::now();
    let mut unswept: BTreeSet<String> = BTreeSet::new();
    let mut cut_short: Vec<PathBuf> = Vec::new();
    let mut cut_short_seen = 0;
    let mut startup: Vec<Duration> = Vec::new();
    let mut killed_before_ready = 0;
    let mut swept_checks = 0;
    for cycle in 0..cycles {
        let mut inst = env.spawn_serve(
            &ws,
            Serve {
                vars: &vars,
                args: &args,
                nofile: None,
            },
        );
        let t0 = Instant::now();
        let kill_at = t0 + Duration::from_millis(rng.upto(KILL_WINDOW_MS));
        let mut ready = false;
        while Instant::now() < kill_at {
            let manifest = if ready {
                None
            } else {
                published(&env.registry, inst.pid())
            };
            if let Some(manifest) = manifest {
                ready = true;
                startup.push(t0.elapsed());
                // Recovery ran before the manifest was published: what an
                // earlier kill left in tmp/ is gone. (`sequence`, a lease,
                // and `handler.json`, the running handler's record, are
                // written through tmp/ again at any time.)
                let now: BTreeSet<String> = read_spool(&dir)
                    .map(|v| v.tmp.into_iter().collect())
                    .unwrap_or_default();
                let left: Vec<_> = unswept.intersection(&now).collect();
                assert!(
                    left.is_empty(),
                    "cycle {cycle}: tmp/ not swept at restart: {left:?}"
                );
                unswept.clear();
                swept_checks += 1;
                for p in cut_short.drain(..) {
                    assert!(
                        !p.exists(),
                        "cycle {cycle}: {} has a receipt in done/ but was kept at restart",
                        p.display()
                    );
                }
                let mut st = coord.state.lock().unwrap();
                st.generation += 1;
                st.target = Some((manifest.socket, manifest.id));
                coord.cv.notify_all();
            }
            if !inst.is_running() {
                panic!("cycle {cycle}: the receiver exited:\n{}", inst.stderr());
            }
            thread::sleep(Duration::from_micros(500));
        }
        if !ready {
            killed_before_ready += 1;
        }
        inst.kill9();
        // Every sender has noticed and stopped before the spool is read.
        {
            let mut st = coord.state.lock().unwrap();
            st.generation += 1;
            st.target = None;
            st.parked = 0;
            coord.cv.notify_all();
        }
        wait_until(
            &format!("cycle {cycle}: the senders to stop after the kill"),
            Duration::from_secs(20),
            || {
                let st = coord.state.lock().unwrap();
                st.parked >= SENDERS || st.stop
            },
        );
        if let Some(f) = &coord.state.lock().unwrap().failure {
            panic!("cycle {cycle}: {f}");
        }
        let now: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        let left = check(&dir, &log, &now, cycle, false);
        unswept.extend(
            left.tmp
                .into_iter()
                .filter(|n| n != "sequence" && n != "handler.json"),
        );
        cut_short_seen += left.cut_short.len();
        cut_short.extend(left.cut_short);
    }

    // A last, clean run: the inbox drains in order, then SIGTERM.
    {
        let mut st = coord.state.lock().unwrap();
        st.stop = true;
        coord.cv.notify_all();
    }
    for t in threads {
        t.join().expect("a sender panicked");
    }
    let final_acked: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    let mut inst = env.serve_with(&ws, &vars, &args);
    let swept = read_spool(&dir).map(|v| v.tmp).unwrap_or_default();
    let left: Vec<_> = swept.iter().filter(|n| unswept.contains(*n)).collect();
    assert!(
        left.is_empty(),
        "tmp/ not swept at the last start: {left:?}"
    );
    let mut c = inst.client();
    wait_until("the inbox to drain", Duration::from_secs(60), || {
        c.try_queue().unwrap() == (0, 0)
    });
    drop(c);
    assert_eq!(inst.term(), 0, "{}", inst.stderr());
    let view = spool(&dir);
    assert!(
        view.tmp.is_empty(),
        "tmp/ not empty after a clean stop: {:?}",
        view.tmp
    );
    assert!(view.in_place("inbox").is_empty() && view.in_place("processing").is_empty());
    check(&dir, &log, &final_acked, cycles, true);

    let total: u64 = final_acked.iter().sum();
    if !startup.is_empty() {
        eprintln!(
            "{test}: start to manifest: p50 {:.1} ms, p90 {:.1} ms",
            percentile(&startup, 0.5),
            percentile(&startup, 0.9)
        );
    }
    let interrupted = view.in_place("interrupted").len();
    eprintln!(
        "{test}: {cycles} cycles in {:.1} s; {total} tasks acknowledged ({} accepted, {} duplicate \
         answers to retries, {} answers lost to a kill, {} full), {} done, {interrupted} interrupted; \
         {killed_before_ready} kills before the manifest was published, {swept_checks} sweep checks, \
         {cut_short_seen} finishes cut short",
        started.elapsed().as_secs_f64(),
        counts.accepted.load(Ordering::Relaxed),
        counts.duplicate.load(Ordering::Relaxed),
        counts.lost_answers.load(Ordering::Relaxed),
        counts.full.load(Ordering::Relaxed),
        view.done.len(),
    );
    // The loop did exercise something: tasks were acknowledged, answers
    // were lost to kills, and kills landed while tasks were mid-turn.
    assert!(
        total >= cycles as u64 / 5,
        "only {total} tasks were acknowledged in {cycles} cycles"
    );
    assert!(counts.lost_answers.load(Ordering::Relaxed) > 0);
    assert!(interrupted + cut_short_seen > 0);
}

/// The processes of group `pgid` that are alive (not zombies), from /proc.
fn live_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.len() > 2 && f[0] != "Z" && f[2].parse::<u32>().ok() == Some(pgid)).then_some(pid)
        })
        .collect()
}

/// SIGKILL to every process of group `pgid` still there when dropped,
/// however the test ends: a group id is not reused while it has members.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if self.0 > 1 && !live_members(self.0).is_empty() {
            // SAFETY: kill(2) has no memory-safety preconditions; the group
            // is the handler's of this test and still has members.
            unsafe {
                libc::kill(-(self.0 as libc::pid_t), libc::SIGKILL);
            }
        }
    }
}

/// Issue 17: a handler outlived `kill -9` of its instance and finished its
/// work while the task was reported interrupted (and a requeue ran it
/// again). Now its leader dies with the instance, and what it started in
/// its group is killed by the next open of the spool: neither marker
/// below is ever written, and the restarted instance reports the task
/// interrupted.
pub fn handler_dies_with_its_instance(test: &str) {
    let env = env();
    let ws = env.workspace("hotel");
    let q = |p: &Path| format!("'{}'", p.to_str().unwrap());
    let (pids, leader_mark, child_mark) = (
        env.root.join("pids"),
        env.root.join("leader-finished"),
        env.root.join("child-finished"),
    );
    // The leader (`sh -c` running this) finishes 2 s into the turn; the
    // child it starts in its group, 6 s into it.
    let exec = format!(
        "cat > /dev/null; echo $$ >> {pids}; \
         sh -c 'echo $$ >> \"$0\"; sleep 6; touch \"$1\"' {pids} {child} & \
         sleep 2; touch {leader}; wait",
        pids = q(&pids),
        child = q(&child_mark),
        leader = q(&leader_mark),
    );
    let args = ["--name", "hotel", "--exec", exec.as_str()];
    let mut first = env.serve(&ws, &args);
    let mut c = first.client();
    assert_eq!(first.send(&mut c, "t-1", "work")["status"], "accepted");
    let recorded = wait_for(
        "the handler and its child to start",
        Duration::from_secs(15),
        || {
            let recorded: Vec<u32> = std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse::<u32>().ok())
                .collect();
            (recorded.len() == 2).then_some(recorded)
        },
    );
    let leader = recorded[0];
    let _group = KillGroup(leader);
    first.kill9();
    drop(c);

    // With no instance running, the leader is gone (it died with its
    // instance, or, were it not killed, ended after its 2 s of work).
    wait_until(
        "the handler's leader to end",
        Duration::from_secs(10),
        || !live_members(leader).contains(&leader),
    );
    assert!(
        !leader_mark.exists(),
        "{test}: the handler finished its work after its instance was killed"
    );
    // The next open of the spool kills the rest of its group.
    let mut second = env.serve(&ws, &args);
    let mut c = second.client();
    let status = c.call(2, "control/status", json!({}));
    assert_eq!(status["result"]["queue"]["interrupted"], 1, "{status}");
    let list = c.call(3, "inbox/list", json!({}));
    assert_eq!(
        list["result"]["interrupted"][0]["message_id"], "t-1",
        "{list}"
    );

    // The group is empty (the restart killed it, or, were it not killed,
    // the child ended after its 6 s of work).
    wait_until(
        "the handler's group to end",
        Duration::from_secs(15),
        || live_members(leader).is_empty(),
    );
    assert!(
        !child_mark.exists(),
        "{test}: a process the handler started finished its work after its instance was killed"
    );
    let notes = second.stderr();
    assert!(
        notes.contains(&format!("process group {leader} killed")),
        "{test}: the restart kills the handler's group:\n{notes}"
    );
    assert!(
        notes.contains("was mid-turn and is now in interrupted/"),
        "{test}:\n{notes}"
    );
    assert_eq!(second.term(), 0);
}
