//! `baton completions bash|zsh|fish`: completion scripts generated from the
//! command table, so they always name the options `baton help` prints.
//! Targets (names and ids of live instances) complete dynamically through
//! `baton list`. The scripts complete the name the binary was run as, so a
//! binary installed under another name (`make install BIN=...`) gets
//! completions for that name.

use super::args::Args;
use super::{COMMANDS, Command, Parsed};

/// The command table a script is generated from.
type Table = &'static [Command];
use crate::base::config::Config;
use crate::base::error::{Error, ExitCode, Result};

/// Commands whose positional argument is a live TARGET.
const TARGETED: &[&str] = &[
    "send",
    "ping",
    "status",
    "pause",
    "resume",
    "log",
    "watch",
    "attach",
    "bridge",
    "stop",
    "cancel",
    "approvals",
    "approve",
    "deny",
];
/// Commands whose positional argument is a name baton knows a spool of
/// (`baton list --offline`).
const SPOOL_NAMED: &[&str] = &["forget", "wake"];
/// `inbox`'s actions: its first positional argument; a TARGET follows.
pub const INBOX_ACTIONS: &[&str] = &["list", "claim", "complete", "requeue", "discard", "wait"];

/// What the value of an option completes to.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Values {
    /// A fixed list (`args::choices`, which the commands check against).
    Words(Vec<&'static str>),
    /// The names and ids of live instances.
    Targets,
    /// A tmux pane (`serve --tmux-pane`).
    Panes,
    /// A directory.
    Dirs,
}

/// How an option's value completes, by its long name; `None`: free text.
fn values(long: &str) -> Option<Values> {
    if let Some(words) = super::args::choices(long) {
        return Some(Values::Words(words));
    }
    match long {
        "from" | "attach" => Some(Values::Targets),
        "tmux-pane" => Some(Values::Panes),
        "workspace" => Some(Values::Dirs),
        _ => None,
    }
}

/// The command `cmd` (empty: `baton` without a command, which takes
/// serve's options).
fn command_of(t: Table, cmd: &str) -> Option<&'static Command> {
    let cmd = if cmd.is_empty() { "serve" } else { cmd };
    t.iter().find(|c| c.name == cmd)
}

/// The options of `cmd`.
fn opts_of(t: Table, cmd: &str) -> &'static [super::Opt] {
    command_of(t, cmd).map_or(&[], |c| c.opts)
}

/// Every spelling of an option: `--long`, and `-s` when it has one.
fn spellings(o: &super::Opt) -> Vec<String> {
    let mut v = vec![format!("--{}", o.long)];
    v.extend(o.short.map(|c| format!("-{c}")));
    v
}

/// Every value-taking option of every command that completes its value,
/// once per long name.
fn completed_options(t: Table) -> Vec<(super::Opt, Values)> {
    let mut out: Vec<(super::Opt, Values)> = Vec::new();
    for o in t.iter().flat_map(|c| c.opts) {
        if let (true, Some(v)) = (o.takes_value, values(o.long)) {
            if !out.iter().any(|(seen, _)| seen.long == o.long) {
                out.push((*o, v));
            }
        }
    }
    out
}

/// `baton completions bash|zsh|fish`: the script's maker.
pub struct Completions(fn(Table, &str) -> String);

impl Parsed for Completions {
    fn parse(args: &Args) -> Result<Completions> {
        super::at_most(args, "completions", 1)?;
        match args.positional.first().map(String::as_str) {
            Some("bash") => Ok(Completions(bash)),
            Some("zsh") => Ok(Completions(zsh)),
            Some("fish") => Ok(Completions(fish)),
            Some(other) => Err(Error::Usage(format!(
                "completions: {}: use bash, zsh or fish",
                crate::text::sanitize::escape(other)
            ))),
            None => Err(Error::Usage(
                "completions: name a shell: bash, zsh or fish".into(),
            )),
        }
    }

    fn run(self, _: &Config) -> Result<ExitCode> {
        super::shown(&(self.0)(COMMANDS, &prog()))
    }
}

fn names(t: Table) -> Vec<&'static str> {
    t.iter().map(|c| c.name).collect()
}

/// The spellings of `cmd`'s options; with `valued`, only those that
/// take a value.
fn spelled(t: Table, cmd: &str, valued: bool) -> Vec<String> {
    opts_of(t, cmd)
        .iter()
        .filter(|o| !valued || o.takes_value)
        .flat_map(spellings)
        .collect()
}

/// The command name to complete: the basename this binary was run as, when
/// it is a plain word, else `baton`.
fn prog() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            let name = std::path::Path::new(&a).file_name()?.to_str()?.to_string();
            let plain = name.len() <= 64
                && name.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
            plain.then_some(name)
        })
        .unwrap_or_else(|| "baton".into())
}

/// `prog` as a shell function name suffix.
fn ident(prog: &str) -> String {
    prog.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The live targets: names and ids from `baton list`.
fn targets_sh(prog: &str) -> String {
    format!("{prog} list 2>/dev/null | awk 'NR>1 {{print $1; print $4}}'")
}

/// The names with a spool: `baton list --offline`.
fn spools_sh(prog: &str) -> String {
    format!("{prog} list --offline 2>/dev/null | awk 'NR>1 {{print $1}}'")
}

/// tmux's panes, when a tmux server runs.
const PANES_SH: &str = "tmux list-panes -a -F '#{pane_id}' 2>/dev/null";

/// The words a shell command prints, as a bash completion.
fn bash_words(sh: &str) -> String {
    format!("COMPREPLY=($(compgen -W \"$({sh})\" -- \"$cur\"))")
}

fn bash_values(prog: &str, v: Values) -> String {
    match v {
        Values::Words(w) => format!("COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))", w.join(" ")),
        Values::Targets => bash_words(&targets_sh(prog)),
        Values::Panes => bash_words(PANES_SH),
        Values::Dirs => "COMPREPLY=($(compgen -d -- \"$cur\"))".into(),
    }
}

fn bash(t: Table, prog: &str) -> String {
    // `baton -...` first: its options are serve's.
    let cases: String = std::iter::once(("-*", ""))
        .chain(t.iter().map(|c| (c.name, c.name)))
        .map(|(pattern, cmd)| {
            let (opts, vals) = (spelled(t, cmd, false), spelled(t, cmd, true));
            format!(
                "        {pattern}) opts=\"{}\" vals=\" {} \" ;;\n",
                opts.join(" "),
                vals.join(" ")
            )
        })
        .collect();
    let value_cases: String = (completed_options(t).into_iter())
        .map(|(o, v)| {
            format!(
                "            {}) {} ;;\n",
                spellings(&o).join("|"),
                bash_values(prog, v)
            )
        })
        .collect();
    format!(
        r#"# bash completion for {prog}; generated by `{prog} completions bash`.
_{func}() {{
    local cur prev cmd opts vals i w n=0
    cur=${{COMP_WORDS[COMP_CWORD]}}
    prev=${{COMP_WORDS[COMP_CWORD-1]}}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "{commands} {serve_opts}" -- "$cur"))
        return
    fi
    cmd=${{COMP_WORDS[1]}}
    case $cmd in
{cases}        *) opts="" vals=" " ;;
    esac
    if [[ $vals == *" $prev "* ]]; then
        case $prev in
{value_cases}        esac
        return
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    for ((i = 2; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        if [[ $w == -* ]]; then
            [[ $vals == *" $w "* ]] && i=$((i + 1))
        else
            n=$((n + 1))
        fi
    done
    case $cmd in
        inbox) if [ "$n" -eq 0 ]; then COMPREPLY=($(compgen -W "{actions}" -- "$cur")); else {targets}; fi ;;
        {targeted}) {targets} ;;
        {spool_named}) {spools} ;;
        completions) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
        help) COMPREPLY=($(compgen -W "{commands}" -- "$cur")) ;;
    esac
}}
complete -F _{func} {prog}
"#,
        func = ident(prog),
        commands = names(t).join(" "),
        serve_opts = spelled(t, "", false).join(" "),
        actions = INBOX_ACTIONS.join(" "),
        targeted = TARGETED.join("|"),
        targets = bash_words(&targets_sh(prog)),
        spool_named = SPOOL_NAMED.join("|"),
        spools = bash_words(&spools_sh(prog)),
    )
}

/// An option's `_arguments` specs (one per spelling); the message of a
/// value is what `usage` calls it.
fn zsh_specs(prog: &str, usage: &'static str, o: &super::Opt) -> Vec<String> {
    let help = o.help.replace('\'', "").replace(['[', ']', ':'], " ");
    let action = match values(o.long) {
        Some(Values::Words(w)) => format!("({})", w.join(" ")),
        Some(Values::Targets) => format!("_{}_targets", ident(prog)),
        Some(Values::Panes) => format!("_{}_panes", ident(prog)),
        Some(Values::Dirs) => "_directories".into(),
        None => String::new(),
    };
    spellings(o)
        .iter()
        .map(|s| match (o.takes_value, s.starts_with("--")) {
            (true, true) => format!("'{s}=[{help}]:{}:{action}'", o.value_name(usage)),
            (true, false) => format!("'{s}[{help}]:{}:{action}'", o.value_name(usage)),
            (false, _) => format!("'{s}[{help}]'"),
        })
        .collect()
}

fn zsh_positional(t: Table, prog: &str, cmd: &str) -> String {
    let f = ident(prog);
    if cmd == "inbox" {
        return format!(
            " ':action:({})' '*:target:_{f}_targets'",
            INBOX_ACTIONS.join(" ")
        );
    }
    if TARGETED.contains(&cmd) {
        return format!(" '*:target:_{f}_targets'");
    }
    if SPOOL_NAMED.contains(&cmd) {
        return format!(" ':name:_{f}_spools'");
    }
    match cmd {
        "completions" => " ':shell:(bash zsh fish)'".to_string(),
        "help" => format!(" ':command:({})'", names(t).join(" ")),
        _ => String::new(),
    }
}

fn zsh(t: Table, prog: &str) -> String {
    let specs = |cmd: &str| -> String {
        let usage = command_of(t, cmd).map_or("", |c| c.usage);
        opts_of(t, cmd)
            .iter()
            .flat_map(|o| zsh_specs(prog, usage, o))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let cases: String = (t.iter())
        .map(|c| {
            format!(
                "        {}) _arguments {}{} ;;\n",
                c.name,
                specs(c.name),
                zsh_positional(t, prog, c.name)
            )
        })
        .collect();
    let commands: Vec<String> = t
        .iter()
        .map(|c| format!("'{}:{}'", c.name, c.summary.replace(['\'', ':'], " ")))
        .collect();
    let func = ident(prog);
    // The functions that list targets, spools and panes: each an array
    // of a shell command's lines.
    let lists: String = [
        ("targets", "targets", "target", targets_sh(prog)),
        ("spools", "names", "name", spools_sh(prog)),
        ("panes", "panes", "pane", PANES_SH.into()),
    ]
    .map(|(f, list, what, sh)| {
        format!("_{func}_{f}() {{\n    local -a {list}\n    {list}=(${{(f)\"$({sh})\"}})\n    _describe '{what}' {list}\n}}\n")
    })
    .concat();
    format!(
        r#"#compdef {prog}
# zsh completion for {prog}; generated by `{prog} completions zsh`.
{lists}_{func}() {{
    if [[ $words[2] == -* ]]; then
        _arguments {serve_specs}
        return
    fi
    if (( CURRENT == 2 )); then
        local -a commands
        commands=({commands})
        _describe 'command' commands
        [[ $PREFIX == -* ]] && _arguments {serve_specs}
        return
    fi
    local cmd=$words[2]
    shift words; (( CURRENT-- ))
    case $cmd in
{cases}    esac
}}
_{func} "$@"
"#,
        serve_specs = specs(""),
        commands = commands.join(" "),
    )
}

/// An option's fish `complete` arguments after its condition.
fn fish_opt(prog: &str, o: &super::Opt) -> String {
    let mut out = format!("-l {}", o.long);
    if let Some(c) = o.short {
        out.push_str(&format!(" -s {c}"));
    }
    let list = |sh: &str| format!(" -x -a '({})'", sh.replace('\'', "\\'"));
    match (o.takes_value, values(o.long)) {
        (false, _) => {}
        (true, None) => out.push_str(" -r"),
        (true, Some(Values::Words(w))) => out.push_str(&format!(" -x -a '{}'", w.join(" "))),
        (true, Some(Values::Targets)) => out.push_str(&list(&targets_sh(prog))),
        (true, Some(Values::Panes)) => out.push_str(&list(PANES_SH)),
        (true, Some(Values::Dirs)) => out.push_str(" -x -a '(__fish_complete_directories)'"),
    }
    out.push_str(&format!(" -d '{}'", o.help.replace('\'', "\\'")));
    out
}

fn fish(t: Table, prog: &str) -> String {
    let mut out = format!(
        "# fish completion for {prog}; generated by `{prog} completions fish`.\n\
         complete -c {prog} -f\n"
    );
    for o in opts_of(t, "") {
        out.push_str(&format!(
            "complete -c {prog} -n '__fish_use_subcommand' {}\n",
            fish_opt(prog, o)
        ));
    }
    for c in t {
        out.push_str(&format!(
            "complete -c {prog} -n '__fish_use_subcommand' -a {} -d '{}'\n",
            c.name,
            c.summary.replace('\'', "\\'")
        ));
        for o in c.opts {
            out.push_str(&format!(
                "complete -c {prog} -n '__fish_seen_subcommand_from {}' {}\n",
                c.name,
                fish_opt(prog, o)
            ));
        }
    }
    out.push_str(&format!(
        r#"complete -c {prog} -n '__fish_seen_subcommand_from inbox; and not __fish_seen_subcommand_from {actions}' -a '{actions}'
complete -c {prog} -n '__fish_seen_subcommand_from inbox; and __fish_seen_subcommand_from {actions}' -a '({targets})'
complete -c {prog} -n '__fish_seen_subcommand_from {targeted}' -a '({targets})'
complete -c {prog} -n '__fish_seen_subcommand_from {spool_named}' -a '({spools})'
complete -c {prog} -n '__fish_seen_subcommand_from completions' -a 'bash zsh fish'
"#,
        actions = INBOX_ACTIONS.join(" "),
        targets = targets_sh(prog).replace('\'', "\\'"),
        targeted = TARGETED.join(" "),
        spool_named = SPOOL_NAMED.join(" "),
        spools = spools_sh(prog).replace('\'', "\\'"),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_completed_are_the_ones_the_usage_lines_give() {
        let mut seen = 0;
        for c in COMMANDS {
            for o in c.opts {
                if let (true, Some(Values::Words(words))) = (o.takes_value, values(o.long)) {
                    let spelled = format!("--{} {}", o.long, words.join("|"));
                    assert!(c.usage.contains(&spelled), "{}: {spelled}", c.name);
                    seen += 1;
                }
            }
        }
        // serve --profile and --approve, mcp --profile, send --mode,
        // inbox --outcome.
        assert!(seen >= 5, "{seen}");
    }

    fn never(_: &Args, _: &Config) -> Result<ExitCode> {
        Ok(ExitCode::Ok)
    }

    /// A table with the options being added elsewhere (`serve
    /// --tmux-pane`, `baton -a/--attach`, `log -n --utc --follow`, `inbox
    /// wait --timeout`): the scripts complete them as soon as a command's
    /// table has them.
    const FUTURE: &[Command] = &[
        Command {
            name: "serve",
            usage: "baton serve [--tmux-pane PANE] [--profile coding|sysadmin] [--attach]",
            summary: "",
            opts: &[
                super::super::args::value("tmux-pane", "the pane"),
                super::super::args::value("profile", "coding or sysadmin"),
                super::super::args::switch("attach", "attach").alias('a'),
            ],
            run: never,
        },
        Command {
            name: "log",
            usage: "baton log [-n N] [--utc] [--follow] [--since WHEN]",
            summary: "",
            opts: &[
                super::super::args::value("lines", "the last N").alias('n'),
                super::super::args::switch("utc", "UTC"),
                super::super::args::switch("follow", "follow"),
                super::super::args::value("since", "since"),
            ],
            run: never,
        },
        Command {
            name: "inbox",
            usage: "baton inbox wait [--timeout SECONDS]",
            summary: "",
            opts: &[super::super::args::value("timeout", "seconds")],
            run: never,
        },
    ];

    #[test]
    fn options_added_to_the_table_are_completed() {
        let bash = bash(FUTURE, "baton");
        // baton's own options are serve's, short ones too.
        assert!(
            bash.contains(" --tmux-pane --profile --attach -a\""),
            "{bash}"
        );
        assert!(bash.contains("            --tmux-pane) COMPREPLY=($(compgen -W \"$(tmux list-panes -a -F '#{pane_id}' 2>/dev/null)\""), "{bash}");
        assert!(bash.contains("        log) opts=\"--lines -n --utc --follow --since\" vals=\" --lines -n --since \" ;;"), "{bash}");
        assert!(
            bash.contains("        inbox) opts=\"--timeout\" vals=\" --timeout \" ;;"),
            "{bash}"
        );
        assert!(
            bash.contains("list claim complete requeue discard wait"),
            "{bash}"
        );
        let zsh = zsh(FUTURE, "baton");
        assert!(
            zsh.contains("'--tmux-pane=[the pane]:PANE:_baton_panes'"),
            "{zsh}"
        );
        assert!(
            zsh.contains("'-n[the last N]:N:'") && zsh.contains("'--utc[UTC]'"),
            "{zsh}"
        );
        assert!(zsh.contains("'-a[attach]'"), "{zsh}");
        let fish = fish(FUTURE, "baton");
        assert!(
            fish.contains(
                "complete -c baton -n '__fish_use_subcommand' -l attach -s a -d 'attach'"
            ),
            "{fish}"
        );
        assert!(
            fish.contains(
                "-n '__fish_seen_subcommand_from serve' -l tmux-pane -x -a '(tmux list-panes"
            ),
            "{fish}"
        );
        assert!(
            fish.contains("-n '__fish_seen_subcommand_from log' -l lines -s n -r -d"),
            "{fish}"
        );
    }
}
