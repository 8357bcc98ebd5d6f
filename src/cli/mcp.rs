//! `baton mcp`: an MCP server over stdio backed by a pull-mode instance.

use super::args::Args;
use crate::base::config::Config;
use crate::base::error::{ExitCode, Result};
use crate::mcp::{self, McpOptions};

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "mcp", 0)?;
    let profile = super::args::name_and_profile(args, "mcp")?;
    mcp::run(
        McpOptions {
            name: args.value("name").map(str::to_string),
            profile: profile.to_string(),
        },
        config.clone(),
    )?;
    Ok(ExitCode::Ok)
}
