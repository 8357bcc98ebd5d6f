//! `--user NAME`: a client command acts on the instances of another
//! account (docs/security.md, "Agents under their own account"). It reads
//! that account's registry, checked to be the account's and mode 0700,
//! and its spools. Root connects as root where an instance names root
//! with `serve --operator`, and otherwise becomes the account at once, so
//! that it is that account's operator as a process of its own would be;
//! whatever it writes into a spool is written as the account. Another
//! account that an instance names with `--operator` finds it through its
//! operators' socket (`registry::operators`).

use super::args::{Opt, value};
use crate::base::accounts;
use crate::base::config::Config;
use crate::base::error::Result;
use crate::sys;

pub const USER: Opt = value(
    "user",
    "act on the instances of this account (a user name or uid): as root, or as an account they name as their operator",
);

/// Makes the account `key` names the one this command acts on.
pub fn enter(key: &str, config: &Config) -> Result<()> {
    let who = accounts::find(key)?;
    if who.uid == sys::euid() {
        return Ok(());
    }
    accounts::set_target(who);
    if sys::euid() == 0 && !names_root(config) {
        accounts::write_as_target()?;
    }
    Ok(())
}

/// Whether an instance in the account's registry names root with
/// `--operator`: root then stays root, to connect as its operator.
fn names_root(config: &Config) -> bool {
    let Ok(path) = crate::registry::ensure_dir(config) else {
        return false;
    };
    // Every manifest, read and checked as discovery reads them.
    crate::registry::scan_dirs(&path)
        .iter()
        .flat_map(|dir| {
            let names = std::fs::read_dir(&dir.path).into_iter().flatten();
            names
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter_map(|p| crate::registry::read_manifest(dir, &p).ok())
                .collect::<Vec<_>>()
        })
        .any(|m| m.operators.contains(&0))
}
