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

use super::*;

/// One write's content, written and synced in the staging directory.
pub(super) struct StagedFile {
    pub(super) name: Vec<u8>,
    item: TreeItem,
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
}

/// The writes of one restore, prepared by [`Vault::prestage_writes`]. Files not moved into
/// place by the time this is dropped are removed.
pub struct Prestaged {
    dir: Option<OwnedFd>,
    writes: HashMap<RepoPath, std::sync::Mutex<Prepared>>,
}

/// A [`Prestaged`] being prepared on a thread of its own; [`Self::wait`] for it.
pub struct PrestageJob(Option<std::thread::JoinHandle<Prestaged>>);

impl PrestageJob {
    /// The prepared writes. A preparation that could not run (or panicked) prepared nothing:
    /// every write is then checked and written beside its path, as without staging.
    pub fn wait(self) -> Prestaged {
        self.0
            .and_then(|handle| handle.join().ok())
            .unwrap_or_else(|| Prestaged {
                dir: None,
                writes: HashMap::new(),
            })
    }
}

impl Prestaged {
    fn lock(&self, path: &RepoPath) -> Option<std::sync::MutexGuard<'_, Prepared>> {
        self.writes
            .get(path)
            .map(|slot| slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
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
                _ => None,
            }
        })
    }

    /// The staged file for writing `item` at `path`, if there is one; once only. With it
    /// comes the staging directory, the file's home until it is moved.
    pub(super) fn take(&self, path: &RepoPath, item: &TreeItem) -> Option<(&OwnedFd, StagedFile)> {
        let dir = self.dir.as_ref()?;
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
        let Some(dir) = &self.dir else {
            return;
        };
        for slot in self.writes.values_mut() {
            let prepared = slot.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Prepared::Staged(file) = prepared {
                rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
            }
        }
    }
}

/// Opens (making it, owner-only, if missing) the staging directory at `path`, if it can serve
/// this worktree: a real directory (never reached through a symlink at its last component),
/// owned by this user, on the worktree's filesystem. Returns it with that filesystem's device,
/// after removing what dead processes left in it.
fn open_staging(path: &Path, root: &OwnedFd) -> Option<(OwnedFd, u64)> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(_) => return None,
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&dir).ok()?;
    let root_device = rustix::fs::fstat(root).ok()?.st_dev;
    if stat.st_uid != rustix::process::geteuid().as_raw() || stat.st_dev != root_device {
        return None;
    }
    let mut dead = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir).ok()?.flatten() {
        let name = entry.file_name().to_bytes();
        if temp_file_owner(name).is_some_and(|pid| !process_is_alive(pid)) {
            dead.push(name.to_vec());
        }
    }
    for name in dead {
        rustix::fs::unlinkat(&dir, name.as_slice(), AtFlags::empty()).ok();
    }
    Some((dir, root_device))
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
    /// with the permissions the file it will replace has now; not yet synced. `None` when the
    /// file is better written beside its path (see [`Prepared::Checked`]) or could not be
    /// written here (the write beside its path then meets and reports the same trouble).
    fn stage_aside(
        &self,
        (dir, device): (&OwnedFd, u64),
        path: &RepoPath,
        item: &TreeItem,
        content: &[u8],
    ) -> Option<(Vec<u8>, std::fs::File)> {
        if !matches!(item.kind, EntryKind::File | EntryKind::Executable) {
            return None;
        }
        let parent = self.open_parent(path, false).ok()??;
        let stat = rustix::fs::fstat(&parent).ok()?;
        if stat.st_dev != device || directory_shapes_new_files(&parent, &stat) {
            return None;
        }
        let replaced_mode = match rustix::fs::statat(&parent, Self::leaf(path), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => Some(stat.st_mode & 0o7777),
            _ => None,
        };
        let name = temp_name();
        let file = self
            .write_temp_file(dir, &name, content, item.kind, replaced_mode, path)
            .ok()?;
        Some((name, file))
    }

    /// Moves a staged file from the staging directory `dir` into `parent` under a fresh temp
    /// name, never over anything; that name, or `None` if it could not be moved (it is removed
    /// then, and the caller writes the content beside its path instead).
    pub(super) fn adopt_staged(&self, dir: &OwnedFd, file: StagedFile, parent: &OwnedFd) -> Option<Vec<u8>> {
        let temp = temp_name();
        match rustix::fs::renameat_with(
            dir,
            file.name.as_slice(),
            parent,
            temp.as_slice(),
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Some(temp),
            Err(_) => {
                rustix::fs::unlinkat(dir, file.name.as_slice(), AtFlags::empty()).ok();
                None
            }
        }
    }
}

impl Vault {
    /// Prepares the writes of `ops` on a thread of its own (see the module's doc), staging
    /// files in `staging` (a directory of ckpt's own, made if missing). Reads the object
    /// database and looks at the worktree's directories; writes only into `staging`.
    pub fn prestage_writes(&self, staging: &Path, ops: &[RestoreOp]) -> PrestageJob {
        let shared = self.repo_for_threads();
        let root: PathBuf = self.workdir().to_path_buf();
        let object_hash = self.object_hash_kind();
        let staging = staging.to_path_buf();
        let writes: Vec<(RepoPath, TreeItem)> = ops
            .iter()
            .filter_map(|op| match op {
                RestoreOp::Write { path, item, .. } => Some((path.clone(), *item)),
                _ => None,
            })
            .collect();
        let prepare = move || {
            let worktree = Worktree {
                root: &root,
                object_hash,
            };
            let staging = worktree.open_root().ok().and_then(|root| open_staging(&staging, &root));
            let prepare_all = || prepare_writes(&shared, worktree, staging.as_ref(), &writes);
            let prepared = match io_pool(writes.len()) {
                Some(pool) => pool.install(prepare_all),
                None => prepare_all(),
            };
            Prestaged {
                dir: staging.map(|(dir, _)| dir),
                writes: prepared
                    .into_iter()
                    .map(|(path, prepared)| (path, std::sync::Mutex::new(prepared)))
                    .collect(),
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
) -> Vec<(RepoPath, Prepared)> {
    let mut out = Vec::with_capacity(writes.len());
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
                    let aside =
                        staging.and_then(|(dir, device)| worktree.stage_aside((dir, *device), path, item, &content));
                    match aside {
                        Some((name, file)) => (Prepared::Staged(StagedFile { name, item: *item }), Some(file)),
                        None => (Prepared::Checked, None),
                    }
                },
            )
            .collect();
        let synced: Vec<Prepared> = written
            .into_par_iter()
            .map(|(prepared, file)| match prepared {
                Prepared::Staged(staged) => {
                    if file.is_some_and(|file| file.sync_all().is_ok()) {
                        return Prepared::Staged(staged);
                    }
                    if let Some((dir, _)) = staging {
                        rustix::fs::unlinkat(dir, staged.name.as_slice(), AtFlags::empty()).ok();
                    }
                    Prepared::Checked
                }
                other => other,
            })
            .collect();
        out.extend(chunk.iter().map(|(path, _)| path.clone()).zip(synced));
    }
    out
}
