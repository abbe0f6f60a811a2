//! Worktree reads and writes confined to the worktree root: every path is walked one component at
//! a time with `openat(O_NOFOLLOW)`, so no read or write ever passes through a symlinked ancestor
//! or leaves the root. Writes are temp file + fsync + rename in the same directory. Before a path
//! is overwritten or removed, what is on disk must still match what the caller has evidence of;
//! anything else is refused for that path.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::types::{EntryKind, FileStat, ObjectId, PathKind, PathStat, RepoPath, TreeItem};
use super::vault::Vault;
use super::VerbError;

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
    /// Write `item` at `path`; `expect: None` means nothing may be there.
    Write {
        path: RepoPath,
        item: TreeItem,
        expect: Option<TreeItem>,
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

/// If `name` is a temp file name this module makes (`.ckpt-<pid>-<hex>.tmp`), the pid that made it.
pub fn temp_file_owner(name: &[u8]) -> Option<u32> {
    let rest = std::str::from_utf8(name)
        .ok()?
        .strip_prefix(".ckpt-")?
        .strip_suffix(".tmp")?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

fn process_is_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == Errno::PERM,
    }
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
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
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
        }
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
    /// deepest-first order.
    pub fn restore_paths(&self, ops: &[RestoreOp], after_each: impl Fn(usize) + Sync) -> Vec<Result<(), VerbError>> {
        use rayon::prelude::*;
        let worktree = self.worktree();
        let shared = self.repo_for_threads();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let finish = |result| {
            after_each(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
            result
        };
        let mut results = Vec::with_capacity(ops.len());
        let mut start = 0;
        while start < ops.len() {
            let parallel = |op: &RestoreOp| matches!(op, RestoreOp::Remove { .. } | RestoreOp::Write { .. });
            let same_kind = |op: &RestoreOp| std::mem::discriminant(op) == std::mem::discriminant(&ops[start]);
            let end = if parallel(&ops[start]) {
                start + ops[start..].iter().take_while(|op| same_kind(op)).count()
            } else {
                start + 1
            };
            let run = &ops[start..end];
            if run.len() > 1 {
                results.par_extend(
                    run.par_iter()
                        .map_init(|| shared.to_thread_local(), |repo, op| finish(worktree.apply(op, repo))),
                );
            } else {
                results.extend(run.iter().map(|op| finish(worktree.apply(op, self.repo_handle()))));
            }
            start = end;
        }
        // Each file was fsynced before its rename; the directories that hold the renames and
        // removals are synced once each, not once per file.
        let mut dirs: Vec<Option<RepoPath>> = ops.iter().map(|op| op.path().parent()).collect();
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            let fd = match &dir {
                None => worktree.open_root().ok(),
                Some(dir) => worktree.open_dir(dir).ok().flatten(),
            };
            if let Some(fd) = fd {
                rustix::fs::fsync(&fd).ok();
            }
        }
        results
    }

    /// Removes a temp file that a ckpt process which is no longer running left behind. Refuses
    /// any other name; `Ok(false)` if its process is still alive or it is already gone.
    pub fn remove_stale_temp(&self, path: &RepoPath) -> Result<bool, VerbError> {
        let worktree = self.worktree();
        let Some(pid) = temp_file_owner(Worktree::leaf(path)) else {
            return Err(worktree_error(path, "not a ckpt temp file; refusing to remove it"));
        };
        if process_is_alive(pid) {
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

    /// Checks that `path` holds `item` (or nothing, for `None`).
    pub fn verify_path(&self, path: &RepoPath, item: Option<&TreeItem>) -> Result<bool, VerbError> {
        let now = self.read_worktree_item(path)?;
        Ok(match item {
            Some(item) => now == DiskItem::Entry(*item),
            None => !matches!(now, DiskItem::Entry(_)),
        })
    }
}

impl Worktree<'_> {
    fn hash_blob(&self, bytes: &[u8]) -> Result<ObjectId, VerbError> {
        gix::objs::compute_hash(self.object_hash, gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))
    }

    fn open_root(&self) -> Result<OwnedFd, VerbError> {
        rustix::fs::open(
            self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| VerbError::Worktree {
            path: self.root.display().to_string(),
            message: format!("cannot open the worktree root: {}", errno_text(e)),
        })
    }

    /// Opens the directory that holds `path`, refusing symlinked or non-directory ancestors.
    /// With `create`, missing ancestors are made. `Ok(None)`: an ancestor is missing.
    fn open_parent(&self, path: &RepoPath, create: bool) -> Result<Option<OwnedFd>, VerbError> {
        let mut dir = self.open_root()?;
        let components: Vec<&[u8]> = path.components().collect();
        let mut walked = Vec::new();
        for component in &components[..components.len() - 1] {
            if !walked.is_empty() {
                walked.push(b'/');
            }
            walked.extend_from_slice(component);
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = match rustix::fs::openat(&dir, *component, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir, *component, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => {
                            return Err(worktree_error(
                                path,
                                format!(
                                    "cannot create directory {}: {}",
                                    String::from_utf8_lossy(&walked),
                                    errno_text(e)
                                ),
                            ))
                        }
                    }
                    rustix::fs::openat(&dir, *component, flags, Mode::empty()).map_err(|e| {
                        worktree_error(
                            path,
                            format!("cannot open {}: {}", String::from_utf8_lossy(&walked), errno_text(e)),
                        )
                    })?
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(worktree_error(
                        path,
                        format!(
                            "ancestor {} is a symlink or not a directory; refusing to go through it",
                            String::from_utf8_lossy(&walked)
                        ),
                    ))
                }
                Err(e) => {
                    return Err(worktree_error(
                        path,
                        format!("cannot open {}: {}", String::from_utf8_lossy(&walked), errno_text(e)),
                    ))
                }
            };
            dir = next;
        }
        Ok(Some(dir))
    }

    fn leaf(path: &RepoPath) -> &[u8] {
        path.components().last().unwrap_or_default()
    }

    /// Reads what is at `path` now, without following any symlink, and hashes it as a blob.
    fn read_item(&self, path: &RepoPath) -> Result<DiskItem, VerbError> {
        let parent = match self.open_parent(path, false) {
            Ok(Some(parent)) => parent,
            Ok(None) => return Ok(DiskItem::Missing),
            Err(VerbError::Worktree { message, .. }) if message.contains("symlink or not a directory") => {
                return Ok(DiskItem::Unreachable(message))
            }
            Err(e) => return Err(e),
        };
        self.read_item_at(&parent, path)
    }

    fn read_item_at(&self, parent: &OwnedFd, path: &RepoPath) -> Result<DiskItem, VerbError> {
        self.read_named_at(parent, Self::leaf(path), path)
    }

    /// What the entry `leaf` of `parent` holds; `path` names it in errors.
    fn read_named_at(&self, parent: &OwnedFd, leaf: &[u8], path: &RepoPath) -> Result<DiskItem, VerbError> {
        let stat = match rustix::fs::statat(parent, leaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(DiskItem::Missing),
            Err(e) => return Err(worktree_error(path, format!("cannot stat: {}", errno_text(e)))),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Ok(DiskItem::Directory),
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(parent, leaf, Vec::new())
                    .map_err(|e| worktree_error(path, format!("cannot read symlink: {}", errno_text(e))))?;
                let id = self.hash_blob(target.as_bytes())?;
                Ok(DiskItem::Entry(TreeItem {
                    kind: EntryKind::Symlink,
                    id,
                }))
            }
            FileType::RegularFile => {
                let fd = rustix::fs::openat(
                    parent,
                    leaf,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| worktree_error(path, format!("cannot open for reading: {}", errno_text(e))))?;
                let mut content = Vec::new();
                std::fs::File::from(fd)
                    .read_to_end(&mut content)
                    .map_err(|e| worktree_error(path, format!("cannot read: {e}")))?;
                let kind = if stat.st_mode & 0o100 != 0 {
                    EntryKind::Executable
                } else {
                    EntryKind::File
                };
                Ok(DiskItem::Entry(TreeItem {
                    kind,
                    id: self.hash_blob(&content)?,
                }))
            }
            _ => Ok(DiskItem::Special),
        }
    }

    /// Opens a directory of the worktree without following symlinks; `None` if it is gone.
    fn open_dir(&self, dir: &RepoPath) -> Result<Option<OwnedFd>, VerbError> {
        let Some(parent) = self.open_parent(dir, false)? else {
            return Ok(None);
        };
        match rustix::fs::openat(
            &parent,
            Self::leaf(dir),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(_) => Ok(None),
        }
    }

    fn apply(&self, op: &RestoreOp, repo: &gix::Repository) -> Result<(), VerbError> {
        let path = op.path();
        let create = matches!(op, RestoreOp::Write { .. });
        let Some(parent) = self.open_parent(path, create)? else {
            return match op {
                RestoreOp::Write { .. } => Err(worktree_error(path, "parent directory vanished")),
                RestoreOp::Remove { .. } => Err(worktree_error(path, "expected a file here, found nothing")),
                RestoreOp::RemoveEmptyDir { .. } | RestoreOp::PruneEmptyDir { .. } => Ok(()),
            };
        };
        let leaf = Self::leaf(path);
        let now = self.read_item_at(&parent, path)?;
        match op {
            RestoreOp::Remove { expect, .. } => {
                if now != DiskItem::Entry(*expect) {
                    return Err(changed_since_guard(path, &now));
                }
                self.remove_item(&parent, path, expect)
            }
            RestoreOp::RemoveEmptyDir { .. } => match now {
                DiskItem::Missing => Ok(()),
                DiskItem::Directory => rustix::fs::unlinkat(&parent, leaf, AtFlags::REMOVEDIR).map_err(|e| {
                    let why = if e == Errno::NOTEMPTY {
                        "directory still holds files ckpt has no evidence about (ignored or unprotected); left in place"
                            .to_owned()
                    } else {
                        format!("cannot remove directory: {}", errno_text(e))
                    };
                    worktree_error(path, why)
                }),
                other => Err(changed_since_guard(path, &other)),
            },
            RestoreOp::PruneEmptyDir { .. } => match now {
                DiskItem::Directory => match rustix::fs::unlinkat(&parent, leaf, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => Ok(()),
                    Err(e) => Err(worktree_error(
                        path,
                        format!("cannot remove empty directory: {}", errno_text(e)),
                    )),
                },
                _ => Ok(()),
            },
            RestoreOp::Write { item, expect, .. } => {
                let expected_now = match expect {
                    Some(expect) => DiskItem::Entry(*expect),
                    None => DiskItem::Missing,
                };
                if now != expected_now {
                    return Err(changed_since_guard(path, &now));
                }
                // The caller verifies every written path once the whole batch has landed.
                self.write_item(&parent, path, item, expect.as_ref(), repo)
            }
        }
    }

    /// Writes `item` beside `path` and swaps it in. The check that what it replaces is still
    /// `expect` happens after the swap, on the displaced file itself (`RENAME_EXCHANGE`), so a
    /// write that lands at any moment before the swap is found and swapped back; a path that
    /// must be empty is claimed with `RENAME_NOREPLACE`. Where the filesystem has neither, the
    /// check runs again immediately before a plain rename.
    fn write_item(
        &self,
        parent: &OwnedFd,
        path: &RepoPath,
        item: &TreeItem,
        expect: Option<&TreeItem>,
        repo: &gix::Repository,
    ) -> Result<(), VerbError> {
        let content = repo
            .find_blob(item.id.0)
            .map_err(|e| super::vault::lookup_error(repo, &item.id, "blob", e))?
            .take_data();
        let leaf = Self::leaf(path);
        // Permissions follow the file being replaced (never wider than what the user had).
        let replaced_mode = match rustix::fs::statat(parent, leaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => Some(stat.st_mode & 0o7777),
            _ => None,
        };
        let temp = temp_name();
        let created = match item.kind {
            EntryKind::Symlink => rustix::fs::symlinkat(content.as_slice(), parent, temp.as_slice())
                .map_err(|e| worktree_error(path, format!("cannot create symlink: {}", errno_text(e)))),
            EntryKind::File | EntryKind::Executable => {
                self.write_temp_file(parent, &temp, &content, item.kind, replaced_mode, path)
            }
            EntryKind::Gitlink => Err(worktree_error(path, "submodule pointers are never restored")),
        };
        created?;
        crate::fault::pause("restore:before-replace");
        let discard_temp = || {
            rustix::fs::unlinkat(parent, temp.as_slice(), AtFlags::empty()).ok();
        };
        let Some(expect) = expect else {
            return match rustix::fs::renameat_with(parent, temp.as_slice(), parent, leaf, RenameFlags::NOREPLACE) {
                Ok(()) => Ok(()),
                Err(Errno::EXIST) => {
                    discard_temp();
                    Err(worktree_error(
                        path,
                        "created on disk after the guard checkpoint was taken; left untouched",
                    ))
                }
                Err(e) if exchange_unsupported(e) => {
                    let now = self.read_item_at(parent, path)?;
                    if now != DiskItem::Missing {
                        discard_temp();
                        return Err(changed_since_guard(path, &now));
                    }
                    self.rename_into_place(parent, &temp, path)
                }
                Err(e) => {
                    discard_temp();
                    Err(cannot_move_into_place(path, e))
                }
            };
        };
        match rustix::fs::renameat_with(parent, temp.as_slice(), parent, leaf, RenameFlags::EXCHANGE) {
            Ok(()) => {}
            Err(e) if exchange_unsupported(e) => {
                let now = self.read_item_at(parent, path)?;
                if now != DiskItem::Entry(*expect) {
                    discard_temp();
                    return Err(changed_since_guard(path, &now));
                }
                return self.rename_into_place(parent, &temp, path);
            }
            Err(Errno::NOENT) => {
                discard_temp();
                return Err(worktree_error(
                    path,
                    "removed from disk after the guard checkpoint was taken; left as it is",
                ));
            }
            Err(e) => {
                discard_temp();
                return Err(cannot_move_into_place(path, e));
            }
        }
        // The new content is in place; `temp` now names what it displaced. What cannot be read
        // is not evidence: it is swapped back like a change.
        let displaced = self
            .read_settled_at(parent, &temp, path)
            .unwrap_or_else(|e| DiskItem::Unreachable(e.to_string()));
        if displaced == DiskItem::Entry(*expect) {
            rustix::fs::unlinkat(parent, temp.as_slice(), AtFlags::empty()).map_err(|e| {
                worktree_error(
                    path,
                    format!(
                        "restored, but the replaced content is still at {}: {}",
                        String::from_utf8_lossy(&temp),
                        errno_text(e)
                    ),
                )
            })?;
            return Ok(());
        }
        // Someone wrote the file after the guard saw it: give it back its place.
        if let Err(e) = rustix::fs::renameat_with(parent, temp.as_slice(), parent, leaf, RenameFlags::EXCHANGE) {
            return Err(worktree_error(
                path,
                format!(
                    "changed on disk during the restore; that content is kept at {} (swapping it back failed: {})",
                    self.keep_aside(parent, &temp, path),
                    errno_text(e)
                ),
            ));
        }
        // `temp` holds ckpt's content again, unless a writer reached it by name meanwhile.
        let ours = self
            .read_settled_at(parent, &temp, path)
            .unwrap_or_else(|e| DiskItem::Unreachable(e.to_string()));
        let leftover = if ours == DiskItem::Entry(*item) {
            rustix::fs::unlinkat(parent, temp.as_slice(), AtFlags::empty()).ok();
            String::new()
        } else {
            format!(
                "; content written to it during the swap is kept at {}",
                self.keep_aside(parent, &temp, path)
            )
        };
        Err(worktree_error(
            path,
            format!(
                "changed on disk during the restore (now {}); the new content is kept, not overwritten{leftover}",
                describe(&displaced)
            ),
        ))
    }

    /// Removes the file at `path` if it is still `expect`: it is first moved aside (atomically),
    /// then checked, so a write that lands before the move is found and the file put back.
    fn remove_item(&self, parent: &OwnedFd, path: &RepoPath, expect: &TreeItem) -> Result<(), VerbError> {
        let leaf = Self::leaf(path);
        let aside = temp_name();
        match rustix::fs::renameat_with(parent, leaf, parent, aside.as_slice(), RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Err(worktree_error(path, "expected a file here, found nothing")),
            Err(e) if exchange_unsupported(e) => {
                let now = self.read_item_at(parent, path)?;
                if now != DiskItem::Entry(*expect) {
                    return Err(changed_since_guard(path, &now));
                }
                return rustix::fs::unlinkat(parent, leaf, AtFlags::empty())
                    .map_err(|e| worktree_error(path, format!("cannot remove: {}", errno_text(e))));
            }
            Err(e) => return Err(worktree_error(path, format!("cannot remove: {}", errno_text(e)))),
        }
        let moved = self
            .read_settled_at(parent, &aside, path)
            .unwrap_or_else(|e| DiskItem::Unreachable(e.to_string()));
        if moved == DiskItem::Entry(*expect) {
            return rustix::fs::unlinkat(parent, aside.as_slice(), AtFlags::empty())
                .map_err(|e| worktree_error(path, format!("cannot remove: {}", errno_text(e))));
        }
        let kept = match rustix::fs::renameat_with(parent, aside.as_slice(), parent, leaf, RenameFlags::NOREPLACE) {
            Ok(()) => String::new(),
            Err(_) => format!(", kept at {}", self.keep_aside(parent, &aside, path)),
        };
        Err(worktree_error(
            path,
            format!(
                "changed on disk during the restore (now {}); not removed{kept}",
                describe(&moved)
            ),
        ))
    }

    /// Gives user content that had to be moved to a temp name a name of its own beside `path`
    /// (`<name>.ckpt-kept-<hex>`), which no cleanup ever treats as a temp file; returns the
    /// name it now has, for the report.
    fn keep_aside(&self, parent: &OwnedFd, temp: &[u8], path: &RepoPath) -> String {
        let mut kept = Self::leaf(path).to_vec();
        kept.extend_from_slice(b".ckpt-kept-");
        kept.extend_from_slice(&random_hex());
        let name = match rustix::fs::renameat_with(parent, temp, parent, kept.as_slice(), RenameFlags::NOREPLACE) {
            Ok(()) => kept,
            Err(_) => temp.to_vec(),
        };
        match path.parent() {
            Some(dir) => format!("{}/{}", dir.display(), String::from_utf8_lossy(&name)),
            None => String::from_utf8_lossy(&name).into_owned(),
        }
    }

    fn rename_into_place(&self, parent: &OwnedFd, temp: &[u8], path: &RepoPath) -> Result<(), VerbError> {
        rustix::fs::renameat(parent, temp, parent, Self::leaf(path)).map_err(|e| {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
            cannot_move_into_place(path, e)
        })
    }

    /// Like [`Self::read_item_at`] for the entry `name` in `parent`, but a regular file counts
    /// only if it held still while it was hashed (same stat before and after); otherwise it is
    /// reported as content that matches nothing.
    fn read_settled_at(&self, parent: &OwnedFd, name: &[u8], path: &RepoPath) -> Result<DiskItem, VerbError> {
        let before = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let item = self.read_named_at(parent, name, path)?;
        let after = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let same = match (&before, &after) {
            (Some(a), Some(b)) => {
                a.st_ino == b.st_ino
                    && a.st_size == b.st_size
                    && (a.st_mtime, a.st_mtime_nsec) == (b.st_mtime, b.st_mtime_nsec)
                    && (a.st_ctime, a.st_ctime_nsec) == (b.st_ctime, b.st_ctime_nsec)
            }
            (None, None) => true,
            _ => false,
        };
        Ok(if same {
            item
        } else {
            DiskItem::Unreachable("changing".into())
        })
    }

    /// Writes and fsyncs a temp file. With `replaced_mode` (the permissions of the file it will
    /// replace) the file gets those permissions, with only the execute bits changed to match
    /// `kind`; it is created owner-only so it is never more readable than that while written.
    /// Without, it gets git's defaults (0666/0777 less the umask), as a checkout would.
    fn write_temp_file(
        &self,
        parent: &OwnedFd,
        temp: &[u8],
        content: &[u8],
        kind: EntryKind,
        replaced_mode: Option<u32>,
        path: &RepoPath,
    ) -> Result<(), VerbError> {
        let mode = match replaced_mode {
            Some(_) => 0o600,
            None if kind == EntryKind::Executable => 0o777,
            None => 0o666,
        };
        let fd = rustix::fs::openat(
            parent,
            temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| worktree_error(path, format!("cannot create a temp file beside it: {}", errno_text(e))))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(content).and_then(|()| file.sync_all());
        if let Err(e) = written {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
            return Err(worktree_error(path, format!("cannot write content: {e}")));
        }
        if let Some(replaced) = replaced_mode {
            let wanted = if kind == EntryKind::Executable {
                // Execute wherever read is allowed, as git's 0755 is to 0644.
                replaced | ((replaced & 0o444) >> 2) | 0o100
            } else {
                replaced & !0o111
            };
            if let Err(e) = rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(wanted)) {
                rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
                return Err(worktree_error(
                    path,
                    format!("cannot set permissions: {}", errno_text(e)),
                ));
            }
        } else if kind == EntryKind::Executable {
            // The umask may have dropped the owner's exec bit; git tracks exactly that bit.
            let stat = rustix::fs::fstat(file.as_fd()).map_err(|e| worktree_error(path, errno_text(e)))?;
            if stat.st_mode & 0o100 == 0 {
                rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode((stat.st_mode & 0o777) | 0o100)).ok();
            }
        }
        Ok(())
    }
}

fn describe(item: &DiskItem) -> String {
    match item {
        DiskItem::Missing => "nothing".into(),
        DiskItem::Directory => "a directory".into(),
        DiskItem::Entry(entry) => format!("a {} with content {}", entry.kind.label(), entry.id.short(8)),
        DiskItem::Special => "a special file".into(),
        DiskItem::Unreachable(why) => why.clone(),
    }
}

/// The filesystem (or kernel) offers no `renameat2` flags; the caller falls back to checking
/// right before a plain rename.
fn exchange_unsupported(errno: Errno) -> bool {
    matches!(errno, Errno::INVAL | Errno::NOSYS | Errno::NOTSUP)
}

fn cannot_move_into_place(path: &RepoPath, errno: Errno) -> VerbError {
    worktree_error(
        path,
        format!("cannot move the new content into place: {}", errno_text(errno)),
    )
}

fn changed_since_guard(path: &RepoPath, now: &DiskItem) -> VerbError {
    worktree_error(
        path,
        format!(
            "changed on disk after the guard checkpoint was taken (now {}); left untouched",
            describe(now)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_and_nothing_else() {
        let name = temp_name();
        assert_eq!(temp_file_owner(&name), Some(std::process::id()));
        for other in [
            &b"notes.tmp"[..],
            b".ckpt-12.tmp",
            b".ckpt-x-ab.tmp",
            b".ckpt-12-zz.tmp",
            b".ckpt-12-ab.txt",
        ] {
            assert_eq!(temp_file_owner(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
