//! The rules a section of the experiment file breaks, collected with each field's path: what a
//! plug-in's parameters report as a built-in's do.

/// The problems found in one section, each as (field, message), the field relative to the
/// section (`mu` in `strategy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    found: Vec<(String, String)>,
    /// Problems a section's check finds in another section's fields (the synthetic data set's
    /// limit on `federation.num_clients`), each with its whole path.
    elsewhere: Vec<(String, String)>,
}

impl Problems {
    /// No problem yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `field` breaks a rule, with `message` saying what was expected.
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.found.push((field.into(), message.into()));
    }

    /// Records that the field at the whole path `path`, outside the section being checked,
    /// breaks one of the section's rules.
    pub fn add_elsewhere(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.elsewhere.push((path.into(), message.into()));
    }

    /// Checks that `value` is a finite number greater than 0.
    pub fn positive(&mut self, field: &str, value: f64) {
        if !(value > 0.0 && value.is_finite()) {
            self.add(field, format!("is {value}; must be greater than 0"));
        }
    }

    /// Checks that `value` is a finite number of at least 0.
    pub fn non_negative(&mut self, field: &str, value: f64) {
        if !(value >= 0.0 && value.is_finite()) {
            self.add(field, format!("is {value}; must be at least 0"));
        }
    }

    /// Checks that `value` lies in `[0, below)`.
    pub fn fraction_below(&mut self, field: &str, value: f64, below: f64) {
        if !(0.0..below).contains(&value) {
            self.add(field, format!("is {value}; must be in [0, {below})"));
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty() && self.elsewhere.is_empty()
    }

    /// The problems, as (field, message), in the order they were found, fields relative to the
    /// section; those found elsewhere follow with their whole paths.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.found.into_iter().chain(self.elsewhere).collect()
    }

    /// The problems of the section at `section` (`strategy`), as (whole path, message): fields
    /// become `section.field`, the section itself `section`.
    pub fn within(self, section: &str) -> Vec<(String, String)> {
        let inside = self.found.into_iter().map(|(field, message)| {
            let path = if field.is_empty() {
                section.to_string()
            } else {
                format!("{section}.{field}")
            };
            (path, message)
        });
        inside.chain(self.elsewhere).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_names_the_field_and_the_range() {
        let mut problems = Problems::new();
        problems.positive("lr", 0.0);
        problems.positive("ok", 1.0);
        problems.non_negative("mu", f64::NAN);
        problems.fraction_below("trim", 0.5, 0.5);
        problems.fraction_below("fine", 0.0, 0.5);
        assert_eq!(
            problems.into_vec(),
            [
                ("lr".to_string(), "is 0; must be greater than 0".to_string()),
                ("mu".to_string(), "is NaN; must be at least 0".to_string()),
                (
                    "trim".to_string(),
                    "is 0.5; must be in [0, 0.5)".to_string()
                ),
            ]
        );
    }
}
