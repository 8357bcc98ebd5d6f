//! `baton attach`: the interactive view on a running instance; `baton
//! -a`/`--attach`: on the one serving this directory; and bare `baton`'s
//! offer to attach when this directory is already served.

use super::args::{Args, Opt, switch};
use super::target;
use crate::base::config::{Config, Relay};
use crate::base::error::{Error, ExitCode, Result};
use crate::registry::{self, Peer, Wire};
use crate::text::sanitize::escape;
use std::path::{Path, PathBuf};

/// `baton -a`, `baton --attach`.
pub const ATTACH: Opt = switch(
    "attach",
    "open the view on the instance serving this directory instead of starting one",
)
.alias('a');

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "attach", 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    view(config, &peer)
}

/// Opens the view on `peer`.
fn view(config: &Config, peer: &Peer) -> Result<ExitCode> {
    // A zcoder peer has no view to attach to.
    target::connect(config, peer)?;
    crate::tui::attach(
        PathBuf::from(&peer.manifest.socket),
        peer.manifest.instance_id.clone(),
        config,
    )?;
    Ok(ExitCode::Ok)
}

/// The workspace and name bare `baton` would serve, and the live
/// instances (baton's own wire) serving that workspace.
fn here(args: &Args, config: &Config) -> Result<(PathBuf, String, Vec<Peer>)> {
    let ws = crate::instance::resolve_workspace(args.value("workspace").map(Path::new))?;
    let name = (args.value("name")).map_or_else(|| registry::default_name(&ws), str::to_string);
    let dir = registry::ensure_dir(config)?;
    let want = ws.display().to_string();
    // Only the manifests of this workspace are pinged.
    let found =
        registry::discover_matching(&registry::scan_dirs(&dir), None, config.io_timeout, &|m| {
            m.workspace == want
        });
    let peers = found
        .peers
        .into_iter()
        .filter(|p| p.wire == Wire::Jsonrpc && p.manifest.workspace == want)
        .collect();
    Ok((ws, name, peers))
}

fn describe(p: &Peer) -> String {
    format!(
        "{} ({}, pid {})",
        escape(&p.manifest.name),
        p.manifest.instance_id,
        p.manifest.pid
    )
}

/// `baton -a`: the instance with the name bare `baton` would use (`--name`
/// or the directory's), else, without `--name`, the only instance serving
/// this directory.
pub fn here_attach(args: &Args, config: &Config) -> Result<ExitCode> {
    if let Some(o) = args
        .options_given()
        .find(|o| !matches!(*o, "attach" | "name" | "workspace"))
    {
        return Err(Error::Usage(format!(
            "--attach opens the view on a running instance: --{o} does not go with it (only --name and --workspace do)"
        )));
    }
    super::at_most(args, "baton --attach", 0)?;
    let (ws, name, peers) = here(args, config)?;
    let exact: Vec<&Peer> = peers.iter().filter(|p| p.manifest.name == name).collect();
    let pick: Vec<&Peer> = match (exact.len(), args.value("name")) {
        (0, None) => peers.iter().collect(),
        _ => exact,
    };
    match pick.as_slice() {
        [one] => view(config, one),
        [] => Err(Error::NoTarget(format!(
            "no instance {}serves {}: 'baton' starts one, 'baton attach TARGET' attaches to another",
            args.value("name")
                .map(|n| format!("named {} ", escape(n)))
                .unwrap_or_default(),
            escape(&ws.display().to_string())
        ))),
        several => Err(Error::NoTarget(format!(
            "several instances serve {}: {}; pick one with --name NAME or 'baton attach ID'",
            escape(&ws.display().to_string()),
            several
                .iter()
                .map(|p| describe(p))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Bare `baton` where an instance of the same name already serves this
/// directory (so a second could not start): at a terminal, asks whether
/// to attach to it instead, before the screen is touched; elsewhere an
/// error that names it. None: nothing serves it, start one.
pub fn offer(args: &Args, config: &Config) -> Result<Option<ExitCode>> {
    // With the relay off, or a registry that cannot be read, `baton`
    // opens its local console as before; the view says why.
    if config.relay == Relay::Off {
        return Ok(None);
    }
    let Ok((ws, name, peers)) = here(args, config) else {
        return Ok(None);
    };
    let Some(peer) = peers.iter().find(|p| p.manifest.name == name) else {
        return Ok(None);
    };
    let what = format!(
        "{} already serves {}",
        describe(peer),
        escape(&ws.display().to_string())
    );
    if !termion::is_tty(&std::io::stdout()) || !termion::is_tty(&std::io::stdin()) {
        return Err(Error::Env(format!(
            "{what}: 'baton -a' attaches to it; 'baton --name OTHER' starts another instance here"
        )));
    }
    if let Some(why) = crate::tui::term::check_term() {
        return Err(Error::Env(format!("{what}, and {why}")));
    }
    if super::yes(&format!("baton: {what}. Attach to it? [y/n] ")).unwrap_or(false) {
        return view(config, peer).map(Some);
    }
    eprintln!("baton: not attached; 'baton -a' attaches to it later");
    Ok(Some(ExitCode::Ok))
}
