//! `baton mcp`: an MCP server over stdio backed by a pull-mode instance.

use super::args::Args;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::mcp::{self, McpOptions};

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "mcp", 0)?;
    if let Some(name) = args.value("name") {
        super::args::check_name("mcp: --name", name)?;
    }
    let profile = args.value("profile").unwrap_or("coding");
    if !super::args::PROFILES.contains(&profile) {
        return Err(Error::Usage(format!(
            "mcp: --profile {}: use coding or sysadmin",
            crate::sanitize::escape(profile)
        )));
    }
    mcp::run(
        McpOptions {
            name: args.value("name").map(str::to_string),
            profile: profile.to_string(),
        },
        config.clone(),
    )?;
    Ok(ExitCode::Ok)
}
