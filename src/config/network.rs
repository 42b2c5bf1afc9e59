//! The `network` section: the simulated links and compute speeds that drive the virtual clock.

use rand::RngExt;
use rand_distr::{Distribution, LogNormal};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::check::{Problems, Validate};
use crate::network::{ClientId, LinkProfile};
use crate::seed::{Purpose, stream};

/// The simulated network and compute speeds that drive the virtual clock. Everything defaults
/// to instant: then every round takes zero simulated seconds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// The link between the server and each scheduler (hierarchical topology only).
    #[serde(default)]
    pub server_link: LinkProfile,
    /// Each client's link to its parent: the server (flat) or its scheduler.
    #[serde(default)]
    pub client_link: LinkProfile,
    /// Client links that differ from `client_link`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_overrides: Vec<ClientLinkOverride>,
    /// How fast clients train.
    #[serde(default)]
    pub compute: ComputeConfig,
}

/// A link profile for a few clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientLinkOverride {
    /// The clients this profile applies to.
    pub clients: Vec<ClientId>,
    /// Their one-way latency in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
    /// Their bandwidth in megabits per second; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

impl ClientLinkOverride {
    /// The profile these clients' links have.
    pub fn link(&self) -> LinkProfile {
        LinkProfile {
            latency_ms: self.latency_ms,
            bandwidth_mbps: self.bandwidth_mbps,
        }
    }
}

/// Simulated training speed of each client, in samples per second (local epochs times the
/// client's samples make the work of a round).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ComputeConfig {
    /// Training takes no simulated time.
    #[default]
    Instant,
    /// Every client trains at the same speed.
    Fixed {
        /// Samples per second.
        samples_per_second: f64,
    },
    /// Each client's speed is drawn once, uniformly between `min` and `max`.
    Uniform {
        /// Slowest speed, samples per second.
        min: f64,
        /// Fastest speed, samples per second.
        max: f64,
    },
    /// Each client's speed is drawn once from a log-normal distribution: many clients near
    /// `median`, a long tail of slow and fast ones.
    LogNormal {
        /// Median speed, samples per second.
        median: f64,
        /// Standard deviation of the speed's logarithm.
        sigma: f64,
    },
}

impl ComputeConfig {
    /// Every client's speed in samples per second (infinite when instant), each drawn from
    /// the client's own stream.
    pub fn speeds(&self, seed: u64, num_clients: usize) -> Vec<f64> {
        (0..num_clients)
            .map(|client| {
                let mut rng = stream(seed, Purpose::COMPUTE_SPEED, 0, client);
                match *self {
                    ComputeConfig::Instant => f64::INFINITY,
                    ComputeConfig::Fixed { samples_per_second } => samples_per_second,
                    ComputeConfig::Uniform { min, max } if min == max => min,
                    ComputeConfig::Uniform { min, max } => rng.random_range(min..max),
                    ComputeConfig::LogNormal { median, sigma } => {
                        LogNormal::new(median.ln(), sigma)
                            .expect("validated: sigma >= 0")
                            .sample(&mut rng)
                    }
                }
            })
            .collect()
    }
}

impl Validate for NetworkConfig {
    /// `federation.num_clients`.
    type Context<'a> = usize;

    fn validate(&self, num_clients: usize, problems: &mut Problems) {
        problems.at("server_link", |p| check_link(&self.server_link, p));
        problems.at("client_link", |p| check_link(&self.client_link, p));
        for (i, link) in self.client_overrides.iter().enumerate() {
            problems.at(&format!("client_overrides[{i}]"), |p| {
                check_link(&link.link(), p);
                if let Some(client) = link.clients.iter().find(|&&c| c >= num_clients) {
                    p.add(
                        "clients",
                        format!("names client {client}, but there are {num_clients}"),
                    );
                }
            });
        }
        problems.at("compute", |p| match self.compute {
            ComputeConfig::Instant => {}
            ComputeConfig::Fixed { samples_per_second } => {
                p.positive("samples_per_second", samples_per_second);
            }
            ComputeConfig::Uniform { min, max } => {
                p.positive("min", min);
                p.positive("max", max);
                p.require(min <= max, "max", || {
                    format!("is {max}; must be at least min, {min}")
                });
            }
            ComputeConfig::LogNormal { median, sigma } => {
                p.positive("median", median);
                p.non_negative("sigma", sigma);
            }
        });
    }
}

/// Checks a link profile: a latency of at least 0, a bandwidth above 0 where one is set.
fn check_link(link: &LinkProfile, problems: &mut Problems) {
    problems.non_negative("latency_ms", link.latency_ms);
    if let Some(mbps) = link.bandwidth_mbps {
        problems.positive("bandwidth_mbps", mbps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compute_speeds_parse_by_kind() {
        let config: ComputeConfig =
            serde_json::from_value(json!({"kind": "lognormal", "median": 500, "sigma": 0.5}))
                .unwrap();
        assert_eq!(
            config,
            ComputeConfig::LogNormal {
                median: 500.0,
                sigma: 0.5
            }
        );
    }
}
