//! Writing the worktree: one restore operation at a time, each checked against the guard's
//! evidence before and after it lands (temp file + fsync + exchange in the same directory), and
//! what had to move kept under a visible name rather than lost. Never through a symlink.

use super::*;

/// What a write takes from the regular file it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Replaced {
    /// Permission bits (with set-id and sticky bits).
    pub(super) mode: u32,
    /// Owner and group, given to the new file only where ckpt runs as root.
    pub(super) owner: (u32, u32),
}

/// A write op's first half, done: its new content sits in a temp file beside its path, written
/// but not yet synced (see [`Worktree::stage`]).
pub(super) struct StagedWrite {
    parent: OwnedFd,
    temp: Vec<u8>,
    /// The temp file, kept open for its fsync; `None` when there is nothing of its own to
    /// sync: a symlink (its directory is synced with the others), or content synced where it
    /// was staged.
    file: Option<std::fs::File>,
    /// The regular file it replaces as it was when the temp file took its permissions; the
    /// file the swap displaces must still have them, or a `chmod` made since would be undone.
    replaced: Option<Replaced>,
}

/// What [`Worktree::stage`] did with an op.
pub(super) enum Staged {
    /// The op is complete (every op but a write is done in one step).
    Done,
    /// A write, waiting for [`Worktree::land`].
    Write(StagedWrite),
}

impl Worktree<'_> {
    /// Applies `op` in one go: [`Self::stage`], then [`Self::land`].
    pub(super) fn apply(
        &self,
        op: &RestoreOp,
        repo: &gix::Repository,
        prestaged: Option<&Prestaged>,
    ) -> Result<(), VerbError> {
        match self.stage(op, repo, prestaged)? {
            Staged::Done => Ok(()),
            Staged::Write(staged) => self.land(op, staged),
        }
    }

    /// Does all of `op` but a write's fsync and swap into place. Writes are split so that a
    /// batch can write every temp file before it syncs any: the filesystem then commits many
    /// files' data together instead of one journal commit per file, which is much cheaper. Each
    /// file is still synced before it is renamed into place.
    /// A write whose content `prestaged` holds moves that file beside its path instead of
    /// writing one there.
    pub(super) fn stage(
        &self,
        op: &RestoreOp,
        repo: &gix::Repository,
        prestaged: Option<&Prestaged>,
    ) -> Result<Staged, VerbError> {
        let path = op.path();
        let create = matches!(op, RestoreOp::Write { .. });
        let Some(parent) = self.open_parent(path, create)? else {
            return match op {
                RestoreOp::Write { .. } => Err(worktree_error(path, "parent directory vanished")),
                RestoreOp::Remove { .. } => Err(worktree_error(path, "expected a file here, found nothing")),
                RestoreOp::RemoveEmptyDir { .. } | RestoreOp::PruneEmptyDir { .. } => Ok(Staged::Done),
            };
        };
        let leaf = Self::leaf(path);
        let now = self.read_item_at(&parent, path)?;
        match op {
            RestoreOp::Remove { expect, .. } => {
                if now != DiskItem::Entry(*expect) {
                    return Err(changed_since_guard(path, &now));
                }
                self.remove_item(&parent, path, expect).map(|()| Staged::Done)
            }
            RestoreOp::RemoveEmptyDir { .. } => match now {
                DiskItem::Missing => Ok(Staged::Done),
                DiskItem::Directory => rustix::fs::unlinkat(&parent, leaf, AtFlags::REMOVEDIR).map(|()| Staged::Done).map_err(|e| {
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
                    Ok(()) | Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => Ok(Staged::Done),
                    Err(e) => Err(worktree_error(
                        path,
                        format!("cannot remove empty directory: {}", errno_text(e)),
                    )),
                },
                _ => Ok(Staged::Done),
            },
            RestoreOp::Write { item, expect, mode, .. } => {
                let expected_now = match expect {
                    Some(expect) => DiskItem::Entry(*expect),
                    None => DiskItem::Missing,
                };
                let mut now = now;
                if expected_now == DiskItem::Missing && now == DiskItem::Directory {
                    // No checkpoint holds empty directories (git trees cannot), so the guard
                    // saw nothing here: one that holds only empty directories holds no data,
                    // and goes (an interrupted restore leaves such directories behind).
                    remove_empty_directory(&parent, leaf, path)?;
                    now = DiskItem::Missing;
                }
                if now != expected_now {
                    return Err(changed_since_guard(path, &now));
                }
                // A file made anew with the narrow bits its checkpoint kept is written here with
                // them; one staged ahead got a new file's default bits, so it is not taken.
                let narrow = mode.filter(|_| Self::replaced_file(&parent, path).is_none());
                let staged = match narrow {
                    Some(_) => None,
                    None => prestaged.and_then(|prestaged| prestaged.take(path, item)),
                };
                if let Some((temp, replaced)) =
                    staged.and_then(|(dir, file)| self.adopt_staged(dir, file, &parent, path))
                {
                    // Synced where it was staged: nothing left to sync but its directory.
                    return Ok(Staged::Write(StagedWrite {
                        parent,
                        temp,
                        file: None,
                        replaced,
                    }));
                }
                self.stage_write(parent, path, item, narrow, repo).map(Staged::Write)
            }
        }
    }

    /// The second half of a write op that [`Self::stage`] began: syncs the temp file and swaps
    /// it in. The caller verifies every written path once the whole batch has landed.
    pub(super) fn land(&self, op: &RestoreOp, staged: StagedWrite) -> Result<(), VerbError> {
        let RestoreOp::Write { path, item, expect, .. } = op else {
            return Err(worktree_error(op.path(), "only a write is staged"));
        };
        let StagedWrite {
            parent,
            temp,
            file,
            replaced,
        } = staged;
        if let Some(file) = file {
            if let Err(e) = file.sync_all() {
                rustix::fs::unlinkat(&parent, temp.as_slice(), AtFlags::empty()).ok();
                return Err(worktree_error(path, format!("cannot write content: {e}")));
            }
        }
        self.swap_in(&parent, &temp, path, item, expect.as_ref(), replaced)
    }

    /// Creates `item`'s content in a temp file beside `path` (not yet synced).
    fn stage_write(
        &self,
        parent: OwnedFd,
        path: &RepoPath,
        item: &TreeItem,
        narrow: Option<u32>,
        repo: &gix::Repository,
    ) -> Result<StagedWrite, VerbError> {
        // Read back exactly, as a staged write's content is: a blob that changed on disk since
        // the restore checked it is refused here too.
        let content = crate::verbs::vault::checked_blob(repo, &item.id)?;
        let replaced = Self::replaced_file(&parent, path);
        let temp = temp_name();
        let file = match item.kind {
            EntryKind::Symlink => rustix::fs::symlinkat(content.as_slice(), &parent, temp.as_slice())
                .map(|()| None)
                .map_err(|e| worktree_error(path, format!("cannot create symlink: {}", errno_text(e)))),
            EntryKind::File | EntryKind::Executable => self
                .write_temp_file(&parent, &temp, &content, item.kind, (replaced, narrow), path)
                .map(Some),
            EntryKind::Gitlink => Err(worktree_error(path, "submodule pointers are never restored")),
        }?;
        Ok(StagedWrite {
            parent,
            temp,
            file,
            replaced,
        })
    }

    /// What the new file takes from the regular file at `path` (in `parent`) that a write will
    /// replace; `None` where no regular file stands.
    pub(super) fn replaced_file(parent: &OwnedFd, path: &RepoPath) -> Option<Replaced> {
        Self::regular_file_named(parent, Self::leaf(path))
    }

    /// The permissions and owner of the regular file `name` in `parent`; `None` where no
    /// regular file stands.
    fn regular_file_named(parent: &OwnedFd, name: &[u8]) -> Option<Replaced> {
        match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => Some(Replaced {
                mode: stat.st_mode & 0o7777,
                owner: (stat.st_uid, stat.st_gid),
            }),
            _ => None,
        }
    }

    /// Swaps the synced temp file `temp` (holding `item`) in at `path`. The check that what it
    /// replaces is still `expect` happens after the swap, on the displaced file itself
    /// (`RENAME_EXCHANGE`), so a write that lands at any moment before the swap is found and
    /// swapped back; a path that must be empty is claimed with `RENAME_NOREPLACE`. Where the
    /// filesystem has neither, the check runs again immediately before a plain rename. The
    /// displaced file must also still have the permissions and owner `replaced` recorded when
    /// the temp file took them: a `chmod` made since is a change like a write, and wins.
    fn swap_in(
        &self,
        parent: &OwnedFd,
        temp: &[u8],
        path: &RepoPath,
        item: &TreeItem,
        expect: Option<&TreeItem>,
        replaced: Option<Replaced>,
    ) -> Result<(), VerbError> {
        let leaf = Self::leaf(path);
        crate::fault::pause("restore:before-replace");
        let discard_temp = || {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
        };
        let Some(expect) = expect else {
            return match rustix::fs::renameat_with(parent, temp, parent, leaf, RenameFlags::NOREPLACE) {
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
                    self.rename_into_place(parent, temp, path)
                }
                Err(e) => {
                    discard_temp();
                    Err(cannot_move_into_place(path, e))
                }
            };
        };
        // What ckpt's file looks like before anyone can reach it by name: a `chmod` or `chown`
        // made to it while it stands at `path` is the user's, and is kept if it is swapped back.
        let ours_before = rustix::fs::statat(parent, temp, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|stat| ownership(&stat));
        match rustix::fs::renameat_with(parent, temp, parent, leaf, RenameFlags::EXCHANGE) {
            Ok(()) => {}
            Err(e) if exchange_unsupported(e) => {
                let now = self.read_item_at(parent, path)?;
                if now != DiskItem::Entry(*expect) {
                    discard_temp();
                    return Err(changed_since_guard(path, &now));
                }
                if Self::replaced_file(parent, path) != replaced {
                    discard_temp();
                    return Err(worktree_error(
                        path,
                        "its permissions or owner changed during the restore; left as it is",
                    ));
                }
                return self.rename_into_place(parent, temp, path);
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
        crate::fault::pause("restore:after-exchange");
        // The new content is in place; `temp` now names what it displaced. What cannot be read
        // is not evidence: it is swapped back like a change.
        let displaced = self
            .read_settled_at(parent, temp, path)
            .unwrap_or_else(|e| DiskItem::Unreachable(e.to_string()));
        let displaced_permissions = Self::regular_file_named(parent, temp);
        if displaced == DiskItem::Entry(*expect) && displaced_permissions == replaced {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).map_err(|e| {
                worktree_error(
                    path,
                    format!(
                        "restored, but the replaced content is still at {}: {}",
                        String::from_utf8_lossy(temp),
                        errno_text(e)
                    ),
                )
            })?;
            return Ok(());
        }
        // Someone wrote the file after the guard saw it: give it back its place.
        if let Err(e) = rustix::fs::renameat_with(parent, temp, parent, leaf, RenameFlags::EXCHANGE) {
            return Err(worktree_error(
                path,
                format!(
                    "changed on disk during the restore; that content is kept at {} (swapping it back failed: {})",
                    self.keep_aside(parent, temp, path),
                    errno_text(e)
                ),
            ));
        }
        // `temp` holds ckpt's content again, unless a writer reached it by name meanwhile.
        let ours = self
            .read_settled_at(parent, temp, path)
            .unwrap_or_else(|e| DiskItem::Unreachable(e.to_string()));
        let ours_after = rustix::fs::statat(parent, temp, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|stat| ownership(&stat));
        let leftover = if ours == DiskItem::Entry(*item) && ours_after == ours_before {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
            String::new()
        } else if ours == DiskItem::Entry(*item) {
            format!(
                "; a change of permissions or owner made to the new file during the swap is kept with it at {}",
                self.keep_aside(parent, temp, path)
            )
        } else {
            format!(
                "; content written to it during the swap is kept at {}",
                self.keep_aside(parent, temp, path)
            )
        };
        Err(worktree_error(
            path,
            format!(
                "changed on disk during the restore (now {}); the new content is kept, not overwritten{leftover}",
                match displaced_permissions {
                    Some(now) if displaced == DiskItem::Entry(*expect) => format!(
                        "the same content with mode {:04o}, owner {}:{}",
                        now.mode, now.owner.0, now.owner.1
                    ),
                    _ => describe(&displaced),
                }
            ),
        ))
    }

    /// Removes the file at `path` if it is still `expect`: it is first moved aside (atomically),
    /// then checked, so a write that lands before the move is found and the file put back.
    pub(super) fn remove_item(&self, parent: &OwnedFd, path: &RepoPath, expect: &TreeItem) -> Result<(), VerbError> {
        let leaf = Self::leaf(path);
        // Content alone is not all the evidence: a `chmod` or `chown` since the capture moved
        // the file's ctime, and removing it would lose that change (the guard holds content
        // and the execute bit only).
        let before = rustix::fs::statat(parent, leaf, AtFlags::SYMLINK_NOFOLLOW).ok();
        if let (Some(seen), Some(now)) = (self.seen.and_then(|seen| seen.get(path)), &before) {
            let mut stat_now = super::file_stat(now);
            if seen.linked || now.st_nlink != 1 {
                // A `chmod` still shows in the mode; a `chown` of a linked file goes unseen.
                stat_now.ctime = seen.stat.ctime;
            }
            if stat_now != seen.stat {
                return Err(worktree_error(
                    path,
                    format!(
                        "its permissions, owner or times changed after the guard checkpoint was taken (mode now {:04o}); not removed",
                        now.st_mode & 0o7777
                    ),
                ));
            }
        }
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
        // The move itself changes the ctime; the permissions and owner it must not.
        let moved_stat = rustix::fs::statat(parent, aside.as_slice(), AtFlags::SYMLINK_NOFOLLOW).ok();
        let same_ownership = match (&before, &moved_stat) {
            (Some(before), Some(after)) => ownership(before) == ownership(after),
            _ => false,
        };
        if moved == DiskItem::Entry(*expect) && same_ownership {
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
                if moved == DiskItem::Entry(*expect) {
                    "the same content with other permissions or owner".to_owned()
                } else {
                    describe(&moved)
                }
            ),
        ))
    }

    /// Gives user content that had to be moved to a temp name a name of its own beside `path`
    /// (`<name>.ckpt-kept-<hex>`), which no cleanup ever treats as a temp file; returns the
    /// name it now has, for the report.
    pub(super) fn keep_aside(&self, parent: &OwnedFd, temp: &[u8], path: &RepoPath) -> String {
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

    pub(super) fn rename_into_place(&self, parent: &OwnedFd, temp: &[u8], path: &RepoPath) -> Result<(), VerbError> {
        rustix::fs::renameat(parent, temp, parent, Self::leaf(path)).map_err(|e| {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
            cannot_move_into_place(path, e)
        })
    }

    /// Writes a temp file and returns it open, not yet synced (see [`Self::land`]). With
    /// `replaced` (the file it will replace) the file gets its permissions, with only the
    /// execute bits changed to match `kind`, and, when ckpt runs as root, its owner and group;
    /// it is created owner-only so it is never more readable than that while written. Without,
    /// it gets git's defaults (0666/0777 less the umask), as a checkout would, or, with
    /// `narrow` (the bits its checkpoint kept for a file others could not read), those bits,
    /// still less the umask: a secret made anew is never more readable than it was.
    pub(super) fn write_temp_file(
        &self,
        parent: &OwnedFd,
        temp: &[u8],
        content: &[u8],
        kind: EntryKind,
        (replaced, narrow): (Option<Replaced>, Option<u32>),
        path: &RepoPath,
    ) -> Result<std::fs::File, VerbError> {
        let mode = match (replaced, narrow) {
            (Some(_), _) => 0o600,
            (None, Some(bits)) if kind == EntryKind::Executable => (bits & 0o777) | 0o100,
            (None, Some(bits)) => bits & 0o666,
            (None, None) if kind == EntryKind::Executable => 0o777,
            (None, None) => 0o666,
        };
        let fd = rustix::fs::openat(
            parent,
            temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| worktree_error(path, format!("cannot create a temp file for it: {}", errno_text(e))))?;
        let mut file = std::fs::File::from(fd);
        if let Err(e) = file.write_all(content) {
            rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
            return Err(worktree_error(path, format!("cannot write content: {e}")));
        }
        if let Some(Replaced { mode: replaced, owner }) = replaced {
            // Only root can give a file away (a user's files are all their own): a restore run
            // with sudo must not leave the user a root-owned file they cannot write. Where even
            // root may not (a root-squashed NFS mount), the file stays the restoring user's, as
            // documented. Owner first: a change of owner clears set-id bits the mode restores.
            let is_root = rustix::process::geteuid().is_root();
            if is_root && owner != (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()) {
                let (uid, gid) = owner;
                rustix::fs::fchown(
                    file.as_fd(),
                    Some(rustix::process::Uid::from_raw(uid)),
                    Some(rustix::process::Gid::from_raw(gid)),
                )
                .ok();
            }
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
            let stat = rustix::fs::fstat(file.as_fd()).map_err(|e| {
                rustix::fs::unlinkat(parent, temp, AtFlags::empty()).ok();
                worktree_error(path, errno_text(e))
            })?;
            if stat.st_mode & 0o100 == 0 {
                rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode((stat.st_mode & 0o777) | 0o100)).ok();
            }
        }
        Ok(file)
    }
}

pub(super) fn describe(item: &DiskItem) -> String {
    match item {
        DiskItem::Missing => "nothing".into(),
        DiskItem::Directory => "a directory".into(),
        DiskItem::Entry(entry) => format!("a {} with content {}", entry.kind.label(), entry.id.short(8)),
        DiskItem::Special => "a special file".into(),
        DiskItem::Unreachable(why) => why.clone(),
    }
}

/// What a rename leaves alone and a `chmod` or `chown` changes (with the inode, so a file swapped
/// in under the same name is told apart).
fn ownership(stat: &rustix::fs::Stat) -> (u32, u32, u32, u64) {
    (stat.st_mode, stat.st_uid, stat.st_gid, stat.st_ino)
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

/// Removes the directory `name` in `parent` if it holds nothing but empty directories; any
/// other entry (or one created meanwhile: `rmdir` refuses a directory that is not empty) leaves
/// it in place and is an error naming `path`. Never follows a symlink.
fn remove_empty_directory(parent: &OwnedFd, name: &[u8], path: &RepoPath) -> Result<(), VerbError> {
    remove_empty_directory_at(parent, name, path, 0)
}

fn remove_empty_directory_at(parent: &OwnedFd, name: &[u8], path: &RepoPath, depth: usize) -> Result<(), VerbError> {
    // Deeper than this, a tree of empty directories is someone's doing, not a restore's.
    const DEPTH_AT_MOST: usize = 64;
    let holds_data = || {
        worktree_error(
            path,
            "a directory holding files ckpt has no evidence about is where the checkpoint has a file; left in place",
        )
    };
    let failed = |what: &str, e: Errno| {
        worktree_error(
            path,
            format!("cannot {what} the directory in the way: {}", errno_text(e)),
        )
    };
    if depth >= DEPTH_AT_MOST {
        return Err(holds_data());
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(|e| failed("open", e))?;
    // A mount point is another filesystem's root, not an empty directory of this worktree.
    let device = |fd: &OwnedFd| {
        rustix::fs::fstat(fd)
            .map(|st| st.st_dev)
            .map_err(|e| failed("inspect", e))
    };
    if device(&dir)? != device(parent)? {
        return Err(worktree_error(
            path,
            "a mount point is in the directory where the checkpoint has a file; left in place",
        ));
    }
    let mut subdirs = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir).map_err(|e| failed("list", e))? {
        let entry = entry.map_err(|e| failed("list", e))?;
        let child = entry.file_name().to_bytes();
        if child == b"." || child == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(&dir, child, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
                .unwrap_or(false),
            _ => false,
        };
        if !is_dir {
            return Err(holds_data());
        }
        subdirs.push(child.to_vec());
    }
    for child in subdirs {
        remove_empty_directory_at(&dir, &child, path, depth + 1)?;
    }
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(()),
        Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => Err(holds_data()),
        Err(e) => Err(failed("remove", e)),
    }
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
