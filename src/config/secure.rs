//! The `secure_aggregation` section: the server reads only the sum of the round's updates
//! (Bonawitz et al. 2017, simulated; the protocol is [`crate::secure`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::FederationConfig;
use super::check::{Problems, Validate};

/// The most clients a securely aggregated federation may have: the downlink lists a round's
/// participants by id in `f32`, which holds every integer up to 2^24.
const MAX_CLIENTS: usize = 1 << 24;

/// The default bound on each value of a client's weighted change.
const DEFAULT_RANGE: f64 = 1.0;

/// Secure aggregation: each client quantises its change to the model it was sent (weighted
/// by its share of the samples) into the ring of 32-bit integers and masks it; the server
/// sums the masked vectors, asks the survivors for the shares that take the masks off, and
/// reads the mean change from the sum alone. The key exchange and the unmasking are charged
/// on the links and the simulated clock; a round in which fewer than `threshold` clients
/// send their inputs ends without a new model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecureAggregationConfig {
    /// Clients whose shares unmask a round's sum, 2 to `clients_per_round`; by default
    /// ⌊2/3 · clients_per_round⌋ + 1, as Bonawitz et al. suggest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<usize>,
    /// Each value of a client's weighted change is clamped to `[−range, range]` before it is
    /// quantised; the ring's resolution is `range / ⌊(2^31 − 1) / n⌋` in a round of `n` clients.
    #[serde(default = "default_range")]
    pub range: f64,
}

fn default_range() -> f64 {
    DEFAULT_RANGE
}

impl SecureAggregationConfig {
    /// The threshold in a federation sampling `clients_per_round`.
    pub fn threshold(&self, clients_per_round: usize) -> usize {
        self.threshold.unwrap_or(2 * clients_per_round / 3 + 1)
    }
}

impl Validate for SecureAggregationConfig {
    type Context<'a> = &'a FederationConfig;

    fn validate(&self, federation: &FederationConfig, problems: &mut Problems) {
        problems.positive("range", self.range);
        // The downlink lists the round's participants as `f32`, exact to 2^24.
        if federation.num_clients > MAX_CLIENTS {
            problems.add_elsewhere(
                "federation.num_clients",
                format!(
                    "is {}; secure aggregation lists a round's clients by id, which it can for \
                     federations of up to {MAX_CLIENTS} clients",
                    federation.num_clients
                ),
            );
        }
        let per_round = federation.round_size();
        let threshold = self.threshold(per_round);
        problems.require((2..=per_round).contains(&threshold), "threshold", || {
            format!(
                "is {threshold}; must be 2 to federation.clients_per_round ({per_round}): \
                     that many clients' shares unmask a round"
            )
        });
    }
}
