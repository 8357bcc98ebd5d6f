//! One manifest (docs/protocol.md §7): its fields, and reading one file
//! as untrusted data, bounded and checked field by field.

use super::{
    MAX_MANIFEST, PROTOCOL, RegistryDir, Wire, default_name, socket_path, valid_id, valid_name,
};
use crate::base::config::MAX_MESSAGE_BYTES_CEILING;
use crate::base::error::Invalid;
use crate::{base::files, sys};

use serde::Deserialize;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub use crate::wire::Manifest;

const MAX_FIELD: usize = 4096;

/// Reads and validates one manifest file; `Err` names the problem.
pub fn read_manifest(dir: &RegistryDir, file: &Path) -> Result<Manifest, Invalid> {
    read_manifest_or_short(dir, file, None)
        .unwrap_or_else(|what| Err(Invalid(format!("manifest: this process is {what}"))))
}

/// `read_manifest`, or (`Err`) what this process ran short of to read
/// it: no word on the manifest. The common case, a regular file of ours,
/// takes one open (in `held`, the directory opened once for a scan, if
/// given), one fstat and one read: discovery reads every manifest of the
/// registry.
pub fn read_manifest_or_short(
    dir: &RegistryDir,
    file: &Path,
    held: Option<&files::Dir>,
) -> Result<Result<Manifest, Invalid>, &'static str> {
    let read = match read_fast(file, held)? {
        Some(bytes) => parse_named(dir, file, &bytes),
        None => check_and_read_slowly(dir, file),
    };
    match read {
        Ok(m) => Ok(Ok(m)),
        Err(Read::Invalid(why)) => Ok(Err(why)),
        Err(Read::Short(what)) => Err(what),
    }
}

/// Why a manifest was not read: it is not valid, or this process ran
/// short.
enum Read {
    Invalid(Invalid),
    Short(&'static str),
}

impl<T: Into<Invalid>> From<T> for Read {
    fn from(e: T) -> Read {
        Read::Invalid(e.into())
    }
}

/// The bytes of `file` if it opens (never through a symlink, never
/// waiting) as a regular file owned by us of at most 16 KiB; `None` when
/// it is anything else, for `check_and_read_slowly` to say what; `Err`
/// what this process ran short of.
fn read_fast(file: &Path, held: Option<&files::Dir>) -> Result<Option<Vec<u8>>, &'static str> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let name = file.file_name().and_then(|n| n.to_str());
    let opened = match (held, name) {
        (Some(d), Some(name)) => d.open_read(name),
        _ => (fs::OpenOptions::new().read(true))
            .custom_flags(sys::O_NOFOLLOW | sys::O_NONBLOCK | sys::O_NOCTTY)
            .open(file),
    };
    let f = match opened {
        Ok(f) => f,
        Err(e) => return sys::shortage(&e).map_or(Ok(None), Err),
    };
    let Ok(meta) = f.metadata() else {
        return Ok(None);
    };
    if !meta.is_file() || meta.uid() != crate::base::accounts::owner() || meta.len() > MAX_MANIFEST
    {
        return Ok(None);
    }
    // One read when it returns what fstat said (a manifest is written
    // whole and renamed into place); else on to the end.
    let mut bytes = vec![0; meta.len() as usize + 1];
    let first = (&f).read(&mut bytes).map(|n| bytes.truncate(n));
    let rest = match first {
        Ok(()) if bytes.len() as u64 == meta.len() => Ok(0),
        Ok(()) => f
            .take(MAX_MANIFEST + 1 - bytes.len() as u64)
            .read_to_end(&mut bytes),
        Err(e) => Err(e),
    };
    match rest {
        Ok(_) if bytes.len() as u64 <= MAX_MANIFEST => Ok(Some(bytes)),
        Ok(_) => Ok(None),
        Err(e) => sys::shortage(&e).map_or(Ok(None), Err),
    }
}

/// `read_manifest_or_short` one check at a time, each failure named.
fn check_and_read_slowly(dir: &RegistryDir, file: &Path) -> Result<Manifest, Read> {
    let meta = fs::symlink_metadata(file).map_err(|e| Invalid(e.to_string()))?;
    if meta.file_type().is_symlink() {
        return Err("manifest is a symlink".into());
    }
    if !meta.is_file() {
        return Err(format!(
            "manifest is {}, not a regular file",
            files::kind_of(meta.file_type())
        )
        .into());
    }
    if meta.uid() != crate::base::accounts::owner() {
        return Err(format!("manifest is owned by uid {}", meta.uid()).into());
    }
    if meta.len() > MAX_MANIFEST {
        return Err(format!("manifest is {} bytes, over 16 KiB", meta.len()).into());
    }
    // Read without waiting, whatever was swapped in since the look.
    let bytes = files::read_regular(file, MAX_MANIFEST).map_err(|e| match sys::shortage(&e) {
        Some(what) => Read::Short(what),
        None => Read::Invalid(Invalid(format!("manifest: {e}"))),
    })?;
    parse_named(dir, file, &bytes)
}

/// Parses the bytes of `file`, a manifest named `a-<id>.json`.
fn parse_named(dir: &RegistryDir, file: &Path, bytes: &[u8]) -> Result<Manifest, Read> {
    let id = file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("a-"))
        .and_then(|n| n.strip_suffix(".json"))
        .ok_or("manifest name is not a-<id>.json")?;
    Ok(parse_manifest(dir, id, bytes)?)
}

/// A manifest's members as they came, each checked by `parse_manifest`.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Members {
    protocol: Member,
    instance_id: Member,
    pid: Member,
    project: Member,
    name: Member,
    workspace: Member,
    session_id: Member,
    profile: Member,
    model: Member,
    socket: Member,
    state: Member,
    started_at: Member,
    wire: Member,
    baton_version: Member,
    process_start: Member,
    pid_ns: Member,
    max_message_bytes: Member,
    operators: Member,
}

/// One member: `None` when absent, which a null is not.
#[derive(Default)]
struct Member(Option<Value>);

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Member, D::Error> {
        Value::deserialize(d).map(|v| Member(Some(v)))
    }
}

impl Member {
    /// A string of at most `MAX_FIELD` bytes; empty if absent (or null)
    /// and not `required`.
    fn string(self, k: &str, required: bool) -> Result<String, String> {
        match self.0 {
            Some(Value::String(s)) if s.len() <= MAX_FIELD => Ok(s),
            Some(Value::String(_)) => Err(format!("field {k} is too long")),
            None | Some(Value::Null) if !required => Ok(String::new()),
            None => Err(format!("field {k} is missing")),
            Some(_) => Err(format!("field {k} is not a string")),
        }
    }

    fn integer(&self, k: &str) -> Result<u64, String> {
        (self.0.as_ref().ok_or(format!("field {k} is missing"))?)
            .as_u64()
            .ok_or(format!("field {k} is not a non-negative integer"))
    }

    /// Optional (older manifests, zcoder's): one that is not a
    /// non-negative integer says nothing.
    fn optional(&self) -> Option<u64> {
        self.0.as_ref().and_then(Value::as_u64)
    }
}

/// Validates every field of a manifest as data.
pub fn parse_manifest(dir: &RegistryDir, id: &str, bytes: &[u8]) -> Result<Manifest, Invalid> {
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err("manifest is over 16 KiB".into());
    }
    // The common case in one pass: an object with no `{` past its first
    // byte and no `[` (even in a string), each member given once, read
    // straight into `Members`. Anything else goes the long way, which
    // says what is wrong (and lets a repeated member's last word count).
    let flat = bytes.trim_ascii_start().starts_with(b"{")
        && bytes.iter().filter(|b| matches!(b, b'{' | b'[')).count() == 1;
    let m: Members = match flat.then(|| serde_json::from_slice(bytes).ok()).flatten() {
        Some(m) => m,
        None => {
            let obj =
                crate::wire::parse_flat(bytes).map_err(|e| Invalid(format!("manifest: {e}")))?;
            serde_json::from_value(Value::Object(obj))
                .map_err(|e| Invalid(format!("manifest: {e}")))?
        }
    };
    if m.protocol.integer("protocol")? != PROTOCOL {
        return Err("unsupported protocol".into());
    }
    let instance_id = m.instance_id.string("instance_id", true)?;
    if instance_id != id || !valid_id(&instance_id) {
        return Err("instance_id does not match the file name".into());
    }
    let pid = m.pid.integer("pid")?;
    if pid == 0 || pid > i32::MAX as u64 || !instance_id.starts_with(&format!("{pid}-")) {
        return Err("pid does not match the instance id".into());
    }
    let project = m.project.string("project", true)?;
    let mut name = m.name.string("name", dir.wire == Wire::Jsonrpc)?;
    if name.is_empty() {
        name = default_name(Path::new(&project));
    }
    if !valid_name(&name) {
        return Err("name does not match [A-Za-z0-9_.-]{1,64}".into());
    }
    let workspace = m.workspace.string("workspace", true)?;
    if !workspace.starts_with('/') {
        return Err("workspace is not an absolute path".into());
    }
    let session_id = match &m.session_id.0 {
        Some(Value::Number(n)) => n.to_string(),
        _ => m.session_id.string("session_id", false)?,
    };
    let profile = m.profile.string("profile", true)?;
    if !matches!(profile.as_str(), "coding" | "sysadmin") {
        return Err("profile is not coding or sysadmin".into());
    }
    let model = m.model.string("model", false)?;
    let socket = m.socket.string("socket", true)?;
    // A socket-activated agent listens on its name's wake socket.
    let wake = || {
        dir.wire == Wire::Jsonrpc && Path::new(&socket) == dir.path.join(format!("w-{name}.sock"))
    };
    if Path::new(&socket) != socket_path(&dir.path, &instance_id) && !wake() {
        return Err("socket is not <registry>/a-<id>.sock".into());
    }
    let state = m.state.string("state", true)?;
    if !matches!(state.as_str(), "ready" | "busy" | "paused") {
        return Err("state is not ready, busy or paused".into());
    }
    let started_at = m.started_at.integer("started_at")?;
    if dir.wire == Wire::Jsonrpc && m.wire.string("wire", true)? != "jsonrpc" {
        return Err("wire is not jsonrpc".into());
    }
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
        wire: dir.wire.to_string(),
        baton_version: m.baton_version.string("baton_version", false)?,
        process_start: m.process_start.optional(),
        pid_ns: m.pid_ns.optional(),
        // Optional too; one out of the variable's range says nothing, and
        // the receiver still applies its own.
        max_message_bytes: (m.max_message_bytes.optional())
            .filter(|n| (1..=MAX_MESSAGE_BYTES_CEILING).contains(n)),
        operators: match m.operators.0 {
            None => Vec::new(),
            Some(v) => (v.as_str())
                .and_then(crate::wire::uid_list::parse)
                .ok_or("operators is not a list of uids, such as \"1001,0\"")?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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
        assert_eq!(e.0, "socket is not <registry>/a-<id>.sock");
    }

    #[test]
    fn the_one_pass_reads_as_the_long_way_and_leaves_it_what_it_cannot_read() {
        let dir = RegistryDir {
            path: PathBuf::from("/run/user/1000/zcoder-agents"),
            wire: Wire::Zcoder,
        };
        let manifest = |extra: &str, workspace: &str| {
            format!(
                r#"{{"protocol":1,"instance_id":"7-1","pid":7,"project":"p","workspace":"{workspace}",
                "session_id":"","profile":"coding","model":"",
                "socket":"/run/user/1000/zcoder-agents/a-7-1.sock","state":"ready",
                "started_at":1{extra}}}"#
            )
        };
        let read = |text: String| parse_manifest(&dir, "7-1", text.as_bytes());
        // One pass: flat, each member once.
        assert_eq!(read(manifest("", "/w")).unwrap().workspace, "/w");
        // A `[` in a string, a repeated member (the last counts): the long way.
        assert_eq!(read(manifest("", "/w[1]")).unwrap().workspace, "/w[1]");
        let twice = read(manifest(r#","state":"busy""#, "/w")).unwrap();
        assert_eq!(twice.state, "busy");
        // Nested, or not an object: the long way names what is wrong.
        let nested = read(manifest(r#","extra":{"a":1}"#, "/w")).unwrap_err();
        assert!(
            nested.0.ends_with(r#"field "extra" is nested"#),
            "{}",
            nested.0
        );
        let array = parse_manifest(&dir, "7-1", b"[1]").unwrap_err();
        assert!(array.0.ends_with("not an object"), "{}", array.0);
    }
}
