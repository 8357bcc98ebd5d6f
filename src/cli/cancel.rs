//! `baton cancel [TARGET] MESSAGE_ID`: withdraws a queued task, or stops
//! its running turn (`task/cancel`, docs/protocol.md); the task ends
//! `cancelled`, which its sender's wait reports. TARGET is a live
//! instance as `inbox complete` takes it, or a stopped agent's name,
//! whose spool is then written under its lock as an offline send writes
//! it. Without TARGET, the one instance, live or stopped, that holds
//! MESSAGE_ID queued or running.

use super::Parsed;
use super::args::Args;
use super::{emit, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::front::result::Holder;
use crate::registry;
use crate::registry::lookup::{self, KnownSpool, Stopped};
use crate::spool::Spool;
use crate::text::sanitize::escape;
use crate::wire::Call;
use crate::wire::Handling;
use crate::wire::answer::{Handled, Pending, TaskState, TaskStatus};
use crate::wire::request::TaskParams;

/// `baton cancel [TARGET] MESSAGE_ID [--json]`.
pub struct Cancel {
    target: Option<String>,
    id: String,
    json: bool,
}

impl Parsed for Cancel {
    fn parse(args: &Args) -> Result<Cancel> {
        let (target, id) = super::target_and_id(args, "cancel")?;
        let json = args.flag("json");
        Ok(Cancel { target, id, json })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let id = &self.id;
        let holder = match &self.target {
            Some(t) => named(config, t)?,
            None => holding(config, id)?,
        };
        let (raw, h) = match &holder {
            Holder::Live(peer) => {
                target::call::<Handled>(config, peer, Call::TaskCancel, TaskParams::new(id))?
            }
            Holder::Stopped(spool) => {
                let h = cancel_stopped(config, spool, id)?;
                (serde_json::to_value(&h).expect("an answer serializes"), h)
            }
        };
        if !self.json {
            print(&h, id, &holder);
        }
        super::done(self.json, &raw, h.status == Handling::Cancelled)
    }
}

/// The live instance TARGET names, else the one stopped agent's spool of
/// that name.
fn named(config: &Config, t: &str) -> Result<Holder> {
    let why = match target::resolve(config, Some(t)) {
        Ok(p) => return Ok(Holder::Live(Box::new(p))),
        Err(Error::NoTarget(why)) => why,
        Err(e) => return Err(e),
    };
    let dirs = registry::scan_dirs(&registry::ensure_dir(config)?);
    match lookup::stopped(&dirs, t, None, config.io_timeout) {
        Stopped::One(s) => Ok(Holder::Stopped(s)),
        // Started meanwhile.
        Stopped::Running(p) => Ok(Holder::Live(p)),
        Stopped::None => Err(Error::NoTarget(why)),
        Stopped::Several(spools) => {
            let rows: Vec<[String; 4]> = (spools.into_iter())
                .map(|s| Holder::Stopped(s).candidate())
                .collect();
            Err(Error::NoTarget(format!(
                "{} is not running and several spools have that name: start the one you mean; {}",
                escape(t),
                lookup::candidate_list(&rows)
            )))
        }
    }
}

/// The one instance that holds `id` queued or running: each live one is
/// asked (`task/status`), each stopped agent's spool is read.
fn holding(config: &Config, id: &str) -> Result<Holder> {
    let holds = |h: &Holder| match h {
        Holder::Live(p) => match target::call(config, p, Call::TaskStatus, TaskParams::new(id)) {
            Ok((_, TaskStatus { status, .. })) => {
                matches!(status, TaskState::Pending(w) if w != Pending::Unknown)
            }
            Err(_) => false,
        },
        Holder::Stopped(s) => crate::spool::read_listing(&s.dir).is_ok_and(|l| {
            l.queued
                .iter()
                .chain(&l.processing)
                .any(|t| t.message_id == id)
        }),
    };
    let mut found = crate::front::result::holders(config)?;
    found.retain(holds);
    if found.len() == 1 {
        return Ok(found.pop().expect("one"));
    }
    let id = escape(id);
    if found.is_empty() {
        return Err(Error::NoTarget(format!(
            "no instance, live or stopped, holds message {id} queued or running: 'baton result {id}' tells what became of it"
        )));
    }
    let rows: Vec<[String; 4]> = found.iter().map(Holder::candidate).collect();
    Err(Error::NoTarget(format!(
        "message {id} is queued or running at several instances: name one as TARGET; {}",
        lookup::candidate_list(&rows)
    )))
}

/// A stopped agent's task, cancelled in its spool under the spool's lock.
/// A process of a turn writes no peer's spool (docs/security.md).
fn cancel_stopped(config: &Config, spool: &KnownSpool, id: &str) -> Result<Handled> {
    super::sent::not_in_a_turn()?;
    crate::base::accounts::write_as_target()?;
    match Spool::open_offline(&spool.dir, config.fsync)? {
        Some(s) => Ok(crate::instance::cancel_stopped(&s, id)),
        None => Err(Error::Env(format!(
            "{}'s spool is locked: its instance is starting, or another command holds it; try again",
            escape(&spool.name)
        ))),
    }
}

/// What became of the task, in words.
fn print(h: &Handled, id: &str, holder: &Holder) {
    let (id, who) = (escape(id), escape(holder.name()));
    let how = match h.was.as_deref() {
        Some("running") => "its turn is stopped: SIGTERM to its handler's process group",
        Some("open") => "its open turn ended",
        _ if matches!(holder, Holder::Stopped(_)) => "withdrawn from its queue; it is not running",
        _ => "withdrawn from the queue",
    };
    match &h.status {
        s if *s == Handling::Cancelled => emit(&format!("cancelled {id} at {who} ({how})\n")),
        status => eprintln!(
            "baton: cannot cancel {id} at {who}: {status}: {}",
            escape(h.reason.as_deref().unwrap_or(""))
        ),
    }
}
