//! `baton doctor`: one line for each check, `ok`, `warn` or `fail`
//! (`registry::health` judges the directories, discovery's findings and
//! the stopped spools; the workers judge a pane and Codex's socket); exit
//! 0 when nothing failed, 2 otherwise. With `--via` or `--hosts` it runs
//! on each host instead (`hosts::elsewhere`).

use super::Parsed;
use super::args::Args;
use super::target;
use crate::base::config::Config;
use crate::base::error::{ExitCode, Result};
use crate::registry::health::{self, Finding, Level};
use crate::registry::{self, Peer, Wire};
use crate::text::sanitize::escape;
use crate::wire::Call;
use crate::wire::answer::ControlStatus;
use crate::wire::request::NoParams;
use std::path::Path;

/// `baton doctor [--json]`.
pub struct Doctor {
    json: bool,
}

impl Parsed for Doctor {
    fn parse(args: &Args) -> Result<Doctor> {
        super::at_most(args, "doctor", 0)?;
        Ok(Doctor {
            json: args.flag("json"),
        })
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let found = findings(config);
        let width = found.iter().map(|f| f.check.len()).max().unwrap_or(0);
        let text: String = (found.iter())
            .map(|f| {
                format!(
                    "{:<4}  {:<width$}  {}\n",
                    f.result.as_str(),
                    f.check,
                    f.detail
                )
            })
            .collect();
        super::answer(self.json, &found, &text)?;
        let failed = found.iter().filter(|f| f.result == Level::Fail).count();
        if failed == 0 {
            return Ok(ExitCode::Ok);
        }
        // Said on stderr too: what `--via` shows of a host's doctor.
        let checks = if failed == 1 { "check" } else { "checks" };
        eprintln!("baton: doctor: {failed} {checks} failed");
        Ok(ExitCode::Usage)
    }
}

/// Every check of this host, in order: the directories, discovery, each
/// live instance's needs, the stopped spools, the tools of the command
/// line.
fn findings(config: &Config) -> Vec<Finding> {
    let (dir, source) = registry::chosen_dir(config);
    let reg = health::registry_dir(&dir, source);
    let usable = reg.result != Level::Fail;
    let mut out = vec![reg, health::state_dir()];
    // An unsafe registry is not read, and without it no spool is known
    // to be a stopped name's; one not made yet has no instance.
    let mut live = Vec::new();
    if let Some(dir) = std::fs::canonicalize(&dir).ok().filter(|_| usable) {
        let found = registry::discover(&registry::scan_dirs(&dir), None, config.io_timeout);
        out.extend(health::discovered(&found));
        for peer in found.peers.iter().filter(|p| !p.unresponsive()) {
            out.extend(instance(config, peer));
        }
        live = found.peers;
    }
    if usable {
        for (spool, held) in health::stopped_spools(&live) {
            out.push(health::stopped_spool(&spool, &held));
            let ids = health::interrupted_ids(&spool.dir);
            let stopped = health::interrupted(&spool.name, held.interrupted, &ids, true);
            out.extend(stopped);
        }
    }
    out.push(ssh());
    out
}

/// What a live instance that answered says it needs, judged: its
/// interrupted tasks, its pane, Codex's socket.
fn instance(config: &Config, peer: &Peer) -> Vec<Finding> {
    if peer.wire == Wire::Zcoder {
        return Vec::new();
    }
    let status = target::call::<ControlStatus>(config, peer, Call::ControlStatus, NoParams {});
    let s = match status {
        Ok((_, s)) => s,
        Err(e) => {
            let detail = format!("{peer} answered its ping, not control/status: {e}");
            return vec![Finding::new("status", Level::Fail, detail)];
        }
    };
    let mut out = Vec::new();
    if s.queue.interrupted > 0 {
        let ids = health::interrupted_ids(Path::new(&s.spool));
        out.extend(health::interrupted(
            &s.name,
            s.queue.interrupted,
            &ids,
            false,
        ));
    }
    if let Some(pane) = &s.tmux_pane {
        out.push(pane_check(peer, pane));
    }
    if let Some(c) = &s.codex {
        let socket = escape(&c.socket);
        let detail = match (
            crate::workers::codex::reachable(Path::new(&c.socket)),
            c.connected,
        ) {
            (Err(why), _) => (
                Level::Fail,
                format!("{peer}: Codex's socket {socket}: {why}"),
            ),
            (Ok(()), true) => (
                Level::Ok,
                format!("{peer}: Codex's socket {socket} takes connections; connected"),
            ),
            (Ok(()), false) => (
                Level::Warn,
                format!(
                    "{peer}: Codex's socket {socket} takes connections, but the instance is not connected: {}",
                    escape(c.reason.as_deref().unwrap_or("not asked yet"))
                ),
            ),
        };
        out.push(Finding::new("codex", detail.0, detail.1));
    }
    out
}

/// `serve --tmux-pane`: tmux on `PATH`, and the pane there (as this
/// process's tmux server sees it: `TMUX`, `TMUX_TMPDIR`).
fn pane_check(peer: &Peer, pane: &str) -> Finding {
    let shown = escape(pane);
    if health::on_path("tmux").is_none() {
        let detail = format!("{peer} types into pane {shown}, but tmux is not on PATH");
        return Finding::new("tmux", Level::Fail, detail);
    }
    let (level, detail) = match crate::workers::tmux::check_pane(pane) {
        Err(why) => (
            Level::Fail,
            format!("{peer}: pane {shown} is not there: {}", escape(&why)),
        ),
        Ok(Some(why)) => (
            Level::Warn,
            format!("{peer}: pane {shown} takes no task now: {}", escape(&why)),
        ),
        Ok(None) => (Level::Ok, format!("{peer}: pane {shown} is there")),
    };
    Finding::new("tmux", level, detail)
}

/// `ssh`, which `--via 'ssh HOST'` and `--hosts` run.
fn ssh() -> Finding {
    match health::on_path("ssh") {
        Some(p) => Finding::new(
            "ssh",
            Level::Ok,
            format!(
                "{}, for --via 'ssh HOST' and --hosts",
                escape(&p.display().to_string())
            ),
        ),
        None => Finding::new(
            "ssh",
            Level::Warn,
            "ssh is not on PATH: --via 'ssh HOST' and --hosts cannot reach other hosts",
        ),
    }
}
