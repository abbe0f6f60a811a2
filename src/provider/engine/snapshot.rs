//! The snapshot transaction: capture, trees (reusing the cached checkpoint's subtrees), commit,
//! pin, record, stat cache. The pin is the commit point; nothing is published for a partial
//! capture.

use std::collections::HashSet;

use crate::provider::scan::CapturedFile;
use crate::provider::scan::{self, BlobSink, Capture};
use crate::provider::treebuild;
use crate::provider::{CkptError, Provider, ScanMode, SnapshotOutcome, SnapshotRequest};
use crate::records::statcache::StatCache;
use crate::records::{NarrowMode, Record, Registry, RegistryLock, Skipped, Trailers, WirePath, MAX_NARROW_MODES};
use crate::verbs::{EntryKind, ObjectId, PackCompression, PathScope, PinRef, RepoPath, TreeItem, VerbError};

use super::{now_rfc3339, Engine, Reconciled, StoreKind};

/// What a new checkpoint's record counts.
pub(super) struct Counts {
    /// Paths that differ from the previous checkpoint (or, for the first one, from HEAD).
    pub files: u64,
    pub total_files: u64,
    /// Content this snapshot added to the object store.
    pub bytes: u64,
}

/// What a capture did not protect, as records keep it.
pub(super) fn skipped_of(capture: &Capture) -> Vec<Skipped> {
    let mut skipped = skipped_list(&capture.skipped);
    skipped.extend(unnamable_list(&capture.unnamable));
    skipped
}

/// The captured files whose permission bits are narrower than a new file's default, as
/// records keep them (at most [`MAX_NARROW_MODES`], in path order).
pub(super) fn narrow_modes_of<'a>(files: impl Iterator<Item = (&'a RepoPath, &'a CapturedFile)>) -> Vec<NarrowMode> {
    files
        .filter(|(_, file)| matches!(file.item.kind, EntryKind::File | EntryKind::Executable))
        .filter_map(|(path, file)| {
            let mode = file.stat.as_ref()?.mode & 0o777;
            NarrowMode::is_narrow(mode).then(|| NarrowMode {
                path: WirePath::from_repo_path(path),
                mode,
            })
        })
        .take(MAX_NARROW_MODES)
        .collect()
}

/// Paths that are not repository paths, as records keep them (raw bytes).
pub(super) fn unnamable_list(unnamable: &[(Vec<u8>, String)]) -> Vec<Skipped> {
    unnamable
        .iter()
        .map(|(path, reason)| Skipped {
            path: WirePath::from_bytes(path),
            reason: reason.clone(),
        })
        .collect()
}

pub(super) fn skipped_list(skipped: &[(RepoPath, String)]) -> Vec<Skipped> {
    skipped
        .iter()
        .map(|(path, reason)| Skipped {
            path: WirePath::from_repo_path(path),
            reason: reason.clone(),
        })
        .collect()
}

impl Engine {
    /// Writes the capture's trees. With a stat cache (which names every file of its checkpoint),
    /// that checkpoint's tree is the base: only directories holding a file that is not the
    /// checkpoint's own (`CapturedFile::cached`), or a cached file that is gone, are written
    /// again; every other subtree id is the base's.
    pub(super) fn write_trees(&self, capture: &Capture, cache: Option<&StatCache>) -> Result<ObjectId, CkptError> {
        let files: Vec<(&RepoPath, TreeItem)> = capture.files.iter().map(|(path, file)| (path, file.item)).collect();
        let base_tree = cache
            .and_then(|cache| cache.checkpoint)
            .and_then(|checkpoint| self.vault.read_commit(&checkpoint).ok())
            .map(|info| info.tree);
        let (Some(cache), Some(base_tree)) = (cache, base_tree) else {
            return treebuild::build_trees(&self.vault, &files, None);
        };
        let mut changed = HashSet::new();
        for (path, file) in capture.files.iter() {
            if !file.cached {
                treebuild::mark_parents_changed(&mut changed, path.as_bytes());
            }
        }
        // Both lists are in path order: one merge pass finds the cached files that are gone.
        let mut captured = capture.files.keys().map(RepoPath::as_bytes).peekable();
        for path in cache.paths() {
            while captured.next_if(|p| *p < path).is_some() {}
            if captured.peek() != Some(&path) {
                treebuild::mark_parents_changed(&mut changed, path);
            }
        }
        let base = treebuild::Base {
            tree: base_tree,
            changed_dirs: &changed,
        };
        // The base is only an accelerator: one whose trees cannot be read back (damaged since)
        // must not stop every later snapshot, so the trees are then built from the capture alone.
        treebuild::build_trees(&self.vault, &files, Some(&base))
            .or_else(|_| treebuild::build_trees(&self.vault, &files, None))
    }

    /// The snapshot transaction; the caller holds the workspace lock. All or nothing: the record
    /// is the last step, and a failure to save it removes the ref it just pinned. Taken a second
    /// time when a gc running beside it removed a stored object it relied on before its pin
    /// existed: that object is missing then, so the second one stores it itself.
    pub(super) fn snapshot_locked(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
    ) -> Result<(SnapshotOutcome, Capture), CkptError> {
        match self.snapshot_locked_once(registry, lock, request) {
            Err(CkptError::Verb(collected @ VerbError::CollectedBeforePin { .. })) => {
                let (mut outcome, capture) = self.snapshot_locked_once(registry, lock, request)?;
                outcome.warnings.push(format!("{collected}; it was taken again"));
                Ok((outcome, capture))
            }
            done => done,
        }
    }

    fn snapshot_locked_once(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
    ) -> Result<(SnapshotOutcome, Capture), CkptError> {
        let _keeps = self.vault.pack_keeps_released_on_return();
        let t0 = std::time::Instant::now();
        self.sweep_killed_writes();
        // The previous checkpoint is the newest one still pinned: an unpinned record's objects
        // may already be collected, so nothing may be built on it.
        let (previous, mut reconciled) = self.footing(registry)?;
        self.phase_time("registry + refs", t0);
        let head = self.checkpoint_parent()?;
        let started = std::time::Instant::now();
        let cache = self.trusted_stat_cache(registry);
        self.phase_time("stat cache load", started);
        let scan_mode = ScanMode::Full { fallback: None };
        // Every object this snapshot adds goes into kept packs, its commit too (see
        // [`crate::verbs::Vault::begin_batch`]): none is ever loose for a `git prune` to take
        // before the pin exists. A copy store keeps loose objects: only its own gc collects.
        let _batch = (self.kind == StoreKind::Repository).then(|| self.vault.begin_batch(PackCompression::Fastest));
        let capture = scan::capture(
            &self.vault,
            request.max_file_size,
            BlobSink::Store,
            cache.as_ref(),
            self.reporter.progress(),
        )?;
        self.capture_time("capture", started, &capture);
        crate::fault::point("snapshot:after-blobs");
        let t1 = std::time::Instant::now();
        let tree = match self.unchanged_since_cache(&capture, cache.as_ref(), previous.as_ref()) {
            Some(tree) => tree,
            None => self.write_trees(&capture, cache.as_ref())?,
        };
        self.phase_time("trees", t1);
        // Only its size and checkpoint matter from here on; the entries go (memory at 200k files).
        let loaded = cache.as_ref().map(|cache| (cache.len(), cache.checkpoint));
        drop(cache);
        let warnings = capture.warnings.clone();

        // Only the newest checkpoint stands for an unchanged state: an older one with the same
        // tree may be a guard, or another session's, which the caller did not ask for.
        let same_state = previous.clone().filter(|p| p.tree_id().ok() == Some(tree));
        if let Some(same) = same_state {
            let outcome = SnapshotOutcome {
                record: same,
                created: false,
                not_protected: skipped_of(&capture),
                warnings,
                scan_mode,
                scan: capture.stats,
            };
            let t2 = std::time::Instant::now();
            self.save_stat_cache(registry, lock, &capture, &outcome.record, loaded);
            self.phase_time("stat cache save", t2);
            return Ok((outcome, capture));
        }

        // `files` counts paths that differ from the previous checkpoint (or, for the first one,
        // from HEAD). A previous checkpoint whose tree cannot be read (tampered, corrupt) is not
        // built on: it is named in a warning and the count falls back to HEAD.
        let head_tree = match head {
            Some(head) => Some(self.vault.read_commit(&head)?.tree),
            None => None,
        };
        let mut warnings = warnings;
        let t3 = std::time::Instant::now();
        let changes = match previous.as_ref().map(|p| (p, p.tree_id())) {
            Some((previous, Ok(base))) => match self.vault.diff_trees(Some(&base), Some(&tree)) {
                Ok(changes) => changes,
                Err(e) => {
                    warnings.push(format!(
                        "checkpoint {} cannot be read ({e}); counting changes against HEAD instead. `ckpt doctor --fix` sets it aside",
                        previous.short()
                    ));
                    self.vault.diff_trees_counting(head_tree.as_ref(), Some(&tree))?
                }
            },
            _ => self.vault.diff_trees_counting(head_tree.as_ref(), Some(&tree))?,
        };
        self.phase_time("diff against the previous checkpoint", t3);
        // New bytes: content this snapshot added to the object store. What a checkpoint, HEAD or
        // any other commit already held costs nothing more, so the quota measures what ckpt keeps.
        let mut counted: HashSet<ObjectId> = HashSet::new();
        let bytes: u64 = capture
            .files
            .values()
            .filter(|f| f.fresh && counted.insert(f.item.id))
            .map(|f| f.size)
            .sum();
        let counts = Counts {
            files: changes.len() as u64,
            total_files: capture.files.len() as u64,
            bytes,
        };
        let record = self.publish(
            registry,
            lock,
            reconciled.as_mut(),
            request,
            (tree, head),
            counts,
            (skipped_of(&capture), narrow_modes_of(capture.files.iter())),
        )?;
        let t5 = std::time::Instant::now();
        self.save_stat_cache(registry, lock, &capture, &record, loaded);
        self.phase_time("stat cache save", t5);
        Ok((
            SnapshotOutcome {
                not_protected: record.skipped.clone(),
                record,
                created: true,
                warnings,
                scan_mode,
                scan: capture.stats,
            },
            capture,
        ))
    }

    /// The parent a new checkpoint commit gets: the user's HEAD. A private store has no
    /// history of its own, so copy checkpoints have none.
    pub(super) fn checkpoint_parent(&self) -> Result<Option<ObjectId>, CkptError> {
        Ok(match self.kind {
            StoreKind::Repository => self.vault.head_commit()?,
            StoreKind::Private => None,
        })
    }

    /// Commits `tree` (with `head` as parent), pins the commit and appends its record to
    /// `reconciled.records` and the registry (with any record the reconciliation rebuilt;
    /// `None` when the snapshot stood on the newest record alone, see [`Engine::footing`]).
    /// The pin is the commit point; a failure to save the record
    /// removes the pin again, so nothing is published half-way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn publish(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        reconciled: Option<&mut Reconciled>,
        request: &SnapshotRequest,
        (tree, head): (ObjectId, Option<ObjectId>),
        counts: Counts,
        (skipped, narrow_modes): (Vec<Skipped>, Vec<NarrowMode>),
    ) -> Result<Record, CkptError> {
        let (unix, time) = now_rfc3339();
        let trailers = Trailers {
            workspace_key: self.workspace.as_str().to_owned(),
            session: request.session.clone(),
            turn: request.turn,
            step: request.step,
            trigger: request.trigger.clone(),
            kind: request.kind,
            time,
            files: counts.files,
            total_files: counts.total_files,
            bytes: counts.bytes,
            skipped,
            narrow_modes,
        };
        let started = std::time::Instant::now();
        crate::fault::pause("snapshot:before-commit");
        // The commit goes into the open batch's last pack; a checkpoint that wrote nothing else
        // (the same tree, new labels) gets a batch of its own.
        let _own_batch = (self.kind == StoreKind::Repository && !self.vault.batch_open())
            .then(|| self.vault.begin_batch(PackCompression::Fastest));
        let commit = self
            .vault
            .write_commit(&tree, head.as_ref(), &trailers.format(), unix)?;
        self.finish_open_batch("objects written", registry, lock)?;
        crate::fault::point("snapshot:after-commit");
        crate::fault::pause("snapshot:before-pin");
        let pin = PinRef::for_checkpoint(&self.workspace, &commit);
        self.vault.pin(&pin, &commit, None)?;
        crate::fault::point("snapshot:after-pin");

        let record = trailers.into_record(self.name(), commit.to_hex(), tree.to_hex(), self.workspace_path());
        let saving = std::time::Instant::now();
        if let Err(error) = self.record_checkpoint(registry, lock, &record, reconciled) {
            self.vault.unpin(&pin, &commit).ok();
            return Err(error);
        }
        self.phase_time("record saved", saving);
        self.phase_time("commit, pin and record", started);
        // Past the inline limit (no daemon kept up), packs are merged here, once the pin covers
        // the newest: until then its keep file holds it out of every merge.
        self.merge_ckpt_packs(registry, lock, None, super::MAX_CKPT_PACKS_INLINE, false);
        self.pack_pins_past_limit();
        Ok(record)
    }

    /// Adds `record`, whose pin was just made, to the registry. With the records reconciled
    /// before the pin (`reconciled`), the ones rebuilt from pins go in with it. Without them, it
    /// is one appended line when the registry's log takes it; otherwise (a small registry, or a
    /// log due to be folded in) every record is read and reconciled now, so a record a killed
    /// snapshot never stored is stored at the latest then.
    fn record_checkpoint(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        record: &Record,
        reconciled: Option<&mut Reconciled>,
    ) -> Result<(), CkptError> {
        let mut read_now;
        // Read here because the log could not take it: everything goes into records.json.
        let appendable = reconciled.is_some();
        let reconciled = match reconciled {
            Some(reconciled) => reconciled,
            None => {
                if registry.append(std::slice::from_ref(record), lock)? {
                    return Ok(());
                }
                read_now = self.reconcile(registry.load()?)?;
                // Its pin exists already: it is the record being added, not one to rebuild.
                read_now.records.retain(|r| r.id != record.id);
                read_now.rebuilt.retain(|id| *id != record.id);
                &mut read_now
            }
        };
        // Records the reconciliation rebuilt from pins are not in the registry yet: they are
        // added with this one.
        let mut added: Vec<Record> = reconciled
            .records
            .iter()
            .filter(|r| reconciled.rebuilt.contains(&r.id))
            .cloned()
            .collect();
        added.push(record.clone());
        reconciled.records.push(record.clone());
        if appendable {
            registry.add(&reconciled.records, &added, lock)?;
        } else {
            registry.save(&reconciled.records, lock)?;
        }
        reconciled.rebuilt.clear();
        Ok(())
    }

    /// Moves this workspace's loose pins into `packed-refs` once there are
    /// [`super::max_loose_pins`] of them, so the user's git reads one file for them, not one
    /// each. Only costs speed when it cannot be done (a `git pack-refs` holding the lock, say):
    /// the next snapshot tries again, and the checkpoint is pinned either way.
    fn pack_pins_past_limit(&self) {
        let started = std::time::Instant::now();
        match self.vault.pack_pins(&self.workspace, super::max_loose_pins()) {
            Ok(0) => {}
            Ok(packed) => self
                .reporter
                .timing(&format!("packed {packed} pins"), started, String::new),
            Err(e) => self.reporter.timing("packing pins failed", started, || e.to_string()),
        }
    }

    /// The stat cache, if it refers to a checkpoint that is still pinned (so every object it
    /// names is still in the object database). Anything else means starting afresh.
    pub(super) fn trusted_stat_cache(&self, registry: &Registry) -> Option<StatCache> {
        self.pinned_stat_cache(StatCache::load(registry.dir())?)
    }

    /// [`Self::trusted_stat_cache`] as far as it answers for `scope` (see
    /// [`StatCache::load_within`]): for a capture of that scope only.
    pub(super) fn trusted_stat_cache_within(&self, registry: &Registry, scope: &PathScope) -> Option<StatCache> {
        self.pinned_stat_cache(StatCache::load_within(registry.dir(), scope)?)
    }

    fn pinned_stat_cache(&self, cache: StatCache) -> Option<StatCache> {
        let checkpoint = cache.checkpoint?;
        let pin = PinRef::for_checkpoint(&self.workspace, &checkpoint);
        (self.vault.read_pin(&pin).ok()? == Some(checkpoint)).then_some(cache)
    }

    /// When every captured file is the cached checkpoint's own (by stat, or read back to the same
    /// id and kind) and the set of paths is the cache's own, the worktree is exactly that
    /// checkpoint: its tree is reused without hashing a single tree object. Submodule pointers
    /// come from the index, so their presence disables it.
    /// Only when the cache's checkpoint is `previous`, the newest usable one (its commit read
    /// and found to hold its record's tree): a commit object that reads as another's (a
    /// `git replace`, an object file overwritten) gave its tree to every snapshot after it.
    pub(super) fn unchanged_since_cache(
        &self,
        capture: &Capture,
        cache: Option<&StatCache>,
        previous: Option<&Record>,
    ) -> Option<ObjectId> {
        let cache = cache?;
        let previous = previous?;
        if cache.checkpoint? != previous.object_id().ok()? {
            return None;
        }
        // Every file is the checkpoint's own and none of its files is missing.
        let only_cached_files = capture.files.values().all(|f| f.cached) && capture.files.len() == cache.len();
        if !only_cached_files {
            return None;
        }
        previous.tree_id().ok()
    }

    /// Best effort: a cache that cannot be written only costs speed next time. When every file
    /// came from the loaded cache (`loaded`: its length and checkpoint) for the same checkpoint,
    /// the file on disk already says it all.
    pub(super) fn save_stat_cache(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        capture: &Capture,
        record: &Record,
        loaded: Option<(usize, Option<ObjectId>)>,
    ) {
        let checkpoint = record.object_id().ok();
        let all_cached = capture.stats.read == 0 && capture.stats.from_index == 0;
        if let Some((loaded_len, loaded_checkpoint)) = loaded {
            let same_paths = loaded_len == capture.files.values().filter(|f| f.stat.is_some()).count();
            if all_cached && same_paths && loaded_checkpoint == checkpoint {
                return;
            }
        }
        if let Err(e) = StatCache::save_entries(registry.dir(), lock, checkpoint, capture.stat_entries()) {
            self.reporter.warning(&format!("could not write the stat cache: {e}"));
        }
    }
}
