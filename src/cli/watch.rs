//! `baton log` and `baton watch`: an instance's transcript, recorded or
//! live, and answering approvals from a terminal.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry;
use crate::relay::{self, KnownSpool};
use crate::sanitize::{escape, escape_multiline};
use crossbeam_channel::{self as chan, select};
use serde_json::{Value, json};
use std::io::{BufRead, Write};

/// One event as a line of text: `HH:MM:SS kind details`, times in UTC,
/// every untrusted string escaped.
pub fn format_event(ev: &Value) -> String {
    let t = ev.get("time").and_then(Value::as_f64).unwrap_or(0.0) as u64;
    let (h, m, s) = ((t / 3600) % 24, (t / 60) % 60, t % 60);
    let kind = ev.get("kind").and_then(Value::as_str).unwrap_or("?");
    let str_of = |k: &str| str_field(ev, k);
    let id = str_of("message_id");
    let detail = match kind {
        "message.accepted" => format!(
            "{id} from {} (pid {}), queue position {}",
            str_of("from"),
            ev["pid"],
            ev["queue_position"]
        ),
        "message.rejected" => format!(
            "{id} from {} (pid {}): {}: {}",
            str_of("from"),
            ev["pid"],
            str_of("status"),
            str_of("reason")
        ),
        "turn.started" => format!("{id} from {} (handler pid {})", str_of("from"), ev["pid"]),
        "turn.output" => turn_output(ev, &id),
        "turn.finished" => turn_finished(ev, &id),
        "relay.sent" => relay_sent(ev, &id),
        "state.changed" => str_of("state"),
        "instance.started" => format!(
            "{} ({}) pid {} in {}: {} mode, approve {}, {}",
            str_of("name"),
            str_of("instance_id"),
            ev["pid"],
            str_of("workspace"),
            str_of("mode"),
            str_of("approve"),
            str_of("state")
        ),
        "task.claimed" => {
            let mut d = format!("{id} from {}", str_of("from"));
            if let Some(of) = ev.get("follow_up_of").and_then(Value::as_str) {
                d.push_str(&format!(", a follow-up of {}", escape(of)));
            }
            d
        }
        "task.denied" => format!("{id} by {}", str_of("by")),
        "task.rejected" => format!("{id}: {}", str_of("reason")),
        "approval.requested" => format!("{id} from {} waits for approval", str_of("from")),
        "approval.resolved" => format!("{id} {} by {}", str_of("decision"), str_of("by")),
        "notice" => {
            let mut d = str_of("text");
            if !id.is_empty() {
                d = format!("{id}: {d}");
            }
            d
        }
        _ => unknown_event(ev),
    };
    format!("{h:02}:{m:02}:{s:02} {kind:<18} {detail}\n")
}

/// A string field of an event, escaped; empty when it is missing.
fn str_field(ev: &Value, k: &str) -> String {
    ev.get(k)
        .and_then(Value::as_str)
        .map(|s| escape(s).into_owned())
        .unwrap_or_default()
}

fn turn_output(ev: &Value, id: &str) -> String {
    let text = ev.get("text").and_then(Value::as_str).unwrap_or("");
    let mut d = format!("{id} {}: ", str_field(ev, "stream"));
    if let Some(n) = ev.get("dropped").and_then(Value::as_u64) {
        d.push_str(&format!("[{n} bytes dropped; the tail follows] "));
    }
    d.push_str(&escape_multiline(text.trim_end_matches('\n')));
    d
}

fn turn_finished(ev: &Value, id: &str) -> String {
    let mut d = format!("{id} {}", str_field(ev, "outcome"));
    if let Some(c) = ev.get("exit_code").filter(|c| !c.is_null()) {
        d.push_str(&format!(", exit {c}"));
    }
    if let Some(sig) = ev.get("signal").filter(|c| !c.is_null()) {
        d.push_str(&format!(", signal {sig}"));
    }
    if let Some(ms) = ev.get("duration_ms").and_then(Value::as_u64) {
        d.push_str(&format!(", {:.3} s", ms as f64 / 1000.0));
    }
    d
}

fn relay_sent(ev: &Value, id: &str) -> String {
    let to = ev
        .get("target")
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .map(|s| escape(s).into_owned())
        .unwrap_or_else(|| "?".into());
    let mut d = format!("{id} to {to}: {}", str_field(ev, "status"));
    let r = str_field(ev, "reason");
    if !r.is_empty() {
        d.push_str(&format!(": {r}"));
    }
    if let Some(of) = ev.get("reply_of").and_then(Value::as_str) {
        d.push_str(&format!(" (reply to {})", escape(of)));
    }
    d
}

/// A kind this version does not know: its fields, as JSON.
fn unknown_event(ev: &Value) -> String {
    let mut rest = ev.clone();
    if let Value::Object(o) = &mut rest {
        for k in ["seq", "time", "kind"] {
            o.remove(k);
        }
    }
    escape(&rest.to_string()).into_owned()
}

fn subscribe(
    args: &Args,
    config: &Config,
    cmd: &str,
    params: Value,
) -> Result<(Value, chan::Receiver<Value>, std::os::unix::net::UnixStream)> {
    super::at_most(args, cmd, 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    let conn = target::connect(config, &peer)?;
    conn.subscribe(params)
        .map_err(|e| target::transport(&peer, e))
}

fn print(args: &Args, ev: &Value) {
    if args.flag("json") {
        emit_json(ev);
    } else {
        emit(&format_event(ev));
    }
}

/// The id of the ping that marks the end of the replay.
const REPLAYED: &str = "replayed";

/// The spool of a stopped agent, when TARGET names no live instance
/// (`why`) but a spool does: the one spool of that name, or without a name
/// the one whose workspace is the current directory, that no live instance
/// serves. Said on stderr, so that `--json` output stays pure. Only each
/// spool's `meta.json` is read.
pub(super) fn stopped(config: &Config, target: Option<&str>, why: String) -> Result<KnownSpool> {
    let dir = registry::ensure_dir(config)?;
    let live = registry::discover(&registry::scan_dirs(&dir), None, config.io_timeout).peers;
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Error::io("read", std::path::Path::new("."), e))?
        .display()
        .to_string();
    let mut found: Vec<KnownSpool> = relay::known_spools()
        .into_iter()
        .filter(|s| target.map_or(s.workspace == cwd, |n| s.name == n))
        .filter(|s| {
            !live
                .iter()
                .any(|p| p.manifest.name == s.name && p.manifest.workspace == s.workspace)
        })
        .collect();
    if found.len() > 1 {
        let list: Vec<String> = found
            .iter()
            .map(|s| {
                format!(
                    "\n  {}  not running  {}",
                    escape(&s.name),
                    escape(&s.workspace)
                )
            })
            .collect();
        return Err(Error::NoTarget(format!(
            "{why}; several stopped agents' spools match: candidates:{}",
            list.concat()
        )));
    }
    let Some(spool) = found.pop() else {
        return Err(Error::NoTarget(why));
    };
    eprintln!(
        "baton: {} is not running; reading its spool",
        escape(&spool.name)
    );
    Ok(spool)
}

/// `baton log`: every recorded event, then exit; a stopped agent's from
/// its transcript on disk.
pub fn log(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "log", 1)?;
    let target_arg = args.positional.first().map(String::as_str);
    let peer = match target::resolve(config, target_arg) {
        Ok(peer) => peer,
        Err(Error::NoTarget(why)) => {
            let spool = stopped(config, target_arg, why)?;
            crate::events::replay(&spool.dir, 1, u64::MAX, |line| {
                if let Ok(ev) = serde_json::from_slice::<Value>(line) {
                    print(args, &ev);
                }
                true
            });
            return Ok(ExitCode::Ok);
        }
        Err(e) => return Err(e),
    };
    let conn = target::connect(config, &peer)?;
    let (result, rx, mut stream) = conn
        .subscribe(json!({"since": 1}))
        .map_err(|e| target::transport(&peer, e))?;
    let last = result
        .get("next_seq")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .saturating_sub(1);
    if last == 0 {
        return Ok(ExitCode::Ok);
    }
    // The instance replays the transcript before it reads the next
    // request, so the answer to this ping follows every recorded event
    // there is: when the transcript lacks the last ones (rotated away,
    // set aside, its writes failed), the log ends there, not at the next
    // live event.
    let _ = stream.write_all(&crate::wire::request_line(REPLAYED, "ping", json!({})));
    for msg in rx.iter() {
        if msg.get("id").and_then(Value::as_str) == Some(REPLAYED) {
            break;
        }
        if msg.get("method").and_then(Value::as_str) != Some("event") {
            continue;
        }
        let ev = &msg["params"];
        let seq = ev.get("seq").and_then(Value::as_u64).unwrap_or(0);
        if seq > last {
            break;
        }
        print(args, ev);
        if seq == last {
            return Ok(ExitCode::Ok);
        }
    }
    // Rotation may have removed the oldest events; what exists was shown.
    Ok(ExitCode::Ok)
}

/// `baton watch`: live events until the instance goes away; with
/// `--approve`, also answers approval requests from the terminal.
pub fn watch(args: &Args, config: &Config) -> Result<ExitCode> {
    let approve = args.flag("approve");
    let mut params = json!({"controller": approve});
    if let Some(since) = args.value("since") {
        let n: u64 = since.parse().map_err(|_| {
            Error::Usage(format!(
                "watch: --since {}: use a sequence number",
                escape(since)
            ))
        })?;
        params["since"] = json!(n);
    }
    let (_, rx, mut stream) = subscribe(args, config, "watch", params)?;
    let (lines_tx, lines) = chan::unbounded::<String>();
    if approve {
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
    } else {
        drop(lines_tx);
    }
    // Approval requests waiting for an answer, oldest first.
    let mut waiting: std::collections::VecDeque<(Value, String)> = Default::default();
    let mut stdin_open = approve;
    loop {
        let input = if stdin_open {
            lines.clone()
        } else {
            chan::never()
        };
        select! {
            recv(rx) -> msg => {
                let Ok(msg) = msg else {
                    eprintln!("baton: the instance closed the connection");
                    return Ok(ExitCode::Ok);
                };
                match msg.get("method").and_then(Value::as_str) {
                    Some("event") => print(args, &msg["params"]),
                    Some("approval/request") if approve => {
                        let id = msg["params"]["message_id"].as_str().unwrap_or("").to_string();
                        eprint!("approve task {}? [y/n] ", escape(&id));
                        waiting.push_back((msg["id"].clone(), id));
                    }
                    _ => {}
                }
            },
            recv(input) -> line => {
                let Ok(line) = line else {
                    stdin_open = false;
                    continue;
                };
                let Some((rid, id)) = waiting.pop_front() else {
                    continue;
                };
                let decision = match line.trim() {
                    "y" | "yes" => "approve",
                    _ => "deny",
                };
                let reply = json!({"jsonrpc": "2.0", "id": rid, "result": {"decision": decision}});
                let mut bytes = serde_json::to_vec(&reply).expect("serializes");
                bytes.push(b'\n');
                if crate::wire::write_all(&mut stream, &bytes).is_err() {
                    return Err(Error::Transport("the instance closed the connection".into()));
                }
                eprintln!("baton: {decision} {}", escape(&id));
            },
        }
    }
}
