//! `baton attach`: the interactive view on a running instance; `baton
//! -a`/`--attach`: on the one serving this directory; and bare `baton`'s
//! offer to attach when this directory is already served.

use super::args::{Args, Opt, switch};
use super::serve::Serve;
use super::target;
use super::{Parsed, at_most};
use crate::base::config::{Config, Relay};
use crate::base::error::{Error, ExitCode, Result};
use crate::registry::{self, Peer, Wire};
use crate::text::sanitize::escape;
use std::path::PathBuf;

/// `baton -a`, `baton --attach`.
pub const ATTACH: Opt = switch(
    "attach",
    "open the view on the instance serving this directory instead of starting one",
)
.alias('a');

/// `baton attach [TARGET]`.
pub struct Attach(Option<String>);

impl Parsed for Attach {
    fn parse(args: &Args) -> Result<Attach> {
        at_most(args, "attach", 1)?;
        Ok(Attach(args.positional.first().cloned()))
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        view(config, &target::resolve(config, self.0.as_deref())?)
    }
}

/// `baton [serve options]` and `baton -a|--attach [--name NAME]
/// [--workspace DIR]`: the instance for this directory, or the view on
/// the one that serves it.
pub struct Bare {
    name: Option<String>,
    workspace: Option<PathBuf>,
    /// Serve's options (none with `--attach`), which count only once no
    /// instance already serves this directory.
    serve: Option<Result<Serve>>,
}

impl Parsed for Bare {
    fn parse(args: &Args) -> Result<Bare> {
        let attach = args.flag("attach");
        if attach {
            if let Some(o) = args
                .options_given()
                .find(|o| !matches!(*o, "attach" | "name" | "workspace"))
            {
                return Err(Error::Usage(format!(
                    "--attach opens the view on a running instance: --{o} does not go with it (only --name and --workspace do)"
                )));
            }
            at_most(args, "baton --attach", 0)?;
        }
        Ok(Bare {
            name: args.value("name").map(str::to_string),
            workspace: args.value("workspace").map(PathBuf::from),
            serve: (!attach).then(|| Serve::parse(args)),
        })
    }

    /// `baton -a`: the view on the instance serving this directory; bare
    /// `baton` offers that too rather than start a second one.
    fn run(mut self, config: &Config) -> Result<ExitCode> {
        let Some(serve) = self.serve.take() else {
            return here_attach(&self, config);
        };
        if let Some(code) = offer(&self, config)? {
            return Ok(code);
        }
        serve?.interactive(config)
    }
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
fn here(bare: &Bare, config: &Config) -> Result<(PathBuf, String, Vec<Peer>)> {
    let ws = crate::instance::resolve_workspace(bare.workspace.as_deref())?;
    let name = (bare.name.clone()).unwrap_or_else(|| registry::default_name(&ws));
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

/// `baton -a`: the instance with the name bare `baton` would use (`--name`
/// or the directory's), else, without `--name`, the only instance serving
/// this directory.
fn here_attach(bare: &Bare, config: &Config) -> Result<ExitCode> {
    let (ws, name, peers) = here(bare, config)?;
    let exact: Vec<&Peer> = peers.iter().filter(|p| p.manifest.name == name).collect();
    let pick: Vec<&Peer> = match (exact.len(), &bare.name) {
        (0, None) => peers.iter().collect(),
        _ => exact,
    };
    match pick.as_slice() {
        [one] => view(config, one),
        [] => Err(Error::NoTarget(format!(
            "no instance {}serves {}: 'baton' starts one, 'baton attach TARGET' attaches to another",
            (bare.name.as_deref())
                .map(|n| format!("named {} ", escape(n)))
                .unwrap_or_default(),
            escape(&ws.display().to_string())
        ))),
        several => Err(Error::NoTarget(format!(
            "several instances serve {}: {}; pick one with --name NAME or 'baton attach ID'",
            escape(&ws.display().to_string()),
            several
                .iter()
                .map(|p| target::described(p))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Bare `baton` where an instance of the same name already serves this
/// directory (so a second could not start): at a terminal, asks whether
/// to attach to it instead, before the screen is touched; elsewhere an
/// error that names it. None: nothing serves it, start one.
fn offer(bare: &Bare, config: &Config) -> Result<Option<ExitCode>> {
    // With the relay off, or a registry that cannot be read, `baton`
    // opens its local console as before; the view says why.
    if config.relay == Relay::Off {
        return Ok(None);
    }
    let Ok((ws, name, peers)) = here(bare, config) else {
        return Ok(None);
    };
    let Some(peer) = peers.iter().find(|p| p.manifest.name == name) else {
        return Ok(None);
    };
    let what = format!(
        "{} already serves {}",
        target::described(peer),
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
