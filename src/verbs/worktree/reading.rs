//! Reading the worktree below its root fd: parents opened refusing every symlink on the way
//! (in one call where the kernel can, else one component at a time with `O_NOFOLLOW`), entries
//! read as what git would store for them, and "settled" reads that count a file only if it held
//! still while it was hashed.

use super::*;

/// The directory `dir` (a relative path) below `root`, opened in one call that refuses a
/// symlink at every component, and anything but a directory at the last (Linux's `openat2`);
/// `None` on any error, or where the call is not available: the caller then walks component
/// by component, which makes what is missing and says what is wrong. A path walked this way
/// meets exactly the conditions of that walk, at the cost of one call instead of two a level.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_beneath(root: &OwnedFd, dir: &[u8]) -> Option<OwnedFd> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    let resolve = rustix::fs::ResolveFlags::BENEATH
        | rustix::fs::ResolveFlags::NO_SYMLINKS
        | rustix::fs::ResolveFlags::NO_MAGICLINKS;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat2(root, dir, flags, Mode::empty(), resolve) {
        Ok(fd) => Some(fd),
        // Kernels before 5.6, or a sandbox that filters the call.
        Err(Errno::NOSYS | Errno::PERM | Errno::INVAL | Errno::TOOBIG) => {
            UNAVAILABLE.store(true, Ordering::Relaxed);
            None
        }
        Err(_) => None,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_beneath(_root: &OwnedFd, _dir: &[u8]) -> Option<OwnedFd> {
    None
}

impl Worktree<'_> {
    pub(super) fn hash_blob(&self, bytes: &[u8]) -> Result<ObjectId, VerbError> {
        gix::objs::compute_hash(self.object_hash, gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))
    }

    pub(super) fn open_root(&self) -> Result<OwnedFd, VerbError> {
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
    pub(super) fn open_parent(&self, path: &RepoPath, create: bool) -> Result<Option<OwnedFd>, VerbError> {
        let mut dir = self.open_root()?;
        let bytes = path.as_bytes();
        if let Some(slash) = bytes.iter().rposition(|b| *b == b'/') {
            if let Some(parent) = open_beneath(&dir, &bytes[..slash]) {
                return Ok(Some(parent));
            }
        }
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
                        // The new directory's own entry is synced here: a restore syncs only
                        // the directories that hold its ops.
                        Ok(()) => match rustix::fs::fsync(&dir) {
                            Ok(()) | Err(Errno::INVAL) | Err(Errno::NOTSUP) => {}
                            Err(e) => {
                                return Err(worktree_error(
                                    path,
                                    format!(
                                        "created directory {}, but could not sync its parent to disk: {}",
                                        String::from_utf8_lossy(&walked),
                                        errno_text(e)
                                    ),
                                ))
                            }
                        },
                        Err(Errno::EXIST) => {}
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

    pub(super) fn leaf(path: &RepoPath) -> &[u8] {
        path.components().last().unwrap_or_default()
    }

    /// Reads what is at `path` now, without following any symlink, and hashes it as a blob.
    pub(super) fn read_item(&self, path: &RepoPath) -> Result<DiskItem, VerbError> {
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

    pub(super) fn read_item_at(&self, parent: &OwnedFd, path: &RepoPath) -> Result<DiskItem, VerbError> {
        self.read_named_at(parent, Self::leaf(path), path)
    }

    /// What the entry `leaf` of `parent` holds; `path` names it in errors.
    pub(super) fn read_named_at(&self, parent: &OwnedFd, leaf: &[u8], path: &RepoPath) -> Result<DiskItem, VerbError> {
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

    /// The bytes, stat and hard-link count of the regular file at `path`, read without following any symlink
    /// (ancestors included) and only if it held still while read and holds at most `max_bytes`;
    /// `Ok(None)` for anything else (missing, a directory, a symlink, reached through one, a
    /// special file, larger, or changing).
    pub(super) fn read_settled_file(
        &self,
        path: &RepoPath,
        max_bytes: u64,
    ) -> Result<Option<(Vec<u8>, FileStat, u64)>, VerbError> {
        let parent = match self.open_parent(path, false) {
            Ok(Some(parent)) => parent,
            Ok(None) => return Ok(None),
            Err(VerbError::Worktree { message, .. }) if message.contains("symlink or not a directory") => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let leaf = Self::leaf(path);
        let fd = match rustix::fs::openat(
            &parent,
            leaf,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP | Errno::ISDIR | Errno::NXIO) => return Ok(None),
            Err(e) => {
                return Err(worktree_error(
                    path,
                    format!("cannot open for reading: {}", errno_text(e)),
                ))
            }
        };
        let stat_of = |fd: &OwnedFd| {
            rustix::fs::fstat(fd).map_err(|e| worktree_error(path, format!("cannot stat: {}", errno_text(e))))
        };
        let before = stat_of(&fd)?;
        if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile || before.st_size as u64 > max_bytes {
            return Ok(None);
        }
        let mut file = std::fs::File::from(fd);
        let mut content = Vec::new();
        (&mut file)
            .take(max_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| worktree_error(path, format!("cannot read: {e}")))?;
        let after =
            rustix::fs::fstat(&file).map_err(|e| worktree_error(path, format!("cannot stat: {}", errno_text(e))))?;
        let still = content.len() as u64 == before.st_size as u64
            && file_stat(&before) == file_stat(&after)
            // A path swapped for another file while it was read is not the file read.
            && rustix::fs::statat(&parent, leaf, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|now| (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino));
        Ok(still.then(|| (content, file_stat(&after), after.st_nlink as u64)))
    }

    /// Opens a directory of the worktree without following symlinks; `None` if it is gone.
    pub(super) fn open_dir(&self, dir: &RepoPath) -> Result<Option<OwnedFd>, VerbError> {
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

    /// Like [`Self::read_item_at`] for the entry `name` in `parent`, but a regular file counts
    /// only if it held still while it was hashed (same stat before and after); otherwise it is
    /// reported as content that matches nothing.
    pub(super) fn read_settled_at(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        path: &RepoPath,
    ) -> Result<DiskItem, VerbError> {
        // A file with other hard links has its ctime moved by whatever happens to them (this
        // restore's own swaps and removals of a sibling name included): a read that saw it
        // move is taken again, a few times, before the file counts as changing.
        const READS: usize = 3;
        for _ in 0..READS {
            let before = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
            let item = self.read_named_at(parent, name, path)?;
            let after = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
            let same = match (&before, &after) {
                (Some(a), Some(b)) => {
                    // With other names, the ctime moves with every sibling swapped or removed,
                    // as long as a restore of many of them runs: only a write (mtime, size)
                    // counts then.
                    let linked = a.st_nlink > 1 || b.st_nlink > 1;
                    a.st_ino == b.st_ino
                        && a.st_size == b.st_size
                        && (a.st_mtime, a.st_mtime_nsec) == (b.st_mtime, b.st_mtime_nsec)
                        && (linked || (a.st_ctime, a.st_ctime_nsec) == (b.st_ctime, b.st_ctime_nsec))
                }
                (None, None) => true,
                _ => false,
            };
            if same {
                return Ok(item);
            }
        }
        Ok(DiskItem::Unreachable("changing".into()))
    }
}
