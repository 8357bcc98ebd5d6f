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
use crate::client::{ClientError, PipeLines, Session};
use crate::registry::Peer;
use crate::relay;
use crate::text::sanitize::escape;
use crate::wire::Method;
use crate::wire::access::BridgeKey;
use crate::wire::answer::HelloParams;
use crate::{registry, sys, wire};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    if stdout
        .write_all(&early)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return Ok(ExitCode::Ok);
    }
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        if stdout
            .write_all(&buf[..n])
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
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

/// The next line of `r` with its `\n`, holding at most one byte past
/// `max`; empty at the end, or when reading fails.
fn line_of(r: &mut impl BufRead, max: usize) -> Vec<u8> {
    let mut line = Vec::new();
    match r.take(max as u64 + 1).read_until(b'\n', &mut line) {
        Ok(_) => line,
        Err(_) => Vec::new(),
    }
}

/// A via command (`sh -c "VIA REMOTE ARGS..."`) running in a process group
/// of its own: whatever it starts (ssh, behind the shell) is killed with it
/// when this is dropped, on every path out, a timeout included.
pub struct Via {
    child: Child,
}

impl Via {
    /// Starts `VIA REMOTE ARGS...` through `sh -c`, so VIA may hold
    /// options. REMOTE is `BATON_REMOTE` as given (a path or an `env`
    /// prefix) or, when it is unset, `LOOKUP` run by `sh -c` there; ARGS
    /// are quoted here and hold only characters no shell treats specially
    /// (`check_target`), so the remote shell, which gets them joined with
    /// spaces as ssh does, sees the same words. With `multiplex`, an `ssh
    /// ...` VIA shares one connection per VIA (`multiplexed`).
    pub fn spawn(via: &str, config: &Config, remote_args: &[&str], multiplex: bool) -> Result<Via> {
        // An unset shell variable, not a command: nothing to run.
        if via.trim().is_empty() {
            return Err(Error::Usage(
                "--via is empty: give the command that reaches the other host, such as 'ssh HOST'"
                    .into(),
            ));
        }
        let quoted: Vec<String> = remote_args.iter().map(|a| shell_quote(a)).collect();
        let line = multiplex.then(|| multiplexed(via, config)).flatten();
        let line = line.unwrap_or_else(|| via.to_string());
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "{line} {} {}",
                remote_command(config),
                quoted.join(" ")
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Transport(format!("cannot run {}: {e}", escape(via))))?;
        Ok(Via { child })
    }

    /// Waits up to `until` for the command to exit; its status code.
    fn exit_code(&mut self, until: Instant) -> Option<i32> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }
}

impl Drop for Via {
    fn drop(&mut self) {
        let _ = sys::kill_group(self.child.id(), sys::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `--via` runs on the other host when `BATON_REMOTE` is unset, by
/// `sh -c` (never a login shell, and no profile file is read): the first
/// of `baton` on the non-interactive PATH, `~/.local/bin/baton`,
/// `~/.cargo/bin/baton`, `/usr/local/bin/baton`, `/usr/bin/baton` and
/// `/opt/baton/bin/baton` that is an executable file, run with the
/// arguments; else exit 127, naming the places looked. One line with no
/// `'`, `\` or `!`, so that it passes through the remote user's shell
/// in single quotes whatever that shell is (sh, bash, zsh, fish, csh).
pub const LOOKUP: &str = "for b in \"$(command -v baton)\" \"$HOME/.local/bin/baton\" \
    \"$HOME/.cargo/bin/baton\" /usr/local/bin/baton /usr/bin/baton /opt/baton/bin/baton; \
    do if [ -f \"$b\" ] && [ -x \"$b\" ]; then exec \"$b\" \"$@\"; fi; done; \
    echo \"baton: no baton on this host: not on PATH ($PATH), nor at ~/.local/bin/baton, \
    ~/.cargo/bin/baton, /usr/local/bin/baton, /usr/bin/baton or /opt/baton/bin/baton\" >&2; \
    exit 127";

/// REMOTE in `VIA REMOTE ARGS...`, as a word for the local shell:
/// `BATON_REMOTE` as given, or `sh -c 'LOOKUP' baton` quoted once more,
/// so that the remote shell gets it as it reads here.
fn remote_command(config: &Config) -> String {
    match &config.remote {
        Some(r) => r.clone(),
        None => shell_quote(&format!("sh -c {} baton", shell_quote(LOOKUP))),
    }
}

/// A TARGET that goes into the remote command line of `--via`: an id or
/// a name, whose characters (`[A-Za-z0-9_.-]`) no shell treats
/// specially. Anything else is a usage error (exit 2).
pub fn check_target(target: &str) -> Result<()> {
    if registry::valid_id(target) {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--via: {} is not an instance id or name (1 to 100 of A-Z, a-z, 0-9, '_', '.', '-'), \
         and it would go into the remote command line",
        escape(target)
    )))
}

/// VIA when it is `ssh ...`, with ssh's connection sharing added: the
/// first use opens a master connection that ssh keeps in the background
/// (`ControlPersist`, 60 s after its last session; ssh detaches it into a
/// session of its own, the one process that outlives a baton command, by
/// design), and later uses to the same VIA run over it without a new key
/// exchange. The socket is `<registry>/ssh-<hash of VIA>`: one per VIA
/// string, so keys with different forced commands never share a master.
/// None when VIA is not ssh, sets any Control option itself, or the path
/// would be too long for a socket.
fn multiplexed(via: &str, config: &Config) -> Option<String> {
    let rest = via.trim_start().strip_prefix("ssh ")?;
    let lower = via.to_ascii_lowercase();
    if ["controlmaster", "controlpath", "controlpersist"]
        .iter()
        .any(|o| lower.contains(o))
    {
        return None;
    }
    let path = control_path(&registry::ensure_dir(config).ok()?, via);
    let path = path.to_str()?;
    // ssh binds a temporary name 17 bytes longer, then renames it.
    if path.len() + 17 > sys::max_socket_path() {
        return None;
    }
    Some(format!(
        "ssh -o ControlMaster=auto -o ControlPersist=60 -o {} {rest}",
        // ssh expands % in ControlPath.
        shell_quote(&format!("ControlPath={}", path.replace('%', "%%")))
    ))
}

/// Where the shared connection of VIA lives: FNV-1a of the VIA string.
pub fn control_path(registry_dir: &Path, via: &str) -> std::path::PathBuf {
    let hash = via.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    registry_dir.join(format!("ssh-{hash:016x}"))
}

/// How long a remote round trip may take: it includes the ssh connection.
pub fn remote_timeout(config: &Config) -> Duration {
    config.io_timeout.max(Duration::from_secs(10)) * 2
}

/// What a remote command that failed to run says about it: exit 127 is a
/// shell that found no such command.
pub fn failed(what: &str, code: Option<i32>) -> Error {
    match code {
        Some(127) => Error::Transport(format!(
            "{what} (exit status 127: no baton found there; set BATON_REMOTE to its path there, see docs/ssh.md)"
        )),
        Some(n) => Error::Transport(format!("{what} (exit status {n})")),
        None => Error::Transport(what.to_string()),
    }
}

/// The most a via command may write for one `run_to_end` (`list --via`:
/// the remote `baton list --json`, a few hundred bytes an instance), and
/// in one line of a bridge session (`Remote`): past it, the command is
/// stopped and the call fails (docs/decisions.md).
pub const MAX_VIA_OUTPUT: usize = 64 << 20;

/// Runs `VIA REMOTE ARGS...` with `input` on its stdin, to its end: the
/// exit code and stdout. Bounded by `remote_timeout` and by
/// `MAX_VIA_OUTPUT`; the remote's stderr is passed through. On every
/// failure the via command's process group is killed (`Via`'s drop).
pub fn run_to_end(
    via: &str,
    config: &Config,
    remote_args: &[&str],
    input: &[u8],
    multiplex: bool,
) -> Result<(Option<i32>, Vec<u8>)> {
    let mut v = Via::spawn(via, config, remote_args, multiplex)?;
    // The remote side may not read it; a closed pipe is no failure. The
    // pipe closes at the end of the statement.
    let _ = v.child.stdin.take().expect("piped").write_all(input);
    let stdout = v.child.stdout.take().expect("piped");
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.take(MAX_VIA_OUTPUT as u64 + 1).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let deadline = Instant::now() + remote_timeout(config);
    let Ok(out) = rx.recv_deadline(deadline) else {
        return Err(Error::Transport(format!(
            "no answer from {} within {:?}",
            escape(via),
            remote_timeout(config)
        )));
    };
    if out.len() > MAX_VIA_OUTPUT {
        return Err(Error::Transport(format!(
            "{} wrote more than {} MiB; stopped it",
            escape(via),
            MAX_VIA_OUTPUT >> 20
        )));
    }
    let code = v.exit_code(deadline);
    Ok((code, out))
}

/// A session with a remote instance through `VIA baton bridge TARGET`
/// (VIA is typically `ssh host`): the one client's `Session` over the
/// command's pipes, and the command, killed with it.
pub struct Remote {
    pub session: Session,
    via: Via,
    timeout: Duration,
}

/// Quotes one word for a POSIX shell (the remote one, too).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Remote {
    /// `VIA baton bridge --offline TARGET`: the live instance, or a
    /// stopped agent's stand-in.
    pub fn open(via: &str, target: &str, config: &Config, multiplex: bool) -> Result<Remote> {
        let timeout = remote_timeout(config);
        let until = Some(Instant::now() + timeout);
        Remote::start(via, target, config, multiplex, "--offline", until)?
            .ok_or_else(|| no_answer(timeout))
    }

    /// `VIA baton bridge HOW TARGET`, initialized by `until`. With
    /// `--await`: the live instance named TARGET, once one runs there;
    /// None if `until` passes first (the bridge is then killed with its
    /// process group).
    pub fn start(
        via: &str,
        target: &str,
        config: &Config,
        multiplex: bool,
        how: &str,
        until: Option<Instant>,
    ) -> Result<Option<Remote>> {
        check_target(target)?;
        let mut via = Via::spawn(via, config, &["bridge", how, target], multiplex)?;
        let input = via.child.stdin.take().expect("piped");
        let out = via.child.stdout.take().expect("piped");
        let timeout = remote_timeout(config);
        let lines = Box::new(PipeLines::new(read_lines(out)));
        let hello = HelloParams::new("baton");
        match Session::start(lines, Box::new(input), timeout, &hello, until) {
            Ok(Some(session)) => Ok(Some(Remote {
                session,
                via,
                timeout,
            })),
            Ok(None) => Ok(None),
            Err(e) => Err(fail(&mut via, timeout, e)),
        }
    }

    /// One call through the bridge.
    pub fn call<R: DeserializeOwned>(
        &mut self,
        method: impl Into<Method>,
        params: impl Serialize,
    ) -> Result<R> {
        let r = self.session.call(method, params);
        r.map_err(|e| fail(&mut self.via, self.timeout, e))
    }
}

/// What a failed call through a bridge says: an error answer is the
/// remote instance's refusal; the bridge gone is `ended`.
fn fail(via: &mut Via, timeout: Duration, e: ClientError) -> Error {
    match e {
        ClientError::Rpc { code, message } => Error::Refused(format!(
            "the remote instance answered error {code}: {}",
            escape(&message)
        )),
        ClientError::Timeout => no_answer(timeout),
        ClientError::Closed => ended(via, timeout, "the bridge closed without an answer".into()),
        e => ended(via, timeout, format!("the bridge failed: {e}")),
    }
}

/// No answer through a bridge within `timeout`.
fn no_answer(timeout: Duration) -> Error {
    Error::Transport(format!(
        "no answer through the bridge within {timeout:?} (is baton installed there, and the target running?)"
    ))
}

/// The error for a bridge that went away: exit status 3 (which ssh
/// passes on) is the remote `baton bridge` finding no such target, as
/// its message above says, the same as a local send; anything else,
/// ssh's own failures included, is a transport failure.
fn ended(via: &mut Via, timeout: Duration, what: String) -> Error {
    let until = Instant::now() + timeout.min(Duration::from_secs(5));
    match via.exit_code(until) {
        Some(3) => Error::NoTarget("the remote baton bridge found no such target".into()),
        code => failed(&what, code),
    }
}

/// The lines a via command prints, read by a thread: at most
/// `MAX_VIA_OUTPUT` bytes each, without `\n` or `\r\n`; a longer one (or
/// one that is not UTF-8) ends them.
fn read_lines(out: std::process::ChildStdout) -> crossbeam_channel::Receiver<Vec<u8>> {
    let (tx, lines) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        let mut out = BufReader::new(out);
        loop {
            let mut line = line_of(&mut out, MAX_VIA_OUTPUT);
            if line.len() > MAX_VIA_OUTPUT {
                eprintln!(
                    "baton: the via command wrote a line over {} MiB; stopped it",
                    MAX_VIA_OUTPUT >> 20
                );
                break;
            }
            if line.is_empty() {
                break;
            }
            let bare = line
                .strip_suffix(b"\n")
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
            line.truncate(bare.map_or(line.len(), <[u8]>::len));
            if std::str::from_utf8(&line).is_err() || tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_passes_through_any_remote_shell_in_single_quotes() {
        for c in ['\'', '\\', '!', '\n', '\r'] {
            assert!(!LOOKUP.contains(c), "{c:?} in LOOKUP");
        }
        // The places looked are the ones docs/ssh.md names.
        for place in [
            "$(command -v baton)",
            "$HOME/.local/bin/baton",
            "$HOME/.cargo/bin/baton",
            "/usr/local/bin/baton",
            "/usr/bin/baton",
            "/opt/baton/bin/baton",
        ] {
            assert!(LOOKUP.contains(place), "{place}");
        }
        let unset = Config::default();
        assert_eq!(
            remote_command(&unset),
            shell_quote(&format!("sh -c '{LOOKUP}' baton"))
        );
        let set = Config {
            remote: Some("env X=1 /opt/b/baton".into()),
            ..Config::default()
        };
        assert_eq!(remote_command(&set), "env X=1 /opt/b/baton");
    }

    #[test]
    fn a_via_target_is_an_id_or_a_name() {
        for ok in ["far", "a-4242-1111222233334444", "x_y.z", "0"] {
            assert!(check_target(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "far;rm",
            "$(id)",
            "'x'",
            "a/b",
            "é",
            &"x".repeat(101),
        ] {
            let e = check_target(bad).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Usage, "{bad}");
        }
    }
}
