//! Builds a checkpoint's tree objects from a capture. With a base tree that the capture is known
//! to differ from only in some directories (the stat cache's checkpoint), only those directories
//! and their ancestors are written again; every other subtree id is taken from the base. It
//! writes tree objects only through the [`TreeStore`] it is given, and never decides what counts
//! as changed: the caller names the changed directories.

use std::collections::HashSet;

use crate::provider::CkptError;
use crate::verbs::{LevelEntry, NewTreeEntry, ObjectId, RepoPath, TreeItem, Vault};

/// Where trees are read from and written to.
pub trait TreeStore {
    fn write_tree(&self, entries: Vec<NewTreeEntry>) -> Result<ObjectId, CkptError>;
    /// One level of a stored tree: name, kind (`None` for a subtree), id.
    fn tree_level(&self, tree: &ObjectId) -> Result<Vec<LevelEntry>, CkptError>;
}

impl TreeStore for Vault {
    fn write_tree(&self, entries: Vec<NewTreeEntry>) -> Result<ObjectId, CkptError> {
        Ok(Vault::write_tree(self, entries)?)
    }

    fn tree_level(&self, tree: &ObjectId) -> Result<Vec<LevelEntry>, CkptError> {
        Ok(Vault::tree_level(self, tree)?)
    }
}

/// The base a build may reuse subtrees from: its tree, and every directory (`b""` is the root)
/// in which the files differ from it, with all their ancestors.
pub struct Base<'a> {
    pub tree: ObjectId,
    pub changed_dirs: &'a HashSet<Vec<u8>>,
}

/// Adds `path`'s directory and all its ancestors (root included) to `dirs`.
pub fn mark_parents_changed(dirs: &mut HashSet<Vec<u8>>, path: &[u8]) {
    let bytes = path;
    let mut end = bytes.iter().rposition(|b| *b == b'/');
    while let Some(cut) = end {
        if !dirs.insert(bytes[..cut].to_vec()) {
            // Its ancestors went in with it.
            return;
        }
        end = bytes[..cut].iter().rposition(|b| *b == b'/');
    }
    dirs.insert(Vec::new());
}

/// Writes the trees for `files` (sorted by path, as a `BTreeMap` iterates) and returns the root
/// tree's id.
pub fn build_trees(
    store: &dyn TreeStore,
    files: &[(&RepoPath, TreeItem)],
    base: Option<&Base<'_>>,
) -> Result<ObjectId, CkptError> {
    build_dir(store, b"", files, base.map(|b| (b.tree, b.changed_dirs)))
}

/// `files` are exactly the paths below `dir` (all share the prefix `dir/`, or any path for the
/// root). `base` is the base's tree for this directory, if it has one, with the changed set.
fn build_dir(
    store: &dyn TreeStore,
    dir: &[u8],
    files: &[(&RepoPath, TreeItem)],
    base: Option<(ObjectId, &HashSet<Vec<u8>>)>,
) -> Result<ObjectId, CkptError> {
    let prefix_len = if dir.is_empty() { 0 } else { dir.len() + 1 };
    let base_level = match base {
        Some((tree, _)) => store.tree_level(&tree)?,
        None => Vec::new(),
    };
    let base_subtree = |name: &[u8]| {
        base_level
            .iter()
            .find(|(entry, kind, _)| entry == name && kind.is_none())
            .map(|(_, _, id)| *id)
    };
    let mut entries = Vec::new();
    let mut at = 0;
    while at < files.len() {
        let (path, item) = files[at];
        let rel = &path.as_bytes()[prefix_len..];
        let Some(slash) = rel.iter().position(|b| *b == b'/') else {
            entries.push(NewTreeEntry::new(rel, Some(item.kind), item.id)?);
            at += 1;
            continue;
        };
        let name = &rel[..slash];
        let child_dir = &path.as_bytes()[..prefix_len + slash];
        // Everything below `child_dir/` is contiguous in path order and ends before the first
        // path that is not below it.
        let below = |p: &RepoPath| {
            let bytes = p.as_bytes();
            bytes.len() > child_dir.len() && bytes[child_dir.len()] == b'/' && bytes.starts_with(child_dir)
        };
        let end = at + files[at..].partition_point(|(p, _)| below(p));
        let reused = match base {
            Some((_, changed)) if !changed.contains(child_dir) => base_subtree(name),
            _ => None,
        };
        let id = match reused {
            Some(id) => id,
            None => {
                let child_base = base.and_then(|(_, changed)| base_subtree(name).map(|tree| (tree, changed)));
                build_dir(store, child_dir, &files[at..end], child_base)?
            }
        };
        entries.push(NewTreeEntry::new(name, None, id)?);
        at = end;
    }
    store.write_tree(entries)
}

/// One file-level change to a tree: `path` now holds `item`, or (`None`) nothing.
pub type TreeEdit<'a> = (&'a [u8], Option<TreeItem>);

/// Writes the tree that is `base` with `edits` applied (sorted by path, each path once) and
/// returns its id. Only the directories an edit reaches are read and written again; a directory
/// left empty disappears, as git has no empty trees below the root. An edit below a path the
/// base holds as a file replaces that file with a directory; a file edit at a path the base
/// holds as a directory replaces the directory (its removals arrive as edits too).
pub fn edit_trees(store: &dyn TreeStore, base: ObjectId, edits: &[TreeEdit<'_>]) -> Result<ObjectId, CkptError> {
    match edit_dir(store, Some(base), 0, edits)? {
        Some(id) => Ok(id),
        None => store.write_tree(Vec::new()),
    }
}

/// The edits of one name in a directory: of the name itself (`Some(None)` removes it), and below it.
type NameEdits<'a> = (Option<Option<TreeItem>>, Vec<TreeEdit<'a>>);

/// `edits` all lie below one directory whose paths start `prefix_len` bytes in; `base` is that
/// directory's tree in the base, if it had one. `None` when the result is empty.
fn edit_dir(
    store: &dyn TreeStore,
    base: Option<ObjectId>,
    prefix_len: usize,
    edits: &[TreeEdit<'_>],
) -> Result<Option<ObjectId>, CkptError> {
    let mut level: Vec<LevelEntry> = match base {
        Some(tree) => store.tree_level(&tree)?,
        None => Vec::new(),
    };
    // Grouped by the name at this level: `name` itself, and everything below `name/`. The two
    // need not be adjacent in path order ("a", "a.txt", "a/b"), so they are collected first.
    let mut groups: std::collections::BTreeMap<&[u8], NameEdits<'_>> = std::collections::BTreeMap::new();
    for (path, item) in edits {
        let rel = &path[prefix_len..];
        match rel.iter().position(|b| *b == b'/') {
            None => groups.entry(rel).or_default().0 = Some(*item),
            Some(slash) => groups.entry(&rel[..slash]).or_default().1.push((path, *item)),
        }
    }
    for (name, (direct, below)) in groups {
        let existing = level.iter().position(|(entry, _, _)| entry == name);
        let replacement: Option<(Option<crate::verbs::EntryKind>, ObjectId)> = match direct {
            Some(Some(item)) => Some((Some(item.kind), item.id)),
            _ if below.is_empty() => None,
            _ => {
                let subtree = existing.and_then(|i| level[i].1.is_none().then_some(level[i].2));
                edit_dir(store, subtree, prefix_len + name.len() + 1, &below)?.map(|id| (None, id))
            }
        };
        // An entry nothing in this group touches stays as it was.
        if direct.is_none() && below.is_empty() {
            continue;
        }
        if let Some(i) = existing {
            level.remove(i);
        }
        if let Some((kind, id)) = replacement {
            level.push((name.to_vec(), kind, id));
        }
    }
    if level.is_empty() {
        return Ok(None);
    }
    let entries = level
        .into_iter()
        .map(|(name, kind, id)| NewTreeEntry::new(&name, kind, id))
        .collect::<Result<Vec<_>, _>>()?;
    store.write_tree(entries).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::EntryKind;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, HashMap};

    /// A content-addressed in-memory tree store that counts writes.
    #[derive(Default)]
    struct MemoryStore {
        trees: RefCell<HashMap<ObjectId, Vec<LevelEntry>>>,
        by_content: RefCell<HashMap<Vec<LevelEntry>, ObjectId>>,
        writes: RefCell<usize>,
    }

    impl TreeStore for MemoryStore {
        fn write_tree(&self, entries: Vec<NewTreeEntry>) -> Result<ObjectId, CkptError> {
            *self.writes.borrow_mut() += 1;
            let mut level: Vec<_> = entries.into_iter().map(|e| (e.name, e.kind, e.id)).collect();
            level.sort_by(|a, b| a.0.cmp(&b.0));
            let mut by_content = self.by_content.borrow_mut();
            let next = by_content.len() as u32 + 1;
            let id = *by_content
                .entry(level.clone())
                .or_insert_with(|| ObjectId::from_hex(&format!("{next:040x}")).unwrap());
            self.trees.borrow_mut().insert(id, level);
            Ok(id)
        }

        fn tree_level(&self, tree: &ObjectId) -> Result<Vec<LevelEntry>, CkptError> {
            Ok(self.trees.borrow()[tree].clone())
        }
    }

    fn blob(n: u32) -> TreeItem {
        TreeItem {
            kind: EntryKind::File,
            id: ObjectId::from_hex(&format!("{:040x}", 0xb000_0000u64 + u64::from(n))).unwrap(),
        }
    }

    fn build(store: &MemoryStore, files: &BTreeMap<RepoPath, TreeItem>, base: Option<&Base<'_>>) -> ObjectId {
        let list: Vec<(&RepoPath, TreeItem)> = files.iter().map(|(p, i)| (p, *i)).collect();
        build_trees(store, &list, base).unwrap()
    }

    fn path(text: &str) -> RepoPath {
        RepoPath::new(text.as_bytes().to_vec()).unwrap()
    }

    /// Tiny xorshift so the test needs no dependency and replays exactly.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn conflicts(files: &BTreeMap<RepoPath, TreeItem>, candidate: &RepoPath) -> bool {
        let below = |a: &[u8], b: &[u8]| a.starts_with(b) && a.get(b.len()) == Some(&b'/');
        files.keys().any(|p| {
            p != candidate && (below(p.as_bytes(), candidate.as_bytes()) || below(candidate.as_bytes(), p.as_bytes()))
        })
    }

    #[test]
    fn incremental_build_equals_a_full_build_under_random_edits() {
        let names = ["a", "a.txt", "a0", "b", "b/c", "z"];
        let dirs = ["", "a/", "a/b/", "a.d/", "b/", "b/c/d/", "new/"];
        let random_path = |state: &mut u64, n: u64| {
            let dir = dirs[next(state) as usize % dirs.len()];
            let name = names[next(state) as usize % names.len()];
            path(&format!("{dir}{name}{}", n % 3))
        };
        for seed in 1..300u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let store = MemoryStore::default();
            let mut files = BTreeMap::new();
            for n in 0..20 {
                let candidate = random_path(&mut state, n);
                if !conflicts(&files, &candidate) {
                    files.insert(candidate, blob(n as u32));
                }
            }
            let base_tree = build(&store, &files, None);

            let mut edited = files.clone();
            let mut changed = HashSet::new();
            for step in 0..6u32 {
                let keys: Vec<RepoPath> = edited.keys().cloned().collect();
                let victim = match next(&mut state) % 3 {
                    0 if !keys.is_empty() => keys[next(&mut state) as usize % keys.len()].clone(),
                    _ => random_path(&mut state, u64::from(step)),
                };
                if conflicts(&edited, &victim) {
                    continue;
                }
                mark_parents_changed(&mut changed, victim.as_bytes());
                if edited.contains_key(&victim) && next(&mut state).is_multiple_of(2) {
                    edited.remove(&victim);
                } else {
                    edited.insert(victim, blob(1000 + step));
                }
            }
            let writes_before = *store.writes.borrow();
            let base = Base {
                tree: base_tree,
                changed_dirs: &changed,
            };
            let incremental = build(&store, &edited, Some(&base));
            let written = *store.writes.borrow() - writes_before;
            assert!(
                written <= changed.len(),
                "seed {seed}: {written} trees written for {} changed directories",
                changed.len()
            );
            // Content-addressed: the same files give the same root id however it was built.
            assert_eq!(incremental, build(&store, &edited, None), "seed {seed}");
            // The same edits as file-level changes on the base tree give the same tree too.
            let mut all_paths: Vec<&RepoPath> = files.keys().chain(edited.keys()).collect();
            all_paths.sort();
            all_paths.dedup();
            let edits: Vec<TreeEdit<'_>> = all_paths
                .into_iter()
                .filter(|p| files.get(*p) != edited.get(*p))
                .map(|p| (p.as_bytes(), edited.get(p).copied()))
                .collect();
            let writes_before = *store.writes.borrow();
            let edited_tree = edit_trees(&store, base_tree, &edits).unwrap();
            assert_eq!(edited_tree, incremental, "seed {seed}: edits {edits:?}");
            assert!(
                *store.writes.borrow() - writes_before <= changed.len().max(1),
                "seed {seed}"
            );
            assert_eq!(flatten(&store, incremental, b"").len(), edited.len(), "seed {seed}");
        }
    }

    #[test]
    fn edits_of_a_name_and_below_it_need_not_be_adjacent() {
        // "dir" becomes a symlink, "dir-elsewhere/…" appears, the files below "dir/" go: in path
        // order "dir-elsewhere/…" sorts between "dir" and "dir/…".
        let store = MemoryStore::default();
        let mut files = BTreeMap::new();
        for name in ["a.txt", "dir/c.txt", "dir/sub/d.txt"] {
            files.insert(path(name), blob(1));
        }
        let base = build(&store, &files, None);
        let link = TreeItem {
            kind: EntryKind::Symlink,
            id: blob(7).id,
        };
        let edits: Vec<TreeEdit<'_>> = vec![
            (b"dir", Some(link)),
            (b"dir-elsewhere/sub/d.txt", Some(blob(2))),
            (b"dir.d", Some(blob(3))),
            (b"dir/c.txt", None),
            (b"dir/sub/d.txt", None),
        ];
        let mut want = BTreeMap::new();
        want.insert(path("a.txt"), blob(1));
        want.insert(path("dir"), link);
        want.insert(path("dir-elsewhere/sub/d.txt"), blob(2));
        want.insert(path("dir.d"), blob(3));
        assert_eq!(edit_trees(&store, base, &edits).unwrap(), build(&store, &want, None));
        // And back: the symlink goes, the directory returns beside its look-alikes.
        let back: Vec<TreeEdit<'_>> = vec![
            (b"dir", None),
            (b"dir-elsewhere/sub/d.txt", None),
            (b"dir/c.txt", Some(blob(1))),
        ];
        let mut want_back = want.clone();
        want_back.remove(&path("dir"));
        want_back.remove(&path("dir-elsewhere/sub/d.txt"));
        want_back.insert(path("dir/c.txt"), blob(1));
        let middle = build(&store, &want, None);
        assert_eq!(
            edit_trees(&store, middle, &back).unwrap(),
            build(&store, &want_back, None)
        );
    }

    fn flatten(store: &MemoryStore, tree: ObjectId, prefix: &[u8]) -> Vec<(Vec<u8>, ObjectId)> {
        let mut out = Vec::new();
        for (name, kind, id) in store.tree_level(&tree).unwrap() {
            let mut full = prefix.to_vec();
            full.extend_from_slice(&name);
            match kind {
                Some(_) => out.push((full, id)),
                None => {
                    full.push(b'/');
                    out.extend(flatten(store, id, &full));
                }
            }
        }
        out
    }

    #[test]
    fn marking_a_path_marks_every_ancestor_and_the_root() {
        let mut dirs = HashSet::new();
        mark_parents_changed(&mut dirs, b"a/b/c.txt");
        mark_parents_changed(&mut dirs, b"top.txt");
        let mut got: Vec<Vec<u8>> = dirs.into_iter().collect();
        got.sort();
        assert_eq!(got, vec![b"".to_vec(), b"a".to_vec(), b"a/b".to_vec()]);
    }
}
