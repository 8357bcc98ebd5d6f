//! `baton wake NAME`: connects to a name's wake socket (where systemd or
//! another supervisor listens for it), then waits until the agent answers.

use super::args::Args;
use super::emit;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::registry;
use crate::relay;
use crate::sanitize::escape;
use std::time::{Duration, Instant};

pub fn run(args: &Args, config: &Config) -> Result<ExitCode> {
    super::at_most(args, "wake", 1)?;
    let Some(name) = args.positional.first() else {
        return Err(Error::Usage("wake: NAME is missing".into()));
    };
    if !registry::valid_name(name) {
        return Err(Error::Usage(format!(
            "wake: {}: a name must match [A-Za-z0-9_.-]{{1,64}}",
            escape(name)
        )));
    }
    let dir = registry::ensure_dir(config)?;
    if !relay::wake(&dir, name) {
        return Err(Error::NoTarget(format!(
            "{name} has no wake socket at {} that accepts connections (see docs/systemd.md)",
            relay::wake_socket(&dir, name).display()
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = registry::discover(&registry::scan_dirs(&dir), None, config.io_timeout);
        if let Some(p) = found.peers.iter().find(|p| p.manifest.name == *name) {
            emit(&format!(
                "{name} is running: pid {}, instance {}\n",
                p.manifest.pid, p.manifest.instance_id
            ));
            return Ok(ExitCode::Ok);
        }
        if Instant::now() >= deadline {
            return Err(Error::Transport(format!(
                "{name}'s wake socket accepted a connection, but no instance named {name} answered within 10 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
