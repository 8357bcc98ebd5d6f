//! `baton wake NAME`: connects to a name's wake socket (where systemd or
//! another supervisor listens for it), then waits until the agent answers.

use super::Parsed;
use super::args::Args;
use super::emit;
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};
use crate::registry;
use crate::relay;
use crate::text::sanitize::escape;
use std::time::{Duration, Instant};

/// `baton wake NAME`.
pub struct Wake(String);

impl Parsed for Wake {
    fn parse(args: &Args) -> Result<Wake> {
        super::at_most(args, "wake", 1)?;
        let Some(name) = args.positional.first() else {
            return Err(Error::Usage("wake: NAME is missing".into()));
        };
        super::args::check_name("wake:", name)?;
        Ok(Wake(name.clone()))
    }

    fn run(self, config: &Config) -> Result<ExitCode> {
        let name = &self.0;
        let dir = registry::ensure_dir(config)?;
        // An agent that already runs needs no waking, wake socket or not.
        if running(config, &dir, name) {
            return Ok(ExitCode::Ok);
        }
        if !relay::wake(&dir, name) {
            return Err(Error::NoTarget(format!(
                "{name} is not running and has no wake socket at {} that accepts connections (see docs/systemd.md)",
                relay::wake_socket(&dir, name).display()
            )));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !running(config, &dir, name) {
            if Instant::now() >= deadline {
                return Err(Error::Transport(format!(
                    "{name}'s wake socket accepted a connection, but no instance named {name} answered within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(ExitCode::Ok)
    }
}

/// Whether a live instance has this name; if so, says so.
fn running(config: &Config, dir: &std::path::Path, name: &str) -> bool {
    let found = registry::discover(&registry::scan_dirs(dir), None, config.io_timeout);
    let Some(p) = found.peers.iter().find(|p| p.manifest.name == name) else {
        return false;
    };
    emit(&format!(
        "{} is running: pid {}, instance {}\n",
        escape(name),
        p.manifest.pid,
        p.manifest.instance_id
    ));
    true
}
