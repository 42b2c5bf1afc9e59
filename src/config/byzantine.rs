//! The `byzantine` section: which clients attack, and how. What an attack does is
//! [`crate::byzantine`]'s.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::check::{Problems, Validate};
use crate::network::ClientId;

/// Byzantine clients: which clients attack, and how. The set is written to `attackers.json`
/// before the first round, and to `summary.json`; every strategy of a comparison faces the
/// same attackers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ByzantineConfig {
    /// Fraction of all clients that attack, drawn from the seed; give this or `clients`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// The attacking clients' ids; give this or `fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Vec<ClientId>>,
    /// What the attackers do.
    pub attack: Attack,
}

/// What an attacker does to its upload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Attack {
    /// Sends `x - s (y - x)` for the global model `x` and its trained model `y`: its change
    /// reversed and scaled by `s`.
    SignFlip {
        /// The factor `s`.
        #[serde(default = "one")]
        scale: f64,
    },
    /// Sends `x + s (y - x)`: its change boosted by `s`.
    Scale {
        /// The factor `s`.
        scale: f64,
    },
    /// Adds Gaussian noise of standard deviation `std` to every parameter.
    Gaussian {
        /// `σ`.
        std: f64,
    },
    /// Trains on flipped labels: `C - 1 - l` for each label `l` of `C` classes.
    LabelFlip,
}

fn one() -> f64 {
    1.0
}

impl Validate for ByzantineConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        match (&self.fraction, &self.clients) {
            (Some(fraction), None) => {
                problems.require((0.0..=1.0).contains(fraction), "fraction", || {
                    format!("is {fraction}; must be in [0, 1]")
                });
            }
            (None, Some(clients)) => {
                if let Some(bad) = clients.iter().find(|&&c| c >= num_clients) {
                    problems.add(
                        "clients",
                        format!(
                            "names client {bad}; client ids run from 0 to {}",
                            num_clients.saturating_sub(1)
                        ),
                    );
                }
            }
            _ => problems.add("", "give exactly one of `fraction` and `clients`"),
        }
        let factor = match self.attack {
            Attack::SignFlip { scale } | Attack::Scale { scale } => Some(("scale", scale)),
            Attack::Gaussian { std } => Some(("std", std)),
            Attack::LabelFlip => None,
        };
        if let Some((field, value)) = factor {
            problems.at("attack", |p| p.non_negative(field, value));
        }
    }
}
