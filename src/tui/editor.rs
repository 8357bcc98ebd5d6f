//! The view's input line: editing keys and the history of lines entered.

/// The input line: editing and history.
#[derive(Clone, Debug, Default)]
pub struct Editor {
    pub buf: Vec<char>,
    pub cursor: usize,
    history: Vec<String>,
    at: Option<usize>,
}

impl Editor {
    pub fn text(&self) -> String {
        self.buf.iter().collect()
    }

    pub fn insert(&mut self, c: char) {
        self.buf.insert(self.cursor, c);
        self.cursor += 1;
    }

    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            self.cursor -= 1;
            self.buf.remove(self.cursor);
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.buf.len() {
            self.buf.remove(self.cursor);
        }
    }

    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.buf.len());
    }

    pub fn home(&mut self) {
        self.cursor = 0;
    }

    pub fn end(&mut self) {
        self.cursor = self.buf.len();
    }

    /// ctrl-u: deletes everything before the cursor.
    pub fn kill_line(&mut self) {
        self.buf.drain(..self.cursor);
        self.cursor = 0;
    }

    /// ctrl-w: deletes the word before the cursor (and the spaces after it).
    pub fn kill_word(&mut self) {
        let mut start = self.cursor;
        while start > 0 && self.buf[start - 1] == ' ' {
            start -= 1;
        }
        while start > 0 && self.buf[start - 1] != ' ' {
            start -= 1;
        }
        self.buf.drain(start..self.cursor);
        self.cursor = start;
    }

    pub fn up(&mut self) {
        if self.history.is_empty() {
            return;
        }
        let i = match self.at {
            None => self.history.len() - 1,
            Some(0) => 0,
            Some(i) => i - 1,
        };
        self.at = Some(i);
        self.set(&self.history[i].clone());
    }

    pub fn down(&mut self) {
        match self.at {
            Some(i) if i + 1 < self.history.len() => {
                self.at = Some(i + 1);
                self.set(&self.history[i + 1].clone());
            }
            Some(_) => {
                self.at = None;
                self.set("");
            }
            None => {}
        }
    }

    fn set(&mut self, s: &str) {
        self.buf = s.chars().collect();
        self.cursor = self.buf.len();
    }

    /// Enter: returns the line and remembers it.
    pub fn take(&mut self) -> String {
        let line = self.text();
        if !line.trim().is_empty() && self.history.last() != Some(&line) {
            self.history.push(line.clone());
        }
        self.set("");
        self.at = None;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_keys() {
        let mut e = Editor::default();
        for c in "hello big world".chars() {
            e.insert(c);
        }
        e.kill_word();
        assert_eq!(e.text(), "hello big ");
        e.home();
        e.delete();
        e.end();
        e.backspace();
        assert_eq!(e.text(), "ello big");
        e.left();
        e.left();
        e.insert('X');
        assert_eq!(e.text(), "ello bXig");
        e.kill_line();
        assert_eq!(e.text(), "ig");
        assert_eq!(e.take(), "ig");
        e.insert('a');
        e.take();
        e.up();
        assert_eq!(e.text(), "a");
        e.up();
        assert_eq!(e.text(), "ig");
        e.down();
        e.down();
        assert_eq!(e.text(), "");
    }
}
