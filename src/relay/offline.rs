//! Offline delivery (docs/protocol.md §8): a task for a name no live
//! instance has is stored in that name's one spool by the sender itself,
//! with the receiver's own checks, and its agent woken; `route` decides
//! between that and a live instance.

use super::result::{no_target, outcome, peer_target, spool_target, with_target};
use crate::base::config::Config;
use crate::base::status::Status;
use crate::registry::lookup::{self, KnownSpool, Lookup, Target};
use crate::registry::{self, Peer};
use crate::server::{self, NotStored, Receiver, Verdict};
use crate::spool::{Spool, Task};
use crate::text::sanitize::escape;
use crate::wire::Body;
use crate::wire::answer::{Candidate, SendResult};
use crate::wire::body::Accepted;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where a name led.
pub enum Route {
    /// A live instance: deliver through its socket.
    Live(Box<Peer>),
    /// The outcome is known: stored offline, refused, or no target.
    Done(SendResult),
}

/// How long a sender keeps trying while a spool's lock is held by an
/// instance that is starting (it publishes its manifest right after).
const RACE_WAIT: Duration = Duration::from_secs(3);

/// The task a plain command line stores in a stopped agent's spool: the
/// sender is recorded as such, by its pid and working directory.
pub fn plain_task(message_id: &str, body: &str, mode: &str) -> crate::spool::Task {
    let sender = crate::spool::Sender {
        pid: Some(std::process::id()),
        workspace: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
        ..crate::spool::Sender::default()
    };
    crate::spool::new_task(
        message_id,
        body,
        sender,
        0,
        None,
        mode,
        Some(std::process::id()),
        "jsonrpc",
    )
}

/// Resolves TARGET among live peers; when no live instance has that name
/// but exactly one spool does, stores the task there. `make_task` builds
/// the task to store.
pub fn route(
    config: &Config,
    registry_dir: &Path,
    target: &str,
    message_id: &str,
    make_task: &dyn Fn() -> Task,
) -> Route {
    let deadline = Instant::now() + RACE_WAIT;
    loop {
        let dirs = registry::scan_dirs(registry_dir);
        let spool = match lookup::find(&dirs, &Target::Named(target), config.io_timeout) {
            Lookup::One(p) => return live(config, p, message_id),
            Lookup::Several { why, matched } => {
                let candidates = lookup::as_candidates(&matched);
                return Route::Done(no_target(message_id, why, candidates));
            }
            Lookup::Stopped(spool) if !spool.offline => {
                let denied = outcome(Status::Denied, message_id, no_offline(target));
                return Route::Done(denied);
            }
            Lookup::Stopped(spool) => *spool,
            Lookup::None { why, live, stopped } => {
                return Route::Done(no_offline_spool(target, message_id, why, &live, &stopped));
            }
            Lookup::Short(why) => return Route::Done(outcome(Status::Transport, message_id, why)),
        };
        match store(config, registry_dir, &spool, message_id, make_task) {
            Some(done) => return Route::Done(done),
            // Its instance is starting (or another sender is storing):
            // look again for the live instance.
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => {
                let why = format!(
                    "{}'s spool stayed locked but no live instance answered; try again",
                    escape(target)
                );
                return Route::Done(outcome(Status::Transport, message_id, why));
            }
        }
    }
}

/// A resolved peer to deliver to, unless it is unresponsive: its pid is
/// there but it did not answer the ping in time. That is a transport
/// failure, never a reason to store the task in its spool (whose lock the
/// stopped instance holds anyway).
pub(super) fn live(config: &Config, p: Box<Peer>, message_id: &str) -> Route {
    if p.unresponsive() {
        let failed = outcome(Status::Transport, message_id, p.silence(config.io_timeout));
        return Route::Done(with_target(failed, peer_target(&p)));
    }
    Route::Live(p)
}

/// The result for a name no live instance has (`why`) and no single
/// spool: `live` lists every live instance, the candidates when no spool
/// has the name; several `spools` are the candidates otherwise.
fn no_offline_spool(
    target: &str,
    message_id: &str,
    why: String,
    live: &[Peer],
    spools: &[KnownSpool],
) -> SendResult {
    if spools.is_empty() {
        return no_target(message_id, why, lookup::as_candidates(live));
    }
    let why = format!(
        "{} is not running and several spools have that name: start the one you mean",
        escape(target)
    );
    let candidates = spools
        .iter()
        .map(|s| Candidate {
            name: s.name.clone(),
            workspace: s.workspace.clone(),
            ..Candidate::default()
        })
        .collect();
    no_target(message_id, why, candidates)
}

fn no_offline(name: &str) -> String {
    format!(
        "{} is not running and does not take offline delivery (serve --no-offline)",
        escape(name)
    )
}

/// A task for a stopped instance (a reply to a task it sent, named
/// `target`): stored in the spool its name and workspace own, with that
/// spool's checks but for the in-flight window, which a reply to the
/// spool's own task does not count against. No such spool, or one that is
/// in use by another instance of the name, is `no_target`.
pub(super) fn store_for_stopped(
    config: &Config,
    registry_dir: &Path,
    target: &str,
    (name, workspace): &(String, String),
    task: Task,
) -> SendResult {
    let id = task.message_id.clone();
    let gone = |why: &str| {
        let why = format!("{} ({}) is not running{why}", escape(name), escape(target));
        outcome(Status::NoTarget, &id, why)
    };
    let Some(known) = lookup::known_spools()
        .into_iter()
        .find(|s| s.name == *name && s.workspace == *workspace)
    else {
        return gone(" and has no spool here");
    };
    if !known.offline {
        let denied = outcome(Status::Denied, &id, no_offline(name));
        return with_target(denied, spool_target(&known));
    }
    let config = Config {
        max_inflight: 0,
        ..config.clone()
    };
    store(&config, registry_dir, &known, &id, || task)
        .unwrap_or_else(|| gone(", and its spool is in use by another instance"))
}

/// Stores one task in an offline spool with the receiver's own checks,
/// records it in that spool's transcript as a live receiver would (marked
/// `stored`), and wakes the agent if it has a wake socket; `None` while the
/// spool's lock is held. A spool that cannot be opened or store the task
/// is an error, not a verdict: `transport`.
fn store(
    config: &Config,
    registry_dir: &Path,
    known: &KnownSpool,
    id: &str,
    make_task: impl FnOnce() -> Task,
) -> Option<SendResult> {
    // Every answer names the spool's owner, as a live receiver's does.
    let answer = |verdict: Result<Verdict, NotStored>| {
        let r = match verdict {
            Ok(v) => v.answer(id.into(), None),
            Err(e) => outcome(Status::Transport, id, e.message()),
        };
        Some(with_target(r, spool_target(known)))
    };
    // Written as the spool's account (`--user`), never left root's.
    if let Err(e) = crate::base::accounts::write_as_target() {
        return answer(Err(NotStored(e)));
    }
    let s = match Spool::open_offline(&known.dir, config.fsync) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        // Not a verdict on the task either: nothing was stored.
        Err(e) => return answer(Err(NotStored(e))),
    };
    let task = make_task();
    // The agent's own sender rules, as its listener would apply them.
    if let Some(why) = known.policy.check(
        task.sender.name.as_deref().unwrap_or(""),
        task.sender.workspace.as_deref().unwrap_or(""),
    ) {
        return answer(Ok(Verdict::with_reason(Status::Denied, why)));
    }
    let limits = crate::spool::Limits {
        max_queue: config.max_queue,
        max_inflight: config.max_inflight,
    };
    let from = crate::workers::turn::display_name(&task.sender);
    let pid = Some(std::process::id());
    // Under the spool's lock, as a live receiver records an acceptance.
    let announce = |task: &Task, queue_position| {
        let hub = crate::spool::events::Hub::open(s.dir());
        let mut event = Accepted::new(task, None, &from, pid, queue_position);
        event.stored = true;
        hub.record(&Body::MessageAccepted(event));
        hub.flush();
    };
    let admitted = s.admit(task, None, limits, || false, announce);
    let verdict = server::admission_verdict(admitted, Receiver::Offline { name: &known.name });
    if matches!(&verdict, Ok(v) if v.status == Status::Stored) {
        super::wake::wake(registry_dir, &known.name);
    }
    answer(verdict)
}
