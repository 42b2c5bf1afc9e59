//! fedsim's whole command line, with this crate's algorithm registered beside the built-ins:
//!
//! ```sh
//! cargo run --release -- strategies
//! cargo run --release -- run experiment.json
//! cargo test --release          # the conformance kit over the algorithm
//! ```

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

fn main() -> ExitCode {
    fedsim::cli::main(my_fl_algorithm::registry())
}
