//! Typing tasks into a tmux pane (`baton serve --tmux-pane PANE`): the
//! tmux client calls, each bounded in time, made by one helper thread that
//! takes jobs from the foreground and reports on a channel of its own.
//! It says what tmux said; what becomes of a task the foreground
//! (`instance::pane`) decides.
//!
//! A task is typed as one block: `tmux load-buffer -b NAME -` (the text on
//! standard input, into a buffer named for this instance and task), then
//! `tmux paste-buffer -p -d -b NAME -t PANE` (`-p`: bracketed-paste
//! markers around it when the application asked for bracketed paste, so
//! multi-line text arrives whole; `-d`: the buffer is deleted), then, after
//! `ENTER_DELAY`, `tmux send-keys -t PANE Enter` as a key of its own.
//! Before the paste, a pane in a mode (`#{pane_in_mode}` is 1: copy mode,
//! say) is taken out of it with `send-keys -X cancel`. Which server the
//! pane is on is tmux's choice, from the environment (`TMUX`, else
//! `TMUX_TMPDIR` and the default socket), as for any tmux command.
//!
//! The text is typed as `sanitize::escape_multiline` shows it (as `baton
//! inbox claim` prints it): tmux pastes bytes as they are, so an ESC of the
//! text could end the paste (`ESC [ 201 ~`) and what follows would arrive
//! as keys (a CR that submits, a Ctrl-C). Only newlines and tabs stay raw,
//! and those are text inside a bracketed paste. Without the paste they
//! would be keys too: where tmux says that the pane's program has not asked
//! for it (`#{bracket_paste_flag}` is 0; tmux 3.3a has no such format and
//! says nothing), nothing is typed and `Trouble::Unbracketed` is reported.
//!
//! Nor is anything typed into a shell, which would run a task's lines as
//! commands once Enter comes: before each paste, and at each probe, the
//! pane's foreground program is read twice, as tmux names it
//! (`#{pane_current_command}`) and as the kernel does (the leader of the
//! foreground process group of the pane's terminal: `tpgid` in
//! `/proc/PID/stat` of the pane's process, then that leader's `comm`;
//! Linux only). If either is a shell (`is_shell`), `Trouble::Shell` is
//! reported.

use crate::sys;
use crate::text::sanitize::escape_multiline;
use crossbeam_channel as chan;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long one tmux call may take before it is killed and counted as
/// failed.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Between the paste and the Enter: an application that reads a paste
/// (an agent's prompt, say) gets the time to take it in as text, so the
/// Enter arrives on its own and submits it.
pub const ENTER_DELAY: Duration = Duration::from_millis(150);
/// The most of a tmux call's output kept (what it prints is one line).
const OUTPUT_BYTES: u64 = 4096;
/// What `pane_state` asks tmux of a pane. The command comes last: it is
/// the rest of the line, whatever it holds.
const STATE: &str = "#{pane_pid} #{pane_in_mode} #{bracket_paste_flag} #{pane_current_command}";
/// Shells by name, whatever `/etc/shells` lists.
const SHELLS: [&str; 10] = [
    "sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "busybox",
];
/// The most of `/etc/shells` and of a `/proc` file read.
const FILE_BYTES: u64 = 64 * 1024;

/// What the foreground asks of the helper thread.
#[derive(Debug)]
pub enum Job {
    /// Is the pane there?
    Probe,
    /// Type `text` as one block, its controls made visible, then Enter,
    /// through the buffer `buffer`.
    Type {
        message_id: String,
        buffer: String,
        text: String,
    },
}

/// What the helper thread reports.
#[derive(Debug)]
pub enum Report {
    /// The pane can take a paste; the pid of its process (the agent),
    /// when tmux says.
    Probed(Result<Option<u32>, Trouble>),
    Typed {
        message_id: String,
        result: Result<Option<u32>, Trouble>,
    },
}

/// Why nothing is typed into the pane now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// A tmux call failed or took too long: why, in a line.
    Failed(String),
    /// tmux says the program in the pane has not asked for bracketed
    /// paste: the line ends of a task would reach it as Enter keys, each
    /// submitting a line of its own.
    Unbracketed,
    /// The pane's foreground program is this shell, which would run a
    /// task's lines as commands.
    Shell(String),
}

impl Trouble {
    /// Why, in a line (a notice's `reason`).
    pub fn reason(&self) -> String {
        match self {
            Trouble::Failed(why) => why.clone(),
            Trouble::Unbracketed => {
                "the program in the pane has not asked for bracketed paste".into()
            }
            Trouble::Shell(name) => format!("the pane runs a shell ({name})"),
        }
    }

    /// Why tasks wait, and for what (`control/status`'s `tmux_wait`).
    pub fn waiting(&self) -> String {
        let until = match self {
            Trouble::Failed(_) => "tasks wait until it answers",
            Trouble::Unbracketed => "tasks wait until it asks",
            Trouble::Shell(_) => "tasks wait until an agent runs there",
        };
        match self {
            Trouble::Failed(why) => format!("the pane cannot be reached ({why}): {until}"),
            _ => format!("{}: {until}", self.reason()),
        }
    }

    /// The same kind of trouble, whatever tmux's words: the same shell,
    /// or the same other kind.
    pub fn same_kind(&self, other: &Trouble) -> bool {
        match (self, other) {
            (Trouble::Shell(a), Trouble::Shell(b)) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

/// Starts the helper thread for `pane`: it takes jobs on the channel
/// returned, reports on `reports`, and ends once the jobs' sender is
/// dropped and its job is done.
pub fn start(pane: &str, reports: chan::Sender<Report>) -> io::Result<chan::Sender<Job>> {
    let (jobs, todo) = chan::unbounded::<Job>();
    let pane = pane.to_string();
    thread::Builder::new()
        .name("baton-tmux".into())
        .spawn(move || {
            let shells = shells();
            let mut done = todo.into_iter().map(|job| match job {
                Job::Probe => Report::Probed(probe(&pane, &shells)),
                Job::Type {
                    message_id,
                    buffer,
                    text,
                } => Report::Typed {
                    result: type_block(&pane, &shells, &buffer, &text),
                    message_id,
                },
            });
            let _ = done.try_for_each(|report| reports.send(report));
        })?;
    Ok(jobs)
}

/// What `baton doctor` says of `pane`: `Err` when tmux does not know it
/// (or cannot be asked), with what tmux said; `Ok(Some(why))` when it is
/// there but would take no task now (a shell runs in it, or its program
/// has not asked for bracketed paste); `Ok(None)` when it would.
pub fn check_pane(pane: &str) -> Result<Option<String>, String> {
    match probe(pane, &shells()) {
        Ok(_) => Ok(None),
        Err(Trouble::Failed(why)) => Err(why),
        Err(t) => Ok(Some(t.reason())),
    }
}

/// What tmux says of a pane (`STATE`).
#[derive(Debug, PartialEq, Eq)]
struct PaneState {
    /// The pane's process.
    pid: Option<u32>,
    in_mode: bool,
    /// Whether its program asked for bracketed paste; `None`: this tmux
    /// does not say.
    bracketed: Option<bool>,
    /// `#{pane_current_command}`: the foreground program, as tmux names it.
    command: String,
}

/// Is the pane there, and can it take a paste? A pane in a mode can: the
/// mode is left before the paste, and what its program asked for is read
/// then. A pane that runs a shell cannot.
fn probe(pane: &str, shells: &[String]) -> Result<Option<u32>, Trouble> {
    let state = pane_state(pane)?;
    if let Some(shell) = shell_in(&state, shells) {
        return Err(Trouble::Shell(shell));
    }
    match state {
        PaneState {
            in_mode: false,
            bracketed: Some(false),
            ..
        } => Err(Trouble::Unbracketed),
        PaneState { pid, .. } => Ok(pid),
    }
}

/// What tmux says of the pane now.
fn pane_state(pane: &str) -> Result<PaneState, Trouble> {
    let out = tmux(&["display-message", "-p", "-t", pane, STATE], None)?;
    Ok(parse_state(&out))
}

/// `STATE` as printed: a tmux without `bracket_paste_flag` prints nothing
/// for it (its space stays), and the command is the rest of the line.
fn parse_state(out: &str) -> PaneState {
    let line = out.lines().next().unwrap_or("");
    let mut words = line.splitn(4, ' ');
    let pid = words.next().and_then(|w| w.parse().ok());
    let in_mode = words.next() == Some("1");
    let bracketed = match words.next() {
        Some("1") => Some(true),
        Some("0") => Some(false),
        _ => None,
    };
    let command = words.next().unwrap_or("").to_string();
    PaneState {
        pid,
        in_mode,
        bracketed,
        command,
    }
}

/// The shell the pane's foreground program is, if it is one: as tmux
/// names it, or as the kernel names the leader of the foreground process
/// group of the pane's terminal.
fn shell_in(state: &PaneState, shells: &[String]) -> Option<String> {
    let leader = state.pid.and_then(foreground_leader);
    [Some(state.command.as_str()), leader.as_deref()]
        .into_iter()
        .flatten()
        .map(program_name)
        .find(|name| is_shell(name, shells))
        .map(str::to_string)
}

/// A program's name as a shell list spells it: no directory, and no `-`
/// of a login shell (`-bash`).
fn program_name(command: &str) -> &str {
    let command = command.trim();
    let base = command.rsplit('/').next().unwrap_or(command);
    base.trim_start_matches('-')
}

/// Whether `name` is a shell: one of `SHELLS`, or the last part of a
/// path `/etc/shells` lists (`shells`).
fn is_shell(name: &str, shells: &[String]) -> bool {
    !name.is_empty() && (SHELLS.contains(&name) || shells.iter().any(|s| s == name))
}

/// The names of the programs `/etc/shells` lists (read bounded; none if
/// it cannot be read).
fn shells() -> Vec<String> {
    let text = read_bounded(Path::new("/etc/shells")).unwrap_or_default();
    shell_names(&text)
}

fn shell_names(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| program_name(l).to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The `comm` of the leader of the foreground process group of `pid`'s
/// controlling terminal (`tpgid`, field 8 of `/proc/PID/stat`): what runs
/// in the pane in front, whatever tmux says. None where there is no
/// `/proc`, no terminal, or that leader has exited.
fn foreground_leader(pid: u32) -> Option<String> {
    let stat = read_bounded(Path::new(&format!("/proc/{pid}/stat")))?;
    // After the comm: state, ppid, pgrp, session, tty_nr, tpgid.
    let rest = &stat[stat.rfind(')')? + 1..];
    let tpgid: i64 = rest.split_whitespace().nth(5)?.parse().ok()?;
    if tpgid <= 0 {
        return None;
    }
    let stat = read_bounded(Path::new(&format!("/proc/{tpgid}/stat")))?;
    let comm = &stat[stat.find('(')? + 1..stat.rfind(')')?];
    Some(comm.to_string())
}

/// A small file's text, read bounded.
fn read_bounded(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Leaves a mode the pane is in, pastes `text` as one block with its
/// controls made visible, waits `ENTER_DELAY`, presses Enter; nothing if
/// the pane runs a shell.
fn type_block(
    pane: &str,
    shells: &[String],
    buffer: &str,
    text: &str,
) -> Result<Option<u32>, Trouble> {
    let mut state = pane_state(pane)?;
    if state.in_mode {
        tmux(&["send-keys", "-t", pane, "-X", "cancel"], None)?;
        state = pane_state(pane)?;
    }
    // Read just before the paste; a program that turns bracketed paste off
    // (or a shell that takes the terminal back) in the few milliseconds
    // between gets the paste.
    if let Some(shell) = shell_in(&state, shells) {
        return Err(Trouble::Shell(shell));
    }
    if state.bracketed == Some(false) {
        return Err(Trouble::Unbracketed);
    }
    let text = escape_multiline(text);
    tmux(&["load-buffer", "-b", buffer, "-"], Some(&text))?;
    let pasted = tmux(
        &["paste-buffer", "-p", "-d", "-b", buffer, "-t", pane],
        None,
    );
    if let Err(e) = pasted {
        // Not left behind in the server when the paste failed.
        let _ = tmux(&["delete-buffer", "-b", buffer], None);
        return Err(e);
    }
    thread::sleep(ENTER_DELAY);
    // A shell that took the terminal back meanwhile (the agent exited)
    // holds the paste in its line, unrun: it gets no Enter.
    if let Some(shell) = shell_in(&pane_state(pane)?, shells) {
        return Err(Trouble::Shell(shell));
    }
    tmux(&["send-keys", "-t", pane, "Enter"], None).map(|_| state.pid)
}

/// Runs `tmux ARGS` (with `input` on its standard input), killed after
/// `CALL_TIMEOUT`: its standard output, or why it failed.
fn tmux(args: &[&str], input: Option<&str>) -> Result<String, Trouble> {
    let mut cmd = Command::new("tmux");
    cmd.args(args)
        .stdin(input.map_or_else(Stdio::null, |_| Stdio::piped()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    sys::die_with_parent(&mut cmd);
    let what = args.first().copied().unwrap_or("");
    let mut child = crate::base::reaper::spawned(|| cmd.spawn(), Child::id)
        .map_err(|e| Trouble::Failed(format!("cannot run tmux {what}: {e}")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // On a thread of its own: a tmux that does not read cannot hold
        // this one past the bound (the write fails once it is killed).
        let text = text.to_string();
        let _ = thread::Builder::new()
            .name("baton-tmux-in".into())
            .spawn(move || {
                let _ = stdin.write_all(text.as_bytes());
            });
    }
    let status = wait_bounded(&mut child);
    let pid = child.id();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        crate::base::reaper::waited(pid);
        return Err(Trouble::Failed(format!(
            "tmux {what} did not finish within {} s",
            CALL_TIMEOUT.as_secs()
        )));
    };
    crate::base::reaper::waited(pid);
    let out = read_all(child.stdout.take());
    if status.success() {
        return Ok(out);
    }
    let err = read_all(child.stderr.take());
    let line = err.lines().map(str::trim).find(|l| !l.is_empty());
    Err(Trouble::Failed(match line {
        Some(line) => format!("tmux {what}: {line}"),
        None => format!("tmux {what} failed ({status})"),
    }))
}

/// Waits for `child` until `CALL_TIMEOUT`: often at first (a tmux call
/// takes a few milliseconds), then less often.
fn wait_bounded(child: &mut Child) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(None) => {}
            done => return done.ok().flatten(),
        }
        let waited = start.elapsed();
        if waited >= CALL_TIMEOUT {
            return None;
        }
        let early = waited < Duration::from_millis(50);
        let step = if early { 1 } else { 10 };
        thread::sleep(Duration::from_millis(step));
    }
}

/// What the exited tmux left in a pipe, read without waiting: a process
/// it left behind may hold the pipe open, and is not waited for.
fn read_all<R: Read + AsFd>(r: Option<R>) -> String {
    let mut buf = Vec::new();
    if let Some(r) = r {
        if sys::set_nonblocking(r.as_fd()).is_ok() {
            let _ = r.take(OUTPUT_BYTES).read_to_end(&mut buf);
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tmux_without_bracket_paste_flag_does_not_say() {
        let st = |pid, in_mode, bracketed, command: &str| PaneState {
            pid,
            in_mode,
            bracketed,
            command: command.into(),
        };
        let p = Some(42);
        assert_eq!(
            parse_state("42 0 1 claude\n"),
            st(p, false, Some(true), "claude")
        );
        assert_eq!(
            parse_state("42 0 0 bash\n"),
            st(p, false, Some(false), "bash")
        );
        assert_eq!(
            parse_state("42 1 0 node\n"),
            st(p, true, Some(false), "node")
        );
        // tmux 3.3a: an unknown format is empty, its space stays.
        assert_eq!(parse_state("42 0  bash\n"), st(p, false, None, "bash"));
        assert_eq!(parse_state("42 1  \n"), st(p, true, None, ""));
        assert_eq!(parse_state("42 1\n"), st(p, true, None, ""));
        assert_eq!(parse_state("\n"), st(None, false, None, ""));
    }

    #[test]
    fn a_shell_is_known_by_its_name_or_by_etc_shells() {
        let listed = shell_names("# /etc/shells\n/bin/sh\n/usr/bin/rbash\n\n/usr/local/bin/nu\n");
        assert_eq!(listed, ["sh", "rbash", "nu"]);
        for name in [
            "bash", "-bash", "/bin/zsh", "busybox", "rbash", "nu", " fish ",
        ] {
            assert!(is_shell(program_name(name), &listed), "{name}");
        }
        for name in ["claude", "python3", "node", "", "-", "bashful", "codex"] {
            assert!(!is_shell(program_name(name), &listed), "{name}");
        }
        let state = |command: &str| PaneState {
            pid: None,
            in_mode: false,
            bracketed: None,
            command: command.into(),
        };
        assert_eq!(shell_in(&state("-bash"), &[]), Some("bash".into()));
        assert_eq!(shell_in(&state("claude"), &[]), None);
    }
}
