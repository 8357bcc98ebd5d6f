//! The operators' way in, on Linux: an instance started with `serve
//! --operator` also listens on the abstract socket `@baton/UID/a-ID.sock`
//! (UID its account's), so that an operator account that is not root
//! reaches it without sudo while its registry stays mode 0700. The
//! abstract namespace has no permissions: the instance checks every
//! connection's uid before a byte is read (`server::accept_loop`), and a
//! client checks that the listener is the account it looks for before it
//! writes a byte (`connect`), so a squatter of the name gets nothing.
//! `baton --user NAME` finds them in `/proc/net/unix`; for discovery
//! their names form a registry of their own, `@baton/UID`, whose
//! manifests each instance gives in its `initialize` answer.

use super::RegistryDir;
use crate::client::Session;
use crate::wire::Manifest;
use std::io;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::Duration;

/// The operators' registry of the account `uid`.
pub fn dir_of(uid: u32) -> PathBuf {
    PathBuf::from(format!("@baton/{uid}"))
}

/// Listens on the operators' socket of instance `id` of this account.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn listen(id: &str) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("baton/{}/a-{id}.sock", crate::sys::euid());
    UnixListener::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn listen(_id: &str) -> io::Result<UnixListener> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// The manifests' names (`a-ID.json`) of the operators' registry `dir`:
/// the abstract sockets `/proc/net/unix` lists there, listening.
pub(super) fn names(dir: &RegistryDir) -> Vec<String> {
    let prefix = format!("{}/a-", dir.path.display());
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut names: Vec<String> = (table.lines().skip(1))
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Flags 00010000: listening (__SO_ACCEPTCON).
            let listening = f.get(3) == Some(&"00010000");
            let id = f.get(7)?.strip_prefix(&prefix)?.strip_suffix(".sock")?;
            (listening && super::valid_id(id)).then(|| format!("a-{id}.json"))
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The manifest of instance `id` in the operators' registry `dir`, as it
/// says it in its `initialize` answer, its socket the operators' one.
pub(super) fn manifest(dir: &RegistryDir, id: &str) -> Result<Manifest, String> {
    let socket = super::socket_path(&dir.path, id);
    let session = Session::open(&socket, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let mut m = session.hello.instance.ok_or("it gave no manifest")?;
    if m.instance_id != id {
        return Err(format!("it answers as instance {}", m.instance_id));
    }
    m.socket = socket.display().to_string();
    Ok(m)
}
