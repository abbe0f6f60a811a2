//! Materializing a state the worktree never held as a whole: the worktree as it is now with some
//! files holding other bytes (what a trace replay rebuilt), as a pinned checkpoint a restore can
//! then put back through the one restore transaction. It writes objects and a pin only, never a
//! worktree file.

use crate::provider::treebuild::{self, TreeEdit};
use crate::provider::{CkptError, SnapshotRequest};
use crate::records::Record;
use crate::verbs::{EntryKind, ObjectId, RepoPath, TreeItem};

use super::snapshot::{skipped_of, Counts};
use super::Engine;

impl Engine {
    /// A checkpoint that is the worktree now (snapshotted first with `now`, so what is there now
    /// is a checkpoint too) with each of `files` holding its bytes instead, published with
    /// `request`. Returns (the snapshot of now, the new checkpoint); the two are the same record
    /// when every file already holds its bytes. A file keeps its executable bit; any other kind
    /// at its path (a symlink, a directory) becomes a regular file.
    pub(super) fn materialize(
        &self,
        now: &SnapshotRequest,
        request: &SnapshotRequest,
        files: &[(RepoPath, Vec<u8>)],
    ) -> Result<(Record, Record), CkptError> {
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        let (base, capture) = if now.watch {
            self.snapshot_watched_locked(&registry, &lock, now)?
        } else {
            let (outcome, capture) = self.snapshot_locked(&registry, &lock, now)?;
            (outcome, Some(capture))
        };
        let base_tree = base.record.tree_id().map_err(CkptError::CorruptRecord)?;
        let mut sorted: Vec<&(RepoPath, Vec<u8>)> = files.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        sorted.dedup_by(|a, b| a.0 == b.0);
        let blobs = self.vault.parallel_blobs(true).local();
        let mut edits: Vec<(RepoPath, TreeItem)> = Vec::with_capacity(sorted.len());
        let (mut changed, mut added, mut bytes) = (0u64, 0u64, 0u64);
        for (path, content) in sorted {
            let put = blobs.put(content)?;
            let held = self.item_at(&base_tree, path)?;
            let kind = match held {
                Some(TreeItem {
                    kind: EntryKind::Executable,
                    ..
                }) => EntryKind::Executable,
                _ => EntryKind::File,
            };
            let item = TreeItem { kind, id: put.id };
            if held == Some(item) {
                continue;
            }
            changed += 1;
            added += u64::from(held.is_none());
            if put.fresh {
                bytes += content.len() as u64;
            }
            edits.push((path.clone(), item));
        }
        if edits.is_empty() {
            return Ok((base.record.clone(), base.record));
        }
        let edits_view: Vec<TreeEdit<'_>> = edits.iter().map(|(p, item)| (p.as_bytes(), Some(*item))).collect();
        let tree = treebuild::edit_trees(&self.vault, base_tree, &edits_view)?;
        let counts = Counts {
            files: changed,
            total_files: base.record.total_files + added,
            bytes,
        };
        let skipped = match &capture {
            Some(capture) => skipped_of(capture),
            None => base.record.skipped.clone(),
        };
        let head = self.checkpoint_parent()?;
        let mut records = self.reconcile(registry.load()?)?.records;
        let record = self.publish(&registry, &lock, &mut records, request, (tree, head), counts, skipped)?;
        Ok((base.record, record))
    }

    /// What `tree` holds at `path` when that is a file, an executable or a symlink.
    pub(super) fn item_at(&self, tree: &ObjectId, path: &RepoPath) -> Result<Option<TreeItem>, CkptError> {
        let mut tree = *tree;
        let names: Vec<&[u8]> = path.as_bytes().split(|b| *b == b'/').collect();
        for (at, name) in names.iter().enumerate() {
            let Some((_, kind, id)) = self.vault.tree_level(&tree)?.into_iter().find(|(n, _, _)| n == name) else {
                return Ok(None);
            };
            match (kind, at + 1 == names.len()) {
                (None, false) => tree = id,
                (Some(kind), true) => return Ok(Some(TreeItem { kind, id })),
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}
