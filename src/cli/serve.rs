//! `baton serve`: run an instance in the foreground until a signal.

use super::args::Args;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::instance::{self, ServeOptions};
use crate::server::Policy;
use std::path::PathBuf;

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "serve", 0)?;
    let profile = args.value("profile").unwrap_or("coding");
    if !matches!(profile, "coding" | "sysadmin") {
        return Err(Error::Usage(format!(
            "serve: --profile {}: use coding or sysadmin",
            crate::sanitize::escape(profile)
        )));
    }
    let model = args.value("model").unwrap_or("").to_string();
    if model.len() > 256 || model.chars().any(crate::sanitize::is_unsafe) {
        return Err(Error::Usage(
            "serve: --model must be at most 256 bytes without control characters".into(),
        ));
    }
    let opts = ServeOptions {
        name: args.value("name").map(str::to_string),
        workspace: args.value("workspace").map(PathBuf::from),
        profile: profile.to_string(),
        model,
        paused: args.flag("paused"),
        ephemeral_spool: args.flag("ephemeral-spool"),
        policy: Policy {
            accept_from: args.values("accept-from"),
            deny_from: args.values("deny-from"),
        },
    };
    instance::serve(opts, config.clone())?;
    Ok(ExitCode::Ok)
}
