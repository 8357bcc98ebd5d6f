//! What `baton doctor` judges of this host (docs/decisions.md, "baton
//! doctor"): the registry and state directories, the entries discovery
//! skipped, the live instances that do not answer, and the spools of
//! stopped names that hold tasks. Each verdict is a `Finding`; nothing is
//! changed, created or removed. The front end asks the live instances
//! what they need (`control/status`) and has the workers judge that.

use super::discover::Discovery;
use super::lookup::KnownSpool;
use super::{DirSource, Peer};
use crate::base::files::{self, DirError};
use crate::spool::Holdings;
use crate::text::sanitize::escape;
use serde::Serialize;
use std::path::Path;

spelled! {
    /// How a check came out: `fail` makes `baton doctor` exit 2.
    pub enum Level ("check result") {
        Ok = "ok",
        Warn = "warn",
        Fail = "fail",
    }
}

/// One line of `baton doctor`: the check's name (docs/protocol.md, "baton
/// doctor --json"), how it came out, and what was found, with the fix.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub result: Level,
    pub detail: String,
}

impl Finding {
    pub fn new(check: &'static str, result: Level, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            result,
            detail: detail.into(),
        }
    }
}

impl DirSource {
    /// Which rule of the registry's order chose the directory, in words.
    pub fn said(self) -> &'static str {
        match self {
            DirSource::BatonDir => "$BATON_DIR",
            DirSource::Runtime => "$XDG_RUNTIME_DIR/baton",
            DirSource::RunUser => "/run/user/UID/baton (XDG_RUNTIME_DIR is not set)",
            DirSource::Tmp => {
                "${TMPDIR:-/tmp}/baton-UID (neither BATON_DIR, XDG_RUNTIME_DIR nor a /run/user/UID of yours)"
            }
        }
    }
}

/// The order `registry::chosen_dir` follows, for a line that says which
/// rule was taken.
pub const ORDER: &str =
    "BATON_DIR, XDG_RUNTIME_DIR/baton, /run/user/UID/baton, ${TMPDIR:-/tmp}/baton-UID";

/// A directory baton keeps private: missing (`warn`: the first instance
/// makes it), unsafe (`fail`: not a directory, a symlink, not yours, group
/// or other access), or in order, with its mode.
pub fn private_dir(path: &Path) -> (Level, String) {
    use std::os::unix::fs::MetadataExt;
    let shown = escape(&path.display().to_string()).into_owned();
    match files::private_dir(path, false) {
        Ok(()) => {
            let mode = std::fs::symlink_metadata(path).map_or(0, |m| m.mode() & 0o7777);
            (Level::Ok, format!("{shown}: owned by you, mode {mode:04o}"))
        }
        Err(DirError::Inspect(e)) if e.kind() == std::io::ErrorKind::NotFound => (
            Level::Warn,
            format!("{shown} does not exist yet (the first instance makes it)"),
        ),
        Err(DirError::Inspect(e) | DirError::Create(e)) => (Level::Fail, format!("{shown}: {e}")),
        Err(DirError::Unsafe(why)) => (
            Level::Fail,
            format!("{shown} {why}: baton refuses to use it (chmod 700, or remove it)"),
        ),
    }
}

/// The registry directory `path`, chosen by `source`.
pub fn registry_dir(path: &Path, source: DirSource) -> Finding {
    let (level, said) = private_dir(path);
    let detail = format!("{said}; chosen by {} (order: {ORDER})", source.said());
    Finding::new("registry", level, detail)
}

/// The state directory (`$XDG_STATE_HOME/baton`, else
/// `~/.local/state/baton`), where the spools are: it and its `spool/`.
pub fn state_dir() -> Finding {
    let home = match crate::spool::state_home() {
        Ok(h) => h,
        Err(e) => return Finding::new("state", Level::Fail, e.to_string()),
    };
    let source = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(_) => "$XDG_STATE_HOME/baton",
        None => "~/.local/state/baton (XDG_STATE_HOME is not set)",
    };
    let dir = home.join("baton");
    let (mut level, mut said) = private_dir(&dir);
    if level == Level::Ok {
        let (spool_level, spool_said) = private_dir(&dir.join("spool"));
        if spool_level != Level::Ok {
            (level, said) = (spool_level, spool_said);
        }
    }
    Finding::new("state", level, format!("{said}; chosen by {source}"))
}

/// What discovery found that is not in order: each entry it skipped
/// (`warn`: a stale one is `baton gc`'s to remove, another is named with
/// its problem), a scan cut short (`warn`), a resource this process ran
/// short of (`fail`: a peer may be missing from the rest), and each live
/// instance, `fail` when it did not answer its ping.
pub fn discovered(found: &Discovery) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in &found.skipped {
        let path = escape(&s.path.display().to_string()).into_owned();
        let problem = escape(&s.problem).into_owned();
        let detail = match s.problem.starts_with("stale") {
            true => format!("{path}: {problem}; run baton gc to remove it"),
            false => format!("{path}: skipped: {problem}"),
        };
        out.push(Finding::new("manifest", Level::Warn, detail));
    }
    for t in &found.truncated {
        let path = escape(&t.path.display().to_string()).into_owned();
        out.push(Finding::new(
            "manifest",
            Level::Warn,
            format!("{path}: {}", t.problem()),
        ));
    }
    if let Some(what) = found.shortage {
        let detail = format!("not every instance was asked: this process is {what}");
        out.push(Finding::new("ping", Level::Fail, detail));
    }
    out.extend(found.peers.iter().map(answered));
    out
}

/// A live instance's ping: `fail` when it did not answer in time.
fn answered(peer: &Peer) -> Finding {
    let pid = peer.manifest.pid;
    match peer.unresponsive() {
        true => Finding::new(
            "ping",
            Level::Fail,
            format!(
                "{peer}, pid {pid}: unresponsive: its pid is there but its socket did not answer (stopped or stuck: kill -CONT {pid}, or baton stop it)"
            ),
        ),
        false => Finding::new(
            "ping",
            Level::Ok,
            format!(
                "{peer}, pid {pid}: answers, {}",
                escape(&peer.manifest.state)
            ),
        ),
    }
}

/// The `count` interrupted tasks of `name` (a turn ended without an
/// outcome; they wait for the operator's decision), `ids` those read:
/// `warn`, with the command that decides; `stopped`: its agent must run
/// first.
pub fn interrupted(name: &str, count: usize, ids: &[String], stopped: bool) -> Option<Finding> {
    if count == 0 {
        return None;
    }
    let name = escape(name).into_owned();
    let ids: Vec<String> = ids.iter().map(|id| escape(id).into_owned()).collect();
    let start = match stopped {
        true => format!("start it (baton wake {name}), then "),
        false => String::new(),
    };
    let (listed, id) = match ids.first() {
        Some(first) => (format!(" ({})", ids.join(", ")), first.clone()),
        None => (String::new(), "MESSAGE_ID".into()),
    };
    let detail = format!(
        "{name}: {count} interrupted task(s) wait for a decision{listed}: {start}baton inbox requeue {name} {id} (or baton inbox discard {name} {id})"
    );
    Some(Finding::new("interrupted", Level::Warn, detail))
}

/// The ids of the interrupted tasks in the spool at `dir`, read as
/// `read_listing` reads (no lock, nothing moved).
pub fn interrupted_ids(dir: &Path) -> Vec<String> {
    crate::spool::read_listing(dir)
        .map(|l| l.interrupted.into_iter().map(|s| s.message_id).collect())
        .unwrap_or_default()
}

/// The file `tool` is on `PATH`, if it is there and executable.
pub fn on_path(tool: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    let executable = |m: std::fs::Metadata| m.is_file() && m.permissions().mode() & 0o111 != 0;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| std::fs::metadata(p).is_ok_and(executable))
}

/// The spools of stopped names (no live instance in `live` serves them)
/// and what each holds, for those that hold tasks: queued ones wait for
/// their agent; interrupted ones for a decision too.
pub fn stopped_spools(live: &[Peer]) -> Vec<(KnownSpool, Holdings)> {
    super::lookup::known_spools()
        .into_iter()
        .filter(|s| s.running(live).is_none())
        .filter_map(|s| {
            let held = Holdings::read(&s.dir).ok()?;
            let holds = held.queued + held.processing + held.interrupted > 0;
            holds.then_some((s, held))
        })
        .collect()
}

/// A stopped name's spool that holds tasks: `warn`, they wait for their
/// agent.
pub fn stopped_spool(spool: &KnownSpool, held: &Holdings) -> Finding {
    let name = escape(&spool.name).into_owned();
    let detail = format!(
        "{name} ({}) is stopped and its spool holds {} queued, {} processing and {} interrupted task(s): they wait for their agent (baton list --offline; baton wake {name} or start it)",
        escape(&spool.workspace),
        held.queued,
        held.processing,
        held.interrupted,
    );
    Finding::new("spool", Level::Warn, detail)
}
