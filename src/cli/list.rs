//! `baton list` and `baton gc`: discovery, shown or cleaned.

use super::Parsed;
use super::args::Args;
use super::hosts::{self, Fleet};
use super::{emit, emit_json, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::client::request;
use crate::registry;
use crate::relay::hosts::Host;
use crate::text::sanitize::escape;
use crate::text::table;
use crate::wire::Method;
use crate::wire::answer::{Hello, HelloParams, Pong, Reply};
use crate::wire::request::NoParams;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `baton list [--json] [--all] [--offline]`, here or on the hosts of
/// `--via` and `--hosts`.
pub struct List {
    json: bool,
    all: bool,
    offline: bool,
    /// The hosts, and the words of this list there.
    hosts: Option<(Fleet, Vec<String>)>,
}

impl Parsed for List {
    fn parse(args: &Args) -> Result<List> {
        super::at_most(args, "list", 0)?;
        let hosts = Fleet::of(args, "list")?.map(|f| (f, hosts::words(&["list"], args, true)));
        Ok(List {
            json: args.flag("json"),
            all: args.flag("all"),
            offline: args.flag("offline"),
            hosts,
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let (listed, status) = match &self.hosts {
            None => (vec![(None, local(&self, config)?)], ExitCode::Ok),
            Some((fleet, words)) => remote(config, fleet, words),
        };
        if !self.json {
            print(&self, &listed);
            return Ok(status);
        }
        // Another host's items name it.
        let all = listed.into_iter().flat_map(|(h, items)| {
            let named = move |v| match &h {
                Some(h) => hosts::with_host(h, v),
                None => v,
            };
            items.into_iter().map(named)
        });
        emit_json(&Value::Array(all.collect()));
        Ok(status)
    }
}

/// This host's `list --json` items: the live instances, with `--all` the
/// entries skipped, and the scans cut short; with `--offline` the names
/// with a spool and no live instance, which a sender can still deliver
/// to (unless they opted out).
fn local(list: &List, config: &Config) -> Result<Vec<Value>> {
    // Every registry scanned, without this command's own instance when
    // it runs inside one.
    let dirs = registry::scan_dirs(&registry::ensure_dir(config)?);
    let me = target::own_instance_id();
    let found = registry::discover(&dirs, me.as_deref(), config.io_timeout);
    // A listing without the peers it could not ask would be a wrong one.
    if let Some(what) = found.shortage {
        return Err(Error::Transport(crate::registry::lookup::short_of(what)));
    }
    if list.offline {
        return Ok(crate::relay::known_spools()
            .iter()
            .filter(|s| s.running(&found.peers).is_none())
            .map(item)
            .collect());
    }
    let mut out: Vec<Value> = (found.peers.iter())
        .map(|p| item(&LiveItem::of(p)))
        .collect();
    if list.all {
        for s in &found.skipped {
            // Without a manifest, an object of its own members.
            let wire = s.wire.as_str();
            let manifest = (s.manifest.clone()).map(|m| registry::Manifest {
                wire: wire.to_string(),
                ..m
            });
            out.push(item(&SkippedItem {
                instance_id: (s.instance_id.as_deref()).filter(|_| manifest.is_none()),
                wire: manifest.is_none().then_some(wire),
                manifest,
                path: s.path.display().to_string(),
                problem: &s.problem,
            }));
        }
    }
    // A truncated scan says so with or without `--all`: what it did
    // not look at may be what the reader is looking for.
    for t in &found.truncated {
        out.push(item(&TruncatedItem {
            not_looked_at: t.not_looked_at,
            path: t.path.display().to_string(),
            problem: t.problem(),
            unlisted: t.unlisted,
            wire: t.wire.as_str(),
        }));
    }
    Ok(out)
}

/// One `list --json` item, as the map it is printed as.
fn item(v: &impl Serialize) -> Value {
    serde_json::to_value(v).expect("an item serializes")
}

/// A live instance, as `list --json` gives it: its manifest, with the
/// state its ping said, and what waits there where the ping said (a
/// zcoder peer does not).
#[derive(Serialize)]
struct LiveItem<'a> {
    #[serde(flatten)]
    manifest: &'a registry::Manifest,
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<usize>,
}

impl LiveItem<'_> {
    fn of(p: &registry::Peer) -> LiveItem<'_> {
        LiveItem {
            manifest: &p.manifest,
            approvals: p.load.map(|l| l.approvals),
            queued: p.load.map(|l| l.queued),
        }
    }
}

/// A registry entry `list --all` skipped: its manifest if it read, where
/// it is and why it was skipped.
#[derive(Serialize)]
struct SkippedItem<'a> {
    #[serde(flatten)]
    manifest: Option<registry::Manifest>,
    /// Without a manifest: the id its name gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    instance_id: Option<&'a str>,
    path: String,
    problem: &'a str,
    /// Without a manifest (a manifest names its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<&'a str>,
}

/// A directory whose scan stopped short, and how far.
#[derive(Serialize)]
struct TruncatedItem<'a> {
    not_looked_at: usize,
    path: String,
    problem: String,
    unlisted: bool,
    wire: &'a str,
}

/// The one instance a forced `baton bridge` reaches, as a `list` item.
#[derive(Serialize)]
struct BridgedItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<usize>,
    instance_id: String,
    name: String,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<usize>,
    state: Option<crate::wire::State>,
    wire: &'static str,
    workspace: String,
}

/// `gc --json`'s answer.
#[derive(Serialize)]
struct Collected<'a> {
    /// Only when there were any: the answer keeps its shape otherwise.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    malformed: &'a [String],
    removed: &'a [String],
}

/// An item of `list --json`, as far as the text shows it: a live
/// instance (with `queued` and `approvals` where its ping said them); an
/// entry skipped or a scan cut short (`problem`, and `not_looked_at` for
/// the latter); or with `--offline` a known spool (`queued`).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Item {
    name: String,
    pid: u32,
    state: Option<String>,
    instance_id: String,
    wire: String,
    workspace: String,
    path: String,
    problem: Option<String>,
    not_looked_at: Option<u64>,
    queued: usize,
    approvals: usize,
    offline: bool,
    #[serde(deserialize_with = "crate::wire::uid_list::deserialize")]
    operators: Vec<u32>,
}

/// `list`'s items as text, each host's (`None` is this one, whose
/// skipped entries `--all` shows too); with a `HOST` column when they are
/// other hosts'.
fn print(list: &List, listed: &[Listed]) {
    let here = listed.iter().all(|(h, _)| h.is_none());
    // An item this version cannot read (a remote's, say) is named and
    // left out, not shown as a blank row.
    let items: Vec<(String, Item)> = (listed.iter())
        .flat_map(|(h, items)| items.iter().map(move |v| (h, v)))
        .filter_map(|(h, v)| match Item::deserialize(v) {
            Ok(t) => Some((
                h.as_ref()
                    .map_or(String::new(), |h| escape(&h.name).into_owned()),
                t,
            )),
            Err(e) => {
                eprintln!(
                    "baton: list: an item that cannot be read ({e}): {}",
                    escape(&v.to_string())
                );
                None
            }
        })
        .collect();
    for (_, t) in items.iter().filter(|(_, t)| t.not_looked_at.is_some()) {
        let problem = t.problem.as_deref().unwrap_or("");
        eprintln!("baton: {}: {}", escape(&t.path), escape(problem));
    }
    if list.offline {
        if here && items.is_empty() {
            eprintln!("baton: no known names are offline");
            return;
        }
        let rows: Vec<(String, [String; 4])> = (items.iter())
            .map(|(h, s)| {
                let row = [
                    escape(&s.name).into_owned(),
                    s.queued.to_string(),
                    if s.offline { "yes" } else { "no" }.to_string(),
                    escape(&s.workspace).into_owned(),
                ];
                (h.clone(), row)
            })
            .collect();
        let head = ["NAME", "QUEUED", "OFFLINE_DELIVERY", "WORKSPACE"];
        return emit(&with_hosts(here, head, &rows));
    }
    let rows: Vec<(String, [String; 6])> = (items.iter())
        .filter(|(_, t)| t.problem.is_none())
        .map(|(h, t)| (h.clone(), row(t)))
        .collect();
    if rows.is_empty() && here {
        eprintln!("baton: no other live instances {}", registry::searched());
    } else if rows.is_empty() {
        eprintln!("baton: no live instances there");
    } else {
        let head = ["NAME", "PID", "STATE", "ID", "WIRE", "WORKSPACE"];
        emit(&with_hosts(here, head, &rows));
    }
    if here && list.all {
        for (_, t) in items.iter().filter(|(_, t)| t.not_looked_at.is_none()) {
            if let Some(problem) = &t.problem {
                emit(&format!(
                    "skipped {}: {}\n",
                    escape(&t.path),
                    escape(problem)
                ));
            }
        }
    }
}

/// A live instance's row.
fn row(t: &Item) -> [String; 6] {
    let mut state = escape(t.state.as_deref().unwrap_or("")).into_owned();
    // What waits there, when anything does: `ready, 3 queued, 1 approval`.
    if t.queued > 0 {
        state.push_str(&format!(", {} queued", t.queued));
    }
    if t.approvals > 0 {
        let s = if t.approvals == 1 { "" } else { "s" };
        state.push_str(&format!(", {} approval{s}", t.approvals));
    }
    // Who operates it, where an account other than its own does.
    let state = match t.operators.as_slice() {
        [] => state,
        uids => format!(
            "{state}, operators {}",
            super::control::operators_said(uids)
        ),
    };
    [
        escape(&t.name).into_owned(),
        t.pid.to_string(),
        state,
        escape(&t.instance_id).into_owned(),
        escape(&t.wire).into_owned(),
        escape(&t.workspace).into_owned(),
    ]
}

/// The table of `rows`, with the `HOST` column unless they are `here`.
fn with_hosts<const N: usize>(
    here: bool,
    head: [&str; N],
    rows: &[(String, [String; N])],
) -> String {
    match here {
        true => table(
            head,
            &rows.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        ),
        false => crate::text::table_with("HOST", head, rows),
    }
}

/// `baton gc [--json]`: the registry's stale entries removed.
pub(super) fn gc(json: bool, config: &Config) -> Result<ExitCode> {
    let dir = registry::ensure_dir(config)?;
    let collected = registry::collect_stale(&dir, true);
    let malformed: Vec<String> = collected
        .malformed
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if json {
        let out = Collected {
            malformed: &malformed,
            removed: &collected.removed,
        };
        emit_json(&item(&out));
    } else if collected.removed.is_empty() && malformed.is_empty() {
        eprintln!("baton: no stale entries in {}", dir.display());
    } else {
        for id in &collected.removed {
            emit(&format!("removed stale instance {id}\n"));
        }
        for path in &malformed {
            emit(&format!("removed malformed manifest {}\n", escape(path)));
        }
    }
    Ok(ExitCode::Ok)
}

/// `list --via 'ssh host'`...: the items of each host's `baton list
/// --json` (`words`), and the exit status.
fn remote(config: &Config, fleet: &Fleet, words: &[String]) -> (Vec<Listed>, ExitCode) {
    // `initialize` and `ping` on stdin, which `baton list` ignores: a key
    // whose forced command is `baton bridge NAME` answers them instead,
    // and that one instance is what can be listed through it.
    let probe = [
        request(1, Method::Initialize, HelloParams::new("baton")),
        request(2, Method::Ping, NoParams {}),
    ]
    .concat();
    let mut asked = fleet.ask(config, words, &probe);
    let mut listed = Vec::new();
    for (host, code, out) in &asked.answers {
        let name = escape(&host.name);
        match serde_json::from_slice::<Vec<Value>>(out) {
            Ok(items) if *code == 0 => listed.push((Some(host.clone()), items)),
            _ => match forced_bridge(out) {
                Some(item) => {
                    eprintln!(
                        "{name}: {} reaches only {}, through a forced command (baton bridge): the other instances there, if any, cannot be listed through it",
                        escape(&host.via),
                        escape(&item.name)
                    );
                    listed.push((Some(host.clone()), vec![self::item(&item)]));
                }
                // What went wrong there is said already.
                None if *code != 0 => {}
                None => eprintln!("{name}: its answer is not a list"),
            },
        }
    }
    asked.failed |= listed.len() < asked.answers.len();
    (listed, asked.status())
}

/// The items one host listed: `None` is this host.
type Listed = (Option<Host>, Vec<Value>);

/// The instance a forced `baton bridge NAME` answered the probe for, as a
/// `list --json` item.
fn forced_bridge(out: &[u8]) -> Option<BridgedItem> {
    let answers: Vec<Reply> = String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = |id: u64| {
        answers
            .iter()
            .find(|a| a.answers(id))
            .and_then(|a| a.result.clone())
    };
    let hello: Hello = serde_json::from_value(result(1)?).ok()?;
    let m = hello.instance?;
    let pong = result(2).and_then(|p| serde_json::from_value::<Pong>(p).ok());
    let load = pong.as_ref().and_then(Pong::load);
    Some(BridgedItem {
        approvals: load.map(|l| l.approvals),
        instance_id: m.instance_id,
        name: m.name,
        pid: m.pid,
        queued: load.map(|l| l.queued),
        state: pong.map(|p| p.state),
        wire: "jsonrpc",
        workspace: m.workspace,
    })
}
