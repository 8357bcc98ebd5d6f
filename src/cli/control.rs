//! `baton ping`, `status`, `pause` and `resume`: one call to one instance.

use super::args::Args;
use super::target;
use crate::config::Config;
use crate::error::{ExitCode, Result};
use crate::registry::{Peer, Wire};
use crate::sanitize::escape;
use crate::server::ANSWER_WAIT_MIN;
use crate::wire::answer::{ControlStatus, Paused, Pong};
use crate::wire::{Call, Method};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// A zcoder peer's ping: its frame's `ping`, whose `pong` confirms the id
/// and carries the state. The answer has the shape of a native one.
fn zcoder_ping(config: &Config, peer: &Peer) -> Result<Pong> {
    let m = &peer.manifest;
    let state = crate::client::zcoder_ping(Path::new(&m.socket), &m.instance_id, config.io_timeout)
        .map_err(|e| target::transport(peer, e))?;
    Ok(Pong {
        instance_id: m.instance_id.clone(),
        state,
        status: "pong".into(),
        wire: Some("zcoder".into()),
    })
}

pub fn ping(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "ping", 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    let start = Instant::now();
    let (mut v, r) = if peer.wire == Wire::Zcoder {
        let r = zcoder_ping(config, &peer)?;
        (json!(r), r)
    } else {
        target::call::<Pong>(config, &peer, Method::Ping, json!({}))?
    };
    let micros = start.elapsed().as_micros();
    v["round_trip_us"] = json!(micros);
    let text = format!(
        "pong from {peer}: {}, {:.2} ms\n",
        r.state,
        micros as f64 / 1000.0
    );
    super::answer(args, &v, &text)
}

/// A zcoder peer's status: what its manifest says, with the state its
/// ping answered (its frame has nothing more to ask).
fn zcoder_status(args: &Args, config: &Config, peer: &Peer) -> Result<ExitCode> {
    let state = zcoder_ping(config, peer)?.state;
    let mut r = json!(peer.manifest);
    r["state"] = json!(state);
    r["wire"] = json!("zcoder");
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
    super::answer(args, &r, &text)
}

pub fn status(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "status", 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    if peer.wire == Wire::Zcoder {
        return zcoder_status(args, config, &peer);
    }
    let (v, r) = target::call::<ControlStatus>(config, &peer, Call::ControlStatus, json!({}))?;
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
    let target = args.positional.first().map(String::as_str);
    for id in &r.awaiting_approval {
        text.push_str(&format!(
            "awaiting approval: {} (answer with {})\n",
            escape(id),
            super::approve::answer_with(target)
        ));
    }
    super::answer(args, &v, &text)
}

/// `pause` and `resume`. A pause is answered once the acceptances before
/// it are stored (up to 4 s: docs/protocol.md `control/pause`), so `baton
/// pause` waits as long as the instance's own connection thread does.
pub fn set_paused(args: &Args, config: &Config, cmd: &str) -> Result<ExitCode> {
    let mut config = config.clone();
    let mut call = Call::ControlResume;
    if cmd == "pause" {
        config.io_timeout = config.io_timeout.max(ANSWER_WAIT_MIN);
        call = Call::ControlPause;
    }
    super::at_most(args, cmd, 1)?;
    let peer = target::resolve(&config, args.positional.first().map(String::as_str))?;
    let (v, r) = target::call::<Paused>(&config, &peer, call, json!({}))?;
    let text = format!("{peer}: {}\n", r.state);
    super::answer(args, &v, &text)
}
