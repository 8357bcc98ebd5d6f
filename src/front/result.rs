//! What became of a task, for `baton result`: asked of the live instance
//! that holds it (`task/status`), or read in a stopped agent's spool (its
//! receipts, else the place its task waits), or looked for at every
//! instance, live and stopped, when no TARGET names one. Waiting for the
//! end is `follow::wait`'s.

use super::follow::End;
use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::client::Session;
use crate::registry::lookup::{self, KnownSpool};
use crate::registry::{self, Peer, Wire};
use crate::relay::bridge::transport;
use crate::text::sanitize::escape;
use crate::wire::answer::{Pending, Target, TaskStatus};
use crate::wire::request::TaskParams;
use crate::wire::{Call, HandlerExit, Outcome, State};
use std::path::Path;

/// Where a task's result is read: a live instance, or a stopped agent's
/// spool.
pub enum Holder {
    Live(Box<Peer>),
    Stopped(KnownSpool),
}

impl Holder {
    pub fn name(&self) -> &str {
        match self {
            Holder::Live(p) => &p.manifest.name,
            Holder::Stopped(s) => &s.name,
        }
    }

    /// The instance, as a send's result names the one it reached (a
    /// stopped agent's without an id).
    pub fn target(&self) -> Target {
        match self {
            Holder::Live(p) => Target {
                workspace: Some(p.manifest.workspace.clone()),
                ..crate::relay::peer_target(p)
            },
            Holder::Stopped(s) => crate::relay::spool_target(s),
        }
    }

    /// A live instance's state, as its manifest says it (a send's result
    /// says it too); none for a stopped agent.
    pub fn state(&self) -> Option<State> {
        match self {
            Holder::Live(p) => p.manifest.state.parse().ok(),
            Holder::Stopped(_) => None,
        }
    }

    /// `NAME (ID)` of a live instance, `NAME (stopped)` of a spool; escaped.
    pub fn said(&self) -> String {
        match self {
            // As a peer shows itself: its id is a valid one, nothing to escape.
            Holder::Live(p) => p.to_string(),
            Holder::Stopped(s) => format!("{} (stopped)", escape(&s.name)),
        }
    }

    /// The holder as a candidate list shows it.
    pub fn candidate(&self) -> [String; 4] {
        match self {
            Holder::Live(p) => {
                let m = &p.manifest;
                lookup::candidate(&m.name, Some(m.pid), &m.workspace, &m.instance_id)
            }
            Holder::Stopped(s) => lookup::candidate(&s.name, None, &s.workspace, ""),
        }
    }
}

/// What one look at a task found: its end (`Final`), that it is not
/// known there (`Unknown`), or where it waits (`TimedOut` with its
/// place, the look having waited for nothing).
pub struct Look {
    pub end: End,
    /// Its place in the queue, while it is queued.
    pub queue_position: Option<usize>,
    /// Why it was set aside, or why the holder cannot say.
    pub reason: Option<String>,
    /// When it was accepted (epoch seconds), when known.
    pub accepted_at: Option<u64>,
}

impl Look {
    fn of(st: TaskStatus) -> Look {
        Look {
            queue_position: st.queue_position,
            reason: st.reason.clone(),
            accepted_at: st.accepted_at,
            end: End::of(st),
        }
    }

    fn known(&self) -> bool {
        !matches!(self.end, End::Unknown)
    }
}

/// Looks once at the task `message_id` where `holder` keeps it.
pub fn look(config: &Config, holder: &Holder, message_id: &str) -> Result<Look> {
    match holder {
        Holder::Live(peer) => ask(config, peer, message_id),
        Holder::Stopped(spool) => Ok(in_spool(&spool.dir, message_id)),
    }
}

/// `task/status` of a live instance.
fn ask(config: &Config, peer: &Peer, message_id: &str) -> Result<Look> {
    if peer.wire != Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "{} is a zcoder instance, which keeps no results to ask about",
            escape(&peer.manifest.name)
        )));
    }
    let mut conn = Session::open(Path::new(&peer.manifest.socket), config.io_timeout)
        .map_err(|e| transport(peer, e))?;
    let st: TaskStatus = conn
        .call(Call::TaskStatus, TaskParams::new(message_id))
        .map_err(|e| transport(peer, e))?;
    Ok(Look::of(st))
}

/// The task as a stopped agent's spool keeps it, read without its lock
/// (as `inbox list` reads it): its receipt, else its place. A task in
/// `processing/` was running when its instance stopped, and is
/// interrupted: its next start says so (protocol.md, section 8).
fn in_spool(dir: &Path, message_id: &str) -> Look {
    let mut look = Look {
        end: End::Unknown,
        queue_position: None,
        reason: None,
        accepted_at: None,
    };
    if let Some(r) = crate::spool::read_receipt(dir, message_id) {
        look.accepted_at = r.accepted_at;
        look.end = End::receipt(r);
        return look;
    }
    let Ok(l) = crate::spool::read_listing(dir) else {
        return look;
    };
    let set_aside = |outcome| End::Final {
        outcome,
        reply: None,
        reply_id: None,
        handler: HandlerExit::default(),
        accepted_at: None,
        finished_at: None,
    };
    let is = |t: &&crate::wire::Summary| t.message_id == message_id;
    if let Some((n, t)) = l.queued.iter().enumerate().find(|(_, t)| is(t)) {
        look.queue_position = Some(n + 1);
        look.accepted_at = Some(t.accepted_at);
        look.end = End::TimedOut(Some(Pending::Queued));
    } else if let Some(t) = l.processing.iter().chain(&l.interrupted).find(is) {
        look.accepted_at = Some(t.accepted_at);
        look.end = set_aside(Outcome::Interrupted);
    } else if let Some(t) = l.rejected.iter().find(is) {
        look.accepted_at = Some(t.accepted_at);
        look.reason = Some("set aside in rejected/: expired under --ttl, or bad data".into());
        look.end = set_aside(Outcome::Rejected);
    }
    look
}

/// Every instance that may hold a task: each live one of baton's own wire
/// that answers, then each stopped agent's spool.
pub fn holders(config: &Config) -> Result<Vec<Holder>> {
    let dir = registry::ensure_dir(config)?;
    let live = registry::discover(&registry::scan_dirs(&dir), None, config.io_timeout).peers;
    let stopped = lookup::known_spools().into_iter();
    let stopped = stopped.filter(|s| s.running(&live).is_none());
    let native = live
        .iter()
        .filter(|p| p.wire == Wire::Jsonrpc && !p.unresponsive());
    let native = native.map(|p| Holder::Live(Box::new(p.clone())));
    Ok(native.chain(stopped.map(Holder::Stopped)).collect())
}

/// Every instance that knows the task `message_id`, with what it says:
/// each live instance is asked, each stopped agent's spool read.
pub fn find(config: &Config, message_id: &str) -> Result<Vec<(Holder, Look)>> {
    let known = |h: Holder| {
        let look = look(config, &h, message_id).ok()?;
        look.known().then_some((h, look))
    };
    Ok(holders(config)?.into_iter().filter_map(known).collect())
}
