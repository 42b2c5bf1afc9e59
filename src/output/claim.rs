//! Which folders fedsim may write into, and which process writes them.
//!
//! fedsim writes only into a folder that is new, empty or its own: a folder it created holds a
//! marker file that only fedsim writes, naming what kind of folder it is. A folder holding
//! anything else belongs to the user, and no command writes into it, so `--out` can never
//! overwrite a user's files. A process that writes a run or sweep folder also holds an advisory
//! lock on it for its whole life, so that two processes never write one folder at once.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::atomic::{WriteError, write_atomically, write_error};
use crate::checkpoint::{CHECKPOINT, RunState};

/// The marker: a folder holding it, with its kind's text, was made by fedsim.
pub const MARKER: &str = ".fedsim";

/// What a process killed while writing the marker leaves instead: a folder holding only this
/// is as good as empty.
const MARKER_PARTIAL: &str = "..fedsim.partial";

/// The file a writing process locks, holding that process's id.
pub const LOCK: &str = ".fedsim.lock";

/// What fedsim made a folder for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderKind {
    /// One run's results (`fedsim run`, or one run of a sweep).
    Run,
    /// A sweep's runs, each in a folder of its own, and their report.
    Sweep,
    /// A report of runs kept elsewhere.
    Report,
}

impl FolderKind {
    /// The word for this kind in messages.
    pub fn name(self) -> &'static str {
        match self {
            FolderKind::Run => "run",
            FolderKind::Sweep => "sweep",
            FolderKind::Report => "report",
        }
    }

    /// What the marker of a folder of this kind holds.
    fn marker_text(self) -> String {
        format!("fedsim {} folder\n", self.name())
    }

    fn from_marker(text: &str) -> Option<Self> {
        [FolderKind::Run, FolderKind::Sweep, FolderKind::Report]
            .into_iter()
            .find(|kind| kind.marker_text() == text)
    }
}

/// What a path is, to fedsim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Nothing is there yet.
    Absent,
    /// An empty folder.
    Empty,
    /// A folder fedsim made, of this kind.
    Fedsim(FolderKind),
    /// A folder holding files fedsim did not write; the first of them by name.
    Foreign(String),
    /// Something that is not a folder (a file, say).
    NotAFolder,
}

/// Looks at `dir` without changing it. A folder without a marker but with a checkpoint that
/// reads back whole is a run folder written before markers existed, and a folder of fedsim's
/// folders (and a report's files) a sweep folder of then.
pub fn inspect(dir: &Path) -> Result<Found, WriteError> {
    let metadata = match fs::metadata(dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
        other => other.map_err(write_error(dir))?,
    };
    if !metadata.is_dir() {
        return Ok(Found::NotAFolder);
    }
    if let Some(kind) = marked_kind(dir) {
        return Ok(Found::Fedsim(kind));
    }
    let names: Vec<String> = fs::read_dir(dir)
        .map_err(write_error(dir))?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|name| !matches!(name, Ok(name) if name == MARKER_PARTIAL))
        .collect::<Result<_, _>>()
        .map_err(write_error(dir))?;
    if names.is_empty() {
        return Ok(Found::Empty);
    }
    let checkpoint_reads =
        fs::read(dir.join(CHECKPOINT)).is_ok_and(|bytes| RunState::from_bytes(&bytes).is_ok());
    if checkpoint_reads {
        return Ok(Found::Fedsim(FolderKind::Run));
    }
    unmarked_folder_of_folders(dir, names)
}

/// The files a report writes into a sweep folder.
const REPORT_FILES: [&str; 4] = ["report.html", "summary.md", "summary.csv", "plots"];

/// What `dir`, holding `names` and no marker, is: a sweep folder of a version before markers
/// (or the `runs` folder fedsim's runs go to by default) when it holds fedsim's folders and a
/// report's files and nothing else; otherwise foreign, named by its first entry that is not
/// fedsim's.
fn unmarked_folder_of_folders(dir: &Path, mut names: Vec<String>) -> Result<Found, WriteError> {
    names.sort();
    let mut folders = 0;
    for name in &names {
        if REPORT_FILES.contains(&name.as_str()) {
            continue;
        }
        match inspect(&dir.join(name))? {
            Found::Fedsim(_) => folders += 1,
            _ => return Ok(Found::Foreign(name.clone())),
        }
    }
    Ok(match folders {
        0 => Found::Foreign(names.swap_remove(0)),
        _ => Found::Fedsim(FolderKind::Sweep),
    })
}

/// The kind the marker in `dir` names, if it holds one fedsim wrote.
fn marked_kind(dir: &Path) -> Option<FolderKind> {
    let mut text = String::new();
    let mut file = File::open(dir.join(MARKER)).ok()?;
    // A marker is one short line: a large file of that name is not fedsim's.
    Read::by_ref(&mut file)
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    FolderKind::from_marker(&text)
}

/// Why fedsim will not write into a folder.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The path names something that is not a folder.
    #[error("{} is not a folder; name a new folder for the results", path.display())]
    NotAFolder {
        /// The path.
        path: PathBuf,
    },
    /// The folder holds files fedsim did not write.
    #[error(
        "{} holds files fedsim did not write ({first}, …); fedsim writes only into a new or empty folder or one of its own, so that it never overwrites yours: choose another folder",
        path.display()
    )]
    Foreign {
        /// The folder.
        path: PathBuf,
        /// The first foreign file, by name.
        first: String,
    },
    /// The folder is fedsim's, but of another kind.
    #[error("{} is a fedsim {} folder, not a {} folder; choose another folder", path.display(), found.name(), wanted.name())]
    OtherKind {
        /// The folder.
        path: PathBuf,
        /// What it is.
        found: FolderKind,
        /// What the command writes.
        wanted: FolderKind,
    },
    /// Another process is writing the folder.
    #[error(
        "{} is being written by another fedsim process{}; wait for it to end, or stop it first",
        path.display(),
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse {
        /// The folder.
        path: PathBuf,
        /// The process holding it, as it wrote itself into the lock file.
        holder: Option<u32>,
    },
    /// The folder cannot be created, marked or locked.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl ClaimError {
    /// Whether the user's choice of folder is at fault, rather than the disk.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ClaimError::Write(_))
    }
}

/// Checks that fedsim may write a folder of `kind` at `dir` (absent, empty, or fedsim's own of
/// a kind in `accepted`), without changing anything; returns what is there.
pub fn check(dir: &Path, kind: FolderKind, accepted: &[FolderKind]) -> Result<Found, ClaimError> {
    let path = || dir.to_path_buf();
    match inspect(dir)? {
        Found::NotAFolder => Err(ClaimError::NotAFolder { path: path() }),
        Found::Foreign(first) => Err(ClaimError::Foreign {
            path: path(),
            first,
        }),
        Found::Fedsim(found) if found != kind && !accepted.contains(&found) => {
            Err(ClaimError::OtherKind {
                path: path(),
                found,
                wanted: kind,
            })
        }
        found => Ok(found),
    }
}

/// Creates `dir` if need be and marks it as a fedsim folder of `kind`, after [`check`]ing it;
/// a folder that is fedsim's already keeps its kind.
pub fn mark(dir: &Path, kind: FolderKind, accepted: &[FolderKind]) -> Result<(), ClaimError> {
    let kind = match check(dir, kind, accepted)? {
        Found::Fedsim(_) if marked_kind(dir).is_some() => return Ok(()),
        // A run folder of a version before markers keeps its kind.
        Found::Fedsim(found) => found,
        _ => kind,
    };
    fs::create_dir_all(dir).map_err(write_error(dir))?;
    write_atomically(&dir.join(MARKER), kind.marker_text().as_bytes())?;
    Ok(())
}

/// How a process holds a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The only process writing it (a run, a whole sweep).
    Alone,
    /// One of several that write disjoint parts of it (the slices of a sharded sweep).
    Shared,
}

/// A folder this process writes: marked as fedsim's, and locked against other fedsim processes
/// until the claim is dropped (or the process ends, however it ends).
#[derive(Debug)]
pub struct Claim {
    _lock: File,
}

impl Claim {
    /// Marks `dir` (see [`mark`]) and locks it as `hold` says.
    pub fn take(
        dir: &Path,
        kind: FolderKind,
        accepted: &[FolderKind],
        hold: Hold,
    ) -> Result<Self, ClaimError> {
        mark(dir, kind, accepted)?;
        let path = dir.join(LOCK);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(write_error(&path))?;
        match try_lock_for_a_moment(&lock, hold) {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(ClaimError::InUse {
                    path: dir.to_path_buf(),
                    holder: holder(&mut lock),
                });
            }
            Err(TryLockError::Error(error)) => return Err(write_error(&path)(error).into()),
        }
        if hold == Hold::Alone {
            lock.set_len(0)
                .and_then(|()| write!(lock, "{}", std::process::id()))
                .map_err(write_error(&path))?;
        }
        Ok(Self { _lock: lock })
    }
}

/// How long a claim waits for a lock that is held, before it calls the folder in use.
const LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// Locks `lock` as `hold` says, trying again for up to [`LOCK_PATIENCE`] while it is held. A
/// lock can outlive its holder's release for a moment: a process that is ending, or a child
/// that another thread is starting, holds a copy of the lock's descriptor until it exits or
/// execs.
fn try_lock_for_a_moment(lock: &File, hold: Hold) -> Result<(), TryLockError> {
    let started = Instant::now();
    loop {
        let locked = match hold {
            Hold::Alone => lock.try_lock(),
            Hold::Shared => lock.try_lock_shared(),
        };
        match locked {
            Err(TryLockError::WouldBlock) if started.elapsed() < LOCK_PATIENCE => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// The process id a lock file holds, if it reads as one.
fn holder(lock: &mut File) -> Option<u32> {
    let mut text = String::new();
    lock.rewind().ok()?;
    Read::by_ref(lock).take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: FolderKind = FolderKind::Run;

    #[test]
    fn new_and_empty_folders_are_marked_and_a_users_folder_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let new = scratch.path().join("new");
        Claim::take(&new, RUN, &[], Hold::Alone).unwrap();
        assert_eq!(inspect(&new).unwrap(), Found::Fedsim(RUN));
        let empty = scratch.path().join("empty");
        fs::create_dir(&empty).unwrap();
        assert_eq!(inspect(&empty).unwrap(), Found::Empty);
        mark(&empty, RUN, &[]).unwrap();
        assert_eq!(inspect(&empty).unwrap(), Found::Fedsim(RUN));
        let users = scratch.path().join("users");
        fs::create_dir(&users).unwrap();
        fs::write(users.join("config.json"), "precious").unwrap();
        fs::write(users.join("b.txt"), "").unwrap();
        let refused = mark(&users, RUN, &[]).unwrap_err();
        assert!(
            matches!(&refused, ClaimError::Foreign { first, .. } if first == "b.txt"),
            "{refused}"
        );
        assert_eq!(
            fs::read_to_string(users.join("config.json")).unwrap(),
            "precious"
        );
        assert!(!users.join(MARKER).exists());
    }

    #[test]
    fn a_file_a_forged_marker_and_another_kind_are_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            mark(&file, RUN, &[]),
            Err(ClaimError::NotAFolder { .. })
        ));
        let forged = scratch.path().join("forged");
        fs::create_dir(&forged).unwrap();
        fs::write(forged.join(MARKER), "mine").unwrap();
        assert_eq!(
            inspect(&forged).unwrap(),
            Found::Foreign(MARKER.to_string())
        );
        let sweep = scratch.path().join("sweep");
        mark(&sweep, FolderKind::Sweep, &[]).unwrap();
        assert!(matches!(
            mark(&sweep, RUN, &[]),
            Err(ClaimError::OtherKind { .. })
        ));
        mark(&sweep, FolderKind::Report, &[FolderKind::Sweep]).unwrap();
        assert_eq!(inspect(&sweep).unwrap(), Found::Fedsim(FolderKind::Sweep));
    }

    #[test]
    fn an_unmarked_folder_of_fedsims_folders_is_a_sweep_and_a_foreign_entry_is_named() {
        let scratch = tempfile::tempdir().unwrap();
        let runs = scratch.path().join("runs");
        mark(&runs.join("a-run"), RUN, &[]).unwrap();
        mark(&runs.join("b-sweep"), FolderKind::Sweep, &[]).unwrap();
        fs::write(runs.join("report.html"), "").unwrap();
        assert_eq!(inspect(&runs).unwrap(), Found::Fedsim(FolderKind::Sweep));
        fs::create_dir(runs.join("c-mine")).unwrap();
        fs::write(runs.join("c-mine/notes.txt"), "").unwrap();
        assert_eq!(inspect(&runs).unwrap(), Found::Foreign("c-mine".into()));
        let reports_only = scratch.path().join("reports-only");
        fs::create_dir(&reports_only).unwrap();
        fs::write(reports_only.join("summary.md"), "").unwrap();
        assert_eq!(
            inspect(&reports_only).unwrap(),
            Found::Foreign("summary.md".into())
        );
    }

    #[test]
    fn a_held_folder_is_refused_to_a_second_claim_until_released() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("run");
        let first = Claim::take(&dir, RUN, &[], Hold::Alone).unwrap();
        let second = Claim::take(&dir, RUN, &[], Hold::Alone).unwrap_err();
        let pid = std::process::id();
        assert!(
            matches!(second, ClaimError::InUse { holder: Some(p), .. } if p == pid),
            "{second}"
        );
        drop(first);
        Claim::take(&dir, RUN, &[], Hold::Alone).unwrap();
    }

    #[test]
    fn shared_holds_coexist_and_exclude_a_lone_one() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("sweep");
        let sweep = FolderKind::Sweep;
        let a = Claim::take(&dir, sweep, &[], Hold::Shared).unwrap();
        let b = Claim::take(&dir, sweep, &[], Hold::Shared).unwrap();
        assert!(Claim::take(&dir, sweep, &[], Hold::Alone).is_err());
        drop((a, b));
        Claim::take(&dir, sweep, &[], Hold::Alone).unwrap();
    }
}
