//! The checkpoint registry: one validated record per checkpoint, stored as versioned JSON in the
//! workspace's private state directory, rewritten atomically (temp + fsync + rename) under a
//! cross-process lock, plus the restore journal beside it. It owns only files inside that state
//! directory; it must never touch the worktree or any repository file.

pub mod config;
pub mod home;
pub mod hooks;
mod journal;
pub mod sessionlog;
pub mod statcache;
mod trailers;
pub mod watch;
mod wire;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::verbs::{ObjectId, RepoPath};
pub use journal::{JournalOp, RestoreJournal};
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
/// Longest session or trigger label accepted.
pub const MAX_LABEL_LEN: usize = 200;

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

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Auto,
    Manual,
    Guard,
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Auto => "auto",
            Kind::Manual => "manual",
            Kind::Guard => "guard",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        match text {
            "auto" => Some(Kind::Auto),
            "manual" => Some(Kind::Manual),
            "guard" => Some(Kind::Guard),
            _ => None,
        }
    }
}

/// A path that a checkpoint did not protect, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub path: WirePath,
    pub reason: String,
}

/// The reason code for a path git itself refuses to name (`.Git`, `.git.`, `git~1`): never
/// written into a tree, which `git fsck` would reject, and never reached by a restore.
pub const RESERVED_NAME: &str = "reserved_name";

impl Skipped {
    /// A skipped path must be a repository path; one skipped for its reserved name need only be
    /// shaped like one, since no tree and no restore ever holds it.
    pub fn check(&self) -> Result<(), String> {
        let bytes = self.path.to_bytes()?;
        let checked = if self.reason == RESERVED_NAME {
            RepoPath::check_shape(&bytes)
        } else {
            RepoPath::check(&bytes)
        };
        checked.map_err(|e| e.to_string())
    }
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Full hex id; for the git provider, the pinned commit's id.
    pub id: String,
    pub provider: String,
    pub commit: Option<String>,
    pub tree: String,
    pub workspace: WirePath,
    pub session: Option<String>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub trigger: Option<String>,
    pub kind: Kind,
    /// RFC 3339, UTC.
    pub time: String,
    /// Paths that differ from the previous checkpoint (from HEAD's tree for the first one).
    pub files: u64,
    /// Files and links the checkpoint holds in all.
    pub total_files: u64,
    /// Bytes of blobs new relative to the previous checkpoint.
    pub bytes: u64,
    pub skipped: Vec<Skipped>,
    /// Files whose permission bits keep group or others from reading them (a `0600` `.env`):
    /// a restore that has to create one again gives it these bits, never git's wider default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub narrow_modes: Vec<NarrowMode>,
}

/// A file's permission bits, kept where they are narrower than a new file's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NarrowMode {
    pub path: WirePath,
    pub mode: u32,
}

/// At most this many narrow modes are kept per checkpoint (a worktree made under a `077` umask
/// is narrow throughout, and a restore under that umask creates files narrow anyway).
pub const MAX_NARROW_MODES: usize = 4096;

impl NarrowMode {
    /// Whether a file with these permission bits is kept from group or others reading it.
    pub fn is_narrow(mode: u32) -> bool {
        mode & 0o044 != 0o044
    }

    pub fn check(&self) -> Result<(), String> {
        self.path.to_repo_path()?;
        if self.mode > 0o777 {
            return Err(format!("mode {:o} is more than permission bits", self.mode));
        }
        Ok(())
    }
}

/// Checks a free-text label (session, trigger): one line, printable, bounded.
pub fn validate_label(what: &str, text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if text.len() > MAX_LABEL_LEN {
        return Err(format!("{what} is longer than {MAX_LABEL_LEN} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters or newlines"));
    }
    Ok(())
}

/// [`validate_label`] for a label about to be stored: also nothing that hides text or turns it
/// around where lists and terminals show it. (Labels already stored are read as before.)
pub fn validate_new_label(what: &str, text: &str) -> Result<(), String> {
    validate_label(what, text)?;
    let invisible = |c: char| matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2028}' | '\u{2029}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}');
    if text.chars().any(invisible) {
        return Err(format!(
            "{what} must not contain invisible or direction-changing characters (U+200B–U+200F, U+202A–U+202E, U+2028, U+2029, U+2060–U+2069, U+FEFF)"
        ));
    }
    Ok(())
}

impl Record {
    pub fn object_id(&self) -> Result<ObjectId, String> {
        ObjectId::from_hex(&self.id).map_err(|e| e.to_string())
    }

    pub fn short(&self) -> &str {
        &self.id[..8.min(self.id.len())]
    }

    pub fn tree_id(&self) -> Result<ObjectId, String> {
        ObjectId::from_hex(&self.tree).map_err(|e| e.to_string())
    }

    pub fn commit_id(&self) -> Result<Option<ObjectId>, String> {
        self.commit
            .as_deref()
            .map(|hex| ObjectId::from_hex(hex).map_err(|e| e.to_string()))
            .transpose()
    }

    pub fn unix_time(&self) -> Result<i64, String> {
        chrono::DateTime::parse_from_rfc3339(&self.time)
            .map(|t| t.timestamp())
            .map_err(|e| format!("bad time {:?}: {e}", self.time))
    }

    /// Every field that later code trusts is checked here, so a tampered registry is refused
    /// before anything acts on it.
    pub fn validate(&self) -> Result<(), String> {
        let id = self.object_id().map_err(|e| format!("record id: {e}"))?;
        self.tree_id().map_err(|e| format!("record {}: tree: {e}", self.id))?;
        match self.provider.as_str() {
            // Both providers store checkpoints as commits; a copy checkpoint's commit lives in
            // the private store.
            "git" | "copy" => {
                let commit = self
                    .commit_id()
                    .map_err(|e| format!("record {}: commit: {e}", self.id))?;
                if commit != Some(id) {
                    return Err(format!("record {}: a git checkpoint's id must be its commit", self.id));
                }
            }
            other => return Err(format!("record {}: unknown provider {other:?}", self.id)),
        }
        self.unix_time().map_err(|e| format!("record {}: {e}", self.id))?;
        if let Some(session) = &self.session {
            validate_label("session", session).map_err(|e| format!("record {}: {e}", self.id))?;
        }
        if let Some(trigger) = &self.trigger {
            validate_label("trigger", trigger).map_err(|e| format!("record {}: {e}", self.id))?;
        }
        self.workspace
            .to_bytes()
            .map_err(|e| format!("record {}: workspace: {e}", self.id))?;
        for skipped in &self.skipped {
            skipped
                .check()
                .map_err(|e| format!("record {}: skipped path: {e}", self.id))?;
        }
        for narrow in &self.narrow_modes {
            narrow
                .check()
                .map_err(|e| format!("record {}: narrow mode: {e}", self.id))?;
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsFile {
    format: String,
    version: u64,
    records: Vec<Record>,
}

/// A held cross-process lock on one workspace's registry; released on drop.
pub struct RegistryLock {
    _file: File,
}

/// A held lock on a whole copy store (`$CKPT_HOME/store.lock`): shared by every process that
/// may write objects into the store, exclusive for `ckpt gc`, so gc never deletes an object a
/// snapshot has just found present and is relying on. Released on drop.
pub struct StoreLock {
    _file: File,
}

/// Makes the copy store's directory, private to the user (0700): it holds copies of every file
/// it protects, a `0600` secret among them, whose objects are readable by anyone who can reach
/// them: another local user could read a `.env` from the store. A store made before, with wider
/// bits, is narrowed once it holds ckpt's own lock file.
fn create_private_store(home: &Path) -> Result<(), RecordsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(parent) = home.parent() {
        fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    match fs::DirBuilder::new().mode(0o700).create(home) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error(home)(e)),
    }
    let meta = fs::symlink_metadata(home).map_err(io_error(home))?;
    let ours = home.join(STORE_LOCK_FILE).is_file();
    if meta.is_dir() && ours && meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(home, fs::Permissions::from_mode(0o700)).map_err(io_error(home))?;
    }
    Ok(())
}

impl StoreLock {
    /// Waits (like [`Registry::lock`]) for the shared store lock in the store directory `home`.
    pub fn shared(home: &Path, waiting: &dyn Fn(&Path)) -> Result<StoreLock, RecordsError> {
        create_private_store(home)?;
        let file = acquire_lock(&home.join(STORE_LOCK_FILE), LockMode::Shared, waiting)?;
        Ok(StoreLock { _file: file })
    }

    /// Waits for the exclusive store lock: no snapshot of any workspace runs while it is held.
    pub fn exclusive(home: &Path, waiting: &dyn Fn(&Path)) -> Result<StoreLock, RecordsError> {
        create_private_store(home)?;
        let file = acquire_lock(&home.join(STORE_LOCK_FILE), LockMode::Exclusive, waiting)?;
        Ok(StoreLock { _file: file })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LockMode {
    Shared,
    Exclusive,
}

/// The lock file at `path`, created if needed (never truncated: it may name its holder). Never
/// through a symlink someone put there (that would create or, for the daemon's pid, overwrite
/// its target), and never a FIFO or device (opened without blocking, then refused): either is
/// refused with its path, not removed, since removing a lock file another process may be
/// opening at that moment would let two processes hold "the" lock.
fn open_lock_file(path: &Path) -> Result<File, RecordsError> {
    let refused = |what| RecordsError::UnsafeLockFile {
        path: path.to_path_buf(),
        what,
    };
    let file = crate::verbs::open_lock_no_follow(path).map_err(|e| match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => refused("a symlink"),
        // A FIFO with no reader, opened without blocking.
        Some(code) if code == rustix::io::Errno::NXIO.raw_os_error() => refused("a FIFO, socket or device"),
        Some(code) if code == rustix::io::Errno::ISDIR.raw_os_error() => refused("a directory"),
        _ => io_error(path)(e),
    })?;
    use std::os::unix::fs::MetadataExt;
    match file.metadata() {
        // Another name for the same file (a hard link someone made) would get the daemon's pid.
        Ok(meta) if meta.is_file() && meta.nlink() > 1 => Err(refused("a hard link to another file")),
        Ok(meta) if meta.is_file() => Ok(file),
        Ok(meta) => Err(refused(not_a_file(&meta))),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// What stands where a lock file should be, when it is neither a file nor a symlink.
fn not_a_file(meta: &fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "a directory"
    } else {
        "a FIFO, socket or device"
    }
}

/// What is wrong with the lock file at `path`, as [`open_lock_file`] would refuse it; looked at
/// without opening or creating anything (for `audit`). `None`: absent, or a lone regular file.
fn unsafe_lock_file(path: &Path) -> Option<RecordsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(path).ok()?;
    let what = if meta.file_type().is_symlink() {
        "a symlink"
    } else if !meta.is_file() {
        not_a_file(&meta)
    } else if meta.nlink() > 1 {
        "a hard link to another file"
    } else {
        return None;
    };
    Some(RecordsError::UnsafeLockFile {
        path: path.to_path_buf(),
        what,
    })
}

/// An exclusive `flock` on `path` (created if needed) if nobody holds it now; `None` without
/// waiting otherwise.
fn try_lock_file(path: &Path) -> Result<Option<File>, RecordsError> {
    let file = open_lock_file(path)?;
    match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Ok(None),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Takes a `flock` on `path` (created if needed), calling `waiting` once after a second of
/// waiting and giving up after `CKPT_LOCK_TIMEOUT_SECS` (default 120) with an error naming the file.
fn acquire_lock(path: &Path, mode: LockMode, waiting: &dyn Fn(&Path)) -> Result<File, RecordsError> {
    let file = open_lock_file(path)?;
    let timeout = std::env::var("CKPT_LOCK_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(120.0);
    let start = std::time::Instant::now();
    let mut announced = false;
    loop {
        let taken = match mode {
            LockMode::Shared => fs4::fs_std::FileExt::try_lock_shared(&file),
            LockMode::Exclusive => fs4::fs_std::FileExt::try_lock_exclusive(&file),
        };
        match taken {
            Ok(true) => return Ok(file),
            Ok(false) => {}
            Err(e) => return Err(io_error(path)(e)),
        }
        let waited = start.elapsed().as_secs_f64();
        if waited >= timeout {
            return Err(RecordsError::LockTimeout {
                path: path.to_path_buf(),
                seconds: waited,
            });
        }
        if waited >= 1.0 && !announced {
            waiting(path);
            announced = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
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

    /// Moves an unreadable registry aside (never deletes it) so it can be rebuilt from refs.
    pub fn set_aside_corrupt(&self, _lock: &RegistryLock) -> Result<Option<PathBuf>, RecordsError> {
        let path = self.records_path();
        if fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        Ok(Some(set_aside(&path)?))
    }

    fn records_path(&self) -> PathBuf {
        self.dir.join(RECORDS_FILE)
    }

    /// Loads and validates every record, oldest first. A missing file is an empty registry; a
    /// malformed one is an error, never silently reset.
    pub fn load(&self) -> Result<Vec<Record>, RecordsError> {
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&path)(e)),
        };
        parse_records(&text).map_err(|failure| match failure {
            ParseFailure::Version(found) => RecordsError::UnsupportedVersion {
                path: path.clone(),
                found,
            },
            ParseFailure::Corrupt(why) => RecordsError::Corrupt {
                path: path.clone(),
                why,
            },
        })
    }

    /// Replaces the registry with `records`. Requires the lock.
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
        write_atomically(&self.records_path(), &text)
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

/// Creates the temp file `path` for an atomic replace, never through whatever is already there:
/// the create is exclusive (`O_CREAT|O_EXCL`, which does not follow a symlink), and a leftover
/// at that name (a crash of an earlier process with this pid, or a link someone planted) is
/// unlinked, not written through, before the one retry.
pub(crate) fn create_temp_exclusive(path: &Path) -> std::io::Result<File> {
    let create = || OpenOptions::new().write(true).create_new(true).open(path);
    match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::remove_file(path)?;
            create()
        }
        result => result,
    }
}

/// temp file in the same directory + fsync + rename + fsync of the directory.
fn write_atomically(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    replace_file(path, content, true)
}

/// [`write_atomically`] without the fsyncs, for state whose loss in a power cut only costs
/// time: after one it is the old file or the new one (each safe to read), and no process that
/// depended on it survives the cut. Saves a watched snapshot two of its six fsyncs per file.
fn replace_unsynced(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    replace_file(path, content, false)
}

fn replace_file(path: &Path, content: &[u8], durable: bool) -> Result<(), RecordsError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = create_temp_exclusive(&temp)?;
        file.write_all(content)?;
        if durable {
            file.sync_all()?;
        }
        fs::rename(&temp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        fs::remove_file(&temp).ok();
    }
    result.map_err(io_error(path))
}

/// The pid in a state write's temp name (`.<name>.<pid>.tmp`), if `name` is one.
fn state_temp_pid(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (stem, pid) = inner.rsplit_once('.')?;
    // The names ckpt gives its state files, and a pid as the kernel gives it (no leading zero).
    let stem_ok = stem.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let pid_ok = !pid.is_empty() && !pid.starts_with('0') && pid.bytes().all(|b| b.is_ascii_digit());
    if !stem_ok || !pid_ok {
        return None;
    }
    pid.parse().ok()
}

/// Writes a file of ckpt's own state (outside any worktree) atomically, creating its directory;
/// unchanged content is left alone.
pub fn write_state_file(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    if crate::verbs::read_regular_file(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        create_state_dir(dir)?;
    }
    write_atomically(path, content)
}

/// Moves `path` to `<name>.corrupt-<UTC time to the nanosecond>[-N]` beside it, never over an
/// earlier one: what was set aside is never lost.
fn set_aside(path: &Path) -> Result<PathBuf, RecordsError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.9f");
    for n in 0..1000 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let aside = path.with_file_name(format!("{name}.corrupt-{stamp}{suffix}"));
        // A hard link claims the name only if it is free; then the original goes. A directory
        // cannot be linked, so it could never be set aside that way: it is renamed to a name
        // that is free now, under the workspace lock.
        if fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
            if fs::symlink_metadata(&aside).is_ok() {
                continue;
            }
            fs::rename(path, &aside).map_err(io_error(path))?;
            return Ok(aside);
        }
        match fs::hard_link(path, &aside) {
            Ok(()) => {
                fs::remove_file(path).map_err(io_error(path))?;
                return Ok(aside);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&aside)(e)),
        }
    }
    Err(RecordsError::Corrupt {
        path: path.to_path_buf(),
        why: "could not find a free name to set it aside under".into(),
    })
}

/// How many trailing components of a state directory ckpt made itself and so must be real
/// directories (`<git-common-dir>/ckpt/<workspace>`, `workspaces/<key>/state`); the directory
/// above them (the git dir, `$CKPT_HOME`) is the user's and may be a link.
const OWN_STATE_LEVELS: usize = 2;

/// Refuses a state directory whose own levels are symlinks: a planted link must not send
/// ckpt's lock, registry or cache writes anywhere else.
fn refuse_linked_state_dir(dir: &Path) -> Result<(), RecordsError> {
    for level in dir.ancestors().take(OWN_STATE_LEVELS) {
        match fs::symlink_metadata(level) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(RecordsError::UnsafeStateDir {
                    path: level.to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(level)(e)),
        }
    }
    Ok(())
}

/// Creates a state directory (and its parents) after checking that none of its own levels is a
/// symlink, and checks again once it exists.
fn create_state_dir(dir: &Path) -> Result<(), RecordsError> {
    refuse_linked_state_dir(dir)?;
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    refuse_linked_state_dir(dir)
}

/// Creates the state directory `dir`, of which the last `own` components are ckpt's: those are
/// made as needed (with `mode`), while the directory above them (the git directory, the copy
/// store's workspace) must exist already. ckpt never makes what is the user's, so a process
/// that outlives its workspace (a daemon starting as a test removes its repository) cannot
/// bring the workspace's path back and then keep watching it.
fn create_own_dirs(dir: &Path, own: usize, mode: u32) -> Result<(), RecordsError> {
    use std::os::unix::fs::DirBuilderExt;
    refuse_linked_state_dir(dir)?;
    let levels: Vec<&Path> = dir.ancestors().take(own + 1).collect();
    let Some(base) = levels.last().filter(|_| levels.len() == own + 1) else {
        return Err(io_error(dir)(std::io::Error::other("not a state directory path")));
    };
    if !base.is_dir() {
        return Err(io_error(base)(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "gone (ckpt does not create it again)",
        )));
    }
    for level in levels[..own].iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(level) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io_error(level)(e)),
            _ => {}
        }
    }
    refuse_linked_state_dir(dir)
}

/// Converts a checked skipped path back to a repository path.
pub fn skipped_path(skipped: &Skipped) -> Option<RepoPath> {
    skipped.path.to_repo_path().ok()
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
