//! Delivering a task to another instance: the sends an instance makes for
//! its agent (`relay/send`, `--reply`), run on a worker thread, here; the
//! sender-side guards (`guard`), delivery to a live peer with one retry
//! (`deliver`), offline delivery into a stopped agent's spool
//! (`offline`), a stopped agent's stand-in on a pipe (`standin`, for
//! `bridge --offline`) and what a bridge declares (`bridge`), wake sockets
//! (`wake`), and commands run on another host (`via`). The CLI uses the same parts for
//! plain sends.

pub mod bridge;
mod deliver;
mod guard;
pub mod hosts;
mod offline;
mod result;
mod standin;
pub mod via;
mod wake;

pub use crate::registry::lookup::{KnownSpool, known_spools};
pub use deliver::{ZCODER_MAX_BYTES, deliver, deliver_zcoder};
pub use guard::{Refusal, check_frame, check_limit};
pub use offline::{Route, plain_task, route};
pub use result::{peer_target, spool_target};
pub use standin::stand_in;
pub use wake::{wake, wake_socket};

use crate::base::config::Config;
use crate::base::status::Status;
use crate::client::ClientError;
use crate::registry::lookup::{self, Lookup, Target};
use crate::registry::{self, Peer, Wire};
use crate::spool::Task;
use crate::text::sanitize::escape;
use crate::wire::answer::SendResult;
use crate::wire::request::{SendParams, SendSender};
use deliver::transport_failure;
use result::{no_target, outcome, with_target};
use std::path::PathBuf;

/// The instance a relayed send is made on behalf of.
#[derive(Clone)]
pub struct Origin {
    pub config: Config,
    pub registry: PathBuf,
    pub instance_id: String,
    pub name: String,
    pub workspace: String,
}

/// One send an instance makes for its agent.
pub struct Outbound {
    pub target: String,
    pub body: String,
    pub message_id: String,
    pub hop: u64,
    pub in_reply_to: Option<String>,
    pub mode: String,
    /// During a relayed turn: the only instance id that may be the target.
    pub only: Option<String>,
    /// Why `only` is set, for the refusal.
    pub scope: String,
    /// The name and workspace of `only`, when known: while that instance
    /// is stopped, the task goes to the spool they own, like any task
    /// for a stopped agent.
    pub only_spool: Option<(String, String)>,
}

/// Runs the sender-side guards, resolves the target and delivers. The
/// result is a `message/send` result, or a sender-side status: `denied`,
/// `invalid`, `no_target` (with `candidates`), `transport` or
/// `unsupported`.
pub fn send_as(origin: &Origin, out: &Outbound) -> SendResult {
    let refused = |r: Refusal| outcome(r.status, &out.message_id, r.reason);
    if let Err(r) = guard::check_body(&out.body) {
        return refused(r);
    }
    let peer = match find_target(origin, out) {
        Route::Live(peer) => *peer,
        Route::Done(done) => return done,
    };
    let only = out.only.as_deref();
    if let Err(r) = guard::check_scope(&origin.instance_id, only, &out.scope, &peer) {
        return refused(r);
    }
    let r = match peer.wire {
        Wire::Zcoder => to_zcoder(origin, out, &peer),
        Wire::Jsonrpc => to_native(origin, out, &peer),
    };
    // Whatever came of it names the peer it went to.
    with_target(r, peer_target(&peer))
}

/// The task stored when the target is a stopped agent: a plain one, sent
/// as this instance.
fn task(origin: &Origin, out: &Outbound) -> Task {
    let mut task = plain_task(&out.message_id, &out.body, &out.mode);
    task.sender.instance_id = Some(origin.instance_id.clone());
    task.sender.name = Some(origin.name.clone());
    task.sender.workspace = Some(origin.workspace.clone());
    task.hop = out.hop;
    task.in_reply_to = out.in_reply_to.clone();
    task
}

/// The live peer the send goes to, or the result when there is none,
/// or when the task was stored for a stopped agent instead.
fn find_target(origin: &Origin, out: &Outbound) -> Route {
    let (config, id) = (&origin.config, out.message_id.as_str());
    // A relayed turn may answer only its sender instance, which a stored
    // task for a name is not: offline delivery is for local sends.
    let Some(only) = &out.only else {
        let make = || task(origin, out);
        return match route(config, &origin.registry, &out.target, id, &make) {
            Route::Done(v) => Route::Done(without_self(v, &origin.instance_id)),
            live => live,
        };
    };
    let dirs = registry::scan_dirs(&origin.registry);
    let all = match lookup::find(&dirs, &Target::Named(&out.target), config.io_timeout) {
        Lookup::One(p) => {
            return offline::live(config, p, id);
        }
        Lookup::None { .. } | Lookup::Stopped(_) if *only == out.target => {
            return Route::Done(match &out.only_spool {
                Some(owner) => {
                    let task = task(origin, out);
                    offline::store_for_stopped(config, &origin.registry, only, owner, task)
                }
                None => {
                    let why = format!("{} is not running", escape(&out.target));
                    outcome(Status::NoTarget, id, why)
                }
            });
        }
        Lookup::Short(why) => return Route::Done(outcome(Status::Transport, id, why)),
        Lookup::None { live: all, .. } | Lookup::Several { matched: all, .. } => all,
        // Every live instance is a candidate, as when no spool has the name.
        Lookup::Stopped(_) => registry::discover(&dirs, None, config.io_timeout).peers,
    };
    let why = format!(
        "no single live instance has the id or name {}",
        escape(&out.target)
    );
    let v = no_target(id, why, lookup::as_candidates(&all));
    Route::Done(without_self(v, &origin.instance_id))
}

/// A `no_target` result without the sender among its candidates: it
/// cannot be sent to.
fn without_self(mut r: SendResult, own_id: &str) -> SendResult {
    if let Some(list) = &mut r.candidates {
        list.retain(|c| c.instance_id != own_id);
    }
    r
}

/// Delivers to a zcoder peer, as this instance.
fn to_zcoder(origin: &Origin, out: &Outbound, peer: &Peer) -> SendResult {
    let id = &out.message_id;
    deliver_zcoder(&origin.config, peer, id, &out.body, Some(origin))
        .unwrap_or_else(|e| transport_failure(peer, id, &e))
}

/// Delivers to a native peer with `message/send`, as this instance.
fn to_native(origin: &Origin, out: &Outbound, peer: &Peer) -> SendResult {
    let (m, id) = (&peer.manifest, out.message_id.as_str());
    let params = SendParams {
        body: out.body.clone(),
        hop: out.hop,
        in_reply_to: out.in_reply_to.clone(),
        message_id: id.to_string(),
        mode: out.mode.clone(),
        sender: SendSender {
            instance_id: Some(origin.instance_id.clone()),
            name: Some(origin.name.clone()),
            workspace: Some(origin.workspace.clone()),
        },
        target_instance_id: Some(m.instance_id.clone()),
    };
    // The receiver's limit first: it says more than the frame bound.
    if let Err(r) = check_limit(peer, &out.body).and_then(|()| check_frame(&origin.config, &params))
    {
        return outcome(r.status, id, r.reason);
    }
    match deliver(&origin.config, peer, &params) {
        Ok(r) => r,
        Err(ClientError::Rpc { code, message }) => {
            let why = format!(
                "{} answered error {code}: {}",
                escape(&m.name),
                escape(&message)
            );
            outcome(Status::Transport, id, why)
        }
        Err(e) => transport_failure(peer, id, &e),
    }
}
