//! Row 10: the MCP channel push (issue 20). A `baton mcp` session has a
//! host (this harness, on its pipes) that has initialized; a plain sender
//! hands its instance one task at a time. Measured per task, from the
//! moment the sender starts writing its `message/send` (the last instant
//! this process sees before the acceptance; the answer may be read after
//! the event, so it cannot be the start): until the
//! `notifications/claude/channel` line for the task is read from `baton
//! mcp`'s stdout, and, the baseline, until the `message.accepted` event
//! line is read by a bare subscriber of the same instance. Both readers
//! are threads of this process that parse each line as JSON.

use super::net::{self, LineClient, check_accepted, send_line, subscribe_line};
use super::util::{POLL, exited_or_killed, poll};
use super::world::{World, mkdir};
use super::{BODY_BYTES, Fig, Row, Scale, Target, body, median, row};
use crossbeam_channel::{Receiver, unbounded};
use serde_json::{Value, json};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Tasks measured, after `WARMUP` that are not.
fn tasks(sc: &Scale) -> usize {
    if sc.full { 400 } else { 20 }
}
const WARMUP: usize = 10;
/// How long one push or event may take to be read.
const WAIT: Duration = Duration::from_secs(20);
/// How long `baton mcp` may take to publish its instance.
const START: Duration = Duration::from_secs(30);

/// (message_id, when its line was read) from a reader thread.
type Seen = (String, Instant);

/// A `baton mcp` this row started, spoken to on its pipes; stopped (stdin
/// closed, then SIGKILL by pid if it lingers) on drop.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Session {
    fn start(w: &World) -> Result<(Session, Receiver<Seen>), String> {
        let ws = w.root().join("ws").join("chan");
        mkdir(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
        let log = w.root().join("log").join("mcp.err");
        let err = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut child = w
            .cmd()
            .args(["mcp", "--name", "chan"])
            .current_dir(&ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start baton mcp: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut s = Session {
            stdin: child.stdin.take(),
            child,
        };
        let (tx, rx) = unbounded();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let read = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if v["method"] != "notifications/claude/channel" {
                    continue;
                }
                let id = v["params"]["meta"]["message_id"].as_str().unwrap_or("");
                if tx.send((id.to_string(), read)).is_err() {
                    return;
                }
            }
        });
        for msg in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "baton-bench", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ] {
            let stdin = s.stdin.as_mut().expect("open");
            writeln!(stdin, "{msg}").map_err(|e| format!("writing to baton mcp: {e}"))?;
        }
        Ok((s, rx))
    }

    /// The socket and id of the session's instance, once published.
    fn instance(&self, w: &World) -> Result<(PathBuf, String), String> {
        let prefix = format!("a-{}-", self.child.id());
        let published = poll(START, POLL, || {
            fs::read_dir(&w.reg).ok()?.flatten().find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_prefix("a-")?.strip_suffix(".json")?;
                if !name.starts_with(&prefix) {
                    return None;
                }
                let m: Value = serde_json::from_slice(&fs::read(e.path()).ok()?).ok()?;
                let socket = m["socket"].as_str()?;
                Some((PathBuf::from(socket), id.to_string()))
            })
        });
        published.ok_or_else(|| format!("baton mcp published no manifest within {START:?}"))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A closed stdin ends the session; it exits at once.
        self.stdin = None;
        let _ = exited_or_killed(&mut self.child, Duration::from_secs(10));
    }
}

/// A bare subscriber's reader: the `message.accepted` events it reads.
fn subscriber(socket: &std::path::Path) -> Result<Receiver<Seen>, String> {
    let mut sub = LineClient::baton(socket)?;
    let a = sub
        .round_trip(&subscribe_line(1))
        .map_err(|e| format!("subscribe: {e}"))?;
    if !net::contains(a, b"\"subscribed\":true") {
        return Err(format!("subscribe answered {}", String::from_utf8_lossy(a)));
    }
    let (tx, rx) = unbounded();
    thread::spawn(move || {
        while let Ok(line) = sub.read_line() {
            let read = Instant::now();
            let Ok(v) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            let p = &v["params"];
            if v["method"] != "event" || p["kind"] != "message.accepted" {
                continue;
            }
            let id = p["message_id"].as_str().unwrap_or("").to_string();
            if tx.send((id, read)).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// When the line about `id` was read.
fn seen(rx: &Receiver<Seen>, id: &str, what: &str) -> Result<Instant, String> {
    loop {
        let (got, at) = rx
            .recv_timeout(WAIT)
            .map_err(|_| format!("no {what} for {id} within {WAIT:?}"))?;
        if got == id {
            return Ok(at);
        }
    }
}

pub fn row_channel(sc: &Scale) -> Result<Vec<Row>, String> {
    let w = World::new(
        false,
        &[("BATON_FSYNC", "off"), ("BATON_MAX_QUEUE", "100000")],
    )?;
    let (session, pushes) = Session::start(&w)?;
    let (socket, id) = session.instance(&w)?;
    let events = subscriber(&socket)?;
    let mut sender = LineClient::baton(&socket)?;
    let small = body(BODY_BYTES);
    let n = tasks(sc);
    let (mut push_times, mut event_times) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + n {
        let mid = format!("chan{i}");
        let line = send_line(1, &mid, &id, &small);
        let sent = Instant::now();
        let a = sender.round_trip(&line).map_err(|e| e.to_string())?;
        check_accepted(a)?;
        let pushed = seen(&pushes, &mid, "channel push")?;
        let heard = seen(&events, &mid, "message.accepted event")?;
        if i >= WARMUP {
            push_times.push(pushed.saturating_duration_since(sent));
            event_times.push(heard.saturating_duration_since(sent));
        }
    }
    drop(session);
    Ok(vec![row(
        "10",
        &format!(
            "channel push: send -> notifications/claude/channel read from `baton mcp`, median of {n}; -> event read by a bare subscriber"
        ),
        Fig::Time(median(&push_times)),
        Fig::Time(median(&event_times)),
        Target::Ratio(1.5),
    )])
}
