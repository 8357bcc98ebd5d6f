//! `baton stop NAME` ends a running instance (SIGTERM, after checking that
//! the pid its manifest names is that instance); `baton forget NAME`
//! removes a stopped name's spool (`spool::forget`, under the spool's
//! lock).

use super::Parsed;
use super::args::Args;
use super::{emit, target};
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::registry;
use crate::registry::lookup::{self, KnownSpool, Stopped};
use crate::spool::{self, Holdings, Removal};
use crate::sys;
use crate::text::sanitize::escape;
use crate::wire::Call;
use crate::wire::answer::ControlStatus;
use crate::wire::request::NoParams;
use std::fs;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `stop` waits for the instance to exit, without `--timeout`.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `baton stop NAME [--timeout SECONDS]`.
pub struct Stop {
    name: String,
    wait: Duration,
}

impl Parsed for Stop {
    fn parse(args: &Args) -> Result<Stop> {
        super::at_most(args, "stop", 1)?;
        let Some(name) = args.positional.first().cloned() else {
            return Err(Error::Usage(
                "stop: NAME is missing: name the instance to stop (its name or id)".into(),
            ));
        };
        let wait = args.seconds("stop", "timeout")?.unwrap_or(STOP_WAIT);
        Ok(Stop { name, wait })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let (name, wait) = (&self.name, self.wait);
        let peer = match target::resolve_or_stopped(config, Some(name))? {
            target::Resolved::Live(peer) => *peer,
            // Nothing to signal: exit 3, as for a name no live instance has.
            target::Resolved::Stopped(spool) => {
                return Err(Error::NoTarget(format!(
                    "stop: {}: nothing to stop",
                    target::stopped_holding(&spool)
                )));
            }
        };
        let (_, r): (_, ControlStatus) =
            target::call(config, &peer, Call::ControlStatus, NoParams {})?;
        let Some(pid) = peer.verified_pid(&r.instance_id, r.pid) else {
            let m = &peer.manifest;
            return Err(Error::NoTarget(format!(
                "stop: {}'s manifest names pid {} and instance {}, but its socket answers as {} pid {}: not signalling",
                escape(&m.name),
                m.pid,
                m.instance_id,
                escape(&serde_json::Value::String(r.instance_id.clone()).to_string()),
                r.pid
            )));
        };
        // The pid its manifest names, which its socket confirmed.
        let who = target::described(&peer);
        if let Err(e) = sys::signal(pid, sys::SIGTERM) {
            if sys::pid_status(pid) != sys::PidStatus::Gone {
                return Err(Error::Env(format!("stop: cannot signal {who}: {e}")));
            }
            return super::shown(&format!("{who} had already exited\n"));
        }
        let deadline = Instant::now() + wait;
        while !peer.exited() {
            if Instant::now() >= deadline {
                return Err(Error::Transport(format!(
                    "stop: sent SIGTERM to {who}, which has not exited after {} s (a turn may still be ending); see 'baton status {}'",
                    wait.as_secs_f64(),
                    peer.manifest.instance_id
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        super::shown(&format!("stopped {who}\n"))
    }
}

/// `baton forget NAME [--workspace DIR] [--yes]`.
pub struct Forget {
    name: String,
    workspace: Option<String>,
    yes: bool,
}

impl Parsed for Forget {
    fn parse(args: &Args) -> Result<Forget> {
        super::at_most(args, "forget", 1)?;
        let Some(name) = args.positional.first().cloned() else {
            return Err(Error::Usage(
                "forget: NAME is missing: name the stopped agent whose spool to remove".into(),
            ));
        };
        super::args::check_name("forget:", &name)?;
        let workspace = args.value("workspace").map(str::to_string);
        let yes = args.flag("yes");
        Ok(Forget {
            name,
            workspace,
            yes,
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let spool = stopped_spool(self.workspace.as_deref(), config, &self.name)?;
        let held = Holdings::read(&spool.dir)?;
        emit(&format!(
            "{} (workspace {}) holds {}\nspool: {}\n",
            escape(&spool.name),
            escape(&spool.workspace),
            held,
            escape(&spool.dir.display().to_string())
        ));
        if !self.yes && !confirm(&spool)? {
            eprintln!("baton: nothing was removed");
            return Ok(ExitCode::Refused);
        }
        crate::base::accounts::write_as_target()?;
        let why = match spool::forget(&spool.dir, &held)? {
            Removal::Removed => {
                return super::shown(&format!(
                    "forgot {}: its spool is removed\n",
                    escape(&spool.name)
                ));
            }
            Removal::InUse => {
                "is in use (its agent is starting or running, or a sender is storing a task): nothing was removed; try again"
            }
            Removal::Changed => "changed since it was shown: nothing was removed; run forget again",
        };
        Err(Error::Env(format!(
            "forget: {}'s spool {why}",
            escape(&spool.name)
        )))
    }
}

/// The one stopped spool of this name (and `--workspace`, if given).
fn stopped_spool(workspace: Option<&str>, config: &Config, name: &str) -> Result<KnownSpool> {
    let canonical = |w: &str| match fs::canonicalize(w) {
        Ok(path) => Ok(path.display().to_string()),
        Err(e) => Err(Error::io("find workspace", Path::new(w), e)),
    };
    let workspace = workspace.map(canonical).transpose()?;
    let dirs = registry::scan_dirs(&registry::ensure_dir(config)?);
    let spools = match lookup::stopped(&dirs, name, workspace.as_deref(), config.io_timeout) {
        Stopped::One(spool) => return Ok(spool),
        // A running agent's spool is never removed.
        Stopped::Running(p) => {
            return Err(Error::Env(format!(
                "forget: {} is running (pid {}, instance {}): stop it first with 'baton stop {}'",
                escape(name),
                p.manifest.pid,
                p.manifest.instance_id,
                p.manifest.instance_id
            )));
        }
        Stopped::None => {
            return Err(Error::NoTarget(format!(
                "forget: no spool has the name {}{}; 'baton list --offline' shows the names baton knows",
                escape(name),
                workspace
                    .map(|w| format!(" and the workspace {}", escape(&w)))
                    .unwrap_or_default()
            )));
        }
        Stopped::Several(spools) => spools,
    };
    let rows: Vec<[String; 4]> = (spools.iter())
        .map(|s| lookup::candidate(&s.name, None, &s.workspace, ""))
        .collect();
    Err(Error::NoTarget(format!(
        "forget: several spools have the name {}: pick one with --workspace DIR; {}",
        escape(name),
        lookup::candidate_list(&rows)
    )))
}

/// Asks on the terminal; refuses without one (scripts pass `--yes`).
fn confirm(spool: &KnownSpool) -> Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::Usage(format!(
            "forget: standard input is not a terminal, so nobody can confirm: add --yes to remove {}'s spool",
            escape(&spool.name)
        )));
    }
    let question = format!(
        "baton: remove {}'s spool and everything in it? [y/N] ",
        escape(&spool.name)
    );
    super::yes(&question).map_err(|e| Error::io("read", Path::new("<stdin>"), e))
}
