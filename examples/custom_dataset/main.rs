//! Bring your own data: a data set made in code (`blobs.rs`), each of its sites a natural
//! client, registered beside fedsim's built-ins, with fedsim's whole command line.
//!
//! ```sh
//! cargo run --release --example custom_dataset -- datasets
//! cargo run --release --example custom_dataset -- run examples/custom_dataset/blobs.json
//! ```

mod blobs;

use std::process::ExitCode;

use fedsim::registry::{Origin, Registry};

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

fn main() -> ExitCode {
    let mut registry = Registry::builder().with_builtins();
    // A crate of your own says `registry.origin(fedsim::origin!())`: its name and version. An
    // example is part of fedsim's package, so it names itself.
    registry.origin(Origin::new(
        "fedsim-example-custom-dataset",
        env!("CARGO_PKG_VERSION"),
    ));
    registry
        .data_set(blobs::Blobs)
        .expect("blobs is a name of its own");
    fedsim::cli::main(registry.build())
}
