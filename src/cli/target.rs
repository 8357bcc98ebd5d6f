//! A TARGET argument as the CLI takes it: the one live instance that
//! answers (`lookup::find` says which it names), or a stopped agent's
//! spool for the commands that read one, else the error and exit code;
//! and a connection to it.

use super::since::Clock;
use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::client::{self, ClientError, ListError, Session};
use crate::registry::lookup::{self, KnownSpool, Lookup, Target};
use crate::registry::{self, Peer};
use crate::text::sanitize::escape;
use crate::wire::answer::InboxPage;
use crate::wire::{Call, Method};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

/// The instance id of `$BATON_SOCKET` (`…/a-<id>.sock`), if any.
pub fn own_instance_id() -> Option<String> {
    let s = crate::base::config::baton_socket()?;
    let name = s.file_name()?.to_str()?;
    let id = name.strip_prefix("a-")?.strip_suffix(".sock")?;
    registry::valid_id(id).then(|| id.to_string())
}

/// What TARGET names for a command that can read a stopped agent's spool
/// (`status`, `log`, `inbox list`, `result`): where its tasks are.
pub use crate::front::result::Holder as Resolved;

/// Resolves TARGET for a command that needs a live instance: as
/// `resolve_or_stopped`, a stopped agent's name being the error (exit 3)
/// that says so, how much waits in its spool, and how to start it.
pub fn resolve(config: &Config, target: Option<&str>) -> Result<Peer> {
    match resolve_or_stopped(config, target)? {
        Resolved::Live(peer) => Ok(*peer),
        Resolved::Stopped(spool) => Err(Error::NoTarget(format!(
            "{}; baton wake {} or start it",
            stopped_holding(&spool),
            escape(&spool.name)
        ))),
    }
}

/// `since TIME` of a stopped agent (`KnownSpool::stopped_since`), the time
/// as `log` shows times: local, or UTC with `utc`, the date when it is
/// not today.
pub fn since(spool: &KnownSpool, utc: bool) -> String {
    let time = spool
        .stopped_since()
        .map_or_else(|| "an unknown time".into(), |t| Clock::new(utc).stamp(t));
    format!("since {time}")
}

/// `NAME is stopped (since TIME)`.
pub fn stopped_since(spool: &KnownSpool, utc: bool) -> String {
    format!("{} is stopped ({})", escape(&spool.name), since(spool, utc))
}

/// `NAME is stopped (since TIME); its spool holds N tasks`: the verdict on
/// a stopped name for every command that needs it running.
pub fn stopped_holding(spool: &KnownSpool) -> String {
    let tasks = if spool.queued == 1 { "task" } else { "tasks" };
    format!(
        "{}; its spool holds {} {tasks}",
        stopped_since(spool, false),
        spool.queued
    )
}

/// Resolves TARGET (`lookup::find`): one live instance that answers, or
/// the one spool of a stopped agent, or the error that says why not. An
/// unresponsive instance is there, but nothing can be asked of it now
/// (exit 4, not "no such instance").
pub fn resolve_or_stopped(config: &Config, target: Option<&str>) -> Result<Resolved> {
    if target.is_some_and(|t| t.trim().is_empty()) {
        return Err(Error::Usage(format!(
            "TARGET {:?} is empty: name an instance by its id or name",
            target.unwrap_or("")
        )));
    }
    let dirs = registry::scan_dirs(&registry::ensure_dir(config)?);
    let wanted = match target {
        Some(t) => Target::Named(t),
        None => Target::here().map_err(|e| Error::io("read", Path::new("."), e))?,
    };
    let (why, candidates) = match lookup::find(&dirs, &wanted, config.io_timeout) {
        Lookup::One(p) if p.unresponsive() => {
            return Err(Error::Transport(p.silence(config.io_timeout)));
        }
        Lookup::One(p) => return Ok(Resolved::Live(p)),
        Lookup::Stopped(spool) => return Ok(Resolved::Stopped(*spool)),
        Lookup::Short(why) => return Err(Error::Transport(why)),
        Lookup::Several { why, matched } => (why, matched),
        Lookup::None { why, stopped, .. } if !stopped.is_empty() => {
            let rows: Vec<[String; 4]> = (stopped.iter())
                .map(|s| lookup::candidate(&s.name, None, &s.workspace, ""))
                .collect();
            return Err(Error::NoTarget(format!(
                "{why}; several stopped agents' spools match: {}",
                lookup::candidate_list(&rows)
            )));
        }
        Lookup::None { why, live, .. } => (why, live),
    };
    Err(Error::NoTarget(format!(
        "{why}; {}",
        lookup::candidates(&candidates)
    )))
}

/// `NAME (ID, pid PID)`, as `stop` and `attach` name an instance.
pub fn described(p: &Peer) -> String {
    let m = &p.manifest;
    format!("{} ({}, pid {})", escape(&m.name), m.instance_id, m.pid)
}

/// Resolves the live instance an option names (`what`: `send --from`), as
/// `resolve` does, its errors introduced by the option.
pub fn resolve_option(config: &Config, what: &str, name: &str) -> Result<Peer> {
    if name.trim().is_empty() {
        return Err(Error::Usage(format!(
            "{what} is empty: name an instance by its id or name"
        )));
    }
    resolve(config, Some(name)).map_err(|e| match e {
        Error::NoTarget(why) => Error::NoTarget(format!("{what}: {why}")),
        Error::Transport(why) => Error::Transport(format!("{what}: {why}")),
        e => e,
    })
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

/// One call on a new connection to `peer`: the answer as the instance
/// gave it (for `--json`), and read as `R`.
pub fn call<R: DeserializeOwned>(
    config: &Config,
    peer: &Peer,
    method: impl Into<Method>,
    params: impl Serialize,
) -> Result<(Value, R)> {
    let v: Value = connect(config, peer)?
        .call(method, params)
        .map_err(|e| transport(peer, e))?;
    let r = serde_json::from_value(v.clone())
        .map_err(|e| transport(peer, ClientError::Protocol(e.to_string())))?;
    Ok((v, r))
}

pub use crate::relay::bridge::transport;

/// Every page of `inbox/list`, as one listing.
pub fn list_all(conn: &mut Session, peer: &Peer) -> Result<InboxPage> {
    client::list_all(&mut |p| conn.call(Call::InboxList, p)).map_err(|e| match e {
        ListError::Call(e) => transport(peer, e),
        ListError::KeptChanging => Error::Transport(format!(
            "{}: the inbox kept changing while it was listed; try again",
            escape(&peer.manifest.name)
        )),
        e => Error::Transport(format!("{}: {e}", escape(&peer.manifest.name))),
    })
}
