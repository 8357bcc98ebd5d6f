//! The documentation matches the program: the worked `socat` session of
//! docs/protocol.md replays against a real instance with the answers it
//! shows, and man/baton.1 names every option and every `BATON_*` variable.

use crate::util::{Env, baton_bin, have};
use serde_json::Value;
use std::fs;
use std::process::{Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Replaces the digits that follow each occurrence of `prefix` with `0`.
fn zero_after(s: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(prefix) {
        out.push_str(&rest[..i + prefix.len()]);
        rest = &rest[i + prefix.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push('0');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// Puts a real answer in the documentation's terms, and blanks what
/// differs from run to run (times and pids).
fn normalize(line: &str, real: &[(&str, &str)]) -> Value {
    let mut s = line.to_string();
    for (from, to) in real {
        s = s.replace(from, to);
    }
    for p in [
        "\"pid\":",
        "pid=\\\"",
        "\"process_start\":",
        "\"pid_ns\":",
        "\"started_at\":",
        "\"accepted_at\":",
        "\"finished_at\":",
        "\"turn\":\"",
    ] {
        s = zero_after(&s, p);
    }
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// The request and answer lines of section 10, in order.
fn worked_session() -> Vec<(String, String)> {
    let doc = fs::read_to_string(format!("{ROOT}/docs/protocol.md")).unwrap();
    let start = doc.find("## 10. A worked session").expect("section 10");
    let end = doc[start..].find("## 11.").map_or(doc.len(), |e| start + e);
    let blocks: Vec<&str> = doc[start..end]
        .split("```")
        .skip(1)
        .step_by(2)
        .map(str::trim)
        .collect();
    let mut pairs = Vec::new();
    for w in blocks.windows(2) {
        if w[0].starts_with("{\"jsonrpc\":\"2.0\",\"id\"") && w[1].starts_with("{\"id\"") {
            pairs.push((w[0].to_string(), w[1].to_string()));
        }
    }
    pairs
}

#[test]
fn the_worked_socat_session_replays_as_documented() {
    let pairs = worked_session();
    assert!(
        pairs.len() >= 6,
        "found only {} request/answer pairs",
        pairs.len()
    );
    if !have("socat") {
        return;
    }
    let env = Env::new();
    let ws = env.workspace("demo");
    let s = env.serve(&ws, &["--name", "demo"]);
    const DOC_ID: &str = "4242-1111222233334444";
    let input: String = pairs
        .iter()
        .map(|(req, _)| format!("{}\n", req.replace(DOC_ID, &s.id)))
        .collect();
    let mut child = Command::new("socat")
        .args([
            "-t",
            "3",
            "-",
            &format!("UNIX-CONNECT:{}", s.socket.display()),
        ])
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines.len(),
        pairs.len(),
        "socat printed:\n{got}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let registry = fs::canonicalize(&env.registry).unwrap();
    let (reg, wsd) = (registry.display().to_string(), ws.display().to_string());
    let real = [
        (s.id.as_str(), DOC_ID),
        (reg.as_str(), "/tmp/docs-reg"),
        (wsd.as_str(), "/tmp/demo"),
    ];
    for ((req, doc_answer), line) in pairs.iter().zip(lines) {
        let want = normalize(doc_answer, &[]);
        let have = normalize(line, &real);
        assert_eq!(have, want, "for the request {req}");
    }
}

/// The long options `baton help CMD` prints for every command.
fn help_options() -> Vec<(String, String)> {
    let overview = Command::new(baton_bin()).arg("help").output().unwrap();
    let text = String::from_utf8(overview.stdout).unwrap();
    let commands: Vec<String> = text
        .split("commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert!(commands.contains(&"serve".to_string()), "{commands:?}");
    let mut opts = Vec::new();
    for c in commands {
        let out = Command::new(baton_bin())
            .args(["help", &c])
            .output()
            .unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        for word in help.split_whitespace() {
            if let Some(o) = word.strip_prefix("--") {
                let o = o.trim_end_matches([',', ']']).to_string();
                if !o.is_empty() && o.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                    opts.push((c.clone(), o));
                }
            }
        }
    }
    // The tests that check every option against a document pass for none:
    // the help must have given some.
    assert!(
        opts.iter().any(|(c, o)| c == "send" && o == "via"),
        "{opts:?}"
    );
    opts
}

#[test]
fn the_man_page_names_every_option_and_variable() {
    let man = fs::read_to_string(format!("{ROOT}/man/baton.1")).unwrap();
    for (cmd, opt) in help_options() {
        let roff = format!("\\-\\-{}", opt.replace('-', "\\-"));
        // In the command's own section, `.SS baton CMD` to the next heading.
        let head = format!("\n.SS baton {cmd}\n");
        let start = man
            .find(&head)
            .unwrap_or_else(|| panic!("baton.1 has no section {head:?}"));
        let rest = &man[start + head.len()..];
        let section = &rest[..rest.find("\n.S").unwrap_or(rest.len())];
        assert!(
            section.contains(&roff),
            "the section 'baton {cmd}' of baton.1 lacks {roff} (from 'baton help {cmd}')"
        );
    }
    let mut vars = Vec::new();
    for entry in fs::read_dir(format!("{ROOT}/src")).unwrap() {
        collect_vars(&entry.unwrap().path(), &mut vars);
    }
    assert!(vars.contains(&"BATON_MAX_BYTES".to_string()), "{vars:?}");
    for v in vars {
        assert!(man.contains(&v), "baton.1 does not mention {v}");
    }
}

/// Every `"BATON_…"` string literal in the sources.
fn collect_vars(path: &std::path::Path, out: &mut Vec<String>) {
    if path.is_dir() {
        for e in fs::read_dir(path).unwrap() {
            collect_vars(&e.unwrap().path(), out);
        }
        return;
    }
    let text = fs::read_to_string(path).unwrap();
    for piece in text.split("\"BATON_").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        if piece[name.len()..].starts_with('"') && !name.is_empty() {
            let v = format!("BATON_{name}");
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
}

/// What `baton completions SHELL` prints.
fn completion(shell: &str) -> String {
    let out = Command::new(baton_bin())
        .args(["completions", shell])
        .output()
        .unwrap();
    assert!(out.status.success(), "baton completions {shell}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The line of a completion script that handles the command `cmd`.
fn case_line<'a>(script: &'a str, prefix: &str) -> &'a str {
    script
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{script}"))
}

#[test]
fn the_completions_name_every_option_of_every_command() {
    let (bash, zsh, fish) = (completion("bash"), completion("zsh"), completion("fish"));
    for (cmd, opt) in help_options() {
        let words: Vec<&str> = case_line(&bash, &format!("{cmd}) opts=\""))
            .split(['"', ' '])
            .collect();
        assert!(
            words.contains(&format!("--{opt}").as_str()),
            "the bash completion lacks --{opt} for {cmd}"
        );
        let line = case_line(&zsh, &format!("{cmd}) _arguments "));
        assert!(
            line.contains(&format!("'--{opt}[")) || line.contains(&format!("'--{opt}=[")),
            "the zsh completion lacks --{opt} for {cmd}"
        );
        let spec = format!("complete -c baton -n '__fish_seen_subcommand_from {cmd}' -l {opt} ");
        assert!(
            fish.lines().any(|l| l.starts_with(&spec)),
            "the fish completion lacks --{opt} for {cmd}"
        );
    }
}

/// Runs `shell ARGS... FILE` on a script written to a temporary file, in
/// the world of `env` with `baton` on PATH, and returns what it printed,
/// failing the test if the shell fails or complains.
fn run_shell(env: &Env, shell: &str, args: &[&str], script: &str, tail: &str) -> String {
    let bin = env.root.join("bin");
    if !bin.exists() {
        fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).unwrap();
    }
    let file = env.root.join(format!("baton.{shell}"));
    fs::write(&file, format!("{script}{tail}")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(shell)
        .args(args)
        .arg(&file)
        .env_clear()
        .env("PATH", path)
        .env("HOME", env.root.join("home"))
        .env("BATON_DIR", &env.registry)
        .env("XDG_STATE_HOME", &env.state)
        .env("TMPDIR", env.root.join("tmp"))
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{shell} {args:?} on the {shell} completion: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What each shell must complete (the words typed, then the completions
/// in order), in a world with a live `demo` and a stopped `gone`.
const COMPLETE: &[(&str, &str)] = &[
    ("baton send --v", "--via"),
    ("baton comp", "completions"),
    ("baton completions z", "zsh"),
    ("baton ping d", "demo"),
    // inbox: its actions first, live targets after the action.
    ("baton inbox ", "claim complete discard list requeue wait"),
    (
        "baton inbox --json ",
        "claim complete discard list requeue wait",
    ),
    ("baton inbox claim d", "demo"),
    // The values of options that take one of a few.
    ("baton serve --profile s", "sysadmin"),
    ("baton --profile c", "coding"),
    ("baton mcp --profile ", "coding sysadmin"),
    ("baton serve --approve a", "ask auto"),
    ("baton serve --stdin ", "body envelope"),
    ("baton send --mode ", "queue steer"),
    ("baton inbox complete --outcome ", "done failed"),
    ("baton send --from d", "demo"),
    // stop takes a live instance, forget a stopped one.
    ("baton st", "status stop"),
    ("baton stop d", "demo"),
    ("baton forget g", "gone"),
    ("baton forget --y", "--yes"),
    ("baton --prof", "--profile"),
];

#[test]
fn the_completions_parse_and_complete_in_their_shells() {
    // A live instance, whose name completes as a TARGET, and a stopped
    // one, whose name completes for forget.
    let env = Env::new();
    let gone_ws = env.workspace("gone");
    env.serve(&gone_ws, &["--name", "gone"]).term();
    let ws = env.workspace("demo");
    let _s = env.serve(&ws, &["--name", "demo"]);
    let sorted = |words: &str| {
        let mut w: Vec<&str> = words.split_whitespace().collect();
        w.sort_unstable();
        w.join(" ")
    };
    let want: Vec<String> = COMPLETE.iter().map(|(_, w)| sorted(w)).collect();
    // bash: the syntax, then completions the way readline asks for them.
    if have("bash") {
        let bash = completion("bash");
        run_shell(&env, "bash", &["-n"], &bash, "");
        let mut calls = String::from(
            "c() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _baton; echo \"${COMPREPLY[*]}\"; }\n",
        );
        for (typed, _) in COMPLETE {
            // A trailing space starts an empty word.
            let words: Vec<&str> = typed.split(' ').collect();
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            calls.push_str(&format!("c {}\n", quoted.join(" ")));
        }
        let got = run_shell(&env, "bash", &[], &bash, &calls);
        let got: Vec<String> = got.lines().map(sorted).collect();
        for (i, (typed, _)) in COMPLETE.iter().enumerate() {
            assert_eq!(got[i], want[i], "bash completes {typed:?}");
        }
    }
    if have("zsh") {
        run_shell(&env, "zsh", &["-n"], &completion("zsh"), "");
    }
    if have("fish") {
        let fish = completion("fish");
        run_shell(&env, "fish", &["-n"], &fish, "");
        let calls: String = COMPLETE
            .iter()
            .map(|(typed, _)| format!("echo (complete -C '{typed}' | cut -f1)\n"))
            .collect();
        let got = run_shell(&env, "fish", &["--no-config"], &fish, &calls);
        let got: Vec<String> = got.lines().map(sorted).collect();
        for (i, (typed, _)) in COMPLETE.iter().enumerate() {
            assert_eq!(got[i], want[i], "fish completes {typed:?}");
        }
    }
}

/// zsh completes through `_arguments`, which needs an interactive shell:
/// its specs are checked as written, and they must parse.
#[test]
fn the_zsh_completion_names_inbox_actions_and_option_values() {
    let zsh = completion("zsh");
    let inbox = case_line(&zsh, "inbox) _arguments ");
    assert!(
        inbox.contains(
            "':action:(list claim complete requeue discard wait)' '*:target:_baton_targets'"
        ),
        "{inbox}"
    );
    assert!(case_line(&zsh, "stop) _arguments ").contains("'*:target:_baton_targets'"));
    let forget = case_line(&zsh, "forget) _arguments ");
    assert!(
        forget.contains("':name:_baton_spools'") && forget.contains("'--yes["),
        "{forget}"
    );
    for (cmd, spec) in [
        ("serve", ":coding|sysadmin:(coding sysadmin)'"),
        ("serve", ":auto|ask|deny:(auto ask deny)'"),
        ("serve", ":envelope|body:(envelope body)'"),
        ("mcp", ":coding|sysadmin:(coding sysadmin)'"),
        ("send", ":queue|steer:(queue steer)'"),
        ("send", ":NAME:_baton_targets'"),
        ("inbox", ":done|failed:(done failed)'"),
    ] {
        let line = case_line(&zsh, &format!("{cmd}) _arguments "));
        assert!(line.contains(spec), "zsh {cmd} lacks {spec}: {line}");
    }
}

#[test]
fn the_man_pages_are_clean_roff() {
    let pages = [
        format!("{ROOT}/man/baton.1"),
        format!("{ROOT}/man/baton-protocol.7"),
    ];
    if have("mandoc") {
        for page in &pages {
            let out = Command::new("mandoc")
                .args(["-T", "lint", "-W", "all", page])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && text.is_empty(),
                "mandoc -T lint -W all {page}:\n{text}"
            );
        }
    }
    if have("man") {
        for page in &pages {
            let out = Command::new("man")
                .args(["--warnings", "-l", page])
                .env("MANWIDTH", "80")
                .env("MAN_KEEP_FORMATTING", "0")
                .env("LANG", "C.UTF-8")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && err.is_empty() && !out.stdout.is_empty(),
                "man --warnings -l {page}:\n{err}"
            );
        }
    }
}

#[test]
fn the_protocol_page_names_every_method() {
    let page = fs::read_to_string(format!("{ROOT}/man/baton-protocol.7")).unwrap();
    let env = Env::new();
    let ws = env.workspace("demo");
    let s = env.serve(&ws, &["--name", "demo"]);
    let hello = s.client().initialize();
    let methods = hello["capabilities"].as_array().unwrap();
    assert!(methods.len() > 5, "{hello}");
    for m in methods {
        let m = m.as_str().unwrap();
        assert!(page.contains(m), "baton-protocol.7 does not name {m}");
    }
}

/// The rows of docs/protocol.md's "Who may call what": door to the roles
/// marked allowed, in the table's column order.
fn access_rows(page: &str) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let section = page
        .split("\n### Who may call what\n")
        .nth(1)
        .expect("docs/protocol.md has a \"Who may call what\" section");
    let section = section.split("\n#").next().unwrap();
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect()
    };
    let mut lines = section
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .skip_while(|l| cells(l)[0] != "door")
        .take_while(|l| !l.trim().is_empty());
    let header = cells(lines.next().expect("a header row starting with door"));
    let roles = header[1..].to_vec();
    let rows = lines
        .skip(1)
        .map(|l| {
            let c = cells(l);
            let allowed = roles
                .iter()
                .zip(&c[1..])
                .filter(|(_, mark)| mark.as_str() == "yes")
                .map(|(r, _)| r.clone())
                .collect();
            (c[0].clone(), allowed)
        })
        .collect();
    (roles, rows)
}

/// docs/protocol.md's access table is the code's (`access::Door::roles`),
/// row for row, and every method the page describes has a row.
#[test]
fn the_access_table_in_the_protocol_page_is_the_codes() {
    use baton::wire::access::{Door, Role};
    let page = fs::read_to_string(format!("{ROOT}/docs/protocol.md")).unwrap();
    let (roles, rows) = access_rows(&page);
    let want: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(roles, want, "the table's columns");
    let doors = Door::all();
    let names: Vec<&str> = doors.iter().map(|d| d.name()).collect();
    let documented: Vec<&str> = rows.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(documented, names, "the table's rows");
    for ((_, allowed), door) in rows.iter().zip(&doors) {
        let code: Vec<&str> = door.roles().iter().map(|r| r.as_str()).collect();
        let mut code_in_order: Vec<&str> =
            want.iter().copied().filter(|r| code.contains(r)).collect();
        code_in_order.dedup();
        assert_eq!(allowed, &code_in_order, "the row of {}", door.name());
    }
    // Every method section of §3 (a heading naming one or two methods).
    let methods = page.split("\n## 3. Methods").nth(1).unwrap();
    let methods = methods.split("\n## 4.").next().unwrap();
    for heading in methods.lines().filter(|l| l.starts_with("### `")) {
        for name in heading.split('`').skip(1).step_by(2) {
            if heading.contains("(server to client)") {
                continue;
            }
            assert!(
                documented.contains(&name),
                "{name} (docs/protocol.md §3) has no row in \"Who may call what\""
            );
        }
    }
}

/// One roff line as text: the arguments of a font macro (`.B`, `.IR`...)
/// joined as troff joins them, escapes resolved; other requests, none.
fn roff_text(line: &str) -> String {
    let text = match line.strip_prefix('.') {
        None => line.to_string(),
        Some(request) => {
            let (name, rest) = request.split_once(' ').unwrap_or((request, ""));
            let mut args: Vec<String> = Vec::new();
            let mut rest = rest.trim_start();
            while !rest.is_empty() {
                let (arg, after) = match rest.strip_prefix('"') {
                    Some(q) => q.split_once('"').unwrap_or((q, "")),
                    None => rest.split_once(' ').unwrap_or((rest, "")),
                };
                args.push(arg.to_string());
                rest = after.trim_start();
            }
            match name {
                "B" | "I" => args.join(" "),
                "BR" | "RB" | "BI" | "IB" | "IR" | "RI" => args.concat(),
                _ => String::new(),
            }
        }
    };
    let mut text = text.replace("\\-", "-").replace("\\e", "\\");
    for gone in ["\\%", "\\&", "\\c", "\\fB", "\\fI", "\\fR", "\\fP"] {
        text = text.replace(gone, "");
    }
    text
}

/// What baton.1's SYNOPSIS says `baton CMD` takes: its lines that start
/// with `.B baton CMD`, each up to its `.br`, as text.
fn man_synopsis(man: &str, cmd: &str) -> String {
    let synopsis = man.split("\n.SH SYNOPSIS\n").nth(1).unwrap();
    let synopsis = synopsis.split("\n.SH ").next().unwrap();
    let head = format!(".B baton {cmd}");
    let mut out = Vec::new();
    let mut inside = false;
    for line in synopsis.lines() {
        if line == ".br" {
            inside = false;
        } else if line == head || line.starts_with(&format!("{head} ")) {
            inside = true;
        }
        if inside {
            out.push(roff_text(line));
        }
    }
    out.join(" ")
}

/// The tags of the option list of `baton CMD` in baton.1 (`.TP` items
/// that start with `-`), as text: `--timeout SECONDS`.
fn man_option_tags(man: &str, cmd: &str) -> Vec<String> {
    let head = format!("\n.SS baton {cmd}\n");
    let start = man.find(&head).unwrap() + head.len();
    let section = &man[start..];
    let section = &section[..section.find("\n.S").unwrap_or(section.len())];
    let lines: Vec<&str> = section.lines().collect();
    (lines.windows(2))
        .filter(|w| w[0] == ".TP")
        .map(|w| roff_text(w[1]))
        .filter(|tag| tag.starts_with('-'))
        .collect()
}

/// Whether `word` is in `text` as a whole word (not inside `--ephemeral-spool`).
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(word)
        .any(|(at, _)| !text[..at].ends_with(part) && !text[at + word.len()..].starts_with(part))
}

/// One option as `baton help CMD` lists it.
#[derive(Debug)]
struct HelpOpt {
    /// `-n, --lines N`, as the option list shows it.
    shown: String,
    long: String,
    short: Option<String>,
    /// What the value is called (`SECONDS`), empty for a switch.
    value: String,
}

/// Every command's usage and option list, from `baton help CMD`.
fn help_tables() -> Vec<(String, String, Vec<HelpOpt>)> {
    let commands: Vec<String> = help_options().into_iter().map(|(c, _)| c).collect();
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for c in commands {
        if seen.contains(&c) {
            continue;
        }
        seen.push(c.clone());
        let help = Command::new(baton_bin())
            .args(["help", &c])
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        let usage = help.split("\n\n").next().unwrap().to_string();
        let list = help.split("options:\n").nth(1).unwrap();
        let opts = list
            .lines()
            .map(|l| {
                let shown = l.trim_start().split("  ").next().unwrap().to_string();
                let (short, rest) = match shown.split_once(", ") {
                    Some((s, rest)) => (Some(s.to_string()), rest),
                    None => (None, shown.as_str()),
                };
                let (long, value) = rest.split_once(' ').unwrap_or((rest, ""));
                HelpOpt {
                    long: long.to_string(),
                    short,
                    value: value.to_string(),
                    shown: shown.clone(),
                }
            })
            .collect();
        out.push((c, usage, opts));
    }
    out
}

/// The man page, `--help` and the completions agree on every option of
/// every command and on what its value is called: the usage line and the
/// man page's SYNOPSIS spell it with that value, the man page's option
/// list and `baton help CMD` show it alike, zsh's completion describes the
/// value by that name, and bash and fish know that it takes one.
#[test]
fn the_man_page_help_and_completions_agree_on_options_and_value_names() {
    let man = fs::read_to_string(format!("{ROOT}/man/baton.1")).unwrap();
    let (bash, zsh, fish) = (completion("bash"), completion("zsh"), completion("fish"));
    let tables = help_tables();
    assert!(
        tables
            .iter()
            .any(|(c, _, opts)| c == "send"
                && opts.iter().any(|o| o.shown.starts_with("--timeout ")))
    );
    for (cmd, usage, opts) in &tables {
        let synopsis = man_synopsis(&man, cmd);
        let tags = man_option_tags(&man, cmd);
        for o in opts.iter().filter(|o| o.long != "--help") {
            let spelled: Vec<String> = std::iter::once(&o.long)
                .chain(&o.short)
                .map(|s| match o.value.as_str() {
                    "" => s.clone(),
                    v => format!("{s} {v}"),
                })
                .collect();
            for (what, text) in [("its usage", usage), ("baton.1's SYNOPSIS", &synopsis)] {
                assert!(
                    spelled.iter().any(|s| has_word(text, s)),
                    "{what} for 'baton {cmd}' lacks {spelled:?}:\n{text}"
                );
            }
            assert!(
                tags.contains(&o.shown),
                "baton.1's option list of 'baton {cmd}' lacks {:?} (as 'baton help {cmd}' shows it); it has {tags:?}",
                o.shown
            );
            let valued = !o.value.is_empty();
            let bash_vals = case_line(&bash, &format!("{cmd}) opts=\""));
            let bash_vals = bash_vals.split("vals=\"").nth(1).unwrap();
            assert_eq!(
                bash_vals.split([' ', '"']).any(|w| w == o.long),
                valued,
                "bash: whether {} of {cmd} takes a value",
                o.long
            );
            let zsh_line = case_line(&zsh, &format!("{cmd}) _arguments "));
            let zsh_spec = match valued {
                true => format!("'{}=[", o.long),
                false => format!("'{}[", o.long),
            };
            let spec = zsh_line.split(&zsh_spec).nth(1).unwrap_or_else(|| {
                panic!("zsh: {cmd} lacks {zsh_spec}: {zsh_line}");
            });
            if valued {
                let message = spec.split("]:").nth(1).unwrap().split(':').next().unwrap();
                assert_eq!(message, o.value, "zsh: what {} of {cmd} takes", o.long);
            }
            let fish_spec = format!(
                "complete -c baton -n '__fish_seen_subcommand_from {cmd}' -l {} ",
                o.long.trim_start_matches("--")
            );
            let fish_line = fish.lines().find(|l| l.starts_with(&fish_spec)).unwrap();
            assert_eq!(
                fish_line.contains(" -r ") || fish_line.contains(" -x "),
                valued,
                "fish: whether {} of {cmd} takes a value: {fish_line}",
                o.long
            );
        }
        // Nothing in the man page's option list that the help lacks.
        for tag in &tags {
            assert!(
                opts.iter().any(|o| &o.shown == tag),
                "baton.1 lists {tag:?} for 'baton {cmd}', which 'baton help {cmd}' does not"
            );
        }
    }
}

#[test]
fn the_doors_only_operators_pass_are_the_codes() {
    use baton::wire::access::Door;
    let page = fs::read_to_string(format!("{ROOT}/docs/protocol.md")).unwrap();
    let para = page
        .split("**With `serve --operator USER`**")
        .nth(1)
        .expect("protocol.md says what --operator changes");
    let listed = para
        .split("the doors ")
        .nth(1)
        .and_then(|p| p.split(" open to the listed accounts only").next())
        .expect("the doors --operator keeps for the listed accounts");
    let mut doc: Vec<String> = listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|d| d.replace('\n', " "))
        .collect();
    let mut code: Vec<String> = Door::all()
        .into_iter()
        .filter(|d| d.operators_only())
        .map(|d| d.name().to_string())
        .collect();
    doc.sort();
    code.sort();
    assert_eq!(
        doc, code,
        "docs/protocol.md's doors for --operator's accounts"
    );
}
