//! Worktree reads and writes confined to the worktree root: every path is walked one component at
//! a time with `openat(O_NOFOLLOW)`, so no read or write ever passes through a symlinked ancestor
//! or leaves the root. Writes are temp file + fsync + rename in the same directory. Before a path
//! is overwritten or removed, what is on disk must still match what the caller has evidence of;
//! anything else is refused for that path.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::types::{EntryKind, FileStat, ObjectId, PathKind, PathStat, RepoPath, TreeItem};
use super::vault::Vault;
use super::VerbError;

mod reading;
mod staging;
mod writing;

pub use staging::{any_staged_files, dead_staged_files, remove_staged_files, Prestaged};

use writing::{describe, Staged};

/// What occupies a worktree path right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskItem {
    Missing,
    Directory,
    /// A file or symlink, hashed as git would store it (no filters).
    Entry(TreeItem),
    /// A socket, fifo or device.
    Special,
    /// An ancestor is a symlink or not a directory, so the path cannot be reached safely.
    Unreachable(String),
}

/// One step of a path-batched restore. `expect` is what the caller's evidence (the guard
/// checkpoint) says is on disk now; the step is refused if the disk disagrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOp {
    /// Remove a file or symlink that the evidence says is there.
    Remove { path: RepoPath, expect: TreeItem },
    /// Remove a directory that must be empty by now.
    RemoveEmptyDir { path: RepoPath },
    /// Remove a directory if it is empty; a directory that still holds anything stays, silently.
    PruneEmptyDir { path: RepoPath },
    /// Write `item` at `path`; `expect: None` means nothing may be there. `mode`: the
    /// permission bits a file made anew gets where the checkpoint kept them narrower than the
    /// default (a file replaced keeps its own).
    Write {
        path: RepoPath,
        item: TreeItem,
        expect: Option<TreeItem>,
        mode: Option<u32>,
    },
}

impl RestoreOp {
    pub fn path(&self) -> &RepoPath {
        match self {
            RestoreOp::Remove { path, .. }
            | RestoreOp::RemoveEmptyDir { path }
            | RestoreOp::PruneEmptyDir { path }
            | RestoreOp::Write { path, .. } => path,
        }
    }
}

/// Opens a file for reading without following a symlink at its last component (read-only; used
/// by the capture so a file swapped for a link between listing and reading is not followed).
pub fn open_no_follow(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    Ok(std::fs::File::from(fd))
}

/// Opens the regular file at `path` for reading (following a symlink), never blocking: it is
/// opened without waiting for a FIFO's writer and refused unless it is a regular file. For
/// ckpt's own state files and logs it reads, where a FIFO would make every command wait for a
/// writer. Read-only.
pub fn open_regular_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    open_regular(path, OFlags::empty())
}

/// [`open_regular_file`], refusing a symlink at the last component instead of following it.
pub fn open_regular_file_no_follow(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    open_regular(path, OFlags::NOFOLLOW)
}

fn open_regular(path: &std::path::Path, extra: OFlags) -> std::io::Result<std::fs::File> {
    let not_regular = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file (a FIFO, socket, device or directory); ckpt does not read it",
        )
    };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | extra;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // A socket cannot be opened at all.
        Err(Errno::NXIO) => return Err(not_regular()),
        Err(e) => return Err(e.into()),
    };
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// The first of `path`'s ancestors, or `path` itself, that is a symlink in the worktree at
/// `workdir` now, looked at from the top down (nothing below a file or an absent name is).
/// Read-only.
pub fn symlink_on_path(workdir: &std::path::Path, path: &RepoPath) -> Option<RepoPath> {
    let root = rustix::fs::open(
        workdir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    for at in path.ancestors().into_iter().chain(std::iter::once(path.clone())) {
        let stat = rustix::fs::statat(&root, at.as_bytes(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => return Some(at),
            FileType::Directory => {}
            _ => return None,
        }
    }
    None
}

/// The whole content of ckpt's own state file at `path`, read only if it is a regular file
/// (never through a symlink, never waiting on a FIFO) of at most `max_bytes`: for a list that
/// only speeds ckpt up, where a tampered file must cost neither a read of gigabytes nor a read
/// of whatever a link names. Read-only.
pub fn read_small_state_file(path: &std::path::Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path, OFlags::NOFOLLOW)?;
    let size = file.metadata()?.len();
    if size > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{size} bytes, more than the {max_bytes} ckpt ever writes there"),
        ));
    }
    let mut content = Vec::new();
    // The file may grow after the check: never read past the limit.
    std::io::Read::read_to_end(&mut std::io::Read::take(file, max_bytes + 1), &mut content)?;
    if content.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it grew past the limit while read",
        ));
    }
    Ok(content)
}

/// The whole content of the regular file at `path` ([`open_regular_file`]).
pub fn read_regular_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let mut content = Vec::new();
    std::io::Read::read_to_end(&mut open_regular_file(path)?, &mut content)?;
    Ok(content)
}

/// Opens ckpt's own lock file at `path` for writing, created if missing and never truncated,
/// without following a symlink at its last component and without blocking on a FIFO (the
/// registry refuses both; this only opens).
pub fn open_lock_no_follow(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o666))?;
    Ok(std::fs::File::from(fd))
}

/// Opens ckpt's own existing state file at `path` for reading and writing (never creating
/// it), without following a symlink at its last component and without blocking on a FIFO;
/// `InvalidData` unless it is a regular file.
pub fn open_state_file_for_update(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file (a FIFO, socket, device or directory)",
        ));
    }
    Ok(file)
}

/// The bytes, stat and hard-link count of the regular file at `path` below the worktree `root` now, read without
/// following any symlink and only if it held still while read (read-only; the trace works
/// backwards from it). `Ok(None)`: no such settled regular file of at most `max_bytes`.
pub fn read_settled_file(
    root: &std::path::Path,
    path: &RepoPath,
    max_bytes: u64,
) -> Result<Option<(Vec<u8>, FileStat, u64)>, VerbError> {
    // Only the tree walk is used, never the hash.
    let worktree = Worktree {
        root,
        object_hash: gix::hash::Kind::Sha1,
        seen: None,
    };
    worktree.read_settled_file(path, max_bytes)
}

/// If `name` is a temp file name this module makes (`.ckpt-<pid>-<16 lowercase hex>.tmp`), the
/// pid that made it. Exactly that shape: a user's file that merely looks similar (such as
/// `.ckpt-123-abc.tmp`) is the user's, and stays protected.
pub fn temp_file_owner(name: &[u8]) -> Option<u32> {
    let rest = std::str::from_utf8(name)
        .ok()?
        .strip_prefix(".ckpt-")?
        .strip_suffix(".tmp")?;
    let (pid, random) = rest.split_once('-')?;
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if random.len() != 16 || !random.bytes().all(lower_hex) {
        return None;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || pid.starts_with('0') {
        return None;
    }
    pid.parse().ok()
}

/// Ends the process `pid` if, and only if, it is a `ckpt ... watch run` daemon (its command line
/// says so): for `watch stop` when the daemon no longer answers. True if it was signalled.
pub fn end_watch_daemon(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let is_daemon = args.windows(2).any(|w| w == [&b"watch"[..], &b"run"[..]]);
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    is_daemon && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
}

/// Whether a process with this id exists and has not exited (read-only: signal 0). A zombie
/// (exited, not yet reaped by its parent, as when a harness kills ckpt and waits late) has
/// ended: it runs nothing and holds no file or lock.
pub fn process_is_alive(pid: u32) -> bool {
    let Some(raw) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    let exists = match rustix::process::test_kill_process(raw) {
        Ok(()) => true,
        Err(e) => e == Errno::PERM,
    };
    exists && !process_has_exited(pid)
}

/// Whether `/proc` shows the process `pid` as exited but not reaped (state `Z` or `X`, the
/// field after the parenthesised command name, which may itself hold `)`).
fn process_has_exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(end_of_name) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    matches!(stat.get(end_of_name + 2), Some(b'Z' | b'X'))
}

fn errno_text(errno: Errno) -> String {
    std::io::Error::from(errno).to_string()
}

fn worktree_error(path: &RepoPath, message: impl Into<String>) -> VerbError {
    VerbError::Worktree {
        path: path.display(),
        message: message.into(),
    }
}

/// 16 hex digits, random where the OS offers randomness, else from the clock.
fn random_hex() -> Vec<u8> {
    let mut random = [0u8; 8];
    let text = match getrandom::fill(&mut random) {
        Ok(()) => random.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        Err(_) => format!(
            "{:016x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        ),
    };
    text.into_bytes()
}

/// Process-unique temp names so concurrent restores never share one.
fn temp_name() -> Vec<u8> {
    let mut name = format!(".ckpt-{}-", std::process::id()).into_bytes();
    name.extend_from_slice(&random_hex());
    name.extend_from_slice(b".tmp");
    name
}

/// Read-only `lstat` of worktree paths relative to one open root directory, so each call walks
/// only the path's own components (the way git's relative lstat does). It never opens a file and
/// never follows a symlink at the last component; reachability through symlinked ancestors is
/// the caller's check.
pub struct WorktreeProbe {
    root: OwnedFd,
}

impl WorktreeProbe {
    /// Whether this process may read the file at `path`, judged with its effective ids as a
    /// snapshot's open would be: `status` must agree with what a snapshot skips.
    pub fn may_read(&self, path: &RepoPath) -> bool {
        use rustix::fs::{accessat, Access};
        !matches!(
            accessat(&self.root, path.as_bytes(), Access::READ_OK, AtFlags::EACCESS),
            Err(rustix::io::Errno::ACCESS)
        )
    }

    pub fn lstat(&self, path: &RepoPath) -> std::io::Result<PathStat> {
        let stat = rustix::fs::statat(&self.root, path.as_bytes(), AtFlags::SYMLINK_NOFOLLOW)?;
        let file_type = FileType::from_raw_mode(stat.st_mode);
        let kind = match file_type {
            FileType::RegularFile => PathKind::File,
            FileType::Symlink => PathKind::Symlink,
            FileType::Directory => PathKind::Directory,
            _ => PathKind::Special,
        };
        Ok(PathStat {
            kind,
            stat: file_stat(&stat),
            links: stat.st_nlink as u64,
        })
    }
}

/// A `stat` result in the form the stat cache keeps.
pub(super) fn file_stat(stat: &rustix::fs::Stat) -> FileStat {
    FileStat {
        size: stat.st_size as u64,
        mtime: (stat.st_mtime, stat.st_mtime_nsec as u32),
        ctime: (stat.st_ctime, stat.st_ctime_nsec as u32),
        ino: stat.st_ino,
        dev: stat.st_dev,
        mode: stat.st_mode,
    }
}

/// What worktree I/O needs from a vault (its root and object hash), free of the repository
/// handle so that many threads can use it at once.
#[derive(Clone, Copy)]
struct Worktree<'a> {
    root: &'a std::path::Path,
    object_hash: gix::hash::Kind,
    /// The stat each file to be removed had when the restore's evidence captured it, where
    /// known: a file whose stat has moved since (a `chmod`, `chown` or write) is left alone.
    seen: Option<&'a SeenStats>,
}

/// What the evidence of a restore saw of a file it may remove.
#[derive(Debug, Clone, Copy)]
pub struct SeenFile {
    /// Its stat as captured.
    pub stat: FileStat,
    /// It had other hard links: what happens to them (this restore removing one included)
    /// moves its ctime, which then proves nothing.
    pub linked: bool,
}

/// What the evidence of a restore saw at paths it may remove.
pub type SeenStats = HashMap<RepoPath, SeenFile>;

/// How many writes are staged at once before their fsyncs: each holds its temp file and its
/// directory open, so a chunk takes at most a quarter of what the open-file limit leaves after
/// a reserve for everything else (macOS gives a process 256 by default; 1,024 is common on
/// Linux), and never more than 256.
fn staged_writes() -> usize {
    const MOST: u64 = 256;
    const RESERVE: u64 = 64;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from((limit.saturating_sub(RESERVE) / 4).clamp(1, MOST)).unwrap_or(1)
}

/// Whether no path of `one` is a path of `other`, or an ancestor of one, or the other way round.
fn paths_apart(one: &[RestoreOp], other: &[RestoreOp]) -> bool {
    let clash = |these: &[RestoreOp], those: &[RestoreOp]| {
        let paths: std::collections::HashSet<&RepoPath> = these.iter().map(RestoreOp::path).collect();
        those
            .iter()
            .any(|op| paths.contains(op.path()) || op.path().ancestors().iter().any(|dir| paths.contains(dir)))
    };
    !clash(one, other) && !clash(other, one)
}

/// The directories that hold a restore's renames and removals, each synced once, as soon as
/// its last op has landed: not once per file, and beside the other ops' syncs rather than
/// after all of them (each sync waits on the disk, not on a core). Each file was synced
/// before its rename.
struct DirectorySyncs {
    ops_left: HashMap<Option<RepoPath>, std::sync::atomic::AtomicUsize>,
    failed: std::sync::Mutex<Vec<(Option<RepoPath>, Errno)>>,
}

impl DirectorySyncs {
    fn new(ops: &[RestoreOp]) -> Self {
        let mut counts: HashMap<Option<RepoPath>, usize> = HashMap::new();
        for op in ops {
            *counts.entry(op.path().parent()).or_default() += 1;
        }
        DirectorySyncs {
            ops_left: counts
                .into_iter()
                .map(|(dir, n)| (dir, std::sync::atomic::AtomicUsize::new(n)))
                .collect(),
            failed: Default::default(),
        }
    }

    /// `op` is done (or failed): syncs its directory if no other op in it is left.
    fn landed(&self, worktree: Worktree<'_>, op: &RestoreOp) {
        let dir = op.path().parent();
        let Some(left) = self.ops_left.get(&dir) else {
            return;
        };
        if left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) != 1 {
            return;
        }
        // A directory that is gone (a later op of this restore removed it, or someone else
        // did) holds nothing of this restore to sync; its removal is its parent's to sync.
        let fd = match &dir {
            None => worktree.open_root().ok(),
            Some(dir) => worktree.open_dir(dir).ok().flatten(),
        };
        let Some(fd) = fd else {
            return;
        };
        let synced = if crate::fault::failing("restore:directory-sync") {
            Err(Errno::IO)
        } else {
            rustix::fs::fsync(&fd)
        };
        match synced {
            // Filesystems that cannot sync a directory at all: nothing more can be done there.
            Ok(()) | Err(Errno::INVAL) | Err(Errno::NOTSUP) => {}
            Err(e) => self
                .failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((dir, e)),
        }
    }

    /// An op that succeeded in a directory whose sync failed did not reach the disk for sure:
    /// it is a failure, and says so.
    fn report_failures(self, ops: &[RestoreOp], results: &mut [Result<(), VerbError>]) {
        let failed = self
            .failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (dir, errno) in failed {
            for (op, result) in ops.iter().zip(results.iter_mut()) {
                if result.is_ok() && op.path().parent() == dir {
                    *result = Err(worktree_error(
                        op.path(),
                        format!(
                            "done, but its directory could not be synced to disk ({}); it may not survive a crash",
                            errno_text(errno)
                        ),
                    ));
                }
            }
        }
    }
}

/// Threads for a run of worktree writes, or of syncs: each one spends most of its time waiting
/// for an fsync, so a few per core. `None` if the pool cannot be made (the global pool is used then).
pub(in crate::verbs) fn io_pool(ops: usize) -> Option<rayon::ThreadPool> {
    const PER_CORE: usize = 4;
    const MAX: usize = 16;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores * PER_CORE).min(MAX).min(ops);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()
}

impl Vault {
    /// A probe for many `lstat` calls under this worktree's root.
    pub fn worktree_probe(&self) -> Result<WorktreeProbe, VerbError> {
        Ok(WorktreeProbe {
            root: self.worktree().open_root()?,
        })
    }

    fn worktree(&self) -> Worktree<'_> {
        Worktree {
            root: self.workdir(),
            object_hash: self.object_hash_kind(),
            seen: None,
        }
    }

    /// The first op of `ops` whose directory this process may not change (no write or search
    /// permission on the nearest directory that exists above its path), with why: found before
    /// anything is written, so a restore never stops half way on it, some files written and the
    /// rest failed. Read-only.
    pub fn unwritable_directory(&self, ops: &[RestoreOp]) -> Option<(RepoPath, String)> {
        use rustix::fs::{accessat, statat, Access, AtFlags, FileType};
        let root = self.worktree().open_root().ok()?;
        let mut judged: HashMap<Vec<u8>, bool> = HashMap::new();
        // A prune of an empty directory is best effort: one that cannot go stays, silently.
        for op in ops.iter().filter(|op| !matches!(op, RestoreOp::PruneEmptyDir { .. })) {
            let path = op.path();
            // The nearest existing directory above the path: what the op creates or changes in.
            let mut dir: Vec<u8> = path.parent().map(|p| p.as_bytes().to_vec()).unwrap_or_default();
            loop {
                let shown = if dir.is_empty() { b".".to_vec() } else { dir.clone() };
                let exists = statat(&root, shown.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
                if exists || dir.is_empty() {
                    let writable = *judged.entry(shown.clone()).or_insert_with(|| {
                        !matches!(
                            accessat(
                                &root,
                                shown.as_slice(),
                                Access::WRITE_OK | Access::EXEC_OK,
                                AtFlags::EACCESS
                            ),
                            Err(Errno::ACCESS) | Err(Errno::ROFS)
                        )
                    });
                    if !writable {
                        return Some((
                            path.clone(),
                            format!(
                                "the directory {} may not be changed by this user (no write permission)",
                                String::from_utf8_lossy(&shown)
                            ),
                        ));
                    }
                    break;
                }
                dir = match dir.iter().rposition(|b| *b == b'/') {
                    Some(cut) => dir[..cut].to_vec(),
                    None => Vec::new(),
                };
            }
        }
        None
    }

    /// Reads what is at `path` now, without following any symlink, and hashes it as a blob.
    pub fn read_worktree_item(&self, path: &RepoPath) -> Result<DiskItem, VerbError> {
        self.worktree().read_item(path)
    }

    /// Applies `ops` in order, calling `after_each(n)` once `n` ops are done (progress, fault
    /// injection). Each op succeeds or fails on its own; a failed op leaves its path as it was
    /// (or puts it back) and removes its temp file. Returns one result per op. Consecutive file
    /// removals, and consecutive writes, touch distinct paths and never each other's parents, so
    /// each such run is applied in parallel; directory removals and prunes keep their
    /// deepest-first order. A file is removed only while its stat is still the one `seen` has
    /// for it (where `seen` has one), so a `chmod` or `chown` since the evidence keeps it.
    pub fn restore_paths(
        &self,
        ops: &[RestoreOp],
        prestaged: Option<&Prestaged>,
        seen: Option<&SeenStats>,
        after_each: impl Fn(usize) + Sync,
    ) -> Vec<Result<(), VerbError>> {
        use rayon::prelude::*;
        let worktree = Worktree {
            seen,
            ..self.worktree()
        };
        let shared = self.repo_for_threads();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let directories = DirectorySyncs::new(ops);
        let finish = |op: &RestoreOp, result| {
            directories.landed(worktree, op);
            after_each(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
            result
        };
        let mut results = Vec::with_capacity(ops.len());
        let mut start = 0;
        while start < ops.len() {
            let parallel = |op: &RestoreOp| matches!(op, RestoreOp::Remove { .. } | RestoreOp::Write { .. });
            let run_from = |from: usize| {
                let kind = std::mem::discriminant(&ops[from]);
                from + ops[from..]
                    .iter()
                    .take_while(|op| std::mem::discriminant(*op) == kind)
                    .count()
            };
            let end = if parallel(&ops[start]) {
                let end = run_from(start);
                // The removals and the writes right after them go in one pass when no path of
                // one is, holds or lies below a path of the other: no write then needs what a
                // removal clears out of its way.
                match (&ops[start], ops.get(end)) {
                    (RestoreOp::Remove { .. }, Some(RestoreOp::Write { .. })) => {
                        let writes_end = run_from(end);
                        if paths_apart(&ops[start..end], &ops[end..writes_end]) {
                            writes_end
                        } else {
                            end
                        }
                    }
                    _ => end,
                }
            } else {
                start + 1
            };
            let run = &ops[start..end];
            if run.len() > 1 {
                let apply_all = || {
                    if !run.iter().any(|op| matches!(op, RestoreOp::Write { .. })) {
                        return run
                            .par_iter()
                            .map_init(
                                || shared.to_thread_local(),
                                |repo, op| finish(op, worktree.apply(op, repo, prestaged)),
                            )
                            .collect::<Vec<_>>();
                    }
                    // Every temp file of a chunk is written before any is synced (see
                    // `Worktree::stage`); a chunk bounds the files and directories held open.
                    let mut results = Vec::with_capacity(run.len());
                    for chunk in run.chunks(staged_writes()) {
                        let staged: Vec<Result<Staged, VerbError>> = chunk
                            .par_iter()
                            .map_init(
                                || shared.to_thread_local(),
                                |repo, op| worktree.stage(op, repo, prestaged),
                            )
                            .collect();
                        results.par_extend(chunk.par_iter().zip(staged).map(|(op, staged)| {
                            let landed = staged.and_then(|staged| match staged {
                                Staged::Done => Ok(()),
                                Staged::Write(write) => worktree.land(op, write),
                            });
                            finish(op, landed)
                        }));
                    }
                    results
                };
                // Each write waits on its own fsync: more writers than cores keep the disk busy
                // (the filesystem commits their syncs together). Without that pool, the cores'.
                match io_pool(run.len()) {
                    Some(pool) => results.extend(pool.install(apply_all)),
                    None => results.extend(apply_all()),
                }
            } else {
                results.extend(
                    run.iter()
                        .map(|op| finish(op, worktree.apply(op, self.repo_handle(), prestaged))),
                );
            }
            start = end;
        }
        directories.report_failures(ops, &mut results);
        results
    }

    /// Removes a temp file that a ckpt process which is no longer running left behind. Refuses
    /// any other name; `Ok(false)` if its process is still alive or it is already gone. With
    /// `restores_locked_out` the caller holds the workspace lock every restore holds while it
    /// writes, so the restore the name belongs to has ended whatever now runs under its pid.
    pub fn remove_stale_temp(&self, path: &RepoPath, restores_locked_out: bool) -> Result<bool, VerbError> {
        let worktree = self.worktree();
        let Some(pid) = temp_file_owner(Worktree::leaf(path)) else {
            return Err(worktree_error(path, "not a ckpt temp file; refusing to remove it"));
        };
        if !restores_locked_out && process_is_alive(pid) {
            return Ok(false);
        }
        let Some(parent) = worktree.open_parent(path, false)? else {
            return Ok(false);
        };
        match worktree.read_item_at(&parent, path)? {
            DiskItem::Entry(_) => {}
            DiskItem::Missing => return Ok(false),
            other => {
                return Err(worktree_error(
                    path,
                    format!("expected a leftover temp file, found {}", describe(&other)),
                ))
            }
        }
        rustix::fs::unlinkat(&parent, Worktree::leaf(path), AtFlags::empty())
            .map_err(|e| worktree_error(path, format!("cannot remove: {}", errno_text(e))))?;
        Ok(true)
    }

    /// Whether each of `expected`'s paths holds its item (or nothing, for `None`), read and
    /// hashed on every core; one answer per path, in order.
    pub fn verify_paths(&self, expected: &[(&RepoPath, Option<&TreeItem>)]) -> Vec<Result<bool, VerbError>> {
        use rayon::prelude::*;
        let worktree = self.worktree();
        expected
            .par_iter()
            .map(|(path, item)| Self::holds(worktree, path, *item))
            .collect()
    }

    fn holds(worktree: Worktree<'_>, path: &RepoPath, item: Option<&TreeItem>) -> Result<bool, VerbError> {
        let now = worktree.read_item(path)?;
        Ok(match item {
            Some(item) => now == DiskItem::Entry(*item),
            None => !matches!(now, DiskItem::Entry(_)),
        })
    }
}

/// What tells the directory at `root` apart from an earlier one at the same path: its inode
/// and, where the file system keeps one, its birth time (an inode is often reused at once for a
/// directory made where one was just removed). Not the device, which a container's overlay
/// may number anew at each start.
pub fn directory_identity(root: &std::path::Path) -> (String, Option<i64>) {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    match statx(CWD, root, AtFlags::empty(), StatxFlags::INO | StatxFlags::BTIME) {
        Ok(st) if st.stx_mask & StatxFlags::BTIME.bits() != 0 => (
            format!(
                "ino {} born {}.{:09}\n",
                st.stx_ino, st.stx_btime.tv_sec, st.stx_btime.tv_nsec
            ),
            Some(st.stx_btime.tv_sec),
        ),
        Ok(st) => (format!("ino {}\n", st.stx_ino), None),
        Err(_) => {
            let ino = std::fs::metadata(root)
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .unwrap_or(0);
            (format!("ino {ino}\n"), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_and_nothing_else() {
        let name = temp_name();
        assert_eq!(temp_file_owner(&name), Some(std::process::id()));
        assert_eq!(temp_file_owner(b".ckpt-12-0123456789abcdef.tmp"), Some(12));
        for other in [
            &b"notes.tmp"[..],
            b".ckpt-12.tmp",
            b".ckpt-x-ab.tmp",
            b".ckpt-12-zz.tmp",
            b".ckpt-12-ab.txt",
            b".ckpt-123-abc.tmp",
            b".ckpt-12-0123456789ABCDEF.tmp",
            b".ckpt-12-0123456789abcdef0.tmp",
            b".ckpt-+12-0123456789abcdef.tmp",
            b".ckpt-012-0123456789abcdef.tmp",
        ] {
            assert_eq!(temp_file_owner(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn a_parent_is_opened_only_through_real_directories() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), b"inside").unwrap();
        std::fs::write(root.join("file"), b"").unwrap();
        let outside = scratch.path().join("outside");
        std::fs::create_dir_all(outside.join("b")).unwrap();
        std::fs::write(outside.join("b/f"), b"outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink("a", root.join("inner-link")).unwrap();
        let worktree = Worktree {
            root: &root,
            object_hash: gix::hash::Kind::Sha1,
            seen: None,
        };
        let path = |p: &str| RepoPath::new(p.as_bytes().to_vec()).unwrap();
        let parent = worktree.open_parent(&path("a/b/f"), false).unwrap().unwrap();
        assert_eq!(
            worktree.read_item_at(&parent, &path("a/b/f")).unwrap(),
            worktree.read_item(&path("a/b/f")).unwrap()
        );
        assert!(matches!(
            worktree.read_item_at(&parent, &path("a/b/f")).unwrap(),
            DiskItem::Entry(TreeItem {
                kind: EntryKind::File,
                ..
            })
        ));
        // A symlink anywhere on the way, to outside the root or within it, and a file where a
        // directory should be, are refused by name; a missing directory is `None`.
        for refused in ["link/b/f", "inner-link/b/f", "a/../link/b/f", "file/f"] {
            let Ok(path) = RepoPath::new(refused.as_bytes().to_vec()) else {
                continue;
            };
            let error = worktree.open_parent(&path, false).unwrap_err().to_string();
            assert!(error.contains("symlink or not a directory"), "{refused}: {error}");
            assert!(
                worktree.open_parent(&path, true).is_err(),
                "{refused}: created through it"
            );
        }
        assert!(worktree.open_parent(&path("a/missing/f"), false).unwrap().is_none());
        assert!(worktree.open_parent(&path("a/new/deeper/f"), true).unwrap().is_some());
        assert!(root.join("a/new/deeper").is_dir());
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn removals_and_writes_are_apart_only_when_no_path_holds_another() {
        let item = TreeItem {
            kind: EntryKind::File,
            id: ObjectId(gix::ObjectId::null(gix::hash::Kind::Sha1)),
        };
        let path = |p: &str| RepoPath::new(p.as_bytes().to_vec()).unwrap();
        let remove = |p: &str| RestoreOp::Remove {
            path: path(p),
            expect: item,
        };
        let write = |p: &str| RestoreOp::Write {
            path: path(p),
            item,
            expect: None,
            mode: None,
        };
        assert!(paths_apart(
            &[remove("new/a"), remove("b")],
            &[write("src/a"), write("new-a")]
        ));
        // A file where the target has a directory, a directory where it has a file, the same path.
        assert!(!paths_apart(&[remove("a")], &[write("a/b")]));
        assert!(!paths_apart(&[remove("a/b/c")], &[write("a/b")]));
        assert!(!paths_apart(&[remove("x"), remove("a")], &[write("a")]));
        // Names that only start alike are apart ("a" and "ab", "a.txt").
        assert!(paths_apart(&[remove("a")], &[write("ab/c"), write("a.txt")]));
    }
}
