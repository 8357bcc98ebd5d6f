//! `baton ping`, `status`, `pause` and `resume`: one call to one instance;
//! `status` of a stopped agent reads its spool instead.

use super::args::Args;
use super::target::{self, Resolved};
use super::{On, Parsed};
use crate::base::config::Config;
use crate::base::error::{ExitCode, Result};
use crate::registry::lookup::KnownSpool;
use crate::registry::{Peer, Wire};
use crate::server::ANSWER_WAIT_MIN;
use crate::text::sanitize::escape;
use crate::wire::answer::{ControlStatus, Paused, Pong};
use crate::wire::request::NoParams;
use crate::wire::{Call, Method};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// A zcoder peer's ping: its frame's `ping`, whose `pong` confirms the id
/// and carries the state. The answer has the shape of a native one.
fn zcoder_ping(config: &Config, peer: &Peer) -> Result<Pong> {
    let m = &peer.manifest;
    let state = crate::client::zcoder_ping(Path::new(&m.socket), &m.instance_id, config.io_timeout)
        .map_err(|e| target::transport(peer, e))?;
    Ok(Pong {
        approvals: None,
        instance_id: m.instance_id.clone(),
        queued: None,
        state,
        status: "pong".into(),
        wire: Some("zcoder".into()),
    })
}

/// `baton ping [TARGET] [--json]`.
pub struct Ping(On);

impl Parsed for Ping {
    fn parse(args: &Args) -> Result<Ping> {
        On::parse(args, "ping").map(Ping)
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let on = &self.0;
        let peer = target::resolve(config, on.target())?;
        let start = Instant::now();
        let r = if peer.wire == Wire::Zcoder {
            zcoder_ping(config, &peer)?
        } else {
            target::call::<Pong>(config, &peer, Method::Ping, NoParams {})?.1
        };
        let micros = start.elapsed().as_micros();
        let text = format!(
            "pong from {peer}: {}, {:.2} ms\n",
            r.state,
            micros as f64 / 1000.0
        );
        let timed = Timed {
            answer: &r,
            round_trip_us: micros,
        };
        super::answer(on.json, &timed, &text)
    }
}

/// `ping --json`: the answer, and how long it took.
#[derive(Serialize)]
struct Timed<'a, T> {
    #[serde(flatten)]
    answer: &'a T,
    round_trip_us: u128,
}

/// A zcoder peer's status: what its manifest says, with the state its
/// ping answered (its frame has nothing more to ask).
fn zcoder_status(json: bool, config: &Config, peer: &Peer) -> Result<ExitCode> {
    let state = zcoder_ping(config, peer)?.state;
    let r = crate::wire::Manifest {
        state: state.to_string(),
        wire: Wire::Zcoder.as_str().to_string(),
        ..peer.manifest.clone()
    };
    let m = &peer.manifest;
    let s = |v: &str| match v {
        "" => "-".into(),
        v => escape(v).into_owned(),
    };
    let text = format!(
        "name:        {}\ninstance:    {}\npid:         {}\nstate:       {state}\nprofile:     {}\nmodel:       {}\nworkspace:   {}\nsocket:      {}\nwire:        zcoder (its frame tells no queue, spool or task)\n",
        s(&m.name),
        s(&m.instance_id),
        m.pid,
        s(&m.profile),
        s(&m.model),
        s(&m.workspace),
        s(&m.socket),
    );
    super::answer(json, &r, &text)
}

/// `baton status [TARGET] [--json]`.
pub struct Status(On);

impl Parsed for Status {
    fn parse(args: &Args) -> Result<Status> {
        On::parse(args, "status").map(Status)
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let on = &self.0;
        let peer = match target::resolve_or_stopped(config, on.target())? {
            Resolved::Live(peer) => *peer,
            Resolved::Stopped(spool) => return stopped_status(on.json, &spool),
        };
        if peer.wire == Wire::Zcoder {
            return zcoder_status(on.json, config, &peer);
        }
        let (_, r) =
            target::call::<ControlStatus>(config, &peer, Call::ControlStatus, NoParams {})?;
        let q = &r.queue;
        let mut text = format!(
            "name:        {}\ninstance:    {}\npid:         {}\nstate:       {}\nprofile:     {}\nmodel:       {}\nworkspace:   {}\nsocket:      {}\nspool:       {}\nqueued:      {} of {}\nprocessing:  {}\ninterrupted: {}\nopen task:   {}\n",
            escape(&r.name),
            escape(&r.instance_id),
            r.pid,
            r.state,
            escape(&r.profile),
            escape(&r.model),
            escape(&r.workspace),
            escape(&r.socket),
            escape(&r.spool),
            q.queued,
            q.max,
            q.processing,
            q.interrupted,
            r.open_task.as_deref().map_or("-".into(), escape),
        );
        if !r.operators.is_empty() {
            text.push_str(&format!("operators:   {}\n", operators_said(&r.operators)));
        }
        if let Some(c) = &r.codex {
            let line = match (c.connected, &c.thread, &c.reason) {
                (true, Some(t), _) => format!("{} (thread {})", c.socket, t),
                (true, None, _) => c.socket.clone(),
                (false, _, Some(why)) => format!(
                    "{} cannot be reached ({why}): tasks stay queued until it answers",
                    c.socket
                ),
                (false, _, None) => format!("{} (not asked yet)", c.socket),
            };
            text.push_str(&format!("codex:       {}\n", escape(&line)));
        }
        if let Some(pane) = &r.tmux_pane {
            let line = match &r.tmux_wait {
                Some(wait) => format!("{pane}: {wait}"),
                None => pane.clone(),
            };
            text.push_str(&format!("tmux pane:   {}\n", escape(&line)));
        }
        for id in &r.awaiting_approval {
            text.push_str(&format!(
                "awaiting approval: {} (answer with {})\n",
                escape(id),
                super::approve::answer_with(on.target())
            ));
        }
        super::answer(on.json, &r, &text)
    }
}

/// The accounts of `serve --operator`, as `status` and `list` name them:
/// `alice (uid 1001), root (uid 0)`.
pub(super) fn operators_said(uids: &[u32]) -> String {
    let named: Vec<String> = (uids.iter())
        .map(|u| format!("{} (uid {u})", escape(&crate::base::accounts::name_of(*u))))
        .collect();
    named.join(", ")
}

/// `status --json` of a stopped agent: what its spool holds, in the shape
/// of a live instance's answer where the members mean the same. `state`
/// is `stopped`, which no instance answers (so it is not a wire `State`).
#[derive(Serialize)]
struct StoppedStatus<'a> {
    name: &'a str,
    state: &'static str,
    /// Epoch seconds: `KnownSpool::stopped_since`.
    stopped_since: Option<u64>,
    workspace: &'a str,
    spool: String,
    /// Whether senders store tasks in its spool while it is stopped.
    offline: bool,
    queue: StoppedQueue,
    /// Always empty: only a running instance asks for an approval.
    awaiting_approval: [&'a str; 0],
}

#[derive(Serialize)]
struct StoppedQueue {
    queued: usize,
    processing: usize,
    interrupted: usize,
    rejected: usize,
}

/// `status` of a stopped agent: its spool read as `inbox list` reads it
/// (no lock, nothing moved), `state: stopped (since TIME)`.
fn stopped_status(json: bool, spool: &KnownSpool) -> Result<ExitCode> {
    let l = crate::spool::read_listing(&spool.dir)?;
    let r = StoppedStatus {
        name: &spool.name,
        state: "stopped",
        stopped_since: spool.stopped_since().map(|t| t as u64),
        workspace: &spool.workspace,
        spool: spool.dir.display().to_string(),
        offline: spool.offline,
        queue: StoppedQueue {
            queued: l.queued.len(),
            processing: l.processing.len(),
            interrupted: l.interrupted.len(),
            rejected: l.rejected.len(),
        },
        awaiting_approval: [],
    };
    let q = &r.queue;
    let text = format!(
        "name:        {}\nstate:       stopped ({})\nworkspace:   {}\nspool:       {}\nqueued:      {}\nprocessing:  {}\ninterrupted: {}\nrejected:    {}\noffline:     {}\n",
        escape(r.name),
        target::since(spool, false),
        escape(r.workspace),
        escape(&r.spool),
        q.queued,
        q.processing,
        q.interrupted,
        q.rejected,
        if r.offline {
            "yes: tasks sent to it wait in its spool"
        } else {
            "no (serve --no-offline): tasks sent to it are refused"
        },
    );
    super::answer(json, &r, &text)
}

/// `pause` (`PAUSE`) and `resume`. A pause is answered once the acceptances before
/// it are stored (up to 4 s: docs/protocol.md `control/pause`), so `baton
/// pause` waits as long as the instance's own connection thread does.
pub struct Pause<const PAUSE: bool>(On);

impl<const PAUSE: bool> Parsed for Pause<PAUSE> {
    fn parse(args: &Args) -> Result<Self> {
        On::parse(args, if PAUSE { "pause" } else { "resume" }).map(Pause)
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let mut config = config.clone();
        let mut call = Call::ControlResume;
        if PAUSE {
            config.io_timeout = config.io_timeout.max(ANSWER_WAIT_MIN);
            call = Call::ControlPause;
        }
        let peer = target::resolve(&config, self.0.target())?;
        let (_, r) = target::call::<Paused>(&config, &peer, call, NoParams {})?;
        let text = format!("{peer}: {}\n", r.state);
        super::answer(self.0.json, &r, &text)
    }
}
