//! `baton send`: deliver one task and report exactly what happened to it.

use super::args::Args;
use super::{emit, emit_json, target};
use crate::client::{ClientError, Connection};
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry::{self, Peer};
use crate::sanitize::escape;
use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;

/// Reads the body from the argument or stdin, never more than one byte
/// past the limit.
fn read_body(arg: Option<&str>, limit: usize) -> Result<String> {
    match arg {
        Some(m) if m != "-" => Ok(m.to_string()),
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .take(limit as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| Error::io("read", Path::new("<stdin>"), e))?;
            String::from_utf8(buf)
                .map_err(|_| Error::Usage("send: the message on stdin is not valid UTF-8".into()))
        }
    }
}

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "send", 2)?;
    let Some(target_arg) = args.positional.first() else {
        return Err(Error::Usage(
            "send: TARGET is missing (see 'baton help send')".into(),
        ));
    };
    let body = read_body(
        args.positional.get(1).map(String::as_str),
        config.max_message_bytes,
    )?;
    if body.trim().is_empty() {
        return Err(Error::Usage("send: the message is empty".into()));
    }
    if body.len() > config.max_message_bytes {
        // stdin is read only to one byte past the limit, so its true size
        // is unknown.
        let size = match args.positional.get(1) {
            Some(m) if m != "-" => body.len().to_string(),
            _ => format!("more than {}", config.max_message_bytes),
        };
        return Err(Error::Usage(format!(
            "send: the message is {size} bytes, over the body limit of {} bytes (BATON_MAX_MESSAGE_BYTES)",
            config.max_message_bytes
        )));
    }
    let message_id = match args.value("message-id") {
        Some(id) if registry::valid_id(id) => id.to_string(),
        Some(id) => {
            return Err(Error::Usage(format!(
                "send: --message-id {}: an id must match [A-Za-z0-9_.-]{{1,100}}",
                escape(id)
            )));
        }
        None => format!("{}-{}", std::process::id(), registry::random_digits(16)?),
    };
    let mode = args.value("mode").unwrap_or("queue");
    if !matches!(mode, "queue" | "steer") {
        return Err(Error::Usage(format!(
            "send: --mode {}: use queue or steer",
            escape(mode)
        )));
    }
    let peer = target::resolve(config, Some(target_arg))?;
    if target::own_instance_id().as_deref() == Some(peer.manifest.instance_id.as_str()) {
        return Err(Error::Refused(format!(
            "send: {} ({}) is this instance itself: self-sends are refused",
            escape(&peer.manifest.name),
            peer.manifest.instance_id
        )));
    }
    if peer.wire != registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "send: {} is a zcoder instance; sending to zcoder comes in a later version of baton",
            escape(&peer.manifest.name)
        )));
    }
    let params = json!({
        "message_id": message_id,
        "target_instance_id": peer.manifest.instance_id,
        "body": body,
        "sender": {},
        "hop": 0,
        "mode": mode,
    });
    let line = crate::wire::request_line(2, "message/send", params.clone());
    if line.len() - 1 > config.max_bytes {
        return Err(Error::Usage(format!(
            "send: the request would be {} bytes, over the frame limit of {} bytes (BATON_MAX_BYTES)",
            line.len() - 1,
            config.max_bytes
        )));
    }
    let result = match deliver(config, &peer, &params) {
        Err(e) if e.is_transport() => {
            // Ambiguous: the task may have arrived. The same id makes the
            // retry safe.
            deliver(config, &peer, &params)
        }
        r => r,
    };
    let result = result.map_err(|e| match e {
        ClientError::Rpc { .. } => target::transport(&peer, e),
        e => Error::Transport(format!(
            "send to {} ({}) failed twice: {e}; the task may or may not have arrived: retry with --message-id {message_id}",
            escape(&peer.manifest.name),
            peer.manifest.instance_id
        )),
    })?;
    report(args, &peer, &result)
}

fn deliver(
    config: &Config,
    peer: &Peer,
    params: &Value,
) -> std::result::Result<Value, ClientError> {
    let mut conn = Connection::open(Path::new(&peer.manifest.socket), config.io_timeout)?;
    conn.call("message/send", params.clone())
}

fn report(args: &Args, peer: &Peer, r: &Value) -> Result<ExitCode> {
    let status = r.get("status").and_then(Value::as_str).unwrap_or("");
    let id = r.get("message_id").and_then(Value::as_str).unwrap_or("");
    let code = match status {
        "accepted" | "duplicate" | "stored" => ExitCode::Ok,
        _ => ExitCode::Refused,
    };
    if args.flag("json") {
        emit_json(r);
        return Ok(code);
    }
    let who = format!(
        "{} ({})",
        escape(&peer.manifest.name),
        peer.manifest.instance_id
    );
    match status {
        "accepted" => emit(&format!(
            "accepted: {who} queued message {id} at position {}\n",
            r.get("queue_position")
                .map(Value::to_string)
                .unwrap_or_default()
        )),
        "duplicate" => emit(&format!(
            "duplicate: {who} had already accepted message {id}\n"
        )),
        _ => {
            eprintln!(
                "baton: {who} refused message {id}: {}: {}",
                escape(status),
                escape(r.get("reason").and_then(Value::as_str).unwrap_or(""))
            );
        }
    }
    Ok(code)
}
