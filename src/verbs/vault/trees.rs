//! Tree reading: one level at a time, whole trees validated (hostile names refused), flattened,
//! and diffed level by level so only differing subtrees are read. Read-only.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::objects::NewTreeEntry;
use super::Vault;
use crate::verbs::types::{EntryKind, IdMap, ObjectId, RepoPath, TreeItem};
use crate::verbs::{InvalidInput, VerbError};

/// The most paths a tree ckpt reads may hold (files, below every subtree). Far beyond any
/// worktree, yet it bounds what a hand-made tree can cost: 42 objects naming one subtree twice
/// at each of 40 levels hold 2^40 paths, and listing them would run a restore out of memory.
pub const MAX_TREE_PATHS: u64 = 5_000_000;

fn too_large(files: u64) -> VerbError {
    InvalidInput::TreeTooLarge {
        files,
        most: MAX_TREE_PATHS,
    }
    .into()
}

/// One entry of one tree level: name, kind (`None` for a subtree), id.
pub type LevelEntry = (Vec<u8>, Option<EntryKind>, ObjectId);

/// How many files each tree read so far holds (subtrees included, submodule pointers not).
#[derive(Debug, Default, Clone)]
pub struct FileCounts(crate::verbs::IdMap<u64>);

impl FileCounts {
    /// How many files `tree` holds, if it was counted.
    pub fn total(&self, tree: &ObjectId) -> Option<u64> {
        self.0.get(tree).copied()
    }

    /// Counts an earlier check found: a tree named here is not read again (its names were
    /// validated then, and an id names the same content forever).
    pub fn known(trees: impl IntoIterator<Item = (ObjectId, u64)>) -> Self {
        FileCounts(trees.into_iter().collect())
    }

    /// Every tree counted, with its count.
    pub fn trees(&self) -> impl Iterator<Item = (ObjectId, u64)> + '_ {
        self.0.iter().map(|(id, count)| (*id, *count))
    }
}

/// One path whose entry differs between two trees (`None` = absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    pub path: RepoPath,
    pub old: Option<TreeItem>,
    pub new: Option<TreeItem>,
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

/// One level of a tree: `(name, kind, id)` with `kind: None` for subtrees. A name twice in the
/// level is an error.
pub(super) fn read_level(repo: &gix::Repository, id: &ObjectId) -> Result<Vec<LevelEntry>, VerbError> {
    decode_level(repo, id, false)
}

/// The file modes git writes (and `100664`, which early git wrote and git still reads as a
/// regular file). Any other mode is read by its type bits alone, as git does: `000000` as a
/// submodule pointer, `123456` as a symlink; no tree ckpt or git made holds one.
fn canonical_mode(mode: u16) -> bool {
    matches!(mode, 0o040000 | 0o100644 | 0o100755 | 0o100664 | 0o120000 | 0o160000)
}

/// [`read_level`]; with `strict_modes`, an entry of a mode git never writes is an error too
/// (for the trees a restore would write from; a user's own history is read as git reads it).
fn decode_level(repo: &gix::Repository, id: &ObjectId, strict_modes: bool) -> Result<Vec<LevelEntry>, VerbError> {
    let level = decode_level_whole(repo, id)?;
    if strict_modes {
        level.refuse_odd_modes()?;
    }
    Ok(level.entries)
}

/// A decoded tree level, with the first name whose mode git never writes (if any): a strict
/// reader refuses the level for it, a lenient one reads the mode by its type bits.
#[derive(Debug, Clone, Default)]
pub(super) struct DecodedLevel {
    entries: Vec<LevelEntry>,
    /// The first entry of a mode git never writes, with that mode.
    odd_mode: Option<(Vec<u8>, u16)>,
}

impl DecodedLevel {
    fn refuse_odd_modes(&self) -> Result<(), VerbError> {
        match &self.odd_mode {
            Some((name, mode)) => Err(InvalidInput::TreeMode {
                name: String::from_utf8_lossy(name).into_owned(),
                mode: *mode,
            }
            .into()),
            None => Ok(()),
        }
    }
}

/// Tree levels a vault has read hash-checked, or written, in this process: an id names one
/// content forever, so a level one step of a restore decoded (the guard's new trees, the
/// previous checkpoint's levels its edits read) is not read and checked again by the next.
/// Bounded by the entries it holds (a long-lived process, the web view, keeps its vault);
/// past the bound, levels are read as if no cache were there.
#[derive(Debug, Default)]
pub(super) struct LevelCache {
    levels: std::cell::RefCell<IdMap<Rc<DecodedLevel>>>,
    entries: std::cell::Cell<usize>,
}

impl LevelCache {
    /// About 20 MB of entries: a restore of a few hundred changed paths in a 200k-file tree
    /// reads well under half of it.
    const MOST_ENTRIES: usize = 262_144;

    fn get(&self, id: &ObjectId) -> Option<Rc<DecodedLevel>> {
        self.levels.borrow().get(id).cloned()
    }

    fn room_for(&self, entries: usize) -> bool {
        self.entries.get() + entries <= Self::MOST_ENTRIES
    }

    fn keep(&self, id: ObjectId, level: &Rc<DecodedLevel>) {
        if !self.room_for(level.entries.len()) {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = self.levels.borrow_mut().entry(id) {
            slot.insert(level.clone());
            self.entries.set(self.entries.get() + level.entries.len());
        }
    }

    /// The level of a tree this vault is writing: its entries, as a read would decode them.
    pub(super) fn keep_written(&self, id: ObjectId, entries: &[gix::objs::tree::Entry]) {
        if !self.room_for(entries.len()) {
            return;
        }
        let level = DecodedLevel {
            entries: entries
                .iter()
                .map(|e| (e.filename.to_vec(), entry_kind(e.mode), ObjectId(e.oid)))
                .collect(),
            odd_mode: first_odd_mode(entries.iter().map(|e| (e.filename.as_slice(), e.mode.value()))),
        };
        self.keep(id, &Rc::new(level));
    }
}

/// The first of `entries` (name, mode) whose mode git never writes, with that mode.
fn first_odd_mode<'a>(mut entries: impl Iterator<Item = (&'a [u8], u16)>) -> Option<(Vec<u8>, u16)> {
    entries
        .find(|(_, mode)| !canonical_mode(*mode))
        .map(|(name, mode)| (name.to_vec(), mode))
}

/// One level of a tree, hash-checked and with its names checked for duplicates; modes as
/// stored (see [`DecodedLevel`]).
fn decode_level_whole(repo: &gix::Repository, id: &ObjectId) -> Result<DecodedLevel, VerbError> {
    // Hash-checked: a forged tree would name whatever content and paths its forger chose.
    let data = super::objects::read_checked(repo, id, gix::objs::Kind::Tree)?;
    let decoded = gix::objs::TreeRef::from_bytes(&data, repo.object_hash())
        .map_err(|e| VerbError::git(format!("decoding tree {id}"), e))?;
    let odd_mode = first_odd_mode(decoded.entries.iter().map(|e| (e.filename.as_ref(), e.mode.value())));
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
    Ok(DecodedLevel { entries, odd_mode })
}

/// What `tree` holds at `path` when that is a file, an executable or a symlink, read as a
/// restore reads its target (modes git never writes are refused); `None` for a directory,
/// for nothing, and where a level cannot be read. `levels` keeps each level read, for the
/// next path.
pub(crate) fn item_at(
    repo: &gix::Repository,
    tree: &ObjectId,
    path: &RepoPath,
    levels: &mut IdMap<Vec<LevelEntry>>,
) -> Option<TreeItem> {
    let mut tree = *tree;
    let mut names = path.components().peekable();
    while let Some(name) = names.next() {
        let level = match levels.entry(tree) {
            std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
            std::collections::hash_map::Entry::Vacant(new) => new.insert(decode_level(repo, &tree, true).ok()?),
        };
        let (_, kind, id) = level.iter().find(|(entry, _, _)| entry.as_slice() == name)?;
        match (kind, names.peek().is_none()) {
            (None, false) => tree = *id,
            (Some(kind), true) => return Some(TreeItem { kind: *kind, id: *id }),
            _ => return None,
        }
    }
    None
}

/// A level's entries in plain name order.
fn by_name(level: &DecodedLevel) -> Vec<&LevelEntry> {
    let mut entries: Vec<&LevelEntry> = level.entries.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries
}

fn split_side(side: Option<(Option<EntryKind>, ObjectId)>) -> (Option<TreeItem>, Option<ObjectId>) {
    match side {
        Some((Some(kind), id)) => (Some(TreeItem { kind, id }), None),
        Some((None, id)) => (None, Some(id)),
        None => (None, None),
    }
}

impl Vault {
    pub(super) fn child_path(parent: Option<&RepoPath>, name: &[u8]) -> Result<RepoPath, VerbError> {
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

    /// One level of a stored tree: name, kind (`None` for a subtree), id. A name twice in the
    /// level is an error.
    pub fn tree_level(&self, tree: &ObjectId) -> Result<Vec<LevelEntry>, VerbError> {
        self.cached_level(tree, false)
    }

    /// One level of `tree` as [`decode_level`] reads it, taken from this vault's
    /// [`LevelCache`] where a read or a write here has put it.
    fn cached_level(&self, tree: &ObjectId, strict_modes: bool) -> Result<Vec<LevelEntry>, VerbError> {
        Ok(self.shared_level(tree, strict_modes)?.entries.clone())
    }

    /// Refuses a path a restore could create only by opening its directories one by one: with
    /// the worktree's own path it is at least as long as the system's path limit, so git, and
    /// every later walk of the worktree (ckpt's own snapshots and the undo of this very
    /// restore), could no longer name it, and every later snapshot would fail.
    fn refuse_unnameable(&self, path: &RepoPath) -> Result<(), VerbError> {
        let bytes = path.as_bytes().len();
        let most = self.most_path_bytes();
        if bytes <= most {
            return Ok(());
        }
        let shown: Vec<u8> = path.as_bytes().iter().take(60).copied().collect();
        Err(InvalidInput::PathTooLong {
            start: String::from_utf8_lossy(&shown).into_owned(),
            bytes,
            most,
        }
        .into())
    }

    /// The longest repository path this worktree can name: with the worktree's own path and a
    /// separator, shorter than the system's path limit.
    fn most_path_bytes(&self) -> usize {
        #[cfg(target_os = "macos")]
        const PATH_MAX: usize = 1024;
        #[cfg(not(target_os = "macos"))]
        const PATH_MAX: usize = 4096;
        PATH_MAX.saturating_sub(self.workdir.as_os_str().len() + 2)
    }

    /// The first 60 bytes of the longest path below `tree`, to name in a refusal: descends into
    /// the entry whose name and longest path below add up most (`longest`, per tree).
    fn longest_path_start(&self, tree: &ObjectId, longest: &crate::verbs::IdMap<u64>) -> Result<Vec<u8>, VerbError> {
        let mut path: Vec<u8> = Vec::new();
        let mut current = *tree;
        while path.len() < 60 {
            let level = self.shared_level(&current, false)?;
            let length = |(name, kind, id): &&LevelEntry| match kind {
                None => name.len() as u64 + 1 + longest.get(id).copied().unwrap_or(0),
                Some(_) => name.len() as u64,
            };
            let Some((name, kind, id)) = level.entries.iter().max_by_key(length) else {
                break;
            };
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            match kind {
                None => current = *id,
                Some(_) => break,
            }
        }
        path.truncate(60);
        Ok(path)
    }

    /// [`Self::cached_level`], shared with the cache rather than copied.
    fn shared_level(&self, tree: &ObjectId, strict_modes: bool) -> Result<Rc<DecodedLevel>, VerbError> {
        let level = match self.levels.get(tree) {
            Some(level) => level,
            None => {
                let level = Rc::new(decode_level_whole(&self.repo, tree)?);
                self.levels.keep(*tree, &level);
                level
            }
        };
        if strict_modes {
            level.refuse_odd_modes()?;
        }
        Ok(level)
    }

    /// Reads every tree below `tree` and checks every name the way [`Self::read_tree`] does
    /// (no `/`, `.`, `..`, `.git`, empty or duplicate names), without building paths.
    pub fn validate_tree(&self, tree: &ObjectId) -> Result<FileCounts, VerbError> {
        let mut counts = FileCounts::default();
        let (_, longest) = self.read_levels(tree, &mut counts)?;
        // Preview, diff and audit refuse what a restore refuses: a path it could not name.
        let bytes = longest.get(tree).copied().unwrap_or(0);
        let most = self.most_path_bytes();
        if bytes as usize > most {
            let start = self.longest_path_start(tree, &longest)?;
            return Err(InvalidInput::PathTooLong {
                start: String::from_utf8_lossy(&start).into_owned(),
                bytes: bytes as usize,
                most,
            }
            .into());
        }
        Ok(counts)
    }

    /// [`Self::validate_tree`] on a thread of its own, so the caller can do other work (that
    /// writes nothing) meanwhile; the trees `known` holds are not read again. Where no thread
    /// can be started, it runs here and now.
    pub fn validate_tree_aside(&self, tree: &ObjectId, known: FileCounts) -> TreeCheck {
        let shared = self.repo.clone().into_sync();
        let tree = *tree;
        let seeded = !known.0.is_empty();
        let check = move || {
            let mut counts = known;
            match read_levels_in(&shared, &tree, &mut counts) {
                Ok(_) => Ok(counts),
                // (The restore's own diff refuses a path too long to name.)
                // A count the caller knew may be wrong (a tampered list): a tree is refused as
                // too large only on counts this check made itself.
                Err(VerbError::Invalid(InvalidInput::TreeTooLarge { .. })) if seeded => {
                    let mut counts = FileCounts::default();
                    read_levels_in(&shared, &tree, &mut counts).map(|_| counts)
                }
                Err(e) => Err(e),
            }
        };
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new().name("ckpt-tree-check".into()).spawn({
            let check = check.clone();
            move || {
                // The receiver may be gone (the caller failed first): nothing to tell then.
                sender.send(check()).ok();
            }
        });
        match spawned {
            Ok(_) => TreeCheck::Running(receiver),
            Err(_) => TreeCheck::Done(check()),
        }
    }

    /// Reads, validates and counts every tree below `tree` that `counts` does not hold yet.
    fn read_levels(
        &self,
        tree: &ObjectId,
        counts: &mut FileCounts,
    ) -> Result<(u64, crate::verbs::IdMap<u64>), VerbError> {
        read_levels_in(&self.repo.clone().into_sync(), tree, counts)
    }
}

/// A [`Vault::validate_tree`] running aside; [`Self::wait`] for its answer.
pub enum TreeCheck {
    Running(std::sync::mpsc::Receiver<Result<FileCounts, VerbError>>),
    Done(Result<FileCounts, VerbError>),
}

impl TreeCheck {
    /// The check's answer, once it has one.
    pub fn wait(self) -> Result<FileCounts, VerbError> {
        match self {
            TreeCheck::Done(answer) => answer,
            TreeCheck::Running(receiver) => receiver.recv().unwrap_or_else(|_| {
                Err(VerbError::git_because(
                    "checking the target tree",
                    "the checking thread ended without an answer",
                ))
            }),
        }
    }
}

/// Reads, validates and counts every tree below `tree` that `counts` does not hold yet. Level
/// by level, each level's trees read in parallel, each worker with its own handle.
/// Of one tree level: its longest name other than a subtree's, and each subtree's name length
/// (in the order of its subtrees).
type NameLengths = (u64, Vec<u64>);

/// Returns the file count, and the longest path in bytes below each tree read (none when
/// `counts` knew `tree`).
fn read_levels_in(
    shared: &gix::ThreadSafeRepository,
    tree: &ObjectId,
    counts: &mut FileCounts,
) -> Result<(u64, crate::verbs::IdMap<u64>), VerbError> {
    use rayon::prelude::*;
    if let Some(total) = counts.0.get(tree) {
        return Ok((within_limit(*total)?, Default::default()));
    }
    // Per tree read: its files, its subtrees, and the longest path below it in bytes (a
    // subtree's name plus its own longest, or the longest other name).
    let mut levels: crate::verbs::IdMap<(u64, Vec<ObjectId>)> = Default::default();
    let mut names: crate::verbs::IdMap<NameLengths> = Default::default();
    let mut seen = crate::verbs::IdSet::default();
    seen.insert(*tree);
    let mut frontier = vec![*tree];
    while !frontier.is_empty() {
        let read: Vec<(ObjectId, u64, Vec<ObjectId>, NameLengths)> = frontier
            .par_iter()
            .map_init(
                || shared.to_thread_local(),
                |repo, id| {
                    let mut files = 0;
                    let mut subtrees = Vec::new();
                    let (mut longest_name, mut subtree_names) = (0u64, Vec::new());
                    let mut level = || -> Result<(), VerbError> {
                        for (name, kind, child) in decode_level(repo, id, true)? {
                            NewTreeEntry::new(&name, kind, child)?;
                            match kind {
                                None => {
                                    subtrees.push(child);
                                    subtree_names.push(name.len() as u64);
                                }
                                Some(EntryKind::Gitlink) => longest_name = longest_name.max(name.len() as u64),
                                Some(_) => {
                                    files += 1;
                                    longest_name = longest_name.max(name.len() as u64);
                                }
                            }
                        }
                        Ok(())
                    };
                    level().map_err(|e| (*id, Box::new(e)))?;
                    Ok((*id, files, subtrees, (longest_name, subtree_names)))
                },
            )
            .collect::<Result<_, (ObjectId, Box<VerbError>)>>()
            .map_err(|(failed, e)| {
                // Paths are not built on the way down (a tree reached twice is read once);
                // the failing tree's place is looked up only now, to name it.
                let repo = shared.to_thread_local();
                e.at_tree_path(directory_of(&repo, tree, &failed).as_ref())
            })?;
        frontier = Vec::new();
        for (id, files, subtrees, lengths) in read {
            names.insert(id, lengths);
            frontier.extend(
                subtrees
                    .iter()
                    .filter(|child| !counts.0.contains_key(*child) && seen.insert(**child)),
            );
            levels.insert(id, (files, subtrees));
        }
    }
    // Totals bottom-up, without recursion (a hostile tree may be nested arbitrarily deep): a
    // tree is summed once all its subtrees are; one reached twice is summed once.
    let mut pending = vec![(*tree, false)];
    let mut longest: crate::verbs::IdMap<u64> = Default::default();
    while let Some((id, children_done)) = pending.pop() {
        if counts.0.contains_key(&id) {
            continue;
        }
        let Some((files, subtrees)) = levels.get(&id) else {
            continue;
        };
        if children_done {
            // Saturating: a subtree named many times may hold more paths than a u64 counts.
            let total = subtrees
                .iter()
                .map(|child| counts.0.get(child).copied().unwrap_or(0))
                .fold(*files, u64::saturating_add);
            counts.0.insert(id, total);
            if let Some((longest_name, subtree_names)) = names.get(&id) {
                // A tree checked by an earlier call counts as 0 here: its paths were checked
                // where it was first read.
                let below = subtrees
                    .iter()
                    .zip(subtree_names)
                    .map(|(child, name)| {
                        name.saturating_add(1)
                            .saturating_add(longest.get(child).copied().unwrap_or(0))
                    })
                    .fold(*longest_name, u64::max);
                longest.insert(id, below);
            }
        } else {
            pending.push((id, true));
            pending.extend(
                subtrees
                    .iter()
                    .filter(|c| !counts.0.contains_key(*c))
                    .map(|c| (*c, false)),
            );
        }
    }
    let total = within_limit(counts.0.get(tree).copied().unwrap_or(0))?;
    Ok((total, longest))
}

/// `total`, unless a tree holding that many paths is too large to read.
fn within_limit(total: u64) -> Result<u64, VerbError> {
    match total > MAX_TREE_PATHS {
        true => Err(too_large(total)),
        false => Ok(total),
    }
}

/// The first directory of `root`'s tree (breadth first) whose tree is `target`; `None` for the
/// root itself or when none is found. Levels that cannot be read are passed over.
fn directory_of(repo: &gix::Repository, root: &ObjectId, target: &ObjectId) -> Option<RepoPath> {
    let mut seen = crate::verbs::IdSet::default();
    let mut frontier: std::collections::VecDeque<(Option<RepoPath>, ObjectId)> = [(None, *root)].into();
    while let Some((dir, id)) = frontier.pop_front() {
        if !seen.insert(id) {
            continue;
        }
        let Ok(level) = read_level(repo, &id) else {
            continue;
        };
        for (name, kind, child) in level {
            let Ok(path) = Vault::child_path(dir.as_ref(), &name) else {
                continue;
            };
            if kind.is_none() {
                if child == *target {
                    return Some(path);
                }
                frontier.push_back((Some(path), child));
            }
        }
    }
    None
}

impl Vault {
    /// Every non-tree entry below `tree`, like `ls-tree -r`. A hostile name in the tree (`..`,
    /// `.git`, `/`) is an error, never a path.
    pub fn read_tree(&self, tree: &ObjectId) -> Result<BTreeMap<RepoPath, TreeItem>, VerbError> {
        let mut out = BTreeMap::new();
        let mut pending: Vec<(Option<RepoPath>, ObjectId)> = vec![(None, *tree)];
        while let Some((prefix, id)) = pending.pop() {
            let in_dir = |e: VerbError| e.at_tree_path(prefix.as_ref());
            for (name, kind, child) in self.tree_level(&id).map_err(in_dir)? {
                let path = Self::child_path(prefix.as_ref(), &name).map_err(in_dir)?;
                match kind {
                    Some(kind) => {
                        out.insert(path, TreeItem { kind, id: child });
                        if out.len() as u64 > MAX_TREE_PATHS {
                            return Err(too_large(out.len() as u64));
                        }
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
        self.diff_levels(old, new, false, false).map(|(changes, _)| changes)
    }

    /// [`Self::diff_trees`] for counting what a snapshot changed against the user's HEAD, which
    /// may hold names no checkpoint can (a `GIT~1` committed with `core.protectNTFS` off, or
    /// imported): those entries are left out of the count rather than failing every snapshot.
    pub fn diff_trees_counting(
        &self,
        old: Option<&ObjectId>,
        new: Option<&ObjectId>,
    ) -> Result<Vec<TreeChange>, VerbError> {
        self.diff_levels(old, new, false, true).map(|(changes, _)| changes)
    }

    /// [`Self::diff_trees`] for a restore to `new`: with every tree of `old` the changes lie in
    /// (the trees that reach `old`'s side of each change, its root first), and every level of
    /// `new` it reads held to the modes git writes. The restore's check of `new` may have
    /// skipped trees it was told were checked before; a mode it would refuse is refused here
    /// too, never read as a submodule pointer and passed over.
    pub fn diff_trees_to_restore(
        &self,
        old: Option<&ObjectId>,
        new: Option<&ObjectId>,
    ) -> Result<(Vec<TreeChange>, Vec<ObjectId>), VerbError> {
        self.diff_levels(old, new, true, false)
    }

    fn diff_levels(
        &self,
        old: Option<&ObjectId>,
        new: Option<&ObjectId>,
        strict_new: bool,
        skip_unnamable: bool,
    ) -> Result<(Vec<TreeChange>, Vec<ObjectId>), VerbError> {
        let mut changes = Vec::new();
        let mut old_trees = Vec::new();
        // A worklist, not recursion: a hostile tree may be nested arbitrarily deep, and recursion
        // would overflow the stack.
        let mut pending: Vec<(Option<RepoPath>, Option<ObjectId>, Option<ObjectId>)> =
            vec![(None, old.copied(), new.copied())];
        while let Some((prefix, old, new)) = pending.pop() {
            if let Some(tree) = old.filter(|tree| Some(*tree) != new) {
                old_trees.push(tree);
            }
            self.diff_level(
                prefix.as_ref(),
                (old, new),
                (strict_new, skip_unnamable),
                &mut changes,
                &mut pending,
            )?;
            if changes.len() as u64 > MAX_TREE_PATHS {
                return Err(too_large(changes.len() as u64));
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((changes, old_trees))
    }

    /// The differing entries of one level go to `out`; differing subtrees to `pending`.
    fn diff_level(
        &self,
        prefix: Option<&RepoPath>,
        (old, new): (Option<ObjectId>, Option<ObjectId>),
        (strict_new, skip_unnamable): (bool, bool),
        out: &mut Vec<TreeChange>,
        pending: &mut Vec<(Option<RepoPath>, Option<ObjectId>, Option<ObjectId>)>,
    ) -> Result<(), VerbError> {
        if old == new {
            return Ok(());
        }
        let in_dir = |e: VerbError| e.at_tree_path(prefix);
        let level = |tree: Option<ObjectId>, strict: bool| match tree {
            Some(tree) => self.shared_level(&tree, strict).map_err(in_dir),
            None => Ok(Rc::default()),
        };
        let (old_level, new_level) = (level(old, false)?, level(new, strict_new)?);
        // Git orders a tree's entries with a subtree's name read as ending in `/`; matched by
        // plain name here, each side is put in plain name order (no level holds a name twice).
        let (olds, news) = (by_name(&old_level), by_name(&new_level));
        let side = |entry: &LevelEntry| Some((entry.1, entry.2));
        let (mut i, mut j) = (0, 0);
        loop {
            let (name, a, b) = match (olds.get(i), news.get(j)) {
                (None, None) => break,
                (Some(a), Some(b)) if a.0 == b.0 => {
                    (i, j) = (i + 1, j + 1);
                    (&a.0, side(a), side(b))
                }
                (Some(a), Some(b)) if a.0 < b.0 => {
                    i += 1;
                    (&a.0, side(a), None)
                }
                (Some(a), None) => {
                    i += 1;
                    (&a.0, side(a), None)
                }
                (_, Some(b)) => {
                    j += 1;
                    (&b.0, None, side(b))
                }
            };
            if a == b {
                continue;
            }
            let path = match Self::child_path(prefix, name) {
                Ok(path) => path,
                Err(_) if skip_unnamable => continue,
                Err(e) => return Err(in_dir(e)),
            };
            if strict_new && b.is_some() {
                self.refuse_unnameable(&path)?;
            }
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
                pending.push((Some(path), a_tree, b_tree));
            }
        }
        Ok(())
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

/// Verifying a checkpoint reads every tree of it, level by level.
impl Vault {
    /// Reads the commit `commit`, every tree below it and every blob they name, and checks that
    /// each object's content hashes to its id (a torn or corrupt loose object is caught here,
    /// not only a missing one). Objects in `verified` are skipped and verified ones are added,
    /// so checkpoints that share content are checked once. Read-only.
    pub fn verify_objects(&self, commit: &ObjectId, verified: &mut crate::verbs::IdSet) -> Result<(), VerifyFailure> {
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
        verified: &mut crate::verbs::IdSet,
    ) -> Result<(), VerbError> {
        if verified.contains(id) {
            return Ok(());
        }
        super::objects::read_checked(&self.repo, id, kind)?;
        verified.insert(*id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix::prelude::Write;

    fn scratch_vault(dir: &std::path::Path) -> Vault {
        gix::init(dir).expect("a scratch repository");
        opened(dir)
    }

    fn opened(dir: &std::path::Path) -> Vault {
        Vault::discover(dir).expect("opened").expect("a worktree repository")
    }

    fn stored_tree(vault: &Vault, raw: &[u8]) -> ObjectId {
        ObjectId(vault.repo.write_buf(gix::objs::Kind::Tree, raw).expect("tree written"))
    }

    #[test]
    fn a_written_level_reads_as_a_fresh_read_of_its_stored_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = scratch_vault(dir.path());
        let blob = ObjectId(vault.repo.write_blob(b"content\n").expect("blob").detach());
        let inner = vault
            .write_tree(vec![
                NewTreeEntry::new(b"f", Some(EntryKind::File), blob).expect("entry")
            ])
            .expect("inner tree");
        let entries = vec![
            NewTreeEntry::new(b"z-link", Some(EntryKind::Symlink), blob).expect("entry"),
            NewTreeEntry::new(b"a.x", Some(EntryKind::Executable), blob).expect("entry"),
            NewTreeEntry::new(b"a", None, inner).expect("entry"),
            NewTreeEntry::new(b"a-", Some(EntryKind::File), blob).expect("entry"),
        ];
        let tree = vault.write_tree(entries).expect("tree");
        let fresh = opened(dir.path());
        assert!(fresh.levels.get(&tree).is_none());
        assert_eq!(
            vault.tree_level(&tree).expect("cached"),
            fresh.tree_level(&tree).expect("read")
        );
        assert_eq!(
            vault.tree_level(&inner).expect("cached"),
            fresh.tree_level(&inner).expect("read")
        );
    }

    #[test]
    fn the_level_cache_holds_no_more_entries_than_its_bound() {
        let cache = LevelCache::default();
        let id = |n: u8| ObjectId(gix::ObjectId::Sha1([n; 20]));
        let level = |entries: usize| {
            Rc::new(DecodedLevel {
                entries: vec![(b"f".to_vec(), Some(EntryKind::File), id(0)); entries],
                odd_mode: None,
            })
        };
        let third = LevelCache::MOST_ENTRIES / 3;
        for n in 1..=3 {
            cache.keep(id(n), &level(third));
        }
        cache.keep(id(1), &level(third));
        assert_eq!(cache.entries.get(), 3 * third, "a level kept twice counts once");
        cache.keep(id(4), &level(third));
        assert!(cache.get(&id(4)).is_none(), "past the bound nothing more is kept");
        assert!(cache.get(&id(3)).is_some());
        assert!(cache.entries.get() <= LevelCache::MOST_ENTRIES);
    }

    #[test]
    fn a_level_read_leniently_is_still_refused_by_a_strict_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = scratch_vault(dir.path());
        let blob = ObjectId(vault.repo.write_blob(b"/etc\n").expect("blob").detach());
        let mut raw = b"100600 odd\0".to_vec();
        raw.extend_from_slice(blob.0.as_bytes());
        let tree = stored_tree(&vault, &raw);
        assert_eq!(vault.tree_level(&tree).expect("lenient").len(), 1);
        assert!(vault.levels.get(&tree).is_some(), "the lenient read is kept");
        let strict = vault.diff_trees_to_restore(None, Some(&tree)).expect_err("refused");
        assert!(strict.to_string().contains("file mode"), "{strict}");
    }

    /// Random trees over names that git orders differently from plain byte order (`a`, `a-`,
    /// `a.x`, and `a` as a directory), with files turning into directories and back.
    fn random_tree(vault: &Vault, state: &mut u64, depth: u32, blobs: &[ObjectId]) -> ObjectId {
        let mut next = || {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*state >> 33) as usize
        };
        let mut entries = Vec::new();
        for name in [&b"a"[..], b"a-", b"a.x", b"b", b"c0"] {
            match next() % 4 {
                0 => {}
                1 if depth > 0 => {
                    let mut inner = next() as u64;
                    entries.push(
                        NewTreeEntry::new(name, None, random_tree(vault, &mut inner, depth - 1, blobs)).expect("entry"),
                    );
                }
                _ => {
                    let kind = [EntryKind::File, EntryKind::Executable, EntryKind::Symlink][next() % 3];
                    entries.push(NewTreeEntry::new(name, Some(kind), blobs[next() % blobs.len()]).expect("entry"));
                }
            }
        }
        vault.write_tree(entries).expect("tree")
    }

    #[test]
    fn a_diff_names_exactly_the_paths_whose_entries_differ() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = scratch_vault(dir.path());
        let blobs: Vec<ObjectId> = (0..2)
            .map(|n| ObjectId(vault.repo.write_blob(format!("{n}").as_bytes()).expect("blob").detach()))
            .collect();
        let mut state = 7;
        for round in 0..200 {
            let old = random_tree(&vault, &mut state, 3, &blobs);
            let new = random_tree(&vault, &mut state, 3, &blobs);
            let (before, after) = (vault.read_tree(&old).expect("old"), vault.read_tree(&new).expect("new"));
            let mut expected: Vec<TreeChange> = before
                .keys()
                .chain(after.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|path| before.get(*path) != after.get(*path))
                .map(|path| TreeChange {
                    path: path.clone(),
                    old: before.get(path).copied(),
                    new: after.get(path).copied(),
                })
                .collect();
            expected.sort_by(|a, b| a.path.cmp(&b.path));
            let fresh = opened(dir.path());
            for reader in [&vault, &fresh] {
                let (changes, _) = reader.diff_trees_to_restore(Some(&old), Some(&new)).expect("diff");
                assert_eq!(changes, expected, "round {round}");
            }
        }
    }
}
