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

/// A real terminal: raw mode and the alternate screen for the view's
/// life. Dropping it restores cooked mode, the main screen and the cursor.
pub struct Tty {
    out: termion::raw::RawTerminal<io::Stdout>,
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
        Ok(Tty { out })
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
        use termion::{clear, color, cursor, style};
        let mut buf = Vec::new();
        write!(buf, "{}", cursor::Hide)?;
        for (i, line) in frame.lines.iter().enumerate() {
            write!(
                buf,
                "{}{}",
                cursor::Goto(1, i as u16 + 1),
                clear::CurrentLine
            )?;
            match line.style {
                Style::Normal => {}
                Style::Header => write!(buf, "{}", style::Invert)?,
                Style::Local => write!(buf, "{}", style::Bold)?,
                Style::Relay => write!(buf, "{}", color::Fg(color::Cyan))?,
                Style::Output => write!(buf, "{}", style::Faint)?,
                Style::System => write!(buf, "{}", color::Fg(color::Yellow))?,
                Style::Refusal => write!(buf, "{}", color::Fg(color::Red))?,
                Style::Prompt => write!(buf, "{}", color::Fg(color::Green))?,
            }
            buf.extend_from_slice(line.text.as_bytes());
            write!(buf, "{}{}", style::Reset, color::Fg(color::Reset))?;
        }
        let (x, y) = frame.cursor;
        write!(buf, "{}{}", cursor::Goto(x + 1, y + 1), cursor::Show)?;
        self.out.write_all(&buf)?;
        self.out.flush()
    }
}
