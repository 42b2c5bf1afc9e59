//! Bring your own algorithm: FedExP (`fedexp.rs`) registered beside fedsim's built-ins, with
//! fedsim's whole command line.
//!
//! ```sh
//! cargo run --release --example custom_strategy -- strategies
//! cargo run --release --example custom_strategy -- run examples/custom_strategy/fedexp.json
//! ```

mod fedexp;

use std::process::ExitCode;

use fedsim::registry::{Origin, Registry};

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

fn main() -> ExitCode {
    let mut registry = Registry::builder().with_builtins();
    // A crate of your own says `registry.origin(fedsim::origin!())`: its name and version. An
    // example is part of fedsim's package, so it names itself.
    registry.origin(Origin::new(
        "fedsim-example-custom-strategy",
        env!("CARGO_PKG_VERSION"),
    ));
    registry
        .algorithm(fedexp::FedExP)
        .expect("fedexp is a name of its own");
    fedsim::cli::main(registry.build())
}
