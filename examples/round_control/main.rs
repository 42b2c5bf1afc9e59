//! Every control point of a round, each in a plug-in of its own, registered beside fedsim's
//! built-ins with fedsim's whole command line:
//!
//! - `clip_noise.rs`, the server's rule: clipped changes and seeded noise (DP-FedAvg's server);
//! - `loss_first.rs`, who trains: Power-of-Choice's probe and selection;
//! - `contrastive.rs`, how a client trains: MOON's loss term, on LeNet (`lenet.rs` of the
//!   custom-model example), whose representation it reads;
//! - `best_of_k.rs`, what each client is sent: IFCA's `k` models, each client training the
//!   one that fits it.
//!
//! ```sh
//! cargo run --release --example round_control -- run examples/round_control/clip_noise.json
//! cargo run --release --example round_control -- run examples/round_control/loss_first.json
//! cargo run --release --example round_control -- run examples/round_control/contrastive.json
//! cargo run --release --example round_control -- run examples/round_control/best_of_k.json
//! ```

mod best_of_k;
mod clip_noise;
mod contrastive;
#[path = "../custom_model/lenet.rs"]
mod lenet;
mod loss_first;

use std::process::ExitCode;

use fedsim::registry::{Origin, Registry, RegistryBuilder};

#[global_allocator]
static ALLOCATOR: fedsim::cli::Allocator = fedsim::cli::Allocator;

/// The built-ins and the four plug-ins (and LeNet, which the contrastive one trains).
pub fn registry() -> RegistryBuilder {
    let mut registry = Registry::builder().with_builtins();
    registry.origin(Origin::new(
        "fedsim-example-round-control",
        env!("CARGO_PKG_VERSION"),
    ));
    registry
        .algorithm(clip_noise::ClipNoise)
        .expect("a name of its own");
    registry
        .algorithm(loss_first::LossFirst)
        .expect("a name of its own");
    registry
        .algorithm(contrastive::Contrastive)
        .expect("a name of its own");
    registry
        .algorithm(best_of_k::BestOfK)
        .expect("a name of its own");
    registry
        .model(lenet::LeNetModel)
        .expect("a name of its own");
    registry
}

fn main() -> ExitCode {
    fedsim::cli::main(registry().build())
}
