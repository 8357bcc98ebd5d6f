//! The shared registry directory (DESIGN §3): choosing and checking it,
//! publishing and removing this instance's manifest, and discovering peers
//! (bounded scan, concurrent pings, stale cleanup), zcoder's registry
//! included.

use crate::client;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::files::{self, DirError};
use crate::sys;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const PROTOCOL: u64 = 1;
pub const MAX_MANIFEST: u64 = 16 * 1024;
pub const MAX_CANDIDATES: usize = 1024;
const MAX_FIELD: usize = 4096;
/// Pings run at most this many at a time.
const PING_CONCURRENCY: usize = 64;

/// `[A-Za-z0-9_.-]{1,100}`: instance ids and message ids.
pub fn valid_id(s: &str) -> bool {
    (1..=100).contains(&s.len()) && s.bytes().all(id_byte)
}

/// `[A-Za-z0-9_.-]{1,64}`: names.
pub fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(id_byte)
}

fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The default name: the workspace's basename, every character outside the
/// name grammar replaced by `_`, cut to 64 bytes.
pub fn default_name(workspace: &Path) -> String {
    let base = workspace
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii() && id_byte(c as u8) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        name = "root".into();
    }
    name
}

/// Which wire a peer speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    Jsonrpc,
    Zcoder,
}

impl Wire {
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::Jsonrpc => "jsonrpc",
            Wire::Zcoder => "zcoder",
        }
    }
}

/// A registry directory to scan, and the wire its instances speak.
#[derive(Clone, Debug)]
pub struct RegistryDir {
    pub path: PathBuf,
    pub wire: Wire,
}

/// One instance's manifest, exactly the fields of DESIGN §3.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub protocol: u64,
    pub instance_id: String,
    pub pid: u32,
    pub project: String,
    pub name: String,
    pub workspace: String,
    pub session_id: String,
    pub profile: String,
    pub model: String,
    pub socket: String,
    pub state: String,
    pub started_at: u64,
    pub wire: String,
    pub baton_version: String,
}

/// The registry directory the configuration selects, before any check.
pub fn chosen_dir(config: &Config) -> PathBuf {
    if let Some(d) = &config.dir {
        return d.clone();
    }
    if let Some(r) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        let r = PathBuf::from(r);
        if r.is_absolute() {
            return r.join("baton");
        }
    }
    tmp_base().join(format!("baton-{}", sys::uid()))
}

fn tmp_base() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty() && Path::new(v).is_absolute())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// zcoder's own registry directory, chosen as zcoder chooses it.
pub fn zcoder_dir() -> PathBuf {
    let absolute = |v: &std::ffi::OsString| !v.is_empty() && Path::new(v).is_absolute();
    if let Some(d) = std::env::var_os("ZCODER_RELAY_DIR").filter(absolute) {
        return PathBuf::from(d);
    }
    if let Some(r) = std::env::var_os("XDG_RUNTIME_DIR").filter(absolute) {
        return PathBuf::from(r).join("zcoder-agents");
    }
    tmp_base().join(format!("zcoder-{}-agents", sys::uid()))
}

/// Checks a registry directory without following a symlink: a real
/// directory, ours, private, and neither `/` nor `$HOME`.
pub fn check_dir(path: &Path) -> std::result::Result<(), String> {
    files::private_dir(path, false).map_err(|e| e.to_string())
}

/// Creates (mode 0700) and checks the registry directory, returning its
/// canonical path.
pub fn ensure_dir(config: &Config) -> Result<PathBuf> {
    ensure_private_dir(&chosen_dir(config), "registry")
}

/// Creates (mode 0700) and checks a registry directory (`what` names it
/// in errors), returning its canonical path.
pub fn ensure_private_dir(path: &Path, what: &str) -> Result<PathBuf> {
    let shown = path.display();
    files::private_dir(path, true).map_err(|e| match e {
        DirError::Create(e) => Error::Env(format!("cannot create {what} directory {shown}: {e}")),
        e => Error::Env(format!("unsafe {what} directory {shown}: {e}")),
    })?;
    fs::canonicalize(path).map_err(|e| Error::io("resolve", path, e))
}

/// The directories discovery scans: ours, and zcoder's when it exists and
/// passes the same checks.
pub fn scan_dirs(ours: &Path) -> Vec<RegistryDir> {
    let mut dirs = vec![RegistryDir {
        path: ours.to_path_buf(),
        wire: Wire::Jsonrpc,
    }];
    let z = zcoder_dir();
    if check_dir(&z).is_ok() {
        match fs::canonicalize(&z) {
            Ok(z) if z != ours => dirs.push(RegistryDir {
                path: z,
                wire: Wire::Zcoder,
            }),
            _ => {}
        }
    }
    dirs
}

pub fn manifest_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("a-{id}.json"))
}

pub fn socket_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("a-{id}.sock"))
}

/// Writes a manifest to a temporary file and renames it into place.
pub fn publish(dir: &Path, m: &Manifest) -> Result<()> {
    publish_value(
        dir,
        &m.instance_id,
        &serde_json::to_value(m).expect("serializes"),
    )
}

/// The manifest zcoder reads: exactly its own fields, the socket being the
/// one in its directory.
pub fn zcoder_manifest(m: &Manifest, socket: &Path) -> Value {
    serde_json::json!({
        "protocol": m.protocol,
        "instance_id": m.instance_id,
        "pid": m.pid,
        "project": m.project,
        "workspace": m.workspace,
        "session_id": m.session_id,
        "profile": m.profile,
        "model": m.model,
        "socket": socket.display().to_string(),
        "state": m.state,
        "started_at": m.started_at,
    })
}

/// Publishes any flat manifest object atomically as `a-<id>.json`.
pub fn publish_value(dir: &Path, id: &str, m: &Value) -> Result<()> {
    let tmp = dir.join(format!("t-{id}.tmp"));
    let dest = manifest_path(dir, id);
    let bytes = serde_json::to_vec(m).expect("a manifest serializes");
    files::write_private(&tmp, &dest, &bytes, false).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("publish manifest", &dest, e)
    })
}

pub fn unpublish(dir: &Path, id: &str) {
    let _ = fs::remove_file(manifest_path(dir, id));
}

/// Reads and validates one manifest file; `Err` names the problem.
pub fn read_manifest(dir: &RegistryDir, file: &Path) -> std::result::Result<Manifest, String> {
    let meta = fs::symlink_metadata(file).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("manifest is a symlink".into());
    }
    if !meta.is_file() {
        return Err("manifest is not a regular file".into());
    }
    if meta.uid() != sys::euid() {
        return Err(format!("manifest is owned by uid {}", meta.uid()));
    }
    if meta.len() > MAX_MANIFEST {
        return Err(format!("manifest is {} bytes, over 16 KiB", meta.len()));
    }
    let mut bytes = Vec::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(sys::O_NOFOLLOW)
        .open(file)
        .and_then(|f| f.take(MAX_MANIFEST + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    let id = file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("a-"))
        .and_then(|n| n.strip_suffix(".json"))
        .ok_or("manifest name is not a-<id>.json")?;
    parse_manifest(dir, id, &bytes)
}

/// Validates every field of a manifest as data.
pub fn parse_manifest(
    dir: &RegistryDir,
    id: &str,
    bytes: &[u8],
) -> std::result::Result<Manifest, String> {
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err("manifest is over 16 KiB".into());
    }
    let obj = crate::wire::parse_flat(bytes).map_err(|e| format!("manifest: {e}"))?;
    let string = |k: &str, required: bool| -> std::result::Result<String, String> {
        match obj.get(k) {
            Some(Value::String(s)) if s.len() <= MAX_FIELD => Ok(s.clone()),
            Some(Value::String(_)) => Err(format!("field {k} is too long")),
            None if !required => Ok(String::new()),
            Some(Value::Null) if !required => Ok(String::new()),
            None => Err(format!("field {k} is missing")),
            Some(_) => Err(format!("field {k} is not a string")),
        }
    };
    let integer = |k: &str| -> std::result::Result<u64, String> {
        obj.get(k)
            .ok_or(format!("field {k} is missing"))?
            .as_u64()
            .ok_or(format!("field {k} is not a non-negative integer"))
    };
    if integer("protocol")? != PROTOCOL {
        return Err("unsupported protocol".into());
    }
    let instance_id = string("instance_id", true)?;
    if instance_id != id || !valid_id(&instance_id) {
        return Err("instance_id does not match the file name".into());
    }
    let pid = integer("pid")?;
    if pid == 0 || pid > i32::MAX as u64 || !instance_id.starts_with(&format!("{pid}-")) {
        return Err("pid does not match the instance id".into());
    }
    let project = string("project", true)?;
    let mut name = string("name", dir.wire == Wire::Jsonrpc)?;
    if name.is_empty() {
        name = default_name(Path::new(&project));
    }
    if !valid_name(&name) {
        return Err("name does not match [A-Za-z0-9_.-]{1,64}".into());
    }
    let workspace = string("workspace", true)?;
    if !workspace.starts_with('/') {
        return Err("workspace is not an absolute path".into());
    }
    let session_id = match obj.get("session_id") {
        Some(Value::Number(n)) => n.to_string(),
        _ => string("session_id", false)?,
    };
    let profile = string("profile", true)?;
    if !matches!(profile.as_str(), "coding" | "sysadmin") {
        return Err("profile is not coding or sysadmin".into());
    }
    let model = string("model", false)?;
    let socket = string("socket", true)?;
    // A socket-activated agent listens on its name's wake socket.
    let wake =
        dir.wire == Wire::Jsonrpc && Path::new(&socket) == dir.path.join(format!("w-{name}.sock"));
    if Path::new(&socket) != socket_path(&dir.path, &instance_id) && !wake {
        return Err("socket is not <registry>/a-<id>.sock".into());
    }
    let state = string("state", true)?;
    if !matches!(state.as_str(), "ready" | "busy" | "paused") {
        return Err("state is not ready, busy or paused".into());
    }
    let started_at = integer("started_at")?;
    let wire = match dir.wire {
        Wire::Zcoder => "zcoder".to_string(),
        Wire::Jsonrpc => {
            let w = string("wire", true)?;
            if w != "jsonrpc" {
                return Err("wire is not jsonrpc".into());
            }
            w
        }
    };
    Ok(Manifest {
        protocol: PROTOCOL,
        instance_id,
        pid: pid as u32,
        project,
        name,
        workspace,
        session_id,
        profile,
        model,
        socket,
        state,
        started_at,
        wire,
        baton_version: string("baton_version", false)?,
    })
}

/// A live peer.
#[derive(Clone, Debug)]
pub struct Peer {
    pub manifest: Manifest,
    pub wire: Wire,
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
    pub stale: bool,
    #[serde(skip)]
    pub wire: Wire,
}

#[derive(Debug, Default)]
pub struct Discovery {
    pub peers: Vec<Peer>,
    pub skipped: Vec<Skipped>,
}

enum Candidate {
    Ok(Manifest, Wire),
    Bad(Skipped),
}

fn scan(dir: &RegistryDir, out: &mut Vec<Candidate>) {
    let Ok(rd) = fs::read_dir(&dir.path) else {
        return;
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("a-") && n.ends_with(".json"))
        .collect();
    names.sort();
    let total = names.len();
    for name in names.into_iter().take(MAX_CANDIDATES) {
        let path = dir.path.join(&name);
        let id = name[2..name.len() - 5].to_string();
        match read_manifest(dir, &path) {
            Ok(m) => out.push(Candidate::Ok(m, dir.wire)),
            Err(problem) => out.push(Candidate::Bad(Skipped {
                path,
                instance_id: valid_id(&id).then_some(id),
                manifest: None,
                problem,
                stale: false,
                wire: dir.wire,
            })),
        }
    }
    if total > MAX_CANDIDATES {
        out.push(Candidate::Bad(Skipped {
            path: dir.path.clone(),
            instance_id: None,
            manifest: None,
            problem: format!("{total} manifests; only the first {MAX_CANDIDATES} were scanned"),
            stale: false,
            wire: dir.wire,
        }));
    }
}

/// Scans the directories, pings every valid candidate concurrently, and
/// sorts the live ones by name (case-insensitive) then pid. `exclude` is
/// the caller's own instance id.
pub fn discover(dirs: &[RegistryDir], exclude: Option<&str>, timeout: Duration) -> Discovery {
    discover_matching(dirs, exclude, timeout, &|_| true)
}

/// Like `discover`, but pings only the candidates `keep` accepts (the
/// others are left out): resolving one name need not ping everyone.
pub fn discover_matching(
    dirs: &[RegistryDir],
    exclude: Option<&str>,
    timeout: Duration,
    keep: &dyn Fn(&Manifest) -> bool,
) -> Discovery {
    let mut candidates = Vec::new();
    for d in dirs {
        scan(d, &mut candidates);
    }
    let mut found = Discovery::default();
    let to_ping = triage(candidates, exclude, keep, &mut found.skipped);
    let results = ping_all(&to_ping, timeout);
    for ((mut m, w), r) in to_ping.into_iter().zip(results) {
        match r {
            Ok(state) => {
                m.state = state;
                found.peers.push(Peer {
                    manifest: m,
                    wire: w,
                });
            }
            Err((problem, unreachable)) => {
                let stale = unreachable && sys::pid_status(m.pid) == sys::PidStatus::Gone;
                let problem = if stale {
                    format!("stale: {problem} and pid {} is gone", m.pid)
                } else {
                    problem
                };
                found.skipped.push(skipped_peer(m, w, problem, stale));
            }
        }
    }
    found.peers.sort_by(|a, b| {
        a.manifest
            .name
            .to_lowercase()
            .cmp(&b.manifest.name.to_lowercase())
            .then(a.manifest.pid.cmp(&b.manifest.pid))
    });
    found
}

/// Sorts scanned candidates: the ones to ping are returned; bad ones and
/// those stale without a ping go to `skipped`; the caller's own entry and
/// those `keep` refuses are left out.
fn triage(
    candidates: Vec<Candidate>,
    exclude: Option<&str>,
    keep: &dyn Fn(&Manifest) -> bool,
    skipped: &mut Vec<Skipped>,
) -> Vec<(Manifest, Wire)> {
    let mut to_ping = Vec::new();
    // An instance published in both registries is one peer: its native
    // entry comes first (ours is scanned first) and wins.
    let mut seen = std::collections::HashSet::new();
    for c in candidates {
        let (m, w) = match c {
            Candidate::Ok(m, w) => (m, w),
            Candidate::Bad(s) => {
                skipped.push(s);
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
            skipped.push(skipped_peer(m, w, problem, true));
        } else if keep(&m) {
            to_ping.push((m, w));
        }
    }
    to_ping
}

/// Pings the peers, at most `PING_CONCURRENCY` at a time; the answers
/// come back in the peers' order.
fn ping_all(
    peers: &[(Manifest, Wire)],
    timeout: Duration,
) -> Vec<std::result::Result<String, (String, bool)>> {
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
                        h.join()
                            .unwrap_or(Err(("ping thread failed".into(), false)))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect()
}

/// A valid manifest that discovery did not list, and why.
fn skipped_peer(m: Manifest, wire: Wire, problem: String, stale: bool) -> Skipped {
    Skipped {
        path: manifest_path(
            Path::new(&m.socket).parent().unwrap_or(Path::new("/")),
            &m.instance_id,
        ),
        instance_id: Some(m.instance_id.clone()),
        problem,
        manifest: Some(m),
        stale,
        wire,
    }
}

/// Pings one peer; on failure returns the problem and whether the socket
/// was missing or refused connections (a sign of a dead instance).
fn ping_peer(
    m: &Manifest,
    wire: Wire,
    timeout: Duration,
) -> std::result::Result<String, (String, bool)> {
    let socket = Path::new(&m.socket);
    let r = match wire {
        Wire::Jsonrpc => client::ping(socket, &m.instance_id, timeout),
        Wire::Zcoder => client::zcoder_ping(socket, &m.instance_id, timeout),
    };
    r.map_err(|e| {
        let unreachable = e.is_unreachable();
        (e.to_string(), unreachable)
    })
}

/// Finds and removes the stale entries of our own registry without
/// pinging anyone alive: only an entry whose pid is gone is looked at, and
/// it is stale if its socket is missing or refuses connections (or is a
/// wake socket, which outlives its instances). Startup and `gc` use this,
/// so starting one instance among many costs no pings. Returns the ids
/// removed.
pub fn collect_stale(dir: &Path) -> Vec<String> {
    let reg = RegistryDir {
        path: dir.to_path_buf(),
        wire: Wire::Jsonrpc,
    };
    let mut candidates = Vec::new();
    scan(&reg, &mut candidates);
    let mut stale = Vec::new();
    for c in candidates {
        let Candidate::Ok(m, wire) = c else {
            continue;
        };
        if sys::pid_status(m.pid) != sys::PidStatus::Gone {
            continue;
        }
        let socket = Path::new(&m.socket);
        let is_wake = socket != socket_path(dir, &m.instance_id);
        let dead = is_wake
            || match std::os::unix::net::UnixStream::connect(socket) {
                Ok(_) => false,
                Err(e) => matches!(
                    e.raw_os_error(),
                    Some(sys::ECONNREFUSED) | Some(sys::ENOENT)
                ),
            };
        if dead {
            stale.push(Skipped {
                path: manifest_path(dir, &m.instance_id),
                instance_id: Some(m.instance_id.clone()),
                problem: "stale".into(),
                manifest: Some(m),
                stale: true,
                wire,
            });
        }
    }
    remove_stale(dir, &stale)
}

/// Removes the files of stale entries in `dir` (never the directory
/// itself): only names in the grammar, owned by us, of the right type.
pub fn remove_stale(dir: &Path, skipped: &[Skipped]) -> Vec<String> {
    let mut removed = Vec::new();
    for s in skipped
        .iter()
        .filter(|s| s.stale && s.wire == Wire::Jsonrpc)
    {
        let Some(id) = s.instance_id.as_deref().filter(|id| valid_id(id)) else {
            continue;
        };
        let mpath = manifest_path(dir, id);
        let spath = socket_path(dir, id);
        let me = sys::euid();
        let mut gone = false;
        if fs::symlink_metadata(&mpath).is_ok_and(|m| m.is_file() && m.uid() == me) {
            gone = fs::remove_file(&mpath).is_ok();
        }
        if fs::symlink_metadata(&spath).is_ok_and(|m| m.file_type().is_socket() && m.uid() == me) {
            gone |= fs::remove_file(&spath).is_ok();
        }
        if gone {
            removed.push(id.to_string());
        }
    }
    removed
}

/// A fresh instance id: `<pid>-<nonce>`, the nonce 16 decimal digits from
/// `/dev/urandom`.
pub fn new_instance_id() -> Result<String> {
    Ok(format!("{}-{}", std::process::id(), random_digits(16)?))
}

/// `n` random decimal digits from `/dev/urandom`.
pub fn random_digits(n: usize) -> Result<String> {
    let mut f = fs::File::open("/dev/urandom")
        .map_err(|e| Error::io("open", Path::new("/dev/urandom"), e))?;
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        f.read_exact(&mut buf)
            .map_err(|e| Error::io("read", Path::new("/dev/urandom"), e))?;
        // Rejection sampling keeps the digits uniform.
        for b in buf.iter().filter(|&&b| b < 250) {
            if out.len() == n {
                break;
            }
            out.push((b'0' + b % 10) as char);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        assert!(valid_id("42302-18473291"));
        assert!(valid_id(&"a".repeat(100)));
        assert!(!valid_id(&"a".repeat(101)));
        assert!(!valid_id(""));
        assert!(!valid_id("a b"));
        assert!(!valid_id("a/b"));
        assert!(valid_name(&"n".repeat(64)));
        assert!(!valid_name(&"n".repeat(65)));
    }

    #[test]
    fn default_names() {
        assert_eq!(default_name(Path::new("/w/weekly digest")), "weekly_digest");
        assert_eq!(default_name(Path::new("/w/été")), "_t_");
        assert_eq!(default_name(Path::new("/")), "root");
        assert_eq!(
            default_name(Path::new(&format!("/{}", "x".repeat(80)))).len(),
            64
        );
    }

    #[test]
    fn nonce_is_digits() {
        let d = random_digits(16).unwrap();
        assert_eq!(d.len(), 16);
        assert!(d.bytes().all(|b| b.is_ascii_digit()));
    }

    #[test]
    fn zcoder_manifest_is_accepted_without_baton_fields() {
        let dir = RegistryDir {
            path: PathBuf::from("/run/user/1000/zcoder-agents"),
            wire: Wire::Zcoder,
        };
        let bytes = br#"{"protocol":1,"instance_id":"42302-18473291","pid":42302,
            "project":"weekly digest","workspace":"/work/weekly-digest",
            "session_id":"1788012120_10392","profile":"coding","model":"qwen3-coder",
            "socket":"/run/user/1000/zcoder-agents/a-42302-18473291.sock",
            "state":"ready","started_at":1788012102}"#;
        let m = parse_manifest(&dir, "42302-18473291", bytes).unwrap();
        assert_eq!(m.name, "weekly_digest");
        assert_eq!(m.wire, "zcoder");
        let e = parse_manifest(
            &RegistryDir {
                path: PathBuf::from("/elsewhere"),
                wire: Wire::Zcoder,
            },
            "42302-18473291",
            bytes,
        )
        .unwrap_err();
        assert_eq!(e, "socket is not <registry>/a-<id>.sock");
    }
}
