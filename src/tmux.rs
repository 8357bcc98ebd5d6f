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

use crate::sanitize::escape_multiline;
use crate::sys;
use crossbeam_channel as chan;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
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
/// What `pane_state` asks tmux of a pane.
const STATE: &str = "#{pane_pid} #{pane_in_mode} #{bracket_paste_flag}";

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
}

impl Trouble {
    /// Why, in a line (a notice's `reason`).
    pub fn reason(&self) -> &str {
        match self {
            Trouble::Failed(why) => why,
            Trouble::Unbracketed => "the program in the pane has not asked for bracketed paste",
        }
    }
}

/// The helper thread's end: dropping it ends the thread once its job is
/// done.
pub struct Typist {
    jobs: chan::Sender<Job>,
}

impl Typist {
    /// Hands the thread a job; false if it is gone.
    pub fn ask(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }
}

/// Starts the helper thread for `pane`; it reports on `reports`.
pub fn start(pane: &str, reports: chan::Sender<Report>) -> io::Result<Typist> {
    let (jobs, todo) = chan::unbounded::<Job>();
    let pane = pane.to_string();
    thread::Builder::new()
        .name("baton-tmux".into())
        .spawn(move || {
            let mut done = todo.into_iter().map(|job| match job {
                Job::Probe => Report::Probed(probe(&pane)),
                Job::Type {
                    message_id,
                    buffer,
                    text,
                } => Report::Typed {
                    result: type_block(&pane, &buffer, &text),
                    message_id,
                },
            });
            let _ = done.try_for_each(|report| reports.send(report));
        })?;
    Ok(Typist { jobs })
}

/// The `tmux` that `PATH` names, if any: checked at start, so that a
/// missing tmux is a clear error and not a pane that never answers.
pub fn find_on_path() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    let executable = |m: std::fs::Metadata| m.is_file() && m.permissions().mode() & 0o111 != 0;
    std::env::split_paths(&path)
        .map(|d| d.join("tmux"))
        .find(|p| std::fs::metadata(p).is_ok_and(executable))
}

/// Is the pane there, and can it take a paste? A pane in a mode can: the
/// mode is left before the paste, and what its program asked for is read
/// then.
fn probe(pane: &str) -> Result<Option<u32>, Trouble> {
    match pane_state(pane)? {
        (_, false, Some(false)) => Err(Trouble::Unbracketed),
        (pid, _, _) => Ok(pid),
    }
}

/// The pane's process, whether the pane is in a mode, and whether its
/// program asked for bracketed paste (`None`: this tmux does not say).
fn pane_state(pane: &str) -> Result<(Option<u32>, bool, Option<bool>), Trouble> {
    let out = tmux(&["display-message", "-p", "-t", pane, STATE], None)?;
    Ok(parse_state(&out))
}

/// `STATE` as printed: a tmux without its last format prints nothing for
/// it.
fn parse_state(out: &str) -> (Option<u32>, bool, Option<bool>) {
    let mut words = out.split_whitespace();
    let pid = words.next().and_then(|w| w.parse().ok());
    let in_mode = words.next() == Some("1");
    let bracketed = match words.next() {
        Some("1") => Some(true),
        Some("0") => Some(false),
        _ => None,
    };
    (pid, in_mode, bracketed)
}

/// Leaves a mode the pane is in, pastes `text` as one block with its
/// controls made visible, waits `ENTER_DELAY`, presses Enter.
fn type_block(pane: &str, buffer: &str, text: &str) -> Result<Option<u32>, Trouble> {
    let (pid, in_mode, mut bracketed) = pane_state(pane)?;
    if in_mode {
        tmux(&["send-keys", "-t", pane, "-X", "cancel"], None)?;
        bracketed = pane_state(pane)?.2;
    }
    // Read just before the paste; a program that turns bracketed paste off
    // in the few milliseconds between gets the paste without markers.
    if bracketed == Some(false) {
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
    tmux(&["send-keys", "-t", pane, "Enter"], None).map(|_| pid)
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
    let mut child = crate::reaper::spawned(|| cmd.spawn(), Child::id)
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
        crate::reaper::waited(pid);
        return Err(Trouble::Failed(format!(
            "tmux {what} did not finish within {} s",
            CALL_TIMEOUT.as_secs()
        )));
    };
    crate::reaper::waited(pid);
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
        let p = Some(42);
        assert_eq!(parse_state("42 0 1\n"), (p, false, Some(true)));
        assert_eq!(parse_state("42 0 0\n"), (p, false, Some(false)));
        assert_eq!(parse_state("42 1 0\n"), (p, true, Some(false)));
        // tmux 3.3a: an unknown format is empty.
        assert_eq!(parse_state("42 0 \n"), (p, false, None));
        assert_eq!(parse_state("42 1\n"), (p, true, None));
        assert_eq!(parse_state("\n"), (None, false, None));
    }
}
