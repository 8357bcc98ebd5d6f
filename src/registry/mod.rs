//! The shared registry directory (docs/protocol.md §7): choosing and checking it,
//! publishing and removing this instance's manifest; `manifest` reads one
//! manifest, `discover` finds the live peers (bounded scan, an exact id
//! without one, concurrent pings), `clean` removes stale entries, zcoder's
//! registry included where it applies; `health` is what `baton doctor`
//! judges of them.

pub mod health;
pub mod lookup;

mod clean;
mod discover;
mod manifest;
pub mod operators;

pub use clean::{Collected, MALFORMED_AGE, collect_stale};
pub use discover::{
    Discovery, Peer, Skipped, Truncated, UNRESPONSIVE, discover, discover_matching, discover_named,
    find_id, first_answering,
};
pub use manifest::{Manifest, parse_manifest, read_manifest, read_manifest_or_short};

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::base::files::{self, DirError};
use crate::sys;
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use crate::wire::PROTOCOL;
use crate::wire::id_byte;
pub const MAX_MANIFEST: u64 = 16 * 1024;
/// Valid manifests read per directory: junk does not count. Past it a
/// name is not resolved, and the error says so.
pub const MAX_CANDIDATES: usize = 10_000;
/// Directory entries listed per directory, whatever they are: a bound on
/// the scan's time, room for four entries (a manifest, its socket, the
/// manifest being rewritten, and more) of each of `MAX_CANDIDATES`
/// instances.
pub const MAX_ENTRIES: usize = 4 * MAX_CANDIDATES;

/// `[A-Za-z0-9_.-]{1,100}`: instance ids and message ids (`wire`'s, which
/// the spool checks too).
pub use crate::wire::valid_text_id as valid_id;

/// The sender id a plain command line (not an instance) gives in a zcoder
/// `enqueue`, whose every sender must have one: `cli-<pid>`. No instance
/// id has that form (they begin with their pid).
pub fn plain_sender_id(pid: u32) -> String {
    format!("cli-{pid}")
}

/// Whether a zcoder sender id is a plain command line's (`cli-<pid>`):
/// such a sender claims no instance, so there is nothing to verify.
pub fn is_plain_sender_id(id: &str) -> bool {
    id.strip_prefix("cli-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `[A-Za-z0-9_.-]{1,64}`, other than `.` and `..`: names, as a peer
/// may spell them (a zcoder project's, an older baton's).
pub fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(id_byte) && s != "." && s != ".."
}

/// A name `serve` takes: `valid_name`, starting with a letter or a digit
/// (so that it is never taken for an option, `-x`, nor hidden, `.x`).
pub fn valid_new_name(s: &str) -> bool {
    valid_name(s) && s.as_bytes()[0].is_ascii_alphanumeric()
}

/// The default name (docs/protocol.md §2): the workspace's basename with
/// each Latin letter with diacritics as its base letter (`café` →
/// `cafe`), every other character outside the name grammar as `_`, cut
/// to 64 bytes, and what comes before its first letter or digit left
/// out. `root` for `/`, and `agent` for a basename with no letter or
/// digit at all.
pub fn default_name(workspace: &Path) -> String {
    let Some(base) = workspace.file_name() else {
        return "root".into();
    };
    let mut name = String::new();
    for c in base.to_string_lossy().chars() {
        match crate::text::sanitize::latin_base(c) {
            Some(s) => name.push_str(s),
            None if c.is_ascii() && id_byte(c as u8) => name.push(c),
            None => name.push('_'),
        }
    }
    let name = name.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let name = &name[..name.len().min(64)];
    if name.is_empty() {
        "agent".into()
    } else {
        name.to_string()
    }
}

spelled! {
    /// Which wire a peer speaks.
    pub enum Wire ("wire") {
        Jsonrpc = "jsonrpc",
        Zcoder = "zcoder",
    }
}

/// A registry directory to scan, and the wire its instances speak.
#[derive(Clone, Debug)]
pub struct RegistryDir {
    pub path: PathBuf,
    pub wire: Wire,
}

/// `$name`, when it is an absolute path.
fn absolute_var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

fn tmp_base() -> PathBuf {
    absolute_var("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// zcoder's own registry directory, chosen as zcoder chooses it.
pub fn zcoder_dir() -> PathBuf {
    let runtime = || absolute_var("XDG_RUNTIME_DIR").map(|r| r.join("zcoder-agents"));
    let tmp = || tmp_base().join(format!("zcoder-{}-agents", sys::uid()));
    absolute_var("ZCODER_RELAY_DIR")
        .or_else(runtime)
        .unwrap_or_else(tmp)
}

/// Where a registry came from: the first of these that gives one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirSource {
    /// `$BATON_DIR`.
    BatonDir,
    /// `$XDG_RUNTIME_DIR/baton`.
    Runtime,
    /// `/run/user/UID/baton`, where `/run/user/UID` is the user's own,
    /// mode 0700 (cron, `sudo` and some ssh logins set no
    /// `XDG_RUNTIME_DIR`, while the user's sessions made it).
    RunUser,
    /// `${TMPDIR:-/tmp}/baton-UID`.
    Tmp,
}

/// The registry directory the configuration and the environment select
/// for this user, and which rule chose it (docs/protocol.md §2). A
/// relative `XDG_RUNTIME_DIR` is ignored, with a warning on stderr once.
pub fn chosen_dir(config: &Config) -> (PathBuf, DirSource) {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let run = Path::new("/run/user");
    let (dir, source, ignored) = choose(config.dir.as_deref(), xdg, run, sys::uid(), tmp_base());
    if let Some(v) = ignored {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            eprintln!(
                "baton: warning: XDG_RUNTIME_DIR={} is not an absolute path; ignored",
                crate::text::sanitize::escape(&v.to_string_lossy())
            );
        });
    }
    (dir, source)
}

/// `chosen_dir` with what it reads given: `BATON_DIR`, `XDG_RUNTIME_DIR`,
/// the directory of the users' runtime directories, the uid and the
/// temporary directory; a relative `XDG_RUNTIME_DIR` comes back ignored.
fn choose(
    dir: Option<&Path>,
    xdg: Option<PathBuf>,
    run: &Path,
    uid: u32,
    tmp: PathBuf,
) -> (PathBuf, DirSource, Option<PathBuf>) {
    if let Some(d) = dir {
        return (d.to_path_buf(), DirSource::BatonDir, None);
    }
    let ignored = match xdg.filter(|v| !v.as_os_str().is_empty()) {
        Some(v) if v.is_absolute() => return (v.join("baton"), DirSource::Runtime, None),
        relative => relative,
    };
    let run = run.join(uid.to_string());
    let own = fs::symlink_metadata(&run).is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.is_dir() && m.uid() == uid && m.mode() & 0o777 == 0o700
    });
    if own {
        return (run.join("baton"), DirSource::RunUser, ignored);
    }
    (tmp.join(format!("baton-{uid}")), DirSource::Tmp, ignored)
}

/// The registry directory this process searched last (`ensure_dir`), for
/// the words of an answer that found no instance there.
static SEARCHED: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Where this process looked for instances: `in DIR`, for an answer that
/// found none (`no live instances in /run/user/1000/baton`).
pub fn searched() -> String {
    match &*crate::base::lock(&SEARCHED) {
        Some(d) => format!("in {}", d.display()),
        None => "in the registry".into(),
    }
}

/// Creates (mode 0700) and checks the registry directory the
/// configuration selects (`chosen_dir`), returning its canonical path.
pub fn ensure_dir(config: &Config) -> Result<PathBuf> {
    let dir = match crate::base::accounts::target() {
        Some(who) => target_dir(config, who),
        None => ensure_private_dir(&chosen_dir(config).0, "registry"),
    }?;
    *crate::base::lock(&SEARCHED) = Some(dir.clone());
    Ok(dir)
}

/// The registry of the account `--user` named: `BATON_DIR` when set,
/// else `/run/user/UID/baton` where `/run/user/UID` is, else
/// `${TMPDIR:-/tmp}/baton-UID`; never created, and checked to be that
/// account's, mode 0700.
fn target_dir(config: &Config, who: &crate::base::accounts::Account) -> Result<PathBuf> {
    let run = PathBuf::from(format!("/run/user/{}", who.uid));
    let chosen = match &config.dir {
        Some(d) => d.clone(),
        None if run.is_dir() => run.join("baton"),
        None => tmp_base().join(format!("baton-{}", who.uid)),
    };
    let shown = chosen.display();
    let checked = files::private_dir(&chosen, false);
    // Not root, and the registry is not ours to read (or there is none
    // here): the account's operators' sockets, where its instances name
    // us with --operator.
    let readable = checked.is_ok() && fs::read_dir(&chosen).is_ok();
    let linux = cfg!(any(target_os = "linux", target_os = "android"));
    if !readable && sys::euid() != 0 && linux {
        return Ok(operators::dir_of(who.uid));
    }
    checked.map_err(|e| match e {
        DirError::Inspect(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Error::Env(format!(
                "cannot read {}'s registry {shown}: {e} (run as root, or as an account its instances name with --operator)",
                who.name
            ))
        }
        DirError::Inspect(e) => Error::Env(format!("no registry of {} at {shown}: {e}", who.name)),
        e => Error::Env(format!("unsafe registry directory {shown}: {e}")),
    })?;
    fs::canonicalize(&chosen).map_err(|e| Error::io("resolve", &chosen, e))
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
    let z = files::private_dir(&z, false)
        .ok()
        .and_then(|()| fs::canonicalize(&z).ok());
    if let Some(path) = z.filter(|z| z != ours) {
        dirs.push(RegistryDir {
            path,
            wire: Wire::Zcoder,
        });
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

/// The manifest zcoder reads: exactly its own fields (in the sorted
/// order a `Value` writes them), the socket being the one in its
/// directory.
pub fn zcoder_manifest(m: &Manifest, socket: &Path) -> Value {
    const FIELDS: [&str; 10] = [
        "instance_id",
        "model",
        "pid",
        "profile",
        "project",
        "protocol",
        "session_id",
        "started_at",
        "state",
        "workspace",
    ];
    let mut z = serde_json::to_value(m).expect("a manifest serializes");
    if let Value::Object(o) = &mut z {
        o.retain(|k, _| FIELDS.contains(&k.as_str()));
        o.insert("socket".into(), socket.display().to_string().into());
    }
    z
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

/// The name entry of an instance: `n-<id>@<name>`, an empty private
/// file. Resolving a name reads only the manifests whose entry names it
/// (and those without an entry), so it does not read every manifest of
/// the registry. Neither grammar has `@`.
pub fn name_path(dir: &Path, id: &str, name: &str) -> PathBuf {
    dir.join(format!("n-{id}@{name}"))
}

/// The id and name of a name entry's file name, if it is one.
pub fn parse_name_entry(file_name: &str) -> Option<(&str, &str)> {
    let (id, name) = file_name.strip_prefix("n-")?.split_once('@')?;
    (valid_id(id) && valid_name(name)).then_some((id, name))
}

/// Publishes the name entry, before the first manifest: a manifest is
/// then never seen without it. Failing costs only speed (a manifest
/// without one is read whatever the name).
pub fn publish_name(dir: &Path, id: &str, name: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(sys::O_NOFOLLOW)
        .open(name_path(dir, id, name));
}

/// Removes the name entry, after the manifest: only a regular file owned
/// by us.
pub fn unpublish_name(dir: &Path, id: &str, name: &str) {
    use std::os::unix::fs::MetadataExt;
    let path = name_path(dir, id, name);
    let ours = |m: fs::Metadata| m.is_file() && m.uid() == sys::euid();
    if fs::symlink_metadata(&path).is_ok_and(ours) {
        let _ = fs::remove_file(&path);
    }
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
        push_digits(&mut out, &buf, n);
    }
    Ok(out)
}

/// Appends to `out`, until it holds `n`, a decimal digit for each byte of
/// `random` below 250: the rejection sampling keeps the digits uniform.
pub fn push_digits(out: &mut String, random: &[u8], n: usize) {
    let digits = random
        .iter()
        .filter(|&&b| b < 250)
        .map(|b| char::from(b'0' + b % 10));
    out.extend(digits.take(n.saturating_sub(out.len())));
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
        assert!(!valid_name(".") && !valid_name("..") && valid_name("..."));
    }

    #[test]
    fn default_names() {
        assert_eq!(default_name(Path::new("/w/weekly digest")), "weekly_digest");
        assert_eq!(default_name(Path::new("/w/été")), "ete");
        assert_eq!(default_name(Path::new("/w/café")), "cafe");
        assert_eq!(default_name(Path::new("/w/Straße Œuvre")), "Strasse_OEuvre");
        assert_eq!(default_name(Path::new("/w/-x")), "x");
        assert_eq!(default_name(Path::new("/w/.hidden")), "hidden");
        assert_eq!(default_name(Path::new("/w/日本")), "agent");
        assert!(valid_new_name("a-1") && valid_new_name("9") && !valid_new_name("-x"));
        assert!(!valid_new_name("_x") && !valid_new_name(".x") && valid_name("_x"));
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

    /// Issue 46: the registry is the first of `BATON_DIR`,
    /// `XDG_RUNTIME_DIR/baton`, `/run/user/UID/baton` where that
    /// directory is the user's own with mode 0700, and the temporary one;
    /// a relative `XDG_RUNTIME_DIR` is ignored and said to be.
    #[test]
    fn the_registry_is_the_first_directory_that_gives_one() {
        use std::os::unix::fs::PermissionsExt;
        let root = crate::sys::scratch("registry-order");
        let run = root.join("run");
        let tmp = root.join("tmp");
        let uid = crate::sys::uid();
        let mine = run.join(uid.to_string());
        fs::create_dir_all(&mine).unwrap();
        let at = |dir: Option<&Path>, xdg: Option<&str>| {
            choose(dir, xdg.map(PathBuf::from), &run, uid, tmp.clone())
        };
        let (d, s, i) = at(Some(Path::new("/b")), Some("/x"));
        assert_eq!((d, s, i), (PathBuf::from("/b"), DirSource::BatonDir, None));
        let (d, s, i) = at(None, Some("/x"));
        assert_eq!(
            (d, s, i),
            (PathBuf::from("/x/baton"), DirSource::Runtime, None)
        );
        // Mode 0755 is not a runtime directory of the user's own.
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o755)).unwrap();
        let (d, s, _) = at(None, None);
        assert_eq!((d, s), (tmp.join(format!("baton-{uid}")), DirSource::Tmp));
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o700)).unwrap();
        let (d, s, i) = at(None, None);
        assert_eq!((d, s, i), (mine.join("baton"), DirSource::RunUser, None));
        let (d, s, i) = at(None, Some("rel"));
        assert_eq!((d, s), (mine.join("baton"), DirSource::RunUser));
        assert_eq!(i, Some(PathBuf::from("rel")));
        let _ = fs::remove_dir_all(&root);
    }
}
