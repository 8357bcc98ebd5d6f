//! Events as lines people read, for `baton log` and `baton watch`: every
//! kind in protocol.md gets its own line (`KINDS`), times are shown on a
//! `Clock` (`since.rs`), every untrusted string is escaped, and a
//! multi-line text continues under an indent so it never looks like an
//! entry of its own.

use super::since::Clock;
use crate::sanitize::{escape, escape_multiline};
use serde_json::Value;

/// Every event kind `format_event` gives a line of its own (any other
/// shows its fields as JSON); a test checks it against the table in
/// docs/protocol.md.
pub const KINDS: &[&str] = &[
    "instance.started",
    "message.accepted",
    "local.input",
    "task.expired",
    "message.rejected",
    "task.claimed",
    "task.typed",
    "task.denied",
    "task.rejected",
    "task.requeued",
    "task.ended",
    "task.discarded",
    "turn.started",
    "turn.output",
    "turn.finished",
    "relay.sent",
    "state.changed",
    "approval.requested",
    "approval.resolved",
    "permission.requested",
    "permission.resolved",
    "notice",
];

/// One event as text: `TIME kind details`, each further line of the
/// details indented past the time.
pub fn format_event(ev: &Value, clock: &Clock) -> String {
    let stamp = clock.stamp(ev.get("time").and_then(Value::as_f64).unwrap_or(0.0));
    let kind = escape(ev.get("kind").and_then(Value::as_str).unwrap_or("?")).into_owned();
    let detail = detail(ev, &kind);
    let indent = format!("\n{}", " ".repeat(stamp.chars().count() + 1));
    let detail = detail.trim_end_matches('\n').replace('\n', &indent);
    format!("{stamp} {kind:<18} {detail}\n")
}

/// The details of one event: its fields as JSON for a kind not in
/// `KINDS`.
fn detail(ev: &Value, kind: &str) -> String {
    if !KINDS.contains(&kind) {
        return unknown_event(ev);
    }
    let s = |k: &str| str_field(ev, k);
    let id = s("message_id");
    match kind {
        "message.accepted" => message_accepted(ev, &id),
        "message.rejected" => format!(
            "{id} from {} (pid {}): {}: {}",
            s("from"),
            ev["pid"],
            s("status"),
            s("reason")
        ),
        "local.input" => local_input(ev, &id),
        "turn.started" => format!("{id} from {} (handler pid {})", s("from"), ev["pid"]),
        "turn.output" => turn_output(ev, &id),
        "turn.finished" => turn_finished(ev, &id),
        "relay.sent" => relay_sent(ev, &id),
        "state.changed" => s("state"),
        "instance.started" => format!(
            "{} ({}) pid {} in {}: {} mode, approve {}, {}",
            s("name"),
            s("instance_id"),
            ev["pid"],
            s("workspace"),
            s("mode"),
            s("approve"),
            s("state")
        ),
        "task.claimed" => {
            let mut d = format!("{id} from {}", s("from"));
            if let Some(of) = ev.get("follow_up_of").and_then(Value::as_str) {
                d.push_str(&format!(", a follow-up of {}", escape(of)));
            }
            d
        }
        "task.typed" => format!("{id} typed into tmux pane {}", s("tmux_pane")),
        "task.denied" => format!("{id} by {}", by(ev)),
        "task.rejected" => format!("{id}: {}", s("reason")),
        "task.expired" => format!("{id}: {}", s("text")),
        "task.requeued" => format!("{id} is queued again (inbox requeue)"),
        "task.discarded" => format!("{id} was discarded (inbox discard)"),
        "task.ended" => task_ended(ev, &id),
        "approval.requested" => approval_requested(ev, &id),
        "approval.resolved" => format!("{id} {} by {}", s("decision"), by(ev)),
        "permission.requested" => format!(
            "tool call {} ({}) asked by baton mcp (pid {}): {}",
            s("request_id"),
            s("tool_name"),
            ev["pid"],
            s("description")
        ),
        "permission.resolved" => format!(
            "tool call {} {} by {}",
            s("request_id"),
            s("decision"),
            by(ev)
        ),
        "notice" if id.is_empty() => s("text"),
        "notice" => format!("{id}: {}", s("text")),
        _ => unknown_event(ev),
    }
}

/// A string field of an event, escaped; empty when it is missing.
fn str_field(ev: &Value, k: &str) -> String {
    ev.get(k)
        .and_then(Value::as_str)
        .map(|s| escape(s).into_owned())
        .unwrap_or_default()
}

/// Who decided on an approval: `watch (pid 1234)`.
fn by(ev: &Value) -> String {
    let mut d = str_field(ev, "by");
    if let Some(pid) = ev.get("by_pid").and_then(Value::as_u64) {
        d.push_str(&format!(" (pid {pid})"));
    }
    d
}

fn message_accepted(ev: &Value, id: &str) -> String {
    let mut d = format!(
        "{id} from {} (pid {}), queue position {}",
        str_field(ev, "from"),
        ev["pid"],
        ev["queue_position"]
    );
    if ev.get("mode").and_then(Value::as_str) == Some("steer") {
        d.push_str(", steer");
    }
    if ev.get("stored").and_then(Value::as_bool) == Some(true) {
        d.push_str(", stored while the instance was stopped");
    }
    d
}

fn local_input(ev: &Value, id: &str) -> String {
    let body = str_field(ev, "body");
    if ev.get("noted").and_then(Value::as_bool) == Some(true) {
        return format!("noted (no --exec handler): {body}");
    }
    format!("{id} queued at position {}: {body}", ev["queue_position"])
}

fn task_ended(ev: &Value, id: &str) -> String {
    let mut d = format!("{id} {}", str_field(ev, "outcome"));
    if let Some(reply) = ev.get("reply").filter(|r| r.is_object()) {
        let bytes = reply
            .get("body")
            .and_then(Value::as_str)
            .map_or(0, str::len);
        match reply.get("message_id").and_then(Value::as_str) {
            Some(rid) => d.push_str(&format!(", reply {} ({bytes} bytes)", escape(rid))),
            None => d.push_str(&format!(", reply kept, not sent ({bytes} bytes)")),
        }
    }
    d
}

fn approval_requested(ev: &Value, id: &str) -> String {
    let mut d = format!("{id} from {}", str_field(ev, "from"));
    let ws = str_field(ev, "workspace");
    if !ws.is_empty() {
        d.push_str(&format!(" in {ws}"));
    }
    if let Some(mode) = ev.get("mode").and_then(Value::as_str) {
        d.push_str(&format!(", {}", escape(mode)));
    }
    if let Some(b) = ev.get("bytes").and_then(Value::as_u64) {
        d.push_str(&format!(", {b} bytes"));
    }
    d.push_str(" waits for approval");
    d
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
    let e = str_field(ev, "error");
    if !e.is_empty() {
        d.push_str(&format!(": {e}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The kinds in protocol.md's table of events.
    fn documented_kinds() -> Vec<String> {
        let doc = include_str!("../../docs/protocol.md");
        let table = doc
            .split("| kind | other fields | when |")
            .nth(1)
            .expect("protocol.md has the table of event kinds");
        let mut kinds: Vec<String> = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('`').nth(1).map(str::to_string))
            .collect();
        kinds.dedup();
        kinds
    }

    #[test]
    fn every_documented_kind_has_a_line() {
        let documented = documented_kinds();
        assert!(documented.len() >= 19, "{documented:?}");
        let mut listed: Vec<String> = KINDS.iter().map(|k| k.to_string()).collect();
        let mut doc_sorted = documented.clone();
        listed.sort();
        doc_sorted.sort();
        assert_eq!(
            listed, doc_sorted,
            "KINDS and protocol.md's event table differ"
        );
        let clock = Clock::new(true);
        for kind in KINDS {
            let ev = json!({"seq": 1, "time": 0.0, "kind": kind, "message_id": "t-1",
                            "zzz_unknown_member": 1});
            let line = format_event(&ev, &clock);
            assert!(
                !line.contains("zzz_unknown_member"),
                "{kind} has no line of its own: {line}"
            );
        }
        let odd = format_event(&json!({"time": 0.0, "kind": "x.new", "a": 1}), &clock);
        assert!(odd.contains("{\"a\":1}"), "{odd}");
    }

    #[test]
    fn continuation_lines_are_indented_past_the_time() {
        let clock = Clock::new(true);
        let now = crate::spool::now_secs() as f64;
        let ev = json!({"time": now, "kind": "turn.output", "message_id": "t-1",
                        "stream": "stdout", "text": "one\ntwo\n"});
        let line = format_event(&ev, &clock);
        let lines: Vec<&str> = line.lines().collect();
        assert_eq!(lines.len(), 2, "{line}");
        assert!(lines[0].ends_with("t-1 stdout: one"), "{line}");
        assert_eq!(lines[1], "         two", "{line}");
    }
}
