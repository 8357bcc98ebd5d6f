//! A log people can read (issue 21): every event kind gets a line of its
//! own, a handler's further lines are indented past the time, an error
//! baton writes is one entry, times are local (`TZ`) with the date when it
//! is not today or UTC with `--utc`, and `log -n`, `--since`, `--follow`.

use crate::util::{Env, RawClient, baton_bin, event_is, transcript, wait_event, wait_until};
use serde_json::{Value, json};
use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);
/// A time zone five hours east of UTC, without daylight saving (POSIX
/// `TZ` syntax: the sign is west-positive).
const TZ_PLUS5: &str = "XYZ-5";

#[track_caller]
fn call(c: &mut RawClient, method: &str, params: Value) -> Value {
    let r = c.call(3, method, params);
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method}: no result: {r}"))
}

/// `date` (coreutils) for epoch seconds `t`, in UTC, as `format`.
fn utc_date(t: i64, format: &str) -> String {
    let out = Command::new("date")
        .env("TZ", "UTC0")
        .args(["-d", &format!("@{t}"), &format!("+{format}")])
        .output()
        .expect("date");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Regression (issue 21): `task.expired`, `task.requeued`,
/// `task.discarded` and `local.input` were printed as raw JSON.
#[test]
fn every_event_kind_prints_as_a_line_of_its_own() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "pull", "--ttl", "1"]);
    let mut c = inst.client();
    let r = call(&mut c, "turn/local", json!({"text": "hello there"}));
    assert_eq!(r["status"], "noted", "{r}");
    let r = call(&mut c, "message/send", inst.msg("e-1", "old news"));
    assert_eq!(r["status"], "accepted", "{r}");
    wait_event(&inst.spool(), "e-1 to expire", WAIT, |e| {
        event_is(e, "task.expired", "e-1")
    });
    let r = call(&mut c, "inbox/requeue", json!({"message_id": "e-1"}));
    assert_eq!(r["status"], "requeued", "{r}");
    wait_until("e-1 to expire again", WAIT, || {
        transcript(&inst.spool())
            .iter()
            .filter(|e| event_is(e, "task.expired", "e-1"))
            .count()
            == 2
    });
    let r = call(&mut c, "inbox/discard", json!({"message_id": "e-1"}));
    assert_eq!(r["status"], "discarded", "{r}");
    wait_event(&inst.spool(), "task.ended e-1", WAIT, |e| {
        event_is(e, "task.ended", "e-1") && e["outcome"] == "discarded"
    });

    let out = env.run(&["log", "pull"]);
    assert_eq!(out.status, 0, "{out:?}");
    for l in out.stdout.lines() {
        assert!(
            !l.contains("{\""),
            "raw JSON in the log: {l}\n{}",
            out.stdout
        );
    }
    for want in [
        "local.input        noted (no --exec handler): hello there",
        "task.expired       e-1: waited longer than --ttl 1 s; moved to rejected/",
        "task.requeued      e-1 is queued again (inbox requeue)",
        "task.discarded     e-1 was discarded (inbox discard)",
        "task.ended         e-1 expired",
        "task.ended         e-1 discarded",
    ] {
        assert!(out.stdout.contains(want), "no {want:?} in\n{}", out.stdout);
    }
}

/// A handler's multi-line output continues under an indent, and a baton
/// command that fails inside a handler writes its error in one piece:
/// one `turn.output` event, one entry in the log (regression, issue 21:
/// `stderr: baton: not sent: ` / `stderr: denied` / ...).
#[test]
fn handler_output_lines_and_a_baton_error_are_one_entry_each() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let handler = format!(
        "printf 'one\\ntwo\\n'; '{}' send nosuch-agent hi",
        baton_bin().display()
    );
    let inst = env.serve(&ws, &["--name", "h", "--exec", &handler]);
    let mut c = inst.client();
    let r = call(&mut c, "message/send", inst.msg("m-1", "go"));
    assert_eq!(r["status"], "accepted", "{r}");
    wait_event(&inst.spool(), "m-1 to finish", WAIT, |e| {
        event_is(e, "turn.finished", "m-1")
    });
    let stderr: Vec<Value> = transcript(&inst.spool())
        .into_iter()
        .filter(|e| event_is(e, "turn.output", "m-1") && e["stream"] == "stderr")
        .collect();
    assert_eq!(stderr.len(), 1, "the error came in pieces: {stderr:?}");
    let text = stderr[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("baton: ") && text.ends_with('\n'),
        "{text:?}"
    );
    assert_eq!(text.matches('\n').count(), 1, "{text:?}");

    let out = env.run(&["log", "h"]);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.contains("turn.output") && l.ends_with("m-1 stdout: one"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert_eq!(lines[i + 1], "         two", "{}", out.stdout);
    let errs: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("turn.output") && l.contains("m-1 stderr: "))
        .collect();
    assert_eq!(errs.len(), 1, "{}", out.stdout);
    assert!(errs[0].contains("m-1 stderr: baton: "), "{}", out.stdout);
}

/// Times are in the local time zone (`TZ`) by default and UTC with
/// `--utc`; an event from another day shows its date.
#[test]
fn times_are_local_with_the_date_when_not_today_or_utc() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let mut inst = env.serve(&ws, &["--name", "tz"]);
    let spool = inst.spool();
    let json = env.run(&["log", "tz", "--json"]);
    let first = &json_lines(&json.stdout)[0];
    let t = first["time"].as_f64().unwrap().floor() as i64;
    let local = env.run_with(&[("TZ", TZ_PLUS5)], None, &["log", "tz"], None);
    let utc = env.run_with(&[("TZ", TZ_PLUS5)], None, &["log", "tz", "--utc"], None);
    let hms_local = utc_date(t + 5 * 3600, "%T");
    let hms_utc = utc_date(t, "%T");
    let line = local.stdout.lines().next().unwrap().to_string();
    // Today's events show only the time (unless midnight passed in
    // between, when the date comes first).
    assert!(
        line.starts_with(&format!("{hms_local} instance.started"))
            || line.starts_with(&format!(
                "{} {hms_local} instance.started",
                utc_date(t + 5 * 3600, "%F")
            )),
        "{line} (expected {hms_local})"
    );
    let line = utc.stdout.lines().next().unwrap().to_string();
    assert!(
        line.contains(&format!("{hms_utc} instance.started")),
        "{line}"
    );

    // Three days back, stopped: the date comes first, in local time.
    inst.proc.term();
    let path = spool.join("transcript.jsonl");
    let shifted: Vec<String> = fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["time"] = json!(v["time"].as_f64().unwrap() - 3.0 * 86_400.0);
            v.to_string()
        })
        .collect();
    fs::write(&path, shifted.join("\n") + "\n").unwrap();
    let old = env.run_with(&[("TZ", TZ_PLUS5)], None, &["log", "tz"], None);
    let want = utc_date(t - 3 * 86_400 + 5 * 3600, "%F %T");
    assert!(
        old.stdout.starts_with(&format!("{want} instance.started")),
        "{old:?} (expected {want})"
    );
    // --since an age: nothing in the last day, everything in four.
    let recent = env.run(&["log", "tz", "--since", "1d"]);
    assert_eq!(
        (recent.status, recent.stdout.as_str()),
        (0, ""),
        "{recent:?}"
    );
    let all = env.run(&["log", "tz", "--since", "4d"]);
    assert_eq!(all.stdout.lines().count(), shifted.len(), "{all:?}");
    // A date and time in UTC, one second after the first event.
    let after = utc_date(t - 3 * 86_400 + 1, "%FT%TZ");
    let later = env.run(&["log", "tz", "--since", &after, "--json"]);
    let seqs: Vec<u64> = json_lines(&later.stdout)
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(!seqs.contains(&1), "{later:?}");
    // -n N: the last N, here from the stopped agent's spool.
    let last = env.run(&["log", "tz", "-n", "2", "--json"]);
    let seqs: Vec<u64> = json_lines(&last.stdout)
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let n = shifted.len() as u64;
    assert_eq!(seqs, [n - 1, n], "{last:?}");
}

/// `log -n N` on a live instance, `--follow` going on with the live
/// events, and bad values refused.
#[test]
fn log_n_follow_and_bad_values() {
    let env = Env::new();
    let ws = env.workspace("ws");
    let inst = env.serve(&ws, &["--name", "live"]);
    let mut c = inst.client();
    for id in ["a-1", "a-2", "a-3"] {
        let r = call(&mut c, "message/send", inst.msg(id, "x"));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    let all = json_lines(&env.run(&["log", "live", "--json"]).stdout);
    let last = env.run(&["log", "live", "--json", "-n", "2"]);
    assert_eq!(
        json_lines(&last.stdout),
        all[all.len() - 2..].to_vec(),
        "{last:?}"
    );
    let none = env.run(&["log", "live", "--lines", "0"]);
    assert_eq!((none.status, none.stdout.as_str()), (0, ""), "{none:?}");
    let future = env.run(&["log", "live", "--since", "2099-01-01"]);
    assert_eq!(
        (future.status, future.stdout.as_str()),
        (0, ""),
        "{future:?}"
    );

    let out_path = env.root.join("follow.out");
    let child = env
        .cmd()
        .args(["log", "live", "--follow", "-n", "1"])
        .stdout(File::create(&out_path).unwrap())
        .spawn()
        .expect("spawn baton log --follow");
    let follow = Guard(child);
    let text = || fs::read_to_string(&out_path).unwrap_or_default();
    wait_until("log --follow to print the last event", WAIT, || {
        text().contains("a-3 from")
    });
    let r = call(&mut c, "message/send", inst.msg("a-4", "x"));
    assert_eq!(r["status"], "accepted", "{r}");
    wait_until("log --follow to print a live event", WAIT, || {
        text().contains("a-4 from")
    });
    let shown = text();
    assert!(
        !shown.contains("a-2") && !shown.contains("instance.started"),
        "{shown}"
    );
    drop(follow);

    let bad = env.run(&["log", "live", "--since", "10x"]);
    assert_eq!(bad.status, 2, "{bad:?}");
    assert!(
        bad.stderr
            .starts_with("baton: log: --since 10x: use an age (30s, 10m, 2h, 1d)"),
        "{bad:?}"
    );
    let bad = env.run(&["log", "live", "-n", "many"]);
    assert_eq!(bad.status, 2, "{bad:?}");
    assert_eq!(
        bad.stderr,
        "baton: log: -n many: use a number of events (0 or more)\n"
    );
    stopped_follow_is_an_error(&env, inst.spool().as_path());
}

/// `log --follow` has nothing to follow on a stopped agent.
fn stopped_follow_is_an_error(env: &Env, _spool: &Path) {
    let out = env.run(&["log", "nobody-here", "--follow"]);
    assert_eq!(out.status, 3, "{out:?}");
}

/// A child process stopped by pid when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
