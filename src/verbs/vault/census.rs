//! The blob census behind `status`: which blobs the checkpoints keep alive, which of them HEAD
//! holds too, and the stored sizes of the rest, counted on a thread of its own. Read-only.

use super::trees::read_level;
use super::Vault;
use crate::verbs::types::{EntryKind, ObjectId};
use crate::verbs::VerbError;

/// The blobs reachable from checkpoint trees (submodule pointers excluded), split by whether
/// HEAD's tree holds them too.
#[derive(Debug, Default)]
pub struct BlobCensus {
    pub blobs: crate::verbs::IdSet,
    pub in_head: crate::verbs::IdSet,
    /// The stored size of every blob in `blobs` that HEAD's tree does not hold.
    pub sizes_outside_head: crate::verbs::IdMap<u64>,
}

/// A census running on its own thread.
pub struct CensusHandle {
    thread: std::thread::JoinHandle<Result<BlobCensus, VerbError>>,
}

impl CensusHandle {
    pub fn join(self) -> Result<BlobCensus, VerbError> {
        self.thread.join().unwrap_or_else(|_| {
            Err(VerbError::git_because(
                "counting checkpoint blobs",
                "the census thread panicked",
            ))
        })
    }
}

/// HEAD's tree is walked first and every tree it decodes is remembered, so the checkpoint trees
/// (mostly HEAD's trees with a few changed levels) decode only what differs.
fn blob_census(
    repo: &gix::Repository,
    checkpoint_trees: &[ObjectId],
    head_tree: Option<ObjectId>,
) -> Result<BlobCensus, VerbError> {
    type Level = Vec<(Option<EntryKind>, ObjectId)>;
    let decode = |id: &ObjectId| -> Result<Level, VerbError> {
        Ok(read_level(repo, id)?
            .into_iter()
            .map(|(_, kind, child)| (kind, child))
            .collect())
    };
    let mut census = BlobCensus::default();
    let mut head_levels: crate::verbs::IdMap<Level> = crate::verbs::IdMap::default();
    let mut pending: Vec<ObjectId> = head_tree.into_iter().collect();
    while let Some(id) = pending.pop() {
        if head_levels.contains_key(&id) {
            continue;
        }
        let level = decode(&id)?;
        for (kind, child) in &level {
            match kind {
                None => pending.push(*child),
                Some(EntryKind::Gitlink) => {}
                Some(_) => {
                    census.in_head.insert(*child);
                }
            }
        }
        head_levels.insert(id, level);
    }
    let mut seen = crate::verbs::IdSet::default();
    let mut pending: Vec<ObjectId> = checkpoint_trees.to_vec();
    while let Some(id) = pending.pop() {
        if !seen.insert(id) {
            continue;
        }
        let decoded;
        let level = match head_levels.get(&id) {
            Some(level) => level,
            None => {
                decoded = decode(&id)?;
                &decoded
            }
        };
        for (kind, child) in level {
            match kind {
                None => pending.push(*child),
                Some(EntryKind::Gitlink) => {}
                Some(_) => {
                    census.blobs.insert(*child);
                }
            }
        }
    }
    for blob in &census.blobs {
        if !census.in_head.contains(blob) {
            let size = repo.find_header(blob.0).map(|h| h.size()).unwrap_or(0);
            census.sizes_outside_head.insert(*blob, size);
        }
    }
    Ok(census)
}

impl Vault {
    /// Starts counting, on a thread of its own, the blobs the checkpoint trees keep alive and
    /// which of them HEAD's tree holds too; the caller goes on with its own work meanwhile.
    /// Read-only: it decodes trees and reads object headers, nothing else.
    pub fn spawn_blob_census(&self, checkpoint_trees: Vec<ObjectId>, head_tree: Option<ObjectId>) -> CensusHandle {
        let repo = self.repo.clone().into_sync();
        let thread = std::thread::spawn(move || blob_census(&repo.to_thread_local(), &checkpoint_trees, head_tree));
        CensusHandle { thread }
    }
}
