//! The `partition` section: how the training set is split among clients.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How the training set is split among clients: a scheme, any name `fedsim schemes` lists,
/// with its parameters beside it (`{"scheme": "dirichlet", "alpha": 0.5}`, optionally with the
/// split's own `"seed"`), or a saved partition (`{"file": "p.json"}`, the `file` scheme).
/// Once an experiment is loaded, `params` holds every parameter, defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionConfig {
    /// The scheme's registered name.
    pub scheme: String,
    /// Its parameters, by field name.
    pub params: Map<String, Value>,
    /// The seed of the split's random draws (and of the clients' held-out samples); `None`,
    /// the default, uses the experiment seed. Setting it holds the split fixed while `seed`
    /// varies the training.
    pub seed: Option<u64>,
}

/// The scheme a partition file is read with, written as `{"file": …}` alone.
const FILE: &str = "file";

impl Default for PartitionConfig {
    /// Balanced IID.
    fn default() -> Self {
        Self::scheme("iid")
    }
}

impl PartitionConfig {
    /// The scheme `name` with no parameter given: each takes its default.
    pub fn scheme(name: &str) -> Self {
        Self {
            scheme: name.to_string(),
            params: Map::new(),
            seed: None,
        }
    }

    /// The seed the split draws from, given the experiment seed.
    pub fn seed_or(&self, experiment_seed: u64) -> u64 {
        self.seed.unwrap_or(experiment_seed)
    }

    /// The partition as one short value, as reports label it: the scheme, with `parts` (its
    /// parameters as the scheme shows them) and the seed, where set, in brackets:
    /// `dirichlet(0.5, seed=7)`, `iid`.
    pub fn label(&self, mut parts: Vec<String>) -> String {
        if let Some(seed) = self.seed {
            parts.push(format!("seed={seed}"));
        }
        if parts.is_empty() {
            self.scheme.clone()
        } else {
            format!("{}({})", self.scheme, parts.join(", "))
        }
    }
}

impl schemars::JsonSchema for PartitionConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PartitionConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        super::registered_section("scheme")
    }
}

impl Serialize for PartitionConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = Map::new();
        if self.scheme != FILE {
            fields.insert("scheme".into(), Value::String(self.scheme.clone()));
        }
        fields.extend(self.params.clone());
        if let Some(seed) = self.seed {
            fields.insert("seed".into(), seed.into());
        }
        fields.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PartitionConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let Value::Object(mut params) = Value::deserialize(deserializer)? else {
            return Err(D::Error::custom(
                "expected an object with a `scheme` and its parameters, or a `file`",
            ));
        };
        let seed = match params.remove("seed") {
            None | Some(Value::Null) => None,
            Some(seed) => Some(seed.as_u64().ok_or_else(|| {
                D::Error::custom(format!(
                    "`seed` must be a whole number of at least 0, not {seed}"
                ))
            })?),
        };
        let scheme = match params.remove("scheme") {
            Some(Value::String(scheme)) => scheme,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "`scheme` must be a string, not {other}"
                )));
            }
            None if params.contains_key(FILE) => FILE.to_string(),
            None => {
                return Err(D::Error::custom(
                    "expected `scheme` (`fedsim schemes` lists them) or `file`",
                ));
            }
        };
        Ok(Self {
            scheme,
            params,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bare_file_is_the_file_scheme_and_is_written_back_bare() {
        let config: PartitionConfig = serde_json::from_value(json!({"file": "p.json"})).unwrap();
        assert_eq!(config.scheme, "file");
        assert_eq!(config.params["file"], "p.json");
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"file": "p.json"})
        );
    }

    #[test]
    fn a_scheme_takes_its_own_seed_and_writes_it_back() {
        let written = json!({"scheme": "shards", "num_shards": 200, "seed": 4});
        let config: PartitionConfig = serde_json::from_value(written.clone()).unwrap();
        assert_eq!((config.seed_or(9), config.scheme.as_str()), (4, "shards"));
        assert_eq!(serde_json::to_value(&config).unwrap(), written);
        assert_eq!(PartitionConfig::default().seed_or(9), 9);
        assert_eq!(config.label(vec!["200".into()]), "shards(200, seed=4)");
        assert_eq!(PartitionConfig::default().label(Vec::new()), "iid");
        for (value, expected) in [
            (json!({"alpha": 1}), "expected `scheme`"),
            (
                json!({"scheme": "iid", "seed": -1}),
                "`seed` must be a whole number",
            ),
            (json!({"scheme": 3}), "`scheme` must be a string"),
        ] {
            let error = serde_json::from_value::<PartitionConfig>(value).unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
    }
}
