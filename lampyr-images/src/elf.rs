//! What a binary needs from the filesystem to start: its ELF interpreter and
//! shared libraries, as this host's dynamic loader resolves them.
//!
//! The loader itself answers (`ldd`, i.e. the interpreter in trace mode): it
//! follows `DT_NEEDED` transitively through `RUNPATH`, `ld.so.cache` and the
//! default directories exactly as it will at run time, which parsing the ELF
//! here would have to re-implement. Each path it prints is where the loader in
//! the image will look too: the image has no `ld.so.cache`, so the loader
//! falls back to its built-in directories (`/lib/x86_64-linux-gnu`, …), which
//! are the directories the host's cache points into. Statically linked
//! binaries (the Go ones) need nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The interpreter and libraries `binary` needs, as absolute host paths (empty when static).
pub(crate) fn needed_files(binary: &Path) -> Result<Vec<PathBuf>, Error> {
    let output = Command::new("ldd").arg(binary).env("LC_ALL", "C").output().map_err(|source| Error::Spawn {
        program: "ldd".into(),
        source,
        hint: "install Debian's libc-bin",
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("not a dynamic executable") {
            return Ok(Vec::new());
        }
        return Err(Error::CommandFailed {
            command: format!("ldd {}", binary.display()),
            status: output.status.to_string(),
            stderr: stderr.trim().to_string(),
        });
    }
    parse_ldd(binary, &stdout)
}

/// The absolute paths in `ldd`'s output, in its order; the vDSO (no file) is skipped.
pub(crate) fn parse_ldd(binary: &Path, stdout: &str) -> Result<Vec<PathBuf>, Error> {
    let mut paths = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line == "statically linked" {
            continue;
        }
        let unreadable = || Error::LddOutput { binary: binary.to_path_buf(), line: line.to_string() };
        let target = match line.split_once(" => ") {
            Some((library, target)) => {
                if target.trim() == "not found" {
                    let library = library.trim().to_string();
                    return Err(Error::LibraryNotFound { binary: binary.to_path_buf(), library, line: line.to_string() });
                }
                target
            }
            None => line,
        };
        let path = target.split(" (0x").next().unwrap_or(target).trim();
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        } else if !path.starts_with("linux-vdso") && !path.starts_with("linux-gate") {
            return Err(unreadable());
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUST_BINARY: &str = "\tlinux-vdso.so.1 (0x00007ffd5a1f2000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f3c7a9e0000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f3c7a901000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3c7a720000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f3c7b2c0000)
";

    #[test]
    fn libraries_and_the_interpreter_are_read_and_the_vdso_skipped() {
        let paths = parse_ldd(Path::new("fiberd"), RUST_BINARY).expect("parses");
        let expected = [
            "/lib/x86_64-linux-gnu/libgcc_s.so.1",
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
        ];
        assert_eq!(paths, expected.map(PathBuf::from));
    }

    #[test]
    fn a_static_pie_needs_nothing() {
        assert_eq!(parse_ldd(Path::new("x"), "\tstatically linked\n").expect("parses"), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_missing_library_is_named() {
        let error = parse_ldd(Path::new("/b/fiberd"), "\tlibfoo.so.1 => not found\n").expect_err("missing").to_string();
        assert!(error.contains("/b/fiberd") && error.contains("cannot find libfoo.so.1"), "{error}");
    }

    #[test]
    fn an_unknown_line_is_an_error_not_a_guess() {
        let error = parse_ldd(Path::new("x"), "\tsomething odd\n").expect_err("unknown").to_string();
        assert!(error.contains("something odd"), "{error}");
    }

    #[test]
    fn the_host_loader_resolves_a_real_binary() {
        // /bin/ls is dynamically linked on every glibc host: the real loader answers.
        let paths = needed_files(Path::new("/bin/ls")).expect("ldd /bin/ls");
        assert!(paths.iter().any(|p| p.ends_with("libc.so.6")), "{paths:?}");
        assert!(paths.iter().any(|p| p.to_string_lossy().contains("ld-linux")), "{paths:?}");
        assert!(paths.iter().all(|p| p.is_file()), "{paths:?}");
    }
}
