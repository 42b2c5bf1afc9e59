//! Tables of numeric features in CSV files: a header row, one sample per row, and a label
//! column named in the experiment file. The Breast Cancer Wisconsin (Diagnostic) table ships
//! built in.
//!
//! Labels are class indices (`0`, `1`, …) or class names; names are numbered in sorted order.
//! Features may be standardised with the training split's mean and standard deviation per
//! column, which tabular features (areas in the thousands beside ratios below one) need before
//! SGD treats them alike.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::source::{Embedded, Reader, Source, embedded};
use super::{
    DataContext, DataError, DataFile, DataShape, DataSource, Dataset, SampleKind, SampleShape,
    TrainTest,
};
use crate::config::check::Problems;
use crate::seed::{Purpose, stream};

/// The draw of the test rows from a single table.
const TEST_SPLIT: Purpose = Purpose::new("test-split");

/// The most classes a table may have: labels are stored in a byte.
const MAX_CLASSES: usize = 256;

/// The Breast Cancer Wisconsin (Diagnostic) table, built in.
pub static BREAST_CANCER: Embedded =
    embedded!("breast-cancer", ["SHA256SUMS", "breast-cancer.csv"]);

/// The label column of the built-in table.
const BREAST_CANCER_LABEL: &str = "diagnosis";

/// How a table's rows become a training and a test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitOptions {
    /// The fraction of the rows drawn (from the seed) for the test set, in `(0, 1)`, when there
    /// is no separate test file. Default 0.2.
    #[serde(default = "default_test_fraction")]
    pub test_fraction: f64,
    /// Whether to scale each feature column to zero mean and unit variance over the training
    /// split (the test split gets the same scaling). Default true.
    #[serde(default = "yes")]
    pub standardize: bool,
}

impl Default for SplitOptions {
    fn default() -> Self {
        Self {
            test_fraction: default_test_fraction(),
            standardize: true,
        }
    }
}

fn default_test_fraction() -> f64 {
    0.2
}

fn yes() -> bool {
    true
}

/// A user's CSV files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// The table (`.csv`, or gzipped `.csv.gz`); relative paths are resolved against the
    /// experiment file's folder.
    pub file: PathBuf,
    /// The header name of the label column; every other column is a feature.
    pub label: String,
    /// A second table with the same columns to test on; without it, `test_fraction` of `file`'s
    /// rows are drawn for testing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_file: Option<PathBuf>,
    /// As [`SplitOptions::test_fraction`].
    #[serde(default = "default_test_fraction")]
    pub test_fraction: f64,
    /// As [`SplitOptions::standardize`].
    #[serde(default = "yes")]
    pub standardize: bool,
    /// Keeps a class that only one row holds, which is refused by default: in a table of
    /// any size it is more often a stray value in the label column than a class.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_rare_classes: bool,
}

impl CsvConfig {
    /// How the rows are split and scaled.
    pub fn split(&self) -> SplitOptions {
        SplitOptions {
            test_fraction: self.test_fraction,
            standardize: self.standardize,
        }
    }
}

impl SplitOptions {
    /// Adds every problem with the values to `problems` (fields under `data`).
    pub fn check(&self, problems: &mut Problems) {
        let fraction = self.test_fraction;
        if !(fraction > 0.0 && fraction < 1.0) {
            problems.add(
                "test_fraction",
                format!("is {fraction}; must be between 0 and 1, both excluded"),
            );
        }
    }
}

/// What the parameters of a table's split mean, for `fedsim datasets`.
const SPLIT_DOCS: [(&str, &str); 2] = [
    (
        "test_fraction",
        "the fraction of the rows drawn (from the split seed) for testing, in (0, 1)",
    ),
    (
        "standardize",
        "scale each feature column to zero mean and unit variance over the training split",
    ),
];

/// The Breast Cancer Wisconsin (Diagnostic) table as an experiment file names it.
#[derive(Debug, Clone, Copy)]
pub struct BreastCancerData;

impl DataSource for BreastCancerData {
    type Params = SplitOptions;

    fn name(&self) -> &'static str {
        "breast-cancer"
    }

    fn about(&self) -> &'static str {
        "the Breast Cancer Wisconsin (Diagnostic) table: 569 rows of 30 features, malignant or benign, built in"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &SPLIT_DOCS
    }

    fn sample_kind(&self, _: &SplitOptions) -> Option<SampleKind> {
        Some(SampleKind::Row)
    }

    fn check(&self, params: &SplitOptions, _: &DataContext, problems: &mut Problems) {
        params.check(problems);
    }

    fn load(&self, params: &SplitOptions, context: &DataContext) -> Result<TrainTest, DataError> {
        load_breast_cancer(params, context.split_seed)
    }
}

/// A user's CSV tables as an experiment file names them.
#[derive(Debug, Clone, Copy)]
pub struct CsvData;

impl DataSource for CsvData {
    type Params = CsvConfig;

    fn name(&self) -> &'static str {
        "csv"
    }

    fn about(&self) -> &'static str {
        "a table of numeric features in a CSV file with a header row, and a label column"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("file", "the table (.csv or .csv.gz), required"),
            (
                "label",
                "the header name of the label column, required; every other column is a feature",
            ),
            (
                "test_file",
                "a second table with the same columns to test on; without it, test_fraction of the rows are drawn",
            ),
            SPLIT_DOCS[0],
            SPLIT_DOCS[1],
            (
                "allow_rare_classes",
                "keep a class that only one row holds, refused by default as a likely stray label; default false",
            ),
        ]
    }

    fn sample_kind(&self, _: &CsvConfig) -> Option<SampleKind> {
        Some(SampleKind::Row)
    }

    fn resolve_paths(&self, params: &mut CsvConfig, folder: &Path) {
        params.file = folder.join(&params.file);
        if let Some(test) = &mut params.test_file {
            *test = folder.join(&*test);
        }
    }

    fn check(&self, params: &CsvConfig, _: &DataContext, problems: &mut Problems) {
        for (field, file) in [
            ("file", Some(&params.file)),
            ("test_file", params.test_file.as_ref()),
        ] {
            if let Some(file) = file.filter(|file| !file.is_file()) {
                problems.add(field, format!("file {} does not exist", file.display()));
            }
        }
        if params.test_file.is_none() {
            params.split().check(problems);
        }
    }

    fn load(&self, params: &CsvConfig, context: &DataContext) -> Result<TrainTest, DataError> {
        load_csv(params, context.split_seed)
    }
}

/// Loads the built-in Breast Cancer Wisconsin (Diagnostic) table, its test rows drawn from
/// `seed`.
pub fn load_breast_cancer(split: &SplitOptions, seed: u64) -> Result<TrainTest, DataError> {
    let mut reader = Reader::new(Source::Embedded(&BREAST_CANCER))?;
    let table = read_table(&mut reader, "breast-cancer.csv", BREAST_CANCER_LABEL)?;
    split_and_scale(table, None, split, seed, reader.into_files(), false)
}

/// Loads a user's CSV files (test rows drawn from `seed` if there is no test file), each checked against a `SHA256SUMS` in its folder if there is one.
pub fn load_csv(config: &CsvConfig, seed: u64) -> Result<TrainTest, DataError> {
    let mut files = Vec::new();
    let mut read = |file: &Path| -> Result<Table, DataError> {
        let folder = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        // The reader finds `name.gz` by itself.
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        let mut reader = Reader::new(Source::Folder(folder))?;
        let table = read_table(&mut reader, name, &config.label)?;
        files.extend(reader.into_files());
        Ok(table)
    };
    let train = read(&config.file)?;
    let test = config.test_file.as_deref().map(&mut read).transpose()?;
    let allow_rare = config.allow_rare_classes;
    split_and_scale(train, test, &config.split(), seed, files, allow_rare)
}

/// A table as read: features row after row, and each row's label as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The file it was read from.
    pub path: PathBuf,
    /// The feature columns' names, in order.
    pub columns: Vec<String>,
    /// `columns.len()` features per row, row after row.
    pub features: Vec<f32>,
    /// Each row's label, as written.
    pub labels: Vec<String>,
}

impl Table {
    /// Number of feature columns.
    pub fn width(&self) -> usize {
        self.columns.len()
    }
}

/// Reads the CSV file `name` from `reader`, with `label` as the label column.
fn read_table(reader: &mut Reader, name: &str, label: &str) -> Result<Table, DataError> {
    let (path, bytes) = reader.read(name)?;
    parse_csv(&path, &bytes, label)
}

/// Parses a CSV table with `label` as the label column, naming `path`, the line and the column
/// in any error.
pub fn parse_csv(path: &Path, bytes: &[u8], label: &str) -> Result<Table, DataError> {
    let corrupt = |reason: String| DataError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(bytes);
    let header = csv
        .headers()
        .map_err(|e| corrupt(format!("has no readable header row: {e}")))?
        .clone();
    let names: Vec<String> = header.iter().map(|name| name.trim().to_string()).collect();
    let label_at = names.iter().position(|name| name == label).ok_or_else(|| {
        corrupt(format!(
            "has no column {label:?} for the labels; its header names {}",
            quoted_list(&names)
        ))
    })?;
    let mut table = Table {
        path: path.to_path_buf(),
        columns: names
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != label_at)
            .map(|(_, name)| name.clone())
            .collect(),
        features: Vec::new(),
        labels: Vec::new(),
    };
    for record in csv.records() {
        let record = record.map_err(|e| corrupt(format!("cannot be read as CSV: {e}")))?;
        let line = record.position().map_or(0, |p| p.line());
        if record.len() != names.len() {
            return Err(corrupt(format!(
                "line {line} has {} fields; the header has {}",
                record.len(),
                names.len()
            )));
        }
        for (i, field) in record.iter().enumerate() {
            if i == label_at {
                table.labels.push(field.trim().to_string());
                continue;
            }
            let value: f32 = field
                .trim()
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    corrupt(format!(
                        "line {line}, column {:?}: {field:?} is not a finite number",
                        names[i]
                    ))
                })?;
            table.features.push(value);
        }
    }
    if table.labels.is_empty() {
        return Err(corrupt("has a header but no rows".into()));
    }
    if table.columns.is_empty() {
        return Err(corrupt(format!(
            "has no feature columns besides the label column {label:?}"
        )));
    }
    Ok(table)
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("{name:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses labels that cannot make a classifier: one class in all, or (unless `allow_rare`) a
/// class that a single row holds, named with its table and row.
fn check_class_sizes(tables: &[&Table], allow_rare: bool) -> Result<(), DataError> {
    // Each class's row count, and where its first row stands.
    let mut classes: BTreeMap<&str, (usize, &Path, usize)> = BTreeMap::new();
    for table in tables {
        for (row, label) in table.labels.iter().enumerate() {
            let first = (0, table.path.as_path(), row + 1);
            classes.entry(label).or_insert(first).0 += 1;
        }
    }
    if let (1, Some(label)) = (classes.len(), classes.keys().next()) {
        return Err(DataError::Corrupt {
            path: tables[0].path.clone(),
            reason: format!(
                "holds one class, {label:?}, in its label column; a classifier needs at least two (it would score 100% on any test)"
            ),
        });
    }
    match classes.iter().find(|(_, (count, ..))| *count == 1) {
        Some((label, (_, path, row))) if !allow_rare => Err(DataError::Corrupt {
            path: path.to_path_buf(),
            reason: format!(
                "has the label {label:?} on row {row} alone, a class of one row: a stray value, or set \"data.allow_rare_classes\": true to keep it as a class"
            ),
        }),
        _ => Ok(()),
    }
}

/// The classes of the labels written in some tables: the numbers themselves when every label
/// is a class index, the sorted names otherwise.
enum Classes {
    Indices(usize),
    Names(Vec<String>),
}

impl Classes {
    fn of(tables: &[&Table]) -> Result<Self, DataError> {
        let labels = || tables.iter().flat_map(|t| t.labels.iter());
        let indices: Option<Vec<usize>> = labels().map(|l| l.parse().ok()).collect();
        let classes = match indices {
            Some(indices) => Classes::Indices(indices.into_iter().max().map_or(0, |m| m + 1)),
            None => Classes::Names(
                labels()
                    .cloned()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            ),
        };
        if classes.count() > MAX_CLASSES {
            return Err(DataError::Corrupt {
                path: tables[0].path.clone(),
                reason: format!(
                    "has {} classes in its label column; fedsim takes at most {MAX_CLASSES}",
                    classes.count()
                ),
            });
        }
        Ok(classes)
    }

    fn count(&self) -> usize {
        match self {
            Classes::Indices(count) => *count,
            Classes::Names(names) => names.len(),
        }
    }

    fn label(&self, written: &str) -> u8 {
        let index = match self {
            Classes::Indices(_) => written.parse().expect("every label parsed as an index"),
            Classes::Names(names) => names
                .binary_search_by(|name| name.as_str().cmp(written))
                .expect("every label is among the names"),
        };
        u8::try_from(index).expect("at most 256 classes")
    }
}

/// Makes the training and test splits: `test` if given (its columns must match), else rows of
/// `train` drawn from `seed`; then scales the features as `split` says. A class of one row is
/// refused unless `allow_rare`.
fn split_and_scale(
    train: Table,
    test: Option<Table>,
    split: &SplitOptions,
    seed: u64,
    files: Vec<DataFile>,
    allow_rare: bool,
) -> Result<TrainTest, DataError> {
    if let Some(test) = &test
        && test.columns != train.columns
    {
        return Err(DataError::Corrupt {
            path: test.path.clone(),
            reason: format!(
                "has feature columns {}; {} has {}",
                quoted_list(&test.columns),
                train.path.display(),
                quoted_list(&train.columns)
            ),
        });
    }
    let tables: Vec<&Table> = std::iter::once(&train).chain(test.as_ref()).collect();
    let classes = Classes::of(&tables)?;
    check_class_sizes(&tables, allow_rare)?;
    let width = train.width();
    let rows = |table: &Table| -> Vec<(Vec<f32>, u8)> {
        table
            .features
            .chunks_exact(width)
            .zip(&table.labels)
            .map(|(row, label)| (row.to_vec(), classes.label(label)))
            .collect()
    };
    let (train_rows, test_rows) = match &test {
        Some(test) => (rows(&train), rows(test)),
        None => {
            let mut all = rows(&train);
            all.shuffle(&mut stream(seed, TEST_SPLIT, 0, 0));
            let test_len = ((all.len() as f64 * split.test_fraction).round() as usize)
                .clamp(1, all.len().saturating_sub(1).max(1));
            let train_rows = all.split_off(test_len);
            (train_rows, all)
        }
    };
    let shape = DataShape {
        sample: SampleShape::Row(width),
        num_classes: classes.count(),
    };
    let scale = split
        .standardize
        .then(|| Standardization::fit(&train_rows, width));
    let dataset = |rows: Vec<(Vec<f32>, u8)>| {
        let (mut features, labels): (Vec<f32>, Vec<u8>) = (
            rows.iter()
                .flat_map(|(row, _)| row.iter().copied())
                .collect(),
            rows.iter().map(|&(_, label)| label).collect(),
        );
        if let Some(scale) = &scale {
            scale.apply(&mut features);
        }
        Dataset::from_floats(features, labels, shape)
    };
    Ok(TrainTest {
        train: dataset(train_rows),
        test: dataset(test_rows),
        natural: None,
        files,
    })
}

/// Per-column mean and standard deviation.
struct Standardization {
    mean: Vec<f64>,
    std: Vec<f64>,
}

impl Standardization {
    fn fit(rows: &[(Vec<f32>, u8)], width: usize) -> Self {
        let n = rows.len().max(1) as f64;
        let mut mean = vec![0.0; width];
        for (row, _) in rows {
            mean.iter_mut()
                .zip(row)
                .for_each(|(m, &v)| *m += f64::from(v) / n);
        }
        let mut variance = vec![0.0; width];
        for (row, _) in rows {
            for ((var, m), &v) in variance.iter_mut().zip(&mean).zip(row) {
                *var += (f64::from(v) - m).powi(2) / n;
            }
        }
        // A constant column stays centred at zero rather than dividing by zero.
        let std = variance
            .into_iter()
            .map(|v: f64| if v > 0.0 { v.sqrt() } else { 1.0 })
            .collect();
        Self { mean, std }
    }

    fn apply(&self, features: &mut [f32]) {
        for row in features.chunks_exact_mut(self.mean.len()) {
            for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.std) {
                *v = ((f64::from(*v) - m) / s) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Table, String> {
        parse_csv(Path::new("t.csv"), text.as_bytes(), "y").map_err(|e| e.to_string())
    }

    #[test]
    fn a_table_reads_its_features_and_labels_by_column_name() {
        let table = parse("a,y,b\n1,cat,2\n3,dog,4.5\n").unwrap();
        assert_eq!(table.columns, ["a", "b"]);
        assert_eq!(table.features, [1.0, 2.0, 3.0, 4.5]);
        assert_eq!(table.labels, ["cat", "dog"]);
    }

    #[test]
    fn bad_rows_are_named_with_their_line_and_column() {
        let short = parse("a,y\n1,0\n2\n").unwrap_err();
        assert!(
            short.contains("t.csv line 3 has 1 fields; the header has 2"),
            "{short}"
        );
        let text = parse("a,y\n1,0\nx,1\n").unwrap_err();
        assert!(
            text.contains("line 3, column \"a\": \"x\" is not a finite number"),
            "{text}"
        );
        let missing = parse("a,b\n1,0\n").unwrap_err();
        assert!(
            missing.contains("no column \"y\"") && missing.contains("\"a\", \"b\""),
            "{missing}"
        );
        let empty = parse("a,y\n").unwrap_err();
        assert!(empty.contains("no rows"), "{empty}");
    }

    #[test]
    fn names_are_numbered_in_sorted_order_and_indices_kept() {
        let named = parse("a,y\n1,dog\n2,cat\n").unwrap();
        let classes = Classes::of(&[&named]).unwrap();
        assert_eq!((classes.label("cat"), classes.label("dog")), (0, 1));
        let indexed = parse("a,y\n1,3\n2,0\n").unwrap();
        assert_eq!(Classes::of(&[&indexed]).unwrap().count(), 4);
    }

    #[test]
    fn one_class_or_a_class_of_one_row_is_refused_unless_allowed() {
        let one = parse("x,y\n1,a\n2,a\n3,a\n").unwrap();
        let refused = check_class_sizes(&[&one], true).unwrap_err().to_string();
        assert!(refused.contains("holds one class, \"a\""), "{refused}");
        let stray = parse("x,y\n1,a\n2,b\n3,a\n4,b\n5,bb\n").unwrap();
        let refused = check_class_sizes(&[&stray], false).unwrap_err().to_string();
        assert!(
            refused.contains("t.csv has the label \"bb\" on row 5 alone"),
            "{refused}"
        );
        check_class_sizes(&[&stray], true).unwrap();
        let test = parse("x,y\n6,bb\n").unwrap();
        check_class_sizes(&[&stray, &test], false).unwrap();
    }

    #[test]
    fn standardised_training_columns_have_zero_mean_and_unit_variance() {
        let rows = vec![(vec![1.0, 5.0], 0), (vec![3.0, 5.0], 1)];
        let scale = Standardization::fit(&rows, 2);
        let mut features = vec![1.0, 5.0, 3.0, 5.0];
        scale.apply(&mut features);
        assert_eq!(features, [-1.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn the_built_in_table_splits_by_seed() {
        let split = SplitOptions::default();
        let data = load_breast_cancer(&split, 1).unwrap();
        assert_eq!((data.train.len(), data.test.len()), (455, 114));
        assert_eq!(data.train.shape().sample, SampleShape::Row(30));
        assert_eq!(data.train.num_classes(), 2);
        let again = load_breast_cancer(&split, 1).unwrap();
        assert_eq!(data.train.labels(), again.train.labels());
        let other = load_breast_cancer(&split, 2).unwrap();
        assert_ne!(data.train.labels(), other.train.labels());
    }
}
