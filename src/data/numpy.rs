//! NumPy arrays as users save them from Python: an `.npz` archive (`np.savez` or
//! `np.savez_compressed`) or a folder of `.npy` files, holding `x_train`, `y_train`, `x_test`
//! and `y_test` (the names Keras's data sets use).
//!
//! Features of `[samples, features]` are rows; `[samples, height, width]` are one-channel
//! images; `[samples, height, width, channels]` (or `[samples, channels, height, width]` with
//! `"channels": "first"`) are images with channels. `uint8` features are stored as bytes and
//! scaled to `[0, 1]` per batch, like MNIST's pixels; `float32` and `float64` features are used
//! as they are. Labels are a vector of integers (`uint8`, `int32` or `int64`) from 0.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use npyz::{DType, NpyFile, Order, TypeChar};
use serde::{Deserialize, Serialize};

use super::source::{Reader, Source};
use super::{
    DataContext, DataError, DataShape, DataSource, Dataset, SampleKind, SampleShape, TrainTest,
};

/// The arrays a data set of NumPy arrays holds: features and labels of each split.
const ARRAYS: [&str; 4] = ["x_train", "y_train", "x_test", "y_test"];

/// The most bytes one array of an archive may decompress to.
const MAX_ARRAY_BYTES: u64 = 16 << 30;

/// Where a user's NumPy arrays are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumpyConfig {
    /// An `.npz` archive, or a folder of `x_train.npy`, `y_train.npy`, `x_test.npy` and
    /// `y_test.npy`; relative paths are resolved against the experiment file's folder.
    pub path: PathBuf,
    /// Where 4-D image arrays keep their channels: `"last"` (`[samples, height, width,
    /// channels]`, as Keras and TensorFlow save them; the default) or `"first"` (PyTorch's
    /// `[samples, channels, height, width]`).
    #[serde(default)]
    pub channels: Channels,
}

/// Where a 4-D image array keeps its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channels {
    /// `[samples, channels, height, width]`.
    First,
    /// `[samples, height, width, channels]`.
    #[default]
    Last,
}

/// A user's NumPy arrays as an experiment file names them.
#[derive(Debug, Clone, Copy)]
pub struct NumpyData;

impl DataSource for NumpyData {
    type Params = NumpyConfig;

    fn name(&self) -> &'static str {
        "numpy"
    }

    fn about(&self) -> &'static str {
        "NumPy arrays x_train, y_train, x_test and y_test in an .npz archive or a folder of .npy files"
    }

    fn param_docs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "path",
                "the .npz archive or the folder of .npy files, required",
            ),
            (
                "channels",
                "where 4-D image arrays keep their channels: \"last\" (Keras) or \"first\" (PyTorch)",
            ),
        ]
    }

    /// Arrays may hold images or rows: only their files tell.
    fn sample_kind(&self, _: &NumpyConfig) -> Option<SampleKind> {
        None
    }

    fn resolve_paths(&self, params: &mut NumpyConfig, folder: &Path) {
        params.path = folder.join(&params.path);
    }

    fn load(&self, params: &NumpyConfig, _: &DataContext) -> Result<TrainTest, DataError> {
        load(params)
    }

    fn describe(&self, params: &NumpyConfig) -> String {
        params.path.display().to_string()
    }
}

/// Loads the four arrays from the archive or folder `config.path`.
pub fn load(config: &NumpyConfig) -> Result<TrainTest, DataError> {
    let path = &config.path;
    let folder = if path.is_dir() {
        path.clone()
    } else {
        path.parent().unwrap_or(Path::new(".")).to_path_buf()
    };
    let mut reader = Reader::new(Source::Folder(folder))?;
    let arrays = if path.is_dir() {
        let mut read = |name: &str| {
            let (file, bytes) = reader.read(&format!("{name}.npy"))?;
            Array::parse(file, &bytes)
        };
        [
            read(ARRAYS[0])?,
            read(ARRAYS[1])?,
            read(ARRAYS[2])?,
            read(ARRAYS[3])?,
        ]
    } else {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let (file, bytes) = reader.read(&name)?;
        let mut archive =
            zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| DataError::Corrupt {
                path: file.clone(),
                reason: format!("is not an .npz (zip) archive: {e}"),
            })?;
        let mut read = |name: &str| member(&mut archive, &file, name);
        [
            read(ARRAYS[0])?,
            read(ARRAYS[1])?,
            read(ARRAYS[2])?,
            read(ARRAYS[3])?,
        ]
    };
    let mut splits = from_arrays(arrays, config.channels, &config.path)?;
    splits.files = reader.into_files();
    Ok(splits)
}

/// The training and test splits of the arrays `x_train`, `y_train`, `x_test` and `y_test` (in
/// that order), checked as a file's are; `origin` names them where both splits are at fault.
/// Arrays made in memory (a Python data set's) go through here as a file's do.
pub fn from_arrays(
    arrays: [Array; 4],
    channels: Channels,
    origin: &Path,
) -> Result<TrainTest, DataError> {
    let [x_train, y_train, x_test, y_test] = arrays;
    let train = dataset(x_train, y_train, channels)?;
    let test = dataset(x_test, y_test, channels)?;
    if test.shape().sample != train.shape().sample {
        return Err(DataError::Corrupt {
            path: origin.to_path_buf(),
            reason: format!(
                "holds test samples of {} and training samples of {}; they must match",
                test.shape().sample,
                train.shape().sample
            ),
        });
    }
    let num_classes = train.num_classes().max(test.num_classes());
    Ok(TrainTest {
        train: train.with_classes(num_classes),
        test: test.with_classes(num_classes),
        natural: None,
        files: Vec::new(),
    })
}

/// The array `name` of an `.npz` archive (`name.npy` inside it), whose path is `file`.
fn member(
    archive: &mut zip::ZipArchive<Cursor<Vec<u8>>>,
    file: &Path,
    name: &str,
) -> Result<Array, DataError> {
    let place = file.join(format!("{name}.npy"));
    let corrupt = |reason: String| DataError::Corrupt {
        path: place.clone(),
        reason,
    };
    let member = archive.by_name(&format!("{name}.npy")).map_err(|_| {
        corrupt(format!(
            "is missing: the archive must hold {} (np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...))",
            ARRAYS.join(", ")
        ))
    })?;
    let mut bytes = Vec::new();
    member
        .take(MAX_ARRAY_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| corrupt(format!("cannot be decompressed: {e}")))?;
    Array::parse(place.clone(), &bytes)
}

/// One array's values, read and checked against its header.
#[derive(Debug)]
pub struct Array {
    path: PathBuf,
    shape: Vec<usize>,
    values: Values,
}

/// The deepest nesting of brackets in an `.npy` header that fedsim accepts: numpy writes a
/// dict holding a shape tuple (2), or a structured dtype's list of field tuples (4).
const MAX_HEADER_DEPTH: usize = 8;

/// How deeply the brackets of an `.npy` file's header nest: the header is the text after the
/// magic, version and length (10 bytes), up to its closing newline.
fn header_depth(bytes: &[u8]) -> Option<usize> {
    let header = bytes.get(10..)?;
    let end = header
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(header.len());
    let (mut depth, mut deepest) = (0usize, 0usize);
    for &b in &header[..end] {
        match b {
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Some(deepest)
}

/// The element types fedsim reads.
#[derive(Debug, Clone, Copy)]
enum Element {
    U8,
    F32,
    F64,
    I32,
    I64,
}

impl Element {
    /// The element type of a header's type character and size, if fedsim reads it.
    fn of(type_char: TypeChar, size: u64) -> Option<Self> {
        match (type_char, size) {
            (TypeChar::Uint, 1) => Some(Element::U8),
            (TypeChar::Float, 4) => Some(Element::F32),
            (TypeChar::Float, 8) => Some(Element::F64),
            (TypeChar::Int, 4) => Some(Element::I32),
            (TypeChar::Int, 8) => Some(Element::I64),
            _ => None,
        }
    }

    /// Bytes per element.
    fn size(self) -> usize {
        match self {
            Element::U8 => 1,
            Element::F32 | Element::I32 => 4,
            Element::F64 | Element::I64 => 8,
        }
    }
}

/// An array's elements, as fedsim keeps them.
#[derive(Debug)]
enum Values {
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
    Integers(Vec<i64>),
}

impl Array {
    /// Parses an `.npy` file's bytes, naming `path` in any error.
    pub fn parse(path: PathBuf, bytes: &[u8]) -> Result<Self, DataError> {
        let corrupt = |reason: String| DataError::Corrupt {
            path: path.clone(),
            reason,
        };
        if let Some(depth) = header_depth(bytes).filter(|&d| d > MAX_HEADER_DEPTH) {
            // npyz's parser of the header's Python literal takes time exponential in its depth.
            return Err(corrupt(format!(
                "is not an .npy array: its header nests {depth} levels of brackets, where numpy writes at most {MAX_HEADER_DEPTH}"
            )));
        }
        let open =
            || NpyFile::new(bytes).map_err(|e| corrupt(format!("is not an .npy array: {e}")));
        let npy = open()?;
        if npy.order() == Order::Fortran {
            return Err(corrupt(
                "is stored in Fortran order; save np.ascontiguousarray(array) instead".into(),
            ));
        }
        let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
        let unsupported = |descr: String| {
            corrupt(format!(
                "has element type {descr}; fedsim reads uint8, int32, int64, float32 and float64"
            ))
        };
        let DType::Plain(element) = npy.dtype() else {
            return Err(unsupported(npy.dtype().descr()));
        };
        // Told before the length, which means nothing for an unreadable type (`|O`: objects).
        let kind = Element::of(element.type_char(), element.size_field())
            .ok_or_else(|| unsupported(element.to_string()))?;
        // The data must be all there before anything is allocated for it.
        let expected = shape
            .iter()
            .try_fold(kind.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| corrupt(format!("declares shape {shape:?}, too large to hold")))?;
        let found = npy.into_inner().len();
        if found != expected {
            let how = if found < expected {
                "truncated"
            } else {
                "longer than declared"
            };
            return Err(corrupt(format!(
                "is {how}: shape {shape:?} of {element} needs {expected} bytes of data, found {found}"
            )));
        }
        let npy = open()?;
        let values = match kind {
            Element::U8 => npy.into_vec::<u8>().map(Values::Bytes),
            Element::F32 => npy.into_vec::<f32>().map(Values::Floats),
            Element::F64 => npy
                .into_vec::<f64>()
                .map(|v| Values::Floats(v.into_iter().map(|x| x as f32).collect())),
            Element::I32 => npy
                .into_vec::<i32>()
                .map(|v| Values::Integers(v.into_iter().map(i64::from).collect())),
            Element::I64 => npy.into_vec::<i64>().map(Values::Integers),
        }
        .map_err(|e| corrupt(format!("cannot be read: {e}")))?;
        Ok(Self {
            path,
            shape,
            values,
        })
    }

    /// The array's shape, outermost dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements read.
    pub fn len(&self) -> usize {
        match &self.values {
            Values::Bytes(values) => values.len(),
            Values::Floats(values) => values.len(),
            Values::Integers(values) => values.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn corrupt(&self, reason: String) -> DataError {
        DataError::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }
}

/// One split from its features and labels arrays.
fn dataset(x: Array, y: Array, channels: Channels) -> Result<Dataset, DataError> {
    let samples = x.shape.first().copied().unwrap_or(0);
    let labels = labels(&y, samples)?;
    let sample = match x.shape[..] {
        [_, width] => SampleShape::Row(width),
        [_, height, width] => SampleShape::Image([1, height, width]),
        [_, height, width, c] if channels == Channels::Last => {
            SampleShape::Image([c, height, width])
        }
        [_, c, height, width] => SampleShape::Image([c, height, width]),
        _ => {
            return Err(x.corrupt(format!(
                "has shape {:?}; features are [samples, features], [samples, height, width] or [samples, height, width, channels]",
                x.shape
            )));
        }
    };
    if samples == 0 || sample.is_empty() {
        return Err(x.corrupt(format!(
            "has shape {:?}: no samples or no features",
            x.shape
        )));
    }
    let num_classes = labels.iter().max().map_or(0, |&m| usize::from(m) + 1);
    let shape = DataShape {
        sample,
        num_classes,
    };
    let channels_last = x.shape.len() == 4 && channels == Channels::Last;
    Ok(match x.values {
        Values::Bytes(mut values) => {
            if channels_last {
                values = to_channels_first(&values, sample);
            }
            Dataset::from_bytes(values, |v| f32::from(v) / 255.0, labels, shape)
        }
        Values::Floats(mut values) => {
            if channels_last {
                values = to_channels_first(&values, sample);
            }
            Dataset::from_floats(values, labels, shape)
        }
        Values::Integers(_) => {
            return Err(
                x.corrupt("holds integers; features must be uint8, float32 or float64".into())
            );
        }
    })
}

/// The labels array as class indices, checked against the number of samples.
fn labels(y: &Array, samples: usize) -> Result<Vec<u8>, DataError> {
    let vector = matches!(y.shape[..], [n] | [n, 1] if n == samples);
    if !vector {
        return Err(y.corrupt(format!(
            "has shape {:?}; labels are a vector of {samples} integers, one per sample of the features",
            y.shape
        )));
    }
    let as_class = |value: i64| {
        u8::try_from(value).map_err(|_| {
            y.corrupt(format!(
                "holds label {value}; labels are class indices from 0 to 255"
            ))
        })
    };
    match &y.values {
        Values::Bytes(values) => Ok(values.clone()),
        Values::Integers(values) => values.iter().map(|&v| as_class(v)).collect(),
        Values::Floats(_) => Err(y.corrupt(
            "holds floating-point values; labels must be integers (uint8, int32 or int64)".into(),
        )),
    }
}

/// Reorders `[samples, height, width, channels]` values to `[samples, channels, height,
/// width]`.
fn to_channels_first<T: Copy>(values: &[T], sample: SampleShape) -> Vec<T> {
    let SampleShape::Image([channels, height, width]) = sample else {
        unreachable!("only images have channels")
    };
    let pixels = height * width;
    let mut reordered = Vec::with_capacity(values.len());
    for image in values.chunks_exact(pixels * channels) {
        for c in 0..channels {
            reordered.extend(image.iter().skip(c).step_by(channels).copied());
        }
    }
    reordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use npyz::WriterBuilder;

    fn npy<T: npyz::AutoSerialize>(shape: &[u64], values: Vec<T>) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut writer = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(&mut bytes)
            .begin_nd()
            .unwrap();
        writer.extend(values).unwrap();
        writer.finish().unwrap();
        bytes
    }

    fn parse(bytes: &[u8]) -> Result<Array, String> {
        Array::parse("a.npy".into(), bytes).map_err(|e| e.to_string())
    }

    #[test]
    fn channels_last_images_are_reordered_to_channels_first() {
        // One 1x2 image with 3 channels: pixel 0 is (1, 2, 3), pixel 1 is (4, 5, 6).
        let reordered = to_channels_first(&[1, 2, 3, 4, 5, 6], SampleShape::Image([3, 1, 2]));
        assert_eq!(reordered, [1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn arrays_are_read_by_element_type() {
        assert!(matches!(
            parse(&npy(&[2], vec![1u8, 2])).unwrap().values,
            Values::Bytes(_)
        ));
        let floats = parse(&npy(&[1, 2], vec![0.5f64, 1.5])).unwrap();
        assert_eq!(floats.shape, [1, 2]);
        assert!(matches!(floats.values, Values::Floats(v) if v == [0.5, 1.5]));
        let labels = parse(&npy(&[2], vec![3i64, 0])).unwrap();
        assert!(matches!(labels.values, Values::Integers(v) if v == [3, 0]));
    }

    #[test]
    fn a_cut_or_oddly_typed_array_is_named_with_what_was_expected() {
        let whole = npy(&[4], vec![1.0f32, 2.0, 3.0, 4.0]);
        let cut = parse(&whole[..whole.len() - 3]).unwrap_err();
        assert!(
            cut.contains("a.npy is truncated") && cut.contains("needs 16 bytes"),
            "{cut}"
        );
        let odd = parse(&npy(&[2], vec![1i16, 2])).unwrap_err();
        assert!(odd.contains("element type <i2"), "{odd}");
        let not_npy = parse(b"PK\x03\x04").unwrap_err();
        assert!(not_npy.contains("is not an .npy array"), "{not_npy}");
        // numpy pickles an object array after the header: its length says nothing.
        let mut header = "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }".to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut objects = b"\x93NUMPY\x01\x00".to_vec();
        objects.extend((header.len() as u16).to_le_bytes());
        objects.extend(header.as_bytes());
        objects.extend(b"\x80\x04\x95pickled objects, not 16 bytes.");
        let objects = parse(&objects).unwrap_err();
        assert!(
            objects.contains("element type |O") && !objects.contains("bytes of data"),
            "{objects}"
        );
    }

    #[test]
    fn labels_must_be_one_integer_per_sample() {
        let floats = Array::parse("y.npy".into(), &npy(&[2], vec![0.0f32, 1.0])).unwrap();
        let error = labels(&floats, 2).unwrap_err().to_string();
        assert!(error.contains("floating-point"), "{error}");
        let ints = Array::parse("y.npy".into(), &npy(&[3], vec![0i32, 1, 2])).unwrap();
        let error = labels(&ints, 2).unwrap_err().to_string();
        assert!(error.contains("vector of 2 integers"), "{error}");
        let big = Array::parse("y.npy".into(), &npy(&[1], vec![300i64])).unwrap();
        let error = labels(&big, 1).unwrap_err().to_string();
        assert!(error.contains("label 300"), "{error}");
    }
}
