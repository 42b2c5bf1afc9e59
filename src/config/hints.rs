//! Messages for a person: the nearest valid name for a misspelt field or variant, and what the
//! file should hold instead of the name of an internal type.

/// How alike (Jaro-Winkler) a misspelling and a valid name must be to suggest the name, unless
/// one edit turns one into the other: close enough for `hier`/`hierarchical`, not for
/// `fedprox`/`fedavg`.
const SIMILAR: f64 = 0.85;

/// Rewrites a parse error's message: appends `did you mean "x"?` when it names an unknown
/// name close to one of the names it expects, and replaces internal type names.
pub fn explain(message: &str) -> String {
    let message = without_type_names(message);
    match suggestion(&message) {
        Some(name) => format!("{message}; did you mean \"{name}\"?"),
        None => message,
    }
}

/// The valid name nearest to the unknown one in a message of the form
/// `unknown <what> "name" … expected "a", "b" or "c"` (backticks or double quotes).
fn suggestion(message: &str) -> Option<&str> {
    let after_unknown = &message[message.find("unknown ")?..];
    let unknown = quoted(after_unknown).next()?;
    let expected = &after_unknown[after_unknown.find("expected")?..];
    quoted(expected)
        .map(|name| {
            let edits = strsim::damerau_levenshtein(unknown, name);
            (edits, strsim::jaro_winkler(unknown, name), name)
        })
        .filter(|&(edits, similarity, _)| edits <= 1 || similarity >= SIMILAR)
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .map(|(_, _, name)| name)
}

/// The names quoted in `text`, between backticks or double quotes.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let open = rest.find(['`', '"'])?;
        let quote = rest[open..].chars().next()?;
        let body = &rest[open + 1..];
        let close = body.find(quote)?;
        rest = &body[close + 1..];
        Some(&body[..close])
    })
}

/// serde names the Rust type it wanted (`expected struct RawPartition`); a person needs to
/// know that an object was expected.
fn without_type_names(message: &str) -> String {
    let mut out = message.to_string();
    for kind in ["internally tagged enum ", "struct "] {
        let pattern = format!("expected {kind}");
        while let Some(start) = out.find(&pattern) {
            let name_start = start + pattern.len();
            let name_len = out[name_start..]
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap_or(out.len() - name_start);
            out.replace_range(start..name_start + name_len, "expected a JSON object");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_misspelling_gets_the_nearest_name() {
        let serde = "unknown field `epoch`, expected one of `epochs`, `batch_size`, `lr`";
        assert!(explain(serde).ends_with("; did you mean \"epochs\"?"));
        let variant = "unknown variant `mpl`, expected `mlp` or `cnn`";
        assert!(explain(variant).ends_with("did you mean \"mlp\"?"));
        let ours = "unknown scheme \"dirchlet\"; expected \"iid\", \"dirichlet\" or \"shards\"";
        assert!(explain(ours).ends_with("did you mean \"dirichlet\"?"));
        let prefix = "unknown variant `hier`, expected `flat` or `hierarchical`";
        assert!(explain(prefix).ends_with("did you mean \"hierarchical\"?"));
    }

    #[test]
    fn a_different_name_gets_no_suggestion() {
        let message = "unknown variant `fedprox`, expected `fedavg`";
        assert_eq!(explain(message), message);
        assert_eq!(explain("must be at least 1"), "must be at least 1");
    }

    #[test]
    fn internal_type_names_become_what_the_file_should_hold() {
        let message = "invalid type: string \"x\", expected struct RawPartition";
        assert_eq!(
            explain(message),
            "invalid type: string \"x\", expected a JSON object"
        );
        let tagged = "invalid type: integer `3`, expected internally tagged enum TopologyConfig";
        assert_eq!(
            explain(tagged),
            "invalid type: integer `3`, expected a JSON object"
        );
    }
}
