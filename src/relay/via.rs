//! Running a command on another host (`--via 'ssh HOST'`): the command
//! in a process group of its own (`Via`), ssh's connection sharing, the
//! login-free lookup of baton there, a whole remote command read to its
//! end (`Via::read_to_end`, bounded in time and size) and a session with a
//! remote instance through `baton bridge` there (`Remote`).

use crate::base::config::Config;
use crate::base::error::{Error, Result};
use crate::client::{ClientError, PipeLines, Session};
use crate::registry;
use crate::sys;
use crate::text::sanitize::escape;
use crate::wire::Method;
use crate::wire::answer::HelloParams;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

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
    /// ...` VIA shares one connection per VIA (`multiplexed`). With
    /// `quiet`, the command's stderr is kept (`read_to_end` gives it), for
    /// a host among several, whose failure is one line of its own.
    pub fn spawn(
        via: &str,
        config: &Config,
        remote_args: &[impl AsRef<str>],
        multiplex: bool,
        quiet: bool,
    ) -> Result<Via> {
        check_via(via)?;
        let quoted: Vec<String> = remote_args
            .iter()
            .map(|a| remote_word(a.as_ref()))
            .collect();
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
            .stderr(if quiet {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Transport(format!("cannot run {}: {e}", escape(via))))?;
        Ok(Via { child })
    }

    /// Writes `input` to the command's stdin and closes it, then reads its stdout and (when kept)
    /// stderr to their ends by `until`, each up to one byte past `max`:
    /// stdout, None when `until` came first; stderr, when kept.
    pub fn read_to_end(
        &mut self,
        until: Instant,
        input: &[u8],
        max: usize,
    ) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        // The remote side may not read it; a closed pipe is no failure.
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(input);
        }
        let out = read_all(self.child.stdout.take(), max);
        let err = read_all(self.child.stderr.take(), max);
        let out = out.recv_deadline(until).ok();
        let err = err
            .recv_deadline(until.max(Instant::now() + Duration::from_millis(100)))
            .ok();
        (out, err)
    }

    /// The command's stdout, and its stderr when kept, its stdin closed.
    pub fn pipes(&mut self) -> (Option<ChildStdout>, Option<ChildStderr>) {
        drop(self.child.stdin.take());
        (self.child.stdout.take(), self.child.stderr.take())
    }

    /// Waits up to `until` for the command to exit; its status code.
    pub fn exit_code(&mut self, until: Instant) -> Option<i32> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }
}

/// All of `r` up to one byte past `max`, read by a thread: its channel
/// gives it once read (never, without `r`).
pub(super) fn read_all(
    r: Option<impl Read + Send + 'static>,
    max: usize,
) -> crossbeam_channel::Receiver<Vec<u8>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    if let Some(r) = r {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.take(max as u64 + 1).read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

impl Drop for Via {
    fn drop(&mut self) {
        let _ = sys::kill_group(self.child.id(), sys::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A VIA that is empty (an unset shell variable) is no command to run.
pub fn check_via(via: &str) -> Result<()> {
    match via.trim() {
        "" => Err(Error::Usage(
            "--via is empty: give the command that reaches the other host, such as 'ssh HOST'"
                .into(),
        )),
        _ => Ok(()),
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
fn failed(what: &str, code: Option<i32>) -> Error {
    match code {
        Some(127) => Error::Transport(format!(
            "{what} (exit status 127: no baton found there; set BATON_REMOTE to its path there, see docs/ssh.md)"
        )),
        Some(n) => Error::Transport(format!("{what} (exit status {n})")),
        None => Error::Transport(what.to_string()),
    }
}

/// The most a via command may write for one host's answer (`list --via`:
/// the remote `baton list --json`, a few hundred bytes an instance), and
/// in one line of a bridge session (`Remote`): past it, the command is
/// stopped and the call fails (docs/decisions.md).
pub const MAX_VIA_OUTPUT: usize = 64 << 20;

/// A session with a remote instance through `VIA baton bridge TARGET`
/// (VIA is typically `ssh host`): the one client's `Session` over the
/// command's pipes, and the command, killed with it.
pub struct Remote {
    pub session: Session,
    via: Via,
    timeout: Duration,
}

/// One word of the remote command line, as the local shell reads it: a
/// word of characters no shell treats specially quoted once, as it always
/// was; any other quoted twice, so that the remote shell, which gets the
/// words joined with spaces (as ssh does), reads it as given.
fn remote_word(a: &str) -> String {
    let plain = a
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.-,:/=@+%".contains(&b));
    match plain && !a.is_empty() {
        true => shell_quote(a),
        false => shell_quote(&shell_quote(a)),
    }
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
        let mut via = Via::spawn(via, config, &["bridge", how, target], multiplex, false)?;
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
            // With its `\n`, holding at most one byte past the bound.
            let mut line = Vec::new();
            let mut read = (&mut out).take(MAX_VIA_OUTPUT as u64 + 1);
            if read.read_until(b'\n', &mut line).is_err() || line.is_empty() {
                break;
            }
            if line.len() > MAX_VIA_OUTPUT {
                eprintln!(
                    "baton: the via command wrote a line over {} MiB; stopped it",
                    MAX_VIA_OUTPUT >> 20
                );
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
    use crate::base::error::ExitCode;

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
