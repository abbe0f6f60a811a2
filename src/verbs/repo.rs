//! `Vault`: the repository handle and the object/ref verbs. The `gix::Repository` inside never
//! leaves this file, so no other module can reach a write API. Ref edits are confined to
//! [`PinRef`]s, always compare-and-swap, and never write a reflog.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use gix::bstr::{BStr, ByteSlice};
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;

use super::types::{EntryKind, FileStat, ObjectId, PinRef, RepoPath, TreeItem, WorkspaceKey};
use super::{InvalidInput, VerbError};

/// Settings applied in memory only (never written to any config file): ckpt refs get no reflog,
/// and ckpt never needs the user's identity.
const CONFIG_OVERRIDES: [&str; 4] = [
    "core.logAllRefUpdates=false",
    "user.name=ckpt",
    "user.email=ckpt@localhost",
    "gc.auto=0",
];

/// The identity every checkpoint commit is written with, so users need no git identity.
pub const CKPT_NAME: &str = "ckpt";
pub const CKPT_EMAIL: &str = "ckpt@localhost";

/// An open repository with a worktree, as ckpt is allowed to use it.
pub struct Vault {
    repo: gix::Repository,
    workdir: PathBuf,
    /// Directories below the worktree where ckpt keeps its own data (a store inside the
    /// workspace): never listed, so never captured, restored over or removed.
    reserved: Vec<RepoPath>,
}

/// Valid pins with their targets, and names under `refs/ckpt/` that are not valid pins.
pub type PinListing = (Vec<(PinRef, ObjectId)>, Vec<String>);

/// One entry of one tree level: name, kind (`None` for a subtree), id.
pub type LevelEntry = (Vec<u8>, Option<EntryKind>, ObjectId);

/// What a commit says, decoded.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub message: Vec<u8>,
}

/// One path whose entry differs between two trees (`None` = absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    pub path: RepoPath,
    pub old: Option<TreeItem>,
    pub new: Option<TreeItem>,
}

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
    /// True when no clean/smudge filter, eol conversion or ident can make the index's blob ids
    /// differ from the bytes on disk, so they may seed a capture.
    pub index_ids_are_raw: bool,
    /// Untracked, not ignored, non-directory paths (files, symlinks, special files).
    pub untracked: Vec<RepoPath>,
    /// Ignored paths; `true` when the entry stands for a whole ignored directory.
    pub ignored: Vec<(RepoPath, bool)>,
    /// Untracked nested repositories (never entered).
    pub nested_repos: Vec<RepoPath>,
    /// ckpt's own directories below the worktree ([`Vault::reserve`]) that hold anything.
    pub reserved: Vec<RepoPath>,
    /// Names git could not represent as a repository path, with the reason.
    pub unrepresentable: Vec<(String, String)>,
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

fn tree_mode(kind: EntryKind) -> gix::objs::tree::EntryMode {
    use gix::objs::tree::EntryKind as K;
    match kind {
        EntryKind::File => K::Blob.into(),
        EntryKind::Executable => K::BlobExecutable.into(),
        EntryKind::Symlink => K::Link.into(),
        EntryKind::Gitlink => K::Commit.into(),
    }
}

/// One entry of a tree being written: a single validated name pointing at a blob, link,
/// gitlink or subtree.
#[derive(Debug, Clone)]
pub struct NewTreeEntry {
    pub name: Vec<u8>,
    pub kind: Option<EntryKind>,
    pub id: ObjectId,
}

impl NewTreeEntry {
    /// `kind: None` marks a subtree.
    pub fn new(name: &[u8], kind: Option<EntryKind>, id: ObjectId) -> Result<Self, InvalidInput> {
        let why = if name.is_empty() {
            Some("empty")
        } else if name.contains(&b'/') || name.contains(&0) {
            Some("contains `/` or NUL")
        } else if name == b"." || name == b".." || name.eq_ignore_ascii_case(b".git") {
            Some("reserved name")
        } else {
            None
        };
        match why {
            Some(why) => Err(InvalidInput::TreeName {
                name: String::from_utf8_lossy(name).into_owned(),
                why,
            }),
            None => Ok(NewTreeEntry {
                name: name.to_vec(),
                kind,
                id,
            }),
        }
    }
}

impl Vault {
    /// Finds the repository containing `dir` (searching upwards). `Ok(None)` when `dir` is not
    /// inside a repository with a worktree.
    pub fn discover(dir: &Path) -> Result<Option<Vault>, VerbError> {
        let Some(vault) = Self::discover_with(dir, &CONFIG_OVERRIDES)? else {
            return Ok(None);
        };
        let ref_storage = vault.repo.config_snapshot().string("extensions.refStorage");
        if ref_storage.is_some_and(|format| format.eq_ignore_ascii_case(b"reftable")) {
            return Err(VerbError::Unsupported(format!(
                "the repository at {} keeps its refs in the reftable format, which ckpt does not support yet; use --provider copy",
                vault.workdir.display()
            )));
        }
        // `core.ignorecase=true` on a filesystem that tells cases apart (a repository copied
        // from macOS, or set by hand) would make the walk take `readme` for the tracked
        // `Readme` and hide real files; the filesystem decides, as git's own probe does at init.
        let claims_ignorecase = vault.repo.config_snapshot().boolean("core.ignorecase") == Some(true);
        if claims_ignorecase && filesystem_tells_case_apart(vault.repo.common_dir()) {
            let mut overrides = CONFIG_OVERRIDES.to_vec();
            overrides.push("core.ignorecase=false");
            return Self::discover_with(dir, &overrides);
        }
        Ok(Some(vault))
    }

    fn discover_with(dir: &Path, overrides: &[&str]) -> Result<Option<Vault>, VerbError> {
        let open_options = gix::open::Options::default().config_overrides(overrides.iter().copied());
        let repo = match gix::discover_opts(dir, Default::default(), open_options) {
            Ok(repo) => repo,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => {
                let text = error.to_string();
                if text.contains("not a git repository") || text.contains("Could not find a git repository") {
                    return Ok(None);
                }
                return Err(VerbError::git(
                    format!("opening the repository at {}", dir.display()),
                    error,
                ));
            }
        };
        let Some(workdir) = repo.workdir().map(Path::to_path_buf) else {
            return Ok(None);
        };
        Ok(Some(Vault {
            repo,
            workdir,
            reserved: Vec::new(),
        }))
    }

    /// The worktree root.
    pub(super) fn repo_handle(&self) -> &gix::Repository {
        &self.repo
    }

    /// A handle each worker thread can open its own repository from.
    pub(super) fn repo_for_threads(&self) -> gix::ThreadSafeRepository {
        self.repo.clone().into_sync()
    }

    pub(super) fn object_hash_kind(&self) -> gix::hash::Kind {
        self.repo.object_hash()
    }

    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The directory shared by all worktrees of this repository.
    pub fn common_dir(&self) -> &Path {
        self.repo.common_dir()
    }

    /// `main` for the main worktree, `wt-<name>` for a linked one.
    pub fn workspace_key(&self) -> Result<WorkspaceKey, VerbError> {
        let git_dir = self.repo.git_dir();
        let is_linked = git_dir.canonicalize().ok() != self.repo.common_dir().canonicalize().ok();
        if !is_linked {
            return Ok(WorkspaceKey::new("main")?);
        }
        let name = git_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sanitized: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(WorkspaceKey::new(&format!("wt-{sanitized}"))?)
    }

    /// The commit HEAD points at, or `None` while HEAD is unborn.
    pub fn head_commit(&self) -> Result<Option<ObjectId>, VerbError> {
        let head = self.repo.head().map_err(|e| VerbError::git("reading HEAD", e))?;
        Ok(head.id().map(|id| ObjectId(id.detach())))
    }

    pub fn has_object(&self, id: &ObjectId) -> bool {
        self.repo.has_object(id.0)
    }

    /// Hashes `bytes` as a blob without writing anything.
    pub fn hash_blob(&self, bytes: &[u8]) -> Result<ObjectId, VerbError> {
        gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))
    }

    /// Writes `bytes` as a blob (no filters: the bytes are stored exactly).
    pub fn write_blob(&self, bytes: &[u8]) -> Result<ObjectId, VerbError> {
        self.repo
            .write_blob(bytes)
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a blob", e))
    }

    /// Writes one tree from validated entries, sorted the way git requires.
    pub fn write_tree(&self, entries: Vec<NewTreeEntry>) -> Result<ObjectId, VerbError> {
        let mut tree = gix::objs::Tree {
            entries: entries
                .into_iter()
                .map(|entry| gix::objs::tree::Entry {
                    mode: match entry.kind {
                        Some(kind) => tree_mode(kind),
                        None => gix::objs::tree::EntryKind::Tree.into(),
                    },
                    filename: entry.name.into(),
                    oid: entry.id.0,
                })
                .collect(),
        };
        tree.entries.sort();
        if let Some(pair) = tree
            .entries
            .windows(2)
            .find(|pair| pair[0].filename == pair[1].filename)
        {
            return Err(InvalidInput::TreeName {
                name: pair[0].filename.to_string(),
                why: "duplicate name in one tree",
            }
            .into());
        }
        self.repo
            .write_object(&tree)
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a tree", e))
    }

    /// Writes a commit with ckpt's own fixed identity. It is not attached to any branch.
    pub fn write_commit(
        &self,
        tree: &ObjectId,
        parent: Option<&ObjectId>,
        message: &str,
        unix_seconds: i64,
    ) -> Result<ObjectId, VerbError> {
        let signature = gix::actor::Signature {
            name: CKPT_NAME.into(),
            email: CKPT_EMAIL.into(),
            time: gix::date::Time {
                seconds: unix_seconds,
                offset: 0,
            },
        };
        let commit = gix::objs::Commit {
            tree: tree.0,
            parents: parent.map(|p| p.0).into_iter().collect(),
            author: signature.clone(),
            committer: signature,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        self.repo
            .write_object(&commit)
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a commit", e))
    }

    /// Creates `pin` pointing at `commit`; with `expected_old`, replaces only that value.
    pub fn pin(&self, pin: &PinRef, commit: &ObjectId, expected_old: Option<&ObjectId>) -> Result<(), VerbError> {
        let kind = self
            .repo
            .find_header(commit.0)
            .map_err(|_| VerbError::MissingObject {
                id: *commit,
                what: "commit to pin",
            })?
            .kind();
        if kind != gix::objs::Kind::Commit {
            return Err(VerbError::Git {
                action: format!("pinning {}", pin.as_str()),
                message: format!("{commit} is a {kind}, only commits may be pinned"),
            });
        }
        let expected = match expected_old {
            Some(old) => PreviousValue::MustExistAndMatch(Target::Object(old.0)),
            None => PreviousValue::MustNotExist,
        };
        self.edit_pin(
            pin,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "ckpt: pin".into(),
                },
                expected,
                new: Target::Object(commit.0),
            },
        )
    }

    /// Deletes `pin`, only if it still points at `expected`.
    pub fn unpin(&self, pin: &PinRef, expected: &ObjectId) -> Result<(), VerbError> {
        self.edit_pin(
            pin,
            Change::Delete {
                expected: PreviousValue::MustExistAndMatch(Target::Object(expected.0)),
                log: RefLog::AndReference,
            },
        )
    }

    /// Moves `pin` (which must point at `commit`) to its quarantine name: a new ref is made
    /// first, then the pin is removed, so the commit is referenced throughout. Returns the
    /// quarantine ref.
    pub fn quarantine(&self, pin: &PinRef, commit: &ObjectId) -> Result<PinRef, VerbError> {
        let aside = pin.quarantined();
        self.edit_pin(
            &aside,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "ckpt: quarantine".into(),
                },
                expected: PreviousValue::Any,
                new: Target::Object(commit.0),
            },
        )?;
        self.unpin(pin, commit)?;
        Ok(aside)
    }

    fn edit_pin(&self, pin: &PinRef, change: Change) -> Result<(), VerbError> {
        let name = pin
            .as_str()
            .try_into()
            .map_err(|e| VerbError::git(format!("naming {}", pin.as_str()), e))?;
        let edit = RefEdit {
            change,
            name,
            deref: false,
        };
        self.repo
            .edit_references_as(Some(edit), None)
            .map(|_| ())
            .map_err(|e| VerbError::RefConflict {
                name: pin.as_str().to_owned(),
                message: e.to_string(),
            })
    }

    /// Every ref under `refs/ckpt/`, with the object it points at. Names that are not valid pin
    /// refs are returned separately so callers can report them.
    pub fn list_pins(&self) -> Result<PinListing, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut pins = Vec::new();
        let mut foreign = Vec::new();
        for reference in iter {
            let reference = reference.map_err(|e| VerbError::git("reading a ref under refs/ckpt/", e))?;
            let name = reference.name().as_bstr().to_str_lossy().into_owned();
            if PinRef::is_quarantine_name(&name) {
                continue;
            }
            match (PinRef::parse(&name), reference.target().try_id()) {
                (Ok(pin), Some(id)) => pins.push((pin, ObjectId(id.to_owned()))),
                _ => foreign.push(name),
            }
        }
        Ok((pins, foreign))
    }

    /// The object a pin ref points at now, if it exists.
    pub fn read_pin(&self, pin: &PinRef) -> Result<Option<ObjectId>, VerbError> {
        let found = self
            .repo
            .try_find_reference(pin.as_str())
            .map_err(|e| VerbError::git(format!("reading {}", pin.as_str()), e))?;
        Ok(found.and_then(|r| r.target().try_id().map(|id| ObjectId(id.to_owned()))))
    }

    pub fn read_commit(&self, id: &ObjectId) -> Result<CommitInfo, VerbError> {
        let commit = self
            .repo
            .find_commit(id.0)
            .map_err(|e| lookup_error(&self.repo, id, "commit", e))?;
        let decoded = commit
            .decode()
            .map_err(|e| VerbError::git(format!("decoding commit {id}"), e))?;
        Ok(CommitInfo {
            tree: ObjectId(decoded.tree()),
            parents: decoded.parents().map(ObjectId).collect(),
            message: decoded.message.to_vec(),
        })
    }

    fn child_path(parent: Option<&RepoPath>, name: &[u8]) -> Result<RepoPath, VerbError> {
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

    /// The uncompressed size of an object, if it is present.
    pub fn object_size(&self, id: &ObjectId) -> Option<u64> {
        self.repo.find_header(id.0).ok().map(|h| h.size())
    }

    /// Starts counting, on a thread of its own, the blobs the checkpoint trees keep alive and
    /// which of them HEAD's tree holds too; the caller goes on with its own work meanwhile.
    /// Read-only: it decodes trees and reads object headers, nothing else.
    pub fn spawn_blob_census(&self, checkpoint_trees: Vec<ObjectId>, head_tree: Option<ObjectId>) -> CensusHandle {
        let repo = self.repo.clone().into_sync();
        let thread = std::thread::spawn(move || blob_census(&repo.to_thread_local(), &checkpoint_trees, head_tree));
        CensusHandle { thread }
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
        let mut seen = super::IdSet::default();
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

    pub fn read_blob(&self, id: &ObjectId) -> Result<Vec<u8>, VerbError> {
        let mut blob = self
            .repo
            .find_blob(id.0)
            .map_err(|e| lookup_error(&self.repo, id, "blob", e))?;
        Ok(blob.take_data())
    }

    /// Lists the worktree read-only: index entries and a directory walk that applies git's
    /// ignore rules, never entering ignored directories or nested repositories.
    pub fn list_worktree(&self) -> Result<WorktreeListing, VerbError> {
        self.list_worktree_overlapped(|_| ()).map(|(listing, ())| listing)
    }

    /// [`Self::list_worktree`], with the walk for untracked paths running on a thread of its own
    /// while `with_index` works on this thread with the index half of the listing (`tracked`,
    /// `index_mtime`, `index_ids_are_raw`). Whatever `with_index` leaves in the listing is
    /// returned with the walk's findings added.
    pub fn list_worktree_overlapped<R>(
        &self,
        with_index: impl FnOnce(&mut WorktreeListing) -> R,
    ) -> Result<(WorktreeListing, R), VerbError> {
        let started = std::time::Instant::now();
        // Read afresh rather than through the repository's shared index cache, so the decoded
        // index (tens of MB at 200k files) is freed as soon as the listing is done.
        let index = if self.repo.index_path().exists() {
            self.repo
                .open_index()
                .map_err(|e| VerbError::git("reading the index (read-only)", e))?
        } else {
            gix::index::File::from_state(gix::index::State::new(self.repo.object_hash()), self.repo.index_path())
        };
        let mut listing = self.index_listing(&index);
        if std::env::var_os("CKPT_TIMING").is_some() {
            eprintln!(
                "ckpt: index read: {} entries, {:.1} ms",
                listing.tracked.len(),
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        let walk_repo = self.repo.clone().into_sync();
        let (walked, result) = std::thread::scope(|scope| {
            let walker = scope.spawn(|| walk_untracked(&walk_repo.to_thread_local(), &index));
            let result = with_index(&mut listing);
            let walked = walker.join().unwrap_or_else(|_| {
                Err(VerbError::Git {
                    action: "walking the worktree".into(),
                    message: "the walk thread panicked".into(),
                })
            });
            (walked, result)
        });
        let mut walked = walked?;
        if !self.reserved.is_empty() {
            let outside = |path: &RepoPath| !self.reserved.iter().any(|r| path.is_within(r));
            walked.untracked.retain(|p| outside(p));
            walked.ignored.retain(|(p, _)| outside(p));
            walked.nested_repos.retain(|p| outside(p));
            listing.reserved = self
                .reserved
                .iter()
                .filter(|r| std::fs::symlink_metadata(self.workdir.join(r.to_os_path())).is_ok())
                .cloned()
                .collect();
        }
        listing.untracked = walked.untracked;
        listing.ignored = walked.ignored;
        listing.nested_repos = walked.nested_repos;
        listing.unrepresentable.extend(walked.unrepresentable);
        if std::env::var_os("CKPT_TIMING").is_some() {
            eprintln!(
                "ckpt: list worktree (index + walk): {:.1} ms",
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        Ok((listing, result))
    }

    /// The index half of a listing: every entry (stages merged) with its stat, and whether index
    /// ids may stand for the bytes on disk.
    fn index_listing(&self, index: &gix::index::File) -> WorktreeListing {
        let mut listing = WorktreeListing::default();
        let mut last: Option<RepoPath> = None;
        for entry in index.entries() {
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
                Err(e) => listing.unrepresentable.push((raw_path.to_string(), e.to_string())),
            }
        }
        listing.index_mtime = std::fs::metadata(self.repo.index_path()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.mtime(), m.mtime_nsec() as u32)
        });
        listing.index_ids_are_raw = self.index_ids_are_raw(&listing.tracked);
        if !self.reserved.is_empty() {
            listing
                .tracked
                .retain(|t| !self.reserved.iter().any(|r| t.path.is_within(r)));
        }
        listing
    }

    /// Keeps `dir` out of every listing when it lies below the worktree: ckpt's own store
    /// (e.g. a workspace that is the home directory holding `~/.local/share/ckpt`). Its content
    /// is then never captured, and a restore never writes or removes anything inside it.
    pub fn reserve(&mut self, dir: &Path) {
        let Ok(dir) = dir.canonicalize().or_else(|_| absolute_parent_canonical(dir)) else {
            return;
        };
        let root = self.workdir.canonicalize().unwrap_or_else(|_| self.workdir.clone());
        if let Ok(relative) = dir.strip_prefix(&root) {
            if let Ok(path) = RepoPath::new(relative.as_os_str().as_encoded_bytes().to_vec()) {
                self.reserved.push(path);
            }
        }
    }

    /// The directories [`Self::reserve`] keeps out of listings.
    pub fn reserved(&self) -> &[RepoPath] {
        &self.reserved
    }
}

/// How many times the walk for untracked paths is taken when the worktree changes under it.
const WALK_ATTEMPTS: u32 = 8;

/// What the walk for untracked paths finds: the walk half of a [`WorktreeListing`].
fn walk_untracked(repo: &gix::Repository, index: &gix::index::File) -> Result<WorktreeListing, VerbError> {
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
    let no_patterns: [&BStr; 0] = [];
    // A directory removed while the walk is inside it fails gix's walk; git treats such a path
    // as absent, so the walk is simply taken again (a bounded number of times).
    let mut attempt = 1;
    loop {
        match repo.dirwalk(index, no_patterns, &interrupt, options, &mut collect) {
            Ok(_) => break,
            Err(_) if attempt < WALK_ATTEMPTS => {
                attempt += 1;
                collect = gix::dir::walk::delegate::Collect::default();
            }
            Err(e) => {
                return Err(VerbError::git(
                    format!("walking the worktree ({attempt} attempts; did directories keep vanishing?)"),
                    e,
                ))
            }
        }
    }
    let mut listing = WorktreeListing::default();
    for (entry, _) in collect.into_entries_by_path() {
        use gix::dir::entry::{Kind, Status};
        let raw = entry.rela_path;
        if raw.is_empty() {
            continue;
        }
        let path = match RepoPath::new(raw.to_vec()) {
            Ok(path) => path,
            Err(e) => {
                listing.unrepresentable.push((raw.to_string(), e.to_string()));
                continue;
            }
        };
        match (entry.status, entry.disk_kind) {
            (Status::Ignored(_), kind) => listing.ignored.push((path, matches!(kind, Some(Kind::Directory)))),
            (Status::Untracked, Some(Kind::Repository)) => listing.nested_repos.push(path),
            (Status::Untracked, Some(Kind::Directory)) => {}
            (Status::Untracked, _) => listing.untracked.push(path),
            _ => {}
        }
    }
    Ok(listing)
}

/// One level of a tree: `(name, kind, id)` with `kind: None` for subtrees. A name twice in the
/// level is an error.
fn read_level(repo: &gix::Repository, id: &ObjectId) -> Result<Vec<LevelEntry>, VerbError> {
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

/// The blobs reachable from checkpoint trees (submodule pointers excluded), split by whether
/// HEAD's tree holds them too.
#[derive(Debug, Default)]
pub struct BlobCensus {
    pub blobs: super::IdSet,
    pub in_head: super::IdSet,
    /// The stored size of every blob in `blobs` that HEAD's tree does not hold.
    pub sizes_outside_head: super::IdMap<u64>,
}

/// A census running on its own thread.
pub struct CensusHandle {
    thread: std::thread::JoinHandle<Result<BlobCensus, VerbError>>,
}

impl CensusHandle {
    pub fn join(self) -> Result<BlobCensus, VerbError> {
        self.thread.join().unwrap_or_else(|_| {
            Err(VerbError::Git {
                action: "counting checkpoint blobs".into(),
                message: "the census thread panicked".into(),
            })
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
    let mut head_levels: super::IdMap<Level> = super::IdMap::default();
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
    let mut seen = super::IdSet::default();
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

/// A `Sync` handle that hashes (or stores) blobs from many threads; each thread takes a
/// [`LocalBlobs`] of its own.
pub struct ParallelBlobs {
    repo: gix::ThreadSafeRepository,
    store: bool,
}

/// One thread's blob hasher/writer.
pub struct LocalBlobs {
    repo: gix::Repository,
    store: bool,
}

/// Files at least this large are hashed and stored as streams, never read whole.
pub const STREAM_THRESHOLD: u64 = 8 * 1024 * 1024;

impl ParallelBlobs {
    pub fn local(&self) -> LocalBlobs {
        LocalBlobs {
            repo: self.repo.to_thread_local(),
            store: self.store,
        }
    }
}

impl LocalBlobs {
    /// Hashes `bytes` as a blob, and stores it when this handle stores and the store lacks it.
    pub fn put(&self, bytes: &[u8]) -> Result<PutBlob, VerbError> {
        let id = gix::objs::compute_hash(self.repo.object_hash(), gix::objs::Kind::Blob, bytes)
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a blob", e))?;
        if !self.store || self.repo.has_object(id.0) {
            return Ok(PutBlob { id, fresh: false });
        }
        let written = self
            .repo
            .write_blob(bytes)
            .map(|id| ObjectId(id.detach()))
            .map_err(|e| VerbError::git("writing a blob", e))?;
        Ok(PutBlob {
            id: written,
            fresh: true,
        })
    }

    /// Streams `size` bytes into a blob without holding them in memory. A stream that does not
    /// hold exactly `size` bytes (the file grew or shrank while being read) writes nothing: the
    /// object's header would disagree with its content.
    fn put_stream(&self, file: &mut dyn Read, size: u64, store: bool) -> Result<Streamed, VerbError> {
        use gix::objs::Write as _;
        let fault = Cell::new(None);
        let mut exact = ExactLength {
            inner: file,
            remaining: size,
            fault: &fault,
        };
        let result = if store {
            self.repo
                .objects
                .write_stream(gix::objs::Kind::Blob, size, &mut exact)
                .map(ObjectId)
                .map_err(|e| VerbError::git("writing a large blob", e))
        } else {
            let mut progress = gix::progress::Discard;
            let interrupt = std::sync::atomic::AtomicBool::new(false);
            gix::objs::compute_stream_hash(
                self.repo.object_hash(),
                gix::objs::Kind::Blob,
                &mut exact,
                size,
                &mut progress,
                &interrupt,
            )
            .map(ObjectId)
            .map_err(|e| VerbError::git("hashing a large blob", e))
        };
        match fault.take() {
            Some(SourceFault::LengthChanged) => Ok(Streamed::LengthChanged),
            Some(SourceFault::Unreadable(e)) => Ok(Streamed::Unreadable(e)),
            None => result.map(Streamed::Whole),
        }
    }

    /// Captures the regular file at `path` (opened without following a symlink): its content is
    /// hashed, and stored when this handle stores, only if the file held still while it was
    /// read — same size, mtime, ctime, inode and mode before and after, and exactly `size`
    /// bytes read. A file that changes under [`READ_ATTEMPTS`] reads is reported unstable,
    /// never captured torn.
    pub fn put_file(&self, path: &Path, max_size: u64) -> Result<FileRead, VerbError> {
        for attempt in 0..READ_ATTEMPTS {
            if attempt > 0 {
                // Give a writer in the middle of its work a moment to finish.
                std::thread::sleep(std::time::Duration::from_millis(5 << attempt));
            }
            let file = match super::worktree::open_no_follow(path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileRead::Vanished),
                // O_NOFOLLOW on a symlink: it was swapped for a link since it was listed.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                    return Ok(FileRead::Vanished)
                }
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            let before = match stat_of(&file) {
                Ok(stat) => stat,
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            if rustix::fs::FileType::from_raw_mode(before.mode) != rustix::fs::FileType::RegularFile {
                return Ok(FileRead::Vanished);
            }
            if before.size > max_size {
                return Ok(FileRead::TooLarge(before.size));
            }
            let mut reader = &file;
            let put = if before.size >= STREAM_THRESHOLD {
                // Hashed first; stored in a second pass only if the store lacks it, and kept
                // only if that pass hashed to the same id, so the stored object is the content
                // that held still.
                let id = match self.put_stream(&mut reader, before.size, false)? {
                    Streamed::Whole(id) => id,
                    Streamed::LengthChanged => continue,
                    Streamed::Unreadable(e) => return Ok(FileRead::Unreadable(e)),
                };
                if stat_of(&file).ok() != Some(before) {
                    continue;
                }
                if !self.store || self.repo.has_object(id.0) {
                    Some(PutBlob { id, fresh: false })
                } else {
                    if let Err(e) = reader.seek(std::io::SeekFrom::Start(0)) {
                        return Ok(FileRead::Unreadable(e));
                    }
                    match self.put_stream(&mut reader, before.size, true)? {
                        Streamed::Whole(stored) if stored == id => Some(PutBlob { id, fresh: true }),
                        Streamed::Whole(_) | Streamed::LengthChanged => None,
                        Streamed::Unreadable(e) => return Ok(FileRead::Unreadable(e)),
                    }
                }
            } else {
                let mut content = Vec::with_capacity(before.size as usize + 1);
                if let Err(e) = reader.read_to_end(&mut content) {
                    return Ok(FileRead::Unreadable(e));
                }
                // Hashed (and stored) only once the file is known to have held still.
                (content.len() as u64 == before.size && stat_of(&file).ok() == Some(before))
                    .then_some(content)
                    .map(|content| self.put(&content))
                    .transpose()?
            };
            let after = match stat_of(&file) {
                Ok(stat) => stat,
                Err(e) => return Ok(FileRead::Unreadable(e)),
            };
            if let Some(PutBlob { id, fresh }) = put.filter(|_| after == before) {
                return Ok(FileRead::Stable {
                    id,
                    stat: before,
                    fresh,
                });
            }
        }
        Ok(FileRead::Unstable)
    }
}

/// A blob hashed (and, by a storing handle, stored).
#[derive(Debug, Clone, Copy)]
pub struct PutBlob {
    pub id: ObjectId,
    /// The store did not hold this content before; this call added it.
    pub fresh: bool,
}

/// How many times [`LocalBlobs::put_file`] reads a file that keeps changing before giving up.
pub const READ_ATTEMPTS: u32 = 4;

/// What [`LocalBlobs::put_file`] made of a file.
#[derive(Debug)]
pub enum FileRead {
    /// Read while the file held still: the id of exactly those bytes, the file's stat then,
    /// and whether this read added the content to the store (it was not there before).
    Stable {
        id: ObjectId,
        stat: FileStat,
        fresh: bool,
    },
    /// The file changed while being read, every time it was read.
    Unstable,
    /// Gone, or no longer a regular file, by the time it was opened.
    Vanished,
    /// Grew past the size limit since it was listed.
    TooLarge(u64),
    Unreadable(std::io::Error),
}

/// `fstat` of an open file, in the form the stat cache keeps.
fn stat_of(file: &std::fs::File) -> std::io::Result<FileStat> {
    Ok(super::worktree::file_stat(&rustix::fs::fstat(file)?))
}

/// What streaming a file into a blob came to.
enum Streamed {
    Whole(ObjectId),
    /// The file grew or shrank while it was read; nothing was written.
    LengthChanged,
    /// Reading the file failed; nothing was written.
    Unreadable(std::io::Error),
}

/// Why a source stream was cut off, as [`ExactLength`] saw it.
enum SourceFault {
    LengthChanged,
    Unreadable(std::io::Error),
}

/// Passes on exactly `remaining` bytes and then requires end of file. A short or long source,
/// or a failed read, is recorded in `fault` and fails the read, so the write is abandoned.
struct ExactLength<'a> {
    inner: &'a mut dyn Read,
    remaining: u64,
    fault: &'a Cell<Option<SourceFault>>,
}

impl Read for ExactLength<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut probe = [0u8; 1];
        let wanted = buf.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let target = if self.remaining == 0 {
            &mut probe[..]
        } else {
            &mut buf[..wanted]
        };
        let read = loop {
            match self.inner.read(target) {
                Ok(read) => break read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fault.set(Some(SourceFault::Unreadable(e)));
                    return Err(std::io::Error::other("reading the file failed"));
                }
            }
        };
        match (self.remaining, read) {
            (0, 0) => Ok(0),
            (0, _) | (_, 0) if !target.is_empty() => {
                self.fault.set(Some(SourceFault::LengthChanged));
                Err(std::io::Error::other("the file changed length while it was read"))
            }
            _ => {
                self.remaining -= read as u64;
                Ok(read)
            }
        }
    }
}

/// How many index entries [`Vault::index_sizes_are_raw`] compares with their stored blobs.
const SIZE_SAMPLE: usize = 256;

impl Vault {
    /// A handle for hashing (`store: false`) or storing blobs in parallel.
    pub fn parallel_blobs(&self, store: bool) -> ParallelBlobs {
        ParallelBlobs {
            repo: self.repo.clone().into_sync(),
            store,
        }
    }

    /// Conservative: any filter, eol/autocrlf setting, or attribute that may convert content
    /// (text, eol, crlf, filter, ident, working-tree-encoding) disables seeding from the index.
    fn index_ids_are_raw(&self, tracked: &[TrackedEntry]) -> bool {
        let config = self.repo.config_snapshot();
        let converting = |key: &str| {
            config
                .string(key)
                .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_slice(), b"false" | b"lf" | b"native"))
        };
        if converting("core.autocrlf") || converting("core.eol") {
            return false;
        }
        if config
            .plumbing()
            .sections_by_name("filter")
            .is_some_and(|mut s| s.next().is_some())
        {
            return false;
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
        let attributes_raw = attribute_files.iter().all(|file| match std::fs::read(file) {
            Ok(text) => attributes_are_raw(&text),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        });
        attributes_raw && self.index_sizes_are_raw(tracked)
    }

    /// A conversion that was active when files were checked out or added (autocrlf set then and
    /// unset since, an attributes file since removed) shows as a stored blob whose length
    /// differs from the file length the index recorded. Checked on an even sample of at most
    /// [`SIZE_SAMPLE`] entries: one mismatch turns seeding off for the whole capture.
    fn index_sizes_are_raw(&self, tracked: &[TrackedEntry]) -> bool {
        let plain: Vec<&TrackedEntry> = tracked
            .iter()
            .filter(|t| matches!(t.item.kind, EntryKind::File | EntryKind::Executable) && t.stat.is_some())
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

/// True if no line of an attributes file sets an attribute that converts content.
fn attributes_are_raw(text: &[u8]) -> bool {
    const CONVERTING: [&str; 6] = ["text", "eol", "crlf", "filter", "ident", "working-tree-encoding"];
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
            !CONVERTING.contains(&name)
        })
    })
}

/// Whether the filesystem holding `git_dir` treats names differing only in case as different
/// files: `objects` is there, and `OBJECTS` is not the same directory. Read-only.
fn filesystem_tells_case_apart(git_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(lower) = std::fs::symlink_metadata(git_dir.join("objects")) else {
        return false;
    };
    match std::fs::symlink_metadata(git_dir.join("OBJECTS")) {
        Ok(upper) => upper.ino() != lower.ino() || upper.dev() != lower.dev(),
        Err(_) => true,
    }
}

/// An object of a checkpoint that failed verification, and the path it stands for (`None`: the
/// commit or the root tree).
#[derive(Debug)]
pub struct VerifyFailure {
    pub path: Option<RepoPath>,
    pub error: VerbError,
}

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}", path.display(), self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

/// `dir` made absolute through its nearest existing ancestor, for a directory not made yet.
fn absolute_parent_canonical(dir: &Path) -> std::io::Result<PathBuf> {
    let mut missing = Vec::new();
    let mut current = dir;
    loop {
        match current.canonicalize() {
            Ok(found) => {
                let mut out = found;
                out.extend(missing.iter().rev());
                return Ok(out);
            }
            Err(e) => {
                let (Some(parent), Some(name)) = (current.parent(), current.file_name()) else {
                    return Err(e);
                };
                missing.push(name.to_owned());
                current = parent;
            }
        }
    }
}

/// Tells a missing object from one that is there but of another kind or unreadable, so a
/// corrupt object or a ref to the wrong kind is never reported as "missing".
pub(super) fn lookup_error(
    repo: &gix::Repository,
    id: &ObjectId,
    what: &'static str,
    error: impl std::fmt::Display,
) -> VerbError {
    match repo.find_header(id.0) {
        Err(_) if !repo.has_object(id.0) => VerbError::MissingObject { id: *id, what },
        Ok(header) if header.kind().as_bytes() != what.as_bytes() => VerbError::UnusableObject {
            id: *id,
            what,
            why: format!("it is a {}", header.kind()),
        },
        _ => VerbError::UnusableObject {
            id: *id,
            what,
            why: error.to_string(),
        },
    }
}

impl Vault {
    /// Reads the commit `commit`, every tree below it and every blob they name, and checks that
    /// each object's content hashes to its id (a torn or corrupt loose object is caught here,
    /// not only a missing one). Objects in `verified` are skipped and verified ones are added,
    /// so checkpoints that share content are checked once. Read-only.
    pub fn verify_objects(&self, commit: &ObjectId, verified: &mut super::IdSet) -> Result<(), VerifyFailure> {
        let at_root = |error| VerifyFailure { path: None, error };
        let tree = self.read_commit(commit).map_err(at_root)?.tree;
        self.verify_object(commit, gix::objs::Kind::Commit, verified)
            .map_err(at_root)?;
        let mut frontier: Vec<(ObjectId, Option<RepoPath>)> = vec![(tree, None)];
        while let Some((tree, dir)) = frontier.pop() {
            if verified.contains(&tree) {
                continue;
            }
            let failed_at = |path: Option<RepoPath>| move |error| VerifyFailure { path, error };
            let level = read_level(&self.repo, &tree).map_err(failed_at(dir.clone()))?;
            for (name, kind, id) in level {
                let path = Self::child_path(dir.as_ref(), &name).map_err(failed_at(dir.clone()))?;
                match kind {
                    None => frontier.push((id, Some(path))),
                    Some(EntryKind::Gitlink) => {}
                    Some(_) => self
                        .verify_object(&id, gix::objs::Kind::Blob, verified)
                        .map_err(failed_at(Some(path)))?,
                }
            }
            self.verify_object(&tree, gix::objs::Kind::Tree, verified)
                .map_err(failed_at(dir))?;
        }
        Ok(())
    }

    fn verify_object(
        &self,
        id: &ObjectId,
        kind: gix::objs::Kind,
        verified: &mut super::IdSet,
    ) -> Result<(), VerbError> {
        if verified.contains(id) {
            return Ok(());
        }
        let what = match kind {
            gix::objs::Kind::Commit => "commit",
            gix::objs::Kind::Tree => "tree",
            gix::objs::Kind::Blob => "blob",
            gix::objs::Kind::Tag => "tag",
        };
        let object = self
            .repo
            .find_object(id.0)
            .map_err(|e| lookup_error(&self.repo, id, what, e))?;
        if object.kind != kind {
            return Err(VerbError::UnusableObject {
                id: *id,
                what,
                why: format!("it is a {}", object.kind),
            });
        }
        let actual = gix::objs::compute_hash(self.repo.object_hash(), kind, &object.data)
            .map_err(|e| VerbError::git("hashing an object", e))?;
        if actual != id.0 {
            return Err(VerbError::UnusableObject {
                id: *id,
                what,
                why: format!("its content hashes to {actual}: the stored object is corrupt"),
            });
        }
        verified.insert(*id);
        Ok(())
    }
}

/// What a private store needs to know to open: where its git dir, the shared object store and
/// the generated exclude file live, and which directory it protects.
pub struct PrivateStore<'a> {
    pub git_dir: &'a Path,
    pub objects: &'a Path,
    pub excludes_file: &'a Path,
    pub workdir: &'a Path,
}

/// Quotes a value for a git config file (the path of the protected directory, byte-exact).
fn config_quote(value: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &b in value {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

impl Vault {
    /// Opens (creating on first use) the private git directory that backs the copy provider for
    /// `store.workdir`: its own refs and config, `core.worktree` pointing at the protected
    /// directory, and an `objects` link into the shared content-addressed store, so identical
    /// content is stored once across all workspaces. Nothing is written inside the workdir.
    pub fn open_private(store: &PrivateStore<'_>) -> Result<Vault, VerbError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| VerbError::Git {
            action: format!("preparing the private store at {}", store.git_dir.display()),
            message: format!("{what}: {e}"),
        };
        if !store.git_dir.join("config").is_file() {
            for sub in ["pack", "info"] {
                std::fs::create_dir_all(store.objects.join(sub)).map_err(|e| fail("creating the object store", &e))?;
            }
            let parent = store.git_dir.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(parent).map_err(|e| fail("creating its directory", &e))?;
            let staging = parent.join(format!(".git-{}.tmp", std::process::id()));
            std::fs::remove_dir_all(&staging).ok();
            gix::init_bare(&staging).map_err(|e| fail("initializing", &e))?;
            std::fs::remove_dir_all(staging.join("objects")).map_err(|e| fail("replacing objects", &e))?;
            std::os::unix::fs::symlink(store.objects, staging.join("objects"))
                .map_err(|e| fail("linking the shared objects", &e))?;
            let mut config = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ".to_vec();
            config.extend(config_quote(store.workdir.as_os_str().as_encoded_bytes()));
            config.extend_from_slice(b"\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n");
            std::fs::write(staging.join("config"), &config).map_err(|e| fail("writing its config", &e))?;
            std::fs::remove_dir_all(staging.join("hooks")).ok();
            if let Err(e) = std::fs::rename(&staging, store.git_dir) {
                std::fs::remove_dir_all(&staging).ok();
                if !store.git_dir.join("config").is_file() {
                    return Err(fail("moving it into place", &e));
                }
            }
        }
        let mut overrides: Vec<gix::bstr::BString> = CONFIG_OVERRIDES.iter().map(|s| (*s).into()).collect();
        let mut excludes: gix::bstr::BString = "core.excludesFile=".into();
        excludes.extend_from_slice(store.excludes_file.as_os_str().as_encoded_bytes());
        overrides.push(excludes);
        let options = gix::open::Options::default().config_overrides(overrides);
        let repo = gix::open_opts(store.git_dir, options).map_err(|e| fail("opening", &e))?;
        let workdir = repo.workdir().map(Path::to_path_buf).ok_or_else(|| VerbError::Git {
            action: format!("opening the private store at {}", store.git_dir.display()),
            message: "it has no worktree configured".into(),
        })?;
        let same = workdir.canonicalize().ok() == store.workdir.canonicalize().ok();
        if !same {
            return Err(VerbError::Git {
                action: format!("opening the private store at {}", store.git_dir.display()),
                message: format!("it protects {}, not {}", workdir.display(), store.workdir.display()),
            });
        }
        Ok(Vault {
            repo,
            workdir,
            reserved: Vec::new(),
        })
    }
}

/// A stable key for a directory path (its SHA-1, hex, cut to 20 digits), for naming the private
/// state of a workspace outside it.
pub fn path_key(path: &Path) -> Result<WorkspaceKey, VerbError> {
    let id = gix::objs::compute_hash(
        gix::hash::Kind::Sha1,
        gix::objs::Kind::Blob,
        path.as_os_str().as_encoded_bytes(),
    )
    .map_err(|e| VerbError::git("hashing a workspace path", e))?;
    Ok(WorkspaceKey::new(&format!("ws-{}", &id.to_hex().to_string()[..20]))?)
}

/// The common git directory of the repository containing `dir` (unborn HEAD included), if any.
pub fn enclosing_common_dir(dir: &Path) -> Option<PathBuf> {
    gix::discover(dir).ok().map(|repo| repo.common_dir().to_path_buf())
}

/// The exclude files git itself applies in the repository containing `dir`, lowest precedence
/// first: the global one (`core.excludesFile`, else `$XDG_CONFIG_HOME/git/ignore` or
/// `~/.config/git/ignore`) and then `info/exclude`. Only files that exist are listed; empty
/// outside any repository. Read-only.
pub fn enclosing_exclude_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(repo) = gix::discover(dir) else {
        return Vec::new();
    };
    let configured = repo.config_snapshot().trusted_path("core.excludesFile").ok().flatten();
    let global = configured.or_else(|| {
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
            .map(|config| config.join("git").join("ignore"))
    });
    let info = repo.common_dir().join("info").join("exclude");
    global.into_iter().chain([info]).filter(|path| path.is_file()).collect()
}

/// Where the repository containing `dir` has its worktree, even when HEAD is unborn; `None`
/// outside any repository.
pub fn enclosing_worktree(dir: &Path) -> Option<PathBuf> {
    gix::discover(dir)
        .ok()
        .and_then(|repo| repo.workdir().map(Path::to_path_buf))
}

/// What `collect_private_garbage` did (or would do).
#[derive(Debug, Default, Clone)]
pub struct GarbageReport {
    pub live_objects: usize,
    pub removed: usize,
    pub removed_bytes: u64,
    /// Unreferenced but younger than the grace period.
    pub kept_young: usize,
}

/// Garbage collection for the copy provider's shared object store: every object reachable from
/// a `refs/ckpt/` pin of any private git directory in `git_dirs` is live; a loose object that is
/// not live and older than `older_than` is removed (`dry_run`: only counted). Only files whose
/// names form a valid object id are ever touched. The caller must hold every workspace's lock.
pub fn collect_private_garbage(
    git_dirs: &[PathBuf],
    objects: &Path,
    older_than: std::time::SystemTime,
    dry_run: bool,
) -> Result<GarbageReport, VerbError> {
    let mut live: std::collections::HashSet<gix::ObjectId> = std::collections::HashSet::new();
    for git_dir in git_dirs {
        let repo = gix::open_opts(
            git_dir,
            gix::open::Options::default().config_overrides(CONFIG_OVERRIDES),
        )
        .map_err(|e| VerbError::git(format!("opening {}", git_dir.display()), e))?;
        let vault = Vault {
            workdir: git_dir.clone(),
            repo,
            reserved: Vec::new(),
        };
        let (pins, _) = vault.list_pins()?;
        for (_, commit) in pins {
            live.insert(commit.0);
            let info = vault.read_commit(&commit)?;
            live.insert(info.tree.0);
            let mut pending = vec![info.tree];
            let mut seen = std::collections::HashSet::new();
            while let Some(tree) = pending.pop() {
                if !seen.insert(tree) {
                    continue;
                }
                for (_, kind, child) in vault.tree_level(&tree)? {
                    if kind != Some(EntryKind::Gitlink) {
                        live.insert(child.0);
                    }
                    if kind.is_none() {
                        pending.push(child);
                    }
                }
            }
        }
    }
    let mut report = GarbageReport {
        live_objects: live.len(),
        ..GarbageReport::default()
    };
    let fail = |e: std::io::Error| VerbError::Git {
        action: format!("collecting garbage in {}", objects.display()),
        message: e.to_string(),
    };
    let entries = match std::fs::read_dir(objects) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(fail(e)),
    };
    for fanout in entries.flatten() {
        let prefix = fanout.file_name().to_string_lossy().into_owned();
        if prefix.len() != 2 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        for object in std::fs::read_dir(fanout.path()).map_err(fail)?.flatten() {
            let rest = object.file_name().to_string_lossy().into_owned();
            let Ok(id) = gix::ObjectId::from_hex(format!("{prefix}{rest}").as_bytes()) else {
                continue;
            };
            if live.contains(&id) {
                continue;
            }
            let meta = object.metadata().map_err(fail)?;
            if !meta.is_file() {
                continue;
            }
            if meta.modified().map_err(fail)? > older_than {
                report.kept_young += 1;
                continue;
            }
            report.removed += 1;
            report.removed_bytes += meta.len();
            if !dry_run {
                std::fs::remove_file(object.path()).map_err(fail)?;
            }
        }
    }
    Ok(report)
}

fn split_side(side: Option<(Option<EntryKind>, ObjectId)>) -> (Option<TreeItem>, Option<ObjectId>) {
    match side {
        Some((Some(kind), id)) => (Some(TreeItem { kind, id }), None),
        Some((None, id)) => (None, Some(id)),
        None => (None, None),
    }
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

#[cfg(test)]
mod tests {
    use super::attributes_are_raw;

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
