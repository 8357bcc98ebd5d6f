//! What a TARGET names: an exact instance id, else a name exactly one live
//! instance has; without TARGET, the instance of `$BATON_SOCKET`, else the
//! one serving the current directory. A name (or, without TARGET, a
//! workspace) no live instance has may be known from its spool's
//! `meta.json`: a stopped agent's, the one verdict `Lookup::Stopped`. A
//! name no one has gets the nearest live and stopped names suggested
//! (`did you mean beta?`). The CLI (`cli/target.rs`) and senders (`relay`)
//! say what each answer means.

use crate::registry::{self, Manifest, Peer, RegistryDir, Wire};
use crate::text::sanitize::escape;
use crate::wire::answer::Candidate;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What is looked for.
pub enum Target<'a> {
    /// An instance id, else a name.
    Named(&'a str),
    /// The instance listening on this socket (`$BATON_SOCKET`).
    Socket(PathBuf),
    /// The baton instance serving this workspace.
    Workspace(PathBuf),
}

/// What a lookup found.
pub enum Lookup {
    /// One live instance; it may be unresponsive (`Peer::unresponsive`).
    One(Box<Peer>),
    /// Several live instances match: why that is no answer, and them.
    Several { why: String, matched: Vec<Peer> },
    /// No live instance matches but one spool does: its agent is stopped.
    Stopped(Box<KnownSpool>),
    /// This process ran short of a resource (descriptors, memory) to ask
    /// the live instances, or the registry holds more manifests than
    /// discovery reads (`registry::MAX_CANDIDATES`), and none that it could
    /// ask matches: why, in words that say what to do. Never a verdict on
    /// the target.
    Short(String),
    /// None matches: why, every live instance, and the spools that match
    /// when there are several (their agents are stopped; none is the
    /// answer).
    None {
        why: String,
        live: Vec<Peer>,
        stopped: Vec<KnownSpool>,
    },
}

impl Target<'_> {
    /// What no TARGET stands for: the instance of `$BATON_SOCKET`, else
    /// the one serving the current directory.
    pub fn here() -> std::io::Result<Target<'static>> {
        if let Some(socket) = crate::base::config::baton_socket() {
            return Ok(Target::Socket(socket));
        }
        let cwd = std::env::current_dir().and_then(std::fs::canonicalize)?;
        Ok(Target::Workspace(cwd))
    }

    /// Whether a manifest can be the one: only those are pinged first.
    fn may_be(&self, m: &Manifest) -> bool {
        match self {
            Target::Named(t) => m.instance_id == *t || m.name == *t,
            Target::Socket(s) => Path::new(&m.socket) == s,
            Target::Workspace(w) => Path::new(&m.workspace) == w,
        }
    }

    /// The one live instance the target names, or several; `None` when
    /// none matches. An instance id beats a name.
    fn pick(&self, peers: &[Peer]) -> Option<Lookup> {
        if let Target::Named(t) = self {
            if let Some(p) = peers.iter().find(|p| p.manifest.instance_id == *t) {
                return Some(Lookup::One(Box::new(p.clone())));
            }
        }
        let mut hits: Vec<Peer> = peers
            .iter()
            .filter(|p| match self {
                Target::Named(t) => p.manifest.name == *t,
                // A zcoder instance serves no workspace of ours.
                Target::Workspace(_) => p.wire == Wire::Jsonrpc && self.may_be(&p.manifest),
                Target::Socket(_) => self.may_be(&p.manifest),
            })
            .cloned()
            .collect();
        match hits.len() {
            0 => None,
            1 => Some(Lookup::One(Box::new(hits.pop().expect("one")))),
            _ => Some(Lookup::Several {
                why: self.why(true),
                matched: hits,
            }),
        }
    }

    /// Whether a stopped agent's spool is what the target names: a name's,
    /// or the current directory's. `$BATON_SOCKET` names a live instance
    /// only.
    fn owns(&self, s: &KnownSpool) -> bool {
        match self {
            Target::Named(t) => s.name == *t,
            Target::Workspace(w) => Path::new(&s.workspace) == w,
            Target::Socket(_) => false,
        }
    }

    /// Why no live instance is the answer: none matches, or `several`.
    fn why(&self, several: bool) -> String {
        let shown = |p: &Path| escape(&p.display().to_string()).into_owned();
        let what = match self {
            Target::Named(t) if several => format!("the name {}", escape(t)),
            Target::Named(t) => format!("no live instance has the id or name {}", escape(t)),
            Target::Socket(s) => format!("no live instance listens on BATON_SOCKET={}", shown(s)),
            Target::Workspace(w) if several => format!("the instances serving {}", shown(w)),
            Target::Workspace(w) => format!("no instance serves {}: name a TARGET", shown(w)),
        };
        if several {
            format!("{what} is ambiguous: pick one by id")
        } else {
            what
        }
    }
}

/// Looks for `target` among the live instances of `dirs`. An exact id
/// needs no scan (its manifest is read directly); then the manifests are
/// read, the kernel rules out those whose process is gone, and only what
/// the target can name is pinged. Everyone is pinged only to list the
/// candidates when that finds nothing and no stopped agent's spool is the
/// answer.
pub fn find(dirs: &[RegistryDir], target: &Target<'_>, timeout: Duration) -> Lookup {
    if let Target::Named(t) = target {
        if let Some(p) = registry::find_id(dirs, t, timeout) {
            return Lookup::One(Box::new(p));
        }
    }
    let keep = |m: &Manifest| target.may_be(m);
    let named = match target {
        Target::Named(t) => registry::discover_named(dirs, timeout, t, &keep),
        _ => registry::discover_matching(dirs, None, timeout, &keep),
    };
    if let Some(found) = target.pick(&named.peers) {
        return found;
    }
    // A peer that could not be asked, or whose manifest was not read, may
    // be the one: no answer, no spool taken for a stopped agent's.
    if let Some(what) = named.shortage {
        return Lookup::Short(short_of(what));
    }
    if let Some(t) = named.truncated.first() {
        return Lookup::Short(past_the_bound(target, t));
    }
    // No live instance has the name (or serves the workspace): every spool
    // of it is a stopped agent's, and one is the answer. The live
    // instances of the name are all among `named`.
    let mut stopped: Vec<KnownSpool> = match target {
        Target::Socket(_) => Vec::new(),
        _ => (known_spools().into_iter())
            .filter(|s| target.owns(s) && s.running(&named.peers).is_none())
            .collect(),
    };
    if stopped.len() == 1 {
        return Lookup::Stopped(Box::new(stopped.pop().expect("one spool")));
    }
    let everyone = registry::discover(dirs, None, timeout);
    let all = everyone.peers;
    // One that started since the first look.
    if let Some(found) = target.pick(&all) {
        return found;
    }
    if let Some(what) = everyone.shortage {
        return Lookup::Short(short_of(what));
    }
    let mut why = target.why(false);
    if let Target::Named(t) = target {
        why.push_str(&suggestion(t, &all, &known_spools()));
    }
    Lookup::None {
        why,
        live: all,
        stopped,
    }
}

/// Names suggested at most for a name no one has.
const SUGGESTED: usize = 3;

/// The edit distance of `a` and `b` in characters (insertions, deletions,
/// substitutions and swaps of two neighbours: optimal string alignment).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows: the one before the previous (for a swap), the previous,
    // the current.
    let mut rows = [
        vec![0; b.len() + 1],
        (0..=b.len()).collect(),
        vec![0; b.len() + 1],
    ];
    for i in 1..=a.len() {
        rows[2][0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[1][j] + 1)
                .min(rows[2][j - 1] + 1)
                .min(rows[1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[0][j - 2] + 1);
            }
            rows[2][j] = d;
        }
        rows.rotate_left(1);
    }
    rows[1][b.len()]
}

/// How far `name` is from `wanted`, when it is near enough to suggest: at
/// most 2 edits, and at most a third of the longer name's length, so
/// that a short name is not "near" every other short name. Letters
/// differing only in case count as the same.
fn near(wanted: &str, name: &str) -> Option<usize> {
    let d = distance(&wanted.to_lowercase(), &name.to_lowercase());
    let longer = wanted.chars().count().max(name.chars().count());
    (name != wanted && d <= 2 && d * 3 <= longer).then_some(d)
}

/// ` (did you mean beta?)`: the live and stopped names nearest to
/// `wanted` (a stopped name: a spool no live instance serves), nearest
/// first, `SUGGESTED` at most, escaped; empty when none is near.
fn suggestion(wanted: &str, live: &[Peer], spools: &[KnownSpool]) -> String {
    let mut near_names: Vec<(usize, bool, &str)> = Vec::new();
    let live_names = live.iter().map(|p| (p.manifest.name.as_str(), false));
    let stopped = (spools.iter())
        .filter(|s| s.running(live).is_none())
        .map(|s| (s.name.as_str(), true));
    for (name, is_stopped) in live_names.chain(stopped) {
        let Some(d) = near(wanted, name) else {
            continue;
        };
        // A name both live and stopped (another workspace) is live.
        match near_names.iter_mut().find(|(_, _, n)| *n == name) {
            Some(seen) => seen.1 &= is_stopped,
            None => near_names.push((d, is_stopped, name)),
        }
    }
    near_names.sort();
    near_names.truncate(SUGGESTED);
    if near_names.is_empty() {
        return String::new();
    }
    let shown = |n: &(usize, bool, &str)| escape(n.2).into_owned();
    let names: Vec<String> = near_names.iter().map(shown).collect();
    let stopped: Vec<String> = near_names.iter().filter(|n| n.1).map(shown).collect();
    let stopped = match stopped.len() {
        0 => String::new(),
        1 => format!(" {} is stopped", stopped[0]),
        _ => format!(" {} are stopped", or_list(&stopped, "and")),
    };
    format!(" (did you mean {}?{stopped})", or_list(&names, "or"))
}

/// `a`, `a or b`, `a, b or c` (with `word` for "or").
fn or_list(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} {word} {last}", rest.join(", ")),
    }
}

/// Why a target was not found in a registry whose scan stopped at its
/// bound: it may be past it.
fn past_the_bound(target: &Target<'_>, t: &registry::Truncated) -> String {
    format!(
        "{}, but {}: {} holds more than discovery reads; remove stale entries (baton gc) or name the instance by its id",
        target.why(false),
        t.problem(),
        escape(&t.path.display().to_string())
    )
}

/// Why a lookup that ran short of `what` found nothing, and what to do.
pub fn short_of(what: &str) -> String {
    let raise = match crate::sys::open_files_limit() {
        Some(n) if what.contains("descriptors") => {
            format!("raise the limit of open files (ulimit -n, now {n}) and try again")
        }
        _ => "try again when it is back".to_string(),
    };
    format!("this process is {what}, so live instances could not be asked: {raise}")
}

/// One line per candidate, as errors list them.
pub fn candidates(peers: &[Peer]) -> String {
    let rows: Vec<[String; 4]> = (peers.iter())
        .map(|p| {
            let m = &p.manifest;
            let mut row = candidate(&m.name, Some(m.pid), &m.workspace, &m.instance_id);
            if p.wire == Wire::Zcoder {
                row[3].push_str("  (zcoder)");
            }
            row
        })
        .collect();
    candidate_list(&rows)
}

/// A candidate as `candidate_list` shows it: its name, `pid N` or (a
/// stopped agent's spool, without a pid) `not running`, its workspace and
/// its id; escaped.
pub fn candidate(name: &str, pid: Option<u32>, workspace: &str, id: &str) -> [String; 4] {
    let pid = pid.map_or("not running".into(), |pid| format!("pid {pid}"));
    [
        escape(name).into_owned(),
        pid,
        escape(workspace).into_owned(),
        escape(id).into_owned(),
    ]
}

/// The candidates an error lists, in aligned columns: `candidates:`, then
/// one indented line each; with none, that no live instance runs. Every
/// list of candidates is printed here.
pub fn candidate_list(rows: &[[String; 4]]) -> String {
    if rows.is_empty() {
        return format!("no live instances {}", super::searched());
    }
    let lines: String = (crate::text::columns(rows).iter())
        .map(|l| format!("\n  {l}"))
        .collect();
    format!("candidates:{lines}")
}

/// The candidates of a sender's `no_target` result.
pub fn as_candidates(peers: &[Peer]) -> Vec<Candidate> {
    peers
        .iter()
        .map(|p| {
            let m = &p.manifest;
            Candidate {
                instance_id: m.instance_id.clone(),
                name: m.name.clone(),
                pid: Some(m.pid),
                workspace: m.workspace.clone(),
            }
        })
        .collect()
}

/// A spool a name has on this machine, found through its `meta.json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KnownSpool {
    #[serde(skip)]
    pub dir: PathBuf,
    pub name: String,
    pub workspace: String,
    /// Whether senders may store tasks in it while its name is not running.
    pub offline: bool,
    pub queued: usize,
    /// The agent's `--accept-from` / `--deny-from`, applied by senders.
    #[serde(skip)]
    pub policy: crate::text::glob::Policy,
}

impl KnownSpool {
    /// Since when its agent is stopped, in epoch seconds: the time of the
    /// last event its instance recorded in the transcript (it records its
    /// stopping last; after a crash, the last thing it did is when it was
    /// last known to run; tasks senders stored since then do not count),
    /// else, with none, when `meta.json` was written (its last start).
    pub fn stopped_since(&self) -> Option<f64> {
        crate::spool::events::last_time(&self.dir)
            .or_else(|| Some(crate::spool::modified_at(&self.dir.join("meta.json"))?.as_secs_f64()))
    }

    /// The live instance serving this spool's name and workspace, if any.
    pub fn running<'p>(&self, live: &'p [Peer]) -> Option<&'p Peer> {
        live.iter()
            .find(|p| p.manifest.name == self.name && p.manifest.workspace == self.workspace)
    }
}

/// Every named spool under the state home (`$XDG_STATE_HOME/baton/spool`).
pub fn known_spools() -> Vec<KnownSpool> {
    let spools = crate::spool::state_home().map(|home| home.join("baton").join("spool"));
    let Some(rd) = spools.ok().and_then(|dir| std::fs::read_dir(dir).ok()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let dir = e.path();
        if crate::spool::check_private_dir(&dir, "spool").is_err() {
            continue;
        }
        // Bounded and not through a symlink; a spool without a readable
        // meta.json names nobody.
        let Ok(meta) = crate::spool::Meta::read(&dir) else {
            continue;
        };
        if !registry::valid_name(&meta.name) {
            continue;
        }
        let queued = std::fs::read_dir(dir.join("inbox"))
            .map(|r| r.filter_map(|e| e.ok()).count())
            .unwrap_or(0);
        out.push(KnownSpool {
            dir,
            name: meta.name,
            workspace: meta.workspace,
            offline: meta.offline,
            queued,
            policy: crate::text::glob::Policy {
                accept_from: meta.accept_from,
                deny_from: meta.deny_from,
            },
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.workspace.cmp(&b.workspace)));
    out
}

/// What looking for a stopped name's spool found.
pub enum Stopped {
    One(KnownSpool),
    /// None is stopped, but this live instance serves one of the spools.
    Running(Box<Peer>),
    None,
    Several(Vec<KnownSpool>),
}

/// The one spool named `name` (in `workspace`, if given) that no live
/// instance serves: a running agent's spool is never a stopped one.
pub fn stopped(
    dirs: &[RegistryDir],
    name: &str,
    workspace: Option<&str>,
    timeout: Duration,
) -> Stopped {
    let live = registry::discover_named(dirs, timeout, name, &|m| m.name == name).peers;
    let (mut idle, busy): (Vec<KnownSpool>, Vec<KnownSpool>) = known_spools()
        .into_iter()
        .filter(|s| s.name == name && workspace.is_none_or(|w| w == s.workspace))
        .partition(|s| s.running(&live).is_none());
    match (idle.len(), busy.first().and_then(|s| s.running(&live))) {
        (1, _) => Stopped::One(idle.pop().expect("one spool")),
        (0, Some(p)) => Stopped::Running(Box::new(p.clone())),
        (0, None) => Stopped::None,
        _ => Stopped::Several(idle),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distance_counts_edits_and_swaps() {
        assert_eq!(distance("bta", "beta"), 1);
        assert_eq!(distance("beta", "beta"), 0);
        assert_eq!(distance("btea", "beta"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("caf\u{e9}", "cafe"), 1);
    }

    #[test]
    fn only_near_names_are_suggested() {
        assert_eq!(near("bta", "beta"), Some(1));
        assert_eq!(near("Beta", "beta"), Some(0));
        assert_eq!(near("beta", "beta"), None);
        // Two edits in a short name is another name.
        assert_eq!(near("ab", "cd"), None);
        assert_eq!(near("abc", "xbz"), None);
        assert_eq!(near("reviewr", "reviewer"), Some(1));
        assert_eq!(near("rveiwer", "reviewer"), Some(2));
        assert_eq!(near("rvwer", "reviewer"), None);
    }

    #[test]
    fn names_are_listed_nearest_first_three_at_most() {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(or_list(&names, "or"), "a, b or c");
        assert_eq!(or_list(&names[..2], "and"), "a and b");
        assert_eq!(or_list(&names[..1], "or"), "a");
    }
}
