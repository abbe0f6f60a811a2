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
use crate::records::Skipped;

/// What [`Engine::materialize`] made.
pub struct Materialized {
    /// The worktree with the files replaced (`now` itself when none needed replacing).
    pub checkpoint: Record,
    /// The files that were not replaced, and why.
    pub refused: Vec<(RepoPath, String)>,
}

fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::File => "file",
        EntryKind::Executable => "executable file",
        EntryKind::Symlink => "symlink",
        EntryKind::Gitlink => "submodule",
    }
}

impl Engine {
    /// A checkpoint that is the worktree now (snapshotted first with `now`, so what is there now
    /// is a checkpoint too) with each of `files` holding its bytes instead, published with
    /// `request`; the snapshot of now itself when every file already holds its bytes (or was
    /// refused: see [`Self::obstacle`]). A file keeps its executable bit; any other kind
    /// at its path (a symlink, a directory) becomes a regular file.
    pub(super) fn materialize(
        &self,
        now: &SnapshotRequest,
        request: &SnapshotRequest,
        files: &[(RepoPath, Vec<u8>)],
        named: &[RepoPath],
    ) -> Result<Materialized, CkptError> {
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        let (base, capture) = if now.watch {
            self.snapshot_watched_locked(&registry, &lock, now)?
        } else {
            let (outcome, capture) = self.snapshot_locked(&registry, &lock, now)?;
            (outcome, Some(capture))
        };
        let base_tree = base.record.tree_id().map_err(CkptError::CorruptRecord)?;
        let skipped = match &capture {
            Some(capture) => skipped_of(capture),
            None => base.record.skipped.clone(),
        };
        let mut sorted: Vec<&(RepoPath, Vec<u8>)> = files.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        sorted.dedup_by(|a, b| a.0 == b.0);
        // A path the log names through a symlink (or a symlink itself) is another name of some
        // file: which one a call changed cannot be told, so nothing is written.
        for path in named.iter().chain(sorted.iter().map(|(p, _)| p)) {
            if let Some(link) = self.symlink_on(&base_tree, path)? {
                let why = format!(
                    "the log names {} through the symlink {}: which file a call changed cannot be told",
                    path.display(),
                    link.display()
                );
                return Ok(Materialized {
                    checkpoint: base.record,
                    refused: sorted.iter().map(|(p, _)| (p.clone(), why.clone())).collect(),
                });
            }
        }
        // A file created where an ignore rule applies is one no checkpoint holds: undoing the
        // restore could not remove it again.
        let absent: Vec<RepoPath> = {
            let mut absent = Vec::new();
            for (path, _) in &sorted {
                if self.item_at(&base_tree, path)?.is_none() {
                    absent.push(path.clone());
                }
            }
            absent
        };
        let ignored: Vec<RepoPath> = absent
            .iter()
            .zip(self.vault.would_be_ignored(&absent)?)
            .filter(|(_, ignored)| *ignored)
            .map(|(path, _)| path.clone())
            .collect();
        let blobs = self.vault.parallel_blobs(true).local();
        let mut edits: Vec<(RepoPath, TreeItem)> = Vec::with_capacity(sorted.len());
        let mut refused: Vec<(RepoPath, String)> = Vec::new();
        let (mut changed, mut added, mut bytes) = (0u64, 0u64, 0u64);
        for (path, content) in sorted {
            if ignored.contains(path) {
                refused.push((
                    path.clone(),
                    "it would be a new ignored file, which no checkpoint holds (undo could not remove it)".into(),
                ));
                continue;
            }
            if let Some(why) = self.obstacle(&base_tree, path, &skipped)? {
                refused.push((path.clone(), why));
                continue;
            }
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
            return Ok(Materialized {
                checkpoint: base.record,
                refused,
            });
        }
        let edits_view: Vec<TreeEdit<'_>> = edits.iter().map(|(p, item)| (p.as_bytes(), Some(*item))).collect();
        let tree = treebuild::edit_trees(&self.vault, base_tree, &edits_view)?;
        let counts = Counts {
            files: changed,
            total_files: base.record.total_files + added,
            bytes,
        };
        let head = self.checkpoint_parent()?;
        let mut records = self.reconcile(registry.load()?)?.records;
        let record = self.publish(&registry, &lock, &mut records, request, (tree, head), counts, skipped)?;
        Ok(Materialized {
            checkpoint: record,
            refused,
        })
    }

    /// The symlink `tree` holds at `path` or at a directory above it, if any.
    fn symlink_on(&self, tree: &ObjectId, path: &RepoPath) -> Result<Option<RepoPath>, CkptError> {
        for at in path.ancestors().into_iter().chain(std::iter::once(path.clone())) {
            if let Some(TreeItem {
                kind: EntryKind::Symlink,
                ..
            }) = self.item_at(tree, &at)?
            {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// Why `path` may not take new bytes in a state built on `tree` (the worktree now), if it
    /// may not: only a regular file or nothing may be replaced, below directories only, and
    /// only where the snapshot of now protects it, so that the restore replaces no directory,
    /// symlink or submodule (and what is below it) and is undoable through its guard.
    fn obstacle(&self, tree: &ObjectId, path: &RepoPath, skipped: &[Skipped]) -> Result<Option<String>, CkptError> {
        for skip in skipped {
            let Ok(not_protected) = skip.path.to_repo_path() else {
                continue;
            };
            if path.is_within(&not_protected) {
                return Ok(Some(format!(
                    "the worktree's {} is not protected ({}), so writing it could not be undone",
                    not_protected.display(),
                    skip.reason
                )));
            }
        }
        let mut tree = *tree;
        let names: Vec<&[u8]> = path.as_bytes().split(|b| *b == b'/').collect();
        for (at, name) in names.iter().enumerate() {
            let Some((_, kind, id)) = self.vault.tree_level(&tree)?.into_iter().find(|(n, _, _)| n == name) else {
                return Ok(None);
            };
            let last = at + 1 == names.len();
            let here = String::from_utf8_lossy(&names[..=at].join(&b'/')).into_owned();
            match (kind, last) {
                (None, false) => tree = id,
                (Some(EntryKind::File | EntryKind::Executable), true) => return Ok(None),
                (None, true) => {
                    return Ok(Some(format!(
                        "{here} is a directory in the worktree; a trace restore never replaces one"
                    )))
                }
                (Some(kind), true) => {
                    return Ok(Some(format!(
                        "{here} is a {} in the worktree; a trace restore writes regular files only",
                        kind_name(kind)
                    )))
                }
                (Some(kind), false) => {
                    return Ok(Some(format!(
                        "{here} is a {} in the worktree, not a directory; a trace restore never replaces it",
                        kind_name(kind)
                    )))
                }
            }
        }
        Ok(None)
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
