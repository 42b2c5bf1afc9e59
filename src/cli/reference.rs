//! The reference pages the code writes itself, so that they cannot drift from it: the command
//! line from its clap grammar, the experiment file's fields from the config types' doc comments
//! (read through their JSON schema, which schemars derives from the same types and serde
//! attributes that read the file), and the catalogues of algorithms, models, data sets and
//! partition schemes from a [`Registry`]. `fedsim reference` writes them as Markdown, to be
//! included by the book's reference chapters; a program of a user's own crate writes its
//! plug-ins' entries beside the built-ins'. `tests/docs.rs` fails when a committed page
//! differs from what the code now writes.

use std::fmt::Write;
use std::path::Path;

use clap::CommandFactory;
use serde_json::{Value, json};

use super::Cli;
use crate::config::ExperimentConfig;
use crate::output::atomic::WriteError;
use crate::registry::{AlgorithmInfo, ComponentInfo, Origin, ParamInfo, Registry};
use crate::strategy::Reduction;

/// The first line of every generated page.
pub const GENERATED: &str =
    "<!-- Written by `fedsim reference`: edit the code it comes from, then run it again. -->";

/// One generated page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Its file name.
    pub file: &'static str,
    /// Its Markdown.
    pub text: String,
}

/// Every generated page, for the components `registry` holds.
pub fn pages(registry: &Registry) -> Vec<Page> {
    let page = |file, body: String| Page {
        file,
        text: format!("{GENERATED}\n\n{body}"),
    };
    vec![
        page("cli.md", command_line()),
        page("experiment-file.md", experiment_file()),
        page("strategies.md", strategies(&registry.algorithms())),
        page("models.md", components(&registry.models())),
        page("datasets.md", components(&registry.data_sets())),
        page("partitions.md", components(&registry.schemes())),
        page("compressors.md", components(&registry.compressors())),
    ]
}

/// Writes every page into `dir`, creating it if need be.
pub fn write_pages(registry: &Registry, dir: &Path) -> Result<(), WriteError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError { path, source }
    };
    std::fs::create_dir_all(dir).map_err(failed(dir))?;
    for page in pages(registry) {
        let path = dir.join(page.file);
        std::fs::write(&path, page.text).map_err(failed(&path))?;
    }
    Ok(())
}

/// Every command, with its usage and a table of its arguments.
fn command_line() -> String {
    let mut root = Cli::command();
    root.build();
    let mut out = String::new();
    commands(&root, &mut out);
    out
}

/// The sections of `command`'s subcommands, depth first, in the order `--help` lists them.
fn commands(command: &clap::Command, out: &mut String) {
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        if sub.has_subcommands() {
            commands(sub, out);
            continue;
        }
        let name = sub.get_bin_name().unwrap_or(sub.get_name());
        let mut about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        sentence(&mut about);
        let usage = sub.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ");
        let _ = write!(out, "## `{name}`\n\n{about}\n\n```text\n{usage}\n```\n\n");
        let arguments: Vec<_> = sub
            .get_arguments()
            .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
            .collect();
        if !arguments.is_empty() {
            out.push_str("| argument | meaning |\n| --- | --- |\n");
            for argument in arguments {
                let _ = writeln!(
                    out,
                    "| {} | {} |",
                    argument_name(argument),
                    argument_help(argument)
                );
            }
            out.push('\n');
        }
    }
}

/// `--out <DIR>`, or `<EXPERIMENT>` for a positional argument, or `--quiet` for a flag.
fn argument_name(argument: &clap::Arg) -> String {
    let value = argument
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>())
        .unwrap_or_else(|| vec![format!("<{}>", argument.get_id().as_str().to_uppercase())]);
    let takes_value = argument.get_num_args().is_none_or(|n| n.takes_values());
    match argument.get_long() {
        Some(long) if takes_value => format!("`--{long} {}`", value.join(" ")),
        Some(long) => format!("`--{long}`"),
        None => format!("`{}`", value.join(" ")),
    }
}

/// An argument's help, with its choices, its default and whether it is required.
fn argument_help(argument: &clap::Arg) -> String {
    let takes_value = argument.get_num_args().is_none_or(|n| n.takes_values());
    let mut text = argument
        .get_long_help()
        .or(argument.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
        .replace('\n', " ");
    sentence(&mut text);
    let choices: Vec<String> = argument
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !choices.is_empty() && takes_value {
        let _ = write!(text, " One of {}.", choices.join(", "));
    }
    let defaults: Vec<String> = argument
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    if !defaults.is_empty() && takes_value {
        let _ = write!(text, " Default: {}.", defaults.join(", "));
    }
    if argument.is_required_set() {
        text.push_str(" Required.");
    }
    text.trim().replace('|', "\\|")
}

/// Ends `text` with a full stop, as clap's help texts leave out.
fn sentence(text: &mut String) {
    let trimmed = text.trim_end().len();
    text.truncate(trimmed);
    if !text.is_empty() && !text.ends_with(['.', ')', ']']) {
        text.push('.');
    }
}

/// Each algorithm's section: paper, parameters, edge rule, reductions.
fn strategies(algorithms: &[AlgorithmInfo]) -> String {
    let mut out = String::new();
    for algorithm in algorithms {
        out += &entry(
            algorithm.name,
            algorithm.paper,
            &algorithm.origin,
            &algorithm.params,
        );
        let edge = algorithm.edge.described();
        let _ = write!(out, "Aggregating schedulers: {edge}.\n\n");
        let asynchronous = algorithm.asynchrony_described();
        let _ = write!(out, "Asynchronous federations: {asynchronous}.\n\n");
        for reduction in &algorithm.reductions {
            out += &reduction_line(algorithm.name, reduction);
        }
        if !algorithm.reductions.is_empty() {
            out.push('\n');
        }
    }
    out
}

/// "With `{"mu":0}` it gives `fedavg`'s results to the bit", and the conditions it needs.
fn reduction_line(name: &str, reduction: &Reduction<serde_json::Map<String, Value>>) -> String {
    let setting = if reduction.params.is_empty() {
        format!("`{name}`")
    } else {
        format!(
            "`{name}` with `{}`",
            Value::Object(reduction.params.clone())
        )
    };
    let mut conditions = Vec::new();
    if reduction.equal_clients {
        conditions.push("on clients of equal sizes".to_string());
    }
    if reduction.first_round_only {
        conditions.push("in the first round".to_string());
    }
    for (path, value) in &reduction.settings {
        conditions.push(format!("with `{path}` {value}"));
    }
    let conditions = if conditions.is_empty() {
        String::new()
    } else {
        format!(" {}", conditions.join(" and "))
    };
    format!(
        "- {setting} gives `{}`'s results to the bit{conditions} (checked by the conformance kit).\n",
        reduction.equals
    )
}

/// Each component's section: what it is, and its parameters.
fn components(components: &[ComponentInfo]) -> String {
    let mut out = String::new();
    for component in components {
        out += &entry(
            component.name,
            component.about,
            &component.origin,
            &component.params,
        );
    }
    out
}

/// A catalogue entry's heading, what it is, the crate that registered it (when not fedsim)
/// and its parameters.
fn entry(name: &str, about: &str, registered_by: &Origin, params: &[ParamInfo]) -> String {
    format!(
        "### `{name}`\n\n{about}\n\n{}{}",
        origin(registered_by),
        parameters(params)
    )
}

/// Which crate registered a component, when it is not fedsim.
fn origin(origin: &Origin) -> String {
    if *origin == Origin::fedsim() {
        String::new()
    } else {
        format!(
            "Registered by {} {}.\n\n",
            origin.crate_name, origin.version
        )
    }
}

/// A table of parameters, or the line that there are none.
fn parameters(params: &[ParamInfo]) -> String {
    if params.is_empty() {
        return "No parameters.\n\n".to_string();
    }
    let mut out = String::from("| parameter | default | meaning |\n| --- | --- | --- |\n");
    for param in params {
        let default = param
            .default
            .as_ref()
            .map_or_else(|| "none".to_string(), |d| format!("`{d}`"));
        let _ = writeln!(
            out,
            "| `{}` | {default} | {} |",
            param.name,
            param.doc.replace('|', "\\|")
        );
    }
    out.push('\n');
    out
}

/// Every field of the experiment file: the top level's, then each section's, with the kinds
/// of its tagged values.
fn experiment_file() -> String {
    let generated = schemars::schema_for!(ExperimentConfig);
    let schema = Schema {
        defs: generated.get("$defs").cloned().unwrap_or_default(),
    };
    let root = schema.resolve(&schema_root(&generated));
    let mut rows = Vec::new();
    let mut kinds = Vec::new();
    let mut sections = Vec::new();
    for (name, field) in properties(&root) {
        let field = schema.resolve(field);
        rows.push(schema.row(name, &field, is_required(&root, name)));
        if let Some(variants) = tagged_variants(&field) {
            kinds.push(schema.kinds(name, &variants));
        }
        if schema.has_fields(&field) {
            sections.push((name.to_string(), field));
        }
    }
    let mut out = format!("## Top level\n\n{}{}", table(&rows), kinds.concat());
    for (name, field) in sections {
        let (mut rows, mut kinds) = (Vec::new(), Vec::new());
        schema.fields(&name, &field, &mut rows, &mut kinds);
        let about = match field.get("x-type-description") {
            Some(about) => flowed(about),
            None => description(&field),
        };
        let _ = write!(
            out,
            "## `{name}`\n\n{about}\n\n{}{}",
            table(&rows),
            kinds.concat()
        );
    }
    out
}

/// The root of a generated schema, without its `$defs`.
fn schema_root(schema: &schemars::Schema) -> Value {
    let mut root = schema.as_value().clone();
    if let Some(object) = root.as_object_mut() {
        object.remove("$defs");
    }
    root
}

/// A table of field rows.
fn table(rows: &[String]) -> String {
    let mut out =
        String::from("| field | value | default | meaning |\n| --- | --- | --- | --- |\n");
    for row in rows {
        out += row;
    }
    out.push('\n');
    out
}

/// The definitions a schema's references point into.
struct Schema {
    defs: Value,
}

impl Schema {
    /// `value` with a `$ref` replaced by its definition (its own keys, such as the field's
    /// description and default, kept over the definition's), and an `Option`'s `null` branch
    /// dropped.
    fn resolve(&self, value: &Value) -> Value {
        let mut value = value.clone();
        if let Some(branches) = value.get("anyOf").and_then(Value::as_array).cloned() {
            let some: Vec<&Value> = branches
                .iter()
                .filter(|b| b.get("type") != Some(&json!("null")))
                .collect();
            if some.len() == 1 && value.get("x-registered").is_none() {
                let object = value
                    .as_object_mut()
                    .expect("a schema with anyOf is an object");
                object.remove("anyOf");
                for (key, item) in some[0].as_object().into_iter().flatten() {
                    object.entry(key.clone()).or_insert(item.clone());
                }
            }
        }
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return value;
        };
        let name = reference.trim_start_matches("#/$defs/");
        let mut resolved = self.resolve(&self.defs[name]);
        let object = resolved.as_object_mut().expect("a definition is an object");
        for (key, item) in value.as_object().into_iter().flatten() {
            if key == "description"
                && let Some(own) = object.remove("description")
            {
                object.insert("x-type-description".into(), own);
            }
            if key != "$ref" {
                object.insert(key.clone(), item.clone());
            }
        }
        resolved
    }

    /// The schema of a list's items, resolved (nothing when `value` is not a list).
    fn item(&self, value: &Value) -> Value {
        value
            .get("items")
            .map(|i| self.resolve(i))
            .unwrap_or(Value::Null)
    }

    /// Whether `value` is an object of named fields, or a list of them.
    fn has_fields(&self, value: &Value) -> bool {
        !properties(value).is_empty() || !properties(&self.item(value)).is_empty()
    }

    /// The rows of `value`'s fields under `path`, nested objects' fields inline (`a.b.c`, a
    /// list's items as `a[].b`), and the kinds of every tagged value met, as sections.
    fn fields(&self, path: &str, value: &Value, rows: &mut Vec<String>, kinds: &mut Vec<String>) {
        let (value, path) = match self.item(value) {
            Value::Null => (value.clone(), path.to_string()),
            item => (item, format!("{path}[]")),
        };
        for (name, field) in properties(&value) {
            let field = self.resolve(field);
            let here = format!("{path}.{name}");
            rows.push(self.row(&here, &field, is_required(&value, name)));
            if self.has_fields(&field) {
                self.fields(&here, &field, rows, kinds);
            }
            if let Some(variants) = tagged_variants(&field) {
                kinds.push(self.kinds(&here, &variants));
            }
        }
    }

    /// The list of a tagged value's kinds, each with what it means and its own fields.
    fn kinds(&self, path: &str, variants: &[Value]) -> String {
        let mut out = format!("The kinds of `{path}`:\n\n");
        for variant in variants {
            let kind = variant["properties"]["kind"]["const"]
                .as_str()
                .unwrap_or("?");
            let _ = writeln!(
                out,
                "- `{{\"kind\": \"{kind}\"}}`: {}",
                description(variant)
            );
            for (name, field) in properties(variant) {
                if name == "kind" {
                    continue;
                }
                let field = self.resolve(field);
                let default = match field.get("default") {
                    Some(default) => format!(", default `{default}`"),
                    None if is_required(variant, name) => ", required".to_string(),
                    None => ", optional".to_string(),
                };
                let _ = writeln!(
                    out,
                    "  - `{name}` ({}{default}): {}",
                    value_kind(&field),
                    meaning(&field)
                );
            }
        }
        out.push('\n');
        out
    }

    /// A table row for the field at `path`.
    fn row(&self, path: &str, field: &Value, required: bool) -> String {
        let nested = self.has_fields(field);
        let default = match (field.get("x-default"), field.get("default")) {
            (Some(Value::String(text)), _) => text.clone(),
            (_, Some(_)) if nested => "see its fields".to_string(),
            (_, Some(default)) => format!("`{default}`"),
            _ if required => "required".to_string(),
            _ => "none".to_string(),
        };
        let kind = if nested {
            format!("{} (below)", value_kind(field))
        } else {
            value_kind(field)
        };
        format!(
            "| `{path}` | {kind} | {default} | {} |\n",
            meaning(field).replace('|', "\\|")
        )
    }
}

/// What a field means: its description, and a string enum's choices with theirs.
fn meaning(field: &Value) -> String {
    let mut meaning = description(field);
    for (name, doc) in string_choices(field).unwrap_or_default() {
        let _ = match doc {
            Some(doc) => write!(meaning, " `\"{name}\"`: {doc}"),
            None => write!(meaning, " `\"{name}\"`."),
        };
    }
    meaning.trim().to_string()
}

/// A schema's properties, in name order (serde_json's maps keep keys sorted).
fn properties(value: &Value) -> Vec<(&str, &Value)> {
    value
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// Whether `name` is a required field of the object `value`.
fn is_required(value: &Value, name: &str) -> bool {
    value
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|n| n == name))
}

/// A schema's description as one paragraph.
fn description(value: &Value) -> String {
    value.get("description").map(flowed).unwrap_or_default()
}

/// A doc comment's text as one paragraph, its rustdoc links (``[`Name`]``) as plain code.
fn flowed(text: &Value) -> String {
    let text = text.as_str().unwrap_or_default();
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let Some(end) = rest[start..].find("`]").map(|e| start + e) else {
            break;
        };
        let linked = !rest[end + 2..].starts_with('(');
        out += &rest[..start];
        out += if linked {
            &rest[start + 1..end + 1]
        } else {
            &rest[start..end + 2]
        };
        rest = &rest[end + 2..];
    }
    out += rest;
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The variants of an internally tagged enum (`{"kind": …}`), if `value` is one.
fn tagged_variants(value: &Value) -> Option<Vec<Value>> {
    let variants = value.get("oneOf")?.as_array()?;
    variants
        .iter()
        .all(|v| v["properties"]["kind"]["const"].is_string())
        .then(|| variants.clone())
}

/// The names of a string enum and their docs, if `value` is one.
fn string_choices(value: &Value) -> Option<Vec<(String, Option<String>)>> {
    if let Some(names) = value.get("enum").and_then(Value::as_array) {
        return Some(
            names
                .iter()
                .filter_map(|n| n.as_str().map(|n| (n.to_string(), None)))
                .collect(),
        );
    }
    let variants = value.get("oneOf")?.as_array()?;
    variants
        .iter()
        .map(|v| {
            let name = v.get("const")?.as_str()?.to_string();
            let doc = Some(description(v)).filter(|d| !d.is_empty());
            Some((name, doc))
        })
        .collect()
}

/// What a field holds, in a few words.
fn value_kind(field: &Value) -> String {
    if let Some(key) = field.get("x-registered").and_then(Value::as_str) {
        return format!("a registered name, or an object with `{key}` and parameters");
    }
    if tagged_variants(field).is_some() {
        return "an object with a `kind` (below)".to_string();
    }
    if string_choices(field).is_some() {
        return "a string".to_string();
    }
    match primitive(field).as_str() {
        "array" => format!("a list of {}", plural(&field["items"])),
        "integer" => "an integer".to_string(),
        "object" => "an object".to_string(),
        other => format!("a {other}"),
    }
}

/// What a list of `items` holds, in the plural.
fn plural(items: &Value) -> String {
    if items.get("$ref").is_some() || items.get("properties").is_some() {
        return "objects".to_string();
    }
    match primitive(items).as_str() {
        "array" => format!("lists of {}", plural(&items["items"])),
        "any" => "values".to_string(),
        other => format!("{other}s"),
    }
}

/// A schema's JSON type, `null` aside, or `any`.
fn primitive(value: &Value) -> String {
    match &value["type"] {
        Value::Array(types) => types
            .iter()
            .find(|t| *t != "null")
            .and_then(Value::as_str)
            .unwrap_or("any")
            .to_string(),
        Value::String(kind) => kind.clone(),
        _ => "any".to_string(),
    }
}
