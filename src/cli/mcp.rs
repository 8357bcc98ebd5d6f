//! `baton mcp`: an MCP server over stdio backed by a pull-mode instance.

use super::Parsed;
use super::args::Args;
use crate::base::config::Config;
use crate::base::error::{ExitCode, Result};
use crate::mcp::{self, McpOptions};

/// `baton mcp [--name NAME] [--profile coding|sysadmin]`.
pub struct Mcp(McpOptions);

impl Parsed for Mcp {
    fn parse(args: &Args) -> Result<Mcp> {
        super::at_most(args, "mcp", 0)?;
        let (name, profile) = super::args::name_and_profile(args, "mcp")?;
        let profile = profile.as_str().to_string();
        Ok(Mcp(McpOptions { name, profile }))
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        mcp::run(self.0, config.clone())?;
        Ok(ExitCode::Ok)
    }
}
