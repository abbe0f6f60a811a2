//! The untracked side of the worktree listing, read-only: a walk with git's ignore rules (its
//! rule files looked at before anything opens them), scoped walks, and what would be ignored or
//! is a repository of its own. Nothing here writes anything.

use std::path::{Path, PathBuf};

use gix::bstr::BStr;

use super::listed::{PathScope, WorktreeListing};
use super::Vault;
use crate::verbs::types::RepoPath;
use crate::verbs::{EntryKind, ObjectId, VerbError};

/// Where git reads ignore rules, looked at before anything opens them: an ignore file that is a
/// FIFO, socket or device is refused with its path. gix, like git, opens an ignore file with a
/// blocking `open`, so a FIFO named `.gitignore` made a snapshot wait for a writer forever
/// while it held the workspace lock (`git status` waits too). `lstat` only; each directory is
/// looked at once.
pub(crate) struct IgnoreFiles<'a> {
    root: &'a Path,
    checked: std::collections::HashSet<Vec<u8>>,
}

impl<'a> IgnoreFiles<'a> {
    /// Looks at the exclude files outside the worktree (`info/exclude`, the global one) and the
    /// worktree root's `.gitignore`.
    pub(crate) fn new(repo: &gix::Repository, root: &'a Path) -> Result<Self, VerbError> {
        let mut outside = vec![repo.common_dir().join("info/exclude")];
        // The global file as gix picks it: `core.excludesFile` when it names a file, else the
        // XDG default (also when the setting is empty, where git reads neither: gix would
        // still wait on a FIFO there, so it is refused then too).
        match repo.config_snapshot().trusted_path("core.excludesFile") {
            Ok(Some(configured)) => outside.push(configured),
            Ok(None) => {
                if let Some(config_home) = std::env::var_os("XDG_CONFIG_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
                {
                    outside.push(config_home.join("git/ignore"));
                }
            }
            Err(_) => {}
        }
        for file in outside {
            // Read through symlinks (only a worktree's own `.gitignore` is not followed).
            refuse_blocking_rule_file(&file, file.display().to_string(), Follow::Links)?;
        }
        let mut files = IgnoreFiles {
            root,
            checked: std::collections::HashSet::new(),
        };
        files.in_dir(b"")?;
        Ok(files)
    }

    /// Looks at the `.gitignore` of the worktree directory `dir` (`b""`: the root).
    pub(crate) fn in_dir(&mut self, dir: &[u8]) -> Result<(), VerbError> {
        if self.checked.contains(dir) {
            return Ok(());
        }
        let shown = if dir.is_empty() {
            ".gitignore".to_owned()
        } else {
            format!("{}/.gitignore", String::from_utf8_lossy(dir))
        };
        let full = match RepoPath::new(dir.to_vec()) {
            Ok(dir) => self.root.join(dir.to_os_path()).join(".gitignore"),
            Err(_) => self.root.join(".gitignore"),
        };
        refuse_blocking_rule_file(&full, shown, Follow::NotLinks)?;
        self.checked.insert(dir.to_vec());
        Ok(())
    }

    /// Looks at the `.gitignore` of every directory above `path`: what git's ignore rules for
    /// `path` are read from.
    pub(crate) fn above(&mut self, path: &RepoPath) -> Result<(), VerbError> {
        for dir in path.ancestors() {
            self.in_dir(dir.as_bytes())?;
        }
        Ok(())
    }
}

/// Whether the reader of a rules file follows a symlink there: git and gix read a worktree's
/// own `.gitignore` and `.gitattributes` without following one, every other rules file through
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    Links,
    NotLinks,
}

/// Refuses `path` when it is (or, with [`Follow::Links`], leads to) a FIFO, socket or device,
/// with `shown` as its name; anything else (absent, a file, a directory, a dangling link) is
/// left to the reader.
pub fn refuse_blocking_rule_file(path: &Path, shown: String, follow: Follow) -> Result<(), VerbError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match follow {
        Follow::Links => std::fs::metadata(path),
        Follow::NotLinks => std::fs::symlink_metadata(path),
    };
    let Ok(meta) = meta else {
        return Ok(());
    };
    let kind = meta.file_type();
    let (what, why) = if kind.is_fifo() {
        ("a FIFO", "reading it waits forever for a writer, as `git status` does")
    } else if kind.is_socket() {
        ("a socket", "it holds no rules to read")
    } else if kind.is_block_device() || kind.is_char_device() {
        ("a device", "reading it may never end")
    } else {
        return Ok(());
    };
    Err(VerbError::Worktree {
        path: shown,
        message: format!(
            "is {what} where rules are read from a file ({why}), so ckpt refuses it. Remove it, or make it a regular file"
        ),
    })
}

/// gix's walk delegate, with each directory's `.gitignore` looked at ([`IgnoreFiles`]) before
/// the walk enters the directory and reads it. A refusal ends the walk.
struct CheckingIgnoreFiles<'d, 'f, 'r, 'g> {
    inner: &'d mut dyn gix::dir::walk::Delegate,
    files: &'f mut IgnoreFiles<'r>,
    repo: &'g gix::Repository,
    index: &'g gix::index::File,
    refused: Option<VerbError>,
    /// Directories ignored by a rule whose own `.gitignore` would block a read: git never reads
    /// rules inside an ignored directory, while gix, entering one for its tracked files, would.
    /// They are left unentered and listed as ignored as a whole.
    ignored_unentered: Vec<RepoPath>,
    /// Untracked directories this process may not list or enter (a `chmod 000` directory, a
    /// container's data directory of another user): left unentered and reported, as `git status`
    /// warns and goes on, rather than failing the whole walk.
    unreadable_dirs: Vec<(RepoPath, String)>,
    root: &'g Path,
}

impl CheckingIgnoreFiles<'_, '_, '_, '_> {
    /// Whether git's rules (read from the directories above, already looked at) ignore `dir`.
    fn is_ignored_dir(&self, dir: &BStr) -> Result<bool, VerbError> {
        let mut excludes = exclude_stack(self.repo, self.index)?;
        let platform = excludes
            .at_entry(dir, Some(gix::index::entry::Mode::DIR))
            .map_err(|e| VerbError::git(format!("reading the ignore rules for {dir}"), e))?;
        Ok(platform.is_excluded())
    }
}

impl gix::dir::walk::Delegate for CheckingIgnoreFiles<'_, '_, '_, '_> {
    fn emit(
        &mut self,
        entry: gix::dir::EntryRef<'_>,
        collapsed_directory_status: Option<gix::dir::entry::Status>,
    ) -> gix::dir::walk::Action {
        if self.refused.is_some() {
            return std::ops::ControlFlow::Break(());
        }
        self.inner.emit(entry, collapsed_directory_status)
    }

    fn can_recurse(
        &mut self,
        entry: gix::dir::EntryRef<'_>,
        for_deletion: Option<gix::dir::walk::ForDeletionMode>,
        worktree_root_is_repository: bool,
    ) -> bool {
        if self.refused.is_some()
            || !self
                .inner
                .can_recurse(entry.clone(), for_deletion, worktree_root_is_repository)
        {
            return false;
        }
        let full = self
            .root
            .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                entry.rela_path.as_ref(),
            ));
        if let Some(why) = cannot_list(&full) {
            if !matches!(entry.status, gix::dir::entry::Status::Ignored(_)) {
                if let Ok(dir) = RepoPath::new(entry.rela_path.to_vec()) {
                    self.unreadable_dirs.push((dir, why));
                }
            }
            return false;
        }
        let refusal = match self.files.in_dir(&entry.rela_path) {
            Ok(()) => return true,
            Err(refusal) => refusal,
        };
        if matches!(entry.status, gix::dir::entry::Status::Ignored(_)) {
            // Left unentered, the walk reports it as ignored as a whole, which it is.
            return false;
        }
        match self.is_ignored_dir(entry.rela_path.as_ref()) {
            Ok(true) => match RepoPath::new(entry.rela_path.to_vec()) {
                Ok(dir) => {
                    self.ignored_unentered.push(dir);
                    false
                }
                Err(_) => {
                    self.refused = Some(refusal);
                    false
                }
            },
            Ok(false) => {
                self.refused = Some(refusal);
                false
            }
            Err(e) => {
                self.refused = Some(e);
                false
            }
        }
    }
}

/// Why an untracked symlink named `.gitmodules` is not captured: `git fsck` rejects any tree
/// that holds one (`gitmodulesSymlink`), and git itself refuses to add it.
const GITMODULES_LINK: &str = "a symlink named .gitmodules, which git fsck rejects in a tree";

fn is_gitmodules_link(path: &RepoPath) -> bool {
    path.components().last().is_some_and(crate::verbs::names_gitmodules)
}

/// Why this process cannot list and enter `dir`, or `None` when it can: no read and search
/// permission (judged with its effective ids, as the walk's own open would be), or a path the
/// system cannot name (nested deeper than its path limit: git warns and goes on; the walk
/// would fail).
fn cannot_list(dir: &Path) -> Option<String> {
    use rustix::fs::{accessat, Access, AtFlags, CWD};
    match accessat(CWD, dir, Access::READ_OK | Access::EXEC_OK, AtFlags::EACCESS) {
        Err(rustix::io::Errno::ACCESS) => Some("permission denied (a directory ckpt may not list)".to_owned()),
        Err(rustix::io::Errno::NAMETOOLONG) => Some(format!(
            "its path of {} bytes is longer than this system can name",
            dir.as_os_str().len()
        )),
        _ => None,
    }
}

/// How many times the walk for untracked paths is taken when the worktree changes under it.
const WALK_ATTEMPTS: u32 = 8;

/// Whether the walk failed because a directory went away (or became a file) under it, which a
/// second walk settles; any other failure (a name too long, no permission) would only repeat.
fn a_directory_vanished(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            let vanished = [rustix::io::Errno::NOENT, rustix::io::Errno::NOTDIR]
                .iter()
                .any(|errno| io.raw_os_error() == Some(errno.raw_os_error()));
            return vanished;
        }
        cause = e.source();
    }
    false
}

/// What the walk for untracked paths finds: the walk half of a [`WorktreeListing`].
pub(super) fn walk_untracked(
    repo: &gix::Repository,
    index: &gix::index::File,
    scope: Option<&PathScope>,
) -> Result<WorktreeListing, VerbError> {
    let options = repo
        .dirwalk_options()
        .map_err(|e| VerbError::git("preparing the worktree walk", e))?
        .emit_tracked(false)
        .emit_untracked(gix::dir::walk::EmissionMode::Matching)
        .emit_ignored(Some(gix::dir::walk::EmissionMode::CollapseDirectory))
        .emit_pruned(false)
        .emit_empty_directories(false)
        .recurse_repositories(false)
        .classify_untracked_bare_repositories(true)
        .symlinks_to_directories_are_ignored_like_directories(false);
    let mut collect = gix::dir::walk::delegate::Collect::default();
    let interrupt = std::sync::atomic::AtomicBool::new(false);
    let patterns: Vec<gix::bstr::BString> = scope.map(PathScope::pathspecs).unwrap_or_default();
    let root = repo.workdir().unwrap_or_else(|| Path::new("."));
    let mut ignore_files = IgnoreFiles::new(repo, root)?;
    if let Some(scope) = scope {
        // A scoped walk starts below the root, where gix reads the rules of the directories above.
        for path in scope.paths() {
            ignore_files.above(&path)?;
        }
    }
    // A directory removed while the walk is inside it fails gix's walk; git treats such a path
    // as absent, so the walk is simply taken again (a bounded number of times).
    let mut attempt = 1;
    let mut ignored_unentered;
    let mut unreadable_dirs;
    loop {
        let mut checking = CheckingIgnoreFiles {
            inner: &mut collect,
            files: &mut ignore_files,
            repo,
            index,
            refused: None,
            ignored_unentered: Vec::new(),
            unreadable_dirs: Vec::new(),
            root,
        };
        let walked = dirwalk_as_git_does(repo, index, &patterns, &interrupt, options, &mut checking);
        if let Some(refusal) = checking.refused {
            return Err(refusal);
        }
        ignored_unentered = checking.ignored_unentered;
        unreadable_dirs = checking.unreadable_dirs;
        match walked {
            Ok(()) => break,
            Err(e) if attempt < WALK_ATTEMPTS && a_directory_vanished(&e) => {
                attempt += 1;
                collect = gix::dir::walk::delegate::Collect::default();
            }
            Err(e) if a_directory_vanished(&e) => {
                return Err(VerbError::git(
                    format!("walking the worktree ({attempt} attempts; did directories keep vanishing?)"),
                    e,
                ))
            }
            Err(e) => return Err(e),
        }
    }
    let mut listing = WorktreeListing::default();
    listing
        .ignored
        .extend(ignored_unentered.into_iter().map(|dir| (dir, true)));
    listing.unreadable_dirs = unreadable_dirs;
    let mut collapsed: Vec<RepoPath> = Vec::new();
    for (entry, _) in collect.into_entries_by_path() {
        use gix::dir::entry::{Kind, Status};
        let raw = entry.rela_path;
        if raw.is_empty() {
            continue;
        }
        let path = match RepoPath::new(raw.to_vec()) {
            Ok(path) => path,
            Err(e) => {
                // An ignored name is never captured anyway, and a directory's files are named.
                let reported = matches!(entry.status, Status::Untracked | Status::Tracked)
                    && entry.disk_kind != Some(Kind::Directory);
                if reported {
                    listing.unrepresentable.push((raw.to_vec(), e.to_string()));
                }
                continue;
            }
        };
        match (entry.status, entry.disk_kind) {
            (Status::Ignored(_), Some(Kind::Directory)) => collapsed.push(path),
            (Status::Ignored(_), _) => listing.ignored.push((path, false)),
            (Status::Untracked, Some(Kind::Repository)) => listing.nested_repos.push(path),
            (Status::Untracked, Some(Kind::Directory)) => {}
            (Status::Untracked, Some(Kind::Symlink)) if is_gitmodules_link(&path) => {
                listing.unrepresentable.push((raw.to_vec(), GITMODULES_LINK.to_owned()));
            }
            (Status::Untracked, _) => listing.untracked.push(path),
            _ => {}
        }
    }
    if !collapsed.is_empty() {
        let mut excludes = exclude_stack(repo, index)?;
        for dir in collapsed {
            ignored_below(&mut excludes, &mut ignore_files, dir, &mut listing.ignored)?;
        }
    }
    listing.ignored.sort();
    Ok(listing)
}

/// gix's directory walk, except in a sparse checkout: gix prunes a directory whose index entries
/// are all skip-worktree (outside the cone) without looking inside, where git lists what was
/// created there (`git status` shows `?? out-of-cone/new.txt`). Such files must be captured, so
/// the walk sees an index without skip-worktree marks, while the ignore rules still come from
/// the real one (git reads a skip-worktree `.gitignore` from the index).
fn dirwalk_as_git_does(
    repo: &gix::Repository,
    index: &gix::index::File,
    patterns: &[gix::bstr::BString],
    interrupt: &std::sync::atomic::AtomicBool,
    options: gix::dirwalk::Options,
    delegate: &mut dyn gix::dir::walk::Delegate,
) -> Result<(), VerbError> {
    use gix::index::entry::Flags;
    let failed = |e| VerbError::git_because("walking the worktree", e);
    let patterns = patterns.iter().map(|p| p.as_ref() as &BStr);
    if !index
        .entries()
        .iter()
        .any(|entry| entry.flags.contains(Flags::SKIP_WORKTREE))
    {
        return repo
            .dirwalk(index, patterns, interrupt, options, delegate)
            .map(|_| ())
            .map_err(|e| VerbError::git("walking the worktree", e));
    }
    let workdir = repo
        .workdir()
        .ok_or_else(|| failed("the repository has no worktree".to_owned()))?;
    let mut excludes = exclude_stack(repo, index)?;
    let mut unmarked: gix::index::State = (**index).clone();
    // A sparse directory entry left after the expansion ([`Vault::read_index`]) is one whose
    // directory is not on disk as a directory: absent (nothing to walk), or a file or symlink
    // now, which git lists as untracked (`?? out`). Without the entry, the walk does the same.
    unmarked.remove_entries(|_, _, entry| entry.mode.is_sparse());
    for entry in unmarked.entries_mut() {
        entry.flags.remove(Flags::SKIP_WORKTREE);
    }
    let (mut search, mut attributes) = repo
        .pathspec(
            false,
            patterns,
            true,
            index,
            gix::worktree::stack::state::attributes::Source::WorktreeThenIdMapping,
        )
        .map_err(|e| VerbError::git("reading the walk's pathspecs", e))?
        .into_parts();
    let git_dir = gix::path::realpath_opts(repo.git_dir(), repo.current_dir(), gix::path::realpath::MAX_SYMLINKS)
        .map_err(|e| VerbError::git("resolving the git directory", e))?;
    let icase = repo
        .filesystem_options()
        .map_err(|e| VerbError::git("reading the filesystem options", e))?
        .ignore_case
        .then(|| unmarked.prepare_icase_backing());
    gix::dir::walk(
        workdir,
        gix::dir::walk::Context {
            should_interrupt: Some(interrupt),
            git_dir_realpath: &git_dir,
            current_dir: repo.current_dir(),
            index: &unmarked,
            ignore_case_index_lookup: icase.as_ref(),
            pathspec: &mut search,
            pathspec_attributes: &mut |path, case, is_dir, out| {
                let mode = if is_dir {
                    gix::index::entry::Mode::DIR
                } else {
                    gix::index::entry::Mode::FILE
                };
                attributes.as_mut().is_some_and(|stack| {
                    stack
                        .set_case(case)
                        .at_entry(path, Some(mode), &repo.objects)
                        .is_ok_and(|platform| platform.matching_attributes(out))
                })
            },
            excludes: Some(&mut excludes),
            objects: &repo.objects,
            explicit_traversal_root: Some(workdir),
        },
        options.into(),
        delegate,
    )
    .map(|_| ())
    .map_err(|e| VerbError::git("walking the worktree", e))
}

/// git's ignore rules for this worktree, from every source git reads.
fn exclude_stack<'repo>(
    repo: &'repo gix::Repository,
    index: &gix::index::File,
) -> Result<gix::AttributeStack<'repo>, VerbError> {
    // The index is read only for `.gitignore` files marked skip-worktree that are not on disk
    // (sparse checkouts: git reads those from the index). One that is on disk in any form is
    // git's to read from the worktree, as it clears the mark of a present file: a symlink or a
    // directory there gives no rules, not the tree's. So the stack gets an index of just the
    // absent ones; the usual index, with no skip-worktree entry, gives an empty one without a
    // look at every entry's path.
    use gix::index::entry::Flags;
    let mut from_index = gix::index::State::new(repo.object_hash());
    if index
        .entries()
        .iter()
        .any(|entry| entry.flags.contains(Flags::SKIP_WORKTREE))
    {
        let root = repo.workdir().unwrap_or_else(|| Path::new("."));
        for entry in index.entries() {
            let path = entry.path(index);
            let is_ignore_file = path == ".gitignore" || path.ends_with(b"/.gitignore");
            if !is_ignore_file || !entry.flags.contains(Flags::SKIP_WORKTREE) {
                continue;
            }
            let absent = RepoPath::new(path.to_vec()).is_ok_and(|rel| {
                std::fs::symlink_metadata(root.join(rel.to_os_path()))
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            });
            if absent {
                from_index.dangerously_push_entry(entry.stat, entry.id, entry.flags, entry.mode, path);
            }
        }
    }
    repo.excludes(
        &from_index,
        None,
        gix::worktree::stack::state::ignore::Source::WorktreeThenIdMappingIfNotSkipped,
    )
    .map_err(|e| VerbError::git("reading the ignore rules", e))
}

/// An ignored directory as what is ignored in it: the directory itself when an ignore rule
/// names it, else (the walk collapsed it because everything in it is ignored, say `*.log`
/// files) each entry below it, so a restore may still write a file there that is not ignored.
fn ignored_below(
    excludes: &mut gix::AttributeStack<'_>,
    ignore_files: &mut IgnoreFiles<'_>,
    dir: RepoPath,
    out: &mut Vec<(RepoPath, bool)>,
) -> Result<(), VerbError> {
    use gix::index::entry::Mode;
    let root = ignore_files.root;
    ignore_files.above(&dir)?;
    let named = excludes
        .at_entry(BStr::new(dir.as_bytes()), Some(Mode::DIR))
        .map_err(|e| VerbError::git(format!("reading the ignore rules for {}", dir.display()), e))?
        .is_excluded();
    let entries = match std::fs::read_dir(root.join(dir.to_os_path())) {
        Ok(entries) if !named => {
            // Rules for what is below are read from here.
            ignore_files.in_dir(dir.as_bytes())?;
            entries
        }
        // Named by a rule, or no longer readable as a directory: the directory as a whole.
        _ => {
            out.push((dir, true));
            return Ok(());
        }
    };
    for entry in entries.flatten() {
        let Ok(path) = dir.join(entry.file_name().as_encoded_bytes()) else {
            continue;
        };
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => ignored_below(excludes, ignore_files, path, out)?,
            _ => out.push((path, false)),
        }
    }
    Ok(())
}

/// What the walk finds within a scope, without walking from the root: each scope path that is a
/// file, symlink or special file is looked at alone (`lstat`, then git's ignore rules for it and
/// its directories); the scope's directories go to [`walk_untracked`] together, which walks
/// only them. `Ok(None)` when the scope reaches something only a whole walk classifies the way
/// git does: a case-insensitive filesystem, or an untracked directory that is a repository.
pub(super) fn walk_scope(
    repo: &gix::Repository,
    index: &gix::index::File,
    scope: &PathScope,
    root: &Path,
) -> Result<Option<WorktreeListing>, VerbError> {
    use gix::index::entry::Mode;
    let fs_caps = repo
        .filesystem_options()
        .map_err(|e| VerbError::git("reading the filesystem options", e))?;
    if fs_caps.ignore_case {
        return Ok(None);
    }
    let mut excludes = exclude_stack(repo, index)?;
    let mut ignore_files = IgnoreFiles::new(repo, root)?;
    let mut sorted: Vec<&Vec<u8>> = scope.paths.iter().collect();
    sorted.sort();
    let has_entries_below = |dir: &[u8]| {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        index.prefixed_entries_range(prefix.as_slice().into()).is_some()
    };
    let mut listing = WorktreeListing::default();
    let mut dirs: Vec<RepoPath> = Vec::new();
    // Directories above scope paths: whether what lies below them is hidden from git's walk
    // (ignored, a symlink, not a directory), decided once each.
    let mut hidden: std::collections::HashMap<Vec<u8>, bool> = std::collections::HashMap::new();
    for raw in sorted {
        let Ok(path) = RepoPath::new(raw.clone()) else {
            continue;
        };
        // Below another scope path: that one is walked (a directory) or nothing is below it.
        if path.ancestors().iter().any(|dir| scope.paths.contains(dir.as_bytes())) {
            continue;
        }
        // Inside a submodule: a walk never enters one (its pointer comes from the index).
        let in_submodule = |dir: &RepoPath| {
            index
                .entry_by_path(BStr::new(dir.as_bytes()))
                .is_some_and(|entry| entry.mode == Mode::COMMIT)
        };
        if path.ancestors().iter().any(in_submodule) {
            continue;
        }
        // First the directories above it: below a symlink, a non-directory or an ignored
        // directory, git's walk sees nothing (and a directory there is never walked). Even for a
        // path that is gone: a restore asks whether an ignored directory is in its way.
        let mut is_hidden = false;
        let mut ignored_dir = None;
        for dir in path.ancestors() {
            if let Some(known) = hidden.get(dir.as_bytes()) {
                if *known {
                    is_hidden = true;
                    break;
                }
                continue;
            }
            let on_disk = std::fs::symlink_metadata(root.join(dir.to_os_path()));
            let tracked_below = has_entries_below(dir.as_bytes());
            if !tracked_below && on_disk.as_ref().is_ok_and(|m| m.is_dir()) {
                let holds = |name: &str| std::fs::symlink_metadata(root.join(dir.to_os_path()).join(name)).is_ok();
                if holds(".git") || (holds("HEAD") && holds("objects") && holds("refs")) {
                    return Ok(None);
                }
            }
            ignore_files.above(&dir)?;
            let excluded = excludes
                .at_entry(BStr::new(dir.as_bytes()), Some(Mode::DIR))
                .map_err(|e| VerbError::git(format!("reading the ignore rules for {}", dir.display()), e))?
                .is_excluded();
            let is_dir = on_disk.is_ok_and(|m| m.is_dir());
            let dir_hidden = excluded || !is_dir;
            hidden.insert(dir.as_bytes().to_vec(), dir_hidden);
            // An ignored directory is listed only where one exists, as a whole walk lists it.
            if excluded && is_dir && ignored_dir.is_none() {
                ignored_dir = Some(dir.clone());
            }
            if dir_hidden {
                is_hidden = true;
                break;
            }
        }
        if let Some(dir) = ignored_dir {
            listing.ignored.push((dir, true));
        }
        if is_hidden {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(path.to_os_path())) else {
            continue;
        };
        if meta.is_dir() {
            dirs.push(path);
            continue;
        }
        if index.entry_index_by_path(raw.as_slice().into()).is_ok() {
            // Tracked: listed from the index.
            continue;
        }
        let mode = if meta.file_type().is_symlink() {
            Mode::SYMLINK
        } else {
            Mode::FILE
        };
        ignore_files.above(&path)?;
        let excluded = excludes
            .at_entry(BStr::new(raw.as_slice()), Some(mode))
            .map_err(|e| VerbError::git(format!("reading the ignore rules for {}", path.display()), e))?
            .is_excluded();
        if excluded {
            listing.ignored.push((path, false));
        } else if meta.file_type().is_symlink() && is_gitmodules_link(&path) {
            listing.unrepresentable.push((raw.clone(), GITMODULES_LINK.to_owned()));
        } else {
            listing.untracked.push(path);
        }
    }
    if !dirs.is_empty() {
        let walked = walk_untracked(repo, index, Some(&PathScope::new(dirs)))?;
        listing.untracked.extend(walked.untracked);
        listing.ignored.extend(walked.ignored);
        listing.nested_repos.extend(walked.nested_repos);
        listing.unrepresentable.extend(walked.unrepresentable);
        listing.unreadable_dirs.extend(walked.unreadable_dirs);
    }
    listing.untracked.sort();
    listing.untracked.dedup();
    listing.ignored.sort();
    listing.ignored.dedup();
    Ok(Some(listing))
}

impl Vault {
    /// Whether each of `paths` would be ignored if it were created now: not in the index, and
    /// excluded by git's ignore rules, itself or a directory above it. Read-only.
    pub fn would_be_ignored(&self, paths: &[RepoPath]) -> Result<Vec<bool>, VerbError> {
        use gix::index::entry::Mode;
        let index = self.read_index(true)?;
        let mut excludes = exclude_stack(&self.repo, &index)?;
        let mut ignore_files = IgnoreFiles::new(&self.repo, &self.workdir)?;
        let mut excluded = |path: &RepoPath, mode: Mode| -> Result<bool, VerbError> {
            ignore_files.above(path)?;
            Ok(excludes
                .at_entry(BStr::new(path.as_bytes()), Some(mode))
                .map_err(|e| VerbError::git(format!("reading the ignore rules for {}", path.display()), e))?
                .is_excluded())
        };
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let tracked = index.entry_by_path(BStr::new(path.as_bytes())).is_some();
            out.push(!tracked && excluded_here_or_above(path, &mut excluded)?);
        }
        Ok(out)
    }

    /// Whether each of `paths` is ignored by the rules `tree` carries: its own `.gitignore`
    /// files (regular files only, as git reads them from a checkout), with `info/exclude` and
    /// the global exclude file as they are now. What a checkpoint's tree lacks there it could
    /// never have held. Reads only the tree levels on the way to the paths. Read-only.
    pub fn ignored_in_tree(&self, tree: &ObjectId, paths: &[RepoPath]) -> Result<Vec<bool>, VerbError> {
        use gix::index::entry::{Flags, Mode, Stat};
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        // The outside files are opened by the stack: refuse a FIFO there first.
        IgnoreFiles::new(&self.repo, &self.workdir)?;
        let dirs: std::collections::BTreeSet<Option<RepoPath>> = paths
            .iter()
            .flat_map(|path| path.ancestors().into_iter().map(Some))
            .chain([None])
            .collect();
        let mut subtrees: std::collections::HashMap<Option<RepoPath>, Option<ObjectId>> =
            std::collections::HashMap::from([(None, Some(*tree))]);
        let mut rules = gix::index::State::new(self.repo.object_hash());
        // Parents sort before their children, so each level's tree is known when it is read.
        for dir in &dirs {
            let level = match dir {
                None => Some(*tree),
                Some(dir) => match (subtrees.get(&dir.parent()).copied().flatten(), dir.components().last()) {
                    (Some(parent), Some(name)) => self
                        .tree_level(&parent)?
                        .into_iter()
                        .find(|(entry, kind, _)| entry.as_slice() == name && kind.is_none())
                        .map(|(_, _, id)| id),
                    _ => None,
                },
            };
            subtrees.insert(dir.clone(), level);
            let Some(level) = level else { continue };
            let rule_file = self.tree_level(&level)?.into_iter().find(|(name, kind, _)| {
                name.as_slice() == b".gitignore" && matches!(kind, Some(EntryKind::File | EntryKind::Executable))
            });
            if let Some((_, _, id)) = rule_file {
                let path: Vec<u8> = match dir {
                    Some(dir) => [dir.as_bytes(), b"/.gitignore"].concat(),
                    None => b".gitignore".to_vec(),
                };
                rules.dangerously_push_entry(Stat::default(), id.0, Flags::empty(), Mode::FILE, BStr::new(&path));
            }
        }
        rules.sort_entries();
        let mut excludes = self
            .repo
            .excludes(&rules, None, gix::worktree::stack::state::ignore::Source::IdMapping)
            .map_err(|e| VerbError::git("reading the checkpoint's ignore rules", e))?;
        let mut excluded = |path: &RepoPath, mode: Mode| -> Result<bool, VerbError> {
            Ok(excludes
                .at_entry(BStr::new(path.as_bytes()), Some(mode))
                .map_err(|e| VerbError::git(format!("reading the ignore rules for {}", path.display()), e))?
                .is_excluded())
        };
        paths
            .iter()
            .map(|path| excluded_here_or_above(path, &mut excluded))
            .collect()
    }

    /// The untracked repositories among the directories above `paths` (a directory on disk
    /// that holds `.git`, or a bare repository's `HEAD`, `objects` and `refs`, with no index
    /// entry below it): a scoped look at paths that are gone cannot see them, a walk does.
    pub fn repositories_above(&self, paths: &[RepoPath]) -> Result<Vec<RepoPath>, VerbError> {
        let index = self.read_index(true)?;
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        for path in paths {
            for dir in path.ancestors() {
                if !seen.insert(dir.clone()) {
                    continue;
                }
                let full = self.workdir.join(dir.to_os_path());
                if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
                    continue;
                }
                let holds = |name: &str| std::fs::symlink_metadata(full.join(name)).is_ok();
                let mut prefix = dir.as_bytes().to_vec();
                prefix.push(b'/');
                let tracked_below = index.prefixed_entries_range(prefix.as_slice().into()).is_some();
                if !tracked_below && (holds(".git") || (holds("HEAD") && holds("objects") && holds("refs"))) {
                    found.push(dir);
                }
            }
        }
        Ok(found)
    }
}

/// Whether `excluded` says `path` is ignored, itself or through a directory above it (git
/// never looks inside an ignored directory, so a rule there cannot take it back).
fn excluded_here_or_above(
    path: &RepoPath,
    excluded: &mut impl FnMut(&RepoPath, gix::index::entry::Mode) -> Result<bool, VerbError>,
) -> Result<bool, VerbError> {
    for dir in path.ancestors() {
        if excluded(&dir, gix::index::entry::Mode::DIR)? {
            return Ok(true);
        }
    }
    excluded(path, gix::index::entry::Mode::FILE)
}

#[cfg(test)]
mod tests {
    use super::a_directory_vanished;
    use crate::verbs::VerbError;

    #[test]
    fn only_a_vanished_directory_makes_the_walk_worth_taking_again() {
        let walk_failed = |errno: rustix::io::Errno| {
            VerbError::git(
                "walking the worktree",
                std::io::Error::from_raw_os_error(errno.raw_os_error()),
            )
        };
        assert!(a_directory_vanished(&walk_failed(rustix::io::Errno::NOENT)));
        assert!(a_directory_vanished(&walk_failed(rustix::io::Errno::NOTDIR)));
        assert!(!a_directory_vanished(&walk_failed(rustix::io::Errno::NAMETOOLONG)));
        assert!(!a_directory_vanished(&walk_failed(rustix::io::Errno::ACCESS)));
        assert!(!a_directory_vanished(&VerbError::git_because(
            "walking the worktree",
            "no cause"
        )));
    }
}
