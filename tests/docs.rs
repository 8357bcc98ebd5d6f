//! The documentation matches the program: the worked `socat` session of
//! docs/protocol.md replays against a real instance with the answers it
//! shows, and man/baton.1 names every option and every `BATON_*` variable.

use crate::util::{Env, baton_bin};
use serde_json::Value;
use std::fs;
use std::process::{Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Whether a tool this test needs is on PATH; when it is not, the test is
/// skipped, except under BATON_REQUIRE_ALL=1 where that is a failure.
fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("BATON_REQUIRE_ALL").as_deref() == Ok("1") {
            panic!("{tool} is required (BATON_REQUIRE_ALL=1) but not installed");
        }
        eprintln!("skipped: {tool} is not installed");
    }
    found
}

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
    opts
}

#[test]
fn the_man_page_names_every_option_and_variable() {
    let man = fs::read_to_string(format!("{ROOT}/man/baton.1")).unwrap();
    for (cmd, opt) in help_options() {
        let roff = format!("\\-\\-{}", opt.replace('-', "\\-"));
        assert!(
            man.contains(&roff),
            "baton.1 lacks {roff} (from 'baton help {cmd}')"
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
