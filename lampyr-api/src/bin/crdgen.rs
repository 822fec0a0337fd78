//! Prints the CRDs of Lampyr's resources (CapacityGrant, Home, GrantPolicy) as
//! multi-document YAML; with `eventgrid`, the AzureEventGridSource CRD.
//!
//! ```sh
//! cargo run -p lampyr-api --bin crdgen > config/crd/lampyr.yaml
//! cargo run -p lampyr-api --bin crdgen eventgrid > config/crd/eventgrid.yaml
//! ```

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let generated = match std::env::args().nth(1).as_deref() {
        None => lampyr_api::fiber::crd_yaml(),
        Some("eventgrid") => lampyr_api::eventgrid::crd_yaml(),
        Some(other) => {
            eprintln!("crdgen: unknown CRD set {other:?}; give none (Lampyr's fiber CRDs) or `eventgrid`");
            return ExitCode::FAILURE;
        }
    };
    let yaml = match generated {
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
