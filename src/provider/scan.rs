//! The worktree capture: decides, read-only, which paths a checkpoint protects (git's view —
//! tracked plus untracked-not-ignored — with bytes exactly as on disk) and why the rest are not
//! protected, then hashes (or stores, for a snapshot) each protected file. It never writes to the
//! worktree; blobs go to the object store only through the verbs.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::provider::CkptError;
use crate::verbs::{temp_file_owner, EntryKind, RepoPath, TreeItem, Vault};

pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

/// Whether captured content is stored in the object database or only hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobSink {
    Store,
    HashOnly,
}

#[derive(Debug, Clone, Copy)]
pub struct CapturedFile {
    pub item: TreeItem,
    pub size: u64,
}

/// The worktree as one checkpoint sees it.
#[derive(Debug, Default)]
pub struct Capture {
    pub files: BTreeMap<RepoPath, CapturedFile>,
    /// Present on disk, not protected, with a reason code.
    pub skipped: Vec<(RepoPath, String)>,
    /// Ignored paths (`true`: a whole ignored directory).
    pub ignored: Vec<(RepoPath, bool)>,
    /// Names that cannot be represented as a repository path, for the user's information.
    pub warnings: Vec<String>,
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
}

/// Answers "is every ancestor of this path a real directory (not a symlink)?", remembering dirs.
struct AncestorCheck<'a> {
    root: &'a Path,
    known: HashMap<RepoPath, bool>,
}

impl AncestorCheck<'_> {
    fn reachable(&mut self, path: &RepoPath) -> bool {
        for ancestor in path.ancestors() {
            let ok = *self.known.entry(ancestor.clone()).or_insert_with(|| {
                fs::symlink_metadata(self.root.join(ancestor.to_os_path()))
                    .map(|m| m.file_type().is_dir())
                    .unwrap_or(false)
            });
            if !ok {
                return false;
            }
        }
        true
    }
}

enum Read_ {
    Captured(CapturedFile),
    Skipped(String),
    Absent,
}

fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = crate::verbs::open_no_follow(path)?;
    let mut content = Vec::new();
    file.read_to_end(&mut content)?;
    Ok(content)
}

fn capture_one(vault: &Vault, path: &RepoPath, max_file_size: u64, sink: BlobSink) -> Result<Read_, CkptError> {
    let full = vault.workdir().join(path.to_os_path());
    let meta = match fs::symlink_metadata(&full) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read_::Absent),
        Err(e) => return Ok(Read_::Skipped(format!("unreadable: {e}"))),
    };
    let file_type = meta.file_type();
    let (kind, content) = if file_type.is_symlink() {
        match fs::read_link(&full) {
            Ok(target) => {
                use std::os::unix::ffi::OsStrExt;
                (EntryKind::Symlink, target.as_os_str().as_bytes().to_vec())
            }
            Err(e) => return Ok(Read_::Skipped(format!("unreadable: {e}"))),
        }
    } else if file_type.is_file() {
        if meta.len() > max_file_size {
            return Ok(Read_::Skipped(format!(
                "too_large: {} bytes, limit {max_file_size}",
                meta.len()
            )));
        }
        let kind = if meta.mode() & 0o100 != 0 {
            EntryKind::Executable
        } else {
            EntryKind::File
        };
        match read_no_follow(&full) {
            Ok(content) => (kind, content),
            Err(e) => return Ok(Read_::Skipped(format!("unreadable: {e}"))),
        }
    } else if file_type.is_dir() {
        return Ok(Read_::Absent);
    } else {
        return Ok(Read_::Skipped("special_file".into()));
    };
    let id = match sink {
        BlobSink::Store => vault.write_blob(&content)?,
        BlobSink::HashOnly => vault.hash_blob(&content)?,
    };
    Ok(Read_::Captured(CapturedFile {
        item: TreeItem { kind, id },
        size: content.len() as u64,
    }))
}

/// Captures the worktree of `vault`.
pub fn capture(vault: &Vault, max_file_size: u64, sink: BlobSink) -> Result<Capture, CkptError> {
    let listing = vault.list_worktree()?;
    let mut out = Capture {
        ignored: listing.ignored,
        warnings: listing
            .unrepresentable
            .into_iter()
            .map(|(name, why)| format!("not protected: {name:?}: {why}"))
            .collect(),
        ..Capture::default()
    };
    let mut ancestors = AncestorCheck {
        root: vault.workdir(),
        known: HashMap::new(),
    };
    let mut candidates: Vec<RepoPath> = Vec::with_capacity(listing.tracked.len() + listing.untracked.len());
    for (path, item) in listing.tracked {
        if item.kind == EntryKind::Gitlink {
            let full = vault.workdir().join(path.to_os_path());
            if ancestors.reachable(&path) && fs::symlink_metadata(&full).map(|m| m.is_dir()).unwrap_or(false) {
                out.files.insert(path.clone(), CapturedFile { item, size: 0 });
                out.skipped.push((path, "submodule".into()));
            }
            continue;
        }
        candidates.push(path);
    }
    candidates.extend(listing.untracked);
    for path in listing.nested_repos {
        out.skipped.push((path, "nested_repo".into()));
    }
    for path in candidates {
        if out.files.contains_key(&path) || !ancestors.reachable(&path) {
            continue;
        }
        if path.components().last().and_then(temp_file_owner).is_some() {
            out.skipped.push((path, "ckpt_temp_file".into()));
            continue;
        }
        match capture_one(vault, &path, max_file_size, sink)? {
            Read_::Captured(file) => {
                out.files.insert(path, file);
            }
            Read_::Skipped(reason) => out.skipped.push((path, reason)),
            Read_::Absent => {}
        }
    }
    out.skipped.sort();
    out.skipped.dedup();
    Ok(out)
}
