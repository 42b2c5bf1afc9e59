//! The rules a section of the experiment file breaks, collected with each field's path: what a
//! plug-in's parameters report as a built-in's do.

/// The problems found in one section, each as (field, message), the field relative to the
/// section (`mu` in `strategy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    found: Vec<(String, String)>,
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
        self.found.is_empty()
    }

    /// The problems, as (field, message), in the order they were found.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.found
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
