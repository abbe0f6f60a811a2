//! One candidate path, captured: lstat relative to the root fd, the stat cache or the index
//! when they provably hold its bytes, otherwise a stable read (hashed, or stored for a snapshot),
//! or the reason it is not protected. Read-only on the worktree.

use super::*;

pub(super) enum Outcome {
    Captured(CapturedFile, Source),
    Skipped(String),
    Absent,
}

#[derive(Clone, Copy)]
pub(super) enum Source {
    Cache,
    Index,
    Read,
}

/// A path to capture, with what the user's index says about it when that can seed the capture
/// (tracked paths of a capture without a stat cache). Boxed: most captures never need it.
pub(super) struct Candidate {
    pub(super) path: RepoPath,
    pub(super) index: Option<Box<(TreeItem, Option<IndexStat>)>>,
}

/// What every file's capture shares: where the worktree is, the size limit, where blobs go, and
/// what lets a capture skip reading a file.
pub(super) struct CaptureContext<'a> {
    pub(super) root: &'a Path,
    pub(super) probe: &'a WorktreeProbe,
    pub(super) max_file_size: u64,
    pub(super) blobs: &'a ParallelBlobs,
    /// The index's mtime, when its ids may seed the capture.
    pub(super) index_seed: Option<(i64, u32)>,
}

impl CaptureContext<'_> {
    /// `cached` is the stat cache's entry for the candidate's path, if any.
    pub(super) fn known_id(
        &self,
        candidate: &Candidate,
        cached: Option<&CacheEntry>,
        stat: &FileStat,
        kind: EntryKind,
    ) -> Option<(TreeItem, Source)> {
        if let Some(entry) = cached.filter(|entry| entry.trusts(stat)) {
            return Some((TreeItem { kind, id: entry.id }, Source::Cache));
        }
        let index_mtime = self.index_seed?;
        let (item, Some(index_stat)) = candidate.index.as_deref()? else {
            return None;
        };
        let matches = item.kind == kind
            && index_stat.size == stat.size as u32
            && index_stat.mtime == (stat.mtime.0 as u32, stat.mtime.1)
            && index_stat.ctime == (stat.ctime.0 as u32, stat.ctime.1)
            && index_stat.ino == stat.ino as u32
            && index_stat.dev == stat.dev as u32
            // git's racy-clean rule: an entry not older than the index file may have changed.
            && i64::from(index_stat.mtime.0) < index_mtime.0;
        matches.then_some((*item, Source::Index))
    }
}

pub(super) fn capture_one(
    context: &CaptureContext<'_>,
    candidate: &Candidate,
    cached: Option<&CacheEntry>,
    local: &mut Option<LocalBlobs>,
) -> Result<Outcome, CkptError> {
    let CaptureContext {
        root,
        probe,
        max_file_size,
        blobs,
        ..
    } = context;
    let max_file_size = *max_file_size;
    let probed = match probe.lstat(&candidate.path) {
        Ok(probed) => probed,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Outcome::Absent),
        Err(e) => return Ok(Outcome::Skipped(format!("unreadable: {e}"))),
    };
    let kind = match probed.kind {
        PathKind::Symlink => EntryKind::Symlink,
        PathKind::File if probed.stat.size > max_file_size => {
            return Ok(Outcome::Skipped(format!(
                "too_large: {} bytes, limit {max_file_size}",
                probed.stat.size
            )));
        }
        PathKind::File if probed.is_executable() => EntryKind::Executable,
        PathKind::File => EntryKind::File,
        PathKind::Directory => return Ok(Outcome::Absent),
        PathKind::Special => return Ok(Outcome::Skipped("special_file".into())),
    };
    let mut stat = probed.stat;
    let mut kind = kind;
    let linked = probed.kind == PathKind::File && probed.links > 1;
    if let Some((item, source)) = context.known_id(candidate, cached, &stat, kind) {
        let file = CapturedFile {
            item,
            size: stat.size,
            stat: Some(stat),
            cached: matches!(source, Source::Cache),
            fresh: false,
            linked,
        };
        return Ok(Outcome::Captured(file, source));
    }
    // What a gc cannot take while this snapshot runs: the content the checkpoint it builds on
    // holds here (pinned), and the user's index entry.
    let reachable: Vec<crate::verbs::ObjectId> = cached
        .map(|entry| entry.id)
        .into_iter()
        .chain(candidate.index.as_deref().map(|(item, _)| item.id))
        .collect();
    let full = root.join(candidate.path.to_os_path());
    let git_file = candidate
        .path
        .components()
        .last()
        .and_then(super::gitfiles::GitFile::of);
    let (id, size, fresh) = if kind == EntryKind::Symlink {
        match fs::read_link(&full) {
            Ok(target) => {
                let bytes = target.as_os_str().as_encoded_bytes();
                let put = local.get_or_insert_with(|| blobs.local()).put(bytes, &reachable)?;
                (put.id, bytes.len() as u64, put.fresh)
            }
            Err(e) => return Ok(Outcome::Skipped(format!("unreadable: {e}"))),
        }
    } else if let Some(git_file) = git_file {
        // Judged, then stored, from the same bytes: what git fsck would reject never enters a
        // tree, and what changes after the judging is not what is stored.
        if stat.size > super::gitfiles::MOST_BYTES {
            return Ok(Outcome::Skipped(format!(
                "too_large: {} bytes, limit {} for a {} (git fsck reads its content)",
                stat.size,
                super::gitfiles::MOST_BYTES,
                git_file.shown()
            )));
        }
        let bytes = match crate::verbs::read_small_state_file(&full, super::gitfiles::MOST_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Outcome::Absent),
            Err(e) => return Ok(Outcome::Skipped(format!("unreadable: {e}"))),
        };
        if let Some(why) = git_file.skip_reason(&bytes) {
            return Ok(Outcome::Skipped(why));
        }
        let put = local.get_or_insert_with(|| blobs.local()).put(&bytes, &reachable)?;
        (put.id, bytes.len() as u64, put.fresh)
    } else {
        match local
            .get_or_insert_with(|| blobs.local())
            .put_file(&full, max_file_size, &reachable)?
        {
            FileRead::Stable {
                id,
                stat: read_under,
                fresh,
            } => {
                // The content belongs to the stat it was read under, which may be newer than the
                // listing's; the stat cache must pair them.
                stat = read_under;
                kind = if stat.mode & 0o100 != 0 {
                    EntryKind::Executable
                } else {
                    EntryKind::File
                };
                (id, stat.size, fresh)
            }
            FileRead::Vanished => return Ok(Outcome::Absent),
            FileRead::TooLarge(size) => {
                return Ok(Outcome::Skipped(format!(
                    "too_large: {size} bytes, limit {max_file_size}"
                )))
            }
            FileRead::Unstable => {
                return Ok(Outcome::Skipped(format!(
                    "unstable: changed while being read, {READ_ATTEMPTS} times"
                )))
            }
            FileRead::Unreadable(e) => return Ok(Outcome::Skipped(format!("unreadable: {e}"))),
        }
    };
    let file = CapturedFile {
        item: TreeItem { kind, id },
        size,
        stat: Some(stat),
        // A racy or touched file read back unchanged is still the checkpoint's file.
        cached: cached.is_some_and(|entry| entry.id == id && kind_of_mode(entry.stat.mode) == kind),
        fresh,
        linked,
    };
    Ok(Outcome::Captured(file, Source::Read))
}

/// The kind git records for a file with this `st_mode` (regular or symlink).
pub(super) fn kind_of_mode(mode: u32) -> EntryKind {
    const FILE_TYPE_MASK: u32 = 0o170000;
    const SYMLINK: u32 = 0o120000;
    if mode & FILE_TYPE_MASK == SYMLINK {
        EntryKind::Symlink
    } else if mode & 0o100 != 0 {
        EntryKind::Executable
    } else {
        EntryKind::File
    }
}
