//! FEMNIST and Shakespeare in the JSON format of LEAF (Caldas et al. 2018, "LEAF: A Benchmark
//! for Federated Settings"), with the benchmark's own clients: FEMNIST's writers and
//! Shakespeare's speaking roles.
//!
//! LEAF's scripts write a folder with `train/` and `test/` subfolders of `.json` files (raw
//! or gzipped here), each `{"users": [...], "num_samples": [...], "user_data": {user: {"x":
//! [...], "y": [...]}}}`. A user's training and test samples are its own, so the users are
//! natural clients, each evaluated on its own test samples.
//!
//! - FEMNIST: `x` is a 28x28 image as 784 values in `[0, 1]` (LEAF writes byte values / 255,
//!   white 1.0), `y` one of 62 classes (digits, upper- and lower-case letters).
//! - Shakespeare: `x` is a string of 80 characters, `y` the character that follows, both from
//!   LEAF's 80-character vocabulary; the task is predicting the next character.
//!
//! A small Shakespeare set built from public-domain plays is built into fedsim
//! (`datasets/shakespeare/`, its script beside it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::source::{Embedded, Reader, Source, embedded};
use super::{
    DataContext, DataError, DataShape, DataSource, Dataset, NaturalClients, SampleKind,
    SampleShape, TrainTest, check_dir, resolve_dir,
};
use crate::config::check::Problems;

/// LEAF's Shakespeare vocabulary, in its order: a character's index is its token id and its
/// class.
pub const SHAKESPEARE_VOCABULARY: &str =
    "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}";

/// The Shakespeare set built into fedsim.
pub static SHAKESPEARE: Embedded = embedded!(
    "shakespeare",
    [
        "SHA256SUMS",
        "train/shakespeare.json.gz",
        "test/shakespeare.json.gz"
    ]
);

/// The sequence length of LEAF's Shakespeare, the shape an empty split is given.
const LEAF_SEQUENCE_LENGTH: usize = 80;

/// FEMNIST's image side and number of classes.
const FEMNIST_SIDE: usize = 28;
const FEMNIST_CLASSES: usize = 62;

/// Which LEAF benchmark a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafTask {
    /// Handwritten characters by writer.
    Femnist,
    /// Next character of each speaking role's lines.
    Shakespeare,
}

/// One LEAF file as written (other fields, such as the `hierarchies` some of LEAF's scripts
/// add, are skipped).
#[derive(Deserialize)]
struct LeafFile<X, Y> {
    users: Vec<String>,
    num_samples: Vec<usize>,
    user_data: HashMap<String, UserData<X, Y>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserData<X, Y> {
    x: Vec<X>,
    y: Vec<Y>,
}

/// Where a LEAF data set's `train/` and `test/` folders of JSON files are.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafFiles {
    /// Folder holding `train/` and `test/` (LEAF's `data/<name>/data`); relative paths are
    /// resolved against the experiment file's folder. Default: the copy built into fedsim
    /// (Shakespeare only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
}

/// What a LEAF data set's parameter means, for `fedsim datasets`.
const LEAF_DOCS: &[(&str, &str)] = &[(
    "dir",
    "folder holding LEAF's train/ and test/ folders of JSON files; default: the copy built into fedsim, where there is one",
)];

impl DataSource for LeafTask {
    type Params = LeafFiles;

    fn name(&self) -> &'static str {
        match self {
            LeafTask::Femnist => "femnist",
            LeafTask::Shakespeare => "shakespeare",
        }
    }

    fn about(&self) -> &'static str {
        match self {
            LeafTask::Femnist => {
                "LEAF's FEMNIST: 28x28 handwritten characters of 62 classes, whose writers are natural clients; give its folder"
            }
            LeafTask::Shakespeare => {
                "LEAF's Shakespeare: the next character after 80, whose speaking roles are natural clients; a small set is built in"
            }
        }
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        LEAF_DOCS
    }

    fn sample_kind(&self, _: &LeafFiles) -> Option<SampleKind> {
        match self {
            LeafTask::Femnist => Some(SampleKind::Image([1, FEMNIST_SIDE, FEMNIST_SIDE])),
            LeafTask::Shakespeare => Some(SampleKind::Tokens),
        }
    }

    fn has_natural_clients(&self, _: &LeafFiles) -> bool {
        true
    }

    fn resolve_paths(&self, params: &mut LeafFiles, folder: &Path) {
        resolve_dir(&mut params.dir, folder);
    }

    fn check(&self, params: &LeafFiles, _: &DataContext, problems: &mut Problems) {
        match (self, params.dir.as_deref()) {
            (LeafTask::Femnist, None) => problems.add(
                "dir",
                "FEMNIST is not built into fedsim: give the folder holding LEAF's train/ and test/ folders of JSON files",
            ),
            (_, dir) => check_dir(dir, problems),
        }
    }

    fn load(&self, params: &LeafFiles, _: &DataContext) -> Result<TrainTest, DataError> {
        load(*self, params.dir.as_deref())
    }
}

/// Loads a LEAF data set from `dir` (holding `train/` and `test/`), or the built-in
/// Shakespeare set when `dir` is `None`.
pub fn load(task: LeafTask, dir: Option<&Path>) -> Result<TrainTest, DataError> {
    let source = match dir {
        Some(dir) => Source::Folder(dir.to_path_buf()),
        None => Source::Embedded(&SHAKESPEARE),
    };
    let reader = Reader::new(source)?;
    match task {
        LeafTask::Femnist => read_splits::<FemnistSamples>(reader),
        LeafTask::Shakespeare => read_splits::<ShakespeareSamples>(reader),
    }
}

/// Reads the training split, then the test split of the same users.
fn read_splits<S: Samples>(mut reader: Reader) -> Result<TrainTest, DataError> {
    let mut users = Users::default();
    let (train, natural_train) = read_split::<S>(&mut reader, "train", &mut users)?;
    users.frozen = true;
    let (test, natural_test) = read_split::<S>(&mut reader, "test", &mut users)?;
    // Sequences of another length than the training ones (an empty test split has none).
    if train.shape() != test.shape() && !test.is_empty() {
        return Err(DataError::Corrupt {
            path: reader.path_of("test"),
            reason: format!(
                "holds {}, the training files {}",
                test.shape().sample,
                train.shape().sample
            ),
        });
    }
    Ok(TrainTest {
        train,
        test,
        natural: Some(NaturalClients {
            train: natural_train,
            test: natural_test,
        }),
        files: reader.into_files(),
    })
}

/// The users met so far, in order of first appearance in the training files.
#[derive(Default)]
struct Users {
    index: HashMap<String, usize>,
    /// Set once the training files are read: test files may not bring new users.
    frozen: bool,
}

/// The samples of one split of one LEAF task, as they are read.
trait Samples: Default {
    /// One sample's `x` and `y` as the JSON holds them.
    type X: DeserializeOwned;
    type Y: DeserializeOwned;

    /// Adds one sample, or says what is wrong with it.
    fn push(&mut self, x: Self::X, y: Self::Y) -> Result<(), String>;

    /// The data set of the samples added.
    fn into_dataset(self) -> Dataset;
}

/// Reads every file of `split/` into one data set and each user's indices into it.
fn read_split<S: Samples>(
    reader: &mut Reader,
    split: &str,
    users: &mut Users,
) -> Result<(Dataset, Vec<Vec<usize>>), DataError> {
    let names = reader.list(split)?;
    if names.is_empty() {
        return Err(DataError::Corrupt {
            path: reader.path_of(split),
            reason: "holds no .json files; LEAF writes train/ and test/ folders of them".into(),
        });
    }
    let mut samples = Split::<S>::new(users);
    for name in names {
        let (path, bytes) = reader.read(&name)?;
        samples.add_file(&path, &bytes, users)?;
    }
    if samples.count == 0 && !users.frozen {
        return Err(DataError::Corrupt {
            path: reader.path_of(split),
            reason: "holds no samples".into(),
        });
    }
    Ok((samples.samples.into_dataset(), samples.clients))
}

/// Reads one LEAF file of `task` on its own, as a training split, and returns its number of
/// samples: what the fuzz target drives.
pub fn parse_file(task: LeafTask, path: &Path, bytes: &[u8]) -> Result<usize, DataError> {
    let users = &mut Users::default();
    let count = match task {
        LeafTask::Femnist => {
            let mut split = Split::<FemnistSamples>::new(users);
            split.add_file(path, bytes, users)?;
            split.count
        }
        LeafTask::Shakespeare => {
            let mut split = Split::<ShakespeareSamples>::new(users);
            split.add_file(path, bytes, users)?;
            split.count
        }
    };
    Ok(count)
}

/// A split as its files are read.
struct Split<S> {
    samples: S,
    /// Each user's sample indices, users in [`Users`] order.
    clients: Vec<Vec<usize>>,
    count: usize,
}

impl<S: Samples> Split<S> {
    fn new(users: &Users) -> Self {
        Self {
            samples: S::default(),
            clients: vec![Vec::new(); users.index.len()],
            count: 0,
        }
    }

    /// Adds the samples of one file, its users to `users` unless they are frozen.
    fn add_file(&mut self, path: &Path, bytes: &[u8], users: &mut Users) -> Result<(), DataError> {
        let file: LeafFile<S::X, S::Y> = parse(path, bytes)?;
        let corrupt = |reason: String| DataError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        if file.users.len() != file.num_samples.len() {
            return Err(corrupt(format!(
                "lists {} users and {} num_samples; they must agree",
                file.users.len(),
                file.num_samples.len()
            )));
        }
        let mut user_data = file.user_data;
        let mut listed = std::collections::HashSet::new();
        for (user, &expected) in file.users.iter().zip(&file.num_samples) {
            if !listed.insert(user) {
                return Err(corrupt(format!(
                    "lists user {user:?} twice in users; each user is listed once"
                )));
            }
            let data = user_data.remove(user).ok_or_else(|| {
                corrupt(format!(
                    "lists user {user:?}, who has no entry in user_data"
                ))
            })?;
            if data.x.len() != expected || data.y.len() != expected {
                return Err(corrupt(format!(
                    "user {user:?}: num_samples says {expected}, and user_data has {} x and {} y",
                    data.x.len(),
                    data.y.len()
                )));
            }
            if expected == 0 {
                // A user without samples is no client.
                continue;
            }
            let client = match users.index.get(user) {
                Some(&client) => client,
                None if users.frozen => {
                    return Err(corrupt(format!(
                        "has test samples of user {user:?}, who has no training samples"
                    )));
                }
                None => {
                    users.index.insert(user.clone(), self.clients.len());
                    self.clients.push(Vec::new());
                    self.clients.len() - 1
                }
            };
            for (i, (x, y)) in data.x.into_iter().zip(data.y).enumerate() {
                self.samples
                    .push(x, y)
                    .map_err(|reason| corrupt(format!("user {user:?}, sample {i}: {reason}")))?;
                self.clients[client].push(self.count);
                self.count += 1;
            }
        }
        Ok(())
    }
}

/// Parses one LEAF file, naming the place of any error.
fn parse<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, DataError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(deserializer).map_err(|e| DataError::Corrupt {
        path: PathBuf::from(path),
        reason: format!("is not a LEAF file: at {}: {}", e.path(), e.inner()),
    })
}

/// FEMNIST images, stored as bytes while every value is a byte value / 255 (as LEAF writes
/// them), else as `f32`.
#[derive(Default)]
struct FemnistSamples {
    pixels: Pixels,
    labels: Vec<u8>,
}

enum Pixels {
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
}

impl Default for Pixels {
    fn default() -> Self {
        Pixels::Bytes(Vec::new())
    }
}

impl Pixels {
    fn push(&mut self, value: f64) {
        match self {
            Pixels::Bytes(bytes) => {
                let byte = (value * 255.0).round();
                if (0.0..=255.0).contains(&byte) && (value - byte / 255.0).abs() < 1e-9 {
                    bytes.push(byte as u8);
                } else {
                    let floats = bytes.iter().map(|&b| byte_feature(b)).collect();
                    *self = Pixels::Floats(floats);
                    self.push(value);
                }
            }
            Pixels::Floats(floats) => floats.push(value as f32),
        }
    }
}

fn byte_feature(byte: u8) -> f32 {
    f32::from(byte) / 255.0
}

impl Samples for FemnistSamples {
    type X = Vec<f64>;
    type Y = u64;

    fn push(&mut self, x: Vec<f64>, y: u64) -> Result<(), String> {
        let pixels = FEMNIST_SIDE * FEMNIST_SIDE;
        if x.len() != pixels {
            return Err(format!(
                "x has {} values; FEMNIST images are 28x28 = {pixels}",
                x.len()
            ));
        }
        if let Some(bad) = x.iter().find(|v| !(0.0..=1.0).contains(*v)) {
            return Err(format!("x holds {bad}; pixel values are in [0, 1]"));
        }
        let label = u8::try_from(y)
            .ok()
            .filter(|&l| usize::from(l) < FEMNIST_CLASSES)
            .ok_or_else(|| format!("y is {y}; FEMNIST classes are 0 to 61"))?;
        x.into_iter().for_each(|v| self.pixels.push(v));
        self.labels.push(label);
        Ok(())
    }

    fn into_dataset(self) -> Dataset {
        let shape = DataShape {
            sample: SampleShape::Image([1, FEMNIST_SIDE, FEMNIST_SIDE]),
            num_classes: FEMNIST_CLASSES,
        };
        match self.pixels {
            Pixels::Bytes(bytes) => Dataset::from_bytes(bytes, byte_feature, self.labels, shape),
            Pixels::Floats(floats) => Dataset::from_floats(floats, self.labels, shape),
        }
    }
}

/// Shakespeare's character sequences as token ids, all of one length.
#[derive(Default)]
struct ShakespeareSamples {
    tokens: Vec<u8>,
    labels: Vec<u8>,
    steps: Option<usize>,
}

/// The token id of `c`, if it is in the vocabulary.
fn token(c: char) -> Option<u8> {
    SHAKESPEARE_VOCABULARY
        .find(c)
        .and_then(|i| u8::try_from(i).ok())
}

fn tokens_of(text: &str, field: &str) -> Result<Vec<u8>, String> {
    text.chars()
        .map(|c| {
            token(c).ok_or_else(|| {
                format!("{field} holds {c:?}, which is not in LEAF's 80-character vocabulary")
            })
        })
        .collect()
}

impl Samples for ShakespeareSamples {
    type X = String;
    type Y = String;

    fn push(&mut self, x: String, y: String) -> Result<(), String> {
        let sequence = tokens_of(&x, "x")?;
        let steps = *self.steps.get_or_insert(sequence.len());
        if sequence.len() != steps || steps == 0 {
            return Err(format!(
                "x has {} characters; every sequence must have the first one's {steps}, at least 1",
                sequence.len()
            ));
        }
        let next = match tokens_of(&y, "y")?[..] {
            [next] => next,
            _ => return Err(format!("y is {y:?}; it must be one character")),
        };
        self.tokens.extend(sequence);
        self.labels.push(next);
        Ok(())
    }

    fn into_dataset(self) -> Dataset {
        let shape = DataShape {
            sample: SampleShape::Tokens(self.steps.unwrap_or(LEAF_SEQUENCE_LENGTH)),
            num_classes: SHAKESPEARE_VOCABULARY.len(),
        };
        Dataset::from_tokens(self.tokens, self.labels, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_leaf(dir: &Path, split: &str, file: serde_json::Value) {
        std::fs::create_dir_all(dir.join(split)).unwrap();
        std::fs::write(dir.join(split).join("part.json"), file.to_string()).unwrap();
    }

    fn shakespeare_file(users: &[(&str, &[(&str, &str)])]) -> serde_json::Value {
        let mut user_data = serde_json::Map::new();
        for (user, samples) in users {
            let x: Vec<_> = samples.iter().map(|(x, _)| *x).collect();
            let y: Vec<_> = samples.iter().map(|(_, y)| *y).collect();
            user_data.insert(user.to_string(), json!({"x": x, "y": y}));
        }
        json!({
            "users": users.iter().map(|(u, _)| *u).collect::<Vec<_>>(),
            "num_samples": users.iter().map(|(_, s)| s.len()).collect::<Vec<_>>(),
            "user_data": user_data,
        })
    }

    #[test]
    fn the_vocabulary_has_leafs_80_characters() {
        assert_eq!(SHAKESPEARE_VOCABULARY.chars().count(), 80);
        assert_eq!(token('\n'), Some(0));
        assert_eq!(token('}'), Some(79));
        assert_eq!(token('*'), None);
    }

    #[test]
    fn users_become_natural_clients_with_their_own_test_samples() {
        let dir = tempfile::tempdir().unwrap();
        let train = shakespeare_file(&[
            ("KING", &[("To be", " "), ("o be ", "o")]),
            ("FOOL", &[("Alas,", " ")]),
        ]);
        let test = shakespeare_file(&[("FOOL", &[("poor ", "Y")])]);
        write_leaf(dir.path(), "train", train);
        write_leaf(dir.path(), "test", test);
        let data = load(LeafTask::Shakespeare, Some(dir.path())).unwrap();
        assert_eq!(data.train.shape().sample, SampleShape::Tokens(5));
        assert_eq!(data.train.num_classes(), 80);
        let natural = data.natural.unwrap();
        assert_eq!(natural.train, [vec![0, 1], vec![2]]);
        assert_eq!(natural.test, [vec![], vec![0]]);
        assert_eq!(data.test.labels(), [token('Y').unwrap()]);
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        data.train.gather(&[2], &mut features, &mut labels);
        let ids: Vec<f32> = "Alas,"
            .chars()
            .map(|c| f32::from(token(c).unwrap()))
            .collect();
        assert_eq!(features, ids);
    }

    #[test]
    fn femnist_pixels_are_stored_as_bytes_and_read_back_exactly() {
        let mut samples = FemnistSamples::default();
        let x: Vec<f64> = (0..784).map(|i| (i % 256) as f64 / 255.0).collect();
        samples.push(x.clone(), 61).unwrap();
        assert!(matches!(samples.pixels, Pixels::Bytes(_)));
        let data = samples.into_dataset();
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        data.gather(&[0], &mut features, &mut labels);
        let expected: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        assert_eq!(features, expected);
        assert_eq!(labels, [61]);
    }

    #[test]
    fn femnist_values_off_the_byte_grid_are_kept_as_floats() {
        let mut samples = FemnistSamples::default();
        samples.push(vec![1.0; 784], 0).unwrap();
        samples.push(vec![0.123_456; 784], 1).unwrap();
        assert!(matches!(samples.pixels, Pixels::Floats(_)));
        let data = samples.into_dataset();
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        data.gather(&[0, 1], &mut features, &mut labels);
        assert_eq!(features[0], 1.0);
        assert_eq!(features[784], 0.123_456);
    }

    #[test]
    fn bad_files_are_reported_with_the_file_user_and_sample() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                shakespeare_file(&[("A", &[("abc", "d"), ("ab", "c")])]),
                "user \"A\", sample 1: x has 2 characters",
            ),
            (
                shakespeare_file(&[("A", &[("a*c", "d")])]),
                "x holds '*', which is not in LEAF's 80-character vocabulary",
            ),
            (
                shakespeare_file(&[("A", &[("abc", "de")])]),
                "y is \"de\"; it must be one character",
            ),
            (
                json!({"users": ["A"], "num_samples": [2], "user_data": {"A": {"x": ["abc"], "y": ["d"]}}}),
                "num_samples says 2, and user_data has 1 x and 1 y",
            ),
            (
                json!({"users": ["A"], "num_samples": [1], "user_data": {}}),
                "lists user \"A\", who has no entry in user_data",
            ),
            (
                json!({"users": ["A"], "num_samples": [1], "user_data": {"A": {"x": [3], "y": ["d"]}}}),
                "is not a LEAF file: at user_data.A.x[0]: invalid type: integer `3`",
            ),
        ];
        for (file, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            write_leaf(dir.path(), "train", file);
            write_leaf(dir.path(), "test", shakespeare_file(&[]));
            let error = load(LeafTask::Shakespeare, Some(dir.path()))
                .unwrap_err()
                .to_string();
            assert!(error.contains("part.json"), "{error}");
            assert!(error.contains(expected), "{error} lacks {expected}");
        }
    }

    #[test]
    fn a_test_user_without_training_samples_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(
            dir.path(),
            "train",
            shakespeare_file(&[("A", &[("ab", "c")])]),
        );
        write_leaf(
            dir.path(),
            "test",
            shakespeare_file(&[("B", &[("ab", "c")])]),
        );
        let error = load(LeafTask::Shakespeare, Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("test samples of user \"B\", who has no training samples"),
            "{error}"
        );
    }

    #[test]
    fn a_folder_without_json_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("train")).unwrap();
        let error = load(LeafTask::Femnist, Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(error.contains("train holds no .json files"), "{error}");
    }
}
