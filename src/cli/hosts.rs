//! A command on several hosts: `--via CMD` (repeatable), `--hosts FILE`
//! and `--host-timeout SECONDS` (docs/ssh.md, "Several hosts"). The
//! command runs on each host as `CMD baton COMMAND ARGS --json`, in
//! parallel (`relay::hosts`); a host that fails is one line on stderr,
//! `HOST: REASON`; the answers are shown with a `HOST` column, or with
//! `"host"` in each JSON object.

use super::args::{Args, Opt, value};
use super::emit;
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::relay::hosts::{self, Host};
use crate::text::sanitize::escape;
use serde_json::Value;
use std::time::Duration;

pub const VIA: Opt = value(
    "via",
    "run on another host through CMD (e.g. 'ssh host'); repeatable",
);
pub const HOSTS: Opt = value(
    "hosts",
    "run on each host FILE lists too: one a line, # comments; one word is an ssh destination",
);
pub const HOST_TIMEOUT: Opt = value(
    "host-timeout",
    "give up on a host after this many seconds (default 10)",
);

/// The hosts a command was asked to reach, and how.
pub struct Fleet {
    pub hosts: Vec<Host>,
    pub timeout: Duration,
    pub multiplex: bool,
}

/// What the hosts answered: for each host that answered, its exit status
/// and output; whether any failed (its line already on stderr).
#[derive(Default)]
pub struct Asked {
    pub answers: Vec<(Host, i32, Vec<u8>)>,
    pub failed: bool,
}

impl Fleet {
    /// The fleet of `--via`, `--hosts` and `--host-timeout`; None when
    /// the command runs here.
    pub fn of(args: &Args, cmd: &str) -> Result<Option<Fleet>> {
        let hosts = hosts::hosts(&args.values("via"), &args.values("hosts"))?;
        let timeout = args.seconds(cmd, "host-timeout")?;
        if hosts.is_empty() {
            if timeout.is_some() || args.flag("no-multiplex") {
                return Err(Error::Usage(format!(
                    "{cmd}: --host-timeout and --no-multiplex go with --via or --hosts"
                )));
            }
            return Ok(None);
        }
        Ok(Some(Fleet {
            hosts,
            timeout: timeout.unwrap_or(hosts::DEFAULT_TIMEOUT),
            multiplex: !args.flag("no-multiplex"),
        }))
    }

    /// Runs `baton WORDS` on every host; a host that fails says so on
    /// stderr, `HOST: REASON`.
    pub fn ask(&self, config: &Config, words: &[String], input: &[u8]) -> Asked {
        let all = hosts::ask_all(
            &self.hosts,
            config,
            words,
            input,
            self.timeout,
            self.multiplex,
        );
        let mut asked = Asked::default();
        for (host, answer) in self.hosts.iter().zip(all) {
            asked.take(host, answer);
        }
        asked
    }
}

/// The words of this command for the remote side: COMMAND, the options
/// given but the host ones, `--json` when `json`, and the positionals.
pub fn words(cmd: &[&str], args: &Args, json: bool) -> Vec<String> {
    let skip = ["via", "hosts", "host-timeout", "no-multiplex", "json"];
    let mut w: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    w.extend(args.words_without(&skip));
    if json {
        w.push("--json".into());
    }
    if !args.positional.is_empty() {
        w.push("--".into());
        w.extend(args.positional.iter().cloned());
    }
    w
}

impl Asked {
    /// Adds a host's answer; what baton said there goes on stderr under
    /// the host's name, and a host that failed is one line there.
    /// Refused (1), not there (3) and out of time (5) are answers;
    /// anything else went wrong there.
    fn take(&mut self, host: &Host, answer: hosts::Answer) {
        let name = escape(&host.name);
        match answer {
            Ok(r) => {
                if let Some(said) = &r.said {
                    eprintln!("{name}: {said}");
                }
                if !matches!(r.code, 0 | 1 | 3 | 5) {
                    self.failed = true;
                    if r.said.is_none() {
                        eprintln!("{name}: baton failed there (exit status {})", r.code);
                    }
                }
                self.answers.push((host.clone(), r.code, r.out));
            }
            Err(why) => {
                self.failed = true;
                eprintln!("{name}: {}", why.0);
            }
        }
    }

    /// The exit status of the whole: 4 when a host failed; else, of the
    /// statuses the hosts gave, the highest, where 3 (no such target or
    /// task there) counts only when every host gave it, since what one
    /// host has the others lack (docs/decisions.md).
    pub fn status(&self) -> ExitCode {
        if self.failed {
            return ExitCode::Transport;
        }
        let codes: Vec<i32> = self.answers.iter().map(|(_, c, _)| *c).collect();
        if !codes.is_empty() && codes.iter().all(|&c| c == 3) {
            return ExitCode::NoTarget;
        }
        let worst = codes.into_iter().filter(|&c| c != 3).max().unwrap_or(0);
        ExitCode::from_code(worst)
    }

    /// Each host's output, every line after its host's name, padded to
    /// the longest name: `HOST  LINE`.
    pub fn prefixed(&self) -> String {
        let width = width(self.answers.iter().map(|(h, ..)| h));
        let mut s = String::new();
        for (host, _, out) in &self.answers {
            for line in String::from_utf8_lossy(out).lines() {
                s.push_str(&host_line(host, width, line));
            }
        }
        s
    }

    /// Each host's JSON answer, read: `(host, value)`; a host whose
    /// answer is not JSON is said on stderr and counted as failed.
    pub fn json(&mut self) -> Vec<(Host, Value)> {
        let mut out = Vec::new();
        for (host, code, bytes) in &self.answers {
            match serde_json::from_slice::<Value>(bytes) {
                Ok(v) => out.push((host.clone(), v)),
                Err(_) if bytes.is_empty() && *code != 0 => {}
                Err(e) => {
                    self.failed = true;
                    eprintln!("{}: its answer is not JSON ({e})", escape(&host.name));
                }
            }
        }
        out
    }
}

/// The longest of the hosts' names, which the others are padded to.
fn width<'a>(hosts: impl Iterator<Item = &'a Host>) -> usize {
    hosts.map(|h| h.name.chars().count()).max().unwrap_or(0)
}

/// `HOST  LINE`, the host's name padded to `width`. What a host prints is
/// escaped there; again here, in case it is not (an older or a hostile
/// baton): nothing raw.
fn host_line(host: &Host, width: usize, line: &str) -> String {
    format!("{:<width$}  {}\n", escape(&host.name), escape(line))
}

/// `value` with `"host": HOST` added: to an object, or to each object of
/// an array.
pub fn with_host(host: &Host, value: Value) -> Value {
    let add = |v: Value| match v {
        Value::Object(mut m) => {
            m.insert("host".into(), Value::String(host.name.clone()));
            Value::Object(m)
        }
        v => v,
    };
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(add).collect()),
        v => add(v),
    }
}

/// Prints the hosts' answers to a command whose answer is one object or
/// a list: with `--json`, one list of them all (each with `"host"`) for
/// lists, one object a line for objects; as text, each host's lines
/// after its name. The exit status as `Asked::status` says.
pub fn relay(fleet: &Fleet, config: &Config, cmd: &[&str], args: &Args) -> Result<ExitCode> {
    let json = args.flag("json");
    let mut asked = fleet.ask(config, &words(cmd, args, json), b"");
    if !json {
        emit(&asked.prefixed());
        return Ok(asked.status());
    }
    let answers = asked.json();
    let lists = answers.iter().all(|(_, v)| v.is_array());
    if lists && !answers.is_empty() {
        let all: Vec<Value> = (answers.into_iter())
            .flat_map(|(h, v)| match with_host(&h, v) {
                Value::Array(items) => items,
                v => vec![v],
            })
            .collect();
        super::emit_json(&Value::Array(all));
    } else {
        for (h, v) in answers {
            super::emit_json(&with_host(&h, v));
        }
    }
    Ok(asked.status())
}

/// `cmd` run on the hosts its `--via` and `--hosts` name, when it names
/// any: the exit status; None when it runs here. `list` lays out its own
/// table, and `send` (one host) has a `--via` of its own.
pub fn elsewhere(cmd: &super::Command, args: &Args, config: &Config) -> Result<Option<ExitCode>> {
    if cmd.name == "list" || !cmd.opts.iter().any(|o| o.long == HOSTS.long) {
        return Ok(None);
    }
    let cmd = cmd.name;
    let Some(mut fleet) = Fleet::of(args, cmd)? else {
        return Ok(None);
    };
    fleet.timeout += waited_there(cmd, args)?;
    let usage = |what: &str| Err(Error::Usage(format!("{cmd}: {what}")));
    match cmd {
        "inbox" if args.positional.first().map(String::as_str) != Some("list") => {
            usage("--via and --hosts go with inbox list only")
        }
        "watch" if args.flag("approve") => usage(
            "--approve answers one instance's requests: run it on that host (ssh HOST baton watch --approve)",
        ),
        "watch" => watch(&fleet, config, args).map(Some),
        // The positionals go after `--`, `inbox`'s `list` with them.
        _ => relay(&fleet, config, &[cmd], args).map(Some),
    }
}

/// How long `cmd` waits on each host beyond `--host-timeout`: `result
/// --wait`, its `--timeout` (a year without one); else nothing.
fn waited_there(cmd: &str, args: &Args) -> Result<Duration> {
    if cmd != "result" || !args.flag("wait") {
        return Ok(Duration::ZERO);
    }
    let wait = args.seconds(cmd, "timeout")?;
    Ok(wait.unwrap_or(Duration::from_secs(365 * 86_400)))
}

/// `watch` on several hosts: their events merged as they come, each line
/// after its host's name (with `--json`, `"host"` in each event); it ends
/// when every host's watch has ended.
fn watch(fleet: &Fleet, config: &Config, args: &Args) -> Result<ExitCode> {
    let json = args.flag("json");
    let words = words(&["watch"], args, json);
    let rx = hosts::stream(&fleet.hosts, config, &words, fleet.multiplex);
    let width = width(fleet.hosts.iter());
    let mut asked = Asked::default();
    let mut left = fleet.hosts.len();
    while left > 0 {
        let Ok(got) = rx.recv() else { break };
        match got {
            hosts::Streamed::Line(at, line) => {
                let host = &fleet.hosts[at];
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                match serde_json::from_str::<Value>(line) {
                    Ok(v) if json => super::emit_json(&with_host(host, v)),
                    _ => emit(&host_line(host, width, line)),
                }
            }
            hosts::Streamed::Ended(at, end) => {
                left -= 1;
                asked.take(&fleet.hosts[at], end);
            }
        }
    }
    Ok(asked.status())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_wait_gets_its_wait_beyond_the_host_timeout() {
        let opts = [
            super::super::JSON,
            VIA,
            HOST_TIMEOUT,
            super::super::result::WAIT,
            super::super::result::TIMEOUT,
        ];
        let parse = |cmd: &str, argv: &[&str]| {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            super::super::args::parse(cmd, &argv, &opts).unwrap()
        };
        let waited = |cmd: &str, argv: &[&str]| waited_there(cmd, &parse(cmd, argv)).unwrap();
        let wait = ["m1", "--wait", "--timeout", "600", "--via", "ssh a"];
        assert_eq!(waited("result", &wait), Duration::from_secs(600));
        assert!(
            waited("result", &["m1", "--wait", "--via", "ssh a"]) > Duration::from_secs(86_400)
        );
        assert_eq!(waited("result", &["m1", "--via", "ssh a"]), Duration::ZERO);
        assert_eq!(waited("status", &["--via", "ssh a"]), Duration::ZERO);
    }
}
