//! `ly cache`: what the local artifact cache holds (pulled artifacts, `ly run`'s builds),
//! and pruning it to its size limit.

use std::time::SystemTime;

use lampyr_artifact::cache::Cache;
use lampyr_artifact::evict::{DEFAULT_MAX_BYTES, EntryKind, Pruned};

use super::CliError;
use crate::args::CacheCommand;
use crate::ui::Ui;

/// The setting naming the cache's size limit (a Kubernetes quantity: `10Gi`, `500Mi`, bytes).
pub const MAX_BYTES_VAR: &str = "LAMPYR_CACHE_MAX_BYTES";

/// Runs `ly cache …`.
pub fn run(cmd: CacheCommand, ui: &mut Ui) -> Result<(), CliError> {
    let cache = Cache::new(Cache::default_location()?);
    match cmd {
        CacheCommand::Show => show(&cache, ui),
        CacheCommand::Prune { max_bytes } => {
            let limit = match max_bytes {
                Some(text) => parse_size("--max-bytes", &text)?,
                None => max_bytes_setting()?,
            };
            ui.step(format!("pruning {} to {}", cache.root().display(), human(limit)));
            let pruned = cache.prune(limit)?;
            report(&pruned, limit, ui);
            Ok(())
        }
    }
}

/// After a pull or a build: prunes the cache to its limit, saying what went.
pub fn prune_to_limit(cache: &Cache, ui: &mut Ui) -> Result<(), CliError> {
    let limit = max_bytes_setting()?;
    let pruned = cache.prune(limit)?;
    if !pruned.removed.is_empty() {
        report(&pruned, limit, ui);
    }
    Ok(())
}

/// The cache limit: [`MAX_BYTES_VAR`], else [`DEFAULT_MAX_BYTES`].
pub fn max_bytes_setting() -> Result<u64, CliError> {
    match std::env::var(MAX_BYTES_VAR) {
        Ok(text) => parse_size(MAX_BYTES_VAR, &text),
        Err(_) => Ok(DEFAULT_MAX_BYTES),
    }
}

fn show(cache: &Cache, ui: &mut Ui) -> Result<(), CliError> {
    let usage = cache.usage()?;
    let limit = max_bytes_setting()?;
    ui.line(format!("cache:  {}", cache.root().display()));
    ui.line(format!("size:   {} of {} ({MAX_BYTES_VAR})", human(usage.bytes), human(limit)));
    ui.line(format!("{:<9} {:<73} {:>10} {:>12}  STATE", "KIND", "NAME", "SIZE", "LAST USED"));
    for entry in usage.entries.iter().rev() {
        let kind = match entry.kind {
            EntryKind::Artifact => "artifact",
            EntryKind::Blob => "blob",
            EntryKind::Build => "build",
        };
        let state = if entry.in_use { "in use" } else { "" };
        ui.line(format!("{kind:<9} {:<73} {:>10} {:>12}  {state}", entry.name, human(entry.bytes), ago(entry.last_used)));
    }
    Ok(())
}

fn report(pruned: &Pruned, limit: u64, ui: &mut Ui) {
    if pruned.busy {
        ui.step("another process is pulling into the cache: nothing pruned; run `ly cache prune` later");
        return;
    }
    for entry in &pruned.removed {
        ui.step(format!("evicted {} ({})", entry.name, human(entry.bytes)));
    }
    ui.step(format!("cache {} → {} (limit {}; {} in use kept)", human(pruned.before), human(pruned.after), human(limit), pruned.in_use));
}

fn parse_size(what: &str, text: &str) -> Result<u64, CliError> {
    lampyr_api::quantity::parse_quantity(text.trim())
        .map(|q| q.ceil())
        .map_err(|e| CliError::Usage(format!("{what} {text:?} is not a size ({e}; for example 10Gi, 500Mi or a byte count)")))
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let (mut value, mut unit) = (bytes as f64, 0);
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

fn ago(at: SystemTime) -> String {
    let secs = SystemTime::now().duration_since(at).map_or(0, |d| d.as_secs());
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_kubernetes_quantities() {
        assert_eq!(parse_size("x", "10Gi").expect("10Gi"), 10 << 30);
        assert_eq!(parse_size("x", "1500").expect("bytes"), 1500);
        assert!(parse_size("x", "lots").expect_err("not a size").to_string().contains("not a size"));
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(12), "12 B");
    }
}
