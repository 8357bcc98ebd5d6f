//! `baton gc`: the registry's stale entries (`list::gc`), or with
//! `--spools` the spools of stopped names that hold nothing but receipts
//! and were last used more than `--older-than DAYS` ago (`spool::gc`:
//! `stale` finds them, `remove` removes each under its lock).

use super::Parsed;
use super::args::Args;
use super::since::Clock;
use super::{emit, emit_json};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::spool::Removal;
use crate::spool::gc::{self, Stale};
use crate::text::sanitize::escape;
use serde::Serialize;
use std::time::Duration;

/// `baton gc [--json]`, or `baton gc --spools [--older-than DAYS]
/// [--dry-run] [--json]`.
pub struct Gc {
    json: bool,
    spools: Option<Spools>,
}

/// What `--spools` was given with.
struct Spools {
    older_than: Duration,
    dry_run: bool,
}

impl Parsed for Gc {
    fn parse(args: &Args) -> Result<Gc> {
        let spools = args.flag("spools");
        if !spools && (args.value("older-than").is_some() || args.flag("dry-run")) {
            return Err(Error::Usage(
                "gc: --older-than and --dry-run go with --spools".into(),
            ));
        }
        super::at_most(args, "gc", 0)?;
        let spools = match spools {
            true => Some(Spools {
                older_than: older_than(args)?,
                dry_run: args.flag("dry-run"),
            }),
            false => None,
        };
        let json = args.flag("json");
        Ok(Gc { json, spools })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        match self.spools {
            None => super::list::gc(self.json, config),
            Some(s) => spools(self.json, s),
        }
    }
}

/// `gc --spools`.
fn spools(
    json: bool,
    Spools {
        older_than,
        dry_run,
    }: Spools,
) -> Result<ExitCode> {
    let spools = crate::spool::state_home()?.join("baton").join("spool");
    let now = crate::spool::now_f64();
    let mut listed = Vec::new();
    let mut code = ExitCode::Ok;
    for s in gc::stale(&spools, older_than, now) {
        if dry_run {
            listed.push(s);
            continue;
        }
        let shown = escape(&s.dir.display().to_string()).into_owned();
        match gc::remove(&s, older_than, now) {
            Ok(Removal::Removed) => listed.push(s),
            Ok(Removal::InUse) => eprintln!(
                "baton: gc: kept {shown}: its name started meanwhile, or a sender is storing a task"
            ),
            Ok(Removal::Changed) => eprintln!("baton: gc: kept {shown}: it was used since"),
            Err(e) => {
                code = ExitCode::Usage;
                eprintln!("baton: gc: cannot remove {shown}: {e}");
            }
        }
    }
    if json {
        let out = Collected {
            dry_run,
            spools: listed.iter().map(Item::of).collect(),
        };
        emit_json(&serde_json::to_value(&out).expect("an answer serializes"));
    } else if listed.is_empty() {
        eprintln!(
            "baton: no stopped spools of receipts only, last used more than {} ago, in {}",
            days_said(older_than),
            escape(&spools.display().to_string())
        );
    } else {
        let clock = Clock::new(false);
        let verb = if dry_run { "would remove" } else { "removed" };
        let mut text = String::new();
        for s in &listed {
            text.push_str(&format!(
                "{verb} {} (workspace {}, last used {}): {}\n",
                escape(&s.name),
                escape(&s.workspace),
                clock.stamp(s.last_used),
                escape(&s.dir.display().to_string()),
            ));
        }
        emit(&text);
    }
    Ok(code)
}

/// `--older-than DAYS`: a number of days, 0 or more (`gc::DEFAULT_OLDER_THAN`
/// without it).
fn older_than(args: &Args) -> Result<Duration> {
    let Some(v) = args.value("older-than") else {
        return Ok(gc::DEFAULT_OLDER_THAN);
    };
    match v.parse::<f64>() {
        Ok(d) if d.is_finite() && (0.0..=100_000.0).contains(&d) && !v.contains(['e', 'E']) => {
            Ok(Duration::from_secs_f64(d * 86_400.0))
        }
        _ => Err(Error::Usage(format!(
            "gc: --older-than {}: use a number of days, 0 or more",
            escape(v)
        ))),
    }
}

/// A duration as days: `30 days`, `1 day`, `0.5 days`.
fn days_said(d: Duration) -> String {
    let days = d.as_secs_f64() / 86_400.0;
    let n = format!("{days:.3}");
    let n = n.trim_end_matches('0').trim_end_matches('.');
    if n == "1" {
        "1 day".into()
    } else {
        format!("{n} days")
    }
}

/// `gc --spools --json`'s answer.
#[derive(Serialize)]
struct Collected<'a> {
    dry_run: bool,
    /// Those removed; with `--dry-run`, those that would be.
    spools: Vec<Item<'a>>,
}

/// One spool `gc --spools` listed.
#[derive(Serialize)]
struct Item<'a> {
    name: &'a str,
    workspace: &'a str,
    spool: String,
    /// Epoch seconds.
    last_used: f64,
    receipts: usize,
}

impl<'a> Item<'a> {
    fn of(s: &'a Stale) -> Item<'a> {
        Item {
            name: &s.name,
            workspace: &s.workspace,
            spool: s.dir.display().to_string(),
            last_used: s.last_used,
            receipts: s.receipts,
        }
    }
}
