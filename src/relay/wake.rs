//! Wake sockets: where systemd (or any supervisor) listens for a name,
//! starting its agent on the first connection.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The wake socket of a name.
pub fn wake_socket(registry_dir: &Path, name: &str) -> PathBuf {
    registry_dir.join(format!("w-{name}.sock"))
}

/// Connects once to a name's wake socket, if there is one. Returns whether
/// a wake socket answered.
pub fn wake(registry_dir: &Path, name: &str) -> bool {
    let path = wake_socket(registry_dir, name);
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        return false;
    }
    std::os::unix::net::UnixStream::connect(&path).is_ok()
}
