//! The `asynchronous` section: a federation without rounds, whose server applies each update
//! as it arrives on the simulated clock.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::check::{Problems, Validate};

/// An asynchronous federation. The server keeps `concurrency` clients training; when one's
/// update arrives (on the simulated clock, ties broken by client id) it hands it to the
/// algorithm's asynchronous half and dispatches the next client, drawn from the seed among
/// those online and not training. `federation.rounds` then counts server steps, `eval.every`
/// counts server steps, and `federation.clients_per_round` is left out. Only algorithms with an
/// asynchronous rule run so (`fedsim strategies` says which), flat or under relaying
/// schedulers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AsynchronousConfig {
    /// Clients training at once, 1 to `federation.num_clients`.
    pub concurrency: usize,
}

impl Validate for AsynchronousConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        problems.require(
            (1..=num_clients).contains(&self.concurrency),
            "concurrency",
            || {
                format!(
                    "is {}; must be between 1 and federation.num_clients ({num_clients})",
                    self.concurrency
                )
            },
        );
    }
}
