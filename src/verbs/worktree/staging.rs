//! A restore's writes prepared before the restore may change anything: each write's content is
//! read from the object database and checked against its id, and, where the file can later be
//! moved next to its path by a rename, written and synced in ckpt's private staging directory
//! (in the workspace's state directory) while the guard checkpoint is made durable. The
//! restore proper then only moves each file beside its path and swaps it in (`writing.rs`).
//! Nothing here writes into the worktree; it only looks at the directories the files will go
//! to. A staged file holds checkpoint content only, never the user's (what a swap displaces
//! lands beside its path, not here), so what a dead process left here is removed unread.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::writing::Replaced;
use super::*;

/// One write's content, written and synced in the staging directory.
pub(super) struct StagedFile {
    pub(super) name: Vec<u8>,
    item: TreeItem,
    /// The file it replaces as it was when this was staged, whose permissions (and, as root,
    /// owner) it has taken.
    replaced: Option<Replaced>,
}

/// What preparing one write found.
enum Prepared {
    /// Written and synced in the staging directory, waiting to be moved into place.
    Staged(StagedFile),
    /// Moved into place (or given up) by the restore: nothing of it is left here.
    Taken,
    /// The content can be written, but beside its path, as without staging: its directory
    /// does not exist yet, lies on another filesystem, gives new files its group (set-group-id)
    /// or its default ACL, or the entry is a symlink.
    Checked,
    /// The content cannot be written (missing, not a blob, or corrupt); why.
    Unwritable(VerbError),
    /// Writing or syncing it in the staging directory failed (no space, a quota, an I/O
    /// error). That directory is on the worktree's filesystem, so a write beside its path would
    /// fail alike, after other paths had changed: the restore stops before any does.
    Unstageable(String),
}

/// One write's preparation: the content it is for, and what preparing it found.
struct Slot {
    item: TreeItem,
    prepared: std::sync::Mutex<Prepared>,
}

/// The writes of one restore, prepared by [`Vault::prestage_writes`]. Files not moved into
/// place by the time this is dropped are removed.
pub struct Prestaged {
    /// The staging directory, with the device it is on.
    dir: Option<(OwnedFd, u64)>,
    writes: HashMap<RepoPath, Slot>,
}

/// A [`Prestaged`] being prepared on a thread of its own; [`Self::wait`] for it. Dropped
/// unwaited, it waits, and removes what it staged.
pub struct PrestageJob(Option<std::thread::JoinHandle<Prestaged>>);

impl PrestageJob {
    /// The prepared writes. A preparation that could not run (or panicked) prepared nothing:
    /// every write is then checked and written beside its path, as without staging.
    pub fn wait(mut self) -> Prestaged {
        self.0
            .take()
            .and_then(|handle| handle.join().ok())
            .unwrap_or_else(|| Prestaged {
                dir: None,
                writes: HashMap::new(),
            })
    }
}

impl Drop for PrestageJob {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.join().ok();
        }
    }
}

impl Prestaged {
    fn lock(&self, path: &RepoPath) -> Option<std::sync::MutexGuard<'_, Prepared>> {
        self.writes
            .get(path)
            .map(|slot| slot.prepared.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Whether the content of the write at `path` was read and checked here (so it needs no
    /// other check before the restore).
    pub fn checked(&self, path: &RepoPath) -> bool {
        self.lock(path)
            .is_some_and(|prepared| !matches!(*prepared, Prepared::Unwritable(_)))
    }

    /// The first of `ops`' writes whose content cannot be written, with why.
    pub fn unwritable(&self, ops: &[RestoreOp]) -> Option<(RepoPath, String)> {
        ops.iter().find_map(|op| {
            let RestoreOp::Write { path, item, .. } = op else {
                return None;
            };
            match &*self.lock(path)? {
                Prepared::Unwritable(VerbError::MissingObject { .. }) => Some((
                    path.clone(),
                    format!("content {} is missing from the object database", item.id),
                )),
                Prepared::Unwritable(e) => Some((path.clone(), e.to_string())),
                Prepared::Unstageable(why) => Some((path.clone(), why.clone())),
                _ => None,
            }
        })
    }

    /// The staged file for writing `item` at `path`, if there is one; once only. With it
    /// comes the staging directory, the file's home until it is moved.
    pub(super) fn take(&self, path: &RepoPath, item: &TreeItem) -> Option<(&OwnedFd, StagedFile)> {
        let (dir, _) = self.dir.as_ref()?;
        let mut prepared = self.lock(path)?;
        match std::mem::replace(&mut *prepared, Prepared::Taken) {
            Prepared::Staged(file) if file.item == *item => Some((dir, file)),
            Prepared::Staged(file) => {
                rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
                None
            }
            other => {
                *prepared = other;
                None
            }
        }
    }
}

impl Drop for Prestaged {
    fn drop(&mut self) {
        let Some((dir, _)) = &self.dir else {
            return;
        };
        for slot in self.writes.values_mut() {
            let prepared = slot
                .prepared
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Prepared::Staged(file) = prepared {
                rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
            }
        }
    }
}

/// Opens (making it, owner-only, if missing) the staging directory at `path`, if it can serve
/// this worktree: a real directory (never reached through a symlink at its last component),
/// owned by this user, writable by no one else, on the worktree's filesystem. Returns it with
/// that filesystem's device, after removing what earlier restores left in it: the caller holds
/// the lock every restore holds, so each of them has ended, even one whose pid is in use again.
fn open_staging(path: &Path, root: &OwnedFd) -> Option<(OwnedFd, u64)> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(_) => return None,
    }
    let (dir, stat) = open_existing_staging(path)?;
    let root_device = rustix::fs::fstat(root).ok()?.st_dev;
    let writable_by_others = stat.st_mode & 0o022 != 0;
    if writable_by_others || stat.st_dev != root_device {
        return None;
    }
    for name in staged_files(&dir, |pid| pid != std::process::id()) {
        rustix::fs::unlinkat(&dir, name.as_slice(), AtFlags::empty()).ok();
    }
    Some((dir, root_device))
}

/// The names in the staging directory `dir` of files staged by a process `ended` says has
/// ended: a restore that was killed or failed before moving them into place. Only ckpt's own
/// temp names count.
fn staged_files(dir: &OwnedFd, ended: impl Fn(u32) -> bool) -> Vec<Vec<u8>> {
    let Ok(entries) = rustix::fs::Dir::read_from(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.file_name().to_bytes().to_vec())
        .filter(|name| temp_file_owner(name).is_some_and(&ended))
        .collect()
}

/// [`staged_files`] of processes that are gone (no lock held: a live one may be restoring).
fn dead_processes_files(dir: &OwnedFd) -> Vec<Vec<u8>> {
    staged_files(dir, |pid| !process_is_alive(pid))
}

/// Opens an existing staging directory at `path` without making it, with what `fstat` says of
/// it: only a real directory (not reached through a symlink at its last component) owned by
/// this user.
fn open_existing_staging(path: &Path) -> Option<(OwnedFd, rustix::fs::Stat)> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&dir).ok()?;
    (stat.st_uid == rustix::process::geteuid().as_raw()).then_some((dir, stat))
}

/// What restores that were killed (or failed) left in the staging directory at `path`: the
/// names of their staged files, each with its size. Read-only. Such a file holds checkpoint
/// content that was never moved into place, never the user's.
pub fn dead_staged_files(path: &Path) -> Vec<(Vec<u8>, u64)> {
    let Some((dir, _)) = open_existing_staging(path) else {
        return Vec::new();
    };
    dead_processes_files(&dir)
        .into_iter()
        .filter_map(|name| {
            let stat = rustix::fs::statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
            Some((name, stat.st_size.max(0) as u64))
        })
        .collect()
}

/// Whether the staging directory at `path` holds any staged file, of any process. Read-only.
pub fn any_staged_files(path: &Path) -> bool {
    open_existing_staging(path).is_some_and(|(dir, _)| !staged_files(&dir, |_| true).is_empty())
}

/// Removes what [`dead_staged_files`] lists (never following a symlink: one is removed as a
/// name); the names removed. With `restores_locked_out` the caller holds the lock every restore
/// holds while its files are staged, so every staged file is a leftover, even one whose pid is
/// in use again by another process.
pub fn remove_staged_files(path: &Path, restores_locked_out: bool) -> Vec<Vec<u8>> {
    let Some((dir, _)) = open_existing_staging(path) else {
        return Vec::new();
    };
    let leftovers = match restores_locked_out {
        true => staged_files(&dir, |pid| pid != std::process::id()),
        false => dead_processes_files(&dir),
    };
    leftovers
        .into_iter()
        .filter(|name| rustix::fs::unlinkat(&dir, name.as_slice(), AtFlags::empty()).is_ok())
        .collect()
}

/// Why a restore stops when a file's content could not be written in the staging directory.
fn unstageable(cause: &str) -> String {
    format!(
        "its new content could not be written in ckpt's staging directory, on the worktree's filesystem ({cause}), where writing it in place would most likely fail too; once that is fixed, run the restore again"
    )
}

/// Whether a file created in `dir` would get more than its mode from it: the directory's group
/// (set-group-id) or its default ACL. A file made elsewhere and moved in would not, so such a
/// directory gets its files written in place. An ACL that cannot be asked about counts as one.
fn directory_shapes_new_files(dir: &OwnedFd, stat: &rustix::fs::Stat) -> bool {
    const SET_GROUP_ID: u32 = 0o2000;
    if stat.st_mode & SET_GROUP_ID != 0 {
        return true;
    }
    match rustix::fs::fgetxattr_query(dir, "system.posix_acl_default") {
        Ok(_) => true,
        Err(e) => !matches!(e, Errno::NODATA | Errno::NOTSUP),
    }
}

impl Worktree<'_> {
    /// Writes `content` for `item` at `path` into the staging directory `dir` (on `device`),
    /// with the permissions the file it will replace has now; not yet synced. `Ok(None)` when
    /// the file is better written beside its path (see [`Prepared::Checked`]); `Err` (why) when
    /// it could not be written here (see [`Prepared::Unstageable`]).
    fn stage_aside(
        &self,
        (dir, device): (&OwnedFd, u64),
        path: &RepoPath,
        item: &TreeItem,
        content: &[u8],
    ) -> Result<Option<(StagedFile, std::fs::File)>, String> {
        if !matches!(item.kind, EntryKind::File | EntryKind::Executable) {
            return Ok(None);
        }
        let Some(parent) = self.open_parent(path, false).ok().flatten() else {
            return Ok(None);
        };
        let Ok(stat) = rustix::fs::fstat(&parent) else {
            return Ok(None);
        };
        if stat.st_dev != device || directory_shapes_new_files(&parent, &stat) {
            return Ok(None);
        }
        let replaced = Self::replaced_file(&parent, path);
        if crate::fault::failing_at("restore:staging-full", &path.display()) {
            return Err(unstageable("No space left on device (injected)"));
        }
        let name = temp_name();
        match self.write_temp_file(dir, &name, content, item.kind, (replaced, None), path) {
            Ok(file) => Ok(Some((
                StagedFile {
                    name,
                    item: *item,
                    replaced,
                },
                file,
            ))),
            Err(VerbError::Worktree { message, .. }) => Err(unstageable(&message)),
            Err(e) => Err(unstageable(&e.to_string())),
        }
    }

    /// Moves a staged file for `path` from the staging directory `dir` into `parent` under a
    /// fresh temp name, never over anything; that name and the permissions the staged file
    /// took, or `None` if it could not be moved or the file it replaces has had its permissions
    /// or owner changed since (which the staged file would undo). It is removed then, and the
    /// caller writes the content beside its path.
    pub(super) fn adopt_staged(
        &self,
        dir: &OwnedFd,
        file: StagedFile,
        parent: &OwnedFd,
        path: &RepoPath,
    ) -> Option<(Vec<u8>, Option<Replaced>)> {
        if Self::replaced_file(parent, path) != file.replaced {
            rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
            return None;
        }
        let temp = temp_name();
        match rustix::fs::renameat_with(
            dir,
            file.name.as_slice(),
            parent,
            temp.as_slice(),
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Some((temp, file.replaced)),
            Err(_) => {
                rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
                None
            }
        }
    }
}

impl Vault {
    /// Prepares the writes of `ops` on a thread of its own (see the module's doc), staging
    /// files in `staging` (a directory of ckpt's own, made if missing). What `earlier` prepared
    /// for one of these writes (the same path and content) is taken over, not prepared again;
    /// the rest of it is removed. Reads the object database and looks at the worktree's
    /// directories; writes only into `staging`. The caller holds the workspace's lock, which
    /// every restore holds while it stages and writes.
    pub fn prestage_writes(&self, staging: &Path, ops: &[RestoreOp], earlier: Option<PrestageJob>) -> PrestageJob {
        let writes: Vec<(RepoPath, TreeItem)> = ops
            .iter()
            .filter_map(|op| match op {
                RestoreOp::Write { path, item, .. } => Some((path.clone(), *item)),
                _ => None,
            })
            .collect();
        self.prestage_on_thread(staging, move |_| writes, earlier)
    }

    /// Starts preparing, before the restore's plan is known, the writes a restore to `target`
    /// will most likely make: at each path of `found` (with what the guard found there) where
    /// `target` holds a file of other content. A guess: the restore takes what it prepared
    /// only for a write of its plan with the same path and content (through
    /// [`Self::prestage_writes`]). The target is read path by path, as strictly as the restore
    /// reads it; a path it cannot read there is left to the plan.
    pub fn prestage_likely_writes(
        &self,
        staging: &Path,
        target: ObjectId,
        found: Vec<(RepoPath, Option<TreeItem>)>,
    ) -> PrestageJob {
        let likely = move |repo: &gix::Repository| {
            let mut levels = crate::verbs::IdMap::default();
            found
                .into_iter()
                .filter_map(|(path, now)| {
                    let item = crate::verbs::vault::item_at(repo, &target, &path, &mut levels)?;
                    let file = matches!(item.kind, EntryKind::File | EntryKind::Executable);
                    (file && now != Some(item)).then_some((path, item))
                })
                .collect()
        };
        self.prestage_on_thread(staging, likely, None)
    }

    /// Prepares the writes `writes` names (it runs on the new thread, first), taking over
    /// what `earlier` prepared for the same path and content.
    fn prestage_on_thread(
        &self,
        staging: &Path,
        writes: impl FnOnce(&gix::Repository) -> Vec<(RepoPath, TreeItem)> + Send + 'static,
        earlier: Option<PrestageJob>,
    ) -> PrestageJob {
        let shared = self.repo_for_threads();
        let root: PathBuf = self.workdir().to_path_buf();
        let object_hash = self.object_hash_kind();
        let staging = staging.to_path_buf();
        let prepare = move || {
            let worktree = Worktree {
                root: &root,
                object_hash,
                seen: None,
            };
            let writes = writes(&shared.to_thread_local());
            let mut earlier = earlier.map(PrestageJob::wait);
            let mut taken_over = HashMap::new();
            let mut to_prepare = Vec::new();
            for (path, item) in writes {
                match earlier.as_mut().and_then(|e| e.writes.remove_entry(&path)) {
                    Some((path, slot)) if slot.item == item => {
                        taken_over.insert(path, slot);
                    }
                    Some((path, slot)) => {
                        // Prepared for other content: removed with the rest of `earlier`.
                        if let Some(e) = earlier.as_mut() {
                            e.writes.insert(path.clone(), slot);
                        }
                        to_prepare.push((path, item));
                    }
                    None => to_prepare.push((path, item)),
                }
            }
            // The files taken over stay where they were staged: the same directory serves the
            // rest.
            let earlier_dir = earlier
                .as_ref()
                .and_then(|e| e.dir.as_ref())
                .and_then(|(dir, device)| Some((dir.try_clone().ok()?, *device)));
            drop(earlier);
            // Opening the directory also removes what ended restores left in it.
            let staging =
                earlier_dir.or_else(|| worktree.open_root().ok().and_then(|root| open_staging(&staging, &root)));
            if to_prepare.is_empty() {
                return Prestaged {
                    dir: staging,
                    writes: taken_over,
                };
            }
            let prepare_all = || prepare_writes(&shared, worktree, staging.as_ref(), &to_prepare);
            let mut prepared = match io_pool(to_prepare.len()) {
                Some(pool) => pool.install(prepare_all),
                None => prepare_all(),
            };
            prepared.extend(taken_over);
            Prestaged {
                dir: staging,
                writes: prepared,
            }
        };
        PrestageJob(
            std::thread::Builder::new()
                .name("ckpt-prestage".into())
                .spawn(prepare)
                .ok(),
        )
    }
}

/// Reads and checks every write's content and stages what can be staged: a chunk's files are
/// all written before any is synced, as the restore's own writes are (see `Worktree::stage`).
fn prepare_writes(
    shared: &gix::ThreadSafeRepository,
    worktree: Worktree<'_>,
    staging: Option<&(OwnedFd, u64)>,
    writes: &[(RepoPath, TreeItem)],
) -> HashMap<RepoPath, Slot> {
    let mut out = HashMap::with_capacity(writes.len());
    for chunk in writes.chunks(staged_writes()) {
        let written: Vec<(Prepared, Option<std::fs::File>)> = chunk
            .par_iter()
            .map_init(
                || shared.to_thread_local(),
                |repo, (path, item)| {
                    let content = match crate::verbs::vault::checked_blob(repo, &item.id) {
                        Ok(content) => content,
                        Err(e) => return (Prepared::Unwritable(e), None),
                    };
                    let aside = match staging {
                        Some((dir, device)) => worktree.stage_aside((dir, *device), path, item, &content),
                        None => Ok(None),
                    };
                    match aside {
                        Err(why) => (Prepared::Unstageable(why), None),
                        Ok(Some((staged, file))) => (Prepared::Staged(staged), Some(file)),
                        Ok(None) => (Prepared::Checked, None),
                    }
                },
            )
            .collect();
        let synced: Vec<Prepared> = written
            .into_par_iter()
            .map(|(prepared, file)| match (prepared, file) {
                (Prepared::Staged(staged), Some(file)) => match file.sync_all() {
                    Ok(()) => Prepared::Staged(staged),
                    Err(e) => {
                        if let Some((dir, _)) = staging {
                            rustix::fs::unlinkat(dir, staged.name.as_slice(), AtFlags::empty()).ok();
                        }
                        Prepared::Unstageable(unstageable(&format!("cannot sync it: {e}")))
                    }
                },
                (prepared, _) => prepared,
            })
            .collect();
        let stops = synced
            .iter()
            .any(|prepared| matches!(prepared, Prepared::Unstageable(_)));
        out.extend(chunk.iter().zip(synced).map(|((path, item), prepared)| {
            (
                path.clone(),
                Slot {
                    item: *item,
                    prepared: std::sync::Mutex::new(prepared),
                },
            )
        }));
        if stops {
            // The restore will stop: the other writes need no preparing.
            break;
        }
    }
    out
}
