//! Making a checkpoint durable before a restore changes the worktree. A restore fsyncs every
//! file it writes, so a power cut right after it could keep the new worktree and lose a guard
//! that still sat in the page cache: the guard's pin, its commit, the trees on the paths the
//! restore changes, what it holds at those paths, and every pack (ckpt's recent ones among
//! them) are synced first. Syncs files that are there; never writes or creates anything.

use std::path::PathBuf;

use super::Vault;
use crate::verbs::types::{ObjectId, PinRef};
use crate::verbs::VerbError;

impl Vault {
    /// Syncs to disk every file the checkpoint pinned at `pin` needs for `objects` (its commit,
    /// trees and blobs: each loose object's file, and every pack with its index), the pin's
    /// ref file, and the directories holding them. Fails, having synced what it could, when
    /// one of `objects` is no longer stored at all (a `git prune` took it): the guard could not
    /// give the state back.
    pub fn make_durable(&self, pin: &PinRef, objects: &[ObjectId]) -> Result<(), VerbError> {
        use rayon::prelude::*;
        crate::fault::pause("restore:guard-pinned");
        let objects_dir = self.repo.objects.store_ref().path().to_path_buf();
        let is_file = |path: &PathBuf| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file());
        // Each object is a loose file (synced below), in a pack (every pack is synced), or
        // gone: then the guard cannot give this state back, and the restore must not go on.
        let hash = self.repo.object_hash();
        if let Some(id) = super::objects::missing_now(&objects_dir, hash, objects).first() {
            return Err(guard_object_gone(*id));
        }
        let loose: Vec<PathBuf> = objects
            .iter()
            .map(|id| super::objects::loose_path(&objects_dir, id))
            .filter(is_file)
            .collect();
        let mut files: Vec<PathBuf> = loose;
        // Which pack holds an object is not asked: packs are few, and syncing one already on
        // disk costs a fraction of a millisecond.
        let pack_dir = objects_dir.join("pack");
        if let Ok(entries) = std::fs::read_dir(&pack_dir) {
            files.extend(
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|ext| ext == "pack" || ext == "idx"))
                    .filter(is_file),
            );
        }
        // The pin is a loose ref when ckpt made it, else a line of `packed-refs` (a `git
        // pack-refs` ran since).
        let loose_pin = self.repo.common_dir().join(pin.as_str());
        let packed_refs = self.repo.common_dir().join("packed-refs");
        files.extend([loose_pin, packed_refs].into_iter().filter(is_file).take(1));
        let mut dirs: Vec<PathBuf> = files.iter().filter_map(|f| f.parent().map(PathBuf::from)).collect();
        dirs.sort();
        dirs.dedup();
        let vanished = std::sync::Mutex::new(Vec::new());
        let sync = |path: &PathBuf, is_dir: bool| -> Result<(), VerbError> {
            let synced = if crate::fault::failing_at("restore:guard-sync", &path.to_string_lossy()) {
                Err(std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error()))
            } else {
                std::fs::File::open(path).and_then(|file| file.sync_all())
            };
            match synced {
                Ok(()) => Ok(()),
                // Some filesystems cannot sync a directory at all.
                Err(e) if is_dir && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => Ok(()),
                // Gone since it was listed: a `git repack` moved its objects into a pack of its
                // own, which git syncs itself (ckpt's newest packs are kept from it until
                // pinned), and a repack beside a restore must not fail the restore. A loose
                // object that no pack holds either was pruned: the guard lost it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    vanished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(path.clone());
                    Ok(())
                }
                // A pack ckpt may not read is not one it wrote (it writes its own readable), nor
                // one it could restore from: skipped, or an unreadable copy of a pack would fail
                // every restore.
                Err(e)
                    if !is_dir && e.kind() == std::io::ErrorKind::PermissionDenied && path.starts_with(&pack_dir) =>
                {
                    Ok(())
                }
                Err(e) => Err(VerbError::Git {
                    action: format!(
                        "syncing {} to disk (the guard checkpoint must be on disk before the restore changes anything)",
                        path.display()
                    ),
                    source: Box::new(e),
                }),
            }
        };
        crate::fault::pause("restore:guard-listed");
        // Each sync waits on the disk, not on a core: a walking guard's few hundred loose
        // objects are synced by more threads than cores (the filesystem commits them together).
        let sync_all = || -> Result<(), VerbError> {
            files.par_iter().try_for_each(|file| sync(file, false))?;
            dirs.par_iter().try_for_each(|dir| sync(dir, true))
        };
        match crate::verbs::worktree::io_pool(files.len()) {
            Some(pool) => pool.install(sync_all),
            None => sync_all(),
        }?;
        // Whatever vanished (a loose object or a pack), every object is looked for again: each
        // must be a loose file or in a pack that is there now.
        let vanished = vanished.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        if vanished.is_empty() {
            return Ok(());
        }
        match super::objects::missing_now(&objects_dir, hash, objects).first() {
            Some(id) => Err(guard_object_gone(*id)),
            None => Ok(()),
        }
    }
}

/// A guard object that is no longer stored: the restore stops before the worktree changes.
fn guard_object_gone(id: ObjectId) -> VerbError {
    VerbError::MissingObject {
        id,
        what: "of the guard checkpoint, removed before the restore could sync it (a `git prune` beside the restore?); nothing was changed: run the restore again once no prune runs".into(),
    }
}
