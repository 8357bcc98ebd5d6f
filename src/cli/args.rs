//! A small argument parser: long options (`--name VALUE`, `--name=VALUE`),
//! switches, a few short aliases, `--` and positionals. Unknown options are
//! usage errors that name the option.

use crate::base::config::Profile;
use crate::base::error::{Error, Result};
use crate::wire::{Approve, Outcome, TaskMode};
use crate::workers::turn::Stdin;
use std::ffi::OsString;
use std::str::FromStr;

/// The fixed values an option takes, for its check and its completion,
/// as the enum it is read into spells them: `--profile` (serve, mcp),
/// `serve --approve` and `--stdin`, `send --mode` and `inbox complete
/// --outcome`.
pub fn choices(long: &str) -> Option<Vec<&'static str>> {
    fn all<T: Copy>(all: &[T], str: fn(T) -> &'static str) -> Vec<&'static str> {
        all.iter().map(|t| str(*t)).collect()
    }
    Some(match long {
        "profile" => all(Profile::ALL, Profile::as_str),
        "approve" => all(Approve::ALL, Approve::as_str),
        "stdin" => all(Stdin::ALL, Stdin::as_str),
        "mode" => all(TaskMode::ALL, TaskMode::as_str),
        "outcome" => (Outcome::ALL.iter())
            .filter(|o| o.completes())
            .map(|o| o.as_str())
            .collect(),
        _ => return None,
    })
}

/// The value of option `long` read as the enum `T` (one of
/// `choices(long)`), when given; another is a usage error of `cmd`.
pub fn choice<T: FromStr>(args: &Args, cmd: &str, long: &str) -> Result<Option<T>> {
    let Some(v) = args.value(long) else {
        return Ok(None);
    };
    v.parse().map(Some).map_err(|_| {
        let mut words = choices(long).unwrap_or_default();
        let last = words.pop().unwrap_or_default();
        let words = match words.is_empty() {
            true => last.to_string(),
            false => format!("{} or {last}", words.join(", ")),
        };
        Error::Usage(format!(
            "{cmd}: --{long} {}: use {words}",
            crate::text::sanitize::escape(v)
        ))
    })
}

/// The rule an instance name follows, as errors state it.
pub const NAME_RULE: &str = "a name is 1 to 64 of A-Z a-z 0-9 _ . - and not . or ..";

/// Checks a NAME argument (`--name`, `wake NAME`...) against the name
/// rules (`registry::valid_name`); `what` is how the error names it.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    if crate::registry::valid_name(name) {
        return Ok(());
    }
    let shown = if name.is_empty() {
        "(empty)".into()
    } else {
        crate::text::sanitize::escape(name).into_owned()
    };
    Err(Error::Usage(format!("{what} {shown}: {NAME_RULE}")))
}

/// `--name` and `--profile` of `cmd` (serve, mcp), checked: the profile
/// is `coding` when none is given.
pub fn name_and_profile(args: &Args, cmd: &str) -> Result<(Option<String>, Profile)> {
    let name = args.value("name").map(str::to_string);
    if let Some(name) = &name {
        check_name(&format!("{cmd}: --name"), name)?;
    }
    let profile = choice(args, cmd, "profile")?.unwrap_or_default();
    Ok((name, profile))
}

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
        takes_value: true,
        ..switch(long, help)
    }
}

impl Opt {
    /// The option with a one-letter alias too (`-n`).
    pub const fn alias(self, short: char) -> Opt {
        Opt {
            short: Some(short),
            ..self
        }
    }

    /// What `usage` calls the option's value: `SECONDS` in `[--timeout
    /// SECONDS]`, `N` in `-n N`, `coding|sysadmin`. The usage line is the
    /// one place a value is named; the option list, the man page and the
    /// completions say what it says. Empty for a switch, `VALUE` when
    /// usage does not spell the option with its value.
    pub fn value_name(&self, usage: &'static str) -> &'static str {
        if !self.takes_value {
            return "";
        }
        let spellings = std::iter::once(format!("--{} ", self.long))
            .chain(self.short.map(|c| format!("-{c} ")));
        for spelled in spellings {
            for (at, _) in usage.match_indices(&spelled) {
                let starts_a_word = usage[..at].ends_with(['[', ' ', '|']);
                let rest = &usage[at + spelled.len()..];
                let name = &rest[..rest.find([' ', ']', '\n']).unwrap_or(rest.len())];
                if starts_a_word && !name.is_empty() && !name.starts_with('-') {
                    return name;
                }
            }
        }
        "VALUE"
    }

    /// The option as an option list shows it: `-n, --lines N`.
    pub fn spelled(&self, usage: &'static str) -> String {
        let short = self.short.map(|c| format!("-{c}, ")).unwrap_or_default();
        let value = match self.value_name(usage) {
            "" => String::new(),
            name => format!(" {name}"),
        };
        format!("{short}--{}{value}", self.long)
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
                crate::text::sanitize::escape(v)
            ))),
        }
    }

    /// The options given, but those of `skip`, as words again (`--long`,
    /// then its value), in order.
    pub fn words_without(&self, skip: &[&str]) -> Vec<String> {
        let given = self.given.iter().filter(|(l, _)| !skip.contains(l));
        (given.flat_map(|(l, v)| std::iter::once(format!("--{l}")).chain(v.clone()))).collect()
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

/// Parses `argv` (without the program and command names) against `opts`;
/// `cmd` is the command's name, or empty for `baton` without a command.
pub fn parse(cmd: &str, argv: &[OsString], opts: &[Opt]) -> Result<Args> {
    let mut args = Args::default();
    let mut it = argv.iter();
    let mut only_positional = false;
    // A command's usage errors start with its name (`serve: `); those of
    // `baton` itself need nothing, since `baton: ` introduces them.
    let usage = |what: String| match cmd {
        "" => Error::Usage(what),
        cmd => Error::Usage(format!("{cmd}: {what}")),
    };
    while let Some(raw) = it.next() {
        let Some(arg) = raw.to_str() else {
            return Err(usage(format!("argument {raw:?} is not valid UTF-8")));
        };
        if only_positional || arg == "-" || !arg.starts_with('-') {
            args.positional.push(arg.to_string());
            continue;
        }
        if arg == "--" {
            only_positional = true;
            continue;
        }
        let (opt, inline) = match arg.strip_prefix("--") {
            Some(long) => match long.split_once('=') {
                Some((name, v)) => (opts.iter().find(|o| o.long == name), Some(v.to_string())),
                None => (opts.iter().find(|o| o.long == long), None),
            },
            None => {
                // A short option is one letter.
                let mut chars = arg[1..].chars();
                let c = chars.next().filter(|_| chars.next().is_none());
                (opts.iter().find(|o| c.is_some() && o.short == c), None)
            }
        };
        let opt = opt.ok_or_else(|| unknown(cmd, arg))?;
        let long = opt.long;
        let value = match (opt.takes_value, inline) {
            (true, Some(v)) => Some(v),
            (true, None) => match it.next().map(|v| v.to_str()) {
                Some(Some(v)) => Some(v.to_string()),
                Some(None) => {
                    return Err(usage(format!("the value of --{long} is not valid UTF-8")));
                }
                None => return Err(usage(format!("--{long} needs a value"))),
            },
            (false, Some(_)) => return Err(usage(format!("--{long} takes no value"))),
            (false, None) => None,
        };
        args.given.push((opt.long, value));
    }
    Ok(args)
}

fn unknown(cmd: &str, arg: &str) -> Error {
    let arg = crate::text::sanitize::escape(arg);
    if cmd.is_empty() {
        // `baton [serve options]`: its options are serve's.
        return Error::Usage(format!(
            "unknown option {arg} (see 'baton --help', and 'baton help serve' for the options baton takes without a command)"
        ));
    }
    Error::Usage(format!(
        "{cmd}: unknown option {arg} (see 'baton help {cmd}')"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[
        switch("json", ""),
        value("name", ""),
        switch("help", "").alias('h'),
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

    #[test]
    fn baton_without_a_command_has_no_prefix_of_its_own() {
        let argv = |v: &[&str]| -> Vec<OsString> { v.iter().map(OsString::from).collect() };
        assert_eq!(
            parse("", &argv(&["--name"]), OPTS).unwrap_err().to_string(),
            "--name needs a value"
        );
        let e = parse("", &argv(&["-x"]), OPTS).unwrap_err().to_string();
        assert!(
            e.starts_with("unknown option -x (see 'baton --help'"),
            "{e}"
        );
        assert!(!e.contains("help baton"), "{e}");
    }

    #[test]
    fn every_value_is_named_by_its_usage() {
        for c in crate::cli::COMMANDS {
            for o in c.opts.iter().filter(|o| o.takes_value) {
                let name = o.value_name(c.usage);
                assert_ne!(
                    name, "VALUE",
                    "{}: --{} is not in its usage",
                    c.name, o.long
                );
            }
        }
        let usage = "baton x [--name-of X] [--wait [--name NAME]] [-n N] [--approve a|b [--yes]]";
        assert_eq!(value("name", "").value_name(usage), "NAME");
        assert_eq!(value("lines", "").alias('n').value_name(usage), "N");
        assert_eq!(value("approve", "").value_name(usage), "a|b");
        assert_eq!(value("other", "").value_name(usage), "VALUE");
        assert_eq!(switch("yes", "").value_name(usage), "");
        assert_eq!(
            value("lines", "").alias('n').spelled(usage),
            "-n, --lines N"
        );
    }

    #[test]
    fn names_follow_the_rules() {
        for bad in ["", ".", "..", "a/b", "a b", &"n".repeat(65)] {
            let e = check_name("--name", bad).unwrap_err().to_string();
            assert!(e.starts_with("--name "), "{e}");
            assert!(e.ends_with(NAME_RULE), "{e}");
        }
        for good in ["a", "a.b", "...", ".a", "a-b_c", &"n".repeat(64)] {
            assert!(check_name("--name", good).is_ok(), "{good}");
        }
    }
}
