//! The capture's result containers: one captured file, the counts of how captures were served,
//! and the path-sorted vector that holds a whole worktree (a vector, not a map: memory at 200k
//! files). Pure data; no I/O.

use super::*;

#[derive(Debug, Clone, Copy)]
pub struct CapturedFile {
    pub item: TreeItem,
    pub size: u64,
    /// The stat the content was captured under (none for submodule pointers).
    pub stat: Option<FileStat>,
    /// The stat cache's checkpoint holds this file exactly as captured (same content and kind):
    /// either its stat proved it, or it was read and hashed to the cached id.
    pub cached: bool,
    /// This capture added the content to the object store: no checkpoint, commit or earlier
    /// capture had stored it. What `bytes` of a checkpoint counts.
    pub fresh: bool,
    /// A regular file with other hard links: it can change through a name no watch sees.
    pub linked: bool,
}

/// How much of a capture was served without reading files.
#[derive(Debug, Default, Clone, Copy)]
pub struct CaptureStats {
    pub from_cache: u64,
    pub from_index: u64,
    pub read: u64,
    /// Captured regular files that have other hard links.
    pub linked: u64,
}

/// Captured files in path order, each path once. A sorted vector rather than a map: built from
/// sorted runs without rebalancing, and about a third of a `BTreeMap`'s memory at 200k files.
#[derive(Debug, Default)]
pub struct CapturedFiles(pub(super) Vec<(RepoPath, CapturedFile)>);

impl CapturedFiles {
    /// Sorts `files` by path; runs that are already in order (tracked, untracked, submodules)
    /// merge in linear time.
    pub(super) fn from_unsorted(mut files: Vec<(RepoPath, CapturedFile)>) -> Self {
        if !files.is_sorted_by(|a, b| a.0 <= b.0) {
            // Sorting indices, then moving each file once, needs a few bytes of scratch per file
            // where sorting the files themselves would copy half of them aside.
            let mut order: Vec<usize> = (0..files.len()).collect();
            order.sort_by(|&a, &b| files[a].0.cmp(&files[b].0));
            gather_in_place(&mut files, &mut order);
        }
        files.dedup_by(|later, earlier| later.0 == earlier.0);
        CapturedFiles(files)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The file captured at `path`, if any.
    pub fn get(&self, path: &RepoPath) -> Option<&CapturedFile> {
        let at = self.0.binary_search_by(|(p, _)| p.cmp(path)).ok()?;
        self.0.get(at).map(|(_, file)| file)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&RepoPath, &CapturedFile)> + Clone {
        self.0.iter().map(|(path, file)| (path, file))
    }

    pub fn keys(&self) -> impl Iterator<Item = &RepoPath> + Clone {
        self.0.iter().map(|(path, _)| path)
    }

    pub fn values(&self) -> impl Iterator<Item = &CapturedFile> + Clone {
        self.0.iter().map(|(_, file)| file)
    }
}

/// Reorders `items` so that item `i` becomes the one that was at `order[i]`, by swaps along the
/// permutation's cycles. `order` is used up (left as the identity).
pub(super) fn gather_in_place<T>(items: &mut [T], order: &mut [usize]) {
    for start in 0..items.len() {
        let mut current = start;
        while order[current] != current {
            let next = order[current];
            order[current] = current;
            if next == start {
                break;
            }
            items.swap(current, next);
            current = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gather_in_place;

    #[test]
    fn gathering_applies_any_permutation() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in [0usize, 1, 2, 3, 7, 64, 257] {
            let mut order: Vec<usize> = (0..len).collect();
            for i in (1..len).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let original: Vec<String> = (0..len).map(|i| format!("item{i}")).collect();
            let expected: Vec<String> = order.iter().map(|&i| original[i].clone()).collect();
            let mut items = original.clone();
            gather_in_place(&mut items, &mut order);
            assert_eq!(items, expected, "length {len}");
        }
    }
}
