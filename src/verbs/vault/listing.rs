//! The worktree as git sees it, listed read-only: the user's index (never written), read once
//! and its sparse directories expanded where they are on disk, joined with the walk for
//! untracked paths ([`super::walk`]) and with whether its ids stand for the bytes on disk
//! ([`super::rawids`]). Nothing here writes anything.

use gix::bstr::BStr;

use super::listed::{IndexStat, PathScope, TrackedEntry, WorktreeListing};
use super::rawids::{stores_among, IdsRaw};
use super::walk::{walk_scope, walk_untracked};
use super::Vault;
use crate::verbs::types::{EntryKind, ObjectId, RepoPath, TreeItem};
use crate::verbs::VerbError;

fn index_entry_kind(mode: gix::index::entry::Mode) -> Option<EntryKind> {
    use gix::index::entry::Mode;
    if mode == Mode::FILE {
        Some(EntryKind::File)
    } else if mode == Mode::FILE_EXECUTABLE {
        Some(EntryKind::Executable)
    } else if mode == Mode::SYMLINK {
        Some(EntryKind::Symlink)
    } else if mode == Mode::COMMIT {
        Some(EntryKind::Gitlink)
    } else {
        None
    }
}

impl Vault {
    /// Lists the worktree read-only: index entries and a directory walk that applies git's
    /// ignore rules, never entering ignored directories or nested repositories.
    pub fn list_worktree(&self) -> Result<WorktreeListing, VerbError> {
        self.list_worktree_overlapped(None, false, |_| ())
            .map(|(listing, ())| listing)
    }

    /// The index, read-only. A whole listing reads it afresh, so the decoded index (tens of MB
    /// at 200k files) is freed as soon as the listing is done; scoped listings (a watched guard,
    /// then the restore's look at the paths it touches) keep it while the file stays the same
    /// (same inode, size, mtime and ctime), so the second one does not decode it again.
    pub(super) fn read_index(&self, keep: bool) -> Result<std::sync::Arc<gix::index::File>, VerbError> {
        let path = self.repo.index_path();
        let Some(identity) = super::index_identity(&path) else {
            let empty = gix::index::State::new(self.repo.object_hash());
            return Ok(std::sync::Arc::new(gix::index::File::from_state(empty, path)));
        };
        if let Some((known, index)) = &*self.kept_index.borrow() {
            if keep && *known == identity {
                return Ok(index.clone());
            }
        }
        let prefetched = self.prefetched_index.borrow_mut().take();
        if let Some(Ok(Some((known, index)))) = prefetched.map(std::thread::JoinHandle::join) {
            // Read while the file had the identity it has now: that version, as a read now.
            if known == identity {
                let index = self.expand_sparse_dirs_on_disk(index)?;
                // What an expansion holds depends on the disk as well: never kept.
                let keep = keep && !index.is_sparse();
                *self.kept_index.borrow_mut() = keep.then(|| (identity, index.clone()));
                return Ok(index);
            }
        }
        let read = if self.vouched_index.get() == Some(identity) {
            gix::index::File::at(
                &path,
                self.repo.object_hash(),
                true,
                gix::index::decode::Options::default(),
            )
            .map_err(|e| VerbError::git("reading the index (read-only)", e))?
        } else {
            self.repo
                .open_index()
                .map_err(|e| VerbError::git("reading the index (read-only)", e))?
        };
        let index = self.expand_sparse_dirs_on_disk(std::sync::Arc::new(read))?;
        let keep = keep && !index.is_sparse();
        *self.kept_index.borrow_mut() = keep.then(|| (identity, index.clone()));
        Ok(index)
    }

    /// A sparse index holds each directory outside the cone as one entry (its tree), where git,
    /// finding that directory on disk, looks inside: `git status` lists the files created there,
    /// and the `.gitignore` files of that tree apply to them. So each such entry whose directory
    /// is on disk is replaced, in memory, by the entries of its tree, marked skip-worktree as a
    /// full index marks them; an entry whose directory is absent stays (nothing to capture
    /// there). The index file is never written.
    fn expand_sparse_dirs_on_disk(
        &self,
        index: std::sync::Arc<gix::index::File>,
    ) -> Result<std::sync::Arc<gix::index::File>, VerbError> {
        use gix::index::entry::{Flags, Mode};
        let on_disk = |dir: &[u8]| {
            RepoPath::new(dir.to_vec()).is_ok_and(|dir| {
                std::fs::symlink_metadata(self.workdir.join(dir.to_os_path())).is_ok_and(|m| m.is_dir())
            })
        };
        let expand = |entry: &gix::index::Entry, path: &BStr| {
            entry.mode.is_sparse() && on_disk(path.strip_suffix(b"/").unwrap_or(path))
        };
        if !index.entries().iter().any(|e| expand(e, e.path(&index))) {
            return Ok(index);
        }
        let (mut state, path) = std::sync::Arc::unwrap_or_clone(index).into_parts();
        let mut trees: Vec<(RepoPath, ObjectId)> = Vec::new();
        let mut unusable = None;
        state.remove_entries(|_, path, entry| {
            if !expand(entry, path) {
                return false;
            }
            match RepoPath::new(path.strip_suffix(b"/").unwrap_or(path).to_vec()) {
                Ok(dir) => trees.push((dir, ObjectId(entry.id))),
                Err(e) => unusable = Some(e),
            }
            true
        });
        if let Some(e) = unusable {
            return Err(e.into());
        }
        for (dir, tree) in trees {
            for (below, item) in self.read_tree(&tree)? {
                let mode = match item.kind {
                    EntryKind::File => Mode::FILE,
                    EntryKind::Executable => Mode::FILE_EXECUTABLE,
                    EntryKind::Symlink => Mode::SYMLINK,
                    EntryKind::Gitlink => Mode::COMMIT,
                };
                let full = dir.join(below.as_bytes())?;
                state.dangerously_push_entry(
                    Default::default(),
                    item.id.0,
                    Flags::SKIP_WORKTREE,
                    mode,
                    BStr::new(full.as_bytes()),
                );
            }
        }
        state.sort_entries();
        Ok(std::sync::Arc::new(gix::index::File::from_state(state, path)))
    }

    /// The paths whose place in the index now may make a capture differ from one that held
    /// exactly `captured` (sorted, as a stat cache lists them) outside any changed path: tracked
    /// now but not captured then (a `git add -f` of an ignored file, or a tracked file missing,
    /// too large or unreadable), and captured then but not tracked now (an untracked file, or
    /// one `git rm --cached` may have left ignored). What a capture holds depends on the index
    /// through which paths it tracks only (ignored files are captured only when tracked), so a
    /// scoped capture of these paths and the changed ones gives what a walk gives. Submodule
    /// pointers are left out: every scoped listing reads them all. `None` when more than
    /// `limit` paths qualify, when the index is sparse or names a path that is no repository
    /// path (a walk then decides). Read-only; the index read is kept for the scoped listing.
    pub fn index_membership_changes<'a>(
        &self,
        captured: impl Iterator<Item = &'a [u8]>,
        limit: usize,
    ) -> Result<Option<Vec<RepoPath>>, VerbError> {
        let index = self.read_index(true)?;
        if index.is_sparse() {
            return Ok(None);
        }
        let mut tracked = index
            .entries()
            .iter()
            .filter(|entry| entry.mode != gix::index::entry::Mode::COMMIT)
            .map(|entry| {
                let path: &[u8] = entry.path(&index);
                path
            })
            .peekable();
        let mut captured = captured.peekable();
        let mut changes = Vec::new();
        loop {
            let next = match (tracked.peek(), captured.peek()) {
                (None, None) => break,
                (Some(t), Some(c)) if t == c => {
                    let same = tracked.next();
                    captured.next();
                    // Unmerged paths appear once per stage.
                    while tracked.peek().is_some() && tracked.peek() == same.as_ref() {
                        tracked.next();
                    }
                    continue;
                }
                (Some(t), Some(c)) if t < c => tracked.next(),
                (Some(_), None) => tracked.next(),
                _ => captured.next(),
            };
            let Some(path) = next else { break };
            if changes.last().is_some_and(|last: &RepoPath| last.as_bytes() == path) {
                continue;
            }
            let Ok(path) = RepoPath::new(path.to_vec()) else {
                return Ok(None);
            };
            if changes.len() == limit {
                return Ok(None);
            }
            changes.push(path);
        }
        Ok(Some(changes))
    }

    /// The submodule pointers the index holds, in path order: a capture takes them from the
    /// index, so one that moved there (a `git add` of the submodule, a commit or a reset in the
    /// superproject) changes the capture though no worktree file changed. `None` when one is at
    /// a path that is no repository path. Read-only; the index read is kept.
    pub fn index_gitlinks(&self) -> Result<Option<Vec<(RepoPath, ObjectId)>>, VerbError> {
        let index = self.read_index(true)?;
        let mut gitlinks = Vec::new();
        for entry in index.entries() {
            if entry.mode == gix::index::entry::Mode::COMMIT {
                let Ok(path) = RepoPath::new(entry.path(&index).to_vec()) else {
                    return Ok(None);
                };
                gitlinks.push((path, ObjectId(entry.id)));
            }
        }
        gitlinks.sort();
        gitlinks.dedup_by(|a, b| a.0 == b.0);
        Ok(Some(gitlinks))
    }

    /// The submodule pointer `tree` holds at `path`, if it holds one there: only the levels on
    /// the way are read. Read-only.
    pub fn gitlink_in_tree(&self, tree: &ObjectId, path: &RepoPath) -> Result<Option<ObjectId>, VerbError> {
        let mut level = *tree;
        let mut names = path.components().peekable();
        while let Some(name) = names.next() {
            let entries = self.tree_level(&level)?;
            let Some((_, kind, id)) = entries.into_iter().find(|(entry, _, _)| entry.as_slice() == name) else {
                return Ok(None);
            };
            match (kind, names.peek().is_none()) {
                (Some(EntryKind::Gitlink), true) => return Ok(Some(id)),
                (None, false) => level = id,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Starts reading the index on a thread of its own, for the scoped listing that follows (a
    /// watched snapshot loads its stat cache meanwhile): the read a listing makes, made earlier.
    /// A read that fails, or a file that changed by the time the listing wants it, is just read
    /// again then. One read at a time: while one is pending, this does nothing. Read-only.
    pub fn prefetch_index(&self) {
        if self.prefetched_index.borrow().is_some() {
            return;
        }
        let path = self.repo.index_path();
        let Some(identity) = super::index_identity(&path) else {
            return;
        };
        let hash = self.repo.object_hash();
        // Unvouched, it is opened as the repository opens it (checksum verified, its options).
        let verified_by = (self.vouched_index.get() != Some(identity)).then(|| self.repo.clone().into_sync());
        let read = move || {
            let index = match verified_by {
                None => gix::index::File::at(&path, hash, true, gix::index::decode::Options::default()).ok()?,
                Some(repo) => repo.to_thread_local().open_index().ok()?,
            };
            Some((identity, std::sync::Arc::new(index)))
        };
        let handle = std::thread::Builder::new().name("ckpt-index".into()).spawn(read).ok();
        *self.prefetched_index.borrow_mut() = handle;
    }

    /// [`Self::list_worktree`], with the walk for untracked paths running on a thread of its own
    /// while `with_index` works on this thread with the index half of the listing (`tracked`,
    /// `index_mtime`, `index_ids_are_raw`). Whatever `with_index` leaves in the listing is
    /// returned with the walk's findings added.
    /// With a `scope`, only index entries and untracked paths within it are listed (and every
    /// submodule pointer, wherever it is). With `seeding`, attributes that convert content are
    /// resolved path by path (`converted`) instead of ruling out every index id.
    pub fn list_worktree_overlapped<R>(
        &self,
        scope: Option<&PathScope>,
        seeding: bool,
        with_index: impl FnOnce(&mut WorktreeListing) -> R,
    ) -> Result<(WorktreeListing, R), VerbError> {
        let started = std::time::Instant::now();
        let index = self.read_index(scope.is_some())?;
        let index = &*index;
        let mut listing = self.index_listing(index, scope, seeding);
        listing.times.index_read = started.elapsed();
        let walk_repo = self.repo.clone().into_sync();
        let paths = scope;
        let (walked, result) = std::thread::scope(|scope| {
            let workdir = &self.workdir;
            let walker = scope.spawn(|| {
                let walk_started = std::time::Instant::now();
                let repo = walk_repo.to_thread_local();
                let walked = match paths {
                    Some(paths) => match walk_scope(&repo, index, paths, workdir) {
                        Ok(Some(listing)) => Ok(listing),
                        Ok(None) => walk_untracked(&repo, index, Some(paths)),
                        Err(e) => Err(e),
                    },
                    None => walk_untracked(&repo, index, None),
                };
                (walked, walk_started.elapsed())
            });
            let result = with_index(&mut listing);
            let walked = walker.join().unwrap_or_else(|_| {
                let panicked = VerbError::git_because("walking the worktree", "the walk thread panicked");
                (Err(panicked), std::time::Duration::ZERO)
            });
            (walked, result)
        });
        let (walked, walk_time) = walked;
        listing.times.walk = walk_time;
        let mut walked = walked?;
        // ckpt's own stores: the configured one, and any other found by what it holds (another
        // CKPT_HOME, or this one reached through a bind mount or another path).
        let mut reserved: Vec<RepoPath> = self
            .reserved
            .iter()
            .filter(|r| std::fs::symlink_metadata(self.workdir.join(r.to_os_path())).is_ok())
            .cloned()
            .collect();
        reserved.extend(stores_among(&self.workdir, walked.untracked.iter()));
        reserved.sort();
        reserved.dedup();
        if !reserved.is_empty() {
            let outside = |path: &RepoPath| !reserved.iter().any(|r| path.is_within(r));
            walked.untracked.retain(|p| outside(p));
            walked.ignored.retain(|(p, _)| outside(p));
            walked.nested_repos.retain(|p| outside(p));
            listing.reserved = reserved;
        }
        listing.untracked = walked.untracked;
        listing.ignored = walked.ignored;
        listing.nested_repos = walked.nested_repos;
        listing.unrepresentable.extend(walked.unrepresentable);
        listing.unreadable_dirs.extend(walked.unreadable_dirs);
        listing.times.total = started.elapsed();
        Ok((listing, result))
    }

    /// The index half of a listing: every entry (stages merged) with its stat, and whether index
    /// ids may stand for the bytes on disk.
    fn index_listing(&self, index: &gix::index::File, scope: Option<&PathScope>, seeding: bool) -> WorktreeListing {
        let mut listing = WorktreeListing::default();
        let mut last: Option<RepoPath> = None;
        let entries = index.entries();
        // With a scope, only its entries are looked at (found by binary search, not by testing
        // every entry) and the submodule pointers (a mode test per entry).
        let positions: Box<dyn Iterator<Item = usize>> = match scope {
            None => Box::new(0..entries.len()),
            Some(scope) => {
                let mut positions: Vec<usize> = (0..entries.len())
                    .filter(|&at| entries[at].mode == gix::index::entry::Mode::COMMIT)
                    .collect();
                for path in &scope.paths {
                    // The prefix also finds names that merely start with it ("a" finds "ab").
                    if let Some(range) = index.prefixed_entries_range(path.as_slice().into()) {
                        positions.extend(range.filter(|&at| scope.covers(entries[at].path(index))));
                    }
                }
                positions.sort_unstable();
                positions.dedup();
                Box::new(positions.into_iter())
            }
        };
        for entry in positions.map(|at| &entries[at]) {
            let raw_path = entry.path(index);
            let Some(kind) = index_entry_kind(entry.mode) else {
                continue;
            };
            match RepoPath::new(raw_path.to_vec()) {
                Ok(path) => {
                    // Unmerged paths appear once per stage; keep one.
                    if last.as_ref() == Some(&path) {
                        continue;
                    }
                    last = Some(path.clone());
                    use gix::index::entry::Flags;
                    let plain = entry.stage() == gix::index::entry::Stage::Unconflicted
                        && !entry
                            .flags
                            .intersects(Flags::INTENT_TO_ADD | Flags::SKIP_WORKTREE | Flags::ASSUME_VALID);
                    let stat = plain.then_some(IndexStat {
                        mtime: (entry.stat.mtime.secs, entry.stat.mtime.nsecs),
                        ctime: (entry.stat.ctime.secs, entry.stat.ctime.nsecs),
                        dev: entry.stat.dev,
                        ino: entry.stat.ino,
                        size: entry.stat.size,
                    });
                    listing.tracked.push(TrackedEntry {
                        path,
                        item: TreeItem {
                            kind,
                            id: ObjectId(entry.id),
                        },
                        stat,
                    });
                }
                Err(e) => listing.unrepresentable.push((raw_path.to_vec(), e.to_string())),
            }
        }
        listing.index_mtime = std::fs::metadata(self.repo.index_path()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.mtime(), m.mtime_nsec() as u32)
        });
        listing.index_ids_are_raw = match self.index_ids_are_raw(&listing.tracked) {
            IdsRaw::Yes => true,
            IdsRaw::No => false,
            IdsRaw::ExceptByAttributes if seeding => match self.converted_by_attributes(index, &listing.tracked) {
                Ok(converted) => {
                    listing.converted = converted;
                    true
                }
                Err(_) => false,
            },
            IdsRaw::ExceptByAttributes => false,
        };
        if !self.reserved.is_empty() {
            listing
                .tracked
                .retain(|t| !self.reserved.iter().any(|r| t.path.is_within(r)));
        }
        listing
    }
}
