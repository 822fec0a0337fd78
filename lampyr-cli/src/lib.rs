//! `ly`, as a library: argument parsing, commands, and terminal output.
//! The `ly` binary only wires this to the process (stdout, stderr, exit code).

pub mod args;
pub mod commands;
pub mod template_repository;
pub mod ui;

pub use args::Cli;
pub use commands::{CliError, run};
pub use ui::Ui;
