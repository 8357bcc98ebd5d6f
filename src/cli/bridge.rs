//! `baton bridge TARGET`: joins stdin and stdout to a local instance's
//! socket, byte for byte, so `ssh host baton bridge NAME` gives a remote
//! client a connection that OpenSSH authenticated. With `--offline`, a
//! TARGET that is not running but has a spool is stood in for: the bridge
//! answers `initialize` and stores each `message/send` as a local send
//! would (`stored`). `--via` on `send` and `list` runs a command (`ssh
//! host`) that reaches a remote baton this way, in a process group of its
//! own that goes with it; `send --via --wait` goes on over the same
//! session (`Remote::write`, `Remote::lines`) to wait for the task.

use super::Parsed;
use super::args::Args;
use super::target;
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::registry::Peer;
use crate::relay;
pub use crate::relay::via::Remote;
use crate::text::sanitize::escape;
use crate::wire::access::BridgeKey;
use crate::{registry, wire};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// `baton bridge [TARGET] [--key LABEL] [--offline | --await]`.
pub struct Bridge {
    target: Option<String>,
    key: Option<String>,
    offline: bool,
    wait: bool,
}

impl Parsed for Bridge {
    fn parse(args: &Args) -> Result<Bridge> {
        super::at_most(args, "bridge", 1)?;
        let (offline, wait) = (args.flag("offline"), args.flag("await"));
        if offline && wait {
            return Err(Error::Usage(
                "bridge: --offline stands in for a stopped agent and --await waits for it: say one"
                    .into(),
            ));
        }
        // The label a forced command names its key by (docs/ssh.md).
        let key = args.value("key").map(str::to_string);
        if let Some(label) = key.as_deref().filter(|l| !BridgeKey::valid_label(l)) {
            return Err(Error::Usage(format!(
                "bridge: --key {}: a key's label is 1 to {} bytes of letters, digits and -_.@",
                escape(label),
                BridgeKey::MAX_LABEL
            )));
        }
        let target = args.positional.first().cloned();
        Ok(Bridge {
            target,
            key,
            offline,
            wait,
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let (key, name) = (self.key.as_deref(), self.target.as_deref());
        let peer = match (target::resolve(config, name), name) {
            (Ok(peer), _) => peer,
            (Err(Error::NoTarget(_)), Some(t)) if self.wait => {
                // Read on a thread of its own while it waits, so that it sees
                // the client leave, and keeps what it wrote meanwhile.
                let input = stdin_chunks();
                return match await_target(config, t, &input)? {
                    Some((peer, held)) => join(&peer, key, input, held),
                    None => Ok(ExitCode::Ok),
                };
            }
            (Err(Error::NoTarget(why)), Some(t)) if self.offline => {
                // Not running: stand in for its spool, if it has one.
                if !relay::known_spools().iter().any(|s| s.name == t) {
                    return Err(Error::NoTarget(why));
                }
                return offline(config, t, key);
            }
            (Err(e), _) => return Err(e),
        };
        join(&peer, key, stdin_chunks(), Vec::new())
    }
}

/// The bytes the client writes, in chunks.
type Chunks = crossbeam_channel::Receiver<Vec<u8>>;

/// The bytes of stdin, in chunks, from a thread; disconnected at its end.
fn stdin_chunks() -> Chunks {
    let (tx, rx) = crossbeam_channel::bounded(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = stdin.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// How often `bridge --await` reads the registry while its target is not
/// running: as `send --wait` does for a stored task (docs/decisions.md).
const AWAIT_EVERY: Duration = Duration::from_secs(1);

/// `bridge --await NAME` while NAME is not running: reads the registry
/// again once a second until an instance of the name answers (Some), or
/// until the client closes stdin (None). What the client wrote meanwhile
/// is kept for the instance.
fn await_target(config: &Config, name: &str, input: &Chunks) -> Result<Option<(Peer, Vec<u8>)>> {
    let mut held = Vec::new();
    loop {
        crossbeam_channel::select! {
            recv(input) -> chunk => match chunk {
                Ok(c) if held.len() + c.len() <= config.max_bytes.saturating_mul(4) => held.extend(c),
                // The client left, or wrote far more than a first request.
                _ => return Ok(None),
            },
            recv(crossbeam_channel::after(AWAIT_EVERY)) -> _ => match target::resolve(config, Some(name)) {
                Ok(peer) => return Ok(Some((peer, held))),
                Err(Error::NoTarget(_)) => {}
                Err(e) => return Err(e),
            },
        }
    }
}

/// Joins the client to `peer`'s socket byte for byte, declared as the
/// bridge of the key `key` names: `held` and then the rest of stdin to
/// the socket, the socket to stdout. Either side closing ends the bridge.
fn join(peer: &Peer, key: Option<&str>, input: Chunks, held: Vec<u8>) -> Result<ExitCode> {
    if peer.wire != crate::registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "bridge: {} is a zcoder instance; only native instances can be bridged",
            escape(&peer.manifest.name)
        )));
    }
    let socket = std::path::Path::new(&peer.manifest.socket);
    let fail = |e| Error::io("connect to", socket, e);
    let stream = UnixStream::connect(socket).map_err(fail)?;
    let (mut stream, early) = relay::bridge::declare(stream, peer, key)?;
    let mut to_socket = stream.try_clone().map_err(fail)?;
    std::thread::spawn(move || {
        let _ = std::iter::once(held)
            .chain(input)
            .try_for_each(|chunk| to_socket.write_all(&chunk));
        let _ = to_socket.shutdown(std::net::Shutdown::Write);
    });
    let mut stdout = std::io::stdout().lock();
    let mut out = |b: &[u8]| stdout.write_all(b).and_then(|()| stdout.flush()).is_ok();
    let mut buf = [0u8; 8192];
    if out(&early) {
        while let Ok(n @ 1..) = stream.read(&mut buf) {
            if !out(&buf[..n]) {
                break;
            }
        }
    }
    Ok(ExitCode::Ok)
}

/// `bridge --offline NAME` for a NAME that is not running: the engine's
/// stand-in for it serves the client on stdin and stdout
/// (`relay::stand_in`).
fn offline(config: &Config, target: &str, key: Option<&str>) -> Result<ExitCode> {
    super::sent::not_in_a_turn()?;
    let dir = registry::ensure_dir(config)?;
    let fail = |e| Error::io("read", Path::new("the standard input"), e);
    let input = wire::Pipe::new(std::io::stdin().as_fd()).map_err(fail)?;
    // A client that left, or a write that failed, ends the stand-in as
    // the end of its input does.
    let _ = relay::stand_in(
        config,
        &dir,
        target,
        key,
        input,
        &mut std::io::stdout().lock(),
    );
    Ok(ExitCode::Ok)
}
