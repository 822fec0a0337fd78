//! Fuzz target: `parse_snapshot_config` reads Hyperlight's snapshot config JSON
//! and Lampyr's metadata from an artifact pulled off a registry; it must never
//! panic, and neither may rendering its result or error.
#![no_main]

use lampyr_artifact::verify::parse_snapshot_config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_snapshot_config(data) {
        Ok((platform, metadata)) => {
            let _ = (platform.to_string(), format!("{metadata:?}"));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
