//! Materializing a state the worktree never held as a whole: the worktree as it is now with some
//! files holding other bytes (what a trace replay rebuilt), as a pinned checkpoint a restore can
//! then put back through the one restore transaction. It writes objects and a pin only, never a
//! worktree file.

use std::collections::{BTreeMap, HashSet};

use crate::provider::progress::Progress;
use crate::provider::scan::{self, BlobSink};
use crate::provider::treebuild::{self, TreeEdit};
use crate::provider::{CkptError, SnapshotRequest};
use crate::records::{Record, Registry};
use crate::verbs::{EntryKind, ObjectId, RepoPath, TreeItem};

use super::snapshot::{skipped_of, Counts};
use super::watched::Looked;
use super::Engine;
use crate::records::Skipped;

/// The worktree now, as the checks see it: the tree of its snapshot (a restore), or a read-only
/// listing of it (a dry run, which writes nothing).
enum Now<'a> {
    Tree(ObjectId),
    Listed {
        items: &'a BTreeMap<RepoPath, TreeItem>,
        directories: &'a HashSet<RepoPath>,
    },
}

/// What the worktree now holds at one path.
enum Held {
    Nothing,
    Directory,
    Entry(TreeItem),
}

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
            match self.snapshot_watched_locked(&registry, &lock, now, &super::watched::GuardHooks::NONE)? {
                (base, Looked::Whole(capture)) => (base, Some(capture)),
                (base, Looked::Within(..)) => (base, None),
            }
        } else {
            let (outcome, capture) = self.snapshot_locked(&registry, &lock, now)?;
            (outcome, Some(capture))
        };
        let base_tree = base.record.tree_id().map_err(CkptError::CorruptRecord)?;
        let (skipped, narrow_modes) = match &capture {
            Some(capture) => (
                skipped_of(capture),
                super::snapshot::narrow_modes_of(capture.files.iter()),
            ),
            None => (base.record.skipped.clone(), base.record.narrow_modes.clone()),
        };
        let mut sorted: Vec<&(RepoPath, Vec<u8>)> = files.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        sorted.dedup_by(|a, b| a.0 == b.0);
        let paths: Vec<RepoPath> = sorted.iter().map(|(p, _)| p.clone()).collect();
        let mut refused = self.refusals(&Now::Tree(base_tree), &paths, named, &skipped)?;
        if refused.len() == paths.len() {
            return Ok(Materialized {
                checkpoint: base.record,
                refused,
            });
        }
        // As a snapshot's: every new object in kept packs until the pin exists.
        let _keeps = self.vault.pack_keeps_released_on_return();
        let _batch = (self.kind == super::StoreKind::Repository)
            .then(|| self.vault.begin_batch(crate::verbs::PackCompression::Fastest));
        let blobs = self.vault.parallel_blobs(true).local();
        let mut edits: Vec<(RepoPath, TreeItem)> = Vec::with_capacity(sorted.len());
        let (mut changed, mut added, mut bytes) = (0u64, 0u64, 0u64);
        for (path, content) in sorted {
            if refused.iter().any(|(p, _)| p == path) {
                continue;
            }
            let held = self.item_at(&base_tree, path)?;
            // The base checkpoint is pinned: what it holds here is the one copy safe to rely on.
            let put = blobs.put(content, &held.iter().map(|item| item.id).collect::<Vec<_>>())?;
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
        refused.sort_by(|a, b| a.0.cmp(&b.0));
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
        let mut reconciled = self.reconcile(registry.load()?)?;
        let record = self.publish(
            &registry,
            &lock,
            Some(&mut reconciled),
            request,
            (tree, head),
            counts,
            (skipped, narrow_modes),
        )?;
        Ok(Materialized {
            checkpoint: record,
            refused,
        })
    }

    /// Read-only: which of `files` a [`Self::materialize`] would refuse now, and why, from a
    /// listing of the worktree that stores nothing (a dry run of a trace restore).
    pub(super) fn materialize_refusals(
        &self,
        max_file_size: u64,
        files: &[RepoPath],
        named: &[RepoPath],
    ) -> Result<Vec<(RepoPath, String)>, CkptError> {
        let cache = Registry::open_existing(&self.state_dir)?.and_then(|r| self.trusted_stat_cache(&r));
        let capture = scan::capture(
            &self.vault,
            max_file_size,
            BlobSink::HashOnly,
            cache.as_ref(),
            &Progress::hidden(),
        )?;
        let items = capture.items();
        let directories: HashSet<RepoPath> = items.keys().flat_map(RepoPath::ancestors).collect();
        let mut paths = files.to_vec();
        paths.sort();
        paths.dedup();
        let mut refused = self.refusals(
            &Now::Listed {
                items: &items,
                directories: &directories,
            },
            &paths,
            named,
            &skipped_of(&capture),
        )?;
        refused.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(refused)
    }

    /// Which of `paths` may not take new bytes in a state built on the worktree `now`, and why
    /// (every one of them, when the log names any path through a symlink).
    fn refusals(
        &self,
        now: &Now<'_>,
        paths: &[RepoPath],
        named: &[RepoPath],
        skipped: &[Skipped],
    ) -> Result<Vec<(RepoPath, String)>, CkptError> {
        // A path the log names through a symlink (or a symlink itself) is another name of some
        // file: which one a call changed cannot be told, so nothing is written.
        for path in named.iter().chain(paths) {
            if let Some(link) = self.symlink_on(now, path)? {
                let why = format!(
                    "the log names {} through the symlink {}: which file a call changed cannot be told",
                    path.display(),
                    link.display()
                );
                return Ok(paths.iter().map(|p| (p.clone(), why.clone())).collect());
            }
        }
        // A file created where an ignore rule applies is one no checkpoint holds: undoing the
        // restore could not remove it again.
        let mut absent = Vec::new();
        for path in paths {
            if matches!(self.held(now, path)?, Held::Nothing) {
                absent.push(path.clone());
            }
        }
        let ignored: Vec<RepoPath> = absent
            .iter()
            .zip(self.vault.would_be_ignored(&absent)?)
            .filter(|(_, ignored)| *ignored)
            .map(|(path, _)| path.clone())
            .collect();
        let mut refused = Vec::new();
        for path in paths {
            if ignored.contains(path) {
                // An ignored file already there is not new; either way no checkpoint holds it.
                let there = !matches!(self.vault.read_worktree_item(path), Ok(crate::verbs::DiskItem::Missing));
                let why = if there {
                    "it is an ignored file, which no checkpoint holds: ckpt never writes over one (undo could not give it back)"
                } else {
                    "it would be a new ignored file, which no checkpoint holds (undo could not remove it)"
                };
                refused.push((path.clone(), why.into()));
            } else if let Some(why) = self.obstacle(now, path, skipped)? {
                refused.push((path.clone(), why));
            }
        }
        Ok(refused)
    }

    /// What `now` holds at `path`.
    fn held(&self, now: &Now<'_>, path: &RepoPath) -> Result<Held, CkptError> {
        match now {
            Now::Listed { items, directories } => Ok(match items.get(path) {
                Some(item) => Held::Entry(*item),
                None if directories.contains(path) => Held::Directory,
                None => Held::Nothing,
            }),
            Now::Tree(tree) => {
                let mut tree = *tree;
                let names: Vec<&[u8]> = path.as_bytes().split(|b| *b == b'/').collect();
                for (at, name) in names.iter().enumerate() {
                    let Some((_, kind, id)) = self.vault.tree_level(&tree)?.into_iter().find(|(n, _, _)| n == name)
                    else {
                        return Ok(Held::Nothing);
                    };
                    match (kind, at + 1 == names.len()) {
                        (None, false) => tree = id,
                        (None, true) => return Ok(Held::Directory),
                        (Some(kind), true) => return Ok(Held::Entry(TreeItem { kind, id })),
                        (Some(_), false) => return Ok(Held::Nothing),
                    }
                }
                Ok(Held::Nothing)
            }
        }
    }

    /// The symlink `now` holds at `path` or at a directory above it, if any.
    fn symlink_on(&self, now: &Now<'_>, path: &RepoPath) -> Result<Option<RepoPath>, CkptError> {
        for at in path.ancestors().into_iter().chain(std::iter::once(path.clone())) {
            if let Held::Entry(TreeItem {
                kind: EntryKind::Symlink,
                ..
            }) = self.held(now, &at)?
            {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// Why `path` may not take new bytes in a state built on `now`, if it may not: only a
    /// regular file or nothing may be replaced, below directories only, and only where the
    /// snapshot of now protects it, so that the restore replaces no directory, symlink or
    /// submodule (and what is below it) and is undoable through its guard.
    fn obstacle(&self, now: &Now<'_>, path: &RepoPath, skipped: &[Skipped]) -> Result<Option<String>, CkptError> {
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
        for above in path.ancestors() {
            match self.held(now, &above)? {
                Held::Nothing => return Ok(None),
                Held::Directory => {}
                Held::Entry(item) => {
                    return Ok(Some(format!(
                        "{} is a {} in the worktree, not a directory; a trace restore never replaces it",
                        above.display(),
                        kind_name(item.kind)
                    )))
                }
            }
        }
        Ok(match self.held(now, path)? {
            Held::Nothing
            | Held::Entry(TreeItem {
                kind: EntryKind::File | EntryKind::Executable,
                ..
            }) => None,
            Held::Directory => Some(format!(
                "{} is a directory in the worktree; a trace restore never replaces one",
                path.display()
            )),
            Held::Entry(item) => Some(format!(
                "{} is a {} in the worktree; a trace restore writes regular files only",
                path.display(),
                kind_name(item.kind)
            )),
        })
    }

    /// What `tree` holds at `path` when that is a file, an executable or a symlink.
    pub(super) fn item_at(&self, tree: &ObjectId, path: &RepoPath) -> Result<Option<TreeItem>, CkptError> {
        Ok(match self.held(&Now::Tree(*tree), path)? {
            Held::Entry(item) => Some(item),
            Held::Nothing | Held::Directory => None,
        })
    }
}
