//! The restore planner: a pure function from (target tree, current tree, what is unprotected on
//! disk, path filter, exact?) to the ordered list of worktree operations. No I/O, so every rule —
//! ignored paths are never overwritten or deleted, created-after files stay unless `--exact`, type
//! changes remove only what the guard holds — is unit-tested here.

use std::collections::{BTreeMap, BTreeSet};

use crate::verbs::{EntryKind, RepoPath, RestoreOp, TreeItem};

/// Everything the planner needs; `current` is the guard (or a read-only capture of now).
pub struct PlanInput<'a> {
    pub target: &'a BTreeMap<RepoPath, TreeItem>,
    pub current: &'a BTreeMap<RepoPath, TreeItem>,
    /// Paths on disk that ckpt did not capture (ignored, too large, nested repo, ...), with why.
    pub unprotected: &'a [(RepoPath, String)],
    /// Only paths within one of these (empty: everything).
    pub filter: &'a [RepoPath],
    /// Paths left alone whatever either side says: what the target recorded as present but not
    /// protected (it has no evidence about them, so even `--exact` must not delete them), and
    /// ckpt's own store inside the workspace.
    pub untouchable: &'a [RepoPath],
    /// Target paths not protected now (ignored) whose bytes on disk are already the target's:
    /// nothing to write, so no conflict (an ignore file the restore brings back or takes away
    /// turns a captured file into an ignored one that already matches).
    pub same_on_disk: &'a BTreeSet<RepoPath>,
    pub exact: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Paths that will be written (overwritten or recreated).
    pub overwrite: Vec<RepoPath>,
    /// Target paths that already match.
    pub unchanged: usize,
    /// Captured now but absent from the target.
    pub created_after: Vec<RepoPath>,
    /// Paths that will be removed: created-after ones with `--exact`, plus whatever a type change
    /// (file↔dir) must clear; every one is held by the guard.
    pub delete: Vec<RepoPath>,
    /// Target paths that cannot be restored because something unprotected is in the way.
    pub conflicts: Vec<(RepoPath, String)>,
    /// Filter paths that match nothing on either side.
    pub unmatched_filter: Vec<RepoPath>,
    pub ops: Vec<RestoreOp>,
    /// Set by the engine, not the planner: paths on disk the target lacks because its own
    /// ignore rules ignore them (passed in as untouchable, so even `--exact` leaves them), as
    /// reported: a directory of them all once, with how many files it holds.
    pub ignored_by_target: Vec<(RepoPath, u64)>,
}

fn in_scope(path: &RepoPath, filter: &[RepoPath]) -> bool {
    filter.is_empty() || filter.iter().any(|f| path.is_within(f))
}

fn depth(path: &RepoPath) -> usize {
    path.components().count()
}

/// Gitlinks are pointers only: never written, never removed.
fn restorable(item: &TreeItem) -> bool {
    item.kind != EntryKind::Gitlink
}

pub fn plan(input: &PlanInput<'_>) -> Plan {
    // A submodule pointer in the target is never restored: what the worktree has there (or
    // below it) is left as it is and reported, never deleted as if the target had nothing.
    let target_links: Vec<&RepoPath> = input
        .target
        .iter()
        .filter(|(_, i)| !restorable(i))
        .map(|(p, _)| p)
        .collect();
    let under_target_link = |path: &RepoPath| target_links.iter().any(|link| path.is_within(link));
    let touchable = |path: &RepoPath| !input.untouchable.iter().any(|u| path.is_within(u)) && !under_target_link(path);
    let target: BTreeMap<&RepoPath, &TreeItem> = input
        .target
        .iter()
        .filter(|(p, i)| restorable(i) && touchable(p))
        .collect();
    let current: BTreeMap<&RepoPath, &TreeItem> = input
        .current
        .iter()
        .filter(|(p, i)| restorable(i) && touchable(p))
        .collect();
    let mut blockers: Vec<(RepoPath, String)> = input.unprotected.to_vec();
    for (path, _) in input.current.iter().filter(|(_, i)| !restorable(i)) {
        blockers.push((path.clone(), "submodule".into()));
    }

    let mut out = Plan {
        unmatched_filter: input
            .filter
            .iter()
            .filter(|f| !input.target.keys().any(|p| p.is_within(f)) && !input.current.keys().any(|p| p.is_within(f)))
            .cloned()
            .collect(),
        ..Plan::default()
    };

    for (path, _) in input
        .current
        .iter()
        .filter(|(p, i)| restorable(i) && under_target_link(p) && in_scope(p, input.filter))
    {
        out.conflicts.push((
            path.clone(),
            "the checkpoint holds a submodule pointer here, and submodules are never restored; left as it is".into(),
        ));
    }

    let mut removals: BTreeMap<RepoPath, TreeItem> = BTreeMap::new();
    let mut dirs_to_clear: BTreeSet<RepoPath> = BTreeSet::new();
    let mut writes: Vec<RestoreOp> = Vec::new();

    for (&path, &want) in target.iter().filter(|(p, _)| in_scope(p, input.filter)) {
        if current.get(path) == Some(&want) || input.same_on_disk.contains(path) {
            out.unchanged += 1;
            continue;
        }
        if let Some((blocker, why)) = blockers.iter().find(|(b, _)| path.is_within(b) || b.is_within(path)) {
            let reason = if blocker == path {
                format!("what is on disk here is not protected ({why}), so it is not overwritten")
            } else {
                format!("{why} path {} in the way", blocker.display())
            };
            out.conflicts.push((path.clone(), reason));
            continue;
        }
        // An ancestor that is a file (or link) now must go before the directory can exist.
        for ancestor in path.ancestors() {
            if let Some(&item) = current.get(&ancestor) {
                removals.insert(ancestor, *item);
            }
        }
        // A directory now where the target has a file: clear what the guard holds below it.
        // Type changes are rare, so a linear look is fine (byte order interleaves `d-x` with `d/x`).
        let below: Vec<(&RepoPath, &TreeItem)> = current
            .iter()
            .filter(|(p, _)| **p != path && p.is_within(path))
            .map(|(p, i)| (*p, *i))
            .collect();
        if !below.is_empty() {
            for (p, item) in below {
                removals.insert(p.clone(), *item);
                for ancestor in p.ancestors().into_iter().filter(|a| a.is_within(path)) {
                    dirs_to_clear.insert(ancestor);
                }
            }
        }
        out.overwrite.push(path.clone());
        writes.push(RestoreOp::Write {
            path: path.clone(),
            item: *want,
            expect: current.get(path).map(|i| **i),
            mode: None,
        });
    }

    for (&path, &item) in current.iter().filter(|(p, _)| in_scope(p, input.filter)) {
        if target.contains_key(path) || removals.contains_key(path) {
            continue;
        }
        out.created_after.push(path.clone());
        if input.exact {
            removals.insert(path.clone(), *item);
        }
    }

    // Directories emptied by removals are pruned unless the target keeps them.
    let target_dirs: BTreeSet<RepoPath> = target.keys().flat_map(|p| p.ancestors()).collect();
    let mut prune: BTreeSet<RepoPath> = BTreeSet::new();
    for path in removals.keys() {
        for ancestor in path.ancestors() {
            if !target_dirs.contains(&ancestor) && !dirs_to_clear.contains(&ancestor) {
                prune.insert(ancestor);
            }
        }
    }

    out.delete = removals.keys().cloned().collect();
    let mut remove_ops: Vec<(RepoPath, TreeItem)> = removals.into_iter().collect();
    remove_ops.sort_by(|a, b| depth(&b.0).cmp(&depth(&a.0)).then(a.0.cmp(&b.0)));
    out.ops.extend(
        remove_ops
            .into_iter()
            .map(|(path, expect)| RestoreOp::Remove { path, expect }),
    );
    let mut clear: Vec<RepoPath> = dirs_to_clear.into_iter().collect();
    clear.sort_by(|a, b| depth(b).cmp(&depth(a)).then(a.cmp(b)));
    out.ops
        .extend(clear.into_iter().map(|path| RestoreOp::RemoveEmptyDir { path }));
    out.ops.extend(writes);
    let mut prune: Vec<RepoPath> = prune.into_iter().collect();
    prune.sort_by(|a, b| depth(b).cmp(&depth(a)).then(a.cmp(b)));
    out.ops
        .extend(prune.into_iter().map(|path| RestoreOp::PruneEmptyDir { path }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::ObjectId;

    fn p(text: &str) -> RepoPath {
        RepoPath::new(text.as_bytes().to_vec()).unwrap()
    }

    fn item(n: u8) -> TreeItem {
        TreeItem {
            kind: EntryKind::File,
            id: ObjectId::from_hex(&format!("{n:02x}").repeat(20)).unwrap(),
        }
    }

    fn map(entries: &[(&str, u8)]) -> BTreeMap<RepoPath, TreeItem> {
        entries.iter().map(|(path, n)| (p(path), item(*n))).collect()
    }

    fn run(
        target: &[(&str, u8)],
        current: &[(&str, u8)],
        unprotected: &[(&str, &str)],
        filter: &[&str],
        exact: bool,
    ) -> Plan {
        let target = map(target);
        let current = map(current);
        let unprotected: Vec<(RepoPath, String)> = unprotected.iter().map(|(a, b)| (p(a), b.to_string())).collect();
        let filter: Vec<RepoPath> = filter.iter().map(|f| p(f)).collect();
        plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &unprotected,
            filter: &filter,
            untouchable: &[],
            same_on_disk: &BTreeSet::new(),
            exact,
        })
    }

    #[test]
    fn only_differing_paths_are_written() {
        let plan = run(&[("a", 1), ("b", 2), ("c", 3)], &[("a", 1), ("b", 9)], &[], &[], false);
        assert_eq!(plan.overwrite, vec![p("b"), p("c")]);
        assert_eq!(plan.unchanged, 1);
        assert!(plan.delete.is_empty());
        assert_eq!(
            plan.ops,
            vec![
                RestoreOp::Write {
                    path: p("b"),
                    item: item(2),
                    expect: Some(item(9)),
                    mode: None
                },
                RestoreOp::Write {
                    path: p("c"),
                    item: item(3),
                    expect: None,
                    mode: None
                },
            ]
        );
    }

    #[test]
    fn created_after_stays_unless_exact() {
        let kept = run(&[("a", 1)], &[("a", 1), ("new/x", 2)], &[], &[], false);
        assert_eq!(kept.created_after, vec![p("new/x")]);
        assert!(kept.ops.is_empty());
        let exact = run(&[("a", 1)], &[("a", 1), ("new/x", 2)], &[], &[], true);
        assert_eq!(exact.delete, vec![p("new/x")]);
        assert_eq!(
            exact.ops,
            vec![
                RestoreOp::Remove {
                    path: p("new/x"),
                    expect: item(2)
                },
                RestoreOp::PruneEmptyDir { path: p("new") },
            ]
        );
    }

    #[test]
    fn ignored_paths_in_the_way_are_conflicts_never_ops() {
        let plan = run(
            &[("build", 1), ("out/x", 2), ("ok", 3)],
            &[],
            &[("build", "ignored"), ("out", "ignored")],
            &[],
            true,
        );
        assert_eq!(plan.conflicts.len(), 2);
        assert_eq!(plan.overwrite, vec![p("ok")]);
        assert!(plan.ops.iter().all(|op| op.path() == &p("ok")));
    }

    #[test]
    fn dir_to_file_clears_only_guarded_content() {
        let plan = run(&[("d", 1)], &[("d/x", 2), ("d/sub/y", 3)], &[], &[], false);
        assert_eq!(plan.delete, vec![p("d/sub/y"), p("d/x")]);
        assert_eq!(
            plan.ops,
            vec![
                RestoreOp::Remove {
                    path: p("d/sub/y"),
                    expect: item(3)
                },
                RestoreOp::Remove {
                    path: p("d/x"),
                    expect: item(2)
                },
                RestoreOp::RemoveEmptyDir { path: p("d/sub") },
                RestoreOp::RemoveEmptyDir { path: p("d") },
                RestoreOp::Write {
                    path: p("d"),
                    item: item(1),
                    expect: None,
                    mode: None
                },
            ]
        );
        let blocked = run(&[("d", 1)], &[("d/x", 2)], &[("d/cache", "ignored")], &[], false);
        assert_eq!(blocked.conflicts.len(), 1);
        assert!(blocked.ops.is_empty());
    }

    #[test]
    fn file_to_dir_removes_the_file_first() {
        let plan = run(&[("d/x", 1)], &[("d", 2)], &[], &[], false);
        assert_eq!(
            plan.ops,
            vec![
                RestoreOp::Remove {
                    path: p("d"),
                    expect: item(2)
                },
                RestoreOp::Write {
                    path: p("d/x"),
                    item: item(1),
                    expect: None,
                    mode: None
                },
            ]
        );
        assert!(plan.created_after.is_empty());
    }

    #[test]
    fn filter_limits_scope_and_reports_unmatched() {
        let plan = run(
            &[("a/1", 1), ("b/2", 2)],
            &[("a/1", 9), ("b/2", 9), ("a/new", 3)],
            &[],
            &["a", "zzz"],
            true,
        );
        assert_eq!(plan.overwrite, vec![p("a/1")]);
        assert_eq!(plan.delete, vec![p("a/new")]);
        assert_eq!(plan.unmatched_filter, vec![p("zzz")]);
        let sibling = run(&[("ab", 1)], &[("ab", 2)], &[], &["a"], false);
        assert!(sibling.overwrite.is_empty(), "`a` must not match `ab`");
    }

    #[test]
    fn gitlinks_are_never_touched() {
        let mut target = map(&[("sub", 1)]);
        target.insert(
            p("mod"),
            TreeItem {
                kind: EntryKind::Gitlink,
                id: item(5).id,
            },
        );
        let mut current = BTreeMap::new();
        current.insert(
            p("mod"),
            TreeItem {
                kind: EntryKind::Gitlink,
                id: item(6).id,
            },
        );
        current.insert(p("sub"), item(1));
        let plan = plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &[],
            filter: &[],
            untouchable: &[],
            same_on_disk: &BTreeSet::new(),
            exact: true,
        });
        assert!(plan.ops.is_empty(), "{:?}", plan.ops);
    }

    #[test]
    fn what_stands_where_the_target_has_a_submodule_pointer_is_left_and_reported() {
        let mut target = map(&[("a", 1)]);
        let link = TreeItem {
            kind: EntryKind::Gitlink,
            id: item(5).id,
        };
        target.insert(p("zz"), link);
        target.insert(p("dir"), link);
        let current = map(&[("a", 2), ("zz", 3), ("dir/f", 4), ("zz.txt", 6)]);
        let plan = plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &[],
            filter: &[],
            untouchable: &[],
            same_on_disk: &BTreeSet::new(),
            exact: true,
        });
        assert_eq!(plan.overwrite, vec![p("a")]);
        assert_eq!(
            plan.delete,
            vec![p("zz.txt")],
            "only what the target has nothing at goes"
        );
        let conflicts: Vec<&RepoPath> = plan.conflicts.iter().map(|(p, _)| p).collect();
        assert_eq!(conflicts, vec![&p("dir/f"), &p("zz")]);
    }

    #[test]
    fn untouchable_paths_are_neither_written_nor_deleted_even_exact() {
        let target = map(&[("store/objects/ab", 1), ("a", 2)]);
        let current = map(&[("big.bin", 3), ("store/objects/cd", 4), ("a", 5), ("new", 6)]);
        let untouchable = vec![p("big.bin"), p("store")];
        let plan = plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &[],
            filter: &[],
            untouchable: &untouchable,
            same_on_disk: &BTreeSet::new(),
            exact: true,
        });
        assert_eq!(plan.overwrite, vec![p("a")]);
        assert_eq!(plan.delete, vec![p("new")]);
        assert!(plan
            .ops
            .iter()
            .all(|op| !op.path().is_within(&p("store")) && *op.path() != p("big.bin")));
    }
}
