//! Records what the run manifest says about the build: the target triple, and the git commit
//! when fedsim is built from a checkout (with whether tracked files had changes).

use std::process::Command;

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=FEDSIM_TARGET={target}");
    let commit = git(&["rev-parse", "HEAD"]);
    // Without optional locks `git status` does not rewrite a stale index, which would move
    // `.git/index` and make the next cargo command build fedsim again.
    let dirty = git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ])
    .map(|s| !s.is_empty());
    let described = match (commit, dirty) {
        (Some(commit), Some(true)) => format!("{commit}-modified"),
        (Some(commit), _) => commit,
        (None, _) => String::new(),
    };
    println!("cargo:rustc-env=FEDSIM_GIT_COMMIT={described}");
    // A new commit or staged change moves HEAD or the index; an edit moves the sources.
    for path in [".git/HEAD", ".git/index", "src", "Cargo.toml", "build.rs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}

/// What `git ARGS` prints, trimmed, if git runs and succeeds here.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}
