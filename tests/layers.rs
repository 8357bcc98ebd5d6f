//! The layers of docs/ARCHITECTURE.md ("## Layers") hold: every
//! `crate::NAME` in non-test src/ (in a `use` line or a path) names a
//! module of its own layer or a lower one, and every top-level module of
//! src/lib.rs is in the list.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layers, lowest first: each numbered line of the "## Layers" section
/// names its modules in backticks before any other text.
fn layers() -> Vec<Vec<String>> {
    let doc = fs::read_to_string(Path::new(ROOT).join("docs/ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers\n"))
        .expect("docs/ARCHITECTURE.md has a \"## Layers\" section");
    let mut out = Vec::new();
    for line in section.lines() {
        let Some((n, rest)) = line.split_once(". ") else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        assert_eq!(
            n.parse::<usize>().unwrap(),
            out.len() + 1,
            "layer numbers in order: {line}"
        );
        let mut names = Vec::new();
        let mut rest = rest.trim_start();
        while let Some(after) = rest.strip_prefix('`') {
            let (name, tail) = after.split_once('`').expect("a closing backtick");
            names.push(name.to_string());
            rest = tail.strip_prefix(", ").unwrap_or("");
        }
        assert!(!names.is_empty(), "a layer names its modules: {line}");
        out.push(names);
    }
    assert!(!out.is_empty(), "the \"## Layers\" section lists layers");
    out
}

/// The top-level modules src/lib.rs declares.
fn modules() -> Vec<String> {
    let lib = fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            Some(l.strip_prefix("mod ")?.strip_suffix(';')?.to_string())
        })
        .collect()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text with comments, string and character literals blanked (line
/// breaks kept, so that lines still count), roughly as the compiler reads
/// it: enough that a name in a comment or a string is not a use.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident(b.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == '#').count();
            if b.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let body: String = b[start..].iter().collect();
            let len = body
                .find(&end)
                .map_or(b.len() - start, |n| body[..n].chars().count());
            for &ch in &b[i..(start + len + end.len()).min(b.len())] {
                out.push(blank(ch));
            }
            i = (start + len + end.len()).min(b.len());
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{…}'
            let len = b[i + 2..]
                .iter()
                .skip(1)
                .position(|&c| c == '\'')
                .map_or(2, |n| n + 4);
            out.extend(std::iter::repeat_n(' ', len.min(b.len() - i)));
            i += len;
        } else if c == '\'' && b.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The lines of `code` outside items marked `#[cfg(test)]`, with their
/// numbers (from 1).
fn non_test_lines(code: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            out.push((i + 1, lines[i]));
            i += 1;
            continue;
        }
        // Skip the item: up to its `;` or to the brace that closes it.
        i += 1;
        let mut depth = 0i64;
        let mut opened = false;
        while i < lines.len() {
            let l = lines[i];
            i += 1;
            if l.trim_start().starts_with("#[") && !opened {
                continue;
            }
            for ch in l.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
    }
    out
}

/// The top-level module names each `crate::NAME` and `crate::{A, B::…}` of
/// `code` uses, with the line each name is on.
fn crate_uses(code: &str) -> Vec<(usize, String)> {
    let lines = non_test_lines(code);
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let line_of = |pos: usize| lines[text[..pos].matches('\n').count()].0;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        if ident(text[..start].chars().last().as_ref()) {
            continue;
        }
        let rest = &text[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let close = group.find('}').unwrap_or(group.len());
            let mut pos = from + 1;
            for item in group[..close].split(',') {
                let lead = item.len() - item.trim_start().len();
                let name: String = item
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push((line_of(pos + lead), name));
                }
                pos += item.len() + 1;
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((line_of(start), name));
        }
    }
    out
}

#[test]
fn a_layer_uses_only_its_own_and_those_below() {
    let layers = layers();
    let modules = modules();
    let layer_of: HashMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(n, names)| names.iter().map(move |m| (m.as_str(), n + 1)))
        .collect();
    let mut problems = Vec::new();
    for m in &modules {
        if !layer_of.contains_key(m.as_str()) {
            problems.push(format!(
                "module {m} (src/lib.rs) is in no layer of docs/ARCHITECTURE.md"
            ));
        }
    }
    for m in layer_of.keys() {
        if !modules.iter().any(|x| x == m) {
            problems.push(format!(
                "docs/ARCHITECTURE.md's layers name {m}, which src/lib.rs does not declare"
            ));
        }
    }

    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    // Files a module includes with `#[path = "…"]` belong to it.
    let mut included: HashMap<String, String> = HashMap::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for l in text.lines() {
            if let Some(p) = l
                .trim()
                .strip_prefix("#[path = \"")
                .and_then(|p| p.strip_suffix("\"]"))
            {
                let owner = f
                    .strip_prefix(&src)
                    .unwrap()
                    .iter()
                    .next()
                    .unwrap()
                    .to_string_lossy();
                included.insert(p.to_string(), owner.trim_end_matches(".rs").to_string());
            }
        }
    }
    // Cargo.toml's build script is no module of the crate.
    let manifest = fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).unwrap();
    let build = manifest
        .lines()
        .find_map(|l| l.strip_prefix("build = \"")?.strip_suffix('"'))
        .map(|b| Path::new(ROOT).join(b));
    let mut checked = 0;
    for f in &files {
        if build.as_deref() == Some(f.as_path()) {
            continue;
        }
        let rel = f.strip_prefix(&src).unwrap();
        let name = f.file_name().unwrap().to_string_lossy();
        if name == "tests.rs"
            || name.ends_with("_tests.rs")
            || rel == Path::new("lib.rs")
            || rel == Path::new("main.rs")
        {
            continue;
        }
        let first = rel.iter().next().unwrap().to_string_lossy();
        let module = match first.strip_suffix(".rs") {
            Some(m) if layer_of.contains_key(m) || modules.iter().any(|x| x == m) => m.to_string(),
            Some(_) => match included.get(first.as_ref()) {
                Some(owner) => owner.clone(),
                None => {
                    problems.push(format!("src/{} belongs to no module", rel.display()));
                    continue;
                }
            },
            None => first.to_string(),
        };
        let Some(&mine) = layer_of.get(module.as_str()) else {
            continue;
        };
        checked += 1;
        let code = code_only(&fs::read_to_string(f).unwrap());
        for (line, used) in crate_uses(&code) {
            let theirs = layer_of.get(used.as_str()).copied().unwrap_or(0);
            if theirs > mine {
                problems.push(format!(
                    "src/{}:{line}: module {module} (layer {mine}) uses module {used} (layer {theirs} > {mine})",
                    rel.display()
                ));
            }
        }
    }
    assert!(checked > 50, "src/ has its files ({checked} checked)");
    assert!(
        problems.is_empty(),
        "the layers of docs/ARCHITECTURE.md are broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn comments_and_strings_are_no_uses() {
    let code = code_only(
        "// use crate::a;\nlet s = \"crate::b\"; /* crate::c */ let r = r#\"crate::d\"#;\nuse crate::{e, f::g};\nlet c = '\"'; x(crate::h::i);\n#[cfg(test)]\nmod tests {\n    use crate::j;\n}\nuse crate::k;\n",
    );
    let uses: Vec<(usize, String)> = crate_uses(&code);
    let want: Vec<(usize, String)> = [(3, "e"), (3, "f"), (4, "h"), (9, "k")]
        .iter()
        .map(|(l, n)| (*l, n.to_string()))
        .collect();
    assert_eq!(uses, want);
}
