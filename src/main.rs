//! The `fedsim` binary: the library's command line with fedsim's built-in components.

use std::process::ExitCode;

use fedsim::registry::Registry;

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

fn main() -> ExitCode {
    fedsim::cli::main(Registry::builtin())
}
