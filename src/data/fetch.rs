//! `fedsim data fetch`: downloads a data set that cannot ship inside fedsim from its
//! publisher, checks it against the published checksum, and unpacks it.
//!
//! A download that stops (a lost connection, Ctrl-C) leaves `<archive>.part`; the next fetch
//! asks the server for the rest (an HTTP range request) and appends it. Nothing is unpacked
//! before the whole archive matches its checksum; an archive that does not match is deleted,
//! so the next fetch starts afresh. An archive put in the folder by hand (from a machine that
//! is online) is checked and unpacked without any download.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};
use md5::{Digest, Md5};

/// A data set as its publisher distributes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The name `fedsim data fetch` takes.
    pub name: &'static str,
    /// Where the publisher serves the archive.
    pub url: &'static str,
    /// The archive's MD5 as the publisher gives it, in hex.
    pub md5: &'static str,
    /// The folder the archive unpacks to.
    pub folder: &'static str,
    /// The files the folder must hold once unpacked.
    pub files: &'static [&'static str],
}

/// CIFAR-10's binary version, from its authors' page
/// (<https://www.cs.toronto.edu/~kriz/cifar.html>), which gives the MD5.
pub const CIFAR10: Remote = Remote {
    name: "cifar10",
    url: "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    md5: "c32a1d4ab5d03f1284b67883e8d87530",
    folder: "cifar-10-batches-bin",
    files: &[
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
        "test_batch.bin",
    ],
};

/// The data sets `fedsim data fetch` knows.
pub const REMOTES: [Remote; 1] = [CIFAR10];

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The server could not be reached or the transfer broke off.
    #[error(
        "cannot download {url}: {reason}\nIs this machine online? A rerun continues where the download stopped. Without the internet here, download the archive on another machine and put it in {dir} as {file}: fedsim data fetch then checks and unpacks it."
    )]
    Network {
        /// What was being downloaded.
        url: String,
        /// What went wrong.
        reason: String,
        /// The folder the archive belongs in.
        dir: PathBuf,
        /// The archive's file name.
        file: String,
    },
    /// The server answered with an error.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// What was asked for.
        url: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The downloaded archive is not the published one.
    #[error(
        "{path} has MD5 {actual}, and the publisher gives {expected}; it was deleted, so that a rerun downloads it afresh"
    )]
    Checksum {
        /// The archive.
        path: PathBuf,
        /// The published MD5.
        expected: String,
        /// The archive's MD5.
        actual: String,
    },
    /// The archive does not unpack to what the data set needs.
    #[error("{path} {reason}")]
    Archive {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file in the folder cannot be written or read.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why the operating system refused.
        source: io::Error,
    },
}

/// Where a fetch gets the archive and what it checks it against: the publisher's, or a
/// mirror's serving the same file.
#[derive(Debug, Clone)]
pub struct Fetch<'a> {
    /// The data set.
    pub remote: &'a Remote,
    /// Where to download the archive from.
    pub url: String,
    /// The MD5 the archive must have, in hex.
    pub md5: String,
    /// Whether to draw a progress bar.
    pub progress: bool,
}

impl<'a> Fetch<'a> {
    /// A fetch of `remote` from its publisher.
    pub fn new(remote: &'a Remote) -> Self {
        Self {
            remote,
            url: remote.url.to_string(),
            md5: remote.md5.to_string(),
            progress: true,
        }
    }

    /// The archive's file name: the last part of the URL.
    fn file_name(&self) -> String {
        let name = self.url.rsplit('/').next().unwrap_or_default();
        if name.is_empty() {
            format!("{}.tar.gz", self.remote.name)
        } else {
            name.to_string()
        }
    }

    /// Downloads (or finishes downloading) the archive into `dir`, checks it and unpacks it;
    /// returns the data set's folder. A folder that already holds every file is left as it is.
    pub fn run(&self, dir: &Path) -> Result<PathBuf, FetchError> {
        let folder = dir.join(self.remote.folder);
        if self.remote.files.iter().all(|f| folder.join(f).is_file()) {
            return Ok(folder);
        }
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let archive = dir.join(self.file_name());
        if !archive.is_file() {
            self.download(dir, &archive)?;
        }
        self.check(&archive)?;
        self.unpack(&archive, dir)?;
        fs::remove_file(&archive).map_err(io_error(&archive))?;
        Ok(folder)
    }

    /// Downloads the archive to `archive`, through `<archive>.part`.
    fn download(&self, dir: &Path, archive: &Path) -> Result<(), FetchError> {
        let part = archive.with_file_name(format!("{}.part", self.file_name()));
        let have = fs::metadata(&part).map_or(0, |m| m.len());
        let network = |reason: String| FetchError::Network {
            url: self.url.clone(),
            reason,
            dir: dir.to_path_buf(),
            file: self.file_name(),
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_body(Some(Duration::from_secs(60)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent.get(&self.url);
        if have > 0 {
            request = request.header("Range", format!("bytes={have}-"));
        }
        let response = request.call().map_err(|e| network(e.to_string()))?;
        let status = response.status().as_u16();
        let resume = match status {
            206 => true,
            200 => false,
            // The part file already holds the whole archive.
            416 if have > 0 => return fs::rename(&part, archive).map_err(io_error(archive)),
            _ => {
                return Err(FetchError::Status {
                    url: self.url.clone(),
                    status,
                });
            }
        };
        let length = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let start = if resume { have } else { 0 };
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(resume)
            .truncate(!resume)
            .open(&part)
            .map_err(io_error(&part))?;
        let bar = self.bar(length.map(|l| start + l), start);
        let mut body = response.into_body().into_reader();
        let mut buffer = vec![0; 1 << 16];
        let mut received = 0;
        let total = length.map_or("?".into(), |l| l.to_string());
        loop {
            let n = body.read(&mut buffer).map_err(|e| {
                network(format!(
                    "{e}, after {received} of {total} bytes (kept in {})",
                    part.display()
                ))
            })?;
            if n == 0 {
                break;
            }
            file.write_all(&buffer[..n]).map_err(io_error(&part))?;
            received += n as u64;
            bar.inc(n as u64);
        }
        bar.finish_and_clear();
        file.sync_all().map_err(io_error(&part))?;
        if let Some(length) = length
            && received < length
        {
            return Err(network(format!(
                "the connection closed after {received} of {length} bytes (kept in {})",
                part.display()
            )));
        }
        fs::rename(&part, archive).map_err(io_error(archive))
    }

    fn bar(&self, total: Option<u64>, start: u64) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = match total {
            Some(total) => ProgressBar::new(total),
            None => ProgressBar::no_length(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, {eta} left",
            )
            .expect("the template is valid")
            .progress_chars("=> "),
        );
        bar.set_message(format!("{} {}", self.remote.name, self.file_name()));
        bar.set_position(start);
        bar
    }

    /// Checks the archive's MD5; deletes it if it does not match.
    fn check(&self, archive: &Path) -> Result<(), FetchError> {
        let mut hasher = Md5::new();
        let mut file = File::open(archive).map_err(io_error(archive))?;
        let mut buffer = vec![0; 1 << 16];
        loop {
            match file.read(&mut buffer).map_err(io_error(archive))? {
                0 => break,
                n => hasher.update(&buffer[..n]),
            }
        }
        let actual = hex::encode(hasher.finalize());
        if actual != self.md5.to_lowercase() {
            fs::remove_file(archive).map_err(io_error(archive))?;
            return Err(FetchError::Checksum {
                path: archive.to_path_buf(),
                expected: self.md5.clone(),
                actual,
            });
        }
        Ok(())
    }

    /// Unpacks the gzipped tar archive into `dir` and checks that the data set's files came
    /// out of it.
    fn unpack(&self, archive: &Path, dir: &Path) -> Result<(), FetchError> {
        let file = File::open(archive).map_err(io_error(archive))?;
        // `unpack` refuses entries that would land outside `dir`.
        tar::Archive::new(GzDecoder::new(file))
            .unpack(dir)
            .map_err(|e| FetchError::Archive {
                path: archive.to_path_buf(),
                reason: format!("cannot be unpacked: {e}"),
            })?;
        let folder = dir.join(self.remote.folder);
        if let Some(missing) = self.remote.files.iter().find(|f| !folder.join(f).is_file()) {
            return Err(FetchError::Archive {
                path: archive.to_path_buf(),
                reason: format!(
                    "unpacked without {}/{missing}, a file of {}",
                    self.remote.folder, self.remote.name
                ),
            });
        }
        Ok(())
    }
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    }
}
