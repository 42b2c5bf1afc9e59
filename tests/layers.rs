//! The layering ARCHITECTURE.md promises, checked on the source: burn is used only where
//! networks are built and trained (`model/`, `local/`, `training/`, `backend.rs`, and the
//! registry's handle on a chosen model), so that the tree, the data sets and the experiment
//! file know nothing of it; an algorithm's file may compute on burn's tensors (a client half
//! that trains itself, as MOON's), and nothing more of burn.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

/// The files and folders of `src/` that may use burn.
const BURN_USERS: [&str; 5] = [
    "model/",
    "local/",
    "training/",
    "backend.rs",
    "registry/model.rs",
];

/// The folder whose files may use burn's tensors alone: the algorithms.
const TENSOR_USERS: &str = "strategy/";

/// Whether a line of Rust names burn's tensors, and nothing else of burn.
fn names_tensors_only(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    code.matches("burn::").count() == code.matches("burn::tensor").count()
}

/// Every `.rs` file under `dir`, by its path relative to `src/`.
fn sources(src: &Path, dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(src, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path.strip_prefix(src).unwrap().to_path_buf());
        }
    }
}

/// Whether a line of Rust names the burn crate outside a comment.
fn names_burn(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    code.contains("burn::") || code.trim_start().starts_with("use burn")
}

#[test]
fn only_the_model_and_training_layers_use_burn() {
    let src = common::root().join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 50, "{files:?}");
    let mut outside = Vec::new();
    for file in &files {
        let relative = file.to_string_lossy().replace('\\', "/");
        if BURN_USERS.iter().any(|user| relative.starts_with(user)) {
            continue;
        }
        let tensors_allowed = relative.starts_with(TENSOR_USERS);
        let text = fs::read_to_string(src.join(file)).unwrap();
        for (i, line) in text.lines().enumerate() {
            if names_burn(line) && !(tensors_allowed && names_tensors_only(line)) {
                outside.push(format!("src/{relative}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "burn outside its layers:\n{}",
        outside.join("\n")
    );
    // The check sees what it looks for.
    assert!(names_burn("use burn::tensor::Device;"));
    assert!(names_burn("    let d = burn::tensor::Device::flex();"));
    assert!(!names_burn("/// trains on burn::tensor"));
    assert!(names_tensors_only(
        "use burn::tensor::activation::softplus;"
    ));
    assert!(!names_tensors_only("use burn::optim::AdamConfig;"));
}

/// The layers of ARCHITECTURE.md's table, by module: each module's layer number.
fn layers() -> Vec<(String, u32)> {
    let text = fs::read_to_string(common::root().join("ARCHITECTURE.md")).unwrap();
    let table = text
        .split("## Layers")
        .nth(1)
        .expect("ARCHITECTURE.md has a Layers section");
    let mut layers = Vec::new();
    for row in table
        .lines()
        .skip_while(|l| !l.starts_with("| layer"))
        .skip(2)
    {
        let Some(row) = row.strip_prefix("| ") else {
            break;
        };
        let (layer, modules) = row.split_once(" | ").unwrap();
        let layer: u32 = layer.parse().unwrap();
        for module in modules.trim_end_matches(" |").split(", ") {
            layers.push((module.trim_matches('`').to_string(), layer));
        }
    }
    layers
}

/// The modules of `crate::` paths in a line of Rust outside a comment, `crate::{a, b::c}`
/// giving each (a macro's name, as `crate::origin!`, is not a module).
fn imported_modules(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or_default();
    let mut modules = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let paths = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap_or_default()
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for path in paths {
            let path = path.trim_start();
            let end = path
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(path.len());
            if end > 0 && !path[end..].starts_with('!') {
                modules.push(&path[..end]);
            }
        }
    }
    modules
}

/// The numbered lines of a source file before its unit tests: a `#[cfg(test)]` module at its
/// end is test code, which may use the whole crate as the tests under `tests/` do.
fn library_code(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|next| next.contains("mod "))
        })
        .unwrap_or(lines.len());
    lines.into_iter().take(end).enumerate()
}

#[test]
fn every_import_runs_down_the_layers_of_architecture_md() {
    let layers = layers();
    let layer_of = |module: &str| layers.iter().find(|(m, _)| m == module).map(|(_, l)| *l);
    let src = common::root().join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    let mut against = Vec::new();
    for file in &files {
        let relative = file.to_string_lossy().replace('\\', "/");
        let module = relative.split('/').next().unwrap().trim_end_matches(".rs");
        if ["lib", "main"].contains(&module) {
            continue;
        }
        let own = layer_of(module)
            .unwrap_or_else(|| panic!("src/{relative}: module {module} is in no layer"));
        let text = fs::read_to_string(src.join(file)).unwrap();
        for (i, line) in library_code(&text) {
            for imported in imported_modules(line) {
                if imported == module {
                    continue;
                }
                let theirs = layer_of(imported).unwrap_or_else(|| {
                    panic!("src/{relative}:{}: module {imported} is in no layer", i + 1)
                });
                if theirs >= own {
                    against.push(format!(
                        "src/{relative}:{}: {module} (layer {own}) imports {imported} (layer {theirs})",
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        against.is_empty(),
        "imports against the layers:\n{}",
        against.join("\n")
    );
    // The check sees what it looks for.
    assert_eq!(layer_of("cli"), Some(15));
    assert_eq!(layer_of("network"), Some(1));
    assert_eq!(
        imported_modules("use crate::network::{ClientId}; // crate::cli"),
        ["network"]
    );
    assert!(imported_modules("registry.origin(crate::origin!());").is_empty());
    assert_eq!(
        imported_modules("use crate::{config, output::atomic};"),
        ["config", "output"]
    );
}
