//! `baton serve`: run an instance in the foreground until a signal.

use super::Parsed;
use super::args::{Args, choice};
use crate::base::config::{Config, Profile};
use crate::base::error::{Error, ExitCode, Result};
use crate::instance::{self, Approve, ServeOptions};
use crate::text::glob::Policy;
use crate::workers::turn::Stdin;
use std::path::PathBuf;
use std::time::Duration;

/// `baton serve`'s options: the instance they describe.
pub struct Serve(pub ServeOptions);

impl Parsed for Serve {
    /// The instance `serve`'s options describe (`ttl` only when `--ttl`
    /// is given).
    fn parse(args: &Args) -> Result<Serve> {
        super::at_most(args, "serve", 0)?;
        let (name, profile) = super::args::name_and_profile(args, "serve")?;
        let model = args.value("model").unwrap_or("").to_string();
        if model.len() > 256 || model.chars().any(crate::text::sanitize::is_unsafe) {
            return Err(Error::Usage(
                "serve: --model must be at most 256 bytes without control characters".into(),
            ));
        }
        let exec = args.value("exec").map(str::to_string);
        if exec.as_deref().is_some_and(|e| e.trim().is_empty()) {
            return Err(Error::Usage("serve: --exec needs a command".into()));
        }
        if args.flag("reply") && exec.is_none() {
            return Err(Error::Usage(
                "serve: --reply sends the handler's output back, so it needs --exec".into(),
            ));
        }
        let stdin = stdin(args, exec.is_some())?;
        let tmux_pane = tmux_pane(args, exec.is_some())?;
        let codex = codex(args, exec.is_some() || tmux_pane.is_some())?;
        let turn_timeout = args.seconds("serve", "turn-timeout")?;
        if turn_timeout.is_some() && exec.is_none() && tmux_pane.is_none() && codex.is_none() {
            return Err(Error::Usage(
                "serve: --turn-timeout bounds a turn, so it needs --exec, --tmux-pane or --codex"
                    .into(),
            ));
        }
        let approve = match (choice(args, "serve", "approve")?, profile) {
            (None, Profile::Sysadmin) => Approve::Ask,
            (None, _) => Approve::Auto,
            (Some(Approve::Auto), Profile::Sysadmin) if !args.flag("yes") => {
                return Err(Error::Usage(
                    "serve: --approve auto with --profile sysadmin runs every task unasked; add --yes to mean it"
                        .into(),
                ));
            }
            (Some(approve), _) => approve,
        };
        let ttl = args.value("ttl").map(|v| match v.parse::<u64>() {
            Ok(n) if n >= 1 && v.bytes().all(|b| b.is_ascii_digit()) => Ok(Duration::from_secs(n)),
            _ => Err(Error::Usage(format!(
                "serve: --ttl {}: use a whole number of seconds, 1 or more",
                crate::text::sanitize::escape(v)
            ))),
        });
        let ttl = ttl.transpose()?;
        Ok(Serve(ServeOptions {
            name,
            workspace: args.value("workspace").map(PathBuf::from),
            profile: profile.as_str().to_string(),
            model,
            paused: args.flag("paused"),
            ephemeral_spool: args.flag("ephemeral-spool"),
            policy: Policy {
                accept_from: globs(args, "accept-from")?,
                deny_from: globs(args, "deny-from")?,
            },
            exec,
            reply: args.flag("reply"),
            stdin,
            turn_timeout,
            approve,
            ephemeral: args.flag("ephemeral"),
            zcoder: args.flag("zcoder"),
            ttl,
            no_offline: args.flag("no-offline"),
            tmux_pane,
            codex,
            operators: operators(args)?,
            // Not embedded in another front end, whose agent it would serve.
            ..ServeOptions::default()
        }))
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        instance::serve(self.with_ttl(config), config.clone())?;
        Ok(ExitCode::Ok)
    }
}

impl Serve {
    /// The options, `--ttl` else `BATON_TTL`.
    fn with_ttl(self, config: &Config) -> ServeOptions {
        let ttl = self.0.ttl.or(config.ttl);
        ServeOptions { ttl, ..self.0 }
    }

    /// `baton` with no command: the same options, and the interactive view.
    pub fn interactive(self, config: &Config) -> Result<ExitCode> {
        crate::tui::interactive(self.with_ttl(config), config.clone())?;
        Ok(ExitCode::Ok)
    }
}

/// `--stdin envelope|body`: what an `--exec` handler reads.
fn stdin(args: &Args, exec: bool) -> Result<Stdin> {
    let Some(stdin) = choice(args, "serve", "stdin")? else {
        return Ok(Stdin::Envelope);
    };
    if !exec {
        return Err(Error::Usage(
            "serve: --stdin says what an --exec handler reads, so it needs --exec".into(),
        ));
    }
    Ok(stdin)
}

/// `--tmux-pane PANE`, checked: a tmux target (`%3`, `work:1.0`), which
/// `--exec` excludes (a task is typed into the pane or run, not both).
fn tmux_pane(args: &Args, exec: bool) -> Result<Option<String>> {
    let Some(pane) = args.value("tmux-pane") else {
        return Ok(None);
    };
    if exec {
        return Err(Error::Usage(
            "serve: --tmux-pane types each task into a pane and --exec runs it: use one of them"
                .into(),
        ));
    }
    if pane.trim().is_empty()
        || pane.len() > 256
        || pane.starts_with('-')
        || pane.chars().any(crate::text::sanitize::is_unsafe)
    {
        return Err(Error::Usage(format!(
            "serve: --tmux-pane {}: name a tmux pane, as %3 or session:window.pane",
            crate::text::sanitize::escape(pane)
        )));
    }
    Ok(Some(pane.to_string()))
}

/// `--codex [--codex-socket PATH]`: the app-server's socket, by default
/// the daemon socket of `$CODEX_HOME` (`~/.codex` when unset). Neither
/// `--exec` nor `--tmux-pane` goes with it: a task goes one way.
fn codex(args: &Args, other_way: bool) -> Result<Option<PathBuf>> {
    let socket = args.value("codex-socket");
    if !args.flag("codex") {
        return match socket {
            Some(_) => Err(Error::Usage(
                "serve: --codex-socket names Codex's app-server, so it needs --codex".into(),
            )),
            None => Ok(None),
        };
    }
    if other_way {
        return Err(Error::Usage(
            "serve: --codex hands each task to Codex, --exec runs it and --tmux-pane types it: use one of them"
                .into(),
        ));
    }
    if let Some(s) = socket {
        if s.trim().is_empty() {
            return Err(Error::Usage(
                "serve: --codex-socket is empty: give the path of Codex's app-server socket".into(),
            ));
        }
        return Ok(Some(PathBuf::from(s)));
    }
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let found =
        instance::codex_default_socket(var("CODEX_HOME").as_deref(), var("HOME").as_deref());
    found.map(Some).ok_or_else(|| {
        Error::Env(
            "serve --codex: neither CODEX_HOME nor HOME is set, so Codex's app-server socket is unknown: give --codex-socket PATH".into(),
        )
    })
}

/// `--operator USER`...: the uids of the accounts named, each once; the
/// instance's own account is refused, as it would make nobody the agent.
fn operators(args: &Args) -> Result<Vec<u32>> {
    let mut uids = Vec::new();
    for key in args.values("operator") {
        let shown = crate::text::sanitize::escape(&key).into_owned();
        let account = crate::base::accounts::find(&key)
            .map_err(|e| Error::Usage(format!("serve: --operator {shown}: {e}")))?;
        if account.uid == crate::sys::euid() {
            return Err(Error::Usage(format!(
                "serve: --operator {shown}: that is the account this instance runs as (uid {}); name the operators' own account, and run the agent under another",
                account.uid
            )));
        }
        if !uids.contains(&account.uid) {
            uids.push(account.uid);
        }
    }
    Ok(uids)
}

/// The globs of `--accept-from` or `--deny-from` (`long`); an empty one
/// is a slip (an unset shell variable), never a glob that matches nothing.
fn globs(args: &Args, long: &str) -> Result<Vec<String>> {
    let v = args.values(long);
    if v.iter().any(|g| g.trim().is_empty()) {
        return Err(Error::Usage(format!(
            "serve: --{long} is empty: give a glob of sender names, such as 'alice*'"
        )));
    }
    Ok(v)
}
