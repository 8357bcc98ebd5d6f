//! Issue 31, point 8, "small drift": the command list of `baton help`
//! aligned, `baton help nosuch` worded as `baton nosuch`, candidates in
//! columns, `send --from` named in its errors, and `inbox claim` saying
//! that there was nothing to claim. (The man page, `--help` and the
//! completions agreeing on options and value names: tests/docs.rs.)

use crate::util::{Env, baton_bin};
use std::process::Command;

/// Where each column of `line` starts: its first character and each one
/// that follows two spaces or more.
fn column_starts(line: &str) -> Vec<usize> {
    let b = line.as_bytes();
    (0..b.len())
        .filter(|&i| b[i] != b' ' && (i == 0 || (i >= 2 && b[i - 1] == b' ' && b[i - 2] == b' ')))
        .collect()
}

/// Asserts that the candidate lines of `stderr` (after `candidates:`) are
/// at least `rows` lines in the same columns.
fn assert_candidates_in_columns(stderr: &str, rows: usize) {
    let list = stderr
        .split("candidates:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no candidates in {stderr:?}"));
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines.len() >= rows, "{stderr}");
    let first = column_starts(lines[0]);
    assert_eq!(first.len(), 4, "name, pid, workspace, id: {stderr}");
    for l in &lines {
        assert_eq!(column_starts(l), first, "not in columns:\n{stderr}");
    }
}

#[test]
fn the_command_list_of_help_is_in_columns() {
    let out = Command::new(baton_bin()).arg("help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = help
        .split("commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(rows.iter().any(|r| r.contains("completions ")), "{help}");
    let first = column_starts(rows[0]);
    assert_eq!(first.len(), 2, "{}", rows[0]);
    for r in &rows {
        assert_eq!(column_starts(r), first, "not aligned:\n{help}");
    }
}

#[test]
fn help_of_an_unknown_command_says_what_baton_says_of_it() {
    let env = Env::new();
    let run = env.run(&["nosuch"]);
    let help = env.run(&["help", "nosuch"]);
    for out in [&run, &help] {
        assert_eq!(out.status, 2, "{out:?}");
        assert_eq!(
            out.stderr,
            "baton: unknown command nosuch: see 'baton help'\n"
        );
    }
}

#[test]
fn candidates_are_listed_in_columns() {
    let env = Env::new();
    let short = env.workspace("w");
    let long = env.workspace("a-much-longer-workspace");
    let _a = env.serve(&short, &["--name", "a"]);
    let _b = env.serve(&long, &["--name", "a-longer-name"]);
    for args in [&["ping", "nosuch"][..], &["send", "nosuch", "hi"]] {
        let out = env.run(args);
        assert_eq!(out.status, 3, "{out:?}");
        assert_candidates_in_columns(&out.stderr, 2);
    }
}

#[test]
fn send_from_an_unknown_name_names_the_option() {
    let env = Env::new();
    let ws = env.workspace("demo");
    let _s = env.serve(&ws, &["--name", "demo"]);
    let out = env.run(&["send", "--from", "nosuch", "demo", "hi"]);
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr
            .starts_with("baton: send --from: no live instance has the id or name nosuch; candidates:\n  demo  pid "),
        "{out:?}"
    );
    let out = env.run(&["send", "--from", "", "demo", "hi"]);
    assert_eq!(out.status, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        "baton: send --from is empty: name an instance by its id or name\n"
    );
}

/// docs/hooks.md's loop claims after every wake-up and relies on exit 0
/// when another claimer was first.
#[test]
fn claiming_from_an_empty_inbox_says_so_and_exits_0() {
    let env = Env::new();
    let ws = env.workspace("demo");
    let _s = env.serve(&ws, &["--name", "demo"]);
    let out = env.run(&["inbox", "claim", "demo"]);
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "baton: nothing to claim: demo's inbox is empty\n"
    );
}
