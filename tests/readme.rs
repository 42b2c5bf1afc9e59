//! The README's figures for the default experiment are what the default experiment gives: its
//! sample output's round lines and final accuracy are compared with a fresh run.
//!
//! The figures hold for this build on CPUs with the vector features of the machine they were
//! measured on (AVX2 and FMA, no AVX-512); on others burn's kernels round differently (see the
//! README on what "bit for bit" covers), so there the test says why it does not compare.

mod common;

use common::{experiment, fedsim, root};

/// The lines of the README's sample output that start with `prefix`.
fn readme_lines(prefix: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    readme
        .lines()
        .filter(|line| line.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// `round 2/50  train loss 0.2193  test acc 91.64%  551 ms` without its wall time.
fn without_time(line: &str) -> &str {
    line.rsplit_once("  ").map_or(line, |(figures, _)| figures)
}

/// Whether this CPU has the vector features the README's figures were measured with.
fn measured_kind_of_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx2") && has!("fma") && !has!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[test]
fn the_readme_shows_what_the_default_experiment_gives() {
    if !measured_kind_of_cpu() {
        eprintln!(
            "not compared: the README's figures were measured on an x86-64 CPU with AVX2 and FMA \
             and without AVX-512, and this CPU differs, so its kernels round differently"
        );
        return;
    }
    let shown: Vec<String> = readme_lines("round ")
        .into_iter()
        .filter(|line| line.split(' ').nth(1).is_some_and(|n| n.contains('/')))
        .collect();
    assert!(shown.len() >= 3, "the README shows round lines: {shown:?}");
    let done = readme_lines("done: ");
    assert_eq!(done.len(), 1, "{done:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = fedsim(&[
        "run",
        experiment("mnist-fedavg").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let context = format!("this run's output:\n{stdout}\nits machine and build:\n{manifest}");
    for line in &shown {
        // `round 2/50`, before the first double space.
        let round = |l: &str| l.split("  ").next().map(str::to_string);
        let ran = stdout
            .lines()
            .find(|l| round(l) == round(line))
            .unwrap_or_else(|| panic!("no such round in the run: {line}"));
        assert_eq!(without_time(ran), without_time(line), "{context}");
    }
    let (figures, _) = done[0].split_once(" after").unwrap();
    assert!(stdout.contains(figures), "{figures}: {context}");
}
