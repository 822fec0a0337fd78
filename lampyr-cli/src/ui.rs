//! Terminal output: results on stdout, progress and errors on stderr.

use std::io::{BufRead as _, IsTerminal as _, Write};

/// Where a command writes; tests capture it, the binary uses the terminal.
pub struct Ui {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    color: bool,
}

/// A color for [`Ui::paint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Something added, or a check that passed.
    Green,
    /// Something changed in place.
    Yellow,
    /// Something removed, or a check that failed.
    Red,
}

impl Ui {
    /// stdout and stderr.
    pub fn terminal() -> Self {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Ui { out: Box::new(std::io::stdout()), err: Box::new(std::io::stderr()), color }
    }

    /// Arbitrary writers (tests).
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Self {
        Ui { out, err, color: false }
    }

    /// `text` in `color` when writing to a terminal (and NO_COLOR is unset).
    pub fn paint(&self, color: Color, text: impl AsRef<str>) -> String {
        let code = match color {
            Color::Green => "32",
            Color::Yellow => "33",
            Color::Red => "31",
        };
        if self.color { format!("\x1b[{code}m{}\x1b[0m", text.as_ref()) } else { text.as_ref().to_string() }
    }

    /// A line on stderr, as it is (summaries, warnings).
    pub fn note(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.err, "{}", text.as_ref());
    }

    /// A warning on stderr.
    pub fn warn(&mut self, text: impl AsRef<str>) {
        let label = self.paint(Color::Yellow, "warning:");
        let _ = writeln!(self.err, "{label} {}", text.as_ref());
    }

    /// Whether the user can be asked: stdin is a terminal.
    pub fn can_prompt(&self) -> bool {
        std::io::stdin().is_terminal()
    }

    /// Asks `question` on stderr and reads a yes/no answer from stdin (anything but y/yes is no).
    pub fn confirm(&mut self, question: impl AsRef<str>) -> bool {
        let _ = write!(self.err, "{} [y/N] ", question.as_ref());
        let _ = self.err.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }

    /// A result line on stdout.
    pub fn line(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.out, "{}", text.as_ref());
        let _ = self.out.flush();
    }

    /// A progress line on stderr (`==> step`).
    pub fn step(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.err, "==> {}", text.as_ref());
    }

    /// An error on stderr, with its causes.
    pub fn error(&mut self, err: &dyn std::error::Error) {
        let _ = writeln!(self.err, "error: {err}");
        let mut source = err.source();
        while let Some(cause) = source {
            let _ = writeln!(self.err, "  caused by: {cause}");
            source = cause.source();
        }
    }
}
