//! Every delivery passes the same checks in the same order (docs/protocol.md
//! §5), on either wire, and a task is stored only once
//! all of them pass. Here live the checks with sender verification and
//! policy, the one reading of what the spool says about an offered task
//! (`admission_verdict`, which the offline path in `relay` shares), and
//! the events that record the outcome.

use super::request::SendRequest;
use super::{Event, Peer, RpcError, Shared};
use crate::base::error::{Error, Invalid};
use crate::base::status::Status;
use crate::registry::{self, RegistryDir};
use crate::spool::{self, Admission, Limits, Sender, Task};
use crate::wire::answer::SendResult;
use crate::wire::body::Accepted;
use crate::wire::{Body, State, TaskMode};
use crate::{sys, wire};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Exact reasons, shared with the tests and docs/protocol.md.
pub mod reason {
    pub const BAD_MESSAGE_ID: &str = "message_id does not match [A-Za-z0-9_.-]{1,100}";
    pub const EMPTY_BODY: &str = "body is empty";
    pub const BAD_SENDER_ID: &str = "sender.instance_id does not match [A-Za-z0-9_.-]{1,100}";
    pub const BAD_SENDER_NAME: &str = "sender.name does not match [A-Za-z0-9_.-]{1,64}";
    pub const BAD_SENDER_WORKSPACE: &str =
        "sender.workspace is not an absolute path of at most 4096 bytes";
    pub const BAD_IN_REPLY_TO: &str = "in_reply_to does not match [A-Za-z0-9_.-]{1,100}";
    pub const BAD_MODE: &str = "mode is not queue or steer";
    pub const BAD_HOP: &str = "hop is negative";
    pub const NOT_VERIFIED: &str = "sender not verified";
    pub const REUSED: &str = "message_id reused with a different body";
    pub const DUPLICATE: &str = "this message_id was already accepted with the same body";
    pub const PAUSED: &str = "the instance is paused";
    pub const UNREADABLE: &str =
        "message_id was accepted before, but its stored record cannot be read to compare bodies";
}

/// Runs every acceptance check of docs/protocol.md §5 in order and, if all pass,
/// stores the task. Used by both wires. `body_json`, when the caller has
/// it, is the body as a JSON string. A spool that cannot store the task
/// is not a delivery outcome but an internal error: nothing was accepted.
pub fn deliver(
    shared: &Shared,
    mut req: SendRequest,
    body_json: Option<&RawValue>,
    peer: &Peer,
    wire: &str,
) -> Result<SendResult, RpcError> {
    let checked = check_values(shared, &req)
        .and_then(|hop| Ok((hop, check_sender(shared, &req, peer, hop)?)));
    // `admit` takes the body out of `req` when it builds the task.
    let Outcome { verdict, from } = match checked {
        Ok((hop, sender)) => admit(shared, &mut req, sender, hop, body_json, peer, wire),
        Err(refusal) => refusal,
    };
    // Refused before its sender was recorded: a bridge is shown as the
    // remote end, whatever its `sender` claims.
    let bridged = peer
        .bridge
        .get()
        .map(|k| crate::workers::turn::remote_name(k.label.as_deref()));
    let refused = |status: Status, reason: &str| {
        let claimed = || req.sender_instance_id.as_deref();
        let from = from.as_deref().or(bridged.as_deref()).or_else(claimed);
        shared.hub.emit(Body::MessageRejected {
            from: from.unwrap_or("(cli)"),
            message_id: &req.message_id,
            pid: peer.pid,
            reason,
            status,
        });
    };
    let verdict = match verdict {
        Ok(v) if v.status == Status::Accepted => {
            let _ = crate::base::failpoint::hit("before-answer");
            // The acceptance was recorded under the spool lock (see `admit`).
            if shared.wake_on_accept.load(Ordering::SeqCst) {
                let _ = shared.events.send(Event::Queued);
            }
            v
        }
        Ok(v) => {
            refused(v.status, v.reason.as_deref().unwrap_or_default());
            v
        }
        Err(e) => {
            // The transcript says what the sender is told, `try again`
            // included.
            refused(Status::Error, &e.message());
            return Err(RpcError::new(wire::INTERNAL_ERROR, e.message()));
        }
    };
    Ok(verdict.answer(req.message_id, Some(shared.state())))
}

/// What an offered task came to, as its sender is told.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    pub queue_position: Option<usize>,
    pub reason: Option<String>,
}

impl Verdict {
    pub fn with_reason(status: Status, reason: impl Into<String>) -> Verdict {
        Verdict {
            status,
            queue_position: None,
            reason: Some(reason.into()),
        }
    }

    /// The answer that tells the sender: a live receiver's, with its
    /// `state`, or an offline sender's own, without.
    pub fn answer(self, message_id: String, state: Option<State>) -> SendResult {
        SendResult {
            message_id: Some(message_id),
            queue_position: self.queue_position,
            reason: self.reason,
            state,
            status: self.status.to_string(),
            ..SendResult::default()
        }
    }
}

/// Who judged an offered task, for the words of the verdict.
#[derive(Clone, Copy, Debug)]
pub enum Receiver<'a> {
    /// A live instance, answering the sender with this instance id (empty
    /// for a plain sender, which no in-flight window applies to).
    Live { sender_id: &'a str },
    /// An offline sender, storing into the spool of the stopped agent of
    /// this name (docs/protocol.md §8): its acceptance is `stored`.
    Offline { name: &'a str },
}

/// A spool that could not store a task (a full disk, an I/O error, a
/// spool that cannot be opened). Never a verdict on the task: nothing was
/// stored, and the sender may retry with the same id.
#[derive(Debug)]
pub struct NotStored(pub Error);

impl NotStored {
    /// What the sender is told: the -32603 message of a live receiver, and
    /// the `transport` reason of an offline sender, and the reason its
    /// refusal is recorded with. A shortage (descriptors, memory, a full
    /// disk) passes: the sender is told to try again, in the words every
    /// shortage is said in.
    pub fn message(&self) -> String {
        let again = self.0.shortage().map_or("", |_| ": try again");
        format!("internal error: {self}; the task was not accepted{again}")
    }
}

impl fmt::Display for NotStored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the spool could not store the task: {}", self.0)
    }
}

/// The one reading of what `Spool::admit` returned, for a live receiver
/// (checks 14 to 18 of `message/send`) and an offline sender alike.
pub fn admission_verdict(
    admitted: crate::base::error::Result<Admission>,
    receiver: Receiver<'_>,
) -> Result<Verdict, NotStored> {
    Ok(match admitted.map_err(NotStored)? {
        Admission::Accepted { queue_position } => match receiver {
            Receiver::Live { .. } => Verdict {
                status: Status::Accepted,
                queue_position: Some(queue_position),
                reason: None,
            },
            Receiver::Offline { name } => Verdict {
                status: Status::Stored,
                queue_position: Some(queue_position),
                reason: Some(format!(
                    "{name} is not running; the task waits in its spool and runs when it starts"
                )),
            },
        },
        Admission::Duplicate => Verdict::with_reason(Status::Duplicate, reason::DUPLICATE),
        Admission::Reused => Verdict::with_reason(Status::Invalid, reason::REUSED),
        Admission::Unreadable => Verdict::with_reason(Status::Invalid, reason::UNREADABLE),
        Admission::Paused => Verdict::with_reason(Status::Paused, reason::PAUSED),
        Admission::InflightFull { limit } => Verdict::with_reason(
            Status::InflightFull,
            match receiver {
                Receiver::Live { sender_id } => format!(
                    "sender {sender_id} already has {limit} tasks in flight here (BATON_MAX_INFLIGHT)"
                ),
                Receiver::Offline { .. } => format!(
                    "this sender already has {limit} tasks in flight there (BATON_MAX_INFLIGHT)"
                ),
            },
        ),
        Admission::Full { limit } => Verdict::with_reason(
            Status::Full,
            format!("the queue is full: {limit} tasks waiting or running (BATON_MAX_QUEUE)"),
        ),
    })
}

/// What the checks came to, and the sender as shown once it is known.
struct Outcome {
    verdict: Result<Verdict, NotStored>,
    from: Option<String>,
}

fn refuse(status: Status, reason: impl Into<String>) -> Outcome {
    Outcome {
        verdict: Ok(Verdict::with_reason(status, reason)),
        from: None,
    }
}

/// A refusal past verification, which names the sender as verified, as an
/// acceptance does.
fn refuse_verified(sender: &Sender, status: Status, reason: String) -> Outcome {
    Outcome {
        from: Some(crate::workers::turn::display_name(sender)),
        ..refuse(status, reason)
    }
}

/// Checks 1 to 10: the values of the request, in order; the hop.
fn check_values(shared: &Shared, req: &SendRequest) -> Result<u64, Outcome> {
    if req.target_instance_id != shared.instance_id {
        return Err(refuse(
            Status::WrongTarget,
            format!(
                "this is instance {}, not {}",
                shared.instance_id,
                crate::text::sanitize::escape(&req.target_instance_id)
            ),
        ));
    }
    check_request(&shared.config, req).map_err(|v| refuse(v.status, v.reason.unwrap_or_default()))
}

/// Checks 2 to 10, which need no instance (a stand-in for a stopped
/// agent, `bridge --offline`, makes them too): the hop, or the refusal.
pub fn check_request(cfg: &crate::base::config::Config, req: &SendRequest) -> Result<u64, Verdict> {
    let invalid = |reason: &str| Err(Verdict::with_reason(Status::Invalid, reason));
    let bad_id = |s: &Option<String>| s.as_deref().is_some_and(|s| !registry::valid_id(s));
    if !registry::valid_id(&req.message_id) {
        return invalid(reason::BAD_MESSAGE_ID);
    }
    if req.body.trim().is_empty() {
        return invalid(reason::EMPTY_BODY);
    }
    if req.body.len() > cfg.max_message_bytes {
        return invalid(&format!(
            "body is {} bytes, over the limit of {} (BATON_MAX_MESSAGE_BYTES)",
            req.body.len(),
            cfg.max_message_bytes
        ));
    }
    if bad_id(&req.sender_instance_id) {
        return invalid(reason::BAD_SENDER_ID);
    }
    let name = req.sender_name.as_deref();
    if name.is_some_and(|s| !registry::valid_name(s)) {
        return invalid(reason::BAD_SENDER_NAME);
    }
    let workspace = req.sender_workspace.as_deref();
    if workspace.is_some_and(|w| !w.starts_with('/') || w.len() > 4096) {
        return invalid(reason::BAD_SENDER_WORKSPACE);
    }
    if bad_id(&req.in_reply_to) {
        return invalid(reason::BAD_IN_REPLY_TO);
    }
    if req.mode.parse::<TaskMode>().is_err() {
        return invalid(reason::BAD_MODE);
    }
    req.hop.map_or_else(|| invalid(reason::BAD_HOP), Ok)
}

/// Checks 11 to 13: the sender verifies, the policy allows it, the hop is
/// within the limit. The recorded sender.
fn check_sender(
    shared: &Shared,
    req: &SendRequest,
    peer: &Peer,
    hop: u64,
) -> Result<Sender, Outcome> {
    let cfg = &shared.config;
    // A plain sender's working directory as the kernel reports it: it is
    // both recorded and what the policy judges.
    let bridge = peer.caller(shared).bridge;
    let cwd = match (&req.sender_instance_id, &bridge) {
        (None, None) => peer.cwd(),
        _ => None,
    };
    let sender = match bridge {
        // A remote key is no instance here, whatever it claims, and has
        // no directory of its own: it is recorded as remote.
        Some(key) => Sender {
            pid: peer.pid,
            remote: Some(key.remote.unwrap_or_else(|| "ssh".into())),
            key: key.label,
            ..Sender::default()
        },
        None => verify_sender(shared, req, peer, cwd.clone())
            .map_err(|why| refuse(Status::Invalid, format!("{}: {why}", reason::NOT_VERIFIED)))?,
    };
    // Only verified identity is matched: a plain sender's name and claimed
    // workspace are self-reported, so it is judged by its working
    // directory.
    let (name, workspace) = match sender.instance_id {
        Some(_) => (sender.name.as_deref(), sender.workspace.as_deref()),
        None => (None, cwd.as_deref()),
    };
    if let Some(why) = (shared.policy).check(name.unwrap_or(""), workspace.unwrap_or("")) {
        return Err(refuse_verified(&sender, Status::Denied, why));
    }
    if cfg.max_hops > 0 && hop > cfg.max_hops {
        let why = format!(
            "hop {hop} is over the limit of {} (BATON_MAX_HOPS)",
            cfg.max_hops
        );
        return Err(refuse_verified(&sender, Status::HopLimit, why));
    }
    Ok(sender)
}

/// Checks 14 to 18, which the spool runs under its lock: builds the task,
/// offers it, and records its acceptance before anyone can claim it.
fn admit(
    shared: &Shared,
    req: &mut SendRequest,
    sender: Sender,
    hop: u64,
    body_json: Option<&RawValue>,
    peer: &Peer,
    wire: &str,
) -> Outcome {
    let cfg = &shared.config;
    // The body's JSON text, escaped once (or as the line spelled it) for
    // both the task file and the event.
    let body_json = body_json.map_or_else(
        || Cow::Owned(serde_json::value::to_raw_value(&req.body).expect("a string serializes")),
        Cow::Borrowed,
    );
    let task = spool::new_task(
        &req.message_id,
        std::mem::take(&mut req.body),
        sender,
        hop,
        req.in_reply_to.clone(),
        &req.mode,
        peer.pid,
        wire,
    );
    // A reply to a task this instance sent (its id starts with ours) is
    // the answer it waits for: it does not count against its sender's
    // in-flight window, or a sender with questions queued here could
    // never answer. The queue limit still holds.
    let answers_us = task
        .in_reply_to
        .as_deref()
        .and_then(|r| r.strip_prefix(shared.instance_id.as_str()))
        .is_some_and(|rest| rest.starts_with('-'));
    let limits = Limits {
        max_queue: cfg.max_queue,
        max_inflight: if answers_us { 0 } else { cfg.max_inflight },
    };
    let sender_id = task.sender.instance_id.clone().unwrap_or_default();
    let from = crate::workers::turn::display_name(&task.sender);
    let announce = |task: &Task, queue_position| {
        let event = Accepted::new(task, Some(&body_json), &from, peer.pid, queue_position);
        shared.hub.record(&Body::MessageAccepted(event));
    };
    let admitted = shared.spool.admit(
        task,
        Some(&body_json),
        limits,
        || shared.paused.load(Ordering::SeqCst),
        announce,
    );
    let verdict = admission_verdict(
        admitted,
        Receiver::Live {
            sender_id: &sender_id,
        },
    );
    Outcome {
        verdict,
        from: Some(from),
    }
}

/// Builds the recorded sender. A claimed instance id must be verified
/// (`verify_instance`).
fn verify_sender(
    shared: &Shared,
    req: &SendRequest,
    peer: &Peer,
    cwd: Option<String>,
) -> Result<Sender, Invalid> {
    let Some(id) = &req.sender_instance_id else {
        // A name is only what a verified manifest says; a plain sender is
        // shown as such, with its kernel-reported pid and directory.
        return Ok(Sender {
            workspace: cwd.or_else(|| req.sender_workspace.clone()),
            pid: peer.pid,
            ..Sender::default()
        });
    };
    let m = verify_instance(shared, id, peer)?;
    Ok(Sender {
        instance_id: Some(m.instance_id),
        name: Some(m.name),
        workspace: Some(m.workspace),
        pid: peer.pid,
        ..Sender::default()
    })
}

/// Checks that the connection comes from instance `id`: its manifest, in
/// a scanned registry that passes the discovery checks, names the
/// connection's peer pid, and that pid serves the manifest's socket,
/// itself or through a child (`check_served`). Its manifest.
pub(super) fn verify_instance(
    shared: &Shared,
    id: &str,
    peer: &Peer,
) -> Result<registry::Manifest, Invalid> {
    let Some(pid) = peer.pid else {
        return Err("this platform does not report the peer pid".into());
    };
    let dirs = registry::scan_dirs(&shared.registry);
    for dir in &dirs {
        let path: PathBuf = registry::manifest_path(&dir.path, id);
        if !path.exists() && std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let m = registry::read_manifest(dir, &path)?;
        if m.pid != pid {
            return Err(format!(
                "instance {id} has pid {}, but the connection comes from pid {pid}",
                m.pid
            )
            .into());
        }
        // The socket is asked once per connection: an instance's sends on
        // one connection pay for one connect. Its pid is compared above at
        // every send.
        peer.serves(id, &m.socket, || check_served(&dirs, id, &m.socket, pid))?;
        return Ok(m);
    }
    Err(format!("no manifest for instance {id} in the registry").into())
}

/// Checks that `pid` serves `socket`, instance `id`'s, now. Anyone of the
/// user can write a manifest naming its own pid; what it cannot fake is
/// the kernel's word on who listens on a socket, which a connected client
/// reads (`SO_PEERCRED`: the process that called `listen`). Nothing is
/// said on the socket, so a zcoder instance's is checked alike, and the
/// connect never waits: a listener whose backlog is full is refused at
/// once. The listener is `pid`, or a direct child of it that is no
/// instance itself (`serving_child`): zcoder's main process sends, and
/// its background listener serves its socket.
fn check_served(dirs: &[RegistryDir], id: &str, socket: &str, pid: u32) -> Result<(), Invalid> {
    let unreachable = |why: String| {
        Invalid(format!(
            "instance {id}'s socket {socket} cannot be reached: {why}"
        ))
    };
    let stream = sys::connect_nowait(Path::new(socket)).map_err(|e| {
        unreachable(match e.kind() {
            io::ErrorKind::WouldBlock => "its backlog is full (EAGAIN)".into(),
            _ => e.to_string(),
        })
    })?;
    let why = match sys::peer_cred(&stream).map(|c| c.pid) {
        Ok(Some(listener)) if listener == pid => return Ok(()),
        Ok(Some(listener)) => match serving_child(dirs, listener, pid) {
            Ok(()) => return Ok(()),
            Err(why) => why,
        },
        Ok(None) => "does not say which pid serves it".into(),
        Err(e) => return Err(unreachable(e.to_string())),
    };
    Err(format!("instance {id}'s socket {socket} {why}").into())
}

/// Checks that `listener` is a child of `pid` (its parent now, so never
/// a process that outlived `pid`) and is no instance of its own: no
/// manifest in the scanned registries names it. Without the second, a
/// process that started an instance could link that instance's socket
/// into the registry under a manifest of its own and be verified as
/// whatever that manifest says, through its child. Only a direct child:
/// a zcoder listener is its main process's, and a deeper descendant would
/// let any ancestor of a listener (a shell, a service manager) speak
/// through it. Why not, when it is not.
fn serving_child(dirs: &[RegistryDir], listener: u32, pid: u32) -> Result<(), String> {
    let parent = sys::process(listener).map(|p| p.ppid);
    if parent != Some(pid) {
        return Err(format!(
            "is served by pid {listener}, not by pid {pid} or a child of it"
        ));
    }
    match instance_of(dirs, listener) {
        Some(other) => Err(format!(
            "is served by pid {listener}, a child of pid {pid} that is instance {other}"
        )),
        None => Ok(()),
    }
}

/// The instance whose manifest, in one of `dirs`, names `pid` as its
/// own. An instance id begins with its pid (baton's and zcoder's alike),
/// so only `a-<pid>-*.json` is read.
fn instance_of(dirs: &[RegistryDir], pid: u32) -> Option<String> {
    let prefix = format!("a-{pid}-");
    dirs.iter().find_map(|dir| {
        std::fs::read_dir(&dir.path)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix) && n.ends_with(".json"))
            .filter_map(|n| registry::read_manifest(dir, &dir.path.join(n)).ok())
            .find(|m| m.pid == pid)
            .map(|m| m.instance_id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn an_admission_reads_alike_live_and_offline_but_a_storage_error_is_no_verdict() {
        let live = Receiver::Live { sender_id: "s-1" };
        let offline = Receiver::Offline { name: "keeper" };
        let read = |a: Admission, r| admission_verdict(Ok(a), r).unwrap();
        let same = || {
            [
                (Admission::Duplicate, Status::Duplicate),
                (Admission::Reused, Status::Invalid),
                (Admission::Unreadable, Status::Invalid),
                (Admission::Paused, Status::Paused),
                (Admission::InflightFull { limit: 2 }, Status::InflightFull),
                (Admission::Full { limit: 3 }, Status::Full),
            ]
        };
        for ((a, status), (b, _)) in same().into_iter().zip(same()) {
            let (l, o) = (read(a, live), read(b, offline));
            assert_eq!((l.status, o.status), (status, status));
            assert_eq!((l.queue_position, o.queue_position), (None, None));
            assert!(l.reason.is_some() && o.reason.is_some(), "{l:?}");
        }
        let accepted = || Admission::Accepted { queue_position: 4 };
        assert_eq!(
            read(accepted(), live),
            Verdict {
                status: Status::Accepted,
                queue_position: Some(4),
                reason: None
            }
        );
        let stored = read(accepted(), offline);
        assert_eq!(
            (stored.status, stored.queue_position),
            (Status::Stored, Some(4))
        );
        let err = |errno| {
            Error::io(
                "write",
                Path::new("/s/tmp/x"),
                std::io::Error::from_raw_os_error(errno),
            )
        };
        for r in [live, offline] {
            for short in [libc::EMFILE, libc::ENOSPC, libc::EDQUOT] {
                let e = admission_verdict(Err(err(short)), r).unwrap_err();
                assert!(
                    e.message().starts_with(
                        "internal error: the spool could not store the task: write /s/tmp/x: "
                    ) && e
                        .message()
                        .ends_with("; the task was not accepted: try again"),
                    "{}",
                    e.message()
                );
            }
            let e = admission_verdict(Err(err(libc::ENOTDIR)), r).unwrap_err();
            assert!(
                e.message().starts_with(
                    "internal error: the spool could not store the task: write /s/tmp/x: "
                ) && e.message().ends_with("; the task was not accepted"),
                "{}",
                e.message()
            );
        }
    }
}
