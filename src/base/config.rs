//! `BATON_*` configuration (baton(1), ENVIRONMENT): read once, validated, and failing
//! closed with a message that names the variable and its allowed range. The
//! one reader of every `BATON_*` variable of our own environment, including
//! the turn's `BATON_SOCKET` and `BATON_TURN`, which say where this process
//! runs rather than how.

use crate::base::error::{Error, Result};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

spelled! {
    /// `BATON_RELAY`: relaying on, off, or paused at start.
    pub enum Relay ("relay") {
        On = "on",
        Off = "off",
        Paused = "paused",
    }
}

spelled! {
    /// `--profile` of `serve` and `mcp`: what the agent does, and so
    /// whether its tasks wait for an operator by default.
    #[derive(Default)]
    pub enum Profile ("profile") {
        #[default]
        Coding = "coding",
        Sysadmin = "sysadmin",
    }
}

/// The default body limit: 1 MiB. It is also what a manifest without
/// `max_message_bytes` (an earlier baton's) is taken to accept: an earlier
/// baton accepted no more (docs/decisions.md, "A manifest's body limit").
pub const DEFAULT_MESSAGE_BYTES: usize = 1_048_576;
/// The highest `BATON_MAX_MESSAGE_BYTES` allowed: 16 MiB.
pub const MAX_MESSAGE_BYTES_CEILING: u64 = 16 * 1024 * 1024;
/// zcoder's own limit (`ZCODER_RELAY_MAX_MESSAGE_CHARS`, 16000 characters),
/// checked as bytes, which are never fewer than characters.
pub const ZCODER_MESSAGE_BYTES: usize = 16000;

/// What a request line holds besides its body, at most: the method, the
/// ids, the sender as it names itself.
pub const LINE_OVERHEAD: usize = 64 * 1024;

/// The line bound that carries a body of `body_limit` bytes however it is
/// escaped: JSON spells a control character in six bytes (`\u0001`), so
/// six times the body, and the rest of the request (docs/decisions.md,
/// "The line bound follows the body limit"). `BATON_MAX_BYTES`' default.
pub const fn line_bound(body_limit: usize) -> usize {
    body_limit * 6 + LINE_OVERHEAD
}

/// The highest `BATON_MAX_BYTES` allowed: the bound a body at its ceiling
/// needs.
pub const MAX_BYTES_CEILING: u64 = line_bound(MAX_MESSAGE_BYTES_CEILING as usize) as u64;

/// The refusal of a body over the most any instance accepts: its size
/// (`size` bytes, which may read "more than N" when it was not all read).
pub fn body_too_large(size: &str) -> String {
    format!(
        "the message is {size} bytes, over the most any instance accepts \
         ({MAX_MESSAGE_BYTES_CEILING} bytes, the highest BATON_MAX_MESSAGE_BYTES); \
         zcoder peers keep their limit of 16,000 bytes"
    )
}

/// The refusal of a body over its receiver's limit, before anything is
/// sent: the size, the receiver (`name`, escaped by the caller) and its
/// limit, and whose limit it is (`whose`: the variable at that instance,
/// or zcoder's own).
pub fn over_receiver_limit(size: usize, name: &str, limit: usize, whose: &str) -> String {
    format!("the message is {size} bytes; {name} accepts at most {limit} ({whose})")
}

/// The variables an instance sets for its handler (docs/protocol.md, Exec
/// handlers), spelled once: the handler's environment is written with
/// them, and a process's ancestry is read for them (`access`,
/// `spool::handler`).
pub const BATON_SOCKET: &str = "BATON_SOCKET";
pub const BATON_TURN: &str = "BATON_TURN";

/// `$BATON_SOCKET`: the socket of the instance this process runs inside
/// (a handler's turn, or a script pointed at it). Empty counts as unset,
/// as for every `BATON_*` variable (docs/decisions.md).
pub fn baton_socket() -> Option<PathBuf> {
    path_from(std::env::var_os(BATON_SOCKET))
}

/// A path variable's value: empty counts as unset.
fn path_from(value: Option<OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// `$BATON_TURN`: the token of the turn this process runs in. Empty, or
/// not UTF-8 (no token an instance issues is), counts as unset.
pub fn baton_turn() -> Option<String> {
    turn_from(std::env::var_os(BATON_TURN))
}

fn turn_from(value: Option<OsString>) -> Option<String> {
    value?.into_string().ok().filter(|t| !t.is_empty())
}

/// `$BATON_FAILPOINT`, the fail points to arm (`failpoint.rs`); empty when
/// unset or not UTF-8, which arms none.
#[cfg(feature = "failpoints")]
pub fn baton_failpoint() -> String {
    std::env::var("BATON_FAILPOINT").unwrap_or_default()
}

/// Limits and switches shared by every part of an instance and the CLI.
#[derive(Clone, Debug)]
pub struct Config {
    pub dir: Option<PathBuf>,
    pub relay: Relay,
    /// `BATON_MAX_BYTES`, the longest request line; unset, it follows the
    /// body limit (`line_bound`).
    pub max_bytes: usize,
    pub max_message_bytes: usize,
    pub max_queue: usize,
    pub max_inflight: usize,
    pub max_hops: u64,
    pub max_connections: usize,
    pub io_timeout: Duration,
    pub idle_timeout: Duration,
    pub fsync: bool,
    pub ttl: Option<Duration>,
    /// `BATON_REMOTE`: the command `--via` runs baton as on the other
    /// host, shell words inserted as given. None (unset): `--via` finds
    /// baton there with a login-free lookup (`relay::via::LOOKUP`).
    pub remote: Option<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            dir: None,
            relay: Relay::On,
            max_bytes: line_bound(DEFAULT_MESSAGE_BYTES),
            max_message_bytes: DEFAULT_MESSAGE_BYTES,
            max_queue: 16,
            max_inflight: 4,
            max_hops: 8,
            max_connections: 64,
            io_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(30),
            fsync: true,
            ttl: None,
            remote: None,
        }
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|name| std::env::var_os(name))
    }

    /// Reads configuration through `lookup`, so tests need not touch the
    /// process environment. An empty value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Config> {
        let get = |name: &str| -> Result<Option<String>> {
            let not_utf8 = |_| Error::Env(format!("{name} is not valid UTF-8"));
            let value = lookup(name).filter(|v| !v.is_empty());
            value.map(|v| v.into_string().map_err(not_utf8)).transpose()
        };
        let dir = path_from(lookup("BATON_DIR"));
        if let Some(p) = dir.as_ref().filter(|p| !p.is_absolute()) {
            let shown = p.display();
            return Err(Error::Env(format!(
                "BATON_DIR={shown} is not an absolute path"
            )));
        }
        let int_of = |name: &str, min, max| -> Result<Option<u64>> {
            get(name)?.map(|v| int(name, &v, min, max)).transpose()
        };
        let seconds_of = |name: &str, min, max| -> Result<Option<Duration>> {
            get(name)?.map(|v| seconds(name, &v, min, max)).transpose()
        };
        let size = |n: u64| n as usize;
        let d = Config::default();
        let max_message_bytes = int_of("BATON_MAX_MESSAGE_BYTES", 1, MAX_MESSAGE_BYTES_CEILING)?
            .map_or(d.max_message_bytes, size);
        // Read in the order of the fields: the first wrong one is named
        // (but for the body limit, which the line bound's default follows).
        Ok(Config {
            dir,
            relay: match get("BATON_RELAY")? {
                Some(v) => (v.parse()).map_err(|_| bad("BATON_RELAY", &v, "on, off or paused"))?,
                None => d.relay,
            },
            max_bytes: int_of("BATON_MAX_BYTES", 1024, MAX_BYTES_CEILING)?
                .map_or(line_bound(max_message_bytes), size),
            max_message_bytes,
            max_queue: int_of("BATON_MAX_QUEUE", 1, 100_000)?.map_or(d.max_queue, size),
            max_inflight: int_of("BATON_MAX_INFLIGHT", 0, 100_000)?.map_or(d.max_inflight, size),
            max_hops: int_of("BATON_MAX_HOPS", 0, 1000)?.unwrap_or(d.max_hops),
            max_connections: (int_of("BATON_MAX_CONNECTIONS", 1, 4096)?)
                .map_or(d.max_connections, size),
            io_timeout: seconds_of("BATON_IO_TIMEOUT", 0.1, 60.0)?.unwrap_or(d.io_timeout),
            idle_timeout: seconds_of("BATON_IDLE_TIMEOUT", 1.0, 86400.0)?.unwrap_or(d.idle_timeout),
            fsync: match get("BATON_FSYNC")?.as_deref() {
                None => d.fsync,
                Some("on") => true,
                Some("off") => false,
                Some(v) => return Err(bad("BATON_FSYNC", v, "on or off")),
            },
            ttl: int_of("BATON_TTL", 1, u64::MAX / 2)?.map(Duration::from_secs),
            remote: get("BATON_REMOTE")?.map(remote).transpose()?,
        })
    }
}

/// `BATON_REMOTE`: one line of shell words for the remote shell (a
/// newline or a NUL would end or break the command ssh hands it).
fn remote(v: String) -> Result<String> {
    if v.contains(['\n', '\r', '\0']) || v.trim().is_empty() {
        let allowed = "one line naming the remote baton (e.g. /opt/baton/bin/baton)";
        return Err(bad("BATON_REMOTE", &v, allowed));
    }
    Ok(v)
}

fn bad(name: &str, value: &str, allowed: &str) -> Error {
    Error::Env(format!(
        "{name}={} is not allowed: use {allowed}",
        crate::text::sanitize::escape(value)
    ))
}

fn int(name: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let range = if max >= u64::MAX / 2 {
        format!("an integer of {min} or more")
    } else {
        format!("an integer from {min} to {max}")
    };
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) && value.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(bad(name, value, &range)),
    }
}

fn seconds(name: &str, value: &str, min: f64, max: f64) -> Result<Duration> {
    let allowed = format!("seconds from {min} to {max}");
    let ok_chars = value.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    match value.parse::<f64>() {
        Ok(s) if ok_chars && s.is_finite() && (min..=max).contains(&s) => {
            Ok(Duration::from_secs_f64(s))
        }
        _ => Err(bad(name, value, &allowed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config> {
        let value = |name: &str| pairs.iter().find(|(k, _)| *k == name);
        Config::from_lookup(|name| value(name).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn defaults() {
        let c = with(&[]).unwrap();
        assert_eq!(c.max_message_bytes, 1_048_576);
        // The line bound carries a 1 MiB body of control characters.
        assert_eq!(c.max_bytes, 6 * 1_048_576 + 65536);
        assert_eq!(c.max_queue, 16);
        assert_eq!(c.io_timeout, Duration::from_secs(2));
        assert!(c.fsync);
        assert_eq!(c.remote, None);
        let c = with(&[("BATON_REMOTE", "/opt/baton/bin/baton")]).unwrap();
        assert_eq!(c.remote.as_deref(), Some("/opt/baton/bin/baton"));
    }

    #[test]
    fn bounds_are_inclusive() {
        assert_eq!(
            with(&[("BATON_MAX_BYTES", "1024")]).unwrap().max_bytes,
            1024
        );
        let e = with(&[("BATON_MAX_BYTES", "1023")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "BATON_MAX_BYTES=1023 is not allowed: use an integer from 1024 to 100728832"
        );
        assert!(with(&[("BATON_MAX_INFLIGHT", "0")]).is_ok());
        assert!(with(&[("BATON_MAX_QUEUE", "0")]).is_err());
        assert!(with(&[("BATON_MAX_QUEUE", "+5")]).is_err());
        assert_eq!(
            with(&[("BATON_IO_TIMEOUT", "0.1")]).unwrap().io_timeout,
            Duration::from_millis(100)
        );
        assert!(with(&[("BATON_IO_TIMEOUT", "0.05")]).is_err());
        assert!(with(&[("BATON_IO_TIMEOUT", "inf")]).is_err());
        assert!(with(&[("BATON_IO_TIMEOUT", "1e1")]).is_err());
    }

    #[test]
    fn the_body_limit_error_names_the_ceiling() {
        let e = body_too_large("16777217");
        assert!(e.starts_with(
            "the message is 16777217 bytes, over the most any instance accepts (16777216 bytes, the highest BATON_MAX_MESSAGE_BYTES)"
        ), "{e}");
        assert!(
            e.contains("zcoder peers keep their limit of 16,000 bytes"),
            "{e}"
        );
        // The ceiling it names is the one the variable is checked against.
        let max = MAX_MESSAGE_BYTES_CEILING.to_string();
        assert!(with(&[("BATON_MAX_MESSAGE_BYTES", &max)]).is_ok());
        let over = (MAX_MESSAGE_BYTES_CEILING + 1).to_string();
        let e = with(&[("BATON_MAX_MESSAGE_BYTES", &over)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "BATON_MAX_MESSAGE_BYTES=16777217 is not allowed: use an integer from 1 to 16777216"
        );
    }

    #[test]
    fn the_line_bound_follows_the_body_limit_unless_set() {
        let c = with(&[("BATON_MAX_MESSAGE_BYTES", "100")]).unwrap();
        assert_eq!(c.max_bytes, 600 + LINE_OVERHEAD);
        let c = with(&[("BATON_MAX_MESSAGE_BYTES", "16777216")]).unwrap();
        assert_eq!(c.max_bytes as u64, MAX_BYTES_CEILING);
        // Set, it is what it says, even below what the body would need.
        let c = with(&[("BATON_MAX_BYTES", "4096")]).unwrap();
        assert_eq!((c.max_bytes, c.max_message_bytes), (4096, 1_048_576));
        let ceiling = MAX_BYTES_CEILING.to_string();
        assert!(with(&[("BATON_MAX_BYTES", &ceiling)]).is_ok());
        let over = (MAX_BYTES_CEILING + 1).to_string();
        assert!(with(&[("BATON_MAX_BYTES", &over)]).is_err());
    }

    #[test]
    fn an_empty_socket_or_turn_is_unset() {
        assert_eq!(path_from(Some("".into())), None);
        assert_eq!(path_from(None), None);
        assert_eq!(
            path_from(Some("/r/a-1.sock".into())),
            Some(PathBuf::from("/r/a-1.sock"))
        );
        assert_eq!(turn_from(Some("".into())), None);
        assert_eq!(turn_from(Some("t-1".into())), Some("t-1".to_string()));
        use std::os::unix::ffi::OsStringExt;
        assert_eq!(turn_from(Some(OsString::from_vec(vec![0xff]))), None);
    }

    #[test]
    fn words_and_paths() {
        assert!(with(&[("BATON_FSYNC", "yes")]).is_err());
        assert_eq!(
            with(&[("BATON_RELAY", "paused")]).unwrap().relay,
            Relay::Paused
        );
        let e = with(&[("BATON_DIR", "rel/dir")]).unwrap_err().to_string();
        assert_eq!(e, "BATON_DIR=rel/dir is not an absolute path");
        assert!(with(&[("BATON_DIR", "")]).unwrap().dir.is_none());
    }
}
