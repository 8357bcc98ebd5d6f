//! Connecting to an instance's socket: a path, or (Linux) an operators'
//! socket in the abstract namespace (`@baton/UID/a-ID.sock`,
//! `registry::operators`), reached only once the kernel says its
//! listener is the account it is named for.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Whether `path` names the operators' registry or one of its sockets.
pub fn is_abstract(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().first() == Some(&b'@')
}

/// The account whose operators' registry `path` is in.
fn owner_of(path: &Path) -> Option<u32> {
    let rest = path.to_str()?.strip_prefix("@baton/")?;
    rest.split('/').next()?.parse().ok()
}

/// Connects to `socket`, a path or an operators' socket (`@…`): the
/// latter only once the kernel says its listener is the account it is
/// named for.
pub fn connect(socket: &Path) -> io::Result<UnixStream> {
    if !is_abstract(socket) {
        return UnixStream::connect(socket);
    }
    let stream = connect_abstract(socket)?;
    let listener = crate::sys::peer_cred(&stream)?.uid;
    match owner_of(socket) {
        Some(uid) if uid == listener => Ok(stream),
        _ => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is served by uid {listener}, not by its account",
                socket.display()
            ),
        )),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn connect_abstract(socket: &Path) -> io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let name = &socket.as_os_str().as_encoded_bytes()[1..];
    UnixStream::connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn connect_abstract(_socket: &Path) -> io::Result<UnixStream> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
