//! Files written whole or not at all: each through a temporary file beside it and a rename, so
//! that a process killed while writing leaves the file as it was, and a temporary file that the
//! next process removes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::stop::crash_point;

/// A file or folder that cannot be written, with the path.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    /// The file or folder.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename, so that the file
/// is either whole or as it was. A write that fails (a full disk, say) removes what it wrote.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let partial = partial_path(path);
    fs::write(&partial, bytes)
        .and_then(|()| fs::rename(&partial, path))
        .map_err(|error| {
            let _ = fs::remove_file(&partial);
            write_error(path)(error)
        })?;
    crash_point(path, 1);
    Ok(())
}

/// Where [`write_atomically`] writes `path` before renaming it.
fn partial_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}{PARTIAL}"))
}

/// The ending of the temporary files of [`write_atomically`].
const PARTIAL: &str = ".partial";

/// Removes the temporary files that a process killed while writing left in `dir`.
pub(super) fn remove_partials(dir: &Path) -> Result<(), WriteError> {
    let entries = fs::read_dir(dir).map_err(write_error(dir))?;
    for entry in entries {
        let path = entry.map_err(write_error(dir))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') && name.ends_with(PARTIAL) {
            fs::remove_file(&path).map_err(write_error(&path))?;
        }
    }
    Ok(())
}

/// Turns an I/O error on `path` into a [`WriteError`].
pub(super) fn write_error(path: &Path) -> impl FnOnce(io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError { path, source }
}
