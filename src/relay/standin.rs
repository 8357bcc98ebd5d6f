//! A stopped agent's stand-in (`baton bridge --offline NAME`): the native
//! protocol on a pipe, read and checked as a connection's is (`server`:
//! the same line bounds, one deadline a message, the same parsing and the
//! same checks of `message/send`), answering `initialize` for the stopped
//! agent and storing each task in its spool as a local send would, or
//! delivering it when the agent has started meanwhile.

use super::bridge;
use super::offline::{Route, plain_task, route};
use crate::base::config::Config;
use crate::base::status::Status;
use crate::server::{self, SendRequest, invalid_params};
use crate::text::sanitize::escape;
use crate::wire::answer::{Hello, Offline, SendResult, Software};
use crate::wire::request::{SendParams, SendSender};
use crate::wire::{self, Id, Incoming, LineReader, Method, Pipe};
use serde_json::Value;
use std::io::{self, Write};
use std::path::Path;

/// Serves the requests read from `input` on `out` for `target`, a
/// stopped agent whose spool is in the registry `dir`, until the input
/// ends, a line cannot be read (too long, or not whole within the I/O
/// timeout) or an answer cannot be written. `key` is the label of the
/// key the bridge serves (`--key`), recorded with each task.
pub fn stand_in(
    config: &Config,
    dir: &Path,
    target: &str,
    key: Option<&str>,
    input: Pipe,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut reader = LineReader::new(input, config.max_bytes);
    let mut initialized = false;
    loop {
        // The client may take its time between requests, not within one.
        let line = match reader.read_line(None, config.io_timeout) {
            Ok(line) => line,
            Err(e) => {
                if let Some(line) = server::read_error_line(config, &e) {
                    out.write_all(&line)?;
                    out.flush()?;
                }
                return Ok(());
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let answer = match wire::classify(line) {
            Incoming::Invalid { id, code, message } => wire::error_line(&id, code, &message, None),
            Incoming::Notification { .. } | Incoming::Reply { .. } => continue,
            Incoming::Request { id, method, params } => {
                let answer = answer(
                    config,
                    dir,
                    target,
                    key,
                    (&id, &method, params),
                    initialized,
                );
                initialized |= Method::parse(&method) == Some(Method::Initialize);
                answer
            }
        };
        out.write_all(&answer)?;
        out.flush()?;
    }
}

/// The answer line to one request.
fn answer(
    config: &Config,
    dir: &Path,
    target: &str,
    key: Option<&str>,
    (id, name, params): (&Id, &str, Value),
    initialized: bool,
) -> Vec<u8> {
    let method = Method::parse(name);
    if !initialized && method != Some(Method::Initialize) {
        let message = "not initialized: the first request must be initialize";
        return server::RpcError::new(wire::NOT_INITIALIZED, message).line(id);
    }
    let Value::Object(mut params) = params else {
        return invalid_params("params must be an object").line(id);
    };
    match method {
        Some(Method::Initialize) => wire::result_line(id, &hello(target)),
        Some(Method::MessageSend) => {
            // Read and checked as a live instance does, but for the
            // target: a stopped agent has no instance id to name.
            params
                .entry("target_instance_id")
                .or_insert_with(|| Value::String(String::new()));
            match SendRequest::read(&params).map_err(server::RpcError::from) {
                Ok(req) => wire::result_line(id, &send(config, dir, target, key, &req)),
                Err(e) => e.line(id),
            }
        }
        _ => {
            let why = format!(
                "{} is not running: only message/send is taken for it, not {}",
                escape(target),
                escape(name)
            );
            server::RpcError::new(wire::METHOD_NOT_FOUND, why).line(id)
        }
    }
}

/// `initialize`'s answer for a stopped agent: no instance, and the agent
/// it stands in for.
fn hello(target: &str) -> Hello {
    Hello {
        offline: Some(Offline {
            name: target.to_string(),
        }),
        protocol_version: wire::PROTOCOL,
        server: Software::baton("baton"),
        ..Hello::default()
    }
}

/// `message/send` for the stopped agent: refused as a live instance would
/// refuse it, stored in its spool as having come through a bridge, or,
/// when it has started meanwhile, delivered to it (the request as the
/// client made it, for the instance's id).
fn send(
    config: &Config,
    dir: &Path,
    target: &str,
    key: Option<&str>,
    req: &SendRequest,
) -> SendResult {
    let message_id = req.message_id.as_str();
    let hop = match server::check_request(config, req) {
        Ok(hop) => hop,
        Err(v) => return v.answer(req.message_id.clone(), None),
    };
    // Stored as having come through a bridge, as a live instance records
    // it.
    let make = || {
        let mut task = plain_task(message_id, &req.body, &req.mode);
        task.sender.workspace = None;
        task.sender.remote = Some(bridge::ssh_remote().unwrap_or_else(|| "ssh".into()));
        task.sender.key = key.map(String::from);
        task
    };
    match route(config, dir, target, message_id, &make) {
        Route::Done(result) => result,
        Route::Live(peer) => {
            // It started meanwhile: delivered to it as a local send would
            // be, its answer naming it.
            let m = &peer.manifest;
            let params = SendParams {
                body: req.body.clone(),
                hop,
                in_reply_to: req.in_reply_to.clone(),
                message_id: message_id.to_string(),
                mode: req.mode.clone(),
                sender: SendSender {
                    instance_id: req.sender_instance_id.clone(),
                    name: req.sender_name.clone(),
                    workspace: req.sender_workspace.clone(),
                },
                target_instance_id: Some(m.instance_id.clone()),
            };
            match bridge::send(config, &peer, key, &params) {
                Ok(answer) => SendResult {
                    target: Some(super::peer_target(&peer)),
                    ..answer
                },
                Err(e) => SendResult {
                    message_id: Some(message_id.to_string()),
                    reason: Some(e.to_string()),
                    status: Status::Transport.to_string(),
                    ..SendResult::default()
                },
            }
        }
    }
}
