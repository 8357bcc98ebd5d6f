//! Shell-style glob matching for `--accept-from` / `--deny-from` patterns,
//! and the sender `Policy` those patterns make.
//!
//! Patterns are matched against whole agent names or workspace paths:
//!
//! - `*` matches any run of characters, including `/` and the empty run.
//!   Paths are compared as plain strings, so `/home/*/proj` also matches
//!   `/home/a/b/proj`; that keeps one rule for names and paths alike.
//! - `?` matches exactly one character.
//! - `[abc]`, `[a-z]` match one character from the set; `[!a-z]` negates it.
//!   A `]` right after `[` or `[!` is a member, and a `-` first or last is a
//!   literal, as in POSIX shells.
//! - `\` makes the next character literal, inside or outside a class. A
//!   trailing lone `\` matches a backslash.
//! - A `[` with no closing `]` is an ordinary character, so a typo degrades
//!   to a literal match instead of an error.
//!
//! Matching is on `char`s, so `?` consumes one Unicode scalar value, not one
//! byte. It is iterative with single-point backtracking to the most recent
//! `*`, which bounds the work at O(pattern × text) even for patterns such as
//! `a*a*a*a*b` that make naive recursive matchers exponential.

/// One compiled pattern element.
#[derive(Debug, PartialEq)]
enum Token {
    Literal(char),
    AnyOne,
    Star,
    Class {
        negated: bool,
        /// Inclusive ranges; a single member `c` is stored as `(c, c)`.
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    /// Whether this single-character token accepts `c`. `Star` never reaches
    /// here because the matcher handles it separately.
    fn accepts(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => *l == c,
            Token::AnyOne => true,
            Token::Star => false,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

/// Returns whether `text` matches `pattern` in its entirety.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let tokens = compile(pattern);
    let text: Vec<char> = text.chars().collect();

    let (mut p, mut t) = (0, 0);
    // Where to resume after the most recent `*`: the token following it and
    // the text position it is currently assumed to stop at. Only the latest
    // star ever needs revisiting, since any earlier star could only absorb
    // text that the later one can absorb just as well.
    let mut backtrack: Option<(usize, usize)> = None;

    while t < text.len() {
        match (tokens.get(p), backtrack) {
            (Some(Token::Star), _) => {
                p += 1;
                backtrack = Some((p, t));
            }
            (Some(tok), _) if tok.accepts(text[t]) => {
                p += 1;
                t += 1;
            }
            (_, Some((star_p, star_t))) => {
                // Let the star swallow one more character and retry.
                p = star_p;
                t = star_t + 1;
                backtrack = Some((star_p, t));
            }
            (_, None) => return false,
        }
    }

    tokens[p..].iter().all(|tok| *tok == Token::Star)
}

/// `--accept-from` / `--deny-from` patterns.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub accept_from: Vec<String>,
    pub deny_from: Vec<String>,
}

impl Policy {
    /// `Some(reason)` when a sender with this name and workspace is denied.
    pub fn check(&self, name: &str, workspace: &str) -> Option<String> {
        let hit = |p: &String| glob_match(p, name) || glob_match(p, workspace);
        if let Some(p) = self.deny_from.iter().find(|p| hit(p)) {
            return Some(format!("sender matches --deny-from {p}"));
        }
        if !self.accept_from.is_empty() && !self.accept_from.iter().any(hit) {
            return Some("sender matches no --accept-from pattern".into());
        }
        None
    }
}

/// Parses `pattern` into tokens. Never fails: anything that is not valid
/// glob syntax is taken literally.
fn compile(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let (token, next) = match chars[i] {
            '*' => (Token::Star, i + 1),
            '?' => (Token::AnyOne, i + 1),
            '\\' => (Token::Literal(*chars.get(i + 1).unwrap_or(&'\\')), i + 2),
            '[' => parse_class(&chars, i).unwrap_or((Token::Literal('['), i + 1)),
            c => (Token::Literal(c), i + 1),
        };
        // Runs of stars are equivalent to one; collapsing them keeps the
        // matcher from re-scanning the same position repeatedly.
        if token != Token::Star || tokens.last() != Some(&Token::Star) {
            tokens.push(token);
        }
        i = next;
    }
    tokens
}

/// The class member at `chars[i]`, `\` escaping it, and the index past
/// it; `None` where the pattern ends first.
fn member(chars: &[char], i: usize) -> Option<(char, usize)> {
    match chars.get(i)? {
        '\\' => Some((*chars.get(i + 1)?, i + 2)),
        &c => Some((c, i + 1)),
    }
}

/// Parses a bracket expression whose `[` is at `chars[start]`. Returns the
/// class and the index just past its `]`, or `None` if it is never closed.
fn parse_class(chars: &[char], start: usize) -> Option<(Token, usize)> {
    let negated = chars.get(start + 1) == Some(&'!');
    let mut i = start + 1 + usize::from(negated);
    let mut ranges = Vec::new();
    loop {
        if chars.get(i)? == &']' && !ranges.is_empty() {
            return Some((Token::Class { negated, ranges }, i + 1));
        }
        let (lo, after_lo) = member(chars, i)?;
        // A `-` forms a range only when something other than the closing
        // `]` follows it; otherwise it is a literal member.
        let range = chars.get(after_lo) == Some(&'-')
            && !matches!(chars.get(after_lo + 1), Some(']') | None);
        let (hi, next) = if range {
            member(chars, after_lo + 1)?
        } else {
            (lo, after_lo)
        };
        ranges.push((lo, hi));
        i = next;
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn literal() {
        assert!(glob_match("agent", "agent"));
        assert!(!glob_match("agent", "agents"));
        assert!(!glob_match("agents", "agent"));
        assert!(!glob_match("Agent", "agent"));
    }

    #[test]
    fn empty_pattern_and_text() {
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
        assert!(!glob_match("a", ""));
        assert!(glob_match("*", ""));
        assert!(glob_match("**", ""));
        assert!(!glob_match("?", ""));
        assert!(!glob_match("[a]", ""));
    }

    #[test]
    fn star() {
        assert!(glob_match("*", "anything at all"));
        assert!(glob_match("build-*", "build-"));
        assert!(glob_match("build-*", "build-linux"));
        assert!(glob_match("*-worker", "gpu-worker"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(!glob_match("build-*", "rebuild-x"));
        assert!(glob_match("a**b", "a/x/b"));
    }

    #[test]
    fn star_crosses_slashes() {
        assert!(glob_match("/home/*/proj", "/home/alice/proj"));
        assert!(glob_match("/home/*/proj", "/home/alice/src/proj"));
        assert!(glob_match("/srv/*", "/srv/a/b/c"));
        assert!(!glob_match("/srv/*", "/srv"));
    }

    #[test]
    fn star_needs_backtracking() {
        // The first `b` is a false lead; the star must give it back.
        assert!(glob_match("*bc", "abbc"));
        assert!(glob_match("*ab", "aaab"));
        assert!(glob_match("a*ab", "aaab"));
        assert!(!glob_match("*ab", "aaba"));
    }

    #[test]
    fn question_mark() {
        assert!(glob_match("?", "x"));
        assert!(!glob_match("?", "xy"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("a?c", "a/c"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("??*", "ab"));
        assert!(!glob_match("??*", "a"));
    }

    #[test]
    fn unicode_is_per_char() {
        assert!(glob_match("?", "é"));
        assert!(glob_match("caf?", "café"));
        assert!(glob_match("*é", "résumé"));
        assert!(glob_match("[α-ω]", "λ"));
        assert!(!glob_match("[α-ω]", "a"));
        assert!(glob_match("??", "日本"));
        assert!(!glob_match("?", "日本"));
    }

    #[test]
    fn class_set() {
        assert!(glob_match("[abc]", "a"));
        assert!(glob_match("[abc]", "c"));
        assert!(!glob_match("[abc]", "d"));
        assert!(!glob_match("[abc]", "ab"));
        assert!(glob_match("node-[123]", "node-2"));
    }

    #[test]
    fn class_range() {
        assert!(glob_match("[a-z]", "m"));
        assert!(glob_match("[a-z]", "a"));
        assert!(glob_match("[a-z]", "z"));
        assert!(!glob_match("[a-z]", "M"));
        assert!(glob_match("[a-zA-Z0-9_]", "Q"));
        assert!(glob_match("[a-zA-Z0-9_]", "_"));
        assert!(!glob_match("[a-zA-Z0-9_]", "-"));
        // A reversed range is empty rather than an error.
        assert!(!glob_match("[z-a]", "m"));
    }

    #[test]
    fn class_negated() {
        assert!(glob_match("[!a-z]", "A"));
        assert!(glob_match("[!a-z]", "/"));
        assert!(!glob_match("[!a-z]", "q"));
        assert!(!glob_match("[!a-z]", ""));
        assert!(glob_match("[!abc]x", "dx"));
        assert!(!glob_match("[!abc]x", "bx"));
    }

    #[test]
    fn class_literal_bracket_and_dash() {
        assert!(glob_match("[]]", "]"));
        assert!(glob_match("[]a]", "a"));
        assert!(glob_match("[!]]", "x"));
        assert!(!glob_match("[!]]", "]"));
        assert!(glob_match("[-a]", "-"));
        assert!(glob_match("[a-]", "-"));
        assert!(!glob_match("[a-]", "b"));
        assert!(glob_match("[*?]", "*"));
        assert!(!glob_match("[*?]", "x"));
    }

    #[test]
    fn escapes() {
        assert!(glob_match(r"\*", "*"));
        assert!(!glob_match(r"\*", "x"));
        assert!(glob_match(r"\?", "?"));
        assert!(!glob_match(r"\?", "x"));
        assert!(glob_match(r"\[a]", "[a]"));
        assert!(glob_match(r"a\\b", r"a\b"));
        assert!(glob_match(r"\a", "a"));
        assert!(glob_match(r"[\]]", "]"));
        assert!(glob_match(r"[\!a]", "!"));
        assert!(glob_match(r"[a\-z]", "-"));
        assert!(!glob_match(r"[a\-z]", "m"));
        assert!(glob_match(r"[\a-\c]", "b"));
        // A trailing backslash has nothing to escape and stands for itself.
        assert!(glob_match("a\\", "a\\"));
        assert!(!glob_match("a\\", "a"));
    }

    #[test]
    fn malformed_class_is_literal() {
        assert!(glob_match("[abc", "[abc"));
        assert!(!glob_match("[abc", "a"));
        assert!(glob_match("[", "["));
        assert!(glob_match("a[", "a["));
        assert!(glob_match("[!", "[!"));
        assert!(glob_match("[]", "[]"));
        assert!(glob_match("[*", "[anything"));
        assert!(glob_match("[a-", "[a-"));
        assert!(glob_match("x[\\", "x[\\"));
        // A stray `]` outside any class is an ordinary character too.
        assert!(glob_match("a]b[c", "a]b[c"));
        assert!(glob_match("?]*[", "x]yz["));
    }

    #[test]
    fn pathological_patterns_are_fast() {
        let text = "a".repeat(10_000);
        assert!(!glob_match("a*a*a*a*a*a*a*a*a*a*b", &text));
        assert!(glob_match("a*a*a*a*a*a*a*a*a*a*", &text));
        let stars = "*".repeat(1_000) + "b";
        assert!(!glob_match(&stars, &text));
        let start = std::time::Instant::now();
        assert!(!glob_match(&("a*".repeat(100) + "b"), &"a".repeat(1_000)));
        assert!(!glob_match(&"?*".repeat(200), &"x".repeat(100)));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
