//! Terminal output: results on stdout, progress and errors on stderr.

use std::io::Write;

/// Where a command writes; tests capture it, the binary uses the terminal.
pub struct Ui {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
}

impl Ui {
    /// stdout and stderr.
    pub fn terminal() -> Self {
        Ui { out: Box::new(std::io::stdout()), err: Box::new(std::io::stderr()) }
    }

    /// Arbitrary writers (tests).
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Self {
        Ui { out, err }
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
