//! The worktree as git sees it, listed read-only: the user's index (never written) and a walk
//! for untracked paths with git's ignore rules, plus whether index ids may stand for the bytes
//! on disk. Nothing here writes anything.

use std::path::{Path, PathBuf};

use gix::bstr::BStr;

use super::Vault;
use crate::verbs::types::{EntryKind, ObjectId, RepoPath, TreeItem};
use crate::verbs::VerbError;

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
    paths: std::collections::HashSet<Vec<u8>>,
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
    fn pathspecs(&self) -> Vec<gix::bstr::BString> {
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
fn walk_untracked(
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
fn walk_scope(
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

/// Whether the index's ids are the bytes on disk, as far as configuration says.
enum IdsRaw {
    Yes,
    No,
    /// Yes, except where an attribute that converts content applies.
    ExceptByAttributes,
}

/// How many index entries [`Vault::index_sizes_are_raw`] compares with their stored blobs.
const SIZE_SAMPLE: usize = 256;

/// The directories above `paths` (sorted) that are ckpt copy stores: they hold a `store.lock`
/// file and `objects/` and `workspaces/` directories. Each directory is looked at once.
fn stores_among<'a>(root: &Path, paths: impl Iterator<Item = &'a RepoPath>) -> Vec<RepoPath> {
    let is_store = |dir: &Path| {
        std::fs::symlink_metadata(dir.join("store.lock")).is_ok_and(|m| m.is_file())
            && std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
            && std::fs::symlink_metadata(dir.join("workspaces")).is_ok_and(|m| m.is_dir())
    };
    let mut seen: std::collections::HashSet<RepoPath> = std::collections::HashSet::new();
    let mut stores = Vec::new();
    let mut last_parent: Option<RepoPath> = None;
    for path in paths {
        let parent = path.parent();
        if parent == last_parent {
            continue;
        }
        last_parent = parent;
        for dir in path.ancestors() {
            if seen.insert(dir.clone()) && is_store(&root.join(dir.to_os_path())) {
                stores.push(dir);
            }
        }
    }
    stores
}

/// The attributes that make git convert content between the worktree and the object store.
const CONVERTING_ATTRIBUTES: [&str; 6] = ["text", "eol", "crlf", "filter", "ident", "working-tree-encoding"];

/// True if no line of an attributes file sets an attribute that converts content.
fn attributes_are_raw(text: &[u8]) -> bool {
    text.split(|b| *b == b'\n').all(|line| {
        let line = String::from_utf8_lossy(line);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return true;
        }
        if line.starts_with("[attr]") {
            return false;
        }
        line.split_whitespace().skip(1).all(|token| {
            if matches!(token, "binary" | "-text" | "-crlf") {
                return true;
            }
            let name = token
                .trim_start_matches(['-', '!'])
                .split('=')
                .next()
                .unwrap_or_default();
            !CONVERTING_ATTRIBUTES.contains(&name)
        })
    })
}

fn index_entry_kind(mode: gix::index::entry::Mode) -> Option<EntryKind> {
    use gix::index::entry::Mode;
    if mode == Mode::FILE {
        Some(EntryKind::File)
    } else if mode == Mode::FILE_EXECUTABLE {
        Some(EntryKind::Executable)
    } else if mode == Mode::SYMLINK {
        Some(EntryKind::Symlink)
    } else if mode == Mode::COMMIT {
        Some(EntryKind::Gitlink)
    } else {
        None
    }
}

impl Vault {
    /// Lists the worktree read-only: index entries and a directory walk that applies git's
    /// ignore rules, never entering ignored directories or nested repositories.
    pub fn list_worktree(&self) -> Result<WorktreeListing, VerbError> {
        self.list_worktree_overlapped(None, false, |_| ())
            .map(|(listing, ())| listing)
    }

    /// The index, read-only. A whole listing reads it afresh, so the decoded index (tens of MB
    /// at 200k files) is freed as soon as the listing is done; scoped listings (a watched guard,
    /// then the restore's look at the paths it touches) keep it while the file stays the same
    /// (same inode, size, mtime and ctime), so the second one does not decode it again.
    fn read_index(&self, keep: bool) -> Result<std::sync::Arc<gix::index::File>, VerbError> {
        let path = self.repo.index_path();
        let Some(identity) = super::index_identity(&path) else {
            let empty = gix::index::State::new(self.repo.object_hash());
            return Ok(std::sync::Arc::new(gix::index::File::from_state(empty, path)));
        };
        if let Some((known, index)) = &*self.kept_index.borrow() {
            if keep && *known == identity {
                return Ok(index.clone());
            }
        }
        let prefetched = self.prefetched_index.borrow_mut().take();
        if let Some(Ok(Some((known, index)))) = prefetched.map(std::thread::JoinHandle::join) {
            // Read while the file had the identity it has now: that version, as a read now.
            if known == identity {
                let index = self.expand_sparse_dirs_on_disk(index)?;
                // What an expansion holds depends on the disk as well: never kept.
                let keep = keep && !index.is_sparse();
                *self.kept_index.borrow_mut() = keep.then(|| (identity, index.clone()));
                return Ok(index);
            }
        }
        let read = if self.vouched_index.get() == Some(identity) {
            gix::index::File::at(
                &path,
                self.repo.object_hash(),
                true,
                gix::index::decode::Options::default(),
            )
            .map_err(|e| VerbError::git("reading the index (read-only)", e))?
        } else {
            self.repo
                .open_index()
                .map_err(|e| VerbError::git("reading the index (read-only)", e))?
        };
        let index = self.expand_sparse_dirs_on_disk(std::sync::Arc::new(read))?;
        let keep = keep && !index.is_sparse();
        *self.kept_index.borrow_mut() = keep.then(|| (identity, index.clone()));
        Ok(index)
    }

    /// A sparse index holds each directory outside the cone as one entry (its tree), where git,
    /// finding that directory on disk, looks inside: `git status` lists the files created there,
    /// and the `.gitignore` files of that tree apply to them. So each such entry whose directory
    /// is on disk is replaced, in memory, by the entries of its tree, marked skip-worktree as a
    /// full index marks them; an entry whose directory is absent stays (nothing to capture
    /// there). The index file is never written.
    fn expand_sparse_dirs_on_disk(
        &self,
        index: std::sync::Arc<gix::index::File>,
    ) -> Result<std::sync::Arc<gix::index::File>, VerbError> {
        use gix::index::entry::{Flags, Mode};
        let on_disk = |dir: &[u8]| {
            RepoPath::new(dir.to_vec()).is_ok_and(|dir| {
                std::fs::symlink_metadata(self.workdir.join(dir.to_os_path())).is_ok_and(|m| m.is_dir())
            })
        };
        let expand = |entry: &gix::index::Entry, path: &BStr| {
            entry.mode.is_sparse() && on_disk(path.strip_suffix(b"/").unwrap_or(path))
        };
        if !index.entries().iter().any(|e| expand(e, e.path(&index))) {
            return Ok(index);
        }
        let (mut state, path) = std::sync::Arc::unwrap_or_clone(index).into_parts();
        let mut trees: Vec<(RepoPath, ObjectId)> = Vec::new();
        let mut unusable = None;
        state.remove_entries(|_, path, entry| {
            if !expand(entry, path) {
                return false;
            }
            match RepoPath::new(path.strip_suffix(b"/").unwrap_or(path).to_vec()) {
                Ok(dir) => trees.push((dir, ObjectId(entry.id))),
                Err(e) => unusable = Some(e),
            }
            true
        });
        if let Some(e) = unusable {
            return Err(e.into());
        }
        for (dir, tree) in trees {
            for (below, item) in self.read_tree(&tree)? {
                let mode = match item.kind {
                    EntryKind::File => Mode::FILE,
                    EntryKind::Executable => Mode::FILE_EXECUTABLE,
                    EntryKind::Symlink => Mode::SYMLINK,
                    EntryKind::Gitlink => Mode::COMMIT,
                };
                let full = dir.join(below.as_bytes())?;
                state.dangerously_push_entry(
                    Default::default(),
                    item.id.0,
                    Flags::SKIP_WORKTREE,
                    mode,
                    BStr::new(full.as_bytes()),
                );
            }
        }
        state.sort_entries();
        Ok(std::sync::Arc::new(gix::index::File::from_state(state, path)))
    }

    /// Starts reading the index on a thread of its own, for the scoped listing that follows (a
    /// watched snapshot loads its stat cache meanwhile): the read a listing makes, made earlier.
    /// A read that fails, or a file that changed by the time the listing wants it, is just read
    /// again then. One read at a time: while one is pending, this does nothing. Read-only.
    pub fn prefetch_index(&self) {
        if self.prefetched_index.borrow().is_some() {
            return;
        }
        let path = self.repo.index_path();
        let Some(identity) = super::index_identity(&path) else {
            return;
        };
        let hash = self.repo.object_hash();
        // Unvouched, it is opened as the repository opens it (checksum verified, its options).
        let verified_by = (self.vouched_index.get() != Some(identity)).then(|| self.repo.clone().into_sync());
        let read = move || {
            let index = match verified_by {
                None => gix::index::File::at(&path, hash, true, gix::index::decode::Options::default()).ok()?,
                Some(repo) => repo.to_thread_local().open_index().ok()?,
            };
            Some((identity, std::sync::Arc::new(index)))
        };
        let handle = std::thread::Builder::new().name("ckpt-index".into()).spawn(read).ok();
        *self.prefetched_index.borrow_mut() = handle;
    }

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
            if index.entry_by_path(BStr::new(path.as_bytes())).is_some() {
                out.push(false);
                continue;
            }
            let mut ignored = false;
            for dir in path.ancestors() {
                if excluded(&dir, Mode::DIR)? {
                    ignored = true;
                    break;
                }
            }
            out.push(ignored || excluded(path, Mode::FILE)?);
        }
        Ok(out)
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

    /// [`Self::list_worktree`], with the walk for untracked paths running on a thread of its own
    /// while `with_index` works on this thread with the index half of the listing (`tracked`,
    /// `index_mtime`, `index_ids_are_raw`). Whatever `with_index` leaves in the listing is
    /// returned with the walk's findings added.
    /// With a `scope`, only index entries and untracked paths within it are listed (and every
    /// submodule pointer, wherever it is). With `seeding`, attributes that convert content are
    /// resolved path by path (`converted`) instead of ruling out every index id.
    pub fn list_worktree_overlapped<R>(
        &self,
        scope: Option<&PathScope>,
        seeding: bool,
        with_index: impl FnOnce(&mut WorktreeListing) -> R,
    ) -> Result<(WorktreeListing, R), VerbError> {
        let started = std::time::Instant::now();
        let index = self.read_index(scope.is_some())?;
        let index = &*index;
        let mut listing = self.index_listing(index, scope, seeding);
        listing.times.index_read = started.elapsed();
        let walk_repo = self.repo.clone().into_sync();
        let paths = scope;
        let (walked, result) = std::thread::scope(|scope| {
            let workdir = &self.workdir;
            let walker = scope.spawn(|| {
                let walk_started = std::time::Instant::now();
                let repo = walk_repo.to_thread_local();
                let walked = match paths {
                    Some(paths) => match walk_scope(&repo, index, paths, workdir) {
                        Ok(Some(listing)) => Ok(listing),
                        Ok(None) => walk_untracked(&repo, index, Some(paths)),
                        Err(e) => Err(e),
                    },
                    None => walk_untracked(&repo, index, None),
                };
                (walked, walk_started.elapsed())
            });
            let result = with_index(&mut listing);
            let walked = walker.join().unwrap_or_else(|_| {
                let panicked = VerbError::git_because("walking the worktree", "the walk thread panicked");
                (Err(panicked), std::time::Duration::ZERO)
            });
            (walked, result)
        });
        let (walked, walk_time) = walked;
        listing.times.walk = walk_time;
        let mut walked = walked?;
        // ckpt's own stores: the configured one, and any other found by what it holds (another
        // CKPT_HOME, or this one reached through a bind mount or another path).
        let mut reserved: Vec<RepoPath> = self
            .reserved
            .iter()
            .filter(|r| std::fs::symlink_metadata(self.workdir.join(r.to_os_path())).is_ok())
            .cloned()
            .collect();
        reserved.extend(stores_among(&self.workdir, walked.untracked.iter()));
        reserved.sort();
        reserved.dedup();
        if !reserved.is_empty() {
            let outside = |path: &RepoPath| !reserved.iter().any(|r| path.is_within(r));
            walked.untracked.retain(|p| outside(p));
            walked.ignored.retain(|(p, _)| outside(p));
            walked.nested_repos.retain(|p| outside(p));
            listing.reserved = reserved;
        }
        listing.untracked = walked.untracked;
        listing.ignored = walked.ignored;
        listing.nested_repos = walked.nested_repos;
        listing.unrepresentable.extend(walked.unrepresentable);
        listing.unreadable_dirs.extend(walked.unreadable_dirs);
        listing.times.total = started.elapsed();
        Ok((listing, result))
    }

    /// The index half of a listing: every entry (stages merged) with its stat, and whether index
    /// ids may stand for the bytes on disk.
    fn index_listing(&self, index: &gix::index::File, scope: Option<&PathScope>, seeding: bool) -> WorktreeListing {
        let mut listing = WorktreeListing::default();
        let mut last: Option<RepoPath> = None;
        let entries = index.entries();
        // With a scope, only its entries are looked at (found by binary search, not by testing
        // every entry) and the submodule pointers (a mode test per entry).
        let positions: Box<dyn Iterator<Item = usize>> = match scope {
            None => Box::new(0..entries.len()),
            Some(scope) => {
                let mut positions: Vec<usize> = (0..entries.len())
                    .filter(|&at| entries[at].mode == gix::index::entry::Mode::COMMIT)
                    .collect();
                for path in &scope.paths {
                    // The prefix also finds names that merely start with it ("a" finds "ab").
                    if let Some(range) = index.prefixed_entries_range(path.as_slice().into()) {
                        positions.extend(range.filter(|&at| scope.covers(entries[at].path(index))));
                    }
                }
                positions.sort_unstable();
                positions.dedup();
                Box::new(positions.into_iter())
            }
        };
        for entry in positions.map(|at| &entries[at]) {
            let raw_path = entry.path(index);
            let Some(kind) = index_entry_kind(entry.mode) else {
                continue;
            };
            match RepoPath::new(raw_path.to_vec()) {
                Ok(path) => {
                    // Unmerged paths appear once per stage; keep one.
                    if last.as_ref() == Some(&path) {
                        continue;
                    }
                    last = Some(path.clone());
                    use gix::index::entry::Flags;
                    let plain = entry.stage() == gix::index::entry::Stage::Unconflicted
                        && !entry
                            .flags
                            .intersects(Flags::INTENT_TO_ADD | Flags::SKIP_WORKTREE | Flags::ASSUME_VALID);
                    let stat = plain.then_some(IndexStat {
                        mtime: (entry.stat.mtime.secs, entry.stat.mtime.nsecs),
                        ctime: (entry.stat.ctime.secs, entry.stat.ctime.nsecs),
                        dev: entry.stat.dev,
                        ino: entry.stat.ino,
                        size: entry.stat.size,
                    });
                    listing.tracked.push(TrackedEntry {
                        path,
                        item: TreeItem {
                            kind,
                            id: ObjectId(entry.id),
                        },
                        stat,
                    });
                }
                Err(e) => listing.unrepresentable.push((raw_path.to_vec(), e.to_string())),
            }
        }
        listing.index_mtime = std::fs::metadata(self.repo.index_path()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.mtime(), m.mtime_nsec() as u32)
        });
        listing.index_ids_are_raw = match self.index_ids_are_raw(&listing.tracked) {
            IdsRaw::Yes => true,
            IdsRaw::No => false,
            IdsRaw::ExceptByAttributes if seeding => match self.converted_by_attributes(index, &listing.tracked) {
                Ok(converted) => {
                    listing.converted = converted;
                    true
                }
                Err(_) => false,
            },
            IdsRaw::ExceptByAttributes => false,
        };
        if !self.reserved.is_empty() {
            listing
                .tracked
                .retain(|t| !self.reserved.iter().any(|r| t.path.is_within(r)));
        }
        listing
    }

    /// The tracked paths that some attribute which converts content applies to, matched the way
    /// git matches them (every attributes file git reads for that path, macros expanded).
    fn converted_by_attributes(
        &self,
        index: &gix::index::File,
        tracked: &[TrackedEntry],
    ) -> Result<std::collections::HashSet<RepoPath>, VerbError> {
        use gix::index::entry::Mode;
        let mut stack = self
            .repo
            .attributes_only(
                index,
                gix::worktree::stack::state::attributes::Source::WorktreeThenIdMapping,
            )
            .map_err(|e| VerbError::git("reading the attributes", e))?;
        let mut outcome = stack.selected_attribute_matches(CONVERTING_ATTRIBUTES);
        let mut converted = std::collections::HashSet::new();
        // Every directory's `.gitattributes`, tracked or not, is read for the paths in it: one
        // that is a FIFO would block the read (see [`IgnoreFiles`]), and fails the seeding.
        let attributes_in = |dir: Option<&RepoPath>| {
            let (full, shown) = match dir {
                Some(dir) => (
                    self.workdir.join(dir.to_os_path()),
                    format!("{}/.gitattributes", dir.display()),
                ),
                None => (self.workdir.clone(), ".gitattributes".to_owned()),
            };
            refuse_blocking_rule_file(&full.join(".gitattributes"), shown, Follow::NotLinks)
        };
        attributes_in(None)?;
        let mut looked_at: std::collections::HashSet<RepoPath> = std::collections::HashSet::new();
        for entry in tracked {
            for dir in entry.path.ancestors() {
                if looked_at.insert(dir.clone()) {
                    attributes_in(Some(&dir))?;
                }
            }
            let mode = match entry.item.kind {
                EntryKind::Symlink => Mode::SYMLINK,
                EntryKind::Gitlink => continue,
                _ => Mode::FILE,
            };
            outcome.reset();
            stack
                .at_entry(BStr::new(entry.path.as_bytes()), Some(mode))
                .map_err(|e| VerbError::git(format!("reading the attributes of {}", entry.path.display()), e))?
                .matching_attributes(&mut outcome);
            let converts = outcome.iter_selected().any(|m| {
                !matches!(
                    m.assignment.state,
                    gix::attrs::StateRef::Unspecified | gix::attrs::StateRef::Unset
                )
            });
            if converts {
                converted.insert(entry.path.clone());
            }
        }
        Ok(converted)
    }

    /// Conservative: any filter, eol/autocrlf setting, or attribute that may convert content
    /// (text, eol, crlf, filter, ident, working-tree-encoding) disables seeding from the index.
    fn index_ids_are_raw(&self, tracked: &[TrackedEntry]) -> IdsRaw {
        let config = self.repo.config_snapshot();
        let converting = |key: &str| {
            config
                .string(key)
                .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_slice(), b"false" | b"lf" | b"native"))
        };
        if converting("core.autocrlf") || converting("core.eol") {
            return IdsRaw::No;
        }
        if config
            .plumbing()
            .sections_by_name("filter")
            .is_some_and(|mut s| s.next().is_some())
        {
            return IdsRaw::No;
        }
        let mut attribute_files: Vec<PathBuf> = tracked
            .iter()
            .filter(|t| t.path.components().last() == Some(&b".gitattributes"[..]))
            .map(|t| self.workdir.join(t.path.to_os_path()))
            .collect();
        attribute_files.push(self.repo.common_dir().join("info/attributes"));
        if let Ok(Some(global)) = config.trusted_path("core.attributesFile") {
            attribute_files.push(global);
        }
        if let Some(home) = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        {
            attribute_files.push(home.join("git/attributes"));
        }
        // An attributes file git could not read without waiting for a writer (a FIFO) leaves no
        // way to know what it converts: no index id stands for the bytes on disk.
        if attribute_files
            .iter()
            .any(|file| refuse_blocking_rule_file(file, file.display().to_string(), Follow::Links).is_err())
        {
            return IdsRaw::No;
        }
        let attributes_raw = attribute_files.iter().all(|file| match std::fs::read(file) {
            Ok(text) => attributes_are_raw(&text),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        });
        if attributes_raw {
            IdsRaw::Yes
        } else {
            IdsRaw::ExceptByAttributes
        }
    }

    /// A conversion that was active when files were checked out or added (autocrlf set then and
    /// unset since, an attributes file since removed) shows as a stored blob whose length
    /// differs from the file length the index recorded. Checked on an even sample of at most
    /// [`SIZE_SAMPLE`] entries: one mismatch turns seeding off for the whole capture.
    pub fn index_sizes_are_raw(
        &self,
        tracked: &[TrackedEntry],
        converted: &std::collections::HashSet<RepoPath>,
    ) -> bool {
        let plain: Vec<&TrackedEntry> = tracked
            .iter()
            .filter(|t| matches!(t.item.kind, EntryKind::File | EntryKind::Executable) && t.stat.is_some())
            .filter(|t| !converted.contains(&t.path))
            .collect();
        let step = plain.len().div_ceil(SIZE_SAMPLE).max(1);
        plain.iter().step_by(step).all(|entry| {
            let recorded = entry.stat.map(|s| s.size);
            match self.repo.find_header(entry.item.id.0) {
                // git keeps the low 32 bits of the size.
                Ok(header) => Some(header.size() as u32) == recorded,
                Err(_) => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{a_directory_vanished, attributes_are_raw};
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

    #[test]
    fn converting_attributes_are_detected() {
        assert!(attributes_are_raw(
            b"# comment\n*.png binary\n*.rs diff=rust linguist-vendored\n*.bin -text\n"
        ));
        for converting in [
            &b"*.txt text\n"[..],
            b"* text=auto\n",
            b"*.sh eol=lf\n",
            b"*.x filter=lfs\n",
            b"*.c ident\n",
            b"[attr]mine text\n",
        ] {
            assert!(
                !attributes_are_raw(converting),
                "{}",
                String::from_utf8_lossy(converting)
            );
        }
    }
}
