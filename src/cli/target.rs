//! Turning a TARGET argument into one live instance: an exact instance id,
//! or a name exactly one live instance has. Without TARGET: the instance of
//! `$BATON_SOCKET`, else the one serving the current directory.

use crate::client::{ClientError, Session};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::registry::{self, Discovery, Peer};
use crate::sanitize::escape;
use std::path::Path;

/// Discovers peers in every registry we scan, excluding the caller's own
/// instance when it runs inside one.
pub fn discover(config: &Config) -> Result<Discovery> {
    let dir = registry::ensure_dir(config)?;
    let dirs = registry::scan_dirs(&dir);
    let me = own_instance_id();
    Ok(registry::discover(&dirs, me.as_deref(), config.io_timeout))
}

/// The instance id of `$BATON_SOCKET` (`…/a-<id>.sock`), if any.
pub fn own_instance_id() -> Option<String> {
    let s = crate::config::baton_socket()?;
    let name = s.file_name()?.to_str()?;
    let id = name.strip_prefix("a-")?.strip_suffix(".sock")?;
    registry::valid_id(id).then(|| id.to_string())
}

fn describe(p: &Peer) -> String {
    let m = &p.manifest;
    format!(
        "  {}  pid {}  {}  {}{}",
        escape(&m.name),
        m.pid,
        escape(&m.workspace),
        m.instance_id,
        if p.wire == registry::Wire::Zcoder {
            "  (zcoder)"
        } else {
            ""
        }
    )
}

fn candidates(peers: &[&Peer]) -> String {
    if peers.is_empty() {
        return "no live instances are running".into();
    }
    let mut s = String::from("candidates:");
    for p in peers {
        s.push('\n');
        s.push_str(&describe(p));
    }
    s
}

/// Resolves TARGET among live peers.
pub fn resolve(config: &Config, target: Option<&str>) -> Result<Peer> {
    if target.is_some_and(|t| t.trim().is_empty()) {
        return Err(Error::Usage(format!(
            "TARGET {:?} is empty: name an instance by its id or name",
            target.unwrap_or("")
        )));
    }
    let dir = registry::ensure_dir(config)?;
    let dirs = registry::scan_dirs(&dir);
    // An exact id needs no scan: its manifest is read directly.
    if let Some(p) = target.and_then(|t| registry::find_id(&dirs, t, config.io_timeout)) {
        return answering(config, p);
    }
    let found = registry::discover(&dirs, None, config.io_timeout);
    let all: Vec<&Peer> = found.peers.iter().collect();
    let pick = |matches: Vec<&Peer>, what: String| -> Result<Peer> {
        match matches.len() {
            1 => answering(config, matches[0].clone()),
            0 => Err(Error::NoTarget(format!("{what}; {}", candidates(&all)))),
            _ => Err(Error::NoTarget(format!(
                "{what} is ambiguous: pick one by id; {}",
                candidates(&matches)
            ))),
        }
    };
    match target {
        Some(t) => {
            if let Some(p) = all.iter().find(|p| p.manifest.instance_id == t) {
                return answering(config, (*p).clone());
            }
            let named: Vec<&Peer> = all
                .iter()
                .copied()
                .filter(|p| p.manifest.name == t)
                .collect();
            if named.is_empty() {
                return Err(Error::NoTarget(format!(
                    "no live instance has the id or name {}; {}",
                    escape(t),
                    candidates(&all)
                )));
            }
            pick(named, format!("the name {}", escape(t)))
        }
        None => {
            if let Some(sock) = crate::config::baton_socket() {
                let mine: Vec<&Peer> = all
                    .iter()
                    .copied()
                    .filter(|p| Path::new(&p.manifest.socket) == sock)
                    .collect();
                return pick(
                    mine,
                    format!(
                        "no live instance listens on BATON_SOCKET={}",
                        escape(&sock.display().to_string())
                    ),
                );
            }
            let cwd = std::env::current_dir()
                .and_then(std::fs::canonicalize)
                .map_err(|e| Error::io("read", Path::new("."), e))?;
            let here: Vec<&Peer> = all
                .iter()
                .copied()
                .filter(|p| {
                    Path::new(&p.manifest.workspace) == cwd && p.wire == registry::Wire::Jsonrpc
                })
                .collect();
            if here.is_empty() {
                return Err(Error::NoTarget(format!(
                    "no instance serves {}: name a TARGET; {}",
                    escape(&cwd.display().to_string()),
                    candidates(&all)
                )));
            }
            pick(
                here,
                format!(
                    "the instances serving {}",
                    escape(&cwd.display().to_string())
                ),
            )
        }
    }
}

/// The peer, unless it is unresponsive: its pid is there but its socket
/// did not answer the ping in time, so nothing can be asked of it now
/// (exit 4, not "no such instance").
fn answering(config: &Config, p: Peer) -> Result<Peer> {
    if p.unresponsive() {
        return Err(Error::Transport(p.silence(config.io_timeout)));
    }
    Ok(p)
}

/// Opens a native connection to a resolved peer.
pub fn connect(config: &Config, peer: &Peer) -> Result<Session> {
    if peer.wire != registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "{} is a zcoder instance: its frame has only ping and enqueue, so baton can ping it, show its status and send to it, nothing more",
            escape(&peer.manifest.name)
        )));
    }
    Session::open(Path::new(&peer.manifest.socket), config.io_timeout)
        .map_err(|e| transport(peer, e))
}

pub fn transport(peer: &Peer, e: ClientError) -> Error {
    match e {
        ClientError::TooManyConnections { .. } => Error::Transport(format!(
            "{} refused the connection: too many connections",
            escape(&peer.manifest.name)
        )),
        ClientError::Rpc { code, message } => Error::Refused(format!(
            "{} answered error {code}: {}",
            escape(&peer.manifest.name),
            escape(&message)
        )),
        e => Error::Transport(format!(
            "{} ({}): {e}",
            escape(&peer.manifest.name),
            peer.manifest.instance_id
        )),
    }
}
