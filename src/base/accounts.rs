//! The system's accounts, as `--operator` and `--user` name them: a user
//! name or a numeric uid, looked up in `/etc/passwd`, then with `getent
//! passwd` (which asks NSS: LDAP, sssd) where it is not there; and the
//! account a client command acts for (`--user`), whose registry and
//! spools it reads and writes as that account's (docs/security.md).

use crate::base::error::{Error, Result};
use crate::sys;
pub use crate::sys::Account;
use std::sync::OnceLock;

/// `--user NAME`: set once, by the command line, before anything is read.
static TARGET: OnceLock<Account> = OnceLock::new();

/// Makes `who` the account whose instances this command acts on.
pub fn set_target(who: Account) {
    let _ = TARGET.set(who);
}

/// The account `--user` named, if it did.
pub fn target() -> Option<&'static Account> {
    TARGET.get()
}

/// Whose the registry, its sockets and the spools must be: the account
/// `--user` named, else ours.
pub fn owner() -> u32 {
    // Asked once: discovery reads every manifest of the registry.
    static EUID: OnceLock<u32> = OnceLock::new();
    target().map_or_else(|| *EUID.get_or_init(sys::euid), |a| a.uid)
}

/// Before writing into the spool of the account `--user` named (an
/// offline store, a cancel, a forget): root becomes that account for the
/// rest of the command, so that what it writes is the account's, never
/// root's; another account may not write there at all.
pub fn write_as_target() -> Result<()> {
    let Some(who) = target().filter(|a| a.uid != sys::euid()) else {
        return Ok(());
    };
    if sys::euid() != 0 {
        return Err(Error::Env(format!(
            "only {} or root may write into {}'s spools (the instance is stopped, so nothing else can take this)",
            who.name, who.name
        )));
    }
    sys::become_account(who)
        .map_err(|e| Error::Env(format!("cannot become {} (uid {}): {e}", who.name, who.uid)))
}

/// The account `key` names: a user name, or a uid in decimal.
pub fn find(key: &str) -> Result<Account> {
    let bad = |why: &str| Error::Usage(format!("no account {key:?}: {why}"));
    if key.is_empty() || key.contains([':', '\n', '\0']) {
        return Err(bad("not a user name or uid"));
    }
    let uid = key.parse::<u32>().ok();
    let matches = |a: &Account| match uid {
        Some(u) => a.uid == u,
        None => a.name == key,
    };
    let listed = |text: &str| text.lines().filter_map(parse).find(matches);
    let getent = || {
        let out = std::process::Command::new("getent")
            .args(["passwd", key])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        listed(&String::from_utf8_lossy(&out.stdout))
    };
    let local = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if let Some(a) = listed(&local).or_else(getent) {
        return Ok(a);
    }
    match uid {
        // A uid with no entry is still an account the kernel knows.
        Some(u) => Ok(Account {
            name: u.to_string(),
            uid: u,
            gid: u,
            home: "/".into(),
        }),
        None => Err(bad("not in the system's user database")),
    }
}

/// The name of the account `uid`, or the number when it has none.
pub fn name_of(uid: u32) -> String {
    find(&uid.to_string()).map_or_else(|_| uid.to_string(), |a| a.name)
}

/// One `passwd(5)` line: `name:x:uid:gid:gecos:home:shell`.
fn parse(line: &str) -> Option<Account> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 7 || f[0].is_empty() {
        return None;
    }
    Some(Account {
        name: f[0].to_string(),
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: f[5].into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_by_name_and_by_uid() {
        let by_name = find("root").unwrap();
        assert_eq!((by_name.uid, by_name.name.as_str()), (0, "root"));
        assert_eq!(find("0").unwrap(), by_name);
        assert_eq!(name_of(0), "root");
        let e = find("no-such-account-here").unwrap_err().to_string();
        assert!(e.contains("not in the system's user database"), "{e}");
        assert!(find("a:b").is_err());
    }

    #[test]
    fn a_passwd_line_is_read_field_by_field() {
        let a = parse("alice:x:1001:1002:Alice,,,:/home/alice:/bin/sh").unwrap();
        assert_eq!((a.uid, a.gid), (1001, 1002));
        assert_eq!(a.home, std::path::Path::new("/home/alice"));
        assert!(parse("broken:x:1").is_none());
    }
}
