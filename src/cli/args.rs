//! A small argument parser: long options (`--name VALUE`, `--name=VALUE`),
//! switches, a few short aliases, `--` and positionals. Unknown options are
//! usage errors that name the option.

use crate::error::{Error, Result};
use std::ffi::OsString;

/// One option a command accepts.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    pub long: &'static str,
    pub short: Option<char>,
    pub takes_value: bool,
    pub help: &'static str,
}

pub const fn switch(long: &'static str, help: &'static str) -> Opt {
    Opt {
        long,
        short: None,
        takes_value: false,
        help,
    }
}

pub const fn value(long: &'static str, help: &'static str) -> Opt {
    Opt {
        long,
        short: None,
        takes_value: true,
        help,
    }
}

#[derive(Debug, Default)]
pub struct Args {
    pub positional: Vec<String>,
    given: Vec<(&'static str, Option<String>)>,
}

impl Args {
    pub fn flag(&self, long: &str) -> bool {
        self.given.iter().any(|(l, _)| *l == long)
    }

    /// The long names of the options given, in order.
    pub fn options_given(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.given.iter().map(|(l, _)| *l)
    }

    /// The last value given for an option.
    pub fn value(&self, long: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|(l, _)| *l == long)
            .and_then(|(_, v)| v.as_deref())
    }

    /// A duration option given in seconds (a plain decimal number above 0,
    /// as `--timeout 2.5`), or None when absent; `cmd` names the command
    /// in the usage error.
    pub fn seconds(&self, cmd: &str, long: &str) -> Result<Option<std::time::Duration>> {
        let Some(v) = self.value(long) else {
            return Ok(None);
        };
        match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 1e9 && !v.contains(['e', 'E']) => {
                Ok(Some(std::time::Duration::from_secs_f64(s)))
            }
            _ => Err(Error::Usage(format!(
                "{cmd}: --{long} {}: use a number of seconds above 0",
                crate::sanitize::escape(v)
            ))),
        }
    }

    /// Every value given for a repeatable option, in order.
    pub fn values(&self, long: &str) -> Vec<String> {
        self.given
            .iter()
            .filter(|(l, _)| *l == long)
            .filter_map(|(_, v)| v.clone())
            .collect()
    }
}

/// Parses `argv` (without the program and command names) against `opts`.
pub fn parse(cmd: &str, argv: &[OsString], opts: &[Opt]) -> Result<Args> {
    let mut args = Args::default();
    let mut it = argv.iter();
    let mut only_positional = false;
    while let Some(raw) = it.next() {
        let Some(arg) = raw.to_str() else {
            return Err(Error::Usage(format!(
                "{cmd}: argument {:?} is not valid UTF-8",
                raw
            )));
        };
        if only_positional || arg == "-" || !arg.starts_with('-') {
            args.positional.push(arg.to_string());
            continue;
        }
        if arg == "--" {
            only_positional = true;
            continue;
        }
        let (opt, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let opt = opts
                .iter()
                .find(|o| o.long == name)
                .ok_or_else(|| unknown(cmd, arg))?;
            (opt, inline)
        } else {
            let mut chars = arg[1..].chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return Err(unknown(cmd, arg));
            };
            let opt = opts
                .iter()
                .find(|o| o.short == Some(c))
                .ok_or_else(|| unknown(cmd, arg))?;
            (opt, None)
        };
        let value = if opt.takes_value {
            match inline {
                Some(v) => Some(v),
                None => match it.next().map(|v| v.to_str()) {
                    Some(Some(v)) => Some(v.to_string()),
                    Some(None) => {
                        return Err(Error::Usage(format!(
                            "{cmd}: the value of --{} is not valid UTF-8",
                            opt.long
                        )));
                    }
                    None => {
                        return Err(Error::Usage(format!("{cmd}: --{} needs a value", opt.long)));
                    }
                },
            }
        } else {
            if inline.is_some() {
                return Err(Error::Usage(format!(
                    "{cmd}: --{} takes no value",
                    opt.long
                )));
            }
            None
        };
        args.given.push((opt.long, value));
    }
    Ok(args)
}

fn unknown(cmd: &str, arg: &str) -> Error {
    Error::Usage(format!(
        "{cmd}: unknown option {} (see 'baton help {cmd}')",
        crate::sanitize::escape(arg)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[
        switch("json", ""),
        value("name", ""),
        Opt {
            long: "help",
            short: Some('h'),
            takes_value: false,
            help: "",
        },
    ];

    fn p(v: &[&str]) -> Result<Args> {
        let argv: Vec<OsString> = v.iter().map(OsString::from).collect();
        parse("t", &argv, OPTS)
    }

    #[test]
    fn forms() {
        let a = p(&[
            "x", "--json", "--name=a", "--name", "b", "-", "-h", "--", "--json",
        ])
        .unwrap();
        assert_eq!(a.positional, ["x", "-", "--json"]);
        assert!(a.flag("json"));
        assert!(a.flag("help"));
        assert_eq!(a.value("name"), Some("b"));
        assert_eq!(a.values("name"), ["a", "b"]);
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(
            p(&["--nope"]).unwrap_err().to_string(),
            "t: unknown option --nope (see 'baton help t')"
        );
        assert_eq!(
            p(&["--name"]).unwrap_err().to_string(),
            "t: --name needs a value"
        );
        assert_eq!(
            p(&["--json=1"]).unwrap_err().to_string(),
            "t: --json takes no value"
        );
    }
}
