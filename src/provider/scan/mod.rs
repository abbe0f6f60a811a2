//! The worktree capture: decides, read-only, which paths a checkpoint protects (git's view —
//! tracked plus untracked-not-ignored — with bytes exactly as on disk) and why the rest are not
//! protected, then hashes (or stores, for a snapshot) each protected file. Files whose stat
//! matches the stat cache, or (first snapshot) the user's index, are not read at all; the rest
//! are read and hashed in parallel, large ones as streams. It never writes to the worktree; blobs
//! go to the object store only through the verbs.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;

use rayon::prelude::*;

use crate::provider::progress::Progress;
use crate::provider::CkptError;
use crate::records::statcache::{CacheEntry, FileStat, StatCache};
use crate::verbs::{
    temp_file_owner, EntryKind, FileRead, IndexStat, LocalBlobs, ParallelBlobs, PathKind, PathScope, RepoPath,
    TreeItem, Vault, WorktreeProbe, READ_ATTEMPTS,
};

mod files;
mod gitfiles;
mod one;
mod survey;

pub use files::{CaptureStats, CapturedFile, CapturedFiles};
use one::{capture_one, Candidate, CaptureContext, Outcome, Source};
pub use survey::survey;

pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

/// The reason given for ckpt's own store when it lies inside the workspace.
pub const CKPT_STORE: &str = "ckpt_store";

/// Whether captured content is stored in the object database or only hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobSink {
    Store,
    HashOnly,
}

/// The worktree as one checkpoint sees it.
#[derive(Debug, Default)]
pub struct Capture {
    pub files: CapturedFiles,
    /// Present on disk, not protected, with a reason code.
    pub skipped: Vec<(RepoPath, String)>,
    /// Ignored paths (`true`: a whole ignored directory).
    pub ignored: Vec<(RepoPath, bool)>,
    /// Present on disk, not protected, and not even a repository path (a name git's fsck
    /// rejects, such as `.Git`): raw bytes, with the reason code.
    pub unnamable: Vec<(Vec<u8>, String)>,
    /// Names that cannot be represented as a repository path, for the user's information.
    pub warnings: Vec<String>,
    pub stats: CaptureStats,
    /// Where the listing's time went (reported with `CKPT_TIMING`).
    pub listing_times: Vec<(&'static str, std::time::Duration)>,
    /// Blob ids the user's index holds (what `status` counts as shared with the repository),
    /// with the file size the index recorded for them. Filled for `status` only.
    pub index_ids: crate::verbs::IdMap<u64>,
    /// An untracked or ignored `.gitattributes` exists: git applies it on checkout, so ids
    /// from the index may not be the bytes on disk.
    attributes_outside_index: bool,
}

impl Capture {
    pub fn items(&self) -> BTreeMap<RepoPath, TreeItem> {
        self.files.iter().map(|(p, f)| (p.clone(), f.item)).collect()
    }

    /// Everything on disk that a restore must neither overwrite nor delete.
    pub fn unprotected(&self) -> Vec<(RepoPath, String)> {
        let mut out: Vec<(RepoPath, String)> = self
            .ignored
            .iter()
            .map(|(p, _)| (p.clone(), "ignored".to_owned()))
            .collect();
        out.extend(self.skipped.iter().cloned());
        out
    }

    /// What the stat cache records of this capture, in path order: every file with a stat
    /// (submodule pointers have none).
    pub fn stat_entries(&self) -> impl Iterator<Item = (&RepoPath, &FileStat, &crate::verbs::ObjectId)> + Clone {
        self.files
            .iter()
            .filter(|(_, file)| file.item.kind != EntryKind::Gitlink)
            .filter_map(|(path, file)| file.stat.as_ref().map(|stat| (path, stat, &file.item.id)))
    }
}

/// Answers "is every ancestor of this path a real directory (not a symlink)?", remembering dirs.
struct AncestorCheck<'a> {
    root: &'a Path,
    known: HashMap<RepoPath, bool>,
}

impl AncestorCheck<'_> {
    fn reachable(&mut self, path: &RepoPath) -> bool {
        match path.parent() {
            Some(parent) => self.is_real_dir(parent),
            None => true,
        }
    }

    /// `dir` and all its ancestors are directories, not symlinks; each directory is checked once.
    fn is_real_dir(&mut self, dir: RepoPath) -> bool {
        if let Some(known) = self.known.get(&dir) {
            return *known;
        }
        let parent_ok = match dir.parent() {
            Some(parent) => self.is_real_dir(parent),
            None => true,
        };
        let ok = parent_ok
            && fs::symlink_metadata(self.root.join(dir.to_os_path()))
                .map(|m| m.file_type().is_dir())
                .unwrap_or(false);
        self.known.insert(dir, ok);
        ok
    }
}

/// A capture's skeleton (ignored, skipped, submodules, index ids) and what `work` made of the
/// candidates it was given.
type Prepared<T> = (Capture, Vec<T>);

/// Lists the worktree, decides the candidates to capture (tracked and untracked paths below real
/// directories, with submodules, nested repositories and ckpt temp files set aside), and runs
/// `work` over them: over the tracked ones while the walk for untracked paths is still running,
/// then over the untracked ones. `work` also gets the index mtime when index ids may seed a
/// capture. `want_index_ids` fills `Capture::index_ids`; `want_index_entries` keeps each tracked
/// candidate's index entry for seeding. `work` owns the candidates it is given,
/// so none outlive it.
fn prepare_and_run<T>(
    vault: &Vault,
    scope: Option<&PathScope>,
    want_index_ids: bool,
    want_index_entries: bool,
    work: impl Fn(Vec<Candidate>, Option<(i64, u32)>) -> Vec<T>,
) -> Result<Prepared<T>, CkptError> {
    let root = vault.workdir();
    let mut out = Capture::default();
    let mut ancestors = AncestorCheck {
        root,
        known: HashMap::new(),
    };
    // Submodule pointers, in index order.
    let mut gitlinks: Vec<(RepoPath, CapturedFile)> = Vec::new();
    let (listing, (mut results, index_seed)) =
        vault.list_worktree_overlapped(scope, want_index_entries, |listing| {
            // The size sample reads object headers: only worth it when ids may seed this capture.
            let index_seed = if listing.index_ids_are_raw
                && want_index_entries
                && vault.index_sizes_are_raw(&listing.tracked, &listing.converted)
            {
                listing.index_mtime
            } else {
                None
            };
            let converted = std::mem::take(&mut listing.converted);
            let mut candidates = Vec::with_capacity(listing.tracked.len());
            for tracked in std::mem::take(&mut listing.tracked) {
                if want_index_ids {
                    out.index_ids
                        .insert(tracked.item.id, tracked.stat.map(|s| u64::from(s.size)).unwrap_or(0));
                }
                if tracked.item.kind == EntryKind::Gitlink {
                    let full = root.join(tracked.path.to_os_path());
                    if ancestors.reachable(&tracked.path)
                        && fs::symlink_metadata(&full).map(|m| m.is_dir()).unwrap_or(false)
                    {
                        gitlinks.push((
                            tracked.path.clone(),
                            CapturedFile {
                                item: tracked.item,
                                size: 0,
                                stat: None,
                                cached: false,
                                fresh: false,
                                linked: false,
                            },
                        ));
                        out.skipped.push((tracked.path, "submodule".into()));
                    }
                    continue;
                }
                // A path an attribute may convert is read: its index id may not be its bytes.
                let seedable = want_index_entries && !converted.contains(&tracked.path);
                candidates.push(Candidate {
                    path: tracked.path,
                    index: seedable.then(|| Box::new((tracked.item, tracked.stat))),
                });
            }
            keep_capturable(&mut candidates, &gitlinks, &mut out, &mut ancestors);
            (work(candidates, index_seed), index_seed)
        })?;
    let is_attributes = |path: &RepoPath| path.components().last() == Some(&b".gitattributes"[..]);
    out.attributes_outside_index =
        listing.untracked.iter().any(is_attributes) || listing.ignored.iter().any(|(path, _)| is_attributes(path));
    out.listing_times = vec![
        ("index read", listing.times.index_read),
        ("walk for untracked paths", listing.times.walk),
        ("list worktree (index + walk)", listing.times.total),
    ];
    out.ignored = listing.ignored;
    out.skipped
        .extend(listing.reserved.into_iter().map(|dir| (dir, CKPT_STORE.to_owned())));
    out.unnamable = listing
        .unrepresentable
        .into_iter()
        .map(|(name, _)| (name, crate::records::RESERVED_NAME.to_owned()))
        .collect();
    for path in listing.nested_repos {
        out.skipped.push((path, "nested_repo".into()));
    }
    for (dir, why) in listing.unreadable_dirs {
        out.skipped.push((dir, format!("unreadable: {why}")));
    }
    let mut untracked: Vec<Candidate> = listing
        .untracked
        .into_iter()
        .map(|path| Candidate { path, index: None })
        .collect();
    keep_capturable(&mut untracked, &gitlinks, &mut out, &mut ancestors);
    let more = work(untracked, index_seed);
    // Exactly: growing by doubling would hold twice the tracked results at 200k files.
    results.reserve_exact(more.len());
    results.extend(more);
    out.files = CapturedFiles::from_unsorted(gitlinks);
    Ok((out, results))
}

/// Drops candidates that are submodules, sit below a symlink or non-directory, or are ckpt's
/// own temp files (those are reported as skipped). The index lists each path once (stages
/// merged) and the walk emits no tracked path, so candidates are already unique.
fn keep_capturable(
    candidates: &mut Vec<Candidate>,
    gitlinks: &[(RepoPath, CapturedFile)],
    out: &mut Capture,
    ancestors: &mut AncestorCheck<'_>,
) {
    candidates.retain(|c| {
        let is_gitlink = gitlinks.iter().any(|(path, _)| *path == c.path);
        if is_gitlink || !ancestors.reachable(&c.path) {
            return false;
        }
        if c.path.components().last().and_then(temp_file_owner).is_some() {
            out.skipped.push((c.path.clone(), "ckpt_temp_file".into()));
            return false;
        }
        true
    });
}

/// Captures the worktree of `vault`. `cache` (if trusted by the caller) lets unchanged files
/// skip reading; without it, the user's index seeds ids when that is provably safe.
pub fn capture(
    vault: &Vault,
    max_file_size: u64,
    sink: BlobSink,
    cache: Option<&StatCache>,
    progress: &Progress,
) -> Result<Capture, CkptError> {
    let capture = capture_seeded(vault, max_file_size, sink, cache, progress, true, None)?;
    if capture.attributes_outside_index && capture.stats.from_index > 0 {
        // Found only once the walk was done: read every file instead (first snapshots only;
        // later ones have the stat cache).
        return capture_seeded(vault, max_file_size, sink, cache, progress, false, None);
    }
    Ok(capture)
}

/// A read-only capture of `scope` alone (and what lies below its paths): what a restore planned
/// from a watched guard needs to know about the paths it may touch — above all, which of them
/// an ignored or unprotected path is in the way of. Nothing is stored.
pub fn capture_scope(
    vault: &Vault,
    max_file_size: u64,
    cache: Option<&StatCache>,
    scope: &PathScope,
    progress: &Progress,
) -> Result<Capture, CkptError> {
    capture_seeded(
        vault,
        max_file_size,
        BlobSink::HashOnly,
        cache,
        progress,
        false,
        Some(scope),
    )
}

/// What a watched snapshot found within its scope, as changes to the stat cache's checkpoint.
#[derive(Debug, Default)]
pub struct Delta {
    /// Paths whose tree entry changed (sorted, each once): the new file, or `None` for gone.
    pub edits: Vec<(RepoPath, Option<CapturedFile>)>,
    /// What the stat cache must learn (sorted, each once): new stats and ids, paths gone.
    pub stat_changes: Vec<crate::records::statcache::DeltaChange>,
    /// Paths in the scope that are present and not protected, with the reason.
    pub skipped: Vec<(RepoPath, String)>,
    /// Paths in the scope that are not even repository paths, as [`Capture::unnamable`].
    pub unnamable: Vec<(Vec<u8>, String)>,
    pub warnings: Vec<String>,
    pub stats: CaptureStats,
    pub listing_times: Vec<(&'static str, std::time::Duration)>,
    /// Files gained minus files lost.
    pub net_files: i64,
    /// What the capture found within the scope (files, skipped and ignored paths), as a
    /// restore planned from this snapshot needs it.
    pub within: Capture,
}

/// Captures only the paths in `scope` (and below) and says how they differ from the stat cache's
/// checkpoint, when a watch daemon vouches that nothing outside the scope changed since that
/// checkpoint's capture: nothing outside the scope is even `lstat`ed. `None` when the scope
/// cannot be captured alone: it reaches a submodule, or a file in it has other hard links
/// (changed too, under names no event named).
pub fn capture_delta(
    vault: &Vault,
    max_file_size: u64,
    cache: &StatCache,
    scope: &PathScope,
    progress: &Progress,
) -> Result<Option<Delta>, CkptError> {
    let capture = capture_seeded(
        vault,
        max_file_size,
        BlobSink::Store,
        Some(cache),
        progress,
        false,
        Some(scope),
    )?;
    // A change to the submodule's directory itself (made, removed, its `.git` moved); one
    // inside it changes nothing a capture holds.
    let reaches_submodule = capture
        .files
        .iter()
        .any(|(path, file)| file.item.kind == EntryKind::Gitlink && scope.covers(path.as_bytes()));
    let has_links = |path: &RepoPath| {
        std::fs::symlink_metadata(vault.workdir().join(path.to_os_path()))
            .is_ok_and(|m| m.is_file() && std::os::unix::fs::MetadataExt::nlink(&m) > 1)
    };
    // Each path is looked at once: a captured path the daemon named is among the scope's.
    let linked = scope.paths().any(|path| has_links(&path))
        || capture.files.iter().any(|(path, file)| {
            file.item.kind != EntryKind::Gitlink && !scope.names(path.as_bytes()) && has_links(path)
        });
    if reaches_submodule || linked {
        return Ok(None);
    }
    let captured: Vec<(&RepoPath, &CapturedFile)> = capture
        .files
        .iter()
        .filter(|(path, file)| file.item.kind != EntryKind::Gitlink && scope.covers(path.as_bytes()))
        .collect();
    let Some(before) = cache.entries_within(scope) else {
        return Ok(None);
    };
    let mut delta = Delta {
        skipped: capture.skipped,
        unnamable: capture.unnamable,
        warnings: capture.warnings,
        stats: capture.stats,
        listing_times: capture.listing_times,
        ..Delta::default()
    };
    // Both sides in path order: one merge pass pairs each path's old and new state.
    let mut old = before.into_iter().peekable();
    let mut new = captured.into_iter().peekable();
    loop {
        let order = match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((old_path, _)), Some((new_path, _))) => old_path.cmp(new_path),
        };
        let (old_entry, (path, file)) = match order {
            std::cmp::Ordering::Less => {
                let Some((gone, _)) = old.next() else { break };
                delta.stat_changes.push((gone.as_bytes().to_vec(), None));
                delta.edits.push((gone, None));
                delta.net_files -= 1;
                continue;
            }
            std::cmp::Ordering::Greater => match new.next() {
                Some(file) => {
                    delta.net_files += 1;
                    (None, file)
                }
                None => break,
            },
            std::cmp::Ordering::Equal => match (old.next(), new.next()) {
                (Some((_, entry)), Some(file)) => (Some(entry), file),
                _ => break,
            },
        };
        let same_item = old_entry
            .as_ref()
            .is_some_and(|e| e.id == file.item.id && one::kind_of_mode(e.stat.mode) == file.item.kind);
        if !same_item {
            delta.edits.push((path.clone(), Some(*file)));
        }
        let known = old_entry
            .as_ref()
            .is_some_and(|e| same_item && Some(e.stat) == file.stat && !e.racy);
        if let (false, Some(stat)) = (known, file.stat) {
            delta
                .stat_changes
                .push((path.as_bytes().to_vec(), Some((stat, file.item.id))));
        }
    }
    delta.within = Capture {
        files: capture.files,
        skipped: delta.skipped.clone(),
        ignored: capture.ignored,
        ..Capture::default()
    };
    Ok(Some(delta))
}

fn capture_seeded(
    vault: &Vault,
    max_file_size: u64,
    sink: BlobSink,
    cache: Option<&StatCache>,
    progress: &Progress,
    index_may_seed: bool,
    scope: Option<&PathScope>,
) -> Result<Capture, CkptError> {
    let probe = vault.worktree_probe()?;
    let blobs = vault.parallel_blobs(sink == BlobSink::Store);
    let _phase = progress.phase("capturing", 0);
    let capture_all = |candidates: Vec<Candidate>, index_seed: Option<(i64, u32)>| {
        progress.grow(candidates.len() as u64);
        let context = CaptureContext {
            root: vault.workdir(),
            probe: &probe,
            max_file_size,
            blobs: &blobs,
            index_seed: index_seed.filter(|_| cache.is_none() && index_may_seed),
        };
        let cached = match cache {
            Some(cache) => cache.locate(candidates.iter().map(|c| &c.path)),
            None => vec![None; candidates.len()],
        };
        candidates
            .into_par_iter()
            .zip(cached.into_par_iter())
            // A repository handle per worker is made only once that worker has a file to read.
            .map_init(
                || None,
                |local, (candidate, cached)| {
                    let cached = cached.and_then(|at| cache?.entry(at as usize));
                    let outcome = capture_one(&context, &candidate, cached.as_ref(), local);
                    progress.inc(1);
                    // Boxed: an error is rare and large, and every element pays for the largest.
                    (candidate.path, outcome.map_err(Box::new))
                },
            )
            .collect::<Vec<(RepoPath, Result<Outcome, Box<CkptError>>)>>()
    };
    let (mut out, outcomes) = prepare_and_run(vault, scope, false, cache.is_none() && index_may_seed, capture_all)?;
    let mut failure = None;
    let stats = &mut out.stats;
    let skipped = &mut out.skipped;
    // Collected in place: the captured files reuse the outcomes' buffer.
    let mut captured: Vec<(RepoPath, CapturedFile)> = outcomes
        .into_iter()
        .filter_map(|(path, outcome)| match outcome {
            Ok(Outcome::Captured(file, source)) => {
                stats.linked += u64::from(file.linked);
                match source {
                    Source::Cache => stats.from_cache += 1,
                    Source::Index => stats.from_index += 1,
                    Source::Read => stats.read += 1,
                }
                Some((path, file))
            }
            Ok(Outcome::Skipped(reason)) => {
                skipped.push((path, reason));
                None
            }
            Ok(Outcome::Absent) => None,
            Err(e) => {
                failure.get_or_insert(e);
                None
            }
        })
        .collect();
    if let Some(e) = failure {
        return Err(*e);
    }
    captured.extend(std::mem::take(&mut out.files.0));
    out.files = CapturedFiles::from_unsorted(captured);
    out.skipped.sort();
    out.skipped.dedup();
    Ok(out)
}
