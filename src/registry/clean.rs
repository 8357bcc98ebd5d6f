//! Cleanup of our own registry (`baton gc`, and `baton serve` at start):
//! only names of our grammar, owned by us, of the right type, and only
//! what is provably dead, or a manifest that does not parse.

use super::discover::{
    Candidate, Skipped, id_pid, kernel_says_stale, list, scan_ids, socket_present,
};
use super::{MAX_MANIFEST, RegistryDir, Wire, manifest_path, socket_path, valid_id};
use crate::{base::files, sys};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How old a manifest that does not parse must be before it is removed:
/// baton renames a whole manifest into place, but another writer may be
/// writing one in place.
pub const MALFORMED_AGE: Duration = Duration::from_secs(60);

/// What a cleanup removed.
#[derive(Debug, Default)]
pub struct Collected {
    /// The ids of stale entries (their manifest, their socket).
    pub removed: Vec<String>,
    /// Manifests that did not parse.
    pub malformed: Vec<PathBuf>,
}

/// Finds and removes the stale entries of our own registry without
/// connecting to anyone: an entry is stale when the kernel says its pid
/// is gone or another process's (`kernel_says_stale`). Startup and `gc`
/// use this, so starting one instance among many costs no pings, and a
/// stale entry is removed once, not paid for by every later listing.
/// Manifests that do not parse go too, once `MALFORMED_AGE` old.
pub fn collect_stale(dir: &Path, thorough: bool) -> Collected {
    let reg = RegistryDir {
        path: dir.to_path_buf(),
        wire: Wire::Jsonrpc,
    };
    let mut candidates = Vec::new();
    // At start, a manifest whose id names a pid that is there is not
    // read: starting among many live instances costs a `kill(pid, 0)`
    // each. `gc` reads them all (a pid given to another process since,
    // a malformed manifest).
    let maybe_dead = |id: &str| thorough || id_pid(id).is_none_or(pid_gone);
    scan_ids(&reg, &mut candidates, &maybe_dead);
    let mut stale = Vec::new();
    let mut malformed = Vec::new();
    for c in candidates {
        let m = match c {
            Candidate::Ok(m, ..) => m,
            // Unread for want of a resource: nothing is known of it.
            Candidate::Short(_) => continue,
            Candidate::Bad(s) => {
                if remove_malformed(dir, &s) {
                    malformed.push(s.path);
                }
                continue;
            }
        };
        // The kernel's word, never a connection: a socket is not asked.
        // One that is a symlink or not a socket is never stale.
        if socket_present(&m).is_ok() && kernel_says_stale(&m).is_some() {
            super::unpublish_name(dir, &m.instance_id, &m.name);
            stale.push(m.instance_id);
        }
    }
    if thorough {
        remove_orphan_names(&reg);
    }
    Collected {
        removed: remove_stale(dir, stale),
        malformed,
    }
}

/// Removes the name entries whose manifest is gone and whose pid the
/// kernel reports gone: what a crash between the two leaves.
fn remove_orphan_names(reg: &RegistryDir) {
    let (names, _) = list(reg).unwrap_or_default();
    for (id, name) in names.iter().filter_map(|n| super::parse_name_entry(n)) {
        let orphan = fs::symlink_metadata(manifest_path(&reg.path, id)).is_err()
            && id_pid(id).is_some_and(pid_gone);
        if orphan {
            super::unpublish_name(&reg.path, id, name);
        }
    }
}

/// Removes the files of the stale entries `ids` in `dir` (never the
/// directory itself): only names in the grammar, owned by us, of the right
/// type. The ids of those removed.
fn remove_stale(dir: &Path, ids: Vec<String>) -> Vec<String> {
    // Ours, and of its kind: then removed.
    let remove = |p: PathBuf, kind: fn(&fs::Metadata) -> bool| {
        let ours = |m: fs::Metadata| kind(&m) && m.uid() == sys::euid();
        fs::symlink_metadata(&p).is_ok_and(ours) && fs::remove_file(&p).is_ok()
    };
    let removed = |id: &String| {
        let manifest = remove(manifest_path(dir, id), fs::Metadata::is_file);
        manifest | remove(socket_path(dir, id), |m| m.file_type().is_socket())
    };
    ids.into_iter()
        .filter(|id| valid_id(id) && removed(id))
        .collect()
}

/// Removes a skipped manifest of `dir` if it does not parse as a JSON
/// object at all and was last written `MALFORMED_AGE` ago or more: a
/// regular file `a-<id>.json` (an id of our grammar), owned by us, at most
/// 16 KiB. One that parses but fails a check (another protocol version,
/// say) is kept. Returns whether it was removed.
fn remove_malformed(dir: &Path, s: &Skipped) -> bool {
    let Some(id) = s.instance_id.as_deref().filter(|id| valid_id(id)) else {
        return false;
    };
    let path = manifest_path(dir, id);
    let Ok(meta) = fs::symlink_metadata(&path) else {
        return false;
    };
    let old = meta
        .modified()
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age >= MALFORMED_AGE);
    if path != s.path
        || !meta.is_file()
        || meta.uid() != sys::euid()
        || meta.len() > MAX_MANIFEST
        || !old
    {
        return false;
    }
    let Ok(bytes) = files::read_regular(&path, MAX_MANIFEST) else {
        return false;
    };
    let parses = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes);
    parses.is_err() && fs::remove_file(&path).is_ok()
}

fn pid_gone(pid: u32) -> bool {
    sys::pid_status(pid) == sys::PidStatus::Gone
}
