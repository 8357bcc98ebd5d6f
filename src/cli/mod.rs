//! The command line (baton(1)): one table of commands, each in its own
//! file with a `run`, and the one place where errors become exit codes.

mod approvals;
mod approve;
mod args;
mod attach;
mod bridge;
mod cancel;
mod completions;
mod control;
mod doctor;
mod gc;
mod hosts;
mod inbox;
mod inbox_wait;
mod list;
mod log;
mod mcp;
mod result;
mod send;
mod sent;
mod serve;
mod since;
mod stop;
mod target;
mod user;
mod wait;
mod wake;
mod watch;

pub use args::Opt;
use args::{Args, switch, value};

use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use std::ffi::OsString;
use std::io::{BufRead, Write};

/// One subcommand.
pub struct Command {
    pub name: &'static str,
    pub usage: &'static str,
    pub summary: &'static str,
    pub opts: &'static [Opt],
    run: fn(&Args, &Config) -> Result<ExitCode>,
}

const HELP: Opt = switch("help", "show this help").alias('h');
const JSON: Opt = switch("json", "print JSON instead of text");
const UTC: Opt = switch(
    "utc",
    "show times in UTC (default: local time, with the date when it is not today)",
);
pub(crate) const NO_MULTIPLEX: Opt = switch(
    "no-multiplex",
    "with --via 'ssh ...': open a connection of its own, not ssh's shared one",
);

pub const COMMANDS: &[Command] = &[
    Command {
        name: "serve",
        usage: "baton serve [--name NAME] [--workspace DIR] [--profile coding|sysadmin] [--model LABEL]\n         [--exec CMD [--reply] [--stdin envelope|body] | --tmux-pane PANE | --codex [--codex-socket PATH]] [--turn-timeout SECONDS] [--approve auto|ask|deny [--yes]]\n         [--paused] [--ephemeral] [--ephemeral-spool] [--zcoder] [--ttl SECONDS] [--no-offline] [--accept-from PATTERN]... [--deny-from PATTERN]...
         [--operator USER]...",
        summary: "run an instance for a workspace: tasks run through --exec, are typed into a tmux pane (--tmux-pane), go to Codex (--codex), or wait for 'baton inbox claim'",
        opts: &[
            value(
                "name",
                "the instance name (default: the workspace's basename)",
            ),
            value(
                "workspace",
                "the workspace directory (default: the current directory)",
            ),
            value("profile", "coding (default) or sysadmin"),
            value("model", "the agent's label, shown to peers"),
            switch(
                "paused",
                "start paused: refuse new tasks until 'baton resume'",
            ),
            switch(
                "ephemeral-spool",
                "keep the spool in a private runtime directory removed at exit",
            ),
            value(
                "accept-from",
                "accept only senders whose name or workspace matches this glob (repeatable)",
            ),
            value(
                "deny-from",
                "refuse senders whose name or workspace matches this glob (repeatable)",
            ),
            value(
                "operator",
                "the account (user name or uid) whose processes are this instance's operators; its own account is then at most its agent (repeatable)",
            ),
            value(
                "exec",
                "run each task with sh -c CMD in the workspace, the envelope on stdin (see --stdin)",
            ),
            switch(
                "reply",
                "with --exec: send the handler's stdout back to the sender as a reply",
            ),
            value(
                "stdin",
                "with --exec: what the handler reads, the envelope (default) or the task's text alone (body)",
            ),
            value(
                "tmux-pane",
                "type each task into this tmux pane (%3, session:window.pane), one at a time; not with --exec",
            ),
            switch(
                "codex",
                "hand each task to the Codex session of the workspace through Codex's app-server, one at a time; not with --exec or --tmux-pane",
            ),
            value(
                "codex-socket",
                "with --codex: the app-server's socket (default: $CODEX_HOME/app-server-control/app-server-control.sock, CODEX_HOME ~/.codex)",
            ),
            value(
                "turn-timeout",
                "end a turn after this many seconds: an --exec handler (SIGTERM, then SIGKILL), a task typed by --tmux-pane or a Codex turn (outcome timeout)",
            ),
            value(
                "approve",
                "auto, ask or deny: whether a task runs without an operator's approval",
            ),
            switch("yes", "allow --approve auto with --profile sysadmin"),
            switch(
                "ephemeral",
                "exit about a second after the last client disconnects",
            ),
            switch(
                "zcoder",
                "also publish in zcoder's registry, so zcoder agents can find and reach this one",
            ),
            value(
                "ttl",
                "set aside queued tasks older than this many seconds as expired (default: BATON_TTL, else never)",
            ),
            switch(
                "no-offline",
                "refuse offline delivery: senders may not store tasks while this name is not running",
            ),
            HELP,
        ],
        run: launch::<serve::Serve>,
    },
    Command {
        name: "attach",
        usage: "baton attach [TARGET]",
        summary: "open the interactive view on a running instance",
        opts: &[HELP],
        run: launch::<attach::Attach>,
    },
    Command {
        name: "list",
        usage: "baton list [--json] [--all] [--offline] [--user NAME]\n                [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "list live instances (name, pid, state, id, workspace)",
        opts: &[
            JSON,
            switch(
                "all",
                "also show entries that were skipped, with the problem",
            ),
            switch(
                "offline",
                "show known names that are not running, with their queued counts",
            ),
            user::USER,
            hosts::VIA,
            hosts::HOSTS,
            hosts::HOST_TIMEOUT,
            NO_MULTIPLEX,
            HELP,
        ],
        run: launch::<list::List>,
    },
    Command {
        name: "send",
        usage: "baton send TARGET [MESSAGE|-] [--json] [--message-id ID] [--mode queue|steer] [--wait [--timeout SECONDS]]\n                [--from NAME | --via CMD [--no-multiplex]] [--user NAME]\n       baton send --reply [MESSAGE|-]    (inside a turn: answer its sender)",
        summary: "deliver a task to an instance (exact id or unique name); MESSAGE or stdin",
        opts: &[
            JSON,
            switch(
                "reply",
                "inside a turn: send MESSAGE back to the sender of its task",
            ),
            value(
                "message-id",
                "use this message id (to retry a send exactly)",
            ),
            value(
                "mode",
                "queue (default, FIFO) or steer (ahead of queued tasks)",
            ),
            switch(
                "wait",
                "wait until the task ends at the receiver; print its reply; exit 0 only if done",
            ),
            value(
                "timeout",
                "with --wait: stop waiting after this many seconds (exit 5; the task stays queued)",
            ),
            value(
                "from",
                "send as the live local instance NAME: the receiver sees NAME, replies go to its inbox",
            ),
            value(
                "via",
                "deliver on another host through CMD (e.g. 'ssh host'), with baton bridge there",
            ),
            NO_MULTIPLEX,
            user::USER,
            HELP,
        ],
        run: launch::<send::Send>,
    },
    Command {
        name: "ping",
        usage: "baton ping [TARGET] [--json] [--user NAME]",
        summary: "check that an instance answers, and how fast",
        opts: &[JSON, user::USER, HELP],
        run: launch::<control::Ping>,
    },
    Command {
        name: "status",
        usage: "baton status [TARGET] [--json] [--user NAME]\n                    [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "show an instance's state, queue and spool",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<control::Status>,
    },
    Command {
        name: "pause",
        usage: "baton pause [TARGET] [--json] [--user NAME]\n                   [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "refuse new tasks (status paused); queued tasks are kept",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<control::Pause<true>>,
    },
    Command {
        name: "resume",
        usage: "baton resume [TARGET] [--json] [--user NAME]\n                    [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "accept tasks again and continue the queue",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<control::Pause<false>>,
    },
    Command {
        name: "inbox",
        usage: "baton inbox list [--all] [TARGET] [--json] [--user NAME]\n                  [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]\n       baton inbox claim [TARGET] [--json]\n       baton inbox wait [--timeout SECONDS] [TARGET] [--json]\n       baton inbox complete [[TARGET] MESSAGE_ID] [--outcome done|failed] [--reply TEXT [--reply-to-reply]] [--json]\n       baton inbox requeue|discard [TARGET] MESSAGE_ID [--json]",
        summary: "see queued tasks, wait for one, claim the next one, complete it; requeue or discard interrupted ones",
        opts: &[
            JSON,
            value(
                "timeout",
                "for wait: give up after SECONDS when no task waits (exit 5)",
            ),
            value("outcome", "done (default) or failed, for complete"),
            value(
                "reply",
                "for complete: send TEXT back to the task's sender as a reply",
            ),
            switch(
                "reply-to-reply",
                "for complete: send --reply TEXT even when the task is itself a reply",
            ),
            switch(
                "all",
                "for list: also show the last 100 finished tasks, each with its outcome",
            ),
            user::USER,
            hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP,
        ],
        run: launch::<inbox::Inbox>,
    },
    Command {
        name: "cancel",
        usage: "baton cancel [TARGET] MESSAGE_ID [--json] [--user NAME]\n                    [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "withdraw a queued task or stop its running turn (outcome cancelled), a stopped agent's too",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<cancel::Cancel>,
    },
    Command {
        name: "result",
        usage: "baton result [TARGET] MESSAGE_ID [--json] [--utc] [--wait [--timeout SECONDS]] [--user NAME]\n                    [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "show what became of a task: its outcome, why, its reply, when it was accepted and ended; a stopped agent's too",
        opts: &[JSON, UTC, result::WAIT, result::TIMEOUT, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<result::TaskResult>,
    },
    Command {
        name: "wake",
        usage: "baton wake NAME",
        summary: "start a socket-activated agent by connecting to its wake socket, and wait for it",
        opts: &[HELP],
        run: launch::<wake::Wake>,
    },
    Command {
        name: "stop",
        usage: "baton stop NAME [--timeout SECONDS] [--user NAME]",
        summary: "stop a running instance (SIGTERM to its pid, once it answers as that instance)",
        opts: &[
            value(
                "timeout",
                "wait at most this many seconds for it to exit (default 10)",
            ),
            user::USER,
            HELP,
        ],
        run: launch::<stop::Stop>,
    },
    Command {
        name: "forget",
        usage: "baton forget NAME [--workspace DIR] [--yes] [--user NAME]",
        summary: "remove a stopped name's spool, after showing what it holds",
        opts: &[
            value(
                "workspace",
                "the spool of NAME for this workspace, when several have that name",
            ),
            switch(
                "yes",
                "remove without asking (needed when stdin is not a terminal)",
            ),
            user::USER,
            HELP,
        ],
        run: launch::<stop::Forget>,
    },
    Command {
        name: "log",
        usage: "baton log [TARGET] [--json] [--utc] [-n N] [--since WHEN] [--follow] [--user NAME]\n                 [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "print an instance's transcript: every event it recorded",
        opts: &[
            JSON,
            UTC,
            value("lines", "only the last N events").alias('n'),
            value(
                "since",
                "only events from WHEN on: an age (30s, 10m, 2h, 1d), a date, a date and time, or a time today",
            ),
            switch(
                "follow",
                "then go on with the live events, as 'baton watch'",
            )
            .alias('f'),
            user::USER,
            hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP,
        ],
        run: launch::<watch::Log>,
    },
    Command {
        name: "watch",
        usage: "baton watch [TARGET] [--json] [--utc] [--since SEQ] [--approve] [--user NAME]\n                   [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "follow an instance's events live; --approve answers its approval requests",
        opts: &[
            JSON,
            UTC,
            value(
                "since",
                "first replay the recorded events from this sequence number",
            ),
            switch(
                "approve",
                "be a controller: answer each approval request on stdin with y or n (or y ID, n ID); v (or v ID) prints its whole body",
            ),
            user::USER,
            hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP,
        ],
        run: launch::<watch::Watch>,
    },
    Command {
        name: "approvals",
        usage: "baton approvals [TARGET] [--json] [--full] [--user NAME]\n                       [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "list the approvals waiting at an instance: tasks, and tool calls MCP hosts ask about",
        opts: &[JSON, switch("full", "print each whole body, escaped"), user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<approvals::List>,
    },
    Command {
        name: "approve",
        usage: "baton approve [TARGET] APPROVAL_ID... [--json] [--user NAME]\n                     [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "approve waiting approvals by id, as 'baton approvals' lists them",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<approvals::Decide<true>>,
    },
    Command {
        name: "deny",
        usage: "baton deny [TARGET] APPROVAL_ID... [--json] [--user NAME]\n                  [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "deny waiting approvals by id, as 'baton approvals' lists them",
        opts: &[JSON, user::USER, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<approvals::Decide<false>>,
    },
    Command {
        name: "mcp",
        usage: "baton mcp [--name NAME] [--profile coding|sysadmin]",
        summary: "be an MCP server on stdio for a coding agent, backed by an instance for this directory",
        opts: &[
            value(
                "name",
                "the instance name (default: the directory's basename)",
            ),
            value("profile", "coding (default) or sysadmin"),
            HELP,
        ],
        run: launch::<mcp::Mcp>,
    },
    Command {
        name: "bridge",
        usage: "baton bridge [TARGET] [--key LABEL] [--offline | --await]",
        summary: "join stdin and stdout to an instance's socket (for ssh host baton bridge NAME)",
        opts: &[
            value(
                "key",
                "name the ssh key this forced command serves: it reaches only its own tasks, shown (remote LABEL)",
            ),
            switch(
                "offline",
                "when TARGET is not running but has a spool, store each message/send there (stored)",
            ),
            switch(
                "await",
                "when TARGET is not running, wait until it runs, then join",
            ),
            HELP,
        ],
        run: launch::<bridge::Bridge>,
    },
    Command {
        name: "completions",
        usage: "baton completions bash|zsh|fish",
        summary: "print a shell completion script",
        opts: &[HELP],
        run: launch::<completions::Completions>,
    },
    Command {
        name: "gc",
        usage: "baton gc [--json]\n       baton gc --spools [--older-than DAYS] [--dry-run] [--json]",
        summary: "remove the registry entries of instances that are gone; with --spools, the spools of stopped names that hold only old receipts",
        opts: &[
            JSON,
            switch(
                "spools",
                "remove the spools of stopped names that hold nothing but receipts, last used more than --older-than DAYS ago",
            ),
            value(
                "older-than",
                "with --spools: the age in days past which such a spool goes (default 30)",
            ),
            switch("dry-run", "with --spools: list the spools, remove nothing"),
            HELP,
        ],
        run: launch::<gc::Gc>,
    },
    Command {
        name: "doctor",
        usage: "baton doctor [--json]\n                    [--via CMD]... [--hosts FILE] [--host-timeout SECONDS] [--no-multiplex]",
        summary: "check the registry, the state directory, the instances and what they need: one line each, ok, warn or fail",
        opts: &[JSON, hosts::VIA, hosts::HOSTS, hosts::HOST_TIMEOUT, NO_MULTIPLEX, HELP],
        run: launch::<doctor::Doctor>,
    },
    Command {
        name: "help",
        usage: "baton help [COMMAND]",
        summary: "show help for baton or one command",
        opts: &[HELP],
        run: launch::<Help>,
    },
];

fn overview() -> String {
    let mut s = String::from(
        "baton: hand tasks between agent processes on this host\n\n\
         usage: baton [serve options]    an instance for this directory, with its view\n\
         \x20      baton -a|--attach [--name NAME] [--workspace DIR]\n\
         \x20                               the view on the instance serving this directory\n\
         \x20      baton COMMAND [ARGS]\n\ncommands:\n",
    );
    let width = COMMANDS.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in COMMANDS {
        s.push_str(&format!("  {:<width$}  {}\n", c.name, c.summary));
    }
    s.push_str(
        "\nTARGET is an exact instance id or a name that one live instance has;\n\
         without TARGET, the instance of $BATON_SOCKET or the one serving the\n\
         current directory.\n\n\
         exit status: 0 done, 1 refused by the receiver, 2 usage or environment\n\
         error, 3 no such target or an ambiguous one, 4 transport failure,\n\
         5 the task had not ended when the wait stopped ('send --wait --timeout',\n\
         'result').\n\n\
         'baton help COMMAND' shows a command's options; 'baton --version' the version.\n",
    );
    s
}

/// The help text of one command.
pub fn command_help(c: &Command) -> String {
    let mut s = format!("usage: {}\n\n{}\n\noptions:\n", c.usage, c.summary);
    let flags: Vec<String> = c.opts.iter().map(|o| o.spelled(c.usage)).collect();
    let width = flags.iter().map(String::len).max().unwrap_or(0);
    for (flag, o) in flags.iter().zip(c.opts) {
        s.push_str(&format!("  {flag:<width$}  {}\n", o.help));
    }
    s
}

/// `baton help [COMMAND]`.
struct Help(Option<String>);

impl Parsed for Help {
    fn parse(args: &Args) -> Result<Help> {
        Ok(Help(args.positional.first().cloned()))
    }

    fn run(self, _: &Config) -> Result<ExitCode> {
        match self.0 {
            None => shown(&overview()),
            Some(name) => shown(&command_help(command(&name)?)),
        }
    }
}

/// The command of the table named `name`; none is the error of `baton
/// nosuch` and `baton help nosuch` alike.
fn command(name: &str) -> Result<&'static Command> {
    let unknown = || {
        let name = crate::text::sanitize::escape(name);
        Error::Usage(format!("unknown command {name}: see 'baton help'"))
    };
    COMMANDS.iter().find(|c| c.name == name).ok_or_else(unknown)
}

/// Prints `text`: what the command had to do.
fn shown(text: &str) -> Result<ExitCode> {
    emit(text);
    Ok(ExitCode::Ok)
}

/// Prints the answer `v` with `--json`, else `text`.
fn answer(json: bool, v: &impl serde::Serialize, text: &str) -> Result<ExitCode> {
    match json {
        // As a map: its members sorted, whatever built it.
        true => emit_json(&serde_json::to_value(v).expect("an answer serializes")),
        false => emit(text),
    }
    Ok(ExitCode::Ok)
}

/// The answer `r` printed with `--json`; the exit code of a call `ok` or not.
fn done(json: bool, r: &serde_json::Value, ok: bool) -> Result<ExitCode> {
    if json {
        emit_json(r);
    }
    Ok(if ok { ExitCode::Ok } else { ExitCode::Refused })
}

/// Writes to stdout; a closed pipe (`baton list | head -1`) ends the
/// process quietly instead of panicking.
pub fn emit(s: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("baton: cannot write to stdout: {e}");
        std::process::exit(ExitCode::Usage as i32);
    }
}

/// Prints a JSON value on one line.
pub fn emit_json(v: &serde_json::Value) {
    emit(&format!("{v}\n"));
}

/// Runs the command line and returns the process exit status.
pub fn main() -> i32 {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&argv) {
        Ok(code) => code as i32,
        Err(e) => {
            // Idempotent for the parts already escaped; catches a path
            // (a workspace, a socket) an error names as it was given.
            eprintln!(
                "baton: {}",
                crate::text::sanitize::escape_multiline(&e.to_string())
            );
            e.exit_code() as i32
        }
    }
}

fn run(argv: &[OsString]) -> Result<ExitCode> {
    let first = argv.first().and_then(|a| a.to_str()).unwrap_or("");
    match first {
        "--version" | "-V" | "version" => {
            return shown(&format!("baton {}\n", env!("CARGO_PKG_VERSION")));
        }
        "--help" | "-h" => return shown(&overview()),
        _ => {}
    }
    // `baton [serve options]` opens an instance for the current directory
    // and the interactive view on it.
    if argv.is_empty() || first.starts_with('-') {
        let cmd = &COMMANDS[0];
        let mut opts = cmd.opts.to_vec();
        opts.push(attach::ATTACH);
        let args = args::parse("", argv, &opts)?;
        if args.flag("help") {
            return shown(&overview());
        }
        let config = Config::from_env()?;
        return launch::<attach::Bare>(&args, &config);
    }
    let cmd = command(&argv[0].to_string_lossy())?;
    let args = args::parse(cmd.name, &argv[1..], cmd.opts)?;
    if args.flag("help") {
        return shown(&command_help(cmd));
    }
    // Help must work even when the environment is broken.
    let config = if cmd.name == "help" {
        Config::default()
    } else {
        Config::from_env()?
    };
    // On other hosts, `--user` goes with the command.
    if let Some(code) = hosts::elsewhere(cmd, &args, &config)? {
        return Ok(code);
    }
    if let Some(key) = args.value("user") {
        user::enter(key, &config)?;
    }
    (cmd.run)(&args, &config)
}

/// A command's arguments as one typed value, built once from the parsed
/// command line by `parse` (every check and usage error of the command's
/// arguments is there), then run: nothing after `parse` sees `Args`.
trait Parsed: Sized {
    fn parse(args: &Args) -> Result<Self>;
    fn run(self, config: &Config) -> Result<ExitCode>;
}

/// A command of the table: its arguments parsed into `T`, then run.
fn launch<T: Parsed>(args: &Args, config: &Config) -> Result<ExitCode> {
    T::parse(args)?.run(config)
}

/// `[TARGET] [--json]`, which most commands take (`cmd` checks that
/// nothing follows TARGET).
struct On {
    target: Option<String>,
    json: bool,
}

impl On {
    fn parse(args: &Args, cmd: &str) -> Result<On> {
        at_most(args, cmd, 1)?;
        Ok(On {
            target: args.positional.first().cloned(),
            json: args.flag("json"),
        })
    }

    fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }
}

/// `[TARGET] MESSAGE_ID` (`result`, `cancel`): TARGET when given, and
/// the id, which must say something.
fn target_and_id(args: &Args, cmd: &str) -> Result<(Option<String>, String)> {
    let (target, id) = match args.positional.as_slice() {
        [id] => (None, id),
        [t, id] => (Some(t.clone()), id),
        [] => return Err(Error::Usage(format!("{cmd}: MESSAGE_ID is missing"))),
        [_, _, extra, ..] => {
            return Err(Error::Usage(format!(
                "{cmd}: unexpected argument {}",
                crate::text::sanitize::escape(extra)
            )));
        }
    };
    if id.trim().is_empty() {
        return Err(Error::Usage(format!("{cmd}: MESSAGE_ID is empty")));
    }
    Ok((target, id.clone()))
}

/// Asks `question` on stderr: whether the line read on stdin says yes.
fn yes(question: &str) -> std::io::Result<bool> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Fails when a command got more positionals than it takes.
fn at_most(args: &Args, cmd: &str, n: usize) -> Result<()> {
    if args.positional.len() > n {
        return Err(Error::Usage(format!(
            "{cmd}: unexpected argument {} (see 'baton help {cmd}')",
            crate::text::sanitize::escape(&args.positional[n])
        )));
    }
    Ok(())
}
