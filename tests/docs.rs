//! The book (`docs/`), the README and the other pages cannot rot:
//!
//! - the README is a front page, of at most 120 lines;
//! - the reference pages the code writes (`fedsim reference`) are the committed ones;
//! - `SUMMARY.md` lists every page of the book, and every page it lists exists;
//! - every relative link and image resolves, anchors included, and the book links nothing
//!   outside itself (the rendered book would not have it);
//! - every JSON block parses, and every experiment file and sweep among them is valid;
//! - every command in a `sh` block (a block of runnable commands) runs, with the shipped
//!   experiments and sweeps cut to one round, and every shipped sweep is such a command;
//! - the default experiment gives the figures its guide shows.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use common::{experiment, profile_dir, root, run_ok};
use fedsim::ExperimentConfig;
use fedsim::cli::{Cli, reference};
use fedsim::registry::Registry;
use serde_json::{Value, json};

/// The book's source folder.
fn book() -> PathBuf {
    root().join("docs/src")
}

/// Every `.md` file under `dir`.
fn markdown_under(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_under(&path, files);
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// The book's pages, and the repository's other pages for people.
fn pages() -> Vec<PathBuf> {
    let mut files = Vec::new();
    markdown_under(&book(), &mut files);
    for page in [
        "README.md",
        "ARCHITECTURE.md",
        "CHANGELOG.md",
        "benches/README.md",
        "fuzz/README.md",
        "datasets/README.md",
        "experiments/tutorial/README.md",
    ] {
        files.push(root().join(page));
    }
    files.sort();
    files
}

/// A fenced code block: its info string, its text and the line it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

/// The fenced code blocks of `page`.
fn blocks(page: &Path) -> Vec<Block> {
    let text = fs::read_to_string(page).unwrap();
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                    line: i + 1,
                });
            }
            (Some(_), Some(_)) => found.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is not closed",
        page.display()
    );
    found
}

/// `page`'s text outside code blocks and inline code, line by line.
fn prose(page: &Path) -> Vec<(usize, String)> {
    let text = fs::read_to_string(page).unwrap();
    let mut in_block = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            // Inline code holds no links.
            let outside: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            lines.push((i + 1, outside));
        }
    }
    lines
}

/// The targets of the Markdown links and images on a line: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    targets
}

/// The anchor mdBook gives a heading: lower case, spaces to dashes, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of `page`'s headings.
fn anchors(page: &Path) -> BTreeSet<String> {
    prose(page)
        .into_iter()
        .filter_map(|(_, line)| {
            let heading = line.trim_start_matches('#');
            (line.starts_with('#') && heading.starts_with(' ')).then(|| anchor(heading))
        })
        .collect()
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalised(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn the_generated_reference_pages_are_what_the_code_writes() {
    let dir = book().join("reference/generated");
    let pages = reference::pages(&Registry::builtin());
    let mut stale = Vec::new();
    for page in &pages {
        let committed = fs::read_to_string(dir.join(page.file)).unwrap_or_default();
        if committed != page.text {
            stale.push(page.file);
        }
    }
    let written: BTreeSet<&str> = pages.iter().map(|p| p.file).collect();
    let committed: BTreeSet<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let extra: Vec<&String> = committed
        .iter()
        .filter(|f| !written.contains(f.as_str()))
        .collect();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "the reference pages differ from what the code writes ({stale:?}; not written by it: \
         {extra:?}); run `cargo run --release -- reference` and commit the result"
    );
    // Every page is included by the reference chapter of its name.
    for page in &pages {
        let chapter = book().join("reference").join(page.file);
        let include = format!("{{{{#include generated/{}}}}}", page.file);
        assert!(
            fs::read_to_string(&chapter).is_ok_and(|text| text.contains(&include)),
            "{} does not include generated/{}",
            chapter.display(),
            page.file
        );
    }
}

#[test]
fn the_readme_is_a_front_page_of_at_most_120_lines() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 120,
        "README.md has {lines} lines; the book holds the rest"
    );
}

#[test]
fn the_summary_lists_every_page_of_the_book() {
    let summary = book().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = prose(&summary)
        .iter()
        .flat_map(|(_, line)| link_targets(line))
        .map(|target| book().join(target))
        .collect();
    assert!(listed.len() >= 30, "{listed:?}");
    for page in &listed {
        assert!(page.is_file(), "SUMMARY.md lists {}", page.display());
    }
    let mut files = Vec::new();
    markdown_under(&book(), &mut files);
    for file in files {
        let generated = file.starts_with(book().join("reference/generated"));
        if file != summary && !generated {
            assert!(
                listed.contains(&file),
                "SUMMARY.md does not list {}",
                file.display()
            );
        }
    }
}

#[test]
fn every_link_and_image_resolves() {
    let mut checked = 0;
    // Each linked page's anchors, read once.
    let mut anchors_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for page in pages() {
        let folder = page.parent().unwrap();
        for (line, text) in prose(&page) {
            let at = format!("{}:{line}", page.display());
            for target in link_targets(&text) {
                if target.starts_with("http://") || target.starts_with("https://") {
                    continue;
                }
                let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
                let resolved = if file.is_empty() {
                    page.clone()
                } else {
                    normalised(&folder.join(file))
                };
                assert!(resolved.exists(), "{at}: {target} does not exist");
                if page.starts_with(book()) {
                    assert!(
                        resolved.starts_with(book()),
                        "{at}: {target} is outside the book, which the rendered book lacks; \
                         name it in a code span instead"
                    );
                }
                if !fragment.is_empty() {
                    let known = anchors_of
                        .entry(resolved.clone())
                        .or_insert_with(|| anchors(&resolved));
                    assert!(
                        known.contains(fragment),
                        "{at}: {target}: no heading of {} has the anchor #{fragment}",
                        resolved.display()
                    );
                }
                checked += 1;
            }
            if let Some(include) = text.split("{{#include ").nth(1) {
                let file = include.split("}}").next().unwrap();
                assert!(folder.join(file).is_file(), "{at}: includes {file}");
            }
        }
    }
    assert!(checked > 100, "{checked} links");
}

/// A copy of `experiments/` in `dir` with every experiment and sweep cut to one round, and
/// the folders its files and the book's commands name beside it.
fn one_round_tree(dir: &Path) {
    copy_cut(&root().join("experiments"), &dir.join("experiments"));
    for linked in ["datasets", "examples"] {
        std::os::unix::fs::symlink(root().join(linked), dir.join(linked)).unwrap();
    }
}

/// Copies `from` to `to`, every JSON file cut to one round of one local epoch.
fn copy_cut(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_cut(&path, &target);
        } else if path.extension().is_some_and(|e| e == "json") {
            let mut file: Value =
                serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
            cut(&mut file);
            fs::write(&target, file.to_string()).unwrap();
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

/// An experiment (a file, or a sweep's inline base) cut to one round of one local epoch where
/// its local work is fixed, or a sweep cut to one round per run and its first seed (the
/// other seeds run the same code again with other draws).
fn cut(file: &mut Value) {
    if file.get("federation").is_some() {
        file["federation"]["rounds"] = json!(1);
        let client = &mut file["client"];
        if client.get("epochs").is_some() && client.get("work").is_none() {
            client["epochs"] = json!(1);
        }
    }
    if file.get("base").is_some() || file.get("variants").is_some() {
        if let Some(base) = file.get_mut("base").filter(|b| b.is_object()) {
            cut(base);
        }
        let grid = file
            .as_object_mut()
            .unwrap()
            .entry("grid")
            .or_insert_with(|| json!({}));
        grid["federation.rounds"] = json!([1]);
        if let Some(seeds) = grid.get_mut("seed").and_then(Value::as_array_mut) {
            seeds.truncate(1);
        }
    }
}

/// The program a documented command line runs, and its arguments: `cargo run --release --`,
/// `cargo run --release --example NAME --` and `fedsim`.
fn program(line: &str) -> Option<(PathBuf, Vec<String>)> {
    let words = shlex::split(line)?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (program, args) = match words.as_slice() {
        ["cargo", "run", "--release", "--", args @ ..] | ["fedsim", args @ ..] => {
            (PathBuf::from(env!("CARGO_BIN_EXE_fedsim")), args)
        }
        [
            "cargo",
            "run",
            "--release",
            "--example",
            name,
            "--",
            args @ ..,
        ] => (profile_dir().join("examples").join(name), args),
        _ => return None,
    };
    Some((program, args.iter().map(|a| a.to_string()).collect()))
}

/// The command lines of `page`'s `sh` blocks, with the line each is on.
fn runnable_commands(page: &Path) -> Vec<(usize, String)> {
    blocks(page)
        .into_iter()
        .filter(|block| block.info == "sh")
        .flat_map(|block| {
            let first = block.line + 1;
            block
                .text
                .lines()
                .enumerate()
                .map(|(i, line)| (first + i, line.trim().to_string()))
                .collect::<Vec<_>>()
        })
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// Runs `page`'s `commands` in order, in a folder of their own; gives the sweeps they ran and
/// how many commands.
fn run_page_commands(page: &Path, commands: &[(usize, String)]) -> (BTreeSet<PathBuf>, usize) {
    let mut sweeps_run = BTreeSet::new();
    let dir = tempfile::tempdir().unwrap();
    one_round_tree(dir.path());
    for (line, command) in commands {
        let at = format!("{}:{line}: {command}", page.display());
        let (program, mut args) = program(command).unwrap_or_else(|| {
            panic!("{at}: not a fedsim command; show it in a `console` block instead")
        });
        let words = std::iter::once("fedsim".to_string()).chain(args.iter().cloned());
        let parsed = Cli::try_parse_from(words).unwrap_or_else(|e| panic!("{at}: {e}"));
        match parsed.command {
            fedsim::cli::Command::Sweep(sweep) => {
                sweeps_run.insert(normalised(&sweep.sweep));
            }
            // A `--set` of the rounds in the command gives way to one round.
            fedsim::cli::Command::Run(run) if run.resume.is_none() => {
                args.extend(["--set".to_string(), "federation.rounds=1".to_string()]);
            }
            _ => {}
        }
        let output = Command::new(&program)
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{at}: {}: {e}", program.display()));
        assert!(
            output.status.success(),
            "{at}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    (sweeps_run, commands.len())
}

#[test]
fn every_runnable_command_runs_with_the_experiments_cut_to_one_round() {
    let pages: Vec<(PathBuf, Vec<(usize, String)>)> = pages()
        .into_iter()
        .map(|page| {
            let commands = runnable_commands(&page);
            (page, commands)
        })
        .filter(|(_, commands)| !commands.is_empty())
        .collect();
    // Pages run two at a time, each in its own folder: one page's set-up (reading data sets,
    // writing reports) overlaps another's training.
    let next = AtomicUsize::new(0);
    let results: Vec<(BTreeSet<PathBuf>, usize)> = std::thread::scope(|scope| {
        let runners: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((page, commands)) = pages.get(i) else {
                            return done;
                        };
                        done.push(run_page_commands(page, commands));
                    }
                })
            })
            .collect();
        runners
            .into_iter()
            .flat_map(|runner| runner.join().expect("a page's commands ran"))
            .collect()
    });
    let ran: usize = results.iter().map(|(_, ran)| ran).sum();
    let sweeps_run: BTreeSet<PathBuf> = results.into_iter().flat_map(|(s, _)| s).collect();
    assert!(ran >= 20, "{ran} commands");
    // Every shipped sweep is shown, and so runs.
    for dir in ["experiments/tutorial", "experiments/sweeps"] {
        for entry in fs::read_dir(root().join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let sweep = Path::new(dir).join(&name);
            if name.ends_with(".json") && name != "base.json" {
                assert!(
                    sweeps_run.contains(&sweep),
                    "no page runs {}",
                    sweep.display()
                );
            }
        }
    }
}

#[test]
fn every_json_block_parses_and_every_experiment_and_sweep_in_one_is_valid() {
    let registry = Registry::builtin();
    let dir = tempfile::tempdir().unwrap();
    one_round_tree(dir.path());
    let mut experiments = 0;
    for page in pages() {
        for block in blocks(&page).into_iter().filter(|b| b.info == "json") {
            let at = format!("{}:{}", page.display(), block.line);
            let value: Value =
                serde_json::from_str(&block.text).unwrap_or_else(|e| panic!("{at}: {e}"));
            // A sweep's base path is relative to the shipped sweeps' folder, an experiment's
            // files (a trace) to the shipped experiments'.
            let folder = match value.get("base") {
                Some(_) => "experiments/sweeps",
                None => "experiments",
            };
            let file = dir.path().join(folder).join("snippet.json");
            fs::write(&file, &block.text).unwrap();
            if value.get("federation").is_some() {
                ExperimentConfig::load(&file, &[], &registry)
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
                experiments += 1;
            } else if value.get("base").is_some() {
                fedsim::sweep::Sweep::load(&file, &[], &registry)
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
                experiments += 1;
            }
        }
    }
    assert!(experiments >= 5, "{experiments} experiment files");
}

/// `round 2/50  train loss 0.2193  test acc 91.64%  551 ms` without its wall time.
fn without_time(line: &str) -> &str {
    line.rsplit_once("  ").map_or(line, |(figures, _)| figures)
}

/// Whether this CPU has the vector features the guide's figures were measured with.
fn measured_kind_of_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx2") && has!("fma") && !has!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The figures of the default experiment's sample output, and the README's.
#[test]
fn the_default_experiment_gives_the_figures_its_guide_shows() {
    let guide = fs::read_to_string(book().join("how-to/run.md")).unwrap();
    let shown: Vec<&str> = guide
        .lines()
        .filter(|l| l.starts_with("round ") && l.split(' ').nth(1).is_some_and(|n| n.contains('/')))
        .collect();
    assert!(shown.len() >= 3, "the guide shows round lines: {shown:?}");
    let done: Vec<&str> = guide.lines().filter(|l| l.starts_with("done: ")).collect();
    assert_eq!(done.len(), 1, "{done:?}");
    // done: test accuracy 97.96% (best 97.98%) after 50 rounds …
    let (figures, _) = done[0].split_once(" after").unwrap();
    let accuracy = figures.split_whitespace().nth(3).unwrap();
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("ends at {accuracy} test accuracy")),
        "the README gives the guide's final accuracy, {accuracy}"
    );
    if !measured_kind_of_cpu() {
        eprintln!(
            "not compared: the guide's figures were measured on an x86-64 CPU with AVX2 and FMA \
             and without AVX-512, and this CPU differs, so its kernels round differently"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = run_ok(&experiment("mnist-fedavg"), &out, &[]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let manifest = fs::read_to_string(out.join("manifest.json")).unwrap();
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
    assert!(stdout.contains(figures), "{figures}: {context}");
}
