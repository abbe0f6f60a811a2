//! `Vault`: the one repository handle ckpt holds, opened from any directory of a worktree (or a
//! private store, see `private`). The `gix::Repository` inside never leaves this module tree,
//! so nothing outside `src/verbs` can reach a write API. Each file below holds one concern of
//! `impl Vault`: objects, pins, trees, the worktree listing, the blob census, parallel blob
//! sinks, the private store and its gc. It must never write the index, HEAD, a ref outside
//! `refs/ckpt/`, a reflog, config or hooks.

mod batch;
mod blobs;
mod census;
mod durable;
mod gc;
mod listed;
mod listing;
mod merge;
mod objects;
mod packed;
mod packfile;
mod pins;
mod private;
mod rawids;
mod shared;
mod trees;
mod walk;

pub use blobs::{FileRead, LocalBlobs, ParallelBlobs, READ_ATTEMPTS};
pub use gc::{collect_private_garbage, GarbageReport};
pub use listed::{IndexStat, PathScope};
pub(crate) use objects::checked_blob;
pub use objects::NewTreeEntry;
pub use packfile::PackCompression;
pub use pins::PinNames;
pub use private::{
    enclosing_bare_repository, enclosing_common_dir, enclosing_exclude_files, enclosing_worktree, path_key,
    refuse_unreadable_packed_refs, PrivateStore,
};
pub(crate) use trees::item_at;
pub use trees::{FileCounts, LevelEntry, TreeChange, TreeCheck};
pub use walk::{refuse_blocking_rule_file, Follow};

use std::path::{Path, PathBuf};

use super::types::{ObjectId, RepoPath, WorkspaceKey};

/// The file in a linked worktree's administrative directory that names it to ckpt.
const WORKTREE_MARKER: &str = "ckpt-workspace";
/// The mark of a worktree whose checkpoints were taken before worktrees were marked: its key
/// stays the plain `wt-<name>`.
pub const LEGACY_MARK: &str = "legacy";

/// The mark in a worktree's marker file, which must be one ckpt writes: a regular file (never
/// through a link) holding `legacy` or 12 lowercase hex digits. Anything else is refused by
/// name, never taken as a new key: checkpoints taken under a key that changes with every run
/// could never be listed again, while every snapshot would report success.
fn read_mark(marker: &Path) -> Result<String, VerbError> {
    let refused = |why: String| {
        VerbError::Worktree {
        path: marker.display().to_string(),
        message: format!(
            "{why}; this file names the worktree's checkpoints to ckpt. Remove it if this worktree has no checkpoints of its own (`ckpt list --all` shows them under wt-<name>-<mark>), else write its mark back, then run ckpt again"
        ),
    }
    };
    let bytes = crate::verbs::read_small_state_file(marker, 64)
        .map_err(|e| refused(format!("cannot be read as ckpt's mark ({e})")))?;
    let text = std::str::from_utf8(&bytes).unwrap_or_default().trim_end_matches('\n');
    let is_mark =
        text == LEGACY_MARK || (text.len() == 12 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    if !is_mark {
        return Err(refused(
            "holds no mark ckpt writes (12 hex digits or `legacy`)".to_owned(),
        ));
    }
    Ok(text.to_owned())
}

/// How a linked worktree is known across `git worktree remove` + `add` at the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorktreeIdentity {
    /// Marked by ckpt: this worktree's own mark.
    Marked(String),
    /// Not marked yet; `added` is when git created its administrative directory.
    Unmarked { added: Option<std::time::SystemTime> },
}
use super::VerbError;

/// Settings applied in memory only (never written to any config file): ckpt refs get no reflog,
/// and ckpt never needs the user's identity.
const CONFIG_OVERRIDES: [&str; 5] = [
    "core.logAllRefUpdates=false",
    "user.name=ckpt",
    "user.email=ckpt@localhost",
    "gc.auto=0",
    // Objects are read as they are stored: a `git replace` of a checkpoint's commit would make
    // snapshots build on the replacement's tree.
    "core.useReplaceRefs=false",
];

/// The identity every checkpoint commit is written with, so users need no git identity.
pub const CKPT_NAME: &str = "ckpt";

pub const CKPT_EMAIL: &str = "ckpt@localhost";

/// An open repository with a worktree, as ckpt is allowed to use it.
/// Memory for decoded objects per repository handle.
const OBJECT_CACHE_BYTES: usize = 16 * 1024 * 1024;

pub struct Vault {
    repo: gix::Repository,
    workdir: PathBuf,
    /// Directories below the worktree where ckpt keeps its own data (a store inside the
    /// workspace): never listed, so never captured, restored over or removed.
    reserved: Vec<RepoPath>,
    /// New objects collected for one pack ([`Vault::begin_batch`]).
    batch: std::cell::RefCell<Option<std::sync::Arc<batch::ObjectBatch>>>,
    /// The index a scoped listing read, with the file's identity then ([`Vault::read_index`]).
    kept_index: std::cell::RefCell<Option<KeptIndex>>,
    /// A version of the index a verified read has accepted before ([`Vault::vouch_for_index`]).
    vouched_index: std::cell::Cell<Option<IndexIdentity>>,
    /// An index being read on a thread of its own ([`Vault::prefetch_index`]).
    prefetched_index: std::cell::RefCell<Option<std::thread::JoinHandle<Option<KeptIndex>>>>,
    /// `.keep` files guarding packs this vault wrote until a pin makes their objects reachable
    /// (see [`Vault::pin`]); removed then, or when the snapshot that wrote them returns
    /// ([`Vault::pack_keeps_released_on_return`]), or when the vault is dropped.
    pending_keeps: std::cell::RefCell<Vec<PathBuf>>,
    /// Loose objects written since the last pin (by this vault and its blob writers): the pin
    /// checks they are all still stored ([`Vault::pin`]).
    written_loose: WrittenLoose,
    /// Objects a batch found stored already and did not write since the last pin: the pin
    /// checks they are all still stored ([`Vault::pin`]).
    relied_on: std::cell::RefCell<Vec<ObjectId>>,
    /// Tree levels read or written in this process ([`trees::LevelCache`]).
    levels: trees::LevelCache,
}

/// The ids of the loose objects written since the last pin, shared with the blob writers.
pub(super) type WrittenLoose = std::sync::Arc<std::sync::Mutex<Vec<ObjectId>>>;

/// Notes `id` as written loose.
pub(super) fn note_written(written: &WrittenLoose, id: ObjectId) {
    written
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(id);
}

impl Drop for Vault {
    fn drop(&mut self) {
        self.release_pack_keeps();
    }
}

/// A decoded index with the identity its file had when the read began.
type KeptIndex = (IndexIdentity, std::sync::Arc<gix::index::File>);

/// What identifies one version of the index file: inode, size, mtime and ctime (s, ns).
type IndexIdentity = (u64, u64, i64, i64, i64, i64);

/// What [`Vault::watch_fingerprint`] found, in two parts: a change to the settings (configs,
/// exclude files) may change what any path's capture holds; a change to the index or HEAD only
/// that of the paths the index starts or stops tracking.
#[derive(Debug, Clone)]
pub struct WatchFingerprint {
    pub settings: String,
    pub index_and_head: String,
    /// The index version `index_and_head` names, for [`Vault::vouch_for_index`].
    pub index: IndexVersion,
}

/// The version of the index a [`Vault::watch_fingerprint`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexVersion(Option<IndexIdentity>);

/// The identity of the file at `path` as an index version, `None` when it cannot be read.
fn index_identity(path: &Path) -> Option<IndexIdentity> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    ))
}

/// A mountinfo path: spaces, tabs, newlines and backslashes come as `\\ooo` octal escapes.
fn unescape_mount_path(field: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::with_capacity(field.len());
    let mut at = 0;
    while at < field.len() {
        let octal = field
            .get(at + 1..at + 4)
            .filter(|d| field[at] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(digits) => {
                out.push(digits.iter().fold(0u8, |n, d| n.wrapping_mul(8).wrapping_add(d - b'0')));
                at += 4;
            }
            None => {
                out.push(field[at]);
                at += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Whether the filesystem holding `git_dir` treats names differing only in case as different
/// files: `objects` is there, and `OBJECTS` is not the same directory. Read-only.
fn filesystem_tells_case_apart(git_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(lower) = std::fs::symlink_metadata(git_dir.join("objects")) else {
        return false;
    };
    match std::fs::symlink_metadata(git_dir.join("OBJECTS")) {
        Ok(upper) => upper.ino() != lower.ino() || upper.dev() != lower.dev(),
        Err(_) => true,
    }
}

/// How ckpt opens a repository: with room in the object store for the packs a snapshot adds.
/// gix sizes its table of packs when it opens the store (1.1 × the packs there, at least 32)
/// and cannot load a pack past it, so a repository of some thirty packs failed every snapshot
/// that wrote a few more (each file of 8 MiB or more is a pack of its own) with its own commit
/// "missing", and every restore with it. An empty slot costs a few dozen bytes.
pub(super) fn open_options() -> gix::open::Options {
    gix::open::Options::default().object_store_slots(gix::odb::store::init::Slots::AsNeededByDiskState {
        multiplier: 2.0,
        minimum: 8192,
    })
}

/// `dir` made absolute through its nearest existing ancestor, for a directory not made yet.
pub fn absolute_parent_canonical(dir: &Path) -> std::io::Result<PathBuf> {
    let mut missing = Vec::new();
    let mut current = dir;
    loop {
        match current.canonicalize() {
            Ok(found) => {
                let mut out = found;
                out.extend(missing.iter().rev());
                return Ok(out);
            }
            Err(e) => {
                let (Some(parent), Some(name)) = (current.parent(), current.file_name()) else {
                    return Err(e);
                };
                missing.push(name.to_owned());
                current = parent;
            }
        }
    }
}

impl Vault {
    /// Finds the repository containing `dir` (searching upwards). `Ok(None)` when `dir` is not
    /// inside a repository with a worktree.
    pub fn discover(dir: &Path) -> Result<Option<Vault>, VerbError> {
        let Some(vault) = Self::discover_with(dir, &CONFIG_OVERRIDES)? else {
            return Ok(None);
        };
        let ref_storage = vault.repo.config_snapshot().string("extensions.refStorage");
        if ref_storage.is_some_and(|format| format.eq_ignore_ascii_case(b"reftable")) {
            return Err(VerbError::Unsupported(format!(
                "the repository at {} keeps its refs in the reftable format, which ckpt does not support yet; use --provider copy",
                vault.workdir.display()
            )));
        }
        // `core.ignorecase=true` on a filesystem that tells cases apart (a repository copied
        // from macOS, or set by hand) would make the walk take `readme` for the tracked
        // `Readme` and hide real files; the filesystem decides, as git's own probe does at init.
        let claims_ignorecase = vault.repo.config_snapshot().boolean("core.ignorecase") == Some(true);
        if claims_ignorecase && filesystem_tells_case_apart(vault.repo.common_dir()) {
            let mut overrides = CONFIG_OVERRIDES.to_vec();
            overrides.push("core.ignorecase=false");
            return Self::discover_with(dir, &overrides);
        }
        Ok(Some(vault))
    }

    fn discover_with(dir: &Path, overrides: &[&str]) -> Result<Option<Vault>, VerbError> {
        let open_options = open_options().config_overrides(overrides.iter().copied());
        let repo = match gix::discover_opts(dir, Default::default(), open_options) {
            Ok(repo) => repo,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => {
                let text = error.to_string();
                if text.contains("not a git repository") || text.contains("Could not find a git repository") {
                    return Ok(None);
                }
                return Err(VerbError::git(
                    format!("opening the repository at {}", dir.display()),
                    error,
                ));
            }
        };
        let Some(workdir) = repo.workdir().map(Path::to_path_buf) else {
            return Ok(None);
        };
        let mut repo = repo;
        // Objects gix itself reads are kept decoded for a second read; tree levels ckpt reads
        // or writes are kept by the vault ([`trees::LevelCache`]).
        repo.object_cache_size_if_unset(OBJECT_CACHE_BYTES);
        Ok(Some(Vault {
            repo,
            workdir,
            reserved: Vec::new(),
            batch: Default::default(),
            kept_index: Default::default(),
            prefetched_index: Default::default(),
            pending_keeps: Default::default(),
            written_loose: Default::default(),
            relied_on: Default::default(),
            levels: Default::default(),
            vouched_index: Default::default(),
        }))
    }

    /// The repository itself, for the worktree writer beside this module (never beyond `verbs`).
    pub(super) fn repo_handle(&self) -> &gix::Repository {
        &self.repo
    }

    /// A handle each worker thread can open its own repository from.
    pub(super) fn repo_for_threads(&self) -> gix::ThreadSafeRepository {
        self.repo.clone().into_sync()
    }

    pub(super) fn object_hash_kind(&self) -> gix::hash::Kind {
        self.repo.object_hash()
    }

    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The directory shared by all worktrees of this repository.
    pub fn common_dir(&self) -> &Path {
        self.repo.common_dir()
    }

    fn is_linked_worktree(&self) -> bool {
        self.repo.git_dir().canonicalize().ok() != self.repo.common_dir().canonicalize().ok()
    }

    /// What tells this linked worktree apart from an earlier one git had at the same name
    /// (`git worktree remove`, then `add` again): a marker in its administrative directory,
    /// `.git/worktrees/<name>/ckpt-workspace`, which git removes with the worktree. `None` for
    /// the main worktree, which cannot be re-added.
    pub fn worktree_identity(&self) -> Result<Option<WorktreeIdentity>, VerbError> {
        if !self.is_linked_worktree() {
            return Ok(None);
        }
        let marker = self.repo.git_dir().join(WORKTREE_MARKER);
        if let Err(e) = std::fs::symlink_metadata(&marker) {
            if e.kind() == std::io::ErrorKind::NotFound {
                // `commondir` is written by `git worktree add` and never again.
                let added = std::fs::symlink_metadata(self.repo.git_dir().join("commondir"))
                    .and_then(|m| m.modified())
                    .ok();
                return Ok(Some(WorktreeIdentity::Unmarked { added }));
            }
        }
        Ok(Some(WorktreeIdentity::Marked(read_mark(&marker)?)))
    }

    /// Marks this linked worktree with `mark` unless another process marked it first; returns
    /// the mark that stands. Creates only the marker file, never through a link.
    pub fn mark_worktree(&self, mark: &str) -> Result<String, VerbError> {
        WorkspaceKey::new(mark)?;
        let marker = self.repo.git_dir().join(WORKTREE_MARKER);
        let failed = |e: std::io::Error| VerbError::git(format!("marking the worktree at {}", marker.display()), e);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&marker) {
            Ok(mut file) => {
                use std::io::Write;
                file.write_all(format!("{mark}\n").as_bytes()).map_err(failed)?;
                file.sync_all().map_err(failed)?;
                Ok(mark.to_owned())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_mark(&marker),
            Err(e) => Err(failed(e)),
        }
    }

    /// `main` for the main worktree; for a linked one `wt-<name>`, followed by `-<mark>` when its
    /// marker names one ([`Self::worktree_identity`]; `legacy` or none keeps the plain name that
    /// ckpt used before worktrees were marked).
    pub fn workspace_key(&self, mark: Option<&str>) -> Result<WorkspaceKey, VerbError> {
        if !self.is_linked_worktree() {
            return Ok(WorkspaceKey::new("main")?);
        }
        let git_dir = self.repo.git_dir();
        let name = git_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sanitized: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        match mark {
            Some(mark) if mark != LEGACY_MARK => Ok(WorkspaceKey::new(&format!("wt-{sanitized}-{mark}"))?),
            _ => Ok(WorkspaceKey::new(&format!("wt-{sanitized}"))?),
        }
    }

    /// The commit HEAD points at, or `None` while HEAD is unborn.
    pub fn head_commit(&self) -> Result<Option<ObjectId>, VerbError> {
        let head = self.repo.head().map_err(|e| VerbError::git("reading HEAD", e))?;
        Ok(head.id().map(|id| ObjectId(id.detach())))
    }

    /// A fingerprint of everything outside the worktree that decides what a capture holds: the
    /// index, HEAD's commit, every config file git would read, the exclude files. Equal
    /// fingerprints mean a watch daemon's "nothing changed in the worktree" is the whole truth;
    /// where only [`WatchFingerprint::index_and_head`] differs, the paths
    /// [`Self::index_membership_changes`] names complete it.
    pub fn watch_fingerprint(&self) -> WatchFingerprint {
        let index = IndexVersion(index_identity(&self.repo.index_path()));
        use std::os::unix::fs::MetadataExt;
        let git_dir = self.repo.git_dir().to_path_buf();
        let common = self.repo.common_dir().to_path_buf();
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"));
        let mut files = vec![
            git_dir.join("config.worktree"),
            common.join("config"),
            common.join("info/exclude"),
            home.join(".gitconfig"),
            xdg.join("git/config"),
            xdg.join("git/ignore"),
            PathBuf::from("/etc/gitconfig"),
        ];
        files.extend(std::env::var_os("GIT_CONFIG_GLOBAL").map(PathBuf::from));
        if let Ok(Some(excludes)) = self.repo.config_snapshot().trusted_path("core.excludesFile") {
            files.push(excludes);
        }
        let stat_line = |file: &Path| {
            let stat = match std::fs::metadata(file) {
                Ok(m) => format!(
                    "{} {} {} {} {}",
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ino(),
                    m.ctime_nsec()
                ),
                Err(_) => "absent".to_owned(),
            };
            format!("{} {stat}\n", file.display())
        };
        let mut index_and_head = match self.head_commit() {
            Ok(Some(head)) => format!("head {head}\n"),
            Ok(None) => "head none\n".to_owned(),
            Err(e) => format!("head error {e}\n"),
        };
        index_and_head.push_str(&stat_line(&git_dir.join("index")));
        index_and_head.push_str(&stat_line(&git_dir.join("HEAD")));
        WatchFingerprint {
            settings: files.iter().map(|file| stat_line(file)).collect(),
            index_and_head,
            index,
        }
    }

    /// Says that `version` of the index was read with its checksum verified before: a watch
    /// base's fingerprint names the index version of the full capture it dates from, and that
    /// capture's read verified it. Reads of that same version then skip hashing the whole file
    /// (most of the cost of reading a large index); any other version is verified as always.
    pub fn vouch_for_index(&self, version: IndexVersion) {
        self.vouched_index.set(version.0);
    }

    /// Mount points strictly inside the worktree (from `/proc/self/mountinfo`): inotify does not
    /// see into them, and a mount itself raises no event. Read-only.
    pub fn mount_points_inside(&self) -> Vec<PathBuf> {
        let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
            return Vec::new();
        };
        text.split(|&b| b == b'\n')
            .filter_map(|line| line.split(|&b| b == b' ').nth(4))
            .map(unescape_mount_path)
            .filter(|point| point.starts_with(&self.workdir) && *point != self.workdir)
            .collect()
    }

    /// The directories [`Self::reserve`] keeps out of listings, as absolute paths.
    pub fn reserved_dirs(&self) -> Vec<PathBuf> {
        self.reserved
            .iter()
            .map(|dir| self.workdir.join(dir.to_os_path()))
            .collect()
    }

    /// Keeps `dir` out of every listing when it lies below the worktree: ckpt's own store
    /// (e.g. a workspace that is the home directory holding `~/.local/share/ckpt`). Its content
    /// is then never captured, and a restore never writes or removes anything inside it.
    pub fn reserve(&mut self, dir: &Path) {
        let Ok(dir) = dir.canonicalize().or_else(|_| absolute_parent_canonical(dir)) else {
            return;
        };
        let root = self.workdir.canonicalize().unwrap_or_else(|_| self.workdir.clone());
        if let Ok(relative) = dir.strip_prefix(&root) {
            if let Ok(path) = RepoPath::new(relative.as_os_str().as_encoded_bytes().to_vec()) {
                self.reserved.push(path);
            }
        }
    }
}
