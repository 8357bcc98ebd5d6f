//! Row 11: how soon `baton inbox wait` wakes. In each round two processes
//! wait on the same pull instance, both subscribed before the send: a
//! `baton inbox wait` and the baseline, a bare subscriber (this binary run
//! as `--subscriber SOCKET`: it subscribes and exits at the first
//! `message.accepted` line, without parsing it). Then one task is sent,
//! and each process's time from the `accepted` answer to its exit is
//! taken (a thread per process blocked in waitpid). The instance answers
//! the send before it writes the event to its subscribers (events.rs,
//! `record` then `flush`), so the answer marks the acceptance. Spawning
//! is not measured. `baton inbox wait` counts as subscribed once the
//! instance has the subscribed connection's two threads and no more (its
//! look at the inbox, a connection of its own, is over). Between rounds the task is claimed and completed.

use super::net::{self, LineClient, check_accepted, init_line, send_line, subscribe_line};
use super::util::poll;
use super::world::{Instance, World};
use super::{Fig, Row, Scale, Target, median, row, status_field};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The bound on each wait of a round.
const BOUND: Duration = Duration::from_secs(20);

/// `--subscriber SOCKET`: subscribes, says `ready` on stdout, and exits 0
/// at the first `message.accepted` line (2 on any failure).
pub fn subscriber(socket: &str) -> i32 {
    let run = || -> std::io::Result<()> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        s.write_all(&init_line(0))?;
        s.write_all(&subscribe_line(1))?;
        let mut r = BufReader::new(s);
        let mut line = Vec::new();
        for _ in 0..2 {
            line.clear();
            r.read_until(b'\n', &mut line)?;
        }
        if !net::contains(&line, b"\"subscribed\":true") {
            return Err(std::io::Error::other("not subscribed"));
        }
        let mut out = std::io::stdout().lock();
        out.write_all(b"ready\n")?;
        out.flush()?;
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                return Err(std::io::Error::other("closed"));
            }
            if net::contains(&line, b"\"message.accepted\"") {
                return Ok(());
            }
        }
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench: subscriber: {e}");
            2
        }
    }
}

/// A child that is killed and reaped if the round fails.
struct Waiter(Option<Child>);

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Waiter {
    /// Blocks until the process exits: when it did, and its stdout.
    fn wait(&mut self) -> Result<(Instant, String), String> {
        let mut c = self.0.take().ok_or("waited twice")?;
        let status = c.wait().map_err(|e| e.to_string())?;
        let at = Instant::now();
        let mut out = String::new();
        if let Some(mut o) = c.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if !status.success() {
            return Err(format!("exited with {status}: {out}"));
        }
        Ok((at, out))
    }
}

/// Starts the bare subscriber and returns once it is subscribed.
fn start_bare(socket: &Path) -> Result<Waiter, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut bare = Waiter(Some(
        std::process::Command::new(exe)
            .args(["--subscriber", &socket.display().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("subscriber: {e}"))?,
    ));
    let mut ready = String::new();
    let out = bare
        .0
        .as_mut()
        .and_then(|c| c.stdout.as_mut())
        .ok_or("no stdout")?;
    BufReader::new(out)
        .read_line(&mut ready)
        .map_err(|e| e.to_string())?;
    if ready != "ready\n" {
        return Err(format!("the bare subscriber said {ready:?}"));
    }
    Ok(bare)
}

/// The instance's thread count once two reads 1 ms apart agree (or
/// after a second of change, the last).
fn settled(pid: u32) -> u64 {
    let mut last = None;
    let settled = poll(Duration::from_secs(1), Duration::from_millis(1), || {
        let now = status_field(pid, "Threads:").unwrap_or(0);
        let same = last == Some(now);
        last = Some(now);
        same.then_some(now)
    });
    settled.or(last).expect("a thread count")
}

/// Starts `baton inbox wait` and returns once the instance (`pid`) holds
/// its subscription (a subscribed connection's two threads) and its look
/// at the inbox is over (that connection's thread gone).
fn start_baton(w: &World, pid: u32, target: &str) -> Result<Waiter, String> {
    let base = settled(pid);
    let mut cmd = w.cmd();
    cmd.args(["inbox", "wait", target])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let baton = Waiter(Some(cmd.spawn().map_err(|e| format!("inbox wait: {e}"))?));
    let began = Instant::now();
    let subscribed = poll(BOUND, Duration::from_millis(1), || {
        (status_field(pid, "Threads:").unwrap_or(0) >= base + 2).then_some(())
    });
    if subscribed.is_none() {
        return Err("baton inbox wait did not subscribe".into());
    }
    // `settled` takes a millisecond at least: no pause between looks.
    let left = BOUND.saturating_sub(began.elapsed());
    if poll(left, Duration::ZERO, || {
        (settled(pid) == base + 2).then_some(())
    })
    .is_none()
    {
        return Err("baton inbox wait did not end its look".into());
    }
    Ok(baton)
}

/// One round: both waiters subscribed, one send, both exit times. The
/// instance writes an event to its subscribers in the order they
/// subscribed, so odd rounds start baton's first.
fn round(w: &World, inst: &Instance, i: usize) -> Result<(Duration, Duration), String> {
    let (socket, target) = (inst.socket.as_path(), inst.id.as_str());
    let (mut bare, mut baton) = if i % 2 == 0 {
        let bare = start_bare(socket)?;
        (bare, start_baton(w, inst.pid, target)?)
    } else {
        let baton = start_baton(w, inst.pid, target)?;
        (start_bare(socket)?, baton)
    };
    let id = format!("wake{i}");
    let mut c = LineClient::baton(socket)?;
    let (t_bare, t_baton, sent) = thread::scope(|s| {
        let hb = s.spawn(|| bare.wait());
        let hw = s.spawn(|| baton.wait());
        // Both threads are in waitpid before the send.
        thread::sleep(Duration::from_millis(5));
        let answer = c
            .round_trip(&send_line(1, &id, target, "wake up"))
            .map_err(|e| e.to_string())
            .and_then(check_accepted);
        let accepted = Instant::now();
        (hb.join(), hw.join(), answer.map(|()| accepted))
    });
    let sent = sent?;
    let (bare_at, _) = t_bare.map_err(|_| "panicked")??;
    let (baton_at, said) = t_baton.map_err(|_| "panicked")??;
    if !said.contains(&format!("next: {id} from")) {
        return Err(format!("baton inbox wait printed {said:?}"));
    }
    // Claim and complete it, so the next round starts with none waiting.
    let claim = json!({"jsonrpc": "2.0", "id": 2, "method": "inbox/claim", "params": {}});
    let a = c
        .round_trip(format!("{claim}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    if !net::contains(a, b"\"claimed\"") {
        return Err(format!("claim: {}", String::from_utf8_lossy(a)));
    }
    let done = json!({"jsonrpc": "2.0", "id": 3, "method": "inbox/complete",
                      "params": {"message_id": id}});
    let a = c
        .round_trip(format!("{done}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    if !net::contains(a, b"\"completed\"") {
        return Err(format!("complete: {}", String::from_utf8_lossy(a)));
    }
    Ok((
        baton_at.saturating_duration_since(sent),
        bare_at.saturating_duration_since(sent),
    ))
}

/// Row 11.
pub fn row_inbox_wait(sc: &Scale) -> Result<Vec<Row>, String> {
    let rounds = if sc.full { 200 } else { 5 };
    let mut w = World::new(false, &[("BATON_FSYNC", "off")])?;
    let inst = w.start(&["woken".into()], &[])?.remove(0);
    let (mut baton, mut bare) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let (a, b) = round(&w, &inst, i)?;
        baton.push(a);
        bare.push(b);
    }
    w.stop_all();
    Ok(vec![row(
        "11",
        &format!(
            "`baton inbox wait` woken by a task: accepted -> exit, median of {rounds}; a bare subscriber process that exits on the event"
        ),
        Fig::Time(median(&baton)),
        Fig::Time(median(&bare)),
        Target::Ratio(1.5),
    )])
}
