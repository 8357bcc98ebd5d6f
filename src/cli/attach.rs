//! `baton attach`: the interactive view on a running instance.

use super::args::Args;
use super::target;
use crate::config::Config;
use crate::error::{ExitCode, Result};
use std::path::PathBuf;

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "attach", 1)?;
    let peer = target::resolve(config, args.positional.first().map(String::as_str))?;
    // A zcoder peer has no view to attach to.
    target::connect(config, &peer)?;
    crate::tui::attach(
        PathBuf::from(&peer.manifest.socket),
        peer.manifest.instance_id.clone(),
        config,
    )?;
    Ok(ExitCode::Ok)
}
