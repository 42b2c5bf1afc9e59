//! The Python package, as a Python user gets it: a virtual environment with the pinned test
//! requirements (`python/requirements-test.txt`), `pip install .` of this checkout (maturin
//! builds the bindings in `python/`), then its pytest suite (`python/tests/`), which compares a
//! run from Python with one of this build's command line, bit for bit, and executes every
//! notebook of `python/notebooks/` in a fresh kernel.
//!
//! It needs CPython 3.11 or newer, the floor of the pinned NumPy (`python3`, or the interpreter `FEDSIM_PYTHON` names) with its
//! `venv` module, and pip's registry. Without them it fails rather than skips: the package is
//! part of what fedsim promises.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;

/// The interpreter the environment is made with.
fn python() -> String {
    std::env::var("FEDSIM_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Runs `command` in the repository root and fails the test, with its output, if it fails.
fn run(command: &mut Command, what: &str) {
    let output = command
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The test environment, made once and kept beside the build (its packages are pinned, so a
/// kept one is what a new one would be).
fn environment() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    if !venv.join("bin/python").exists() {
        run(
            Command::new(python()).args(["-m", "venv"]).arg(&venv),
            &format!(
                "making a virtual environment with {} (CPython 3.11 or newer with venv; FEDSIM_PYTHON names another)",
                python()
            ),
        );
    }
    run(
        Command::new(venv.join("bin/python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            "python/requirements-test.txt",
        ]),
        "installing the test requirements",
    );
    venv
}

/// `PATH` with the environment's programs first, as activating it makes it (maturin's build
/// hook runs the `maturin` program).
fn activated_path(venv: &Path) -> std::ffi::OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(venv.join("bin")).chain(std::env::split_paths(&inherited));
    std::env::join_paths(paths).expect("the paths join")
}

#[test]
fn the_python_package_installs_and_its_tests_pass() {
    let venv = environment();
    let python = venv.join("bin/python");
    let path = activated_path(&venv);
    // The pinned maturin builds it (no isolated build environment to download), and a package
    // left by an earlier run is replaced whatever its version says.
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--no-deps",
                "--force-reinstall",
                ".",
            ])
            .env("PATH", &path),
        "pip install . (maturin building python/)",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "python/tests",
            ])
            .env("PATH", &path)
            .env("FEDSIM_BIN", env!("CARGO_BIN_EXE_fedsim")),
        "the Python package's tests",
    );
}
