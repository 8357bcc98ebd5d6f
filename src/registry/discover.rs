//! Discovery (docs/protocol.md §7): a bounded scan of the registry
//! directories, concurrent pings, and the verdict on each manifest; an
//! exact instance id is found without a scan.

use super::{
    MAX_CANDIDATES, MAX_ENTRIES, Manifest, RegistryDir, Wire, manifest_path,
    read_manifest_or_short, valid_id,
};
use crate::base::error::Invalid;
use crate::base::files::Dir;
use crate::client;
use crate::sys;
use crate::wire::State;
use crate::wire::answer::Load;
use serde::Serialize;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Pings run at most this many at a time.
const PING_CONCURRENCY: usize = 64;

/// The state discovery gives a peer whose pid is alive but whose socket
/// did not answer the ping in time (stopped, or stuck): it is there, not
/// missing, and nothing can be delivered to it now.
pub const UNRESPONSIVE: &str = "unresponsive";

/// A live peer: one that answered its ping, or an unresponsive one.
#[derive(Clone, Debug)]
pub struct Peer {
    pub manifest: Manifest,
    pub wire: Wire,
    /// What waits there, as its ping said: none from a zcoder peer, an
    /// earlier baton, or one that did not answer.
    pub load: Option<Load>,
}

/// `NAME (ID)`, the name escaped for a terminal.
impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = crate::text::sanitize::escape(&self.manifest.name);
        write!(f, "{name} ({})", self.manifest.instance_id)
    }
}

impl Peer {
    /// Whether its pid is alive but its socket did not answer in time.
    pub fn unresponsive(&self) -> bool {
        self.manifest.state == UNRESPONSIVE
    }

    /// Whether its process has exited: its pid is gone or a zombie (where
    /// `/proc` tells), else (no `/proc`) its manifest is gone and its
    /// socket refuses connections.
    pub fn exited(&self) -> bool {
        let pid = self.manifest.pid;
        if sys::pid_status(pid) == sys::PidStatus::Gone {
            return true;
        }
        if let Some(zombie) = sys::is_zombie(pid) {
            return zombie;
        }
        let socket = Path::new(&self.manifest.socket);
        let manifest = socket
            .parent()
            .map(|d| manifest_path(d, &self.manifest.instance_id));
        manifest.is_some_and(|m| fs::symlink_metadata(m).is_err())
            && std::os::unix::net::UnixStream::connect(socket).is_err()
    }

    /// The longest body it accepts, and whose limit that is, as a refusal
    /// names it: zcoder's own, else the `BATON_MAX_MESSAGE_BYTES` its
    /// manifest carries, else (an earlier baton's manifest) the default,
    /// which is the most an earlier baton ever accepted.
    pub fn body_limit(&self) -> (usize, String) {
        use crate::base::config::{DEFAULT_MESSAGE_BYTES, ZCODER_MESSAGE_BYTES};
        if self.wire == Wire::Zcoder {
            return (ZCODER_MESSAGE_BYTES, "zcoder's own limit".into());
        }
        let name = crate::text::sanitize::escape(&self.manifest.name);
        let limit = (self.manifest.max_message_bytes).map_or(DEFAULT_MESSAGE_BYTES, |n| n as usize);
        (limit, format!("BATON_MAX_MESSAGE_BYTES at {name}"))
    }

    /// The pid to signal, given the id and pid its socket answered with
    /// (`control/status`: an instance reports its own): the manifest's if
    /// they are the manifest's, so that a stale manifest whose pid was
    /// reused never gets another process killed. The check needs no
    /// `/proc`, so it is the same on every platform.
    pub fn verified_pid(&self, instance_id: &str, pid: u32) -> Option<u32> {
        let m = &self.manifest;
        (instance_id == m.instance_id && pid == m.pid && m.pid != 0).then_some(m.pid)
    }

    /// What a command says when it needed an answer from an unresponsive
    /// peer.
    pub fn silence(&self, timeout: Duration) -> String {
        format!(
            "{} ({}) did not answer within {} s",
            crate::text::sanitize::escape(&self.manifest.name),
            self.manifest.instance_id,
            seconds(timeout)
        )
    }
}

/// A duration in seconds as a person writes it: `2`, `0.5`.
fn seconds(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Why a ping failed.
#[derive(Default)]
struct PingFailure {
    problem: String,
    /// The socket was missing or refused connections.
    unreachable: bool,
    /// A connection was made but no answer came in time.
    timed_out: bool,
    /// This process ran short of a resource to ask.
    shortage: Option<&'static str>,
}

/// A manifest that discovery did not list, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Manifest>,
    pub problem: String,
    #[serde(skip)]
    pub wire: Wire,
}

/// A directory whose scan stopped before its end, and how far.
#[derive(Clone, Debug, Serialize)]
pub struct Truncated {
    pub path: PathBuf,
    pub wire: Wire,
    /// Manifests listed but not read: `MAX_CANDIDATES` valid ones came
    /// first.
    pub not_looked_at: usize,
    /// The directory held more than `MAX_ENTRIES` entries: those past
    /// them were not even listed.
    pub unlisted: bool,
}

impl Truncated {
    /// What was left out, in a sentence.
    pub fn problem(&self) -> String {
        let n = self.not_looked_at;
        let manifests = if n == 1 { "manifest" } else { "manifests" };
        if self.unlisted {
            format!(
                "{n} {manifests} not looked at, nor any entry past the first {MAX_ENTRIES} of the directory"
            )
        } else {
            format!(
                "{n} {manifests} not looked at: discovery reads at most {MAX_CANDIDATES} valid manifests per directory"
            )
        }
    }
}

#[derive(Debug, Default)]
pub struct Discovery {
    pub peers: Vec<Peer>,
    pub skipped: Vec<Skipped>,
    /// The directories whose scan was cut short.
    pub truncated: Vec<Truncated>,
    /// What this process ran short of to ask a peer, if it did: a peer
    /// not listed for it may be live.
    pub shortage: Option<&'static str>,
}

pub(super) enum Candidate {
    /// And whether its socket's name was missing from the directory's
    /// entries when they were listed (`socket_present` need not look).
    Ok(Manifest, Wire, bool),
    Bad(Skipped),
    /// Not read: this process ran short of what it needed (no word on
    /// the manifest, which is neither listed nor removed).
    Short(&'static str),
}

/// Reads `file`, the manifest of `id` in `dir`, into a candidate.
fn candidate(dir: &RegistryDir, held: Option<&Dir>, file: PathBuf, id: &str) -> Candidate {
    candidate_among(dir, held, file, id, None)
}

/// `candidate`, knowing the names of the sockets among `dir`'s entries
/// when they are known.
fn candidate_among(
    dir: &RegistryDir,
    held: Option<&Dir>,
    file: PathBuf,
    id: &str,
    socks: Option<&std::collections::HashSet<&str>>,
) -> Candidate {
    let read = match client::is_abstract(&dir.path) {
        true => Ok(super::operators::manifest(dir, id).map_err(Invalid)),
        false => read_manifest_or_short(dir, &file, held),
    };
    match read {
        Err(what) => Candidate::Short(what),
        Ok(Ok(m)) => {
            let own = format!("a-{id}.sock");
            let unlisted = socks.is_some_and(|socks| !socks.contains(own.as_str()))
                && m.socket
                    .strip_suffix(&own)
                    .and_then(|d| d.strip_suffix('/'))
                    == dir.path.to_str();
            Candidate::Ok(m, dir.wire, unlisted)
        }
        Ok(Err(problem)) => Candidate::Bad(Skipped {
            path: file,
            instance_id: valid_id(id).then(|| id.to_string()),
            manifest: None,
            problem: problem.0,
            wire: dir.wire,
        }),
    }
}

/// `scan_ids` for one name: a manifest whose name entry (`n-<id>@<name>`,
/// `registry::name_path`) names another is passed over unread; the
/// others (that name's, and those without an entry) are read.
pub(super) fn scan_for_name(
    dir: &RegistryDir,
    out: &mut Vec<Candidate>,
    name: &str,
) -> Option<Truncated> {
    let (names, unlisted) = list(dir)?;
    let others: std::collections::HashSet<&str> = (names.iter())
        .filter_map(|n| super::parse_name_entry(n))
        .filter(|(_, n)| *n != name)
        .map(|(id, _)| id)
        .collect();
    read_listed(dir, &names, unlisted, out, &|id| !others.contains(id))
}

/// Lists at most `MAX_ENTRIES` entries of a directory, then reads its
/// manifests (`a-*.json`) in byte order until `MAX_CANDIDATES` of them are
/// valid: a file that is not a manifest costs a look, never a place, and
/// the scan stays bounded in time however full the directory is. Only
/// the manifests whose id `read` accepts (by its name alone) are read;
/// the others are passed over, as if absent.
pub(super) fn scan_ids(
    dir: &RegistryDir,
    out: &mut Vec<Candidate>,
    read: &dyn Fn(&str) -> bool,
) -> Option<Truncated> {
    let (names, unlisted) = list(dir)?;
    read_listed(dir, &names, unlisted, out, read)
}

/// The names of at most `MAX_ENTRIES` entries of a directory, and
/// whether there were more.
pub(super) fn list(dir: &RegistryDir) -> Option<(Vec<String>, bool)> {
    if client::is_abstract(&dir.path) {
        return Some((super::operators::names(dir), false));
    }
    let mut entries = fs::read_dir(&dir.path).ok()?;
    let names: Vec<String> = (entries.by_ref().take(MAX_ENTRIES))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let unlisted = entries.next().is_some();
    Some((names, unlisted))
}

/// Reads the manifests (`a-*.json`) among `names` in byte order, those
/// `read` accepts, until `MAX_CANDIDATES` of them are valid.
fn read_listed(
    dir: &RegistryDir,
    names: &[String],
    unlisted: bool,
    out: &mut Vec<Candidate>,
    read: &dyn Fn(&str) -> bool,
) -> Option<Truncated> {
    let mut manifests: Vec<&String> = (names.iter())
        .filter(|n| n.starts_with("a-") && n.ends_with(".json"))
        .collect();
    // In the file names' byte order.
    manifests.sort_unstable();
    let ids: Vec<&str> = (manifests.iter()).map(|n| &n[2..n.len() - 5]).collect();
    let mut valid = 0;
    let mut looked = 0;
    // Each manifest opened in the directory, not walked to from `/`.
    let held = (!client::is_abstract(&dir.path))
        .then(|| Dir::open(&dir.path).ok())
        .flatten();
    let socks: Option<std::collections::HashSet<&str>> = held.as_ref().map(|_| {
        (names.iter())
            .filter(|n| n.ends_with(".sock"))
            .map(String::as_str)
            .collect()
    });
    for id in &ids {
        if valid == MAX_CANDIDATES {
            break;
        }
        looked += 1;
        if !read(id) {
            continue;
        }
        let file = dir.path.join(format!("a-{id}.json"));
        let c = candidate_among(dir, held.as_ref(), file, id, socks.as_ref());
        if matches!(c, Candidate::Ok(..)) {
            valid += 1;
        }
        out.push(c);
    }
    let not_looked_at = ids.len() - looked;
    (not_looked_at > 0 || unlisted).then(|| Truncated {
        path: dir.path.clone(),
        wire: dir.wire,
        not_looked_at,
        unlisted,
    })
}

/// Scans the directories, pings every valid candidate concurrently, and
/// sorts the live ones by name (case-insensitive) then pid. `exclude` is
/// the caller's own instance id.
pub fn discover(dirs: &[RegistryDir], exclude: Option<&str>, timeout: Duration) -> Discovery {
    discover_matching(dirs, exclude, timeout, &|_| true)
}

/// `discover_matching` for candidates of one `name` at most (`keep`
/// accepts none other): the manifests of other names are not even read
/// where their name entries say so.
pub fn discover_named(
    dirs: &[RegistryDir],
    timeout: Duration,
    name: &str,
    keep: &dyn Fn(&Manifest) -> bool,
) -> Discovery {
    let (candidates, truncated) = scan_all(dirs, |d, out| scan_for_name(d, out, name));
    let found = settle(candidates, None, timeout, keep);
    Discovery { truncated, ..found }
}

/// Like `discover`, but pings only the candidates `keep` accepts (the
/// others are left out): resolving one name need not ping everyone.
pub fn discover_matching(
    dirs: &[RegistryDir],
    exclude: Option<&str>,
    timeout: Duration,
    keep: &dyn Fn(&Manifest) -> bool,
) -> Discovery {
    let (candidates, truncated) = scan_all(dirs, |d, out| scan_ids(d, out, &|_| true));
    let found = settle(candidates, exclude, timeout, keep);
    Discovery { truncated, ..found }
}

/// What `scan` reads of each directory, and the directories whose scan
/// stopped before its end.
fn scan_all(
    dirs: &[RegistryDir],
    mut scan: impl FnMut(&RegistryDir, &mut Vec<Candidate>) -> Option<Truncated>,
) -> (Vec<Candidate>, Vec<Truncated>) {
    let mut candidates = Vec::new();
    let truncated = (dirs.iter())
        .filter_map(|d| scan(d, &mut candidates))
        .collect();
    (candidates, truncated)
}

/// The best native peer of `name` that `keep` accepts and answers its
/// ping, best by
/// `rank` (lowest first; ties by name, case-insensitively, then pid, as
/// discovery sorts): the manifests are read and the kernel rules out the
/// stale ones, then the candidates are pinged one at a time, best first,
/// until one answers. One that does not answer (refused, or
/// unresponsive) is passed over for the next.
pub fn first_answering<K: Ord>(
    dirs: &[RegistryDir],
    timeout: Duration,
    name: &str,
    keep: &dyn Fn(&Manifest) -> bool,
    rank: &dyn Fn(&Manifest) -> K,
) -> Option<Peer> {
    let (candidates, _) = scan_all(dirs, |d, out| scan_for_name(d, out, name));
    let mut found = Discovery::default();
    let mut to_ping = triage(candidates, None, keep, &mut found);
    to_ping.retain(|(_, w)| *w == Wire::Jsonrpc);
    to_ping.sort_by_cached_key(|(m, _)| (rank(m), m.name.to_lowercase(), m.pid));
    to_ping.into_iter().find_map(|(mut m, wire)| {
        let (state, load) = ping_peer(&m, wire, timeout).ok()?;
        m.state = state.to_string();
        Some(Peer {
            manifest: m,
            wire,
            load,
        })
    })
}

/// The live instance with exactly this id, found without a scan: its
/// manifest is `a-<id>.json`, read directly in each directory (ours
/// first), so no number of other files in the registry can hide it.
pub fn find_id(dirs: &[RegistryDir], id: &str, timeout: Duration) -> Option<Peer> {
    if !valid_id(id) {
        return None;
    }
    let candidates = dirs
        .iter()
        .map(|d| (d, manifest_path(&d.path, id)))
        .filter(|(_, file)| fs::symlink_metadata(file).is_ok())
        .map(|(d, file)| candidate(d, None, file, id))
        .collect();
    settle(candidates, None, timeout, &|_| true).peers.pop()
}

/// Pings the candidates `keep` accepts and sorts the live ones by name
/// (case-insensitive) then pid.
fn settle(
    candidates: Vec<Candidate>,
    exclude: Option<&str>,
    timeout: Duration,
    keep: &dyn Fn(&Manifest) -> bool,
) -> Discovery {
    let mut found = Discovery::default();
    let to_ping = triage(candidates, exclude, keep, &mut found);
    let results = ping_all(&to_ping, timeout);
    for ((mut m, wire), r) in to_ping.into_iter().zip(results) {
        let mut load = None;
        m.state = match r {
            Ok((state, said)) => {
                load = said;
                state.to_string()
            }
            // A pid that is there with a socket that does not answer is
            // a peer that is stopped or stuck, not a missing one.
            Err(f) if f.timed_out && sys::pid_status(m.pid) != sys::PidStatus::Gone => {
                UNRESPONSIVE.to_string()
            }
            Err(PingFailure {
                shortage: Some(what),
                ..
            }) => {
                found.shortage = Some(what);
                let problem = format!("not asked: this process is {what}");
                found.skipped.push(skipped_peer(m, wire, problem));
                continue;
            }
            Err(f) => {
                let stale = f.unreachable && sys::pid_status(m.pid) == sys::PidStatus::Gone;
                let problem = if stale {
                    format!("stale: {} and pid {} is gone", f.problem, m.pid)
                } else {
                    f.problem
                };
                found.skipped.push(skipped_peer(m, wire, problem));
                continue;
            }
        };
        found.peers.push(Peer {
            manifest: m,
            wire,
            load,
        });
    }
    (found.peers).sort_by_cached_key(|p| (p.manifest.name.to_lowercase(), p.manifest.pid));
    found
}

/// Sorts scanned candidates: the ones to ping are returned; bad ones and
/// those stale without a ping go to `skipped`; the caller's own entry and
/// those `keep` refuses are left out.
fn triage(
    candidates: Vec<Candidate>,
    exclude: Option<&str>,
    keep: &dyn Fn(&Manifest) -> bool,
    found: &mut Discovery,
) -> Vec<(Manifest, Wire)> {
    let skipped = &mut found.skipped;
    let mut to_ping = Vec::new();
    // An instance published in both registries is one peer: its native
    // entry comes first (ours is scanned first) and wins.
    let mut seen = std::collections::HashSet::new();
    for c in candidates {
        let (m, w, unlisted) = match c {
            Candidate::Ok(m, w, unlisted) => (m, w, unlisted),
            Candidate::Bad(s) => {
                skipped.push(s);
                continue;
            }
            Candidate::Short(what) => {
                found.shortage = Some(what);
                continue;
            }
        };
        if !seen.insert(m.instance_id.clone()) || Some(m.instance_id.as_str()) == exclude {
            continue;
        }
        // A wake socket outlives the instances served on it (systemd
        // keeps listening): its answer says nothing about this one, and
        // a ping would start the agent again. A manifest on it whose pid
        // is gone (left by a crash) is stale.
        if w == Wire::Jsonrpc
            && m.socket.ends_with(&format!("/w-{}.sock", m.name))
            && sys::pid_status(m.pid) == sys::PidStatus::Gone
        {
            let problem = format!(
                "stale: its instance (pid {}) is gone; the wake socket stays",
                m.pid
            );
            skipped.push(skipped_peer(m, w, problem));
        } else if keep(&m) {
            match unasked(&m, unlisted) {
                Some(problem) => skipped.push(skipped_peer(m, w, problem)),
                None => to_ping.push((m, w)),
            }
        }
    }
    to_ping
}

/// Why the kernel says a manifest's instance is gone, with no connection
/// to its socket: its pid is gone (`kill(pid, 0)`: `ESRCH`), or it is
/// another process's now (its start time in `/proc` is not the one the
/// manifest recorded). `None`: it may be there, and only a ping tells;
/// so always for a manifest written in another pid namespace (a
/// container sharing the registry), or one that does not say which.
pub(super) fn kernel_says_stale(m: &Manifest) -> Option<String> {
    if m.pid_ns.is_none() || m.pid_ns != sys::pid_namespace() {
        return None;
    }
    if sys::pid_status(m.pid) == sys::PidStatus::Gone {
        return Some(format!("pid {} is gone", m.pid));
    }
    let (recorded, now) = (m.process_start?, sys::process_start(m.pid)?);
    (recorded != now).then(|| {
        format!(
            "pid {} is another process now (started at tick {now}, not {recorded})",
            m.pid
        )
    })
}

/// Why a candidate is skipped without a connection (`None`: only a ping
/// tells). Its socket may not be connected to (`socket_present`: never
/// stale); or the kernel says it is stale (`kernel_says_stale`); or
/// (issue 47) its socket file is missing, so a connection would fail,
/// and the verdict is the one that failure gives (stale if the pid is
/// gone too); or it does not say its pid namespace (zcoder's, an earlier
/// baton's) and `kill(pid, 0)` says `ESRCH`. Such a manifest is taken to
/// be of this namespace, as every registry is one user's on one host
/// (docs/decisions.md); one that names another namespace is still asked.
fn unasked(m: &Manifest, unlisted: bool) -> Option<String> {
    // (`unlisted`: its name was not among the directory's entries.)
    let look = || {
        if unlisted {
            Ok(false)
        } else {
            socket_present(m)
        }
    };
    let present = match look() {
        Err(problem) => return Some(problem.0),
        Ok(present) => present,
    };
    if let Some(why) = kernel_says_stale(m) {
        return Some(format!("stale: {why}"));
    }
    let gone = || sys::pid_status(m.pid) == sys::PidStatus::Gone;
    if !present {
        // What the ping's connect would have said (worded once).
        static SAID: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let e = std::io::Error::from_raw_os_error(sys::ENOENT);
            client::ClientError::Connect(e).to_string()
        });
        let problem = SAID.clone();
        return Some(match gone() {
            true => format!("stale: {problem} and pid {} is gone", m.pid),
            false => problem,
        });
    }
    (m.pid_ns.is_none() && gone()).then(|| format!("stale: pid {} is gone", m.pid))
}

/// The pid an instance id (`<pid>-<nonce>`) names, if it is one.
pub(super) fn id_pid(id: &str) -> Option<u32> {
    let pid: u32 = id.split_once('-')?.0.parse().ok()?;
    (1..=i32::MAX as u32).contains(&pid).then_some(pid)
}

/// Pings the peers, at most `PING_CONCURRENCY` at a time; the answers
/// come back in the peers' order.
fn ping_all(peers: &[(Manifest, Wire)], timeout: Duration) -> Vec<Result<Pinged, PingFailure>> {
    peers
        .chunks(PING_CONCURRENCY)
        .flat_map(|chunk| {
            std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|(m, w)| s.spawn(move || ping_peer(m, *w, timeout)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or(Err(PingFailure {
                            problem: "ping thread failed".into(),
                            ..PingFailure::default()
                        }))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect()
}

/// A valid manifest that discovery did not list, and why.
fn skipped_peer(m: Manifest, wire: Wire, problem: String) -> Skipped {
    Skipped {
        path: manifest_path(
            Path::new(&m.socket).parent().unwrap_or(Path::new("/")),
            &m.instance_id,
        ),
        instance_id: Some(m.instance_id.clone()),
        problem,
        manifest: Some(m),
        wire,
    }
}

/// A peer's answer to its ping: its state, and what waits there where it
/// said.
type Pinged = (State, Option<Load>);

/// Pings one peer; on failure says why, and whether the socket was
/// missing or refused connections (a sign of a dead instance) or did not
/// answer in time (a sign of a stopped one).
fn ping_peer(m: &Manifest, wire: Wire, timeout: Duration) -> Result<Pinged, PingFailure> {
    socket_present(m).map_err(|problem| PingFailure {
        problem: problem.0,
        ..PingFailure::default()
    })?;
    let socket = Path::new(&m.socket);
    let r = match wire {
        Wire::Jsonrpc => client::ping(socket, &m.instance_id, timeout),
        Wire::Zcoder => client::zcoder_ping(socket, &m.instance_id, timeout).map(|s| (s, None)),
    };
    r.map_err(|e| PingFailure {
        problem: e.to_string(),
        unreachable: e.is_unreachable(),
        timed_out: matches!(e, client::ClientError::Timeout),
        shortage: e.shortage(),
    })
}

/// Whether discovery may connect to a manifest's socket: not a symlink
/// (which could lead out of the registry), a socket, and ours unless it is
/// a wake socket (a service manager's); and whether the socket file is
/// there (an abstract socket, which has no file, counts as there). A
/// missing one is for the ping to find, which then tells a dead instance
/// by it.
pub(super) fn socket_present(m: &Manifest) -> Result<bool, Invalid> {
    let path = Path::new(&m.socket);
    if client::is_abstract(path) {
        return Ok(true);
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("socket: {e}").into()),
    };
    if meta.file_type().is_symlink() {
        return Err("socket is a symlink".into());
    }
    if !meta.file_type().is_socket() {
        return Err("socket is not a socket".into());
    }
    let own = path
        .file_name()
        .is_some_and(|n| *n == *format!("a-{}.sock", m.instance_id));
    if own && meta.uid() != crate::base::accounts::owner() {
        return Err(format!("socket is owned by uid {}", meta.uid()).into());
    }
    Ok(true)
}
