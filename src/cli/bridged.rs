//! What a bridge says of itself (docs/security.md): before its client's
//! first byte, `baton bridge` declares the key it serves in `initialize`
//! (`bridge`: the target, the remote end and the key's label), and the
//! instance holds the connection to what a remote key may do.

use super::args::Args;
use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::client::{Session, request};
use crate::registry::Peer;
use crate::text::sanitize::escape;
use crate::wire::Method;
use crate::wire::access::BridgeKey;
use crate::wire::answer::{BridgeParams, HelloParams, Reply};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Before the client's first byte: the bridge says which key it serves
/// (`initialize` with `bridge`, docs/protocol.md §2), and the instance
/// holds the connection to what a bridge may do for the rest of its life
/// (docs/security.md). The answer is the bridge's own, not the client's.
pub(super) fn declare(
    stream: UnixStream,
    peer: &Peer,
    socket: &Path,
    key: Option<&str>,
) -> Result<UnixStream> {
    let hello = request("bridge", Method::Initialize, bridge_hello(peer, key));
    let fail = |e: std::io::Error| Error::io("declare the bridge to", socket, e);
    let timeout = Some(Duration::from_secs(10));
    stream.set_read_timeout(timeout).map_err(fail)?;
    stream.set_write_timeout(timeout).map_err(fail)?;
    (&stream).write_all(&hello).map_err(fail)?;
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    // One line, read a byte at a time: nothing after it is taken from
    // the client's share.
    while answer.len() < 64 * 1024 {
        match (&stream).read(&mut byte).map_err(fail)? {
            0 => break,
            _ if byte[0] == b'\n' => break,
            _ => answer.push(byte[0]),
        }
    }
    let v: Reply = serde_json::from_slice(&answer).unwrap_or_default();
    if v.result.is_none() {
        let why = v.error.map_or_else(|| "no answer".into(), |e| e.message);
        return Err(Error::Transport(format!(
            "{} did not take the bridge: {}",
            escape(&peer.manifest.name),
            escape(&why)
        )));
    }
    stream.set_read_timeout(None).map_err(fail)?;
    stream.set_write_timeout(None).map_err(fail)?;
    Ok(stream)
}

/// The remote end, as sshd tells a forced command (`SSH_CONNECTION`): the
/// client's address and port.
pub(super) fn ssh_remote() -> Option<String> {
    let c = std::env::var("SSH_CONNECTION").ok()?;
    let mut f = c.split_whitespace();
    Some(format!("{} {}", f.next()?, f.next()?))
}

/// `--key LABEL`, checked: the label a forced command names its key by
/// (docs/ssh.md).
pub(super) fn key_label(args: &Args) -> Result<Option<&str>> {
    let Some(label) = args.value("key") else {
        return Ok(None);
    };
    if !BridgeKey::valid_label(label) {
        return Err(Error::Usage(format!(
            "bridge: --key {}: a key's label is 1 to {} bytes of letters, digits and -_.@",
            escape(label),
            BridgeKey::MAX_LABEL
        )));
    }
    Ok(Some(label))
}

/// What the bridge says of itself in `initialize`.
fn bridge_hello(peer: &Peer, key: Option<&str>) -> HelloParams {
    HelloParams {
        bridge: Some(BridgeParams {
            key: key.map(String::from),
            remote: ssh_remote(),
            target: peer.manifest.instance_id.clone(),
        }),
        ..HelloParams::new("baton bridge")
    }
}

/// `message/send` to an instance that started while `--offline` stood in
/// for it, on a connection declared as this bridge's; its result.
pub(super) fn send(
    config: &Config,
    peer: &Peer,
    key: Option<&str>,
    params: &Value,
) -> Result<Value> {
    let socket = Path::new(&peer.manifest.socket);
    let mut s = Session::connect(socket, config.io_timeout, &bridge_hello(peer, key))
        .map_err(|e| super::target::transport(peer, e))?;
    s.call(Method::MessageSend, params)
        .map_err(|e| super::target::transport(peer, e))
}
