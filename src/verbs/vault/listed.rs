//! What a worktree listing holds: the user's index entries with their stat data, the
//! untracked paths a walk found, and the scope a partial listing covers. Plain data, shared by
//! the index side ([`super::listing`]), the walk ([`super::walk`]) and the judgement of index
//! ids ([`super::rawids`]), so none of them needs another's types.

use crate::verbs::types::{RepoPath, TreeItem};

/// The stat data the user's index holds for an entry (git truncates these to 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStat {
    pub mtime: (u32, u32),
    pub ctime: (u32, u32),
    pub dev: u32,
    pub ino: u32,
    pub size: u32,
}

/// One tracked path from the user's index.
#[derive(Debug, Clone)]
pub struct TrackedEntry {
    pub path: RepoPath,
    pub item: TreeItem,
    /// Present only for plain stage-0 entries (not intent-to-add, skip-worktree or assume-valid).
    pub stat: Option<IndexStat>,
}

/// The worktree as git sees it, listed read-only: the user's index entries, plus what a
/// directory walk with git's ignore rules finds that the index does not track.
#[derive(Debug, Default)]
pub struct WorktreeListing {
    /// Index entries (stage merged), with the kind and id the index records.
    pub tracked: Vec<TrackedEntry>,
    /// The index file's mtime: entries not older than it are racily clean.
    pub index_mtime: Option<(i64, u32)>,
    /// True when no clean/smudge filter, eol conversion or ident configured now can make the
    /// index's blob ids differ from the bytes on disk, except at the paths in `converted`; a
    /// caller that will seed from them also asks [`Vault::index_sizes_are_raw`] about
    /// conversions in the past.
    pub index_ids_are_raw: bool,
    /// Tracked paths whose attributes (from any source: tracked, untracked or ignored
    /// `.gitattributes` files, `info/attributes`, the global file) may convert their content:
    /// their index ids may not be the bytes on disk. Worked out only when asked for seeding.
    pub converted: std::collections::HashSet<RepoPath>,
    /// Untracked, not ignored, non-directory paths (files, symlinks, special files).
    pub untracked: Vec<RepoPath>,
    /// Ignored paths; `true` when the entry stands for a whole ignored directory.
    pub ignored: Vec<(RepoPath, bool)>,
    /// Untracked nested repositories (never entered).
    pub nested_repos: Vec<RepoPath>,
    /// ckpt's own directories below the worktree ([`Vault::reserve`]) that hold anything.
    pub reserved: Vec<RepoPath>,
    /// Untracked directories this process may not list, with why: not walked, not protected.
    pub unreadable_dirs: Vec<(RepoPath, String)>,
    /// Paths on disk or in the index that cannot be a repository path (a name git's fsck
    /// rejects, such as `.Git`), as raw bytes, with the reason.
    pub unrepresentable: Vec<(Vec<u8>, String)>,
    /// How long reading the index took, and the whole listing (index and walk).
    pub times: ListingTimes,
}

/// Where a listing's time went, for `CKPT_TIMING`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListingTimes {
    pub index_read: std::time::Duration,
    /// The walk for untracked paths, which runs beside the caller's work on the index half.
    pub walk: std::time::Duration,
    pub total: std::time::Duration,
}

/// Part of the worktree: the given paths and everything below them (a watch daemon's answer).
#[derive(Debug, Clone, Default)]
pub struct PathScope {
    pub(super) paths: std::collections::HashSet<Vec<u8>>,
}

impl PathScope {
    pub fn new(paths: impl IntoIterator<Item = RepoPath>) -> Self {
        PathScope {
            paths: paths.into_iter().map(|p| p.as_bytes().to_vec()).collect(),
        }
    }

    /// The scope's own paths.
    pub fn paths(&self) -> impl Iterator<Item = RepoPath> + '_ {
        self.paths.iter().filter_map(|p| RepoPath::new(p.clone()).ok())
    }

    /// `path` is one of the scope's own paths (not merely below one).
    pub fn names(&self, path: &[u8]) -> bool {
        self.paths.contains(path)
    }

    /// `path` is one of the scope's paths or below one.
    pub fn covers(&self, path: &[u8]) -> bool {
        let mut end = path.len();
        loop {
            if self.paths.contains(&path[..end]) {
                return true;
            }
            match path[..end].iter().rposition(|&b| b == b'/') {
                Some(slash) => end = slash,
                None => return false,
            }
        }
    }

    /// The scope as literal pathspecs (no glob or other magic in a name is interpreted).
    pub(super) fn pathspecs(&self) -> Vec<gix::bstr::BString> {
        let mut specs: Vec<gix::bstr::BString> = self
            .paths
            .iter()
            .map(|p| {
                let mut spec: gix::bstr::BString = ":(literal)".into();
                spec.extend_from_slice(p);
                spec
            })
            .collect();
        specs.sort();
        specs
    }
}
