//! `--set path.to.field=value`: changes to the experiment file made on the command line, and
//! which problems they are the cause of.

use std::path::Path;

use serde_json::Value;

use super::ConfigError;
use super::strict_json::{self, StrictJsonError};

/// Fields that hold paths. Paths in the file are relative to the file's folder; a path given
/// on the command line is relative to the current folder, like any other command-line path.
const PATH_FIELDS: [&[&str]; 5] = [
    &["data", "dir"],
    &["data", "file"],
    &["data", "path"],
    &["data", "test_file"],
    &["partition", "file"],
];

/// One `--set`.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// As the user wrote it, for messages.
    text: String,
    /// The field's path, one key per level.
    keys: Vec<String>,
    value: Value,
}

impl Override {
    /// Reads `path.to.field=value`, ignoring spaces around the path and the value. The value is
    /// JSON when it parses, and a string otherwise; a value that starts like a JSON object or
    /// array but does not parse is an error with a hint, not a string.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError::BadOverride {
            text: text.to_string(),
            reason,
        };
        let (path, raw) = text
            .split_once('=')
            .ok_or_else(|| bad("expected path.to.field=value".to_string()))?;
        let keys: Vec<String> = path.split('.').map(|k| k.trim().to_string()).collect();
        if keys.iter().any(String::is_empty) {
            return Err(bad(format!(
                "{:?} is not a field path; expected path.to.field=value",
                path.trim()
            )));
        }
        let raw = raw.trim();
        let value = match strict_json::parse(raw) {
            Ok(value) => value,
            Err(StrictJsonError::Duplicate { path, .. }) => {
                return Err(bad(format!(
                    "{}.{path}: given twice; {}",
                    keys.join("."),
                    strict_json::ONCE
                )));
            }
            Err(StrictJsonError::Syntax(error)) if raw.starts_with(['{', '[']) => {
                let path = keys.join(".");
                return Err(bad(format!(
                    "the value looks like JSON but is not ({error}); JSON wants its keys and \
                     strings in double quotes, and the shell wants the whole in single quotes: \
                     --set '{path}={}'",
                    quote_bare_words(raw)
                )));
            }
            Err(_) => Value::String(raw.to_string()),
        };
        Ok(Self {
            text: text.to_string(),
            keys,
            value,
        })
    }

    /// As the user wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Sets the field in `document`, creating missing objects along the way. A path given as
    /// the value of a path field is made absolute against the current folder.
    pub fn apply(&self, document: &mut Value) -> Result<(), ConfigError> {
        let mut node = document;
        for key in &self.keys {
            let Value::Object(map) = node else {
                return Err(ConfigError::BadOverride {
                    text: self.text.clone(),
                    reason: format!(
                        "{} is not an object, so it has no field {key:?}",
                        self.keys.join(".")
                    ),
                });
            };
            node = map
                .entry(key.clone())
                .or_insert_with(|| Value::Object(Default::default()));
        }
        *node = self.value.clone();
        for field in PATH_FIELDS {
            let set_above =
                field.len() >= self.keys.len() && field.iter().zip(&self.keys).all(|(f, k)| f == k);
            if set_above {
                absolutize(node, &field[self.keys.len()..]);
            }
        }
        Ok(())
    }

    /// Whether the problem at `field` (a dotted path such as `faults[0].round`) may come from
    /// this override: one of the two paths contains the other.
    pub fn concerns(&self, field: &str) -> bool {
        let segments: Vec<&str> = field
            .split('.')
            .map(|s| s.split('[').next().unwrap_or(s))
            .filter(|s| !s.is_empty())
            .collect();
        !segments.is_empty()
            && self
                .keys
                .iter()
                .zip(&segments)
                .all(|(key, segment)| key == segment)
    }
}

/// Makes the string at `rest` below `node` an absolute path, against the current folder.
fn absolutize(node: &mut Value, rest: &[&str]) {
    let target = rest.iter().try_fold(node, |n, key| n.get_mut(*key));
    if let Some(Value::String(path)) = target
        && let Ok(absolute) = std::path::absolute(Path::new(path.as_str()))
    {
        *path = absolute.to_string_lossy().into_owned();
    }
}

/// `{scheme:iid}` as JSON: bare words other than numbers, `true`, `false` and `null` are
/// quoted. Text already in quotes is kept as it is.
fn quote_bare_words(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            out.push(c);
            for d in chars.by_ref() {
                out.push(d);
                if d == '"' {
                    break;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let mut word = c.to_string();
            while let Some(&d) = chars.peek() {
                if d.is_alphanumeric() || "_-.".contains(d) {
                    word.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            if ["true", "false", "null"].contains(&word.as_str()) {
                out.push_str(&word);
            } else {
                out.push_str(&format!("\"{word}\""));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(document: &mut Value, text: &str) -> Result<(), ConfigError> {
        Override::parse(text)?.apply(document)
    }

    #[test]
    fn sets_nested_fields_and_reads_json_values() {
        let mut doc = json!({"client": {"lr": 0.1}});
        apply(&mut doc, "client.lr=0.5").unwrap();
        apply(&mut doc, "eval.every=3").unwrap();
        apply(&mut doc, "backend=ndarray").unwrap();
        apply(&mut doc, " federation.rounds = 5 ").unwrap();
        assert_eq!(
            doc,
            json!({"client": {"lr": 0.5}, "eval": {"every": 3}, "backend": "ndarray",
                   "federation": {"rounds": 5}})
        );
    }

    #[test]
    fn malformed_overrides_are_rejected_with_a_reason() {
        let reason = |text| match Override::parse(text) {
            Err(ConfigError::BadOverride { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason("client.lr").contains("path.to.field=value"));
        assert!(reason("client..lr=1").contains("not a field path"));
        let hint = reason("partition={scheme:iid, alpha: 0.5}");
        assert!(
            hint.contains(r#"--set 'partition={"scheme":"iid", "alpha": 0.5}'"#),
            "{hint}"
        );
    }

    #[test]
    fn a_path_set_on_the_command_line_is_relative_to_the_current_folder() {
        let here = std::env::current_dir().unwrap();
        let mut doc = json!({});
        apply(&mut doc, "data.dir=mnist").unwrap();
        apply(&mut doc, r#"partition={"file": "p.json"}"#).unwrap();
        assert_eq!(doc["data"]["dir"], here.join("mnist").to_str().unwrap());
        assert_eq!(
            doc["partition"]["file"],
            here.join("p.json").to_str().unwrap()
        );
    }

    #[test]
    fn an_override_concerns_the_fields_above_and_below_it() {
        let set = Override::parse("partition.scheme=x").unwrap();
        assert!(set.concerns("partition"));
        assert!(set.concerns("partition.scheme"));
        assert!(!set.concerns("federation.rounds"));
        let faults = Override::parse("faults=[]").unwrap();
        assert!(faults.concerns("faults[0].round"));
    }
}
