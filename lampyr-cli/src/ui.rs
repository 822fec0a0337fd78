//! Terminal output: results on stdout, progress and errors on stderr.

use std::io::{BufRead as _, IsTerminal as _, Write};
use std::time::{Duration, Instant};

/// Where a command writes; tests capture it, the binary uses the terminal.
pub struct Ui {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    color: bool,
    /// stderr is a terminal: long steps show a live spinner instead of plain lines.
    live: bool,
}

/// A long step under way (building, snapshotting, pushing): see [`Ui::start`].
pub struct Task {
    what: String,
    started: Instant,
    spinner: Option<indicatif::ProgressBar>,
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
        let live = std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        let color = live && std::env::var_os("NO_COLOR").is_none();
        Ui { out: Box::new(std::io::stdout()), err: Box::new(std::io::stderr()), color, live }
    }

    /// Arbitrary writers (tests).
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Self {
        Ui { out, err, color: false, live: false }
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

    /// Bytes on stdout as they are (a response body, say).
    pub fn bytes(&mut self, data: &[u8]) {
        let _ = self.out.write_all(data);
        let _ = self.out.flush();
    }

    /// A progress line on stderr (`==> step`).
    pub fn step(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.err, "==> {}", text.as_ref());
    }

    /// Starts a long step: on a terminal a spinner showing `what`, its latest detail and the
    /// time so far; otherwise a `==> what` line (details follow as lines). End it with [`Ui::done`].
    pub fn start(&mut self, what: impl Into<String>) -> Task {
        let what = what.into();
        let spinner = self.live.then(|| {
            let spinner = indicatif::ProgressBar::new_spinner();
            if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                spinner.set_style(style);
            }
            spinner.set_message(what.clone());
            spinner.enable_steady_tick(Duration::from_millis(120));
            spinner
        });
        if spinner.is_none() {
            self.step(&what);
        }
        Task { what, started: Instant::now(), spinner }
    }

    /// What a long step is doing now (a crate compiled, a blob sent).
    pub fn detail(&mut self, task: &Task, detail: impl AsRef<str>) {
        match &task.spinner {
            Some(spinner) => spinner.set_message(format!("{}: {}", task.what, detail.as_ref())),
            None => self.step(format!("  {}", detail.as_ref())),
        }
    }

    /// Ends a long step: `==> what: done in 1.2s`.
    pub fn done(&mut self, task: Task) {
        if let Some(spinner) = &task.spinner {
            spinner.finish_and_clear();
        }
        self.step(format!("{}: done in {:.1?}", task.what, task.started.elapsed()));
    }

    /// Runs `step` as a long step called `what` (see [`Ui::start`]).
    pub fn timed<T>(&mut self, what: impl Into<String>, step: impl FnOnce() -> T) -> T {
        let task = self.start(what);
        let result = step();
        self.done(task);
        result
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
