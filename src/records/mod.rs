//! The checkpoint registry: one validated record per checkpoint, stored as versioned JSON in the
//! workspace's private state directory, rewritten atomically (temp + fsync + rename) under a
//! cross-process lock, plus the restore journal beside it. It owns only files inside that state
//! directory; it must never touch the worktree or any repository file.

pub mod config;
mod fsutil;
pub mod home;
pub mod hooks;
mod journal;
mod lock;
mod record;
mod registry_log;
pub mod retention;
pub mod sessionlog;
pub mod statcache;
mod trailers;
pub mod watch;
mod wire;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::verbs::ObjectId;
pub use fsutil::*;
pub use journal::{JournalOp, RestoreJournal};
pub use lock::*;
pub use record::*;
pub use trailers::Trailers;
pub use wire::WirePath;

pub const FORMAT: &str = "ckpt-records";
pub const FORMAT_VERSION: u32 = 1;
const RECORDS_FILE: &str = "records.json";
const JOURNAL_FILE: &str = "restore-journal.json";
const LOCK_FILE: &str = "lock";
/// The packs this workspace's snapshots wrote, one name (hex) per line, followed by
/// ` uncompressed` for one written so ([`Registry::ckpt_packs`]).
const PACKS_FILE: &str = "packs";
/// The trees the last restore's check of its target read and validated, with their counts.
const CHECKED_TREES_FILE: &str = "checked-trees";
/// The first line of that file.
const CHECKED_TREES_HEADER: &str = "ckpt checked trees 1";
/// How many checked trees a workspace remembers at most; a restore that checked more empties
/// the list instead.
pub const MAX_CHECKED_TREES: usize = 100_000;
/// The longest list ckpt writes: the header, then at most [`MAX_CHECKED_TREES`] lines of a
/// 64-digit id, a space, a count of at most 20 digits and a newline.
const CHECKED_TREES_MAX_BYTES: u64 = (CHECKED_TREES_HEADER.len() + 1 + MAX_CHECKED_TREES * 86) as u64;
const UNCOMPRESSED_MARK: &str = " uncompressed";

/// One of the packs this workspace's snapshots wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CkptPack {
    /// The pack's checksum, as in `pack-<hex>.pack`.
    pub name: ObjectId,
    /// Written uncompressed (a watched snapshot's, to be quick): the watch daemon compresses it
    /// once the worktree is quiet.
    pub uncompressed: bool,
}

impl CkptPack {
    /// A line of the list; `None` for anything else (such a line names no pack of ckpt's).
    fn parse(line: &str) -> Option<CkptPack> {
        let line = line.trim();
        let (name, uncompressed) = match line.strip_suffix(UNCOMPRESSED_MARK) {
            Some(name) => (name, true),
            None => (line, false),
        };
        Some(CkptPack {
            name: ObjectId::from_hex(name).ok()?,
            uncompressed,
        })
    }

    fn line(&self) -> String {
        let mark = if self.uncompressed { UNCOMPRESSED_MARK } else { "" };
        format!("{}{mark}\n", self.name.to_hex())
    }
}
const STORE_LOCK_FILE: &str = "store.lock";

#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is corrupt: {why} (it was left as it is; `ckpt doctor --fix` sets it aside and rebuilds what it can)"
    )]
    Corrupt { path: PathBuf, why: String },
    #[error("{path} has format version {found}; this ckpt reads version {FORMAT_VERSION}")]
    UnsupportedVersion { path: PathBuf, found: u64 },
    #[error("gave up after {seconds:.0}s waiting for the lock {path}: another ckpt process is still working on this workspace")]
    LockTimeout { path: PathBuf, seconds: f64 },
    #[error("{path} is a symlink (or not a directory); ckpt keeps its state only in real directories and refuses to follow it. Remove the link, then run ckpt again")]
    UnsafeStateDir { path: PathBuf },
    #[error("{path} is {what}, not a plain lock file of ckpt's own; ckpt refuses to open it (a link would make it create or overwrite another file, a FIFO would block it, a directory cannot be locked). Remove it (a directory with what it holds, once you have looked), then run ckpt again")]
    UnsafeLockFile { path: PathBuf, what: &'static str },
    #[error("the copy provider needs a place for its store: set CKPT_HOME (or HOME)")]
    NoStoreHome,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RecordsError + '_ {
    move |source| RecordsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsFile {
    format: String,
    version: u64,
    records: Vec<Record>,
}

/// One workspace's state directory.
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// Opens (creating if needed) the state directory `dir`.
    pub fn open(dir: &Path) -> Result<Self, RecordsError> {
        create_own_dirs(dir, OWN_STATE_LEVELS, 0o777)?;
        Ok(Registry { dir: dir.to_path_buf() })
    }

    /// Refuses (with [`RecordsError::UnsafeStateDir`]) a state directory that is a symlink, for
    /// `audit` to report; every write checks the same through [`Self::lock`].
    pub fn check_not_linked(dir: &Path) -> Result<(), RecordsError> {
        refuse_linked_state_dir(dir)
    }

    /// The lock files of the workspace state at `dir` that every command would refuse to open
    /// (a symlink, a FIFO, a hard link), found without creating or opening any.
    pub fn unsafe_lock_files(dir: &Path) -> Vec<RecordsError> {
        [
            dir.join(LOCK_FILE),
            dir.join(watch::WATCH_DIR).join(watch::DAEMON_LOCK_FILE),
            dir.join(hooks::HOOKS_DIR).join(hooks::LOCK_FILE),
        ]
        .iter()
        .filter_map(|path| unsafe_lock_file(path))
        .collect()
    }

    /// Opens without creating anything; `None` if no state exists yet. A state directory that
    /// is (or sits below) a symlink ckpt did not make is refused, for reads as for writes.
    pub fn open_existing(dir: &Path) -> Result<Option<Self>, RecordsError> {
        refuse_linked_state_dir(dir)?;
        Ok(dir.is_dir().then(|| Registry { dir: dir.to_path_buf() }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the workspace lock, calling `waiting` once after a second, and gives up after
    /// `CKPT_LOCK_TIMEOUT_SECS` (default 120) with an error naming the lock file. The lock is a
    /// `flock`, so the kernel releases it when its holder dies: there are no stale locks.
    /// The workspace lock if nobody holds it now; `None` without waiting otherwise (for work
    /// that can be left for later, like the watch daemon's housekeeping: a snapshot holding the
    /// lock may be waiting on that very daemon).
    pub fn try_lock(&self) -> Result<Option<RegistryLock>, RecordsError> {
        refuse_linked_state_dir(&self.dir)?;
        Ok(try_lock_file(&self.dir.join(LOCK_FILE))?.map(|file| RegistryLock { _file: file }))
    }

    pub fn lock(&self, waiting: &dyn Fn(&Path)) -> Result<RegistryLock, RecordsError> {
        // Every write needs the lock, so this check guards them all.
        refuse_linked_state_dir(&self.dir)?;
        let file = acquire_lock(&self.dir.join(LOCK_FILE), LockMode::Exclusive, waiting)?;
        Ok(RegistryLock { _file: file })
    }

    /// Temp files of ckpt's own state writes (`.<name>.<pid>.tmp`, see [`write_state_file`])
    /// that a process which is gone left here (killed mid-write; the file it was replacing is
    /// whole, old or new). Regular files only, found with `lstat`; a live pid's are never listed.
    pub fn abandoned_temp_files(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in [
            self.dir.clone(),
            self.dir.join(watch::WATCH_DIR),
            self.dir.join(hooks::HOOKS_DIR),
        ] {
            // A subdirectory that is a link is never followed: a linked `watch/` would send the
            // removal outside the state directory.
            if !fs::symlink_metadata(&dir).is_ok_and(|meta| meta.is_dir()) {
                continue;
            }
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                use std::os::unix::fs::MetadataExt;
                let name = entry.file_name();
                let Some(pid) = state_temp_pid(&name.to_string_lossy()) else {
                    continue;
                };
                // Exactly what a state write leaves: a regular file with one name.
                let single_file =
                    fs::symlink_metadata(entry.path()).is_ok_and(|meta| meta.is_file() && meta.nlink() == 1);
                if single_file && !crate::verbs::process_is_alive(pid) {
                    found.push(entry.path());
                }
            }
        }
        found.sort();
        found
    }

    /// Removes [`Self::abandoned_temp_files`], under the workspace lock (so no write of this
    /// workspace's state is under way), and returns what went.
    pub fn remove_abandoned_temp_files(&self, _lock: &RegistryLock) -> Result<Vec<PathBuf>, RecordsError> {
        let mut removed = Vec::new();
        for path in self.abandoned_temp_files() {
            match fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path)(e)),
            }
        }
        Ok(removed)
    }

    /// ckpt's own state files, other than the registry and the journal (each reported on its
    /// own), that are there but are not regular files (a FIFO, socket, device or directory,
    /// or a link to one): every read refuses them, so the state they hold is lost to ckpt
    /// (without the hooks' positions, every later tool call would run unprotected).
    pub fn unusable_state_files(&self) -> Vec<PathBuf> {
        [
            self.dir.join(statcache::FILE_NAME),
            self.dir.join(statcache::DELTA_FILE_NAME),
            self.dir.join(statcache::BLOCKS_FILE_NAME),
            self.dir.join(PACKS_FILE),
            self.dir.join(watch::WATCH_DIR).join(watch::BASE_FILE),
            self.dir.join(hooks::HOOKS_DIR).join(hooks::POSITIONS_FILE),
        ]
        .into_iter()
        // Only through directories of the state's own (a linked `watch/` or `hooks/` leads
        // somewhere else, and doctor would rename a user's entries there).
        .filter(|path| {
            path.parent()
                .is_some_and(|dir| fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()))
        })
        .filter(|path| fs::metadata(path).is_ok_and(|meta| !meta.is_file()))
        .collect()
    }

    /// Moves `path`, one of [`Self::unusable_state_files`], aside (never deleted); the state it
    /// held starts afresh.
    pub fn set_aside_state_file(&self, path: &Path, _lock: &RegistryLock) -> Result<PathBuf, RecordsError> {
        set_aside(path)
    }

    /// Moves the copy store directory `dir` of a workspace that another directory now stands in
    /// for (the same path, removed and made again) aside as `<dir>-replaced-<unix time>`, whole:
    /// its checkpoints stay, listed apart, and are never offered as the new directory's. The
    /// caller holds the workspace's lock; a link there is refused, never followed.
    pub fn retire_workspace(dir: &Path, _lock: &RegistryLock) -> Result<PathBuf, RecordsError> {
        if fs::symlink_metadata(dir)
            .map_err(io_error(dir))?
            .file_type()
            .is_symlink()
        {
            return Err(RecordsError::UnsafeStateDir {
                path: dir.to_path_buf(),
            });
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut name = dir.as_os_str().to_owned();
        name.push(format!("-replaced-{now}"));
        let aside = PathBuf::from(name);
        fs::rename(dir, &aside).map_err(io_error(dir))?;
        Ok(aside)
    }

    /// Moves an unreadable registry (`records.json` and its append log) aside, never deleting
    /// either, so it can be rebuilt from refs; returns where each went.
    pub fn set_aside_corrupt(&self, _lock: &RegistryLock) -> Result<Vec<PathBuf>, RecordsError> {
        let mut aside = Vec::new();
        for path in [self.records_path(), self.dir.join(registry_log::LOG_FILE)] {
            if fs::symlink_metadata(&path).is_ok() {
                aside.push(set_aside(&path)?);
            }
        }
        Ok(aside)
    }

    fn records_path(&self) -> PathBuf {
        self.dir.join(RECORDS_FILE)
    }

    /// Loads and validates every record, oldest first: `records.json`, then what its append
    /// log adds. A missing file is an empty registry; a malformed one is an error, never
    /// silently reset.
    pub fn load(&self) -> Result<Vec<Record>, RecordsError> {
        let (mut records, base) = self.load_base()?;
        let identity = registry_log::base_identity(base.as_deref());
        let log_path = self.dir.join(registry_log::LOG_FILE);
        let appended = registry_log::read_log(&log_path, &identity)?;
        if !appended.is_empty() {
            let mut seen: std::collections::HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
            for record in &appended {
                if !seen.insert(record.id.clone()) {
                    return Err(RecordsError::Corrupt {
                        path: log_path,
                        why: format!("record {} appears twice", record.id),
                    });
                }
            }
            records.extend(appended);
        }
        Ok(records)
    }

    /// The records of `records.json` alone, with its bytes (`None` when there is none).
    fn load_base(&self) -> Result<(Vec<Record>, Option<Vec<u8>>), RecordsError> {
        let path = self.records_path();
        // Never through a link: one to another repository's registry would list its
        // checkpoints here, and the next snapshot would copy them in.
        if fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_symlink()) {
            return Err(RecordsError::Corrupt {
                path: path.clone(),
                why: "it is a symlink, and ckpt never reads its registry through one (doctor --fix sets the link aside and rebuilds the registry from this workspace's pins)".into(),
            });
        }
        let text = match crate::verbs::read_regular_file(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let records = parse_records(&text).map_err(|failure| match failure {
            ParseFailure::Version(found) => RecordsError::UnsupportedVersion {
                path: path.clone(),
                found,
            },
            ParseFailure::Corrupt(why) => RecordsError::Corrupt {
                path: path.clone(),
                why,
            },
        })?;
        Ok((records, Some(text)))
    }

    /// The newest record added, when the append log holds it, with when the log was last
    /// written: read without parsing the rest of the registry (what a snapshot of a long
    /// history needs to build on). `None` when there is no log for the current `records.json`,
    /// or its last record does not read; then [`Self::load`] is the way, and says what is wrong.
    pub fn newest_appended(&self) -> Option<(Record, std::time::SystemTime)> {
        let log_path = self.dir.join(registry_log::LOG_FILE);
        let written = fs::symlink_metadata(&log_path).and_then(|meta| meta.modified()).ok()?;
        let newest = registry_log::read_last(&log_path, &self.records_path())?;
        Some((newest, written))
    }

    /// Replaces the registry with `records`: `records.json` written whole, then the append log
    /// removed (a log left by a kill between the two names the old `records.json`, so it is
    /// never read with the new one). Requires the lock.
    pub fn save(&self, records: &[Record], _lock: &RegistryLock) -> Result<(), RecordsError> {
        let file = RecordsFile {
            format: FORMAT.to_owned(),
            version: u64::from(FORMAT_VERSION),
            records: records.to_vec(),
        };
        let mut text = serde_json::to_vec_pretty(&file).map_err(|e| RecordsError::Corrupt {
            path: self.records_path(),
            why: e.to_string(),
        })?;
        text.push(b'\n');
        write_atomically(&self.records_path(), &text)?;
        registry_log::remove_log(&self.dir.join(registry_log::LOG_FILE))
    }

    /// Records `added`, the newest of `all` (every record, as [`Self::load`] gave them plus
    /// `added`): appended ([`Self::append`]) when it can be, otherwise everything is written
    /// into `records.json`. Requires the lock.
    pub fn add(&self, all: &[Record], added: &[Record], lock: &RegistryLock) -> Result<(), RecordsError> {
        self.add_appending_from(all, added, registry_log::append_from_bytes(), lock)
    }

    fn add_appending_from(
        &self,
        all: &[Record],
        added: &[Record],
        append_from: u64,
        lock: &RegistryLock,
    ) -> Result<(), RecordsError> {
        if self.append_from(added, append_from, lock)? {
            return Ok(());
        }
        self.save(all, lock)
    }

    /// Appends `added` as lines of the log, so the cost of a snapshot does not grow with the
    /// history; `false` (nothing written) while `records.json` is small or once the log has
    /// grown to half its size: then the caller writes every record with [`Self::save`].
    /// Requires the lock.
    pub fn append(&self, added: &[Record], lock: &RegistryLock) -> Result<bool, RecordsError> {
        self.append_from(added, registry_log::append_from_bytes(), lock)
    }

    fn append_from(&self, added: &[Record], append_from: u64, _lock: &RegistryLock) -> Result<bool, RecordsError> {
        let base_path = self.records_path();
        if !fs::symlink_metadata(&base_path).is_ok_and(|meta| meta.is_file() && meta.len() >= append_from) {
            return Ok(false);
        }
        let log_path = self.dir.join(registry_log::LOG_FILE);
        Ok(matches!(
            registry_log::append(&log_path, &base_path, added)?,
            registry_log::Appended::Done
        ))
    }

    fn journal_path(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    /// Writes the restore journal (before the first worktree write).
    pub fn write_journal(&self, journal: &RestoreJournal, _lock: &RegistryLock) -> Result<(), RecordsError> {
        journal.write(&self.journal_path())
    }

    /// The journal of an interrupted restore, if one is present, validated.
    pub fn read_journal(&self) -> Result<Option<RestoreJournal>, RecordsError> {
        RestoreJournal::read(&self.journal_path())
    }

    /// Moves an unreadable restore journal aside (never deletes it); `None` if there is none.
    pub fn set_aside_journal(&self, _lock: &RegistryLock) -> Result<Option<PathBuf>, RecordsError> {
        let path = self.journal_path();
        if fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        set_aside(&path).map(Some)
    }

    /// The packs this workspace's snapshots wrote into the repository and have not merged yet,
    /// oldest first. A missing or unreadable list is empty: the packs it named stay where they
    /// are, as safe as any other pack (git's own repack merges them then).
    pub fn ckpt_packs(&self) -> Vec<CkptPack> {
        let Ok(text) = crate::verbs::read_regular_file(&self.dir.join(PACKS_FILE)).map(String::from_utf8) else {
            return Vec::new();
        };
        let Ok(text) = text else {
            return Vec::new();
        };
        text.lines().filter_map(CkptPack::parse).collect()
    }

    /// Replaces that list. Not synced: an older list after a power cut names fewer of ckpt's
    /// packs (they stay, for git's repack), or ones merged since (gone, so skipped).
    pub fn save_ckpt_packs(&self, packs: &[CkptPack], _lock: &RegistryLock) -> Result<(), RecordsError> {
        let text: String = packs.iter().map(CkptPack::line).collect();
        replace_unsynced(&self.dir.join(PACKS_FILE), text.as_bytes())
    }

    /// The trees a restore's check of its target read, validated and counted, each with how
    /// many files it holds: a later check need not read them again. Empty when the file is
    /// missing, is no regular file, is larger than ckpt writes it, or any line of it is not
    /// exactly what [`Self::save_checked_trees`] writes for ids of `id_len` bytes (then every
    /// tree is read, as without it).
    pub fn checked_trees(&self, id_len: usize) -> Vec<(ObjectId, u64)> {
        let path = self.dir.join(CHECKED_TREES_FILE);
        let Ok(text) = crate::verbs::read_small_state_file(&path, CHECKED_TREES_MAX_BYTES) else {
            return Vec::new();
        };
        let Ok(text) = String::from_utf8(text) else {
            return Vec::new();
        };
        let Some(body) = text
            .strip_prefix(CHECKED_TREES_HEADER)
            .and_then(|t| t.strip_prefix('\n'))
        else {
            return Vec::new();
        };
        let parse = |line: &str| {
            let (id, count) = line.split_once(' ')?;
            let canonical_count = !count.is_empty()
                && count.bytes().all(|b| b.is_ascii_digit())
                && (count == "0" || !count.starts_with('0'));
            let canonical_id = id.len() == 2 * id_len && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !canonical_count || !canonical_id {
                return None;
            }
            Some((ObjectId::from_hex(id).ok()?, count.parse().ok()?))
        };
        // Every line ends in a newline: a list cut short is no list.
        let Some(body) = body.strip_suffix('\n').or((body.is_empty()).then_some("")) else {
            return Vec::new();
        };
        let lines: Vec<&str> = if body.is_empty() {
            Vec::new()
        } else {
            body.split('\n').collect()
        };
        if lines.len() > MAX_CHECKED_TREES {
            return Vec::new();
        }
        lines
            .into_iter()
            .map(parse)
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }

    /// Replaces that list. Not synced: an older list after a power cut only costs a check
    /// reading more trees.
    pub fn save_checked_trees(
        &self,
        trees: impl Iterator<Item = (ObjectId, u64)>,
        _lock: &RegistryLock,
    ) -> Result<(), RecordsError> {
        let mut text = format!("{CHECKED_TREES_HEADER}\n");
        for (id, count) in trees {
            text.push_str(&format!("{id} {count}\n"));
        }
        replace_unsynced(&self.dir.join(CHECKED_TREES_FILE), text.as_bytes())
    }

    pub fn clear_journal(&self, _lock: &RegistryLock) -> Result<(), RecordsError> {
        let path = self.journal_path();
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&path)(e)),
        }
    }
}

enum ParseFailure {
    Version(u64),
    Corrupt(String),
}

fn parse_records(text: &[u8]) -> Result<Vec<Record>, ParseFailure> {
    /// The fields that say how to read the rest, whatever the rest holds. Parsed on its own
    /// first (the records are skipped, not built), because reading the whole file into a
    /// `serde_json::Value` first would cost a snapshot dearly at a few hundred records.
    #[derive(Deserialize)]
    struct Header {
        format: Option<serde_json::Value>,
        version: Option<serde_json::Value>,
    }
    let header: Header = serde_json::from_slice(text).map_err(|e| ParseFailure::Corrupt(format!("not JSON: {e}")))?;
    if header.format.as_ref().and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(ParseFailure::Corrupt(format!("missing \"format\": \"{FORMAT}\"")));
    }
    let version = header
        .version
        .as_ref()
        .and_then(|v| v.as_u64())
        .ok_or_else(|| ParseFailure::Corrupt("missing numeric \"version\"".into()))?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(ParseFailure::Version(version));
    }
    let file: RecordsFile = serde_json::from_slice(text).map_err(|e| ParseFailure::Corrupt(e.to_string()))?;
    let mut seen = std::collections::HashSet::new();
    for record in &file.records {
        record.validate().map_err(ParseFailure::Corrupt)?;
        if !seen.insert(record.id.clone()) {
            return Err(ParseFailure::Corrupt(format!("record {} appears twice", record.id)));
        }
    }
    Ok(file.records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        Record {
            id: id.to_owned(),
            provider: "git".into(),
            commit: Some(id.to_owned()),
            tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
            workspace: WirePath::from_bytes(b"/tmp/ws"),
            session: Some("s1".into()),
            turn: Some(1),
            step: Some(2),
            trigger: Some("bash".into()),
            kind: Kind::Auto,
            time: "2026-01-02T03:04:05Z".into(),
            files: 1,
            total_files: 3,
            bytes: 10,
            skipped: vec![Skipped {
                path: WirePath::from_bytes(b"big.bin"),
                reason: "too_large".into(),
            }],
            narrow_modes: vec![NarrowMode {
                path: WirePath::from_bytes(b".env"),
                mode: 0o600,
            }],
        }
    }

    const ID: &str = "0123456789abcdef0123456789abcdef01234567";

    fn file_with(records: Vec<Record>) -> Vec<u8> {
        serde_json::to_vec(&RecordsFile {
            format: FORMAT.into(),
            version: 1,
            records,
        })
        .unwrap()
    }

    /// A list line names a pack, marked uncompressed or not, and reads back as written; a line
    /// with anything else names nothing (no guess at what an unknown mark means).
    #[test]
    fn pack_list_lines_round_trip_and_nothing_else_parses() {
        let name = ObjectId::from_hex(ID).unwrap();
        for uncompressed in [false, true] {
            let pack = CkptPack { name, uncompressed };
            assert_eq!(CkptPack::parse(&pack.line()), Some(pack));
        }
        assert_eq!(
            CkptPack::parse(&format!("  {ID}  ")).map(|p| p.uncompressed),
            Some(false)
        );
        for other in [
            format!("{ID} compressed"),
            format!("{ID}uncompressed"),
            "uncompressed".into(),
            String::new(),
        ] {
            assert_eq!(CkptPack::parse(&other), None, "{other:?}");
        }
    }

    /// A state file's temp name holding a link (planted, or left over) is unlinked and the file
    /// written, never the link's target; a leftover regular file there is replaced the same way.
    #[test]
    fn state_files_are_never_written_through_a_link_at_their_temp_name() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"the user's bytes").unwrap();
        let state = dir.path().join("state.json");
        let temp = dir.path().join(format!(".state.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&target, &temp).unwrap();
        write_state_file(&state, b"new state").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"the user's bytes");
        assert_eq!(fs::read(&state).unwrap(), b"new state");
        assert!(
            fs::symlink_metadata(&temp).is_err(),
            "the temp name is gone after the rename"
        );
        fs::write(&temp, b"left by a crash").unwrap();
        write_state_file(&state, b"newer state").unwrap();
        assert_eq!(fs::read(&state).unwrap(), b"newer state");
    }

    #[test]
    fn state_temp_names_are_recognised_by_their_pid() {
        assert_eq!(state_temp_pid(".restore-journal.json.4242.tmp"), Some(4242));
        assert_eq!(state_temp_pid(".records.json.1.tmp"), Some(1));
        for other in [
            "restore-journal.json.4242.tmp",
            ".records.json.tmp",
            "..4242.tmp",
            ".records.json.42a.tmp",
            ".records.json.4242.tmp.x",
            ".x.99999999999999999999.tmp",
            ".records.json.0.tmp",
            ".records.json.0999994.tmp",
            ". .999993.tmp",
            ".../x.5.tmp",
        ] {
            assert_eq!(state_temp_pid(other), None, "{other}");
        }
    }

    #[test]
    fn round_trip_validates() {
        let parsed = parse_records(&file_with(vec![record(ID)])).ok().unwrap();
        assert_eq!(parsed, vec![record(ID)]);
    }

    #[test]
    fn tampered_records_are_refused() {
        let mut bad_id = record("../../etc/passwd");
        bad_id.commit = Some("../../etc/passwd".into());
        let mut traversal = record(ID);
        traversal.skipped[0].path = WirePath::from_bytes(b"../outside");
        let mut mismatched = record(ID);
        mismatched.commit = Some("1123456789abcdef0123456789abcdef01234567".into());
        let mut newline_session = record(ID);
        newline_session.session = Some("a\nCkpt-Kind: guard".into());
        let mut bad_time = record(ID);
        bad_time.time = "yesterday".into();
        for bad in [bad_id, traversal, mismatched, newline_session, bad_time] {
            assert!(
                matches!(
                    parse_records(&file_with(vec![bad.clone()])),
                    Err(ParseFailure::Corrupt(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_records(&file_with(vec![record(ID), record(ID)])),
            Err(ParseFailure::Corrupt(_))
        ));
    }

    #[test]
    fn unknown_version_and_garbage_are_errors() {
        let v2 = br#"{"format":"ckpt-records","version":2,"records":[]}"#;
        assert!(matches!(parse_records(v2), Err(ParseFailure::Version(2))));
        assert!(matches!(parse_records(b"{"), Err(ParseFailure::Corrupt(_))));
        assert!(matches!(parse_records(b"[]"), Err(ParseFailure::Corrupt(_))));
        let extra = br#"{"format":"ckpt-records","version":1,"records":[],"x":1}"#;
        assert!(matches!(parse_records(extra), Err(ParseFailure::Corrupt(_))));
    }

    #[test]
    fn labels_must_be_single_line() {
        assert!(validate_label("session", "abc-123 turn").is_ok());
        assert!(validate_label("session", "").is_err());
        assert!(validate_label("session", "a\nb").is_err());
        assert!(validate_label("session", &"x".repeat(MAX_LABEL_LEN + 1)).is_err());
        assert!(validate_new_label("session", "abc-123 turn").is_ok());
        assert!(validate_new_label("session", "evil\u{202E}txt").is_err());
        assert!(
            validate_label("session", "evil\u{202E}txt").is_ok(),
            "stored labels still load"
        );
    }

    /// A registry of ten records in records.json and an eleventh in its log.
    fn with_one_appended() -> (tempfile::TempDir, Registry, RegistryLock, Vec<Record>) {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        let mut all: Vec<Record> = (0..10).map(numbered).collect();
        registry.save(&all, &lock).unwrap();
        let added = numbered(10);
        all.push(added.clone());
        registry.add_appending_from(&all, &[added], 0, &lock).unwrap();
        (dir, registry, lock, all)
    }

    fn numbered(n: usize) -> Record {
        let id = format!("{n:040x}");
        let mut r = record(&id);
        r.time = format!("2026-01-02T03:{:02}:{:02}.{:03}Z", n / 60 % 60, n % 60, n % 1000);
        r
    }

    /// Once `records.json` is large, an added record is one line in the log: `records.json`
    /// keeps its bytes, and the registry reads back every record in order. The log is folded
    /// into `records.json` when it reaches half its size, and removed then.
    #[test]
    fn added_records_are_appended_then_folded_in() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        let mut all: Vec<Record> = (0..20).map(numbered).collect();
        registry.save(&all, &lock).unwrap();
        let base_path = dir.path().join(RECORDS_FILE);
        let log_path = dir.path().join(registry_log::LOG_FILE);
        let base = fs::read(&base_path).unwrap();
        let mut appended = 0;
        for n in 20..200 {
            let added = numbered(n);
            all.push(added.clone());
            registry.add_appending_from(&all, &[added], 0, &lock).unwrap();
            assert_eq!(registry.load().unwrap(), all, "after {n}");
            if fs::read(&base_path).unwrap() != base {
                break;
            }
            appended += 1;
            assert!(log_path.is_file());
        }
        assert!(appended >= 5, "{appended} appended before the fold");
        assert!(!log_path.exists(), "the log goes once folded in");
        assert_eq!(registry.load().unwrap(), all);
        // Below the size to append from, records.json is written whole.
        let added = numbered(500);
        all.push(added.clone());
        registry.add_appending_from(&all, &[added], u64::MAX, &lock).unwrap();
        assert!(!log_path.exists());
        assert_eq!(registry.load().unwrap(), all);
    }

    /// A killed append leaves a line without its newline: it is left out, and the next append
    /// starts after the last whole line. A log left beside a records.json written since (a
    /// kill between writing it and removing the log) is never read with it, and the next
    /// append starts a new one.
    #[test]
    fn torn_and_stale_logs_are_never_read_as_records() {
        let (dir, registry, lock, mut all) = with_one_appended();
        let log_path = dir.path().join(registry_log::LOG_FILE);
        let whole = fs::read(&log_path).unwrap();
        // Longer than the line appended next, so only cutting it off can make that line whole.
        let mut long = numbered(11);
        long.session = Some("s".repeat(MAX_LABEL_LEN));
        let torn_line = serde_json::to_vec(&long).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(&torn_line[..torn_line.len() - 1]);
        fs::write(&log_path, &torn).unwrap();
        assert_eq!(registry.load().unwrap(), all, "the torn line is left out");
        let added = numbered(12);
        all.push(added.clone());
        registry.add_appending_from(&all, &[added], 0, &lock).unwrap();
        assert_eq!(registry.load().unwrap(), all);

        // records.json rewritten (here: one record pruned), the log left behind.
        let left = fs::read(&log_path).unwrap();
        all.retain(|r| r.id != numbered(3).id);
        registry.save(&all, &lock).unwrap();
        fs::write(&log_path, &left).unwrap();
        assert_eq!(registry.load().unwrap(), all, "a stale log adds nothing");
        let added = numbered(13);
        all.push(added.clone());
        registry.add_appending_from(&all, &[added], 0, &lock).unwrap();
        assert_eq!(registry.load().unwrap(), all);
        let log = fs::read_to_string(&log_path).unwrap();
        assert_eq!(log.lines().count(), 2, "a new log: its header and one line\n{log}");
    }

    /// The newest appended record is read from the log's end alone: the last whole line,
    /// however long (here past the first piece read), never the header, never a torn line,
    /// and nothing once the log is stale or folded in.
    #[test]
    fn the_newest_appended_record_is_read_from_the_end_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        let lock = registry.lock(&|_| {}).unwrap();
        // Large enough that the long record below is appended, not folded in.
        let mut all: Vec<Record> = (0..400).map(numbered).collect();
        registry.save(&all, &lock).unwrap();
        assert!(registry.newest_appended().is_none(), "no log");
        let log_path = dir.path().join(registry_log::LOG_FILE);
        for n in 400..403 {
            let mut added = numbered(n);
            if n == 401 {
                added.skipped = (0..1000)
                    .map(|i| Skipped {
                        path: WirePath::from_bytes(format!("dir/{i:0>60}").as_bytes()),
                        reason: "too_large".into(),
                    })
                    .collect();
            }
            all.push(added.clone());
            assert!(fs::read(&log_path).map_or(true, |log| log.len() < 300_000));
            registry.add_appending_from(&all, &[added.clone()], 0, &lock).unwrap();
            let newest = registry.newest_appended().map(|(r, _)| r);
            assert!(newest.as_ref() == Some(&added), "{n}: {:?}", newest.map(|r| r.id));
        }
        let whole = fs::read(&log_path).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(br#"{"id":"0123"#);
        fs::write(&log_path, &torn).unwrap();
        assert_eq!(registry.newest_appended().map(|(r, _)| r), Some(numbered(402)));
        // Only the header left: nothing.
        let header_end = whole.iter().position(|&b| b == b'\n').unwrap();
        fs::write(&log_path, &whole[..=header_end]).unwrap();
        assert!(registry.newest_appended().is_none(), "only a header");
        fs::write(&log_path, &whole).unwrap();
        // records.json written since: the log is stale.
        registry.save(&all[..5], &lock).unwrap();
        fs::write(&log_path, &whole).unwrap();
        assert!(registry.newest_appended().is_none(), "a stale log");
    }

    /// A log that is a link is never written through nor replaced (that would drop the
    /// records it holds without a word): the append fails, naming it. A log with another name
    /// (a repository copied with `cp -al`) is never appended to: it is folded into
    /// records.json, which breaks the link, and the other name keeps its bytes.
    #[test]
    fn a_linked_log_is_never_appended_to() {
        let (dir, registry, lock, mut all) = with_one_appended();
        let log_path = dir.path().join(registry_log::LOG_FILE);
        let bytes = fs::read(&log_path).unwrap();

        let elsewhere = dir.path().join("elsewhere.log");
        fs::rename(&log_path, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &log_path).unwrap();
        let added = numbered(11);
        let mut with = all.clone();
        with.push(added.clone());
        match registry.add_appending_from(&with, &[added], 0, &lock) {
            Err(RecordsError::Corrupt { path, .. }) => assert_eq!(path, log_path),
            other => panic!("{other:?}"),
        }
        assert!(fs::symlink_metadata(&log_path).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&elsewhere).unwrap(), bytes);
        assert!(registry.newest_appended().is_none(), "never read through the link");

        fs::remove_file(&log_path).unwrap();
        fs::rename(&elsewhere, &log_path).unwrap();
        let copy = dir.path().join("copy.log");
        fs::hard_link(&log_path, &copy).unwrap();
        assert!(registry.newest_appended().is_none(), "a shared log is not read alone");
        let added = numbered(12);
        all.push(added.clone());
        registry.add_appending_from(&all, &[added], 0, &lock).unwrap();
        assert_eq!(fs::read(&copy).unwrap(), bytes, "the other name keeps its bytes");
        assert!(!log_path.exists(), "folded into records.json");
        assert_eq!(registry.load().unwrap(), all);
    }

    /// A log line that is not a valid record, a record twice, a header of another format, or a
    /// log that is a link or a FIFO is corrupt, named as the log; doctor's set-aside moves it
    /// with records.json.
    #[test]
    fn a_damaged_log_is_refused_and_set_aside_with_the_registry() {
        let (dir, registry, lock, _) = with_one_appended();
        let log_path = dir.path().join(registry_log::LOG_FILE);
        let good = fs::read_to_string(&log_path).unwrap();
        let (header, line) = good.split_once('\n').unwrap();
        let mut bad_path = numbered(11);
        bad_path.skipped[0].path = WirePath::from_bytes(b"../outside");
        let twice = serde_json::to_string(&numbered(2)).unwrap();
        for damaged in [
            format!("{header}\n{}\n", line.trim_end().replacen('{', "[", 1)),
            format!("{header}\n{line}{}\n", serde_json::to_string(&bad_path).unwrap()),
            format!("{header}\n{twice}\n"),
            format!("{header}\n{line}{line}"),
            good.replacen("ckpt-records-log", "ckpt-other-log", 1),
        ] {
            fs::write(&log_path, &damaged).unwrap();
            match registry.load() {
                Err(RecordsError::Corrupt { path, .. }) => assert_eq!(path, log_path, "{damaged}"),
                other => panic!("{damaged}: {other:?}"),
            }
        }
        fs::remove_file(&log_path).unwrap();
        std::os::unix::fs::symlink(dir.path().join(RECORDS_FILE), &log_path).unwrap();
        assert!(
            matches!(registry.load(), Err(RecordsError::Corrupt { .. })),
            "a linked log"
        );
        let aside = registry.set_aside_corrupt(&lock).unwrap();
        assert_eq!(aside.len(), 2, "{aside:?}");
        assert!(!log_path.exists() && fs::symlink_metadata(&log_path).is_err());
        assert_eq!(registry.load().unwrap(), Vec::<Record>::new());
    }

    /// The checked-tree list reads back what was saved, and anything else (another header, a
    /// bad id or count, a line cut short, ids of another hash, more lines than ckpt writes, a
    /// link) as nothing: every tree is then read again.
    #[test]
    fn checked_trees_read_back_exactly_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path()).unwrap();
        assert!(registry.checked_trees(20).is_empty(), "missing file");
        let lock = registry.lock(&|_| {}).unwrap();
        let a = ObjectId::from_hex("4b825dc642cb6eb9a060e54bf8d69288fbee4904").unwrap();
        let b = ObjectId::from_hex("aaf4a303bd592ce5bec68e2cfc02f5f522f8f80e").unwrap();
        registry
            .save_checked_trees([(a, 0), (b, 70_000)].into_iter(), &lock)
            .unwrap();
        let mut read = registry.checked_trees(20);
        read.sort_by_key(|(_, count)| *count);
        assert_eq!(read, vec![(a, 0), (b, 70_000)]);
        assert!(registry.checked_trees(32).is_empty(), "ids of another hash");
        let path = dir.path().join(CHECKED_TREES_FILE);
        let saved = fs::read_to_string(&path).unwrap();
        for damaged in [
            saved.replacen("ckpt checked trees 1", "ckpt checked trees 2", 1),
            saved.replacen("70000", "-1", 1),
            saved.replacen("aaf4a303", "zzf4a303", 1),
            format!("{saved}4b825dc6\n"),
            saved.replacen("70000", "+70000", 1),
            saved.replacen("70000", "070000", 1),
            saved.replacen("aaf4a303", "AAF4A303", 1),
            saved.replacen(" 70000", "  70000", 1),
            saved.trim_end().to_owned(),
            format!("{saved}\n"),
            format!(
                "{saved}{}",
                "4b825dc642cb6eb9a060e54bf8d69288fbee4904 1\n".repeat(MAX_CHECKED_TREES)
            ),
        ] {
            fs::write(&path, &damaged).unwrap();
            assert!(
                registry.checked_trees(20).is_empty(),
                "{}",
                &damaged[..damaged.len().min(200)]
            );
        }
        // Never read through a link, even to a list that would read back.
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, &saved).unwrap();
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(registry.checked_trees(20).is_empty(), "a symlinked list");
    }
}
