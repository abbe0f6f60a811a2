//! Preview and the restore transaction: plan from the difference between the target and a guard
//! checkpoint of the current state, journal, path-batched writes through the verbs, verify.
//! Never deletes what it has no evidence about.

use std::collections::{BTreeMap, HashMap};

use crate::provider::plan::{self, PlanInput};
use crate::provider::scan::{self, BlobSink, Capture};
use crate::provider::{CkptError, Confirmation, Preview, RestoreReport, ScanMode, Selection, SnapshotRequest};
use crate::records::{JournalOp, Record, Registry, RegistryLock, RestoreJournal};
use crate::verbs::{
    EntryKind, FileCounts, ObjectId, PathScope, PinRef, Prestaged, RepoPath, RestoreOp, SeenFile, SeenStats,
    TreeChange, TreeCheck, TreeItem,
};

/// The directory of a workspace's state where a restore stages its writes.
pub(super) const STAGING_DIR: &str = "staging";

use super::watched::{Found, GuardHooks, Looked};
use super::{now_rfc3339, Engine};

fn journal(
    record: &Record,
    guard: &Record,
    selection: &Selection,
    ops: &[RestoreOp],
) -> Result<RestoreJournal, CkptError> {
    let id = |record: &Record| record.object_id().map_err(CkptError::CorruptRecord);
    Ok(RestoreJournal {
        target: id(record)?,
        guard: id(guard)?,
        exact: selection.exact,
        paths: selection.paths.clone(),
        started: now_rfc3339().1,
        pid: std::process::id(),
        ops: ops
            .iter()
            .map(|op| match op {
                RestoreOp::Remove { path, .. } => (JournalOp::Remove, path.clone()),
                RestoreOp::RemoveEmptyDir { path } => (JournalOp::RemoveDir, path.clone()),
                RestoreOp::PruneEmptyDir { path } => (JournalOp::PruneDir, path.clone()),
                RestoreOp::Write { path, .. } => (JournalOp::Write, path.clone()),
            })
            .collect(),
    })
}

/// The check of a restore's target tree (every name, every file counted), possibly still
/// running beside the guard's capture. It is settled before the guard writes anything, so a
/// hostile target is refused with nothing written, as when it ran first.
struct TargetCheck {
    running: std::cell::RefCell<Option<TreeCheck>>,
    counts: std::cell::RefCell<Option<FileCounts>>,
}

impl TargetCheck {
    fn running(check: TreeCheck) -> Self {
        TargetCheck {
            running: std::cell::RefCell::new(Some(check)),
            counts: Default::default(),
        }
    }

    fn done(counts: FileCounts) -> Self {
        TargetCheck {
            running: Default::default(),
            counts: std::cell::RefCell::new(Some(counts)),
        }
    }

    /// Waits for the check (once); its refusal, if it refused.
    fn settle(&self) -> Result<(), CkptError> {
        let running = self.running.borrow_mut().take();
        if let Some(check) = running {
            *self.counts.borrow_mut() = Some(check.wait()?);
        }
        match &*self.counts.borrow() {
            Some(_) => Ok(()),
            None => Err(CkptError::Refused(
                "the check of the target tree failed earlier; nothing was changed".into(),
            )),
        }
    }

    fn into_counts(self) -> Result<FileCounts, CkptError> {
        self.settle()?;
        Ok(self.counts.into_inner().unwrap_or_default())
    }
}

/// A restore's target tree and its check ([`Engine::check_target`]).
struct CheckedTarget {
    tree: ObjectId,
    check: TargetCheck,
    /// How many trees the check skipped as read by an earlier one.
    known_trees: usize,
}

/// What the evidence saw at each path the restore removes: the removal refuses a file that
/// changed since.
fn removals_seen(ops: &[RestoreOp], evidence: &Evidence) -> SeenStats {
    ops.iter()
        .filter_map(|op| match op {
            RestoreOp::Remove { path, .. } => {
                let file = evidence.capture().files.get(path)?;
                let seen = SeenFile {
                    stat: file.stat?,
                    linked: file.linked,
                };
                Some((path.clone(), seen))
            }
            _ => None,
        })
        .collect()
}

/// What a restore knows of the worktree besides the guard's tree.
pub(super) enum Evidence {
    /// The guard's own capture of the whole worktree.
    Whole(Capture),
    /// The guard was a watched snapshot (it looked at changed paths only): a read-only capture
    /// of the paths the restore may touch and of the path filter, and how many files the target
    /// holds.
    Scoped { capture: Capture, target_files: u64 },
}

impl Evidence {
    fn capture(&self) -> &Capture {
        match self {
            Evidence::Whole(capture) | Evidence::Scoped { capture, .. } => capture,
        }
    }
}

/// Gives each write of a file the checkpoint kept with narrow permission bits those bits, for
/// the writer to use where it makes the file anew.
fn give_narrow_modes(ops: &mut [RestoreOp], record: &Record) {
    if record.narrow_modes.is_empty() {
        return;
    }
    let narrow: HashMap<RepoPath, u32> = record
        .narrow_modes
        .iter()
        .filter_map(|m| Some((m.path.to_repo_path().ok()?, m.mode)))
        .collect();
    for op in ops {
        if let RestoreOp::Write { path, item, mode, .. } = op {
            if matches!(item.kind, EntryKind::File | EntryKind::Executable) {
                *mode = narrow.get(path).copied();
            }
        }
    }
}

/// Why an `--exact` restore leaves a file the checkpoint lacks.
const IGNORED_BY_TARGET: &str = "ignored by the checkpoint's own ignore rules, so it never held this; left as it is";

/// Why an `--exact` restore leaves a whole directory the checkpoint lacks.
fn ignored_directory_by_target(files: u64) -> String {
    format!(
        "its {files} files are ignored by the checkpoint's own ignore rules, so it never held them; left as they are"
    )
}

/// `files` (sorted, each a path `current` holds), with the topmost directory whose every entry
/// in `current` is among them named once instead, with how many files it holds: a build tree
/// of thousands of ignored files is one line, not thousands. A file whose directory holds
/// anything else, or nothing else, is named itself (count 1).
fn by_directory(files: &[RepoPath], current: &BTreeMap<RepoPath, TreeItem>) -> Vec<(RepoPath, u64)> {
    // The directories above a path, topmost first.
    fn directories(path: &RepoPath) -> impl Iterator<Item = &[u8]> {
        let bytes = path.as_bytes();
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(move |(at, _)| &bytes[..at])
    }
    let mut among_files: HashMap<&[u8], u64> = HashMap::new();
    for file in files {
        for dir in directories(file) {
            *among_files.entry(dir).or_default() += 1;
        }
    }
    let mut in_current: HashMap<&[u8], u64> = HashMap::new();
    if !among_files.is_empty() {
        for path in current.keys() {
            for dir in directories(path) {
                if let Some((&dir, _)) = among_files.get_key_value(dir) {
                    *in_current.entry(dir).or_default() += 1;
                }
            }
        }
    }
    let mut out: Vec<(RepoPath, u64)> = Vec::new();
    for file in files {
        let whole = directories(file).find(|dir| {
            let count = among_files.get(dir).copied().unwrap_or_default();
            count >= 2 && in_current.get(dir) == Some(&count)
        });
        let named = whole.and_then(|dir| Some((RepoPath::new(dir.to_vec()).ok()?, among_files[dir])));
        match named {
            Some(named) if out.last() == Some(&named) => {}
            Some(named) => out.push(named),
            None => out.push((file.clone(), 1)),
        }
    }
    out
}

/// Not-protected paths sorted, each once: a path not protected now and not held by the
/// checkpoint either (a submodule, say) was listed twice; its reasons now share one line.
fn one_line_per_path(mut list: Vec<(RepoPath, String)>) -> Vec<(RepoPath, String)> {
    list.sort();
    list.dedup();
    let mut out: Vec<(RepoPath, String)> = Vec::with_capacity(list.len());
    for (path, reason) in list {
        match out.last_mut() {
            Some((last, reasons)) if *last == path => {
                const HELD_NOT: &str = "not in checkpoint: ";
                let first = reasons.clone();
                *reasons = if reason.strip_prefix(HELD_NOT) == Some(first.as_str()) {
                    format!("{first}, and not in checkpoint")
                } else if first.strip_prefix(HELD_NOT) == Some(reason.as_str()) {
                    format!("{reason}, and not in checkpoint")
                } else {
                    format!("{first}; {reason}")
                };
            }
            _ => out.push((path, reason)),
        }
    }
    out
}

impl Engine {
    /// The restore plan from the difference between the guard and the target: only differing
    /// paths are looked at, so the cost follows the size of the change, not of the tree.
    pub(super) fn plan_from_diff(
        &self,
        changes: Vec<TreeChange>,
        record: &Record,
        evidence: &Evidence,
        selection: &Selection,
    ) -> Result<plan::Plan, CkptError> {
        let capture = evidence.capture();
        let mut target = BTreeMap::new();
        let mut current = BTreeMap::new();
        for change in changes {
            if let Some(new) = change.new {
                target.insert(change.path.clone(), new);
            }
            if let Some(old) = change.old {
                current.insert(change.path, old);
            }
        }
        let ignored_by_target = self.ignored_by_target(record, &target, &current, selection)?;
        let mut plan = plan::plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &capture.unprotected(),
            filter: &selection.paths,
            untouchable: &[Self::untouchable(record, capture), ignored_by_target.clone()].concat(),
            same_on_disk: &self.ignored_but_same(&target, capture),
            exact: selection.exact,
        });
        plan.ignored_by_target = by_directory(&ignored_by_target, &current);
        give_narrow_modes(&mut plan.ops, record);
        let in_scope = |p: &RepoPath| selection.paths.is_empty() || selection.paths.iter().any(|f| p.is_within(f));
        // Paths equal on both sides are exactly the target's paths the diff did not name. A
        // scoped capture holds every file within the filter, so it counts them too; without a
        // filter the target's file count does.
        plan.unchanged = match evidence {
            Evidence::Scoped { target_files, .. } if selection.paths.is_empty() => {
                let changed = target.values().filter(|item| item.kind != EntryKind::Gitlink).count();
                target_files.saturating_sub(changed as u64) as usize
            }
            _ => capture
                .files
                .iter()
                .filter(|(p, f)| f.item.kind != EntryKind::Gitlink && in_scope(p) && !current.contains_key(*p))
                .count(),
        };
        plan.unmatched_filter
            .retain(|f| !capture.files.keys().any(|p| p.is_within(f)));
        Self::match_filters_naming_unprotected(&mut plan, capture);
        match plan.unmatched_filter.first() {
            Some(unmatched) => Err(Self::unmatched_filter(unmatched, capture)),
            None => Ok(plan),
        }
    }

    pub(super) fn not_protected(record: &Record, capture: &Capture, selection: &Selection) -> Vec<(RepoPath, String)> {
        let mut out: Vec<(RepoPath, String)> = capture
            .unprotected()
            .into_iter()
            .filter(|(p, _)| selection.reaches(p))
            .collect();
        for skipped in &record.skipped {
            if let Ok(path) = skipped.path.to_repo_path() {
                if selection.reaches(&path) {
                    out.push((path, format!("not in checkpoint: {}", skipped.reason)));
                }
            }
        }
        one_line_per_path(out)
    }

    /// What a restore reports: the guard, what its plan wrote, deleted, left and could not do,
    /// as `results` (one per planned op) say; not yet verified.
    fn report_of(
        record: &Record,
        guard: &crate::provider::SnapshotOutcome,
        guard_watched: bool,
        selection: &Selection,
        plan: &crate::provider::plan::Plan,
        results: Vec<Result<(), crate::verbs::VerbError>>,
    ) -> RestoreReport {
        let mut report = RestoreReport {
            id: record.id.clone(),
            guard: Some(guard.record.id.clone()),
            guard_created: guard.created,
            guard_watched,
            // A restore asks the daemon whenever one may run: without one, there is nothing to
            // explain.
            guard_fallback: match &guard.scan_mode {
                ScanMode::Full { fallback: Some(why) } if why != crate::provider::watch::NO_DAEMON => Some(why.clone()),
                _ => None,
            },
            written: Vec::new(),
            deleted: Vec::new(),
            left: if selection.exact {
                Vec::new()
            } else {
                plan.created_after.clone()
            },
            not_protected: Self::with_ignored_by_target(Self::unprotected_now(&guard.record, record, selection), plan),
            unchanged: plan.unchanged,
            failed: plan
                .conflicts
                .iter()
                .map(|(p, why)| (p.clone(), format!("conflict: {why}")))
                .collect(),
            verified: false,
        };
        for (op, result) in plan.ops.iter().zip(results) {
            match (op, result) {
                (RestoreOp::Write { path, .. }, Ok(())) => report.written.push(path.clone()),
                (RestoreOp::Remove { path, .. }, Ok(())) => report.deleted.push(path.clone()),
                (_, Ok(())) => {}
                (op, Err(error)) => report.failed.push((op.path().clone(), error.to_string())),
            }
        }
        report
    }

    /// The paths within `selection` the restore has no evidence about and leaves as they are,
    /// with why: what the guard `guard` saw but could not protect, and what the checkpoint
    /// `target` did not hold for the same reasons.
    fn unprotected_now(guard: &Record, target: &Record, selection: &Selection) -> Vec<(RepoPath, String)> {
        let listed = |record: &Record, prefix: &'static str| {
            record
                .skipped
                .iter()
                .filter_map(move |skipped| {
                    Some((
                        crate::records::skipped_path(skipped)?,
                        format!("{prefix}{}", skipped.reason),
                    ))
                })
                .collect::<Vec<_>>()
        };
        let out: Vec<(RepoPath, String)> = listed(guard, "")
            .into_iter()
            .chain(listed(target, "not in checkpoint: "))
            .filter(|(path, _)| selection.reaches(path))
            .collect();
        one_line_per_path(out)
    }

    /// What a restore to `record` must leave alone: the paths the checkpoint saw but did not
    /// protect (it holds no evidence about them), and ckpt's own store inside the workspace.
    pub(super) fn untouchable(record: &Record, capture: &Capture) -> Vec<RepoPath> {
        let mut out: Vec<RepoPath> = record
            .skipped
            .iter()
            .filter_map(crate::records::skipped_path)
            .chain(
                capture
                    .skipped
                    .iter()
                    .filter(|(_, why)| why == scan::CKPT_STORE)
                    .map(|(path, _)| path.clone()),
            )
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// With `--exact`, the files the worktree has and the checkpoint lacks that the
    /// checkpoint's own ignore rules ignore. A checkpoint never holds an ignored file, so its
    /// absence there is no evidence the file should go: an agent that deleted `.gitignore`
    /// only made `build/` visible, and undoing that must not delete the build.
    fn ignored_by_target(
        &self,
        record: &Record,
        target: &BTreeMap<RepoPath, TreeItem>,
        current: &BTreeMap<RepoPath, TreeItem>,
        selection: &Selection,
    ) -> Result<Vec<RepoPath>, CkptError> {
        if !selection.exact {
            return Ok(Vec::new());
        }
        let lacking: Vec<RepoPath> = current
            .iter()
            .filter(|(path, item)| {
                item.kind != EntryKind::Gitlink && !target.contains_key(*path) && selection.reaches(path)
            })
            .map(|(path, _)| path.clone())
            .collect();
        let tree = record.tree_id().map_err(CkptError::CorruptRecord)?;
        let ignored = self.vault.ignored_in_tree(&tree, &lacking)?;
        Ok(lacking
            .into_iter()
            .zip(ignored)
            .filter_map(|(path, ignored)| ignored.then_some(path))
            .collect())
    }

    /// What a restore leaves because the checkpoint's own ignore rules ignore it, as the
    /// not-protected paths name it.
    fn with_ignored_by_target(mut list: Vec<(RepoPath, String)>, plan: &plan::Plan) -> Vec<(RepoPath, String)> {
        list.extend(plan.ignored_by_target.iter().map(|(path, files)| {
            let why = match files {
                1 => IGNORED_BY_TARGET.to_owned(),
                files => ignored_directory_by_target(*files),
            };
            (path.clone(), why)
        }));
        one_line_per_path(list)
    }

    /// The target's files that are ignored on disk now (one by one, or inside a directory
    /// ignored as a whole) and hold the target's bytes already. Read-only; only ignored paths
    /// the target names are hashed.
    fn ignored_but_same(
        &self,
        target: &BTreeMap<RepoPath, TreeItem>,
        capture: &Capture,
    ) -> std::collections::BTreeSet<RepoPath> {
        if capture.ignored.is_empty() {
            return Default::default();
        }
        let ignored: std::collections::HashMap<&RepoPath, bool> = capture
            .ignored
            .iter()
            .map(|(path, whole_dir)| (path, *whole_dir))
            .collect();
        let is_ignored = |path: &RepoPath| {
            ignored.get(path) == Some(&false) || path.ancestors().iter().any(|dir| ignored.get(dir) == Some(&true))
        };
        target
            .iter()
            .filter(|(path, _)| is_ignored(path))
            .filter_map(|(path, want)| {
                let now = self.vault.read_worktree_item(path).ok()?;
                (now == crate::verbs::DiskItem::Entry(*want)).then(|| path.clone())
            })
            .collect()
    }

    /// A filter that names only files on disk ckpt could not protect (too large, unreadable, a
    /// special file) names something that is there: the restore leaves it and says so, rather
    /// than claiming it is nowhere.
    fn match_filters_naming_unprotected(plan: &mut plan::Plan, capture: &Capture) {
        plan.unmatched_filter
            .retain(|f| !capture.skipped.iter().any(|(p, _)| p.is_within(f) || f.is_within(p)));
    }

    /// The refusal of a filter path that matched nothing: a path git ignores is named as one
    /// (ckpt never captures what git ignores, so no checkpoint holds it), anything else as absent.
    fn unmatched_filter(path: &RepoPath, capture: &Capture) -> CkptError {
        let ignored = capture
            .ignored
            .iter()
            .any(|(ignored, whole_dir)| ignored.is_within(path) || (*whole_dir && path.is_within(ignored)));
        CkptError::NotFound(if ignored {
            format!(
                "path {} is ignored by git's ignore rules: ckpt never captures ignored files, so the checkpoint does not hold it",
                path.display()
            )
        } else {
            format!(
                "path {} is neither in the checkpoint nor in the worktree",
                path.display()
            )
        })
    }

    pub(super) fn make_plan(
        &self,
        target: &BTreeMap<RepoPath, TreeItem>,
        record: &Record,
        capture: &Capture,
        selection: &Selection,
    ) -> Result<plan::Plan, CkptError> {
        let current = capture.items();
        let ignored_by_target = self.ignored_by_target(record, target, &current, selection)?;
        let mut plan = plan::plan(&PlanInput {
            target,
            current: &current,
            unprotected: &capture.unprotected(),
            filter: &selection.paths,
            untouchable: &[Self::untouchable(record, capture), ignored_by_target.clone()].concat(),
            same_on_disk: &self.ignored_but_same(target, capture),
            exact: selection.exact,
        });
        plan.ignored_by_target = by_directory(&ignored_by_target, &current);
        give_narrow_modes(&mut plan.ops, record);
        Self::match_filters_naming_unprotected(&mut plan, capture);
        match plan.unmatched_filter.first() {
            Some(unmatched) => Err(Self::unmatched_filter(unmatched, capture)),
            None => Ok(plan),
        }
    }

    pub(super) fn preview_from(
        record: &Record,
        plan: &plan::Plan,
        not_protected: Vec<(RepoPath, String)>,
        exact: bool,
    ) -> Preview {
        Preview {
            id: record.id.clone(),
            overwrite: plan.overwrite.clone(),
            unchanged: plan.unchanged,
            created_after: plan.created_after.clone(),
            delete: plan.delete.clone(),
            conflicts: plan.conflicts.clone(),
            not_protected,
            exact,
        }
    }

    /// The first write of `ops` whose content could not be written (missing, not a blob, or not
    /// readable back exactly), with why; read-only.
    fn unwritable_content(&self, ops: &[RestoreOp]) -> Option<(RepoPath, String)> {
        let writes: Vec<(&RepoPath, &TreeItem)> = ops
            .iter()
            .filter_map(|op| match op {
                RestoreOp::Write { item, path, .. } => Some((path, item)),
                _ => None,
            })
            .collect();
        let ids: Vec<crate::verbs::ObjectId> = writes.iter().map(|(_, item)| item.id).collect();
        for ((path, item), checked) in writes.into_iter().zip(self.vault.check_blobs(&ids)) {
            // A tree or a commit named as a file, or a blob that cannot be read back exactly,
            // would fail mid-restore, after earlier ops had changed the worktree: refused here.
            let why = match checked {
                Ok(()) => continue,
                Err(crate::verbs::VerbError::MissingObject { .. }) => {
                    format!("content {} is missing from the object database", item.id)
                }
                Err(e) => e.to_string(),
            };
            return Some((path.clone(), why));
        }
        None
    }

    /// Refuses a restore whose plan writes content that could not be written, before anything
    /// in the worktree changes: the content `prestaged` read is judged by what it found, the
    /// rest is read now.
    pub(super) fn ensure_blobs_present(&self, prestaged: &Prestaged, ops: &[RestoreOp]) -> Result<(), CkptError> {
        let unchecked: Vec<RestoreOp> = ops
            .iter()
            .filter(|op| matches!(op, RestoreOp::Write { path, .. } if !prestaged.checked(path)))
            .cloned()
            .collect();
        let unwritable = prestaged
            .unwritable(ops)
            .or_else(|| self.unwritable_content(&unchecked))
            .or_else(|| self.vault.unwritable_directory(ops));
        match unwritable {
            None => Ok(()),
            Some((path, why)) => Err(CkptError::Verb(crate::verbs::VerbError::Worktree {
                path: path.display(),
                message: format!(
                    "{why}; the restore stopped before it changed anything: the worktree was not changed (the guard checkpoint just taken is kept)"
                ),
            })),
        }
    }

    pub(super) fn preview(
        &self,
        record: &Record,
        selection: &Selection,
        max_file_size: u64,
    ) -> Result<Preview, CkptError> {
        let target = self.checkpoint_tree(record)?;
        let cache = Registry::open_existing(&self.state_dir)?.and_then(|registry| self.trusted_stat_cache(&registry));
        let capture = scan::capture(
            &self.vault,
            max_file_size,
            BlobSink::HashOnly,
            cache.as_ref(),
            self.reporter.progress(),
        )?;
        let plan = self.make_plan(&target, record, &capture, selection)?;
        // A preview of a restore that would fail says so, rather than listing what it would do.
        if let Some((path, why)) = self.unwritable_content(&plan.ops) {
            return Err(CkptError::Verb(crate::verbs::VerbError::Worktree {
                path: path.display(),
                message: format!("{why}; this checkpoint cannot be restored (nothing was changed)"),
            }));
        }
        let not_protected = Self::with_ignored_by_target(Self::not_protected(record, &capture, selection), &plan);
        Ok(Self::preview_from(record, &plan, not_protected, selection.exact))
    }

    pub(super) fn restore(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError> {
        self.restore_settling(record, selection, request, confirmation, None)
    }

    /// [`Self::restore`]; with `settles`, only while that interrupted restore's journal is still
    /// the pending one once the lock is held (so `doctor --fix` never acts on a restore that
    /// was running, or was settled, after it looked).
    pub(super) fn restore_settling(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
        settles: Option<&RestoreJournal>,
    ) -> Result<RestoreReport, CkptError> {
        let t0 = std::time::Instant::now();
        // A watched guard writes nothing before the target's check settles
        // ([`Engine::snapshot_watched_locked`]): the check runs beside its capture. A walking
        // guard stores blobs as it reads them, and an asked restore previews first: there it
        // runs before anything else.
        let aside = request.watch && !matches!(confirmation, Confirmation::Ask(_));
        let target = self.check_target(record, aside)?;
        self.phase_time("check target tree", t0);
        if let Confirmation::Ask(ask) = confirmation {
            let preview = self.preview(record, selection, request.max_file_size)?;
            if !ask(&preview) {
                return Err(CkptError::Refused("restore not confirmed; nothing was changed".into()));
            }
        }
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        self.take_over_journal(&registry, settles)?;

        let t1 = std::time::Instant::now();
        let staging = self.state_dir.join(STAGING_DIR);
        // The writes a restore that undoes the latest edits makes are at the paths the guard
        // found changed: their content is staged while the guard is still being written.
        let likely_writes = std::cell::RefCell::new(None);
        let stage_likely_writes = |found: &[Found]| {
            let in_selection = |path: &RepoPath| {
                selection.paths.is_empty() || selection.paths.iter().any(|filter| path.is_within(filter))
            };
            let likely = found.iter().filter(|(path, _)| in_selection(path)).cloned().collect();
            *likely_writes.borrow_mut() = Some(self.vault.prestage_likely_writes(&staging, target.tree, likely));
        };
        let (guard, looked) = if request.watch {
            let hooks = GuardHooks {
                before_writing: &|| target.check.settle(),
                captured: &stage_likely_writes,
            };
            self.snapshot_watched_locked(&registry, &lock, request, &hooks)?
        } else {
            let (guard, capture) = self.snapshot_locked(&registry, &lock, request)?;
            (guard, Looked::Whole(capture))
        };
        self.phase_time("guard snapshot", t1);
        let file_counts = target.check.into_counts()?;
        if aside {
            Self::remember_checked_trees(&registry, &lock, &file_counts, target.known_trees);
        }
        let t2 = std::time::Instant::now();
        let guard_tree = guard.record.tree_id().map_err(CkptError::CorruptRecord)?;
        let (changes, guard_trees) = self
            .vault
            .diff_trees_to_restore(Some(&guard_tree), Some(&target.tree))?;
        let guard_watched = matches!(looked, Looked::Within(..));
        let evidence = self.restore_evidence(
            looked,
            &changes,
            selection,
            request,
            &registry,
            &file_counts,
            &target.tree,
        )?;
        self.phase_time("evidence", t2);
        let plan = self.plan_from_diff(changes, record, &evidence, selection)?;
        self.phase_time("plan", t2);
        let t3 = std::time::Instant::now();
        // Every write's content is read, checked and (where it can be moved into place) written
        // and synced in the staging directory while the guard is made durable.
        let prestaging = self
            .vault
            .prestage_writes(&staging, &plan.ops, likely_writes.into_inner());

        // What the guard holds where the restore changes anything is on disk before the first
        // change is (each change is synced as it lands).
        let guard_commit = guard.record.object_id().map_err(CkptError::CorruptRecord)?;
        let mut guard_objects = guard_trees;
        guard_objects.push(guard_commit);
        guard_objects.extend(plan.ops.iter().filter_map(|op| match op {
            RestoreOp::Remove { expect, .. }
            | RestoreOp::Write {
                expect: Some(expect), ..
            } => Some(expect.id),
            _ => None,
        }));
        let durable = self
            .vault
            .make_durable(&PinRef::for_checkpoint(&self.workspace, &guard_commit), &guard_objects);
        let prestaged = prestaging.wait();
        durable?;
        self.ensure_blobs_present(&prestaged, &plan.ops)?;
        self.phase_time("guard on disk, writes staged", t3);
        crate::fault::pause("restore:after-staging");
        registry.write_journal(&journal(record, &guard.record, selection, &plan.ops)?, &lock)?;
        crate::fault::point("restore:after-journal");
        let phase = self.reporter.progress().phase("restoring", plan.ops.len() as u64);
        let progress = self.reporter.progress();
        let results = self.vault.restore_paths(
            &plan.ops,
            Some(&prestaged),
            Some(&removals_seen(&plan.ops, &evidence)),
            |done| {
                progress.inc(1);
                if done == 1 {
                    crate::fault::point("restore:after-first-write");
                }
            },
        );
        drop(phase);

        let mut report = Self::report_of(record, &guard, guard_watched, selection, &plan, results);

        self.phase_time("writes", t3);
        crate::fault::pause("restore:before-verify");
        let t4 = std::time::Instant::now();
        self.verify_restored(&plan.ops, &mut report)?;
        self.phase_time("verify", t4);
        registry.clear_journal(&lock)?;
        Ok(report)
    }

    /// The target's tree and the check of it (every name, every file counted): `aside`, running
    /// beside the guard's capture, with the trees an earlier restore's check read skipped (an
    /// id names one content); otherwise done here, first.
    fn check_target(&self, record: &Record, aside: bool) -> Result<CheckedTarget, CkptError> {
        if !aside {
            let (tree, counts) = self.checkpoint_tree_counted(record)?;
            return Ok(CheckedTarget {
                tree,
                check: TargetCheck::done(counts),
                known_trees: 0,
            });
        }
        let tree = self.pinned_tree_id(record)?;
        let known = Registry::open_existing(&self.state_dir)
            .ok()
            .flatten()
            .map(|registry| registry.checked_trees(tree.as_bytes().len()))
            .unwrap_or_default();
        let known_trees = known.len();
        let check = TargetCheck::running(self.vault.validate_tree_aside(&tree, FileCounts::known(known)));
        Ok(CheckedTarget {
            tree,
            check,
            known_trees,
        })
    }

    /// Under the lock: refuses when `settles` is no longer the pending journal; otherwise
    /// warns of an interrupted restore's journal this restore is about to replace, and removes
    /// the temp files that journal shows were its own.
    fn take_over_journal(&self, registry: &Registry, settles: Option<&RestoreJournal>) -> Result<(), CkptError> {
        let pending = registry.read_journal()?;
        if let Some(expected) = settles {
            if pending.as_ref() != Some(expected) {
                return Err(CkptError::Refused(
                    "the interrupted restore was settled meanwhile (it finished, or another ckpt settled it); nothing was done".into(),
                ));
            }
            return Ok(());
        }
        let Some(stale) = pending else {
            return Ok(());
        };
        self.reporter.warning(&format!(
            "an earlier restore was interrupted (journal: {}); its guard {} still holds the state before it",
            registry.dir().join("restore-journal.json").display(),
            stale.guard
        ));
        // Its journal is about to be replaced by this restore's: the temp files it left are
        // known for its own only while that journal names them. Cleaning them is a courtesy:
        // one that cannot be judged or removed is reported, and the restore goes on. The lock
        // held here means that restore has ended, even if its pid is in use again.
        match self.stale_temp_files(Some(&stale)) {
            Ok(paths) => {
                for path in paths {
                    match self.vault.remove_stale_temp(&path, true) {
                        Ok(true) => self.reporter.warning(&format!(
                            "removed leftover temp file {} of the interrupted restore",
                            path.display()
                        )),
                        Ok(false) => {}
                        Err(e) => self
                            .reporter
                            .warning(&format!("could not remove leftover temp file {}: {e}", path.display())),
                    }
                }
            }
            Err(e) => self.reporter.warning(&format!(
                "could not look for the interrupted restore's temp files ({e}); `ckpt doctor --fix` removes them"
            )),
        }
        Ok(())
    }

    /// Saves the trees a check read aside, for the next restore's check to skip, when it read
    /// any it did not know.
    fn remember_checked_trees(registry: &Registry, lock: &RegistryLock, counts: &FileCounts, known_trees: usize) {
        let counted_trees = counts.trees().count();
        if counted_trees == known_trees {
            return;
        }
        // Bounded: past the limit the list is emptied, and the next check starts it again.
        let remembered: Vec<_> = if counted_trees > crate::records::MAX_CHECKED_TREES {
            Vec::new()
        } else {
            counts.trees().collect()
        };
        // Only an accelerator: a list that cannot be saved makes the next check read more.
        registry.save_checked_trees(remembered.into_iter(), lock).ok();
    }

    /// What the plan may judge the worktree by. A whole guard capture is that; a watched guard
    /// looked at its changed paths only, which is enough when they are every path the plan can
    /// touch; otherwise those paths (and the selection's) are captured read-only, or, when the
    /// target writes below an untracked repository only a walk sees, the whole worktree is.
    #[allow(clippy::too_many_arguments)]
    fn restore_evidence(
        &self,
        looked: Looked,
        changes: &[TreeChange],
        selection: &Selection,
        request: &SnapshotRequest,
        registry: &Registry,
        file_counts: &FileCounts,
        target_tree: &ObjectId,
    ) -> Result<Evidence, CkptError> {
        let (seen, within) = match looked {
            Looked::Whole(capture) => return Ok(Evidence::Whole(capture)),
            Looked::Within(seen, within) => (seen, within),
        };
        // Every path the plan can touch is a changed path or below one; the filter's paths are
        // captured too, so the counts within it are exact. When the guard has just looked at
        // every one of those paths (the usual undo of the latest edits), what it found is the
        // evidence; it was found under this same lock.
        let guard_saw_all =
            selection.paths.is_empty() && changes.iter().all(|change| seen.covers(change.path.as_bytes()));
        let capture = if guard_saw_all {
            within
        } else {
            let scope = PathScope::new(
                changes
                    .iter()
                    .map(|change| change.path.clone())
                    .chain(selection.paths.iter().cloned()),
            );
            let cache = if selection.paths.is_empty() {
                None
            } else {
                self.trusted_stat_cache(registry)
            };
            scan::capture_scope(
                &self.vault,
                request.max_file_size,
                cache.as_ref(),
                &scope,
                self.reporter.progress(),
            )?
        };
        // A path the target has below an untracked repository (one that appeared where a
        // directory was) is seen only by a walk: then the evidence is a whole capture.
        let written: Vec<RepoPath> = changes
            .iter()
            .filter(|c| c.new.is_some())
            .map(|c| c.path.clone())
            .collect();
        if self.vault.repositories_above(&written)?.is_empty() {
            let target_files = file_counts
                .total(target_tree)
                .ok_or_else(|| CkptError::Refused("the target tree was not counted; nothing was changed".into()))?;
            return Ok(Evidence::Scoped { capture, target_files });
        }
        let cache = self.trusted_stat_cache(registry);
        Ok(Evidence::Whole(scan::capture(
            &self.vault,
            request.max_file_size,
            BlobSink::HashOnly,
            cache.as_ref(),
            self.reporter.progress(),
        )?))
    }

    /// Checks every path the restore wrote or removed (one whose write failed is reported
    /// already) holds what it should now; a path changed since is moved from written or deleted
    /// to failed, with why, and the report is verified only when nothing failed.
    fn verify_restored(&self, ops: &[RestoreOp], report: &mut RestoreReport) -> Result<(), CkptError> {
        let mut verified = report.failed.is_empty();
        let failed: std::collections::HashSet<RepoPath> = report.failed.iter().map(|(p, _)| p.clone()).collect();
        let expected: Vec<(&RepoPath, Option<&TreeItem>)> = ops
            .iter()
            .filter_map(|op| match op {
                RestoreOp::Write { path, item, .. } => Some((path, Some(item))),
                RestoreOp::Remove { path, .. } => Some((path, None)),
                _ => None,
            })
            .filter(|(path, _)| !failed.contains(*path))
            .collect();
        let answers = self.vault.verify_paths(&expected);
        for ((path, want), holds) in expected.into_iter().zip(answers) {
            if !holds? {
                verified = false;
                // Each path is reported once: a path changed after its write is not restored.
                report.written.retain(|p| p != path);
                report.deleted.retain(|p| p != path);
                let why = if want.is_some() {
                    "verification failed: changed on disk after the restore wrote it (content, kind or execute bit); left as it is now"
                } else {
                    "verification failed: something is there again after the restore removed it; left as it is now"
                };
                report.failed.push((path.clone(), why.into()));
            }
        }
        report.verified = verified;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory whose every entry is an ignored file the checkpoint lacks is named once,
    /// with its file count (the topmost such); a file beside anything else is named itself.
    #[test]
    fn ignored_files_are_named_by_their_wholly_ignored_directory() {
        let path = |p: &str| RepoPath::new(p.as_bytes().to_vec()).unwrap();
        let item = TreeItem {
            kind: EntryKind::File,
            id: ObjectId::from_hex("4b825dc642cb6eb9a060e54bf8d69288fbee4904").unwrap(),
        };
        let current: BTreeMap<RepoPath, TreeItem> = [
            "build/a.o",
            "build/deep/b.o",
            "build/deep/c.o",
            "lone/only.o",
            "run.log",
            "src/lib.rs",
            "src/x.tmp",
            "src/y.tmp",
            "mixed/keep.rs",
            "mixed/out/1.o",
            "mixed/out/2.o",
        ]
        .into_iter()
        .map(|p| (path(p), item))
        .collect();
        let ignored: Vec<RepoPath> = [
            "build/a.o",
            "build/deep/b.o",
            "build/deep/c.o",
            "lone/only.o",
            "mixed/out/1.o",
            "mixed/out/2.o",
            "run.log",
            "src/x.tmp",
            "src/y.tmp",
        ]
        .into_iter()
        .map(path)
        .collect();
        assert_eq!(
            by_directory(&ignored, &current),
            vec![
                (path("build"), 3),
                (path("lone/only.o"), 1),
                (path("mixed/out"), 2),
                (path("run.log"), 1),
                (path("src/x.tmp"), 1),
                (path("src/y.tmp"), 1),
            ]
        );
        assert_eq!(by_directory(&[], &current), vec![]);
    }

    #[test]
    fn each_not_protected_path_is_one_line() {
        let path = |p: &str| RepoPath::new(p.as_bytes().to_vec()).unwrap();
        let merged = one_line_per_path(vec![
            (path("sub"), "submodule".into()),
            (path("sub"), "not in checkpoint: submodule".into()),
            (path("big.bin"), "too_large: 9 bytes, limit 5".into()),
            (
                path("big.bin"),
                "not in checkpoint: unreadable: permission denied".into(),
            ),
            (path("a"), "ignored".into()),
            (path("a"), "ignored".into()),
        ]);
        assert_eq!(
            merged,
            vec![
                (path("a"), "ignored".to_owned()),
                (
                    path("big.bin"),
                    "not in checkpoint: unreadable: permission denied; too_large: 9 bytes, limit 5".to_owned()
                ),
                (path("sub"), "submodule, and not in checkpoint".to_owned()),
            ]
        );
    }
}
