//! The `partition` section: how the training set is split among clients.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the training set is split among clients. Written either with a `scheme`
/// (`{"scheme": "dirichlet", "alpha": 0.5}`, optionally with its own `"seed"`) or as a saved
/// partition (`{"file": "p.json"}`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(try_from = "RawPartition", into = "RawPartition")]
pub struct PartitionConfig {
    /// The scheme, or the file.
    pub scheme: PartitionScheme,
    /// The seed of the split's random draws (and of the clients' held-out samples); `None`,
    /// the default, uses the experiment seed. Setting it holds the split fixed while `seed`
    /// varies the training.
    pub seed: Option<u64>,
}

impl PartitionConfig {
    /// The seed the split draws from, given the experiment seed.
    pub fn seed_or(&self, experiment_seed: u64) -> u64 {
        self.seed.unwrap_or(experiment_seed)
    }
}

/// How the training set is split among clients.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum PartitionScheme {
    /// Shuffle and deal out equal parts.
    #[default]
    Iid,
    /// Label skew: each class is split among clients by shares drawn from Dir(`alpha`);
    /// redrawn until every client has at least `min_size` samples.
    Dirichlet {
        /// Concentration; small values (0.1) give a few classes per client, large (100) near IID.
        alpha: f64,
        /// Smallest acceptable client (default 10 samples).
        min_size: usize,
    },
    /// The FedAvg paper's split: sort by label, cut into `num_shards` equal shards, give each
    /// client `num_shards / num_clients` of them.
    Shards {
        /// Number of shards; a multiple of `federation.num_clients`.
        num_shards: usize,
    },
    /// Label-quantity skew (NIID-Bench's `#C=k`): each client holds `labels_per_client`
    /// distinct labels, and each label's samples are split equally among its holders.
    Labels {
        /// Distinct labels per client; at least 1, at most the number of labels.
        labels_per_client: usize,
    },
    /// Quantity skew: client sizes proportional to LogNormal(0, `sigma`) draws, labels IID.
    Quantity {
        /// Spread of the sizes; 0 gives equal clients, 1 and more a few large ones.
        sigma: f64,
    },
    /// The clients the data set itself defines (the users of FedProx's synthetic data); the
    /// federation must have as many clients as the data set has.
    Natural,
    /// A partition file written by an earlier run (`partition.json`).
    File {
        /// Path of the file; relative paths are resolved against the experiment file's folder.
        file: PathBuf,
    },
}

/// The default smallest client for the Dirichlet scheme.
const DEFAULT_MIN_SIZE: usize = 10;

/// The partition as one short value, its scheme with its parameters in brackets, as reports
/// label it: `iid`, `dirichlet(0.5)`, `labels(2)`, `shards(200)`, `file(p.json)`. Optional
/// settings follow by name where they are set (`dirichlet(0.5, min_size=20, seed=7)`); numbers
/// read as JSON writes them (`1.0`), as every other value of a report's labels does.
impl std::fmt::Display for PartitionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let number = |value: f64| serde_json::Value::from(value).to_string();
        let (scheme, mut parts) = match &self.scheme {
            PartitionScheme::Iid => ("iid", Vec::new()),
            PartitionScheme::Dirichlet { alpha, min_size } => {
                let mut parts = vec![number(*alpha)];
                if *min_size != DEFAULT_MIN_SIZE {
                    parts.push(format!("min_size={min_size}"));
                }
                ("dirichlet", parts)
            }
            PartitionScheme::Shards { num_shards } => ("shards", vec![num_shards.to_string()]),
            PartitionScheme::Labels { labels_per_client } => {
                ("labels", vec![labels_per_client.to_string()])
            }
            PartitionScheme::Quantity { sigma } => ("quantity", vec![number(*sigma)]),
            PartitionScheme::Natural => ("natural", Vec::new()),
            PartitionScheme::File { file } => ("file", vec![file.display().to_string()]),
        };
        if let Some(seed) = self.seed {
            parts.push(format!("seed={seed}"));
        }
        if parts.is_empty() {
            f.write_str(scheme)
        } else {
            write!(f, "{scheme}({})", parts.join(", "))
        }
    }
}

/// The partition object as written in the file, before its fields are checked together.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    #[serde(skip_serializing_if = "Option::is_none")]
    scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_size: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_shards: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels_per_client: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sigma: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
}

impl TryFrom<RawPartition> for PartitionConfig {
    type Error = String;

    fn try_from(raw: RawPartition) -> Result<Self, String> {
        let scheme = match (&raw.scheme, &raw.file) {
            (Some(_), Some(_)) => {
                return Err("give either `scheme` or `file`, not both".to_string());
            }
            (None, Some(_)) => "file",
            (Some(scheme), None) => scheme.as_str(),
            (None, None) => {
                return Err(
                    "expected `scheme` (\"iid\", \"dirichlet\", \"shards\", \"labels\", \"quantity\", \"natural\") or `file`"
                        .to_string(),
                );
            }
        };
        let allowed: &[&str] = match scheme {
            "iid" => &["seed"],
            "dirichlet" => &["alpha", "min_size", "seed"],
            "shards" => &["num_shards", "seed"],
            "labels" => &["labels_per_client", "seed"],
            "quantity" => &["sigma", "seed"],
            "natural" => &[],
            "file" => &["file"],
            other => {
                return Err(format!(
                    "unknown scheme {other:?}; expected \"iid\", \"dirichlet\", \"shards\", \"labels\", \"quantity\" or \"natural\""
                ));
            }
        };
        let present = [
            ("alpha", raw.alpha.is_some()),
            ("min_size", raw.min_size.is_some()),
            ("num_shards", raw.num_shards.is_some()),
            ("labels_per_client", raw.labels_per_client.is_some()),
            ("sigma", raw.sigma.is_some()),
            ("file", raw.file.is_some()),
            ("seed", raw.seed.is_some()),
        ];
        if let Some((field, _)) = present
            .iter()
            .find(|(field, set)| *set && !allowed.contains(field))
        {
            return Err(format!("`{field}` does not apply to scheme {scheme:?}"));
        }
        fn required<T>(value: Option<T>, scheme: &str, field: &str) -> Result<T, String> {
            value.ok_or_else(|| format!("scheme {scheme:?} needs `{field}`"))
        }
        let parsed = match scheme {
            "iid" => PartitionScheme::Iid,
            "dirichlet" => PartitionScheme::Dirichlet {
                alpha: required(raw.alpha, scheme, "alpha")?,
                min_size: raw.min_size.unwrap_or(DEFAULT_MIN_SIZE),
            },
            "shards" => PartitionScheme::Shards {
                num_shards: required(raw.num_shards, scheme, "num_shards")?,
            },
            "labels" => PartitionScheme::Labels {
                labels_per_client: required(raw.labels_per_client, scheme, "labels_per_client")?,
            },
            "quantity" => PartitionScheme::Quantity {
                sigma: required(raw.sigma, scheme, "sigma")?,
            },
            "natural" => PartitionScheme::Natural,
            _ => PartitionScheme::File {
                file: required(raw.file, scheme, "file")?,
            },
        };
        Ok(PartitionConfig {
            scheme: parsed,
            seed: raw.seed,
        })
    }
}

impl From<PartitionConfig> for RawPartition {
    fn from(config: PartitionConfig) -> Self {
        let scheme = |name: &str| Some(name.to_string());
        let raw = match config.scheme {
            PartitionScheme::Iid => RawPartition {
                scheme: scheme("iid"),
                ..Default::default()
            },
            PartitionScheme::Dirichlet { alpha, min_size } => RawPartition {
                scheme: scheme("dirichlet"),
                alpha: Some(alpha),
                min_size: Some(min_size),
                ..Default::default()
            },
            PartitionScheme::Shards { num_shards } => RawPartition {
                scheme: scheme("shards"),
                num_shards: Some(num_shards),
                ..Default::default()
            },
            PartitionScheme::Labels { labels_per_client } => RawPartition {
                scheme: scheme("labels"),
                labels_per_client: Some(labels_per_client),
                ..Default::default()
            },
            PartitionScheme::Quantity { sigma } => RawPartition {
                scheme: scheme("quantity"),
                sigma: Some(sigma),
                ..Default::default()
            },
            PartitionScheme::Natural => RawPartition {
                scheme: scheme("natural"),
                ..Default::default()
            },
            PartitionScheme::File { file } => RawPartition {
                file: Some(file),
                ..Default::default()
            },
        };
        RawPartition {
            seed: config.seed,
            ..raw
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn partition_accepts_a_bare_file() {
        let config: PartitionConfig = serde_json::from_value(json!({"file": "p.json"})).unwrap();
        assert_eq!(
            config.scheme,
            PartitionScheme::File {
                file: "p.json".into()
            }
        );
    }

    #[test]
    fn partition_rejects_fields_of_another_scheme() {
        let err = serde_json::from_value::<PartitionConfig>(json!({"scheme": "iid", "alpha": 1}))
            .unwrap_err();
        assert!(err.to_string().contains("`alpha` does not apply"), "{err}");
    }

    #[test]
    fn dirichlet_min_size_defaults() {
        let config: PartitionConfig =
            serde_json::from_value(json!({"scheme": "dirichlet", "alpha": 0.3})).unwrap();
        assert_eq!(
            config.scheme,
            PartitionScheme::Dirichlet {
                alpha: 0.3,
                min_size: DEFAULT_MIN_SIZE
            }
        );
        assert_eq!(config.seed_or(9), 9);
    }

    #[test]
    fn a_partition_reads_as_its_scheme_with_its_parameters() {
        let shown = |value| {
            serde_json::from_value::<PartitionConfig>(value)
                .unwrap()
                .to_string()
        };
        assert_eq!(shown(json!({"scheme": "iid"})), "iid");
        assert_eq!(
            shown(json!({"scheme": "dirichlet", "alpha": 0.5})),
            "dirichlet(0.5)"
        );
        assert_eq!(
            shown(json!({"scheme": "dirichlet", "alpha": 1, "min_size": 20, "seed": 7})),
            "dirichlet(1.0, min_size=20, seed=7)"
        );
        assert_eq!(
            shown(json!({"scheme": "labels", "labels_per_client": 1})),
            "labels(1)"
        );
        assert_eq!(
            shown(json!({"scheme": "shards", "num_shards": 200})),
            "shards(200)"
        );
        assert_eq!(
            shown(json!({"scheme": "quantity", "sigma": 0.5})),
            "quantity(0.5)"
        );
        assert_eq!(shown(json!({"scheme": "natural"})), "natural");
        assert_eq!(shown(json!({"file": "p.json"})), "file(p.json)");
    }

    #[test]
    fn a_scheme_takes_its_own_seed_and_writes_it_back() {
        let written = json!({"scheme": "shards", "num_shards": 200, "seed": 4});
        let config: PartitionConfig = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(config.seed_or(9), 4);
        assert_eq!(serde_json::to_value(&config).unwrap(), written);
        let err = serde_json::from_value::<PartitionConfig>(json!({"file": "p.json", "seed": 4}))
            .unwrap_err();
        assert!(err.to_string().contains("`seed` does not apply"), "{err}");
    }
}
