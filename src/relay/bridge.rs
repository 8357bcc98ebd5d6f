//! What a bridge says of itself (docs/security.md): before its client's
//! first byte, `baton bridge` declares the key it serves in `initialize`
//! (`bridge`: the target, the remote end and the key's label), and the
//! instance holds the connection to what a remote key may do. A stopped
//! agent's stand-in (`standin`) declares itself the same way when its
//! agent has started meanwhile.

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::client::{ClientError, Session, request};
use crate::registry::Peer;
use crate::text::sanitize::escape;
use crate::wire::answer::{BridgeParams, HelloParams, Reply, SendResult};
use crate::wire::request::SendParams;
use crate::wire::{LineReader, Method, ReadError};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long an instance has to take a bridge's declaration: one deadline
/// for the whole answer line.
const DECLARE_WITHIN: Duration = Duration::from_secs(10);

/// The longest answer to a declaration read: an `initialize` answer is a
/// few hundred bytes.
const DECLARE_LINE: usize = 64 * 1024;

/// Declares `stream`, a connection to `peer`, as the bridge of `key`
/// (`initialize` with `bridge`, docs/protocol.md §2), before the client's
/// first byte; the instance holds the connection to what a bridge may do
/// for the rest of its life (docs/security.md). The answer is the
/// bridge's own, not the client's: the stream comes back with the bytes
/// read past it (none, from an instance that answers what it is asked),
/// which are the client's.
pub fn declare(
    stream: UnixStream,
    peer: &Peer,
    key: Option<&str>,
) -> Result<(UnixStream, Vec<u8>)> {
    let socket = Path::new(&peer.manifest.socket);
    let fail = |e: std::io::Error| Error::io("declare the bridge to", socket, e);
    let hello = request("bridge", Method::Initialize, hello(peer, key));
    stream
        .set_write_timeout(Some(DECLARE_WITHIN))
        .map_err(fail)?;
    (&stream).write_all(&hello).map_err(fail)?;
    let mut reader = LineReader::new(stream, DECLARE_LINE);
    let answer: Reply = match reader.read_line(Some(DECLARE_WITHIN), DECLARE_WITHIN) {
        Ok(line) => serde_json::from_slice(line).unwrap_or_default(),
        Err(ReadError::Io(e)) => return Err(fail(e)),
        Err(_) => Reply::default(),
    };
    if answer.result.is_none() {
        let why = answer
            .error
            .map_or_else(|| "no answer".into(), |e| e.message);
        return Err(Error::Transport(format!(
            "{} did not take the bridge: {}",
            escape(&peer.manifest.name),
            escape(&why)
        )));
    }
    let (stream, rest) = reader.into_parts();
    stream.set_read_timeout(None).map_err(fail)?;
    stream.set_write_timeout(None).map_err(fail)?;
    Ok((stream, rest))
}

/// The remote end, as sshd tells a forced command (`SSH_CONNECTION`): the
/// client's address and port.
pub fn ssh_remote() -> Option<String> {
    let c = std::env::var("SSH_CONNECTION").ok()?;
    let mut f = c.split_whitespace();
    Some(format!("{} {}", f.next()?, f.next()?))
}

/// What the bridge of `key` to `peer` says of itself in `initialize`.
fn hello(peer: &Peer, key: Option<&str>) -> HelloParams {
    HelloParams {
        bridge: Some(BridgeParams {
            key: key.map(String::from),
            remote: ssh_remote(),
            target: peer.manifest.instance_id.clone(),
        }),
        ..HelloParams::new("baton bridge")
    }
}

/// What a failed call to `peer` is to the one who asked: its refusal
/// (an error answer), or a transport failure (the CLI's calls too).
pub fn transport(peer: &Peer, e: ClientError) -> Error {
    match e {
        ClientError::TooManyConnections { .. } => Error::Transport(format!(
            "{} refused the connection: too many connections",
            escape(&peer.manifest.name)
        )),
        ClientError::Rpc { code, message } => Error::Refused(format!(
            "{} answered error {code}: {}",
            escape(&peer.manifest.name),
            escape(&message)
        )),
        e => Error::Transport(format!("{peer}: {e}")),
    }
}

/// `message/send` to `peer` on a connection declared as the bridge of
/// `key`: its result, or why there is none.
pub fn send(
    config: &Config,
    peer: &Peer,
    key: Option<&str>,
    params: &SendParams,
) -> Result<SendResult> {
    let socket = Path::new(&peer.manifest.socket);
    let fail = |e| transport(peer, e);
    let mut s = Session::connect(socket, config.io_timeout, &hello(peer, key)).map_err(fail)?;
    s.call(Method::MessageSend, params).map_err(fail)
}
