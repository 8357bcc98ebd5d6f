//! The terminal the view draws on: a small trait with a termion
//! implementation for real terminals and an in-memory one for tests, so
//! rendering is tested without a TTY.

use std::io::{self, Write};

/// How a line is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Normal,
    Header,
    Local,
    Relay,
    Output,
    System,
    Refusal,
    Prompt,
}

/// One screen line: text already escaped and cut to the width.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub style: Style,
}

/// A whole screen, top to bottom, and where the cursor goes.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    pub lines: Vec<Line>,
    pub cursor: (u16, u16),
}

pub trait Terminal {
    /// Columns and rows.
    fn size(&self) -> (u16, u16);
    fn draw(&mut self, frame: &Frame) -> io::Result<()>;
}

/// A terminal in memory: remembers the last frame.
pub struct Memory {
    pub cols: u16,
    pub rows: u16,
    pub last: Frame,
}

impl Memory {
    pub fn new(cols: u16, rows: u16) -> Memory {
        Memory {
            cols,
            rows,
            last: Frame::default(),
        }
    }

    /// The screen as text, one string per row.
    pub fn screen(&self) -> Vec<String> {
        self.last.lines.iter().map(|l| l.text.clone()).collect()
    }
}

impl Terminal for Memory {
    fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }

    fn draw(&mut self, frame: &Frame) -> io::Result<()> {
        self.last = frame.clone();
        Ok(())
    }
}

/// The codes that start a line of `style`: attributes and the 8 basic
/// colours only, which every ANSI terminal has (no 256-colour codes), and
/// no colour at all when `colour` is false (`NO_COLOR`).
pub fn style_codes(style: Style, colour: bool) -> &'static str {
    match (style, colour) {
        (Style::Normal, _) => "",
        (Style::Header, _) => "\x1b[7m",
        (Style::Local, _) => "\x1b[1m",
        (Style::Output, _) => "\x1b[2m",
        (_, false) => "",
        (Style::Relay, true) => "\x1b[36m",
        (Style::System, true) => "\x1b[33m",
        (Style::Refusal, true) => "\x1b[31m",
        (Style::Prompt, true) => "\x1b[32m",
    }
}

/// Ends a line's style.
const RESET: &str = "\x1b[0m";

/// Whether colour is wanted: not when `NO_COLOR` is set to anything but
/// the empty string (no-color.org).
pub fn colour_wanted(no_color: Option<&std::ffi::OsStr>) -> bool {
    no_color.is_none_or(|v| v.is_empty())
}

/// Terminal types the view draws on without asking terminfo: the ANSI
/// family, whose cursor and attribute codes the view writes.
const ANSI_FAMILY: [&str; 17] = [
    "xterm",
    "screen",
    "tmux",
    "rxvt",
    "linux",
    "vt100",
    "vt102",
    "vt220",
    "ansi",
    "alacritty",
    "kitty",
    "foot",
    "st-",
    "konsole",
    "gnome",
    "putty",
    "wezterm",
];

/// Why the view cannot draw on a terminal of type `term` (`$TERM`), or
/// None when it can: a type that cannot move the cursor (`dumb`,
/// `unknown`, none at all), or one neither of the ANSI family nor known
/// to terminfo (`has_terminfo`).
pub fn unusable_term(term: Option<&str>, has_terminfo: &dyn Fn(&str) -> bool) -> Option<String> {
    let why = match term {
        None | Some("") => "TERM is not set".to_string(),
        Some(t @ ("dumb" | "unknown")) => format!("TERM={t} cannot move the cursor"),
        Some(t) if ANSI_FAMILY.iter().any(|f| t.starts_with(f)) || has_terminfo(t) => {
            return None;
        }
        Some(t) => format!(
            "TERM={} is no terminal type baton knows, and terminfo has no entry for it",
            crate::text::sanitize::escape(t)
        ),
    };
    Some(format!(
        "the view needs a terminal that can move the cursor, and {why}: 'baton watch' or 'baton log' follow an instance line by line, 'baton inbox' takes its tasks and 'baton serve' runs one without the view"
    ))
}

/// Whether a terminfo entry for `term` exists where ncurses looks.
pub fn has_terminfo(term: &str) -> bool {
    use std::path::PathBuf;
    let Some(first) = term.bytes().next() else {
        return false;
    };
    if term.contains('/') {
        return false;
    }
    let var = |k| std::env::var_os(k).map(PathBuf::from);
    let home = var("HOME").map(|h| h.join(".terminfo"));
    let mut dirs: Vec<PathBuf> = var("TERMINFO").into_iter().chain(home).collect();
    let listed = std::env::var_os("TERMINFO_DIRS").unwrap_or_default();
    dirs.extend(std::env::split_paths(&listed).filter(|p| !p.as_os_str().is_empty()));
    dirs.extend(
        [
            "/etc/terminfo",
            "/lib/terminfo",
            "/usr/share/terminfo",
            "/usr/lib/terminfo",
            "/usr/local/share/terminfo",
        ]
        .map(PathBuf::from),
    );
    let subs = [(first as char).to_string(), format!("{first:02x}")];
    dirs.iter()
        .any(|d| subs.iter().any(|s| d.join(s).join(term).is_file()))
}

/// The view's refusal for this process's terminal type, if any.
pub fn check_term() -> Option<String> {
    let term = std::env::var("TERM").ok();
    unusable_term(term.as_deref(), &has_terminfo)
}

/// A real terminal: raw mode and the alternate screen for the view's
/// life. Dropping it restores cooked mode, the main screen and the cursor.
pub struct Tty {
    out: termion::raw::RawTerminal<io::Stdout>,
    colour: bool,
}

/// The bytes that enter the alternate screen (xterm's private mode 1049,
/// written here rather than through termion, whose API for it changed
/// between the 1.5 and 2 releases that baton builds with).
const ALTERNATE: &str = "\x1b[?1049h";

/// The bytes that leave the alternate screen and show the cursor; written
/// on drop, and by the panic hook too, so a panic message is readable.
pub const RESTORE: &str = "\x1b[?25h\x1b[?1049l";

impl Tty {
    pub fn open() -> io::Result<Tty> {
        use termion::raw::IntoRawMode;
        let mut out = io::stdout().into_raw_mode()?;
        write!(out, "{ALTERNATE}{}", termion::cursor::Hide)?;
        out.flush()?;
        let colour = colour_wanted(std::env::var_os("NO_COLOR").as_deref());
        Ok(Tty { out, colour })
    }
}

impl Drop for Tty {
    /// Leaves the alternate screen; the raw terminal's own drop, after
    /// this, puts the terminal back in cooked mode.
    fn drop(&mut self) {
        let _ = write!(self.out, "{RESTORE}");
        let _ = self.out.flush();
    }
}

impl Terminal for Tty {
    fn size(&self) -> (u16, u16) {
        termion::terminal_size().unwrap_or((80, 24))
    }

    fn draw(&mut self, frame: &Frame) -> io::Result<()> {
        use termion::{clear, cursor};
        let mut buf = Vec::new();
        write!(buf, "{}", cursor::Hide)?;
        for (i, line) in frame.lines.iter().enumerate() {
            write!(
                buf,
                "{}{}",
                cursor::Goto(1, i as u16 + 1),
                clear::CurrentLine
            )?;
            buf.extend_from_slice(style_codes(line.style, self.colour).as_bytes());
            buf.extend_from_slice(line.text.as_bytes());
            buf.extend_from_slice(RESET.as_bytes());
        }
        let (x, y) = frame.cursor;
        write!(buf, "{}{}", cursor::Goto(x + 1, y + 1), cursor::Show)?;
        self.out.write_all(&buf)?;
        self.out.flush()
    }
}
