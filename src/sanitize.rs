//! Escaping of untrusted text before it reaches a terminal: C0 and C1
//! controls, DEL, bidi overrides and zero-width characters become visible
//! `\u{…}`-style escapes, so a peer cannot move the cursor, retitle the
//! terminal or hide text.

use std::borrow::Cow;

/// True for characters that must never reach a terminal raw.
pub fn is_unsafe(c: char) -> bool {
    let n = c as u32;
    n < 0x20
        || (0x7f..=0x9f).contains(&n)
        || matches!(
            n,
            0x061c | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2069 | 0xfeff
        )
}

/// Escapes one line of untrusted text; newlines are escaped too.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_with(s, false)
}

/// Escapes untrusted text but keeps `\n` (and `\t`) as they are, for
/// multi-line bodies printed to a terminal.
pub fn escape_multiline(s: &str) -> Cow<'_, str> {
    escape_with(s, true)
}

/// The end of multi-line untrusted text, escaped as `escape_multiline`
/// does: at most `limit` bytes, its last whole characters and escapes
/// (an escape is never cut in two).
pub fn escape_tail(s: &str, limit: usize) -> String {
    let mut kept = Vec::new();
    let mut len = 0;
    let mut buf = [0u8; 4];
    for c in s.chars().rev() {
        let one = escape_multiline(c.encode_utf8(&mut buf)).into_owned();
        if len + one.len() > limit {
            break;
        }
        len += one.len();
        kept.push(one);
    }
    kept.iter().rev().map(String::as_str).collect()
}

fn escape_with(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let keep = |c: char| keep_lines && (c == '\n' || c == '\t');
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(escape("weekly-digest ü"), Cow::Borrowed(_)));
    }

    #[test]
    fn controls_bidi_and_zero_width_are_escaped() {
        assert_eq!(escape("a\x1b]0;x\x07b"), "a\\e]0;x\\u{7}b");
        assert_eq!(escape("\u{202e}evil"), "\\u{202e}evil");
        assert_eq!(escape("a\u{200b}b\u{feff}"), "a\\u{200b}b\\u{feff}");
        assert_eq!(escape("x\u{9b}y\u{7f}"), "x\\u{9b}y\\u{7f}");
        assert_eq!(escape("l1\nl2"), "l1\\nl2");
        assert_eq!(escape_multiline("l1\nl2\x1b"), "l1\nl2\\e");
    }

    #[test]
    fn a_tail_keeps_the_last_whole_escapes() {
        assert_eq!(escape_tail("abc\n", 10), "abc\n");
        assert_eq!(escape_tail("abcdef", 3), "def");
        // `\e` is two bytes: it is kept whole or not at all.
        assert_eq!(escape_tail("a\x1bz", 3), "\\ez");
        assert_eq!(escape_tail("a\x1bz", 2), "z");
        assert_eq!(escape_tail("xéé", 4), "éé");
        assert_eq!(escape_tail("xéé", 3), "é");
    }
}
