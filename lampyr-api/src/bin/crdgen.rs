//! Prints the CRDs of Lampyr's resources (CapacityGrant, Home) as multi-document YAML.
//!
//! ```sh
//! cargo run -p lampyr-api --bin crdgen > config/crd/lampyr.yaml
//! ```

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match lampyr_api::fiber::crd_yaml() {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(yaml.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}
