//! What changed between two states (two checkpoints, or a checkpoint and the worktree): the
//! per-path change list, binary detection, line counts and unified text. Pure: the caller
//! supplies the trees and the bytes, nothing is read or written here.

use std::collections::BTreeMap;

use crate::verbs::{EntryKind, RepoPath, TreeItem};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Added,
    Deleted,
    Modified,
    /// Kind changed between file, executable file and symlink (content may differ too).
    TypeChanged,
}

impl Status {
    pub fn letter(&self) -> &'static str {
        match self {
            Status::Added => "A",
            Status::Deleted => "D",
            Status::Modified => "M",
            Status::TypeChanged => "T",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: RepoPath,
    pub status: Status,
    pub old: Option<TreeItem>,
    pub new: Option<TreeItem>,
}

/// How one path differs, if it does: added, deleted, type-changed (a symlink on one side only)
/// or modified.
fn change_of(path: &RepoPath, before: Option<TreeItem>, after: Option<TreeItem>) -> Option<FileChange> {
    let status = match (before, after) {
        (None, None) => return None,
        (Some(a), Some(b)) if a == b => return None,
        (None, Some(_)) => Status::Added,
        (Some(_), None) => Status::Deleted,
        (Some(a), Some(b)) if (a.kind == EntryKind::Symlink) != (b.kind == EntryKind::Symlink) => Status::TypeChanged,
        (Some(_), Some(_)) => Status::Modified,
    };
    Some(FileChange {
        path: path.clone(),
        status,
        old: before,
        new: after,
    })
}

fn in_scope(path: &RepoPath, filter: &[RepoPath]) -> bool {
    filter.is_empty() || filter.iter().any(|f| path.is_within(f))
}

/// Paths whose entries differ between `old` and `new`, within `filter` (empty: everything).
pub fn changes(
    old: &BTreeMap<RepoPath, TreeItem>,
    new: &BTreeMap<RepoPath, TreeItem>,
    filter: &[RepoPath],
) -> Vec<FileChange> {
    let mut out: Vec<FileChange> = old
        .iter()
        .filter(|(p, _)| in_scope(p, filter))
        .filter_map(|(path, before)| change_of(path, Some(*before), new.get(path).copied()))
        .collect();
    out.extend(
        new.iter()
            .filter(|(p, _)| in_scope(p, filter) && !old.contains_key(*p))
            .filter_map(|(path, after)| change_of(path, None, Some(*after))),
    );
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// [`changes`] from a diff of two trees (which reads only the subtrees that differ).
pub fn changes_of_trees(diffed: Vec<crate::verbs::TreeChange>, filter: &[RepoPath]) -> Vec<FileChange> {
    let mut out: Vec<FileChange> = diffed
        .into_iter()
        .filter(|c| in_scope(&c.path, filter))
        .filter_map(|c| change_of(&c.path, c.old, c.new))
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// git's heuristic: a NUL byte in the first 8000 bytes means binary.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8000).any(|b| *b == 0)
}

/// Lines added and removed going from `old` to `new` (text only).
pub fn line_counts(old: &[u8], new: &[u8]) -> (usize, usize) {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut added = 0;
    let mut removed = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

/// A unified diff with three lines of context, headed like git's (`a/PATH`, `b/PATH`).
pub fn unified(path: &str, old: &[u8], new: &[u8]) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    diff.unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::ObjectId;

    fn item(kind: EntryKind, n: u8) -> TreeItem {
        TreeItem {
            kind,
            id: ObjectId::from_hex(&format!("{n:02x}").repeat(20)).unwrap(),
        }
    }

    fn p(s: &str) -> RepoPath {
        RepoPath::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn statuses_cover_add_delete_modify_mode_and_type() {
        let old: BTreeMap<_, _> = [
            (p("same"), item(EntryKind::File, 1)),
            (p("gone"), item(EntryKind::File, 2)),
            (p("edit"), item(EntryKind::File, 3)),
            (p("chmod"), item(EntryKind::File, 4)),
            (p("link"), item(EntryKind::File, 5)),
        ]
        .into();
        let new: BTreeMap<_, _> = [
            (p("same"), item(EntryKind::File, 1)),
            (p("edit"), item(EntryKind::File, 9)),
            (p("chmod"), item(EntryKind::Executable, 4)),
            (p("link"), item(EntryKind::Symlink, 5)),
            (p("new"), item(EntryKind::File, 6)),
        ]
        .into();
        let got: Vec<(String, &str)> = changes(&old, &new, &[])
            .iter()
            .map(|c| (c.path.display(), c.status.letter()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("chmod".into(), "M"),
                ("edit".into(), "M"),
                ("gone".into(), "D"),
                ("link".into(), "T"),
                ("new".into(), "A")
            ]
        );
        assert_eq!(changes(&old, &new, &[p("edit")]).len(), 1);
    }

    #[test]
    fn binary_and_line_counts() {
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary(b"plain text\n"));
        assert_eq!(line_counts(b"a\nb\nc\n", b"a\nB\nc\nd\n"), (2, 1));
        let text = unified("f.txt", b"a\nb\n", b"a\nc\n");
        assert!(
            text.contains("--- a/f.txt") && text.contains("+++ b/f.txt") && text.contains("-b") && text.contains("+c")
        );
    }
}
