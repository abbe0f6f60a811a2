//! The watched snapshot: asks the workspace's watch daemon what changed since the last watched
//! checkpoint and, when it can vouch for the answer, captures only that — a no-op costs a socket
//! round trip, a few edits cost those edits (the changed paths are listed, read and hashed; every
//! other tree, stat-cache entry and count is carried over from the previous checkpoint). Any
//! doubt (no daemon, an unknown token, a changed config or exclude file, a submodule or hard link
//! in the scope, a stat cache of another checkpoint) means a full snapshot, and the outcome says
//! why. A changed index or HEAD (the agent's own `git add`, `commit`, `checkout`) does not: the
//! paths whose tracking it changed are captured with the daemon's. It writes nothing a full
//! snapshot would not write.

use crate::provider::scan::{self, Capture, Delta};
use crate::provider::treebuild::{self, TreeEdit};
use crate::provider::watch::{self, Changes};
use crate::provider::{CkptError, ScanMode, SnapshotOutcome, SnapshotRequest};
use crate::records::watch::{WatchBase, WatchFiles};
use crate::records::{Record, Registry, RegistryLock, WirePath};
use crate::verbs::{ObjectId, PackCompression, PathScope, RepoPath, TreeItem, VerbError};

use super::snapshot::{skipped_list, unnamable_list, Counts};
use super::{Engine, Reconciled, StoreKind};

/// What a snapshot looked at on disk, for a restore planned from it.
pub(super) enum Looked {
    /// The whole worktree: the snapshot fell back to a full capture.
    Whole(Capture),
    /// Only the paths in the scope (and below them), and what it found there, as of the
    /// snapshot; outside the scope the daemon vouched that nothing changed since the previous
    /// checkpoint.
    Within(PathScope, Capture),
}

/// More changed paths than this and a watched snapshot walks instead.
const MAX_SCOPE: usize = 1000;

/// A path a capture looked at, with what it found there (`None`: nothing).
pub(super) type Found = (RepoPath, Option<TreeItem>);

/// What a restore does while its guard, a watched snapshot, runs; see
/// [`Engine::snapshot_watched_locked`].
pub(super) struct GuardHooks<'a> {
    /// A check the snapshot passes before it writes anything (objects, state or pins); its
    /// error ends the snapshot there.
    pub before_writing: &'a dyn Fn() -> Result<(), CkptError>,
    /// Told what a capture of the changed paths alone found there (each path's new entry, or
    /// `None` where it is gone), as soon as it has.
    pub captured: &'a dyn Fn(&[Found]),
}

fn nothing_to_check() -> Result<(), CkptError> {
    Ok(())
}

fn tell_no_one(_: &[Found]) {}

impl GuardHooks<'static> {
    /// The hooks of a snapshot that waits on nothing and tells no one.
    pub(super) const NONE: Self = GuardHooks {
        before_writing: &nothing_to_check,
        captured: &tell_no_one,
    };
}

/// The previous checkpoint's narrow modes outside `scope`, and those of the files the delta
/// captured inside it, in path order.
fn narrow_modes_after(previous: &Record, scope: &PathScope, delta: &Delta) -> Vec<crate::records::NarrowMode> {
    let mut modes: Vec<crate::records::NarrowMode> = previous
        .narrow_modes
        .iter()
        .filter(|m| m.path.to_repo_path().is_ok_and(|path| !scope.covers(path.as_bytes())))
        .cloned()
        .collect();
    modes.extend(super::snapshot::narrow_modes_of(
        delta
            .within
            .files
            .iter()
            .filter(|(path, _)| scope.covers(path.as_bytes())),
    ));
    modes.sort_by_key(|m| m.path.to_bytes().unwrap_or_default());
    modes.truncate(crate::records::MAX_NARROW_MODES);
    modes
}

/// What the previous checkpoint did not protect outside `scope`, plus what the delta found
/// inside it, sorted. A previous path that is no repository path (`.Git`) stays: a daemon that
/// names one gives no scope, so a scoped snapshot never saw it change.
fn skipped_after(previous: &Record, scope: &PathScope, delta: &Delta) -> Vec<crate::records::Skipped> {
    let mut kept: Vec<(RepoPath, String)> = Vec::new();
    let mut unnamable: Vec<crate::records::Skipped> = Vec::new();
    for s in &previous.skipped {
        match s.path.to_repo_path() {
            Ok(path) if !scope.covers(path.as_bytes()) => kept.push((path, s.reason.clone())),
            Ok(_) => {}
            Err(_) => unnamable.push(s.clone()),
        }
    }
    kept.extend(delta.skipped.iter().cloned());
    kept.sort();
    kept.dedup();
    unnamable.extend(unnamable_list(&delta.unnamable));
    unnamable.sort_by_key(|s| s.path.to_bytes().unwrap_or_default());
    unnamable.dedup();
    let mut skipped = skipped_list(&kept);
    skipped.extend(unnamable);
    skipped
}

impl Engine {
    pub(super) fn snapshot(&self, request: &SnapshotRequest) -> Result<SnapshotOutcome, CkptError> {
        let registry = self.registry()?;
        let lock = registry.lock(&|lock| self.reporter.waiting_for_lock(lock))?;
        let outcome = if request.watch {
            self.snapshot_watched_locked(&registry, &lock, request, &GuardHooks::NONE)?
                .0
        } else {
            self.snapshot_locked(&registry, &lock, request)?.0
        };
        if outcome.created || !request.opens_turn {
            return Ok(outcome);
        }
        // Any checkpoint of this turn already stands for its start (the newest may be another
        // session's that came in between).
        let of_this_turn = |record: &Record| record.session == request.session && record.turn == request.turn;
        if of_this_turn(&outcome.record) || self.reconcile(registry.load()?)?.records.iter().any(of_this_turn) {
            return Ok(outcome);
        }
        self.open_turn_on(&registry, &lock, request, outcome)
    }

    /// A checkpoint with `request`'s labels for the unchanged state `unchanged` names: the
    /// same tree, nothing new stored. The watch base and the stat cache move to it, so the next
    /// watched snapshot builds on it as it would have on `unchanged`.
    fn open_turn_on(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
        unchanged: SnapshotOutcome,
    ) -> Result<SnapshotOutcome, CkptError> {
        let previous = &unchanged.record;
        let tree = previous.tree_id().map_err(CkptError::InvalidInput)?;
        let head = self.checkpoint_parent()?;
        let mut reconciled = self.reconcile(registry.load()?)?;
        let counts = Counts {
            files: 0,
            total_files: previous.total_files,
            bytes: 0,
        };
        let record = self.publish(
            registry,
            lock,
            Some(&mut reconciled),
            request,
            (tree, head),
            counts,
            (previous.skipped.clone(), previous.narrow_modes.clone()),
        )?;
        let (Ok(old_id), Ok(new_id)) = (previous.object_id(), record.object_id()) else {
            return Err(CkptError::InvalidInput(format!(
                "checkpoint {} has a bad id",
                record.id
            )));
        };
        // No path changed: of the main file, only its header and block index are read.
        if let Some(cache) = self
            .trusted_stat_cache_within(registry, &PathScope::new(Vec::new()))
            .filter(|c| c.checkpoint == Some(old_id))
        {
            if let Err(e) = cache.save_delta(registry.dir(), lock, Some(new_id), &[]) {
                self.reporter.warning(&format!("could not write the stat cache: {e}"));
            }
        }
        let files = WatchFiles::new(&self.state_dir);
        if let Some(mut base) = files.load_base().filter(|b| b.checkpoint == previous.id) {
            base.checkpoint = record.id.clone();
            files.save_base(&base, lock)?;
        }
        Ok(SnapshotOutcome {
            not_protected: record.skipped.clone(),
            record,
            created: true,
            ..unchanged
        })
    }

    /// The watched snapshot; the caller holds the workspace lock. It also says what it looked
    /// at: the whole worktree when it fell back to a full capture, else its changed paths only.
    /// `hooks.before_writing` runs before the snapshot writes anything (objects, state or pins),
    /// and its error ends the snapshot there: a restore checks its target tree meanwhile, and
    /// starts preparing its writes once `hooks.captured` tells it what changed.
    pub(super) fn snapshot_watched_locked(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
        hooks: &GuardHooks<'_>,
    ) -> Result<(SnapshotOutcome, Looked), CkptError> {
        let files = WatchFiles::new(&self.state_dir);
        let base = files.load_base();
        // Both taken before the capture: a change during it shows up in the next answer.
        // The size limit decides what a capture holds as much as the git state does.
        let found = self.vault.watch_fingerprint();
        let settings = format!("{}max_file_size {}\n", found.settings, request.max_file_size);
        let fingerprint = format!("{settings}{}", found.index_and_head);
        if base.as_ref().is_some_and(|b| b.fingerprint == fingerprint) {
            // That base dates back, through deltas with this same fingerprint, to a full capture
            // whose read of this index version verified it.
            self.vault.vouch_for_index(found.index);
        }
        // Only the index or HEAD moved (a `git add`, `commit`, `checkout`, `stash` of the agent's):
        // the paths whose tracking changed join the daemon's.
        let index_moved = base
            .as_ref()
            .is_some_and(|b| b.fingerprint != fingerprint && b.fingerprint.starts_with(&settings));
        let started = std::time::Instant::now();
        let mounts = self.vault.mount_points_inside();
        let answer = match mounts.first() {
            Some(mount) => Changes::Failed(format!(
                "a filesystem is mounted inside the worktree at {} (inotify cannot see into it)",
                mount.display()
            )),
            None => watch::changes_since(&files, base.as_ref().map(|b| b.token.as_str())),
        };
        self.phase_time("watch daemon", started);
        let (token, fallback) = match answer {
            Changes::NoDaemon => (None, watch::NO_DAEMON.to_owned()),
            Changes::Failed(why) => (None, why),
            Changes::Answered {
                token,
                paths: Some(paths),
                ..
            } => {
                if !paths.is_empty()
                    && paths.len() <= MAX_SCOPE
                    && base.as_ref().is_some_and(|b| b.fingerprint == fingerprint)
                {
                    // The scoped listing will want the index: its read overlaps the records'
                    // and the stat cache's.
                    self.vault.prefetch_index();
                }
                let newest = match &base {
                    Some(base) => self.unchanged_checkpoint(registry, &base.checkpoint)?,
                    None => None,
                };
                let reason = match (&base, newest) {
                    (None, _) => "no earlier watched snapshot".to_owned(),
                    (Some(base), _) if base.fingerprint != fingerprint && !index_moved => {
                        "a config or an exclude file, or the size limit changed".to_owned()
                    }
                    (Some(_), None) => "the last checkpoint is not the one the daemon's token belongs to".to_owned(),
                    (Some(base), Some(_)) if base.linked => {
                        "a file the last capture protected has other hard links (a write through another name raises no event here)".to_owned()
                    }
                    (Some(_), Some(_)) if paths.len() > MAX_SCOPE => {
                        format!("{} paths changed (a walk is cheaper above {MAX_SCOPE})", paths.len())
                    }
                    (Some(_), Some((previous, records))) => match self.scope_after(registry, &previous, &paths, index_moved) {
                        Err(why) => why,
                        Ok(scope) => {
                            let delta = if scope.paths().next().is_none() {
                                // Nothing changed since that checkpoint's capture.
                                Ok((self.unchanged_outcome(previous), Capture::default()))
                            } else {
                                match self.snapshot_delta(registry, lock, request, (previous, records), &scope, hooks) {
                                    // The full snapshot stores what the gc took.
                                    Err(CkptError::Verb(collected @ VerbError::CollectedBeforePin { .. })) => {
                                        Err(collected.to_string())
                                    }
                                    delta => delta?,
                                }
                            };
                            match delta {
                                Ok((outcome, within)) => {
                                (hooks.before_writing)()?;
                                files.save_base(
                                    &WatchBase {
                                        token,
                                        checkpoint: outcome.record.id.clone(),
                                        fingerprint,
                                        // A scope file with other links made it walk instead,
                                        // and no file outside the scope had any.
                                        linked: false,
                                    },
                                    lock,
                                )?;
                                return Ok((outcome, Looked::Within(scope, within)));
                                }
                                Err(why) => why,
                            }
                        }
                    },
                };
                (Some(token), reason)
            }
            Changes::Answered { token, unknown, .. } => (Some(token), unknown.unwrap_or_default()),
        };
        (hooks.before_writing)()?;
        let (mut outcome, capture) = self.snapshot_locked(registry, lock, request)?;
        match token {
            Some(token) => files.save_base(
                &WatchBase {
                    token,
                    checkpoint: outcome.record.id.clone(),
                    fingerprint,
                    linked: outcome.scan.linked > 0,
                },
                lock,
            )?,
            None => files.clear_base(lock),
        }
        outcome.scan_mode = ScanMode::Full {
            fallback: Some(fallback),
        };
        Ok((outcome, Looked::Whole(capture)))
    }

    /// What a watched snapshot captures: the paths the daemon named and, when the index moved
    /// since `previous` was taken, those whose tracking it changed. `Err` says why it walks.
    fn scope_after(
        &self,
        registry: &Registry,
        previous: &Record,
        changed: &[WirePath],
        index_moved: bool,
    ) -> Result<PathScope, String> {
        let Some(mut paths) = changed
            .iter()
            .map(|p| p.to_repo_path().ok())
            .collect::<Option<Vec<RepoPath>>>()
        else {
            return Err("the daemon named a path that is not a repository path".to_owned());
        };
        if index_moved {
            let started = std::time::Instant::now();
            let cache = self
                .trusted_stat_cache(registry)
                .filter(|cache| cache.checkpoint.is_some() && cache.checkpoint == previous.object_id().ok());
            let Some(cache) = cache else {
                return Err(
                    "the index moved and there is no stat cache of the last checkpoint to compare it with".into(),
                );
            };
            if !self.gitlinks_as_before(previous)? {
                return Err("a submodule pointer moved in the index".into());
            }
            let room = MAX_SCOPE.saturating_sub(paths.len());
            match self.vault.index_membership_changes(cache.paths(), room) {
                Ok(Some(tracking)) => paths.extend(tracking),
                Ok(None) => {
                    return Err(format!(
                        "the index moved, and with the paths it tracks or stops tracking more than {MAX_SCOPE} may have changed (or it is sparse)"
                    ))
                }
                Err(e) => return Err(format!("the index moved and cannot be read: {e}")),
            }
            self.phase_time("index membership", started);
        }
        Ok(PathScope::new(paths))
    }

    /// Whether the index holds exactly the submodule pointers `previous` holds (its record names
    /// each as a `submodule` it skipped; its tree holds the pointer): a capture takes them from
    /// the index, and none of the daemon's paths says that one moved there. `Err` says why it
    /// cannot tell.
    fn gitlinks_as_before(&self, previous: &Record) -> Result<bool, String> {
        let cannot = |e: crate::verbs::VerbError| format!("the index moved and its submodules cannot be read: {e}");
        let Some(now) = self.vault.index_gitlinks().map_err(cannot)? else {
            return Ok(false);
        };
        let tree = previous
            .tree_id()
            .map_err(|e| format!("checkpoint {} has a bad tree: {e}", previous.id))?;
        let mut before = Vec::new();
        for skipped in previous.skipped.iter().filter(|s| s.reason == "submodule") {
            let Ok(path) = skipped.path.to_repo_path() else {
                return Ok(false);
            };
            match self.vault.gitlink_in_tree(&tree, &path).map_err(cannot)? {
                Some(id) => before.push((path, id)),
                None => return Ok(false),
            }
        }
        before.sort();
        Ok(now == before)
    }

    /// The outcome of a watched snapshot that found nothing changed since `previous`.
    fn unchanged_outcome(&self, previous: Record) -> SnapshotOutcome {
        SnapshotOutcome {
            not_protected: previous.skipped.clone(),
            record: previous,
            created: false,
            warnings: Vec::new(),
            scan_mode: ScanMode::Watch,
            scan: Default::default(),
        }
    }

    /// The snapshot of a worktree that differs from `previous` (the newest checkpoint, whose
    /// capture the daemon's token dates from) only within `scope`: the scope is captured, its
    /// changes are applied to `previous`'s tree, and the stat cache gets a delta. `Err` (why)
    /// when the scope cannot be captured alone or the stat cache is not `previous`'s; the caller
    /// then takes a full snapshot. What the capture found within the scope comes back with it.
    fn snapshot_delta(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
        (previous, mut reconciled): (Record, Option<Reconciled>),
        scope: &PathScope,
        hooks: &GuardHooks<'_>,
    ) -> Result<Result<(SnapshotOutcome, Capture), String>, CkptError> {
        let _keeps = self.vault.pack_keeps_released_on_return();
        // The scoped listing reads the index; on a thread of its own, it overlaps the stat cache.
        self.vault.prefetch_index();
        let started = std::time::Instant::now();
        let Some(cache) = self.trusted_stat_cache_within(registry, scope) else {
            return Ok(Err(
                "there is no usable stat cache (missing, damaged, or of a checkpoint no longer pinned)".into(),
            ));
        };
        self.phase_time("stat cache load", started);
        let (Ok(previous_id), Ok(base_tree)) = (previous.object_id(), previous.tree_id()) else {
            return Ok(Err(format!("checkpoint {} has a bad id", previous.id)));
        };
        if cache.checkpoint != Some(previous_id) {
            return Ok(Err(format!(
                "the stat cache is of another checkpoint than the last one (its delta would pass {} entries, or it is older)",
                crate::records::statcache::MAX_DELTA_ENTRIES
            )));
        }
        let started = std::time::Instant::now();
        let progress = self.reporter.progress();
        // New objects go into one pack in the user's repository, uncompressed: compressing them,
        // and inflating them again to index the pack, cost as much as the rest of the write.
        // The daemon compresses the pack once the worktree is quiet ([`Engine::merge_ckpt_packs`]).
        // A copy store keeps loose objects only: its own gc collects those.
        let _batch = (self.kind == StoreKind::Repository).then(|| self.vault.begin_batch(PackCompression::Stored));
        let Some(mut delta) = scan::capture_delta(&self.vault, request.max_file_size, &cache, scope, progress)? else {
            return Ok(Err(
                "a changed path reaches a submodule or a file with other hard links".into(),
            ));
        };
        let within = std::mem::take(&mut delta.within);
        for (phase, elapsed) in &delta.listing_times {
            self.reporter.timing_of(phase, *elapsed);
        }
        self.phase_time("capture (scope only)", started);
        let found: Vec<Found> = delta
            .edits
            .iter()
            .map(|(path, file)| (path.clone(), file.map(|f| f.item)))
            .collect();
        (hooks.captured)(&found);
        crate::fault::point("snapshot:after-blobs");
        let skipped = skipped_after(&previous, scope, &delta);
        let stats = delta.stats;
        let warnings = delta.warnings.clone();
        let save_cache = |checkpoint: ObjectId| {
            if delta.stat_changes.is_empty() && checkpoint == previous_id {
                return;
            }
            let started = std::time::Instant::now();
            if let Err(e) = cache.save_delta(registry.dir(), lock, Some(checkpoint), &delta.stat_changes) {
                self.reporter.warning(&format!("could not write the stat cache: {e}"));
            }
            self.phase_time("stat cache save (delta)", started);
        };
        let started = std::time::Instant::now();
        let tree = if delta.edits.is_empty() {
            base_tree
        } else {
            let edits: Vec<TreeEdit<'_>> = delta
                .edits
                .iter()
                .map(|(path, file)| (path.as_bytes(), file.map(|f| f.item)))
                .collect();
            match treebuild::edit_trees(&self.vault, base_tree, &edits) {
                Ok(tree) => tree,
                Err(e) => {
                    return Ok(Err(format!(
                        "the last checkpoint's trees cannot be read back ({e}); a full snapshot builds them from the worktree"
                    )))
                }
            }
        };
        self.phase_time("trees (changed directories only)", started);
        (hooks.before_writing)()?;
        if tree == base_tree {
            save_cache(previous_id);
            let mut outcome = self.unchanged_outcome(previous);
            outcome.not_protected = skipped.clone();
            outcome.warnings = warnings;
            outcome.scan = stats;
            return Ok(Ok((outcome, within)));
        }
        let mut counted = std::collections::HashSet::new();
        let bytes = delta
            .edits
            .iter()
            .filter_map(|(_, file)| file.as_ref())
            .filter(|f| f.fresh && counted.insert(f.item.id))
            .map(|f| f.size)
            .sum();
        let counts = Counts {
            files: delta.edits.len() as u64,
            total_files: (previous.total_files as i64 + delta.net_files).max(0) as u64,
            bytes,
        };
        let head = self.checkpoint_parent()?;
        let narrow_modes = narrow_modes_after(&previous, scope, &delta);
        let record = self.publish(
            registry,
            lock,
            reconciled.as_mut(),
            request,
            (tree, head),
            counts,
            (skipped, narrow_modes),
        )?;
        if let Ok(id) = record.object_id() {
            save_cache(id);
        }
        Ok(Ok((
            SnapshotOutcome {
                not_protected: record.skipped.clone(),
                record,
                created: true,
                warnings,
                scan_mode: ScanMode::Watch,
                scan: stats,
            },
            within,
        )))
    }

    /// The newest pinned checkpoint, if it is `id`: then a worktree unchanged since the capture
    /// that produced (or matched) `id` is still exactly that checkpoint. With it, every record
    /// as reconciled with the pins, when they were read for it ([`Engine::footing`]).
    fn unchanged_checkpoint(
        &self,
        registry: &Registry,
        id: &str,
    ) -> Result<Option<(Record, Option<Reconciled>)>, CkptError> {
        let started = std::time::Instant::now();
        let (newest, reconciled) = self.footing(registry)?;
        self.phase_time("registry + refs", started);
        Ok(newest.filter(|r| r.id == id).map(|record| (record, reconciled)))
    }
}
