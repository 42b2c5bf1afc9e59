//! The rules an experiment file breaks, collected with each field's whole path: one collector
//! ([`Problems`]) for every section, fedsim's own and a plug-in's, and one trait
//! ([`Validate`]) for the sections that know their rules.

/// The problems found in an experiment, each as (whole field path, message). A check runs
/// [`Problems::at`] the path of what it checks and names its fields relative to it (`mu` in
/// `strategy` is `strategy.mu`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    /// The path checks are running at: `""` for the whole file, `strategy`, `faults[2]`.
    at: String,
    found: Vec<(String, String)>,
}

impl Problems {
    /// No problem yet, checks running at the top of the file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `field` (relative to where the check runs; `""` for that place itself)
    /// breaks a rule, with `message` saying what was expected.
    pub fn add(&mut self, field: impl AsRef<str>, message: impl Into<String>) {
        let path = join(&self.at, field.as_ref());
        self.found.push((path, message.into()));
    }

    /// Records that the field at the whole path `path`, outside what is being checked, breaks
    /// one of its rules (the synthetic data set's limit on `federation.num_clients`).
    pub fn add_elsewhere(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.found.push((path.into(), message.into()));
    }

    /// Records `message` on `field` unless `ok`.
    pub fn require(&mut self, ok: bool, field: &str, message: impl FnOnce() -> String) {
        if !ok {
            self.add(field, message());
        }
    }

    /// Runs `check` at `field` under the current place, so that it names its fields relative
    /// to `field`.
    pub fn at(&mut self, field: &str, check: impl FnOnce(&mut Problems)) {
        let outer = std::mem::take(&mut self.at);
        self.at = join(&outer, field);
        check(self);
        self.at = outer;
    }

    /// Checks that `value` is a finite number greater than 0.
    pub fn positive(&mut self, field: &str, value: f64) {
        self.require(value > 0.0 && value.is_finite(), field, || {
            format!("is {value}; must be greater than 0")
        });
    }

    /// Checks that `value` is a finite number of at least 0.
    pub fn non_negative(&mut self, field: &str, value: f64) {
        self.require(value >= 0.0 && value.is_finite(), field, || {
            format!("is {value}; must be at least 0")
        });
    }

    /// Checks that `value` lies in `[0, below)`.
    pub fn fraction_below(&mut self, field: &str, value: f64, below: f64) {
        self.require((0.0..below).contains(&value), field, || {
            format!("is {value}; must be in [0, {below})")
        });
    }

    /// Checks that a count is at least 1.
    pub fn at_least_one(&mut self, field: &str, value: u64) {
        self.require(value >= 1, field, || "must be at least 1".to_string());
    }

    /// Adds problems found elsewhere, each with its whole path.
    pub fn extend(&mut self, found: impl IntoIterator<Item = (String, String)>) {
        self.found.extend(found);
    }

    /// How many problems were found so far: a check that compares it before and after its
    /// rules knows whether they held.
    pub fn count(&self) -> usize {
        self.found.len()
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The problems, as (whole field path, message), in the order they were found.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.found
    }
}

/// `field` under `place`: `strategy.mu`, `faults[0]`, or either alone where the other is empty.
fn join(place: &str, field: &str) -> String {
    match (place.is_empty(), field.is_empty()) {
        (true, _) => field.to_string(),
        (false, true) => place.to_string(),
        (false, false) if field.starts_with('[') => format!("{place}{field}"),
        (false, false) => format!("{place}.{field}"),
    }
}

/// A part of the experiment file that knows its rules: every section, fedsim's own, checked
/// into one [`Problems`].
pub trait Validate {
    /// What else its rules depend on: the number of clients, the topology, nothing (`()`).
    type Context<'a>;

    /// Adds to `problems` every rule it breaks given `context`, its fields relative to where
    /// `problems` runs.
    fn validate(&self, context: Self::Context<'_>, problems: &mut Problems);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_names_the_field_by_its_whole_path_and_the_range() {
        let mut problems = Problems::new();
        problems.at("strategy", |p| {
            p.positive("lr", 0.0);
            p.positive("ok", 1.0);
            p.non_negative("mu", f64::NAN);
            p.fraction_below("trim", 0.5, 0.5);
            p.fraction_below("fine", 0.0, 0.5);
            p.add("", "as a whole");
            p.add("hidden[1]", "a list's item");
        });
        problems.at("faults[2]", |p| p.at_least_one("round", 0));
        problems.add_elsewhere("federation.num_clients", "too many");
        let paths: Vec<String> = problems
            .clone()
            .into_vec()
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(
            paths,
            [
                "strategy.lr",
                "strategy.mu",
                "strategy.trim",
                "strategy",
                "strategy.hidden[1]",
                "faults[2].round",
                "federation.num_clients"
            ]
        );
        assert_eq!(
            problems.into_vec()[..2],
            [
                (
                    "strategy.lr".to_string(),
                    "is 0; must be greater than 0".to_string()
                ),
                (
                    "strategy.mu".to_string(),
                    "is NaN; must be at least 0".to_string()
                ),
            ]
        );
    }
}
