//! Bring your own model: NIID-Bench's LeNet-style CNN (`lenet.rs`) registered beside fedsim's
//! built-ins, with fedsim's whole command line.
//!
//! ```sh
//! cargo run --release --example custom_model -- models
//! cargo run --release --example custom_model -- run examples/custom_model/lenet.json
//! ```

mod lenet;

use std::process::ExitCode;

use fedsim::registry::{Origin, Registry};

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

fn main() -> ExitCode {
    let mut registry = Registry::builder().with_builtins();
    // A crate of your own says `registry.origin(fedsim::origin!())`: its name and version. An
    // example is part of fedsim's package, so it names itself.
    registry.origin(Origin::new(
        "fedsim-example-custom-model",
        env!("CARGO_PKG_VERSION"),
    ));
    registry
        .model(lenet::LeNetModel)
        .expect("lenet is a name of its own");
    fedsim::cli::main(registry.build())
}
