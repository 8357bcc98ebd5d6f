//! An event as `baton log` and `baton watch` print it: one line, `TIME
//! kind details` (the details are `event_text`'s, escaped), a multi-line
//! text continuing under an indent so that it never looks like an entry
//! of its own; or with `--json` its members as the instance wrote them.

use super::since::Clock;
use super::{emit, emit_json};
use crate::text::sanitize::{escape, escape_multiline};
use crate::wire::event_text;
use crate::wire::{Event, EventKind};
use serde_json::Value;

/// Prints one event: `v` as it came, read as `ev`.
pub fn print(json: bool, clock: &Clock, v: &Value, ev: &Event) {
    if json {
        emit_json(v);
    } else {
        emit(&format_event(ev, clock));
    }
}

/// One event as text: `TIME kind details`, each further line of the
/// details (a handler's output keeps its lines) indented past the time.
pub fn format_event(ev: &Event, clock: &Clock) -> String {
    let stamp = clock.stamp(ev.time);
    let kind = escape(ev.kind_name());
    let line = event_text::said(ev).line;
    let detail = match ev.kind {
        Some(EventKind::TurnOutput) => escape_multiline(&line),
        _ => escape(&line),
    };
    let indent = format!("\n{}", " ".repeat(stamp.chars().count() + 1));
    let detail = detail.trim_end_matches('\n').replace('\n', &indent);
    format!("{stamp} {kind:<18} {detail}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn continuation_lines_are_indented_past_the_time() {
        let clock = Clock::new(true);
        let now = crate::spool::now_secs() as f64;
        let ev = json!({"time": now, "kind": "turn.output", "message_id": "t-1",
                        "stream": "stdout", "text": "one\ntwo\n"});
        let line = format_event(&Event::read(&ev), &clock);
        let lines: Vec<&str> = line.lines().collect();
        assert_eq!(lines.len(), 2, "{line}");
        assert!(lines[0].ends_with("t-1 stdout: one"), "{line}");
        assert_eq!(lines[1], "         two", "{line}");
    }
}
