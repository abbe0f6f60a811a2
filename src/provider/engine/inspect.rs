//! Read-only views of checkpoints: listing across workspaces, line diffs against another
//! checkpoint or the worktree, status and disk use, plus removing checkpoints (unpin, then
//! drop the record). Writes nothing else.

use std::collections::HashSet;

use crate::provider::scan::{self, BlobSink};
use crate::provider::{CkptError, Provider};
use crate::records::{Record, Registry};
use crate::verbs::{EntryKind, ObjectId, PinRef, RepoPath, WorkspaceKey};

use super::{Engine, StoreKind};
use crate::provider::progress::Progress;

impl Engine {
    /// The bytes at a worktree path as a checkpoint would hold them (a symlink's target).
    pub(super) fn read_worktree_bytes(&self, path: &RepoPath, kind: EntryKind) -> Result<Vec<u8>, CkptError> {
        let full = self.workdir.join(path.to_os_path());
        let io = |source| CkptError::Io {
            path: full.clone(),
            source,
        };
        if kind == EntryKind::Symlink {
            Ok(std::fs::read_link(&full)
                .map_err(io)?
                .into_os_string()
                .into_encoded_bytes())
        } else {
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut crate::verbs::open_no_follow(&full).map_err(io)?, &mut content).map_err(
                |source| CkptError::Io {
                    path: full.clone(),
                    source,
                },
            )?;
            Ok(content)
        }
    }

    pub(super) fn diff(
        &self,
        from: &Record,
        to: Option<&Record>,
        paths: &[RepoPath],
        max_file_size: u64,
    ) -> Result<Vec<crate::provider::FileDiff>, CkptError> {
        let changes = match to {
            // Two checkpoints: only the subtrees that differ are read (and each name read is
            // checked on the way); nothing here is written, so the whole-tree validation a
            // restore needs is not.
            Some(to) => {
                let (old, new) = (self.pinned_tree_id(from)?, self.pinned_tree_id(to)?);
                crate::provider::diff::changes_of_trees(self.vault.diff_trees(Some(&old), Some(&new))?, paths)
            }
            None => {
                let old = self.checkpoint_tree(from)?;
                let cache = Registry::open_existing(&self.state_dir)?.and_then(|r| self.trusted_stat_cache(&r));
                let capture = scan::capture(
                    &self.vault,
                    max_file_size,
                    BlobSink::HashOnly,
                    cache.as_ref(),
                    &Progress::hidden(),
                )?;
                let mut changes = crate::provider::diff::changes(&old, &capture.items(), paths);
                // A file still there that this capture could not read (no permission, too
                // large) is not deleted: it is left out and named, never shown as deleted with
                // no word.
                let unseen: std::collections::HashMap<&RepoPath, &String> =
                    capture.skipped.iter().map(|(path, why)| (path, why)).collect();
                changes.retain(|change| match (change.new, unseen.get(&change.path)) {
                    (None, Some(why)) => {
                        self.reporter
                            .warning(&format!("not compared: {} ({why})", change.path.display()));
                        false
                    }
                    _ => true,
                });
                changes
            }
        };
        let mut out = Vec::new();
        for change in changes {
            let blob_at = |id: &ObjectId| self.vault.read_blob(id).map_err(|e| e.at_tree_path(Some(&change.path)));
            let old_bytes = match change.old {
                Some(item) if item.kind != EntryKind::Gitlink => Some(blob_at(&item.id)?),
                _ => None,
            };
            let new_bytes = match change.new {
                Some(item) if item.kind == EntryKind::Gitlink => None,
                Some(item) if to.is_some() => Some(blob_at(&item.id)?),
                Some(item) => Some(self.read_worktree_bytes(&change.path, item.kind)?),
                None => None,
            };
            let binary = old_bytes.as_deref().is_some_and(crate::provider::diff::is_binary)
                || new_bytes.as_deref().is_some_and(crate::provider::diff::is_binary);
            let (added, removed) = if binary {
                (0, 0)
            } else {
                crate::provider::diff::line_counts(
                    old_bytes.as_deref().unwrap_or_default(),
                    new_bytes.as_deref().unwrap_or_default(),
                )
            };
            out.push(crate::provider::FileDiff {
                change,
                old: old_bytes,
                new: new_bytes,
                binary,
                added,
                removed,
            });
        }
        Ok(out)
    }

    pub(super) fn status(&self, max_file_size: u64) -> Result<crate::provider::StatusReport, CkptError> {
        // Read-only and without reading file contents: protection comes from lstat alone. The
        // checkpoint trees are walked on another thread while this one surveys the worktree.
        let reconciled = self.reconcile(self.stored_records()?)?;
        let pinned_trees: Vec<ObjectId> = reconciled
            .records
            .iter()
            .filter(|r| !reconciled.unpinned.contains(&r.id))
            .filter_map(|r| r.tree_id().ok())
            .collect();
        let head_tree = match (self.kind, self.vault.head_commit()?) {
            (StoreKind::Repository, Some(head)) => Some(self.vault.read_commit(&head)?.tree),
            _ => None,
        };
        let started = std::time::Instant::now();
        let census = self.vault.spawn_blob_census(pinned_trees, head_tree);
        let survey = scan::survey(&self.vault, max_file_size);
        self.phase_time("survey", started);
        let census = census.join()?;
        self.phase_time("survey and blob census", started);
        let survey = survey?;
        let mut report = crate::provider::StatusReport {
            provider: self.name(),
            protected: survey.protected,
            not_protected: survey.unprotected,
            unnamable: super::snapshot::unnamable_list(&survey.unnamable),
            checkpoints: reconciled.records,
            blobs: census.blobs.len(),
            ..Default::default()
        };
        for blob in &census.blobs {
            let outside_head = census.sizes_outside_head.get(blob).copied();
            match (survey.index_ids.get(blob).copied(), outside_head) {
                // The index records the worktree size of its files; good enough for an estimate.
                (Some(index_size), _) => report.shared_bytes += index_size,
                (None, None) => report.shared_bytes += self.vault.object_size(blob).unwrap_or(0),
                (None, Some(size)) => report.ckpt_only_bytes += size,
            }
        }
        Ok(report)
    }

    pub(super) fn remove(&self, ids: &[String]) -> Result<Vec<String>, CkptError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        if let Some(journal) = registry.read_journal()? {
            for (role, id) in [("guard", journal.guard), ("target", journal.target)] {
                if ids.contains(&id.to_string()) {
                    return Err(CkptError::Refused(format!(
                        "checkpoint {} is the {role} of an interrupted restore; settle that first (ckpt doctor --fix rolls it back, --fix --complete finishes it). Nothing was deleted",
                        &id.to_string()[..8]
                    )));
                }
            }
        }
        let records = self.reconcile(registry.load()?)?.records;
        let wanted: HashSet<&String> = ids.iter().collect();
        let mut kept = Vec::with_capacity(records.len());
        let mut removed = Vec::new();
        let mut unpin = Vec::new();
        for record in records {
            if !wanted.contains(&record.id) {
                kept.push(record);
                continue;
            }
            let id = record.object_id().map_err(CkptError::CorruptRecord)?;
            let pin = PinRef::for_checkpoint(&self.workspace, &id);
            if self.vault.read_pin(&pin)? == Some(id) {
                unpin.push((pin, id));
            }
            removed.push(record.id);
        }
        // Unpin first, all in one transaction: a crash before the registry is saved leaves
        // records without a ref, which audit reports, rather than a ref that silently brings a
        // checkpoint back.
        self.vault.unpin_all(&unpin)?;
        registry.save(&kept, &lock)?;
        Ok(removed)
    }

    pub(super) fn checkpoints(&self, all_workspaces: bool) -> Result<Vec<Record>, CkptError> {
        if !all_workspaces {
            return self.records();
        }
        let mut all = Vec::new();
        // The git provider keeps each worktree's state in `<common>/ckpt/<key>/`. The copy store
        // keeps a workspace's in `workspaces/<key>/state/`, beside its private git directory and
        // files that are no state directory (taken for one, its `workspace` file would fail
        // `list --all`); "all" there is this path's workspace and the earlier ones set aside at
        // the same path (`<key>-replaced-<time>`), never other projects'.
        let own = self.state_root.file_name().map(|n| n.to_string_lossy().into_owned());
        let (dir, below) = match (self.kind, self.state_root.parent()) {
            (StoreKind::Repository, _) => (self.state_root.clone(), None),
            (StoreKind::Private, Some(workspaces)) => (workspaces.to_path_buf(), Some("state")),
            (StoreKind::Private, None) => return self.records(),
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(all),
            Err(source) => return Err(CkptError::Io { path: dir, source }),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if WorkspaceKey::new(&name).is_err() {
                continue;
            }
            if below.is_some()
                && !own
                    .as_deref()
                    .is_some_and(|own| *name == *own || name.starts_with(&format!("{own}-replaced-")))
            {
                continue;
            }
            // Files beside the state directories (`config.toml`) hold no checkpoints; a link is
            // left to the registry, which refuses it by name.
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let state = match below {
                Some(below) => entry.path().join(below),
                None => entry.path(),
            };
            if below.is_some() && !state.exists() {
                continue;
            }
            if let Some(registry) = Registry::open_existing(&state)? {
                all.extend(registry.load()?);
            }
        }
        all.sort_by(|a, b| a.time.cmp(&b.time));
        Ok(all)
    }
}
