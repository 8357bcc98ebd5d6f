//! `baton bridge TARGET`: joins stdin and stdout to a local instance's
//! socket, byte for byte, so `ssh host baton bridge NAME` gives a remote
//! client a connection that OpenSSH authenticated. `--via` on `send` and
//! `list` runs a command (`ssh host`) that reaches a remote baton this way.

use super::args::Args;
use super::target;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::sanitize::escape;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "bridge", 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    if peer.wire != crate::registry::Wire::Jsonrpc {
        return Err(Error::Usage(format!(
            "bridge: {} is a zcoder instance; only native instances can be bridged",
            escape(&peer.manifest.name)
        )));
    }
    let socket = std::path::Path::new(&peer.manifest.socket);
    let stream = UnixStream::connect(socket).map_err(|e| Error::io("connect to", socket, e))?;
    let mut to_socket = stream
        .try_clone()
        .map_err(|e| Error::io("connect to", socket, e))?;
    // stdin to the socket on a thread; the socket to stdout here. Either
    // side closing ends the bridge.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let _ = std::io::copy(&mut stdin, &mut to_socket);
        let _ = to_socket.shutdown(std::net::Shutdown::Write);
    });
    let mut from_socket = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buf = [0u8; 8192];
    loop {
        match from_socket.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if stdout
                    .write_all(&buf[..n])
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    Ok(ExitCode::Ok)
}

/// A JSON-RPC session with a remote instance through `VIA baton bridge
/// TARGET` (VIA is typically `ssh host`).
pub struct Remote {
    child: Child,
    input: ChildStdin,
    lines: crossbeam_channel::Receiver<String>,
    next_id: u64,
    timeout: Duration,
    /// The `initialize` result: the remote instance's manifest.
    pub hello: Value,
}

/// Runs `VIA ARGS...` through `sh -c`, so VIA may hold options.
pub fn via_command(via: &str, remote_args: &[&str]) -> Command {
    let quoted: Vec<String> = remote_args.iter().map(|a| shell_quote(a)).collect();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(format!("{via} {}", quoted.join(" ")));
    cmd
}

/// Quotes one word for a POSIX shell (the remote one, too).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Remote {
    pub fn open(via: &str, target: &str, config: &Config) -> Result<Remote> {
        let mut child = via_command(via, &["baton", "bridge", target])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Transport(format!("cannot run {}: {e}", escape(via))))?;
        let input = child.stdin.take().expect("piped");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // A remote round trip includes the ssh connection: give it room.
        let timeout = config.io_timeout.max(Duration::from_secs(10)) * 2;
        let mut r = Remote {
            child,
            input,
            lines,
            next_id: 1,
            timeout,
            hello: Value::Null,
        };
        r.hello = r.call(
            "initialize",
            json!({"protocol_version": 1, "client": {"name": "baton", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        Ok(r)
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let line = crate::wire::request_line(id, method, params);
        if let Err(e) = self
            .input
            .write_all(&line)
            .and_then(|()| self.input.flush())
        {
            return Err(self.ended(format!("the bridge closed: {e}")));
        }
        loop {
            let line = match self.lines.recv_timeout(self.timeout) {
                Ok(line) => line,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(self.ended("the bridge closed without an answer".into()));
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    return Err(Error::Transport(
                        "no answer through the bridge (is baton installed there, and the target running?)".into(),
                    ));
                }
            };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(e) = v.get("error") {
                return Err(Error::Refused(format!(
                    "the remote instance answered error {}: {}",
                    e["code"],
                    escape(e["message"].as_str().unwrap_or(""))
                )));
            }
            return Ok(v["result"].clone());
        }
    }
}

impl Remote {
    /// The error for a bridge that went away: exit status 3 (which ssh
    /// passes on) is the remote `baton bridge` finding no such target, as
    /// its message above says, the same as a local send; anything else,
    /// ssh's own failures included, is a transport failure.
    fn ended(&mut self, what: String) -> Error {
        let deadline = std::time::Instant::now() + self.timeout.min(Duration::from_secs(5));
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => break None,
            }
        };
        match status {
            Some(3) => Error::NoTarget("the remote baton bridge found no such target".into()),
            Some(n) => Error::Transport(format!("{what} (exit status {n})")),
            None => Error::Transport(what),
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
