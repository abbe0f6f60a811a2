//! Tree reading: one level at a time, whole trees validated (hostile names refused), flattened,
//! and diffed level by level so only differing subtrees are read. Read-only.

use std::collections::BTreeMap;

use super::objects::NewTreeEntry;
use super::{lookup_error, Vault};
use crate::verbs::types::{EntryKind, ObjectId, RepoPath, TreeItem};
use crate::verbs::{InvalidInput, VerbError};

/// One entry of one tree level: name, kind (`None` for a subtree), id.
pub type LevelEntry = (Vec<u8>, Option<EntryKind>, ObjectId);

/// One path whose entry differs between two trees (`None` = absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    pub path: RepoPath,
    pub old: Option<TreeItem>,
    pub new: Option<TreeItem>,
}

fn entry_kind(mode: gix::objs::tree::EntryMode) -> Option<EntryKind> {
    use gix::objs::tree::EntryKind as K;
    match mode.kind() {
        K::Blob => Some(EntryKind::File),
        K::BlobExecutable => Some(EntryKind::Executable),
        K::Link => Some(EntryKind::Symlink),
        K::Commit => Some(EntryKind::Gitlink),
        K::Tree => None,
    }
}

/// One level of a tree: `(name, kind, id)` with `kind: None` for subtrees. A name twice in the
/// level is an error.
pub(super) fn read_level(repo: &gix::Repository, id: &ObjectId) -> Result<Vec<LevelEntry>, VerbError> {
    let tree = repo.find_tree(id.0).map_err(|e| lookup_error(repo, id, "tree", e))?;
    let decoded = tree
        .decode()
        .map_err(|e| VerbError::git(format!("decoding tree {id}"), e))?;
    let entries: Vec<LevelEntry> = decoded
        .entries
        .iter()
        .map(|e| (e.filename.to_vec(), entry_kind(e.mode), ObjectId(e.oid.to_owned())))
        .collect();
    // A name twice in one tree (say a symlink `a` and a directory `a`) would let a hostile
    // tree put a path "under" a symlink; git never writes such trees.
    let mut names: Vec<&[u8]> = entries.iter().map(|(name, _, _)| name.as_slice()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(InvalidInput::TreeName {
            name: String::from_utf8_lossy(pair[0]).into_owned(),
            why: "the name appears twice in one tree",
        }
        .into());
    }
    Ok(entries)
}

fn split_side(side: Option<(Option<EntryKind>, ObjectId)>) -> (Option<TreeItem>, Option<ObjectId>) {
    match side {
        Some((Some(kind), id)) => (Some(TreeItem { kind, id }), None),
        Some((None, id)) => (None, Some(id)),
        None => (None, None),
    }
}

impl Vault {
    pub(super) fn child_path(parent: Option<&RepoPath>, name: &[u8]) -> Result<RepoPath, VerbError> {
        if name.contains(&b'/') {
            return Err(InvalidInput::TreeName {
                name: String::from_utf8_lossy(name).into_owned(),
                why: "a tree entry name must not contain `/`",
            }
            .into());
        }
        Ok(match parent {
            Some(parent) => parent.join(name)?,
            None => RepoPath::new(name.to_vec())?,
        })
    }

    /// One level of a stored tree: name, kind (`None` for a subtree), id. A name twice in the
    /// level is an error.
    pub fn tree_level(&self, tree: &ObjectId) -> Result<Vec<LevelEntry>, VerbError> {
        read_level(&self.repo, tree)
    }

    /// Reads every tree below `tree` and checks every name the way [`Self::read_tree`] does
    /// (no `/`, `.`, `..`, `.git`, empty or duplicate names), without building paths.
    pub fn validate_tree(&self, tree: &ObjectId) -> Result<(), VerbError> {
        use rayon::prelude::*;
        // Level by level, each level's trees read in parallel, each worker with its own handle.
        let shared = self.repo.clone().into_sync();
        let mut seen = crate::verbs::IdSet::default();
        seen.insert(*tree);
        let mut frontier = vec![*tree];
        while !frontier.is_empty() {
            let subtrees: Vec<Vec<ObjectId>> = frontier
                .par_iter()
                .map_init(
                    || shared.to_thread_local(),
                    |repo, id| {
                        let mut subtrees = Vec::new();
                        for (name, kind, child) in read_level(repo, id)? {
                            NewTreeEntry::new(&name, kind, child)?;
                            if kind.is_none() {
                                subtrees.push(child);
                            }
                        }
                        Ok(subtrees)
                    },
                )
                .collect::<Result<_, VerbError>>()?;
            frontier = subtrees.into_iter().flatten().filter(|id| seen.insert(*id)).collect();
        }
        Ok(())
    }

    /// Every non-tree entry below `tree`, like `ls-tree -r`. A hostile name in the tree (`..`,
    /// `.git`, `/`) is an error, never a path.
    pub fn read_tree(&self, tree: &ObjectId) -> Result<BTreeMap<RepoPath, TreeItem>, VerbError> {
        let mut out = BTreeMap::new();
        let mut pending: Vec<(Option<RepoPath>, ObjectId)> = vec![(None, *tree)];
        while let Some((prefix, id)) = pending.pop() {
            for (name, kind, child) in self.tree_level(&id)? {
                let path = Self::child_path(prefix.as_ref(), &name)?;
                match kind {
                    Some(kind) => {
                        out.insert(path, TreeItem { kind, id: child });
                    }
                    None => pending.push((Some(path), child)),
                }
            }
        }
        Ok(out)
    }

    /// The paths whose entries differ between `old` and `new`, descending only into subtrees
    /// whose ids differ, so the cost follows the size of the change.
    pub fn diff_trees(&self, old: Option<&ObjectId>, new: Option<&ObjectId>) -> Result<Vec<TreeChange>, VerbError> {
        let mut changes = Vec::new();
        self.diff_level(None, old.copied(), new.copied(), &mut changes)?;
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }

    fn diff_level(
        &self,
        prefix: Option<&RepoPath>,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
        out: &mut Vec<TreeChange>,
    ) -> Result<(), VerbError> {
        if old == new {
            return Ok(());
        }
        type Side = (Option<EntryKind>, ObjectId);
        let mut merged: BTreeMap<Vec<u8>, (Option<Side>, Option<Side>)> = BTreeMap::new();
        if let Some(old) = old {
            for (name, kind, id) in self.tree_level(&old)? {
                merged.entry(name).or_default().0 = Some((kind, id));
            }
        }
        if let Some(new) = new {
            for (name, kind, id) in self.tree_level(&new)? {
                merged.entry(name).or_default().1 = Some((kind, id));
            }
        }
        for (name, (a, b)) in merged {
            if a == b {
                continue;
            }
            let path = Self::child_path(prefix, &name)?;
            let (a_item, a_tree) = split_side(a);
            let (b_item, b_tree) = split_side(b);
            if a_item != b_item {
                out.push(TreeChange {
                    path: path.clone(),
                    old: a_item,
                    new: b_item,
                });
            }
            if a_tree.is_some() || b_tree.is_some() {
                self.diff_level(Some(&path), a_tree, b_tree, out)?;
            }
        }
        Ok(())
    }
}
