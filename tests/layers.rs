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
