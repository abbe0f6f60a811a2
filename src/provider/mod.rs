//! Providers: what a checkpoint is made of and how it is put back. Owns the snapshot and restore
//! transactions (capture → tree → commit → pin → record; preview → confirm → guard → journal →
//! write → verify) and the error vocabulary the CLI reports. It never writes to a repository or
//! the worktree except through `crate::verbs`, and never decides how results are printed.

pub mod copy;
pub mod diff;
pub mod engine;
pub mod plan;
pub mod progress;
pub mod report;
pub mod retention;
pub mod scan;
pub mod settle;
pub mod target;
pub mod trace;
pub mod treebuild;
pub mod watch;

use std::path::{Component, Path, PathBuf};

use crate::records::{Kind, Record, RecordsError, Skipped};
use crate::verbs::{InvalidInput, RepoPath, VerbError};

/// Every failure a command can report, with its JSON `code` and exit status.
#[derive(Debug, thiserror::Error)]
pub enum CkptError {
    #[error("{0}")]
    NoProvider(String),
    #[error("{0}")]
    NotFound(String),
    #[error("target {target:?} is ambiguous; candidates:\n  {}", candidates.join("\n  "))]
    Ambiguous { target: String, candidates: Vec<String> },
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    InvalidInput(String),
    /// A registry record that does not hold up against the repository (tampered or damaged):
    /// ckpt's own state is wrong, not the user's command line.
    #[error("{0}")]
    CorruptRecord(String),
    #[error(transparent)]
    Records(#[from] RecordsError),
    #[error(transparent)]
    Verb(#[from] VerbError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<InvalidInput> for CkptError {
    fn from(e: InvalidInput) -> Self {
        CkptError::InvalidInput(e.to_string())
    }
}

/// Metadata for one snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotRequest {
    pub session: Option<String>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub trigger: Option<String>,
    pub kind: Kind,
    pub max_file_size: u64,
    /// Ask the workspace's watch daemon what changed instead of walking (it falls back to a
    /// full scan whenever the daemon cannot vouch for the answer).
    pub watch: bool,
    /// The first checkpoint of a turn (an agent hook's step 1): when nothing changed since the
    /// newest checkpoint but that one is another session's or another turn's, this turn still
    /// gets its own (the same tree, no new content), so `turn:T` names the state before turn T
    /// rather than a later step.
    pub opens_turn: bool,
}

/// How a snapshot learned what is in the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanMode {
    /// The watch daemon vouched that nothing changed since the last checkpoint.
    Watch,
    /// A full walk; with `--watch`, `fallback` says why the daemon's answer was not used.
    Full { fallback: Option<String> },
}

#[derive(Debug, Clone)]
pub struct SnapshotOutcome {
    pub record: Record,
    pub created: bool,
    /// What is not protected now (for a no-op, the record's list may be older).
    pub not_protected: Vec<Skipped>,
    pub warnings: Vec<String>,
    pub scan_mode: ScanMode,
    /// How the capture was served: from the stat cache, the index, or by reading files.
    pub scan: scan::CaptureStats,
}

/// Which paths a preview or restore covers.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub paths: Vec<RepoPath>,
    pub exact: bool,
}

impl Selection {
    /// Whether the restore looks at `path`: every path without a filter, else one within a
    /// filter or holding one.
    pub fn reaches(&self, path: &RepoPath) -> bool {
        self.paths.is_empty() || self.paths.iter().any(|f| path.is_within(f) || f.is_within(path))
    }
}

#[derive(Debug, Clone)]
pub struct Preview {
    pub id: String,
    pub overwrite: Vec<RepoPath>,
    pub unchanged: usize,
    pub created_after: Vec<RepoPath>,
    pub delete: Vec<RepoPath>,
    pub conflicts: Vec<(RepoPath, String)>,
    pub not_protected: Vec<(RepoPath, String)>,
    pub exact: bool,
}

#[derive(Debug, Clone)]
pub struct RestoreReport {
    pub id: String,
    pub guard: Option<String>,
    pub guard_created: bool,
    /// The guard was a watched snapshot (the daemon vouched for what changed), so the restore
    /// looked at the paths it touches, not the whole worktree.
    pub guard_watched: bool,
    /// Why a guard taken with `--watch` (or a running daemon) was a full scan instead.
    pub guard_fallback: Option<String>,
    pub written: Vec<RepoPath>,
    pub deleted: Vec<RepoPath>,
    pub left: Vec<RepoPath>,
    /// Paths in the worktree the guard saw but could not protect (too large, unreadable, a
    /// special file): ckpt has no evidence about them, so the restore left them as they are,
    /// with `--exact` too.
    pub not_protected: Vec<(RepoPath, String)>,
    pub unchanged: usize,
    pub failed: Vec<(RepoPath, String)>,
    pub verified: bool,
}

/// One changed path with the bytes on both sides (none for a submodule pointer or a missing side).
#[derive(Debug, Clone)]
pub struct FileDiff {
    pub change: diff::FileChange,
    pub old: Option<Vec<u8>>,
    pub new: Option<Vec<u8>>,
    pub binary: bool,
    pub added: usize,
    pub removed: usize,
}

/// What `ckpt status` reports: protection now, checkpoints, and what they cost on disk.
#[derive(Debug, Clone, Default)]
pub struct StatusReport {
    pub provider: &'static str,
    pub protected: usize,
    pub not_protected: Vec<(RepoPath, String)>,
    /// Not protected and no repository path at all (`.Git`), as records keep such paths.
    pub unnamable: Vec<Skipped>,
    pub checkpoints: Vec<Record>,
    /// Content only ckpt keeps alive (not in HEAD's tree nor in the index).
    pub ckpt_only_bytes: u64,
    /// Content of checkpoints that the user's HEAD or index holds too.
    pub shared_bytes: u64,
    pub blobs: usize,
}

/// One thing wrong with a workspace's ckpt state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub code: &'static str,
    pub message: String,
    pub id: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    pub records: usize,
    pub refs: usize,
    pub problems: Vec<Problem>,
}

/// What `doctor --fix` does with an interrupted restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalFix {
    /// Put the worktree back as the restore's guard captured it.
    RollBack,
    /// Run the interrupted restore again to its end.
    Complete,
}

#[derive(Debug, Clone, Default)]
pub struct DoctorReport {
    pub problems: Vec<Problem>,
    /// What was done (with a fix) or would be done (without).
    pub actions: Vec<String>,
    pub fixed: bool,
    /// Problems left after fixing.
    pub remaining: Vec<Problem>,
    pub restore: Option<RestoreReport>,
}

/// How a restore is confirmed: already (`--yes`), or by asking after showing the preview.
pub enum Confirmation<'a> {
    Given,
    Ask(&'a mut dyn FnMut(&Preview) -> bool),
}

/// The operations every provider offers.
pub trait Provider {
    fn name(&self) -> &'static str;
    fn workdir(&self) -> &Path;
    /// Where this workspace's watch daemon keeps its lock, socket and cookies.
    fn watch_files(&self) -> crate::records::watch::WatchFiles;
    /// Where agents' hooks keep their sessions' turn and step in this workspace.
    fn hook_positions(&self) -> crate::records::hooks::HookPositions;
    /// Where automatic retention notes when it last looked and what it removed.
    fn retention_file(&self) -> crate::records::retention::RetentionFile;
    /// ckpt's own directories inside the worktree (a store kept there), absolute.
    fn own_dirs(&self) -> Vec<PathBuf>;
    /// A file that exists while this workspace's repository does (its `HEAD`): a watch daemon
    /// whose repository is gone has nothing to serve, even if its worktree is still there.
    fn repository_marker(&self) -> Option<PathBuf> {
        None
    }
    fn snapshot(&self, request: &SnapshotRequest) -> Result<SnapshotOutcome, CkptError>;
    /// Merges the packs this workspace's snapshots wrote into the repository once there are more
    /// than `more_than`, and compresses (merges on their own) those written uncompressed (the
    /// git provider; a copy store writes none). What it did, if anything.
    fn merge_own_packs(&self, more_than: usize) -> Result<Option<String>, CkptError> {
        let _ = more_than;
        Ok(None)
    }
    /// This workspace's checkpoints (or every workspace's), oldest first.
    fn checkpoints(&self, all_workspaces: bool) -> Result<Vec<Record>, CkptError>;
    fn preview(&self, record: &Record, selection: &Selection, max_file_size: u64) -> Result<Preview, CkptError>;
    fn restore(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError>;
    /// What changed from checkpoint `from` to checkpoint `to` (or to the worktree, read-only).
    fn diff(
        &self,
        from: &Record,
        to: Option<&Record>,
        paths: &[RepoPath],
        max_file_size: u64,
    ) -> Result<Vec<FileDiff>, CkptError>;
    /// One file's bytes as a checkpoint holds it (`None`: no regular file at that path).
    fn file_at(&self, record: &Record, path: &RepoPath) -> Result<Option<Vec<u8>>, CkptError>;
    /// The blob id `bytes` would have in this store (hex; nothing is written).
    fn content_id(&self, bytes: &[u8]) -> Result<String, CkptError>;
    /// A checkpoint (published with `request`) of the worktree as it is now, snapshotted first
    /// with `now`, but with each of `files` holding its bytes: a state a restore of those paths
    /// then produces (the snapshot of now when nothing needs replacing). A file whose path is a
    /// directory, symlink or submodule now, lies below a
    /// non-directory, or is not protected by the snapshot of now is refused (and named). Writes
    /// no worktree file.
    fn materialize(
        &self,
        now: &SnapshotRequest,
        request: &SnapshotRequest,
        files: &[(RepoPath, Vec<u8>)],
        named: &[RepoPath],
    ) -> Result<engine::Materialized, CkptError>;
    /// Read-only: which of `files` a [`Provider::materialize`] would refuse now, and why (a
    /// dry run; stores nothing).
    fn materialize_refusals(
        &self,
        max_file_size: u64,
        files: &[RepoPath],
        named: &[RepoPath],
    ) -> Result<Vec<(RepoPath, String)>, CkptError>;
    /// Deletes these checkpoints (unpins, then drops the records); returns the ids removed.
    /// Objects are left to git's gc (git provider) or `ckpt gc` (copy store).
    fn remove(&self, ids: &[String]) -> Result<Vec<String>, CkptError>;
    /// Read-only: what is protected now and why the rest is not, and what checkpoints cost.
    fn status(&self, max_file_size: u64) -> Result<StatusReport, CkptError>;
    /// Read-only consistency check of this workspace's ckpt state.
    fn audit(&self) -> Result<AuditReport, CkptError>;
    /// Reports problems and, with `fix`, repairs them.
    fn doctor(&self, fix: Option<JournalFix>) -> Result<DoctorReport, CkptError>;
}

/// Which provider a command asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// git inside a repository whose HEAD is born, copy otherwise.
    Auto,
    Git,
    Copy,
}

impl ProviderChoice {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "auto" => Some(ProviderChoice::Auto),
            "git" => Some(ProviderChoice::Git),
            "copy" => Some(ProviderChoice::Copy),
            _ => None,
        }
    }
}

/// Picks the provider for `dir`. With `auto`, a repository whose first commit came after copy
/// checkpoints were taken keeps those checkpoints listed and restorable (by the copy provider),
/// and a repository whose HEAD became unborn again (`git checkout --orphan`) keeps its git
/// checkpoints and goes on taking them: a workspace has one timeline whatever HEAD is.
/// `copy_excludes` replaces the copy provider's default exclude patterns (from the config file).
pub fn open(
    dir: &Path,
    choice: ProviderChoice,
    reporter: report::Reporter,
    copy_excludes: Option<Vec<String>>,
) -> Result<Box<dyn Provider>, CkptError> {
    let excludes = copy_excludes.as_deref();
    match choice {
        ProviderChoice::Git => Ok(Box::new(engine::Engine::open(dir, reporter)?)),
        ProviderChoice::Copy => Ok(Box::new(engine::Engine::open_copy(dir, reporter, excludes)?)),
        ProviderChoice::Auto => match engine::Engine::open(dir, reporter.clone()) {
            Ok(primary) if primary.head_is_unborn()? && !primary.has_checkpoints()? => {
                Ok(Box::new(engine::Engine::open_copy(dir, reporter, excludes)?))
            }
            Ok(primary) => {
                let layout = copy::CopyLayout::for_root(primary.workdir());
                let has_copies = layout.is_ok_and(|l| l.state_dir.join("records.json").is_file());
                if has_copies {
                    let earlier = engine::Engine::open_copy(dir, reporter, excludes)?;
                    Ok(Box::new(CopyThenGit { primary, earlier }))
                } else {
                    Ok(Box::new(primary))
                }
            }
            Err(CkptError::NoProvider(why)) => match unreadable_git_above(dir) {
                // A repository ckpt may not read is not a plain directory: copies taken in its
                // place would start another timeline, silently.
                Some((git, error)) => Err(CkptError::Refused(format!(
                    "{} holds a git repository at {} that ckpt cannot read ({error}); fix its permissions (git itself cannot use it either), or run ckpt with --provider copy to protect the files alone ({why})",
                    dir.display(),
                    git.display()
                ))),
                None => Ok(Box::new(engine::Engine::open_copy(dir, reporter, excludes)?)),
            },
            Err(e) => Err(e),
        },
    }
}

/// The nearest `.git` above `dir` (or at it) that exists but this user may not read, and why:
/// a directory it may not list, or a `.git` file naming one. Read-only.
fn unreadable_git_above(dir: &Path) -> Option<(PathBuf, std::io::Error)> {
    let start = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for ancestor in start.ancestors() {
        let git = ancestor.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&git) else {
            continue;
        };
        let readable = if meta.is_file() {
            // A linked worktree's `.git` file names its administrative directory.
            std::fs::read_to_string(&git).and_then(|text| {
                let named = text
                    .trim()
                    .strip_prefix("gitdir:")
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_owned();
                std::fs::read_dir(ancestor.join(named)).map(drop)
            })
        } else {
            std::fs::read_dir(&git).map(drop)
        };
        return readable
            .err()
            .filter(|error| error.kind() == std::io::ErrorKind::PermissionDenied)
            .map(|error| (git, error));
    }
    None
}

/// The git provider over a workspace that also has copy checkpoints from before its first
/// commit: new checkpoints go to git; each old one is still served by the copy provider.
struct CopyThenGit {
    primary: engine::Engine,
    earlier: engine::Engine,
}

impl CopyThenGit {
    fn owner(&self, record: &Record) -> &engine::Engine {
        if record.provider == self.earlier.name() {
            &self.earlier
        } else {
            &self.primary
        }
    }
}

impl Provider for CopyThenGit {
    fn name(&self) -> &'static str {
        self.primary.name()
    }
    fn merge_own_packs(&self, more_than: usize) -> Result<Option<String>, CkptError> {
        self.primary.merge_own_packs(more_than)
    }
    fn file_at(&self, record: &Record, path: &RepoPath) -> Result<Option<Vec<u8>>, CkptError> {
        self.owner(record).file_at(record, path)
    }
    fn content_id(&self, bytes: &[u8]) -> Result<String, CkptError> {
        self.primary.content_id(bytes)
    }
    fn materialize(
        &self,
        now: &SnapshotRequest,
        request: &SnapshotRequest,
        files: &[(RepoPath, Vec<u8>)],
        named: &[RepoPath],
    ) -> Result<engine::Materialized, CkptError> {
        self.primary.materialize(now, request, files, named)
    }
    fn materialize_refusals(
        &self,
        max_file_size: u64,
        files: &[RepoPath],
        named: &[RepoPath],
    ) -> Result<Vec<(RepoPath, String)>, CkptError> {
        self.primary.materialize_refusals(max_file_size, files, named)
    }
    fn workdir(&self) -> &Path {
        self.primary.workdir()
    }
    fn watch_files(&self) -> crate::records::watch::WatchFiles {
        self.primary.watch_files()
    }
    fn hook_positions(&self) -> crate::records::hooks::HookPositions {
        self.primary.hook_positions()
    }
    fn retention_file(&self) -> crate::records::retention::RetentionFile {
        self.primary.retention_file()
    }
    fn repository_marker(&self) -> Option<PathBuf> {
        self.primary.repository_marker()
    }
    fn own_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.primary.own_dirs();
        dirs.extend(self.earlier.own_dirs());
        dirs
    }
    fn snapshot(&self, request: &SnapshotRequest) -> Result<SnapshotOutcome, CkptError> {
        self.primary.snapshot(request)
    }
    fn checkpoints(&self, all_workspaces: bool) -> Result<Vec<Record>, CkptError> {
        let mut all = self.earlier.checkpoints(false)?;
        all.extend(self.primary.checkpoints(all_workspaces)?);
        all.sort_by(|a, b| a.time.cmp(&b.time));
        Ok(all)
    }
    fn preview(&self, record: &Record, selection: &Selection, max_file_size: u64) -> Result<Preview, CkptError> {
        self.owner(record).preview(record, selection, max_file_size)
    }
    fn restore(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError> {
        self.owner(record).restore(record, selection, request, confirmation)
    }
    fn diff(
        &self,
        from: &Record,
        to: Option<&Record>,
        paths: &[RepoPath],
        max_file_size: u64,
    ) -> Result<Vec<FileDiff>, CkptError> {
        match to {
            Some(to) if to.provider != from.provider => Err(CkptError::InvalidInput(format!(
                "{} is a {} checkpoint and {} a {} one; diff one of them against the worktree instead",
                from.short(),
                from.provider,
                to.short(),
                to.provider
            ))),
            _ => self.owner(from).diff(from, to, paths, max_file_size),
        }
    }
    fn status(&self, max_file_size: u64) -> Result<StatusReport, CkptError> {
        let mut report = self.primary.status(max_file_size)?;
        let earlier = self.earlier.status(max_file_size)?;
        report.checkpoints.extend(earlier.checkpoints);
        report.checkpoints.sort_by(|a, b| a.time.cmp(&b.time));
        report.ckpt_only_bytes += earlier.ckpt_only_bytes;
        report.blobs += earlier.blobs;
        Ok(report)
    }
    fn remove(&self, ids: &[String]) -> Result<Vec<String>, CkptError> {
        let earlier: std::collections::HashSet<String> =
            self.earlier.checkpoints(false)?.into_iter().map(|r| r.id).collect();
        let (old, new): (Vec<String>, Vec<String>) = ids.iter().cloned().partition(|id| earlier.contains(id));
        let mut removed = self.earlier.remove(&old)?;
        removed.extend(self.primary.remove(&new)?);
        Ok(removed)
    }
    fn audit(&self) -> Result<AuditReport, CkptError> {
        let mut report = self.primary.audit()?;
        let earlier = self.earlier.audit()?;
        report.records += earlier.records;
        report.refs += earlier.refs;
        report.problems.extend(earlier.problems);
        Ok(report)
    }
    fn doctor(&self, fix: Option<JournalFix>) -> Result<DoctorReport, CkptError> {
        let mut report = self.primary.doctor(fix)?;
        let earlier = self.earlier.doctor(fix)?;
        report.problems.extend(earlier.problems);
        report.actions.extend(earlier.actions);
        report.remaining.extend(earlier.remaining);
        Ok(report)
    }
}

/// Turns a path the user typed (relative to `cwd`, or absolute) into a repository path,
/// lexically, refusing anything outside `workdir`.
pub fn repo_path_from_user(workdir: &Path, cwd: &Path, arg: &Path) -> Result<RepoPath, CkptError> {
    use std::os::unix::ffi::OsStrExt;
    let joined = if arg.is_absolute() {
        arg.to_path_buf()
    } else {
        cwd.join(arg)
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in joined.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => parts.clear(),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(name) => parts.push(name),
        }
    }
    let mut normalized = PathBuf::from("/");
    normalized.extend(parts);
    let outside = || {
        CkptError::InvalidInput(format!(
            "path {} is outside the workspace {}",
            arg.display(),
            workdir.display()
        ))
    };
    let relative = normalized.strip_prefix(workdir).map_err(|_| outside())?;
    if relative.as_os_str().is_empty() {
        return Err(CkptError::InvalidInput(format!(
            "path {} is the whole workspace; omit the path to restore everything",
            arg.display()
        )));
    }
    RepoPath::new(relative.as_os_str().as_bytes().to_vec()).map_err(|e| CkptError::InvalidInput(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_paths_are_anchored_and_confined() {
        let root = Path::new("/repo");
        let cwd = Path::new("/repo/sub");
        let ok = |arg: &str| repo_path_from_user(root, cwd, Path::new(arg)).map(|p| p.display()).ok();
        assert_eq!(ok("a.txt").as_deref(), Some("sub/a.txt"));
        assert_eq!(ok("../top.txt").as_deref(), Some("top.txt"));
        assert_eq!(ok("./x/../y").as_deref(), Some("sub/y"));
        assert_eq!(ok("/repo/z").as_deref(), Some("z"));
        assert_eq!(ok("-leading").as_deref(), Some("sub/-leading"));
        assert_eq!(ok("../../etc/passwd"), None);
        assert_eq!(ok("/etc/passwd"), None);
        assert_eq!(ok(".."), None);
        assert_eq!(ok("../.git/config"), None);
        assert_eq!(ok("/repository/x"), None);
    }
}
