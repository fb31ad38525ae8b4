//! A one-line progress display on stderr for the long parts of a run (warm-up, prefill,
//! decode): the line is redrawn in place with a carriage return, and nothing is written when
//! stderr is not a terminal or the display is switched off.

use std::io::{IsTerminal, Write};

/// Widest line drawn (characters), so that a redraw never wraps on a usual terminal.
const WIDTH: usize = 79;

/// The progress line.
#[derive(Debug)]
pub struct Progress {
    on: bool,
    drawn: bool,
}

impl Progress {
    /// A display that draws only if `wanted` and stderr is a terminal.
    pub fn new(wanted: bool) -> Progress {
        Progress {
            on: wanted && std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    /// Whether anything is drawn.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Replaces the line with `text` (cut to the line's width, keeping its end).
    pub fn show(&mut self, text: &str) {
        if !self.on {
            return;
        }
        let chars: Vec<char> = text.chars().filter(|c| !c.is_control()).collect();
        let start = chars.len().saturating_sub(WIDTH);
        let line: String = chars[start..].iter().collect();
        let mut e = std::io::stderr().lock();
        // A failed write to the terminal only loses the display.
        let _ = write!(e, "\r\x1b[K{line}");
        let _ = e.flush();
        self.drawn = true;
    }

    /// Erases the line, if one is drawn.
    pub fn clear(&mut self) {
        if self.on && self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}
