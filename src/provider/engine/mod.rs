//! The checkpoint engine, one code path over two stores: the user's own repository (the git
//! provider: each checkpoint a commit pinned by `refs/ckpt/<workspace>/<id>`) and a private
//! store outside the workspace (the copy provider, opened in `provider/copy.rs`). Snapshot,
//! restore and inspection live in their own files. The user's index, HEAD, branches, reflogs,
//! config and hooks are never written: all repository access goes through `crate::verbs`, and
//! only `refs/ckpt/` is ever edited.

mod health;
mod inspect;
mod materialize;
pub use materialize::Materialized;
mod restore;
mod snapshot;
mod watched;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::provider::report::Reporter;
use crate::provider::scan::Capture;
use crate::provider::{
    CkptError, Confirmation, Preview, Provider, RestoreReport, Selection, SnapshotOutcome, SnapshotRequest,
};
use crate::records::{CkptPack, Record, Registry, RegistryLock, StoreLock, Trailers, WirePath};
use crate::verbs::{FileCounts, ObjectId, PackCompression, PinNames, PinRef, RepoPath, TreeItem, Vault, WorkspaceKey};

/// The registry checked against the refs.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Stored records plus rebuilt ones, oldest first.
    pub records: Vec<Record>,
    /// Ids rebuilt from pinned commits the registry lacked.
    pub rebuilt: Vec<String>,
    /// Ids of records whose pin ref is missing.
    pub unpinned: Vec<String>,
    /// Pins that could not be turned into a record, with why.
    pub unreadable_pins: Vec<(String, String)>,
    /// Names under refs/ckpt/ that are not valid pins.
    pub foreign_refs: Vec<String>,
    /// Pinned records that nothing may be built on, newest first, with why: the newest ones
    /// whose commit is unreadable or holds another tree than the record says (only records
    /// newer than the newest usable one are looked at).
    pub unusable: Vec<(String, String)>,
}

impl Reconciled {
    /// The newest record a snapshot may build on or answer with: pinned, and not unusable.
    pub fn newest_usable(&self) -> Option<&Record> {
        self.records
            .iter()
            .rev()
            .find(|r| !self.unpinned.contains(&r.id) && !self.unusable.iter().any(|(id, _)| *id == r.id))
    }
}

/// Where a provider's checkpoints live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The user's own repository (the git provider).
    Repository,
    /// A private store outside the workspace (the copy provider).
    Private,
}

/// The git provider, and — over a private store — the copy provider: both run the same
/// snapshot, plan, restore and verify code through the same verbs.
pub struct Engine {
    pub(in crate::provider) reporter: Reporter,
    pub(in crate::provider) vault: Vault,
    pub(in crate::provider) workdir: PathBuf,
    pub(in crate::provider) workspace: WorkspaceKey,
    /// This workspace's registry, stat cache, journal and lock.
    pub(in crate::provider) state_dir: PathBuf,
    /// The directory holding the state dirs of every workspace sharing this store (`list --all`).
    pub(in crate::provider) state_root: PathBuf,
    pub(in crate::provider) kind: StoreKind,
    /// Held (shared) while this process may write into a copy store, so `ckpt gc` waits.
    pub(in crate::provider) _store_lock: Option<StoreLock>,
}

fn now_rfc3339() -> (i64, String) {
    let now = chrono::Utc::now();
    (
        now.timestamp(),
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// Loose pins a workspace keeps before they are moved into `packed-refs` (`CKPT_MAX_LOOSE_PINS`
/// overrides it): few enough that the user's `for-each-ref` barely notices them, many enough
/// that the rewrite of `packed-refs` is rare.
pub(super) fn max_loose_pins() -> usize {
    std::env::var("CKPT_MAX_LOOSE_PINS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}

/// More packs of this workspace's own than this, and the watch daemon merges them when the
/// worktree is quiet.
pub const MAX_CKPT_PACKS: usize = 8;
/// More than this, and the snapshot that wrote the last one merges them (no daemon kept up).
const MAX_CKPT_PACKS_INLINE: usize = 24;
/// A keep file ckpt wrote that is older than this was left by a ckpt that was killed before its
/// pin ([`crate::verbs::Vault::remove_stale_pack_keeps`]).
const STALE_PACK_KEEP: std::time::Duration = std::time::Duration::from_secs(600);
/// A lock file of one of this workspace's pins older than this was left by a killed update
/// (git and ckpt hold one for milliseconds); found under the workspace lock, it is removed.
const STALE_PIN_LOCK: std::time::Duration = std::time::Duration::from_secs(60);
/// How many of the largest packs a merge leaves as they are.
const KEPT_LARGEST_PACKS: usize = 3;

impl Engine {
    /// Writes what the open object batch (if any) still holds and reports it, as `phase`. The
    /// packs it wrote join this workspace's list of packs ([`Self::merge_ckpt_packs`]).
    fn finish_open_batch(&self, phase: &str, registry: &Registry, lock: &RegistryLock) -> Result<(), CkptError> {
        if !self.vault.batch_open() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let written = self.vault.finish_open_batch()?;
        self.reporter.timing(phase, started, || {
            format!("{} in {} pack(s)", written.objects, written.packs.len())
        });
        for (name, compression) in written.packs {
            let pack = CkptPack {
                name,
                uncompressed: compression == PackCompression::Stored,
            };
            // Listed now, merged (if due) only once a pin covers it: until then it is kept
            // from git's repack, and a merge leaves kept packs alone.
            self.merge_ckpt_packs(registry, lock, Some(pack), usize::MAX, false);
        }
        Ok(())
    }

    /// Adds `new` (if any) to this workspace's packs and, past `more_than`, merges all but the
    /// largest into one: a pack per watched snapshot would otherwise pile up until the user's
    /// next `git commit` runs git's automatic gc (50 packs by default), which repacks the
    /// repository. The watch daemon does it when the worktree is quiet ([`MAX_CKPT_PACKS`]); a
    /// snapshot only past [`MAX_CKPT_PACKS_INLINE`], when no daemon kept up. An uncompressed
    /// pack is never kept as one of the largest, and with `compress` (the daemon, when quiet) it
    /// is compressed even when no merge is due: left as it is, git's own repack would copy its
    /// objects uncompressed into the user's packs. Best effort: the new objects are safe in their
    /// own pack whatever happens here, so a failure is only a warning. What was merged, if
    /// anything.
    fn merge_ckpt_packs(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        new: Option<CkptPack>,
        more_than: usize,
        compress: bool,
    ) -> Option<String> {
        let started = std::time::Instant::now();
        let listed = registry.ckpt_packs();
        let mut packs = listed.clone();
        packs.extend(new);
        let names: Vec<ObjectId> = packs.iter().map(|pack| pack.name).collect();
        // Only packs that are still there count (git's own repack may have merged some).
        let mut sized: Vec<(CkptPack, u64)> = packs
            .iter()
            .zip(self.vault.pack_sizes(&names))
            .filter_map(|(pack, (_, size))| Some((*pack, size?)))
            .collect();
        let (merge, at_least): (Vec<ObjectId>, usize) = if sized.len() > more_than {
            // All but the largest few compressed ones: a pack is merged again only when enough
            // smaller ones have come after it, so the copying stays proportional to what was
            // written.
            sized.sort_by_key(|(pack, size)| (!pack.uncompressed, *size));
            let compressed = sized.iter().filter(|(pack, _)| !pack.uncompressed).count();
            let keep = KEPT_LARGEST_PACKS.min(compressed).min(sized.len().saturating_sub(2));
            let merge = sized[..sized.len() - keep].iter().map(|(pack, _)| pack.name).collect();
            (merge, 2)
        } else if compress {
            let uncompressed = sized.iter().filter(|(pack, _)| pack.uncompressed);
            (uncompressed.map(|(pack, _)| pack.name).collect(), 1)
        } else {
            (Vec::new(), 2)
        };
        let mut done = None;
        if !merge.is_empty() {
            match self.vault.merge_packs(&merge, at_least) {
                Ok(outcome) => {
                    sized.retain(|(pack, _)| !outcome.not_ckpts.contains(&pack.name));
                    if let (Some(merged_into), merged) = (outcome.into, outcome.merged) {
                        sized.retain(|(pack, _)| !merged.contains(&pack.name));
                        let pack = CkptPack {
                            name: merged_into,
                            uncompressed: false,
                        };
                        sized.push((pack, 0));
                        let what = if merged.is_empty() {
                            format!("packs copied into {}, kept while a git gc runs", merged_into.short(8))
                        } else {
                            format!("{} packs into {}", merged.len(), merged_into.short(8))
                        };
                        self.reporter.timing("merging ckpt's packs", started, || what.clone());
                        done = Some(what);
                    }
                    // A listed pack that is git's is dropped from the list above; one the merge
                    // left alone otherwise (it could not be read) is not asked for again.
                    for (pack, _) in sized.iter_mut().filter(|(pack, _)| merge.contains(&pack.name)) {
                        pack.uncompressed = false;
                    }
                }
                Err(e) => self.reporter.warning(&format!("could not merge ckpt's packs: {e}")),
            }
        }
        let packs: Vec<CkptPack> = sized.into_iter().map(|(pack, _)| pack).collect();
        if packs != listed {
            if let Err(e) = registry.save_ckpt_packs(&packs, lock) {
                self.reporter
                    .warning(&format!("could not save the list of ckpt's packs: {e}"));
            }
        }
        done
    }

    /// Removes what killed snapshots left in the object database: their keep files (past
    /// [`STALE_PACK_KEEP`]: under the workspace lock, no snapshot of this workspace is between
    /// its pack and its pin, and another one's holds its keep file for moments, not minutes),
    /// the temp files of their pack writes, and the lock files a killed pin update (a prune's
    /// removals, say) left on this workspace's pins. Called under the workspace lock, once per
    /// walking snapshot before it writes anything (so one that then fails still cleans up),
    /// and by the watch daemon when the worktree is quiet (watched snapshots, the hot path,
    /// leave it to the daemon).
    pub(super) fn sweep_killed_writes(&self) {
        self.vault.remove_stale_pack_keeps(STALE_PACK_KEEP);
        self.vault.remove_stale_pin_locks(&self.workspace, STALE_PIN_LOCK);
        for temp in self.vault.stale_pack_temps(health::STALE_PACK_TEMP_AGE) {
            self.vault
                .remove_stale_pack_temp(&temp.name, health::STALE_PACK_TEMP_AGE)
                .ok();
        }
    }

    /// Says (when timings are wanted) how long the phase begun at `started` took.
    fn phase_time(&self, phase: &str, started: std::time::Instant) {
        self.reporter.timing(phase, started, String::new);
    }

    /// [`Self::phase_time`] for a capture: how it was served, and how long listing took.
    fn capture_time(&self, phase: &str, started: std::time::Instant, capture: &Capture) {
        for (listing_phase, elapsed) in &capture.listing_times {
            self.reporter.timing_of(listing_phase, *elapsed);
        }
        self.reporter.timing(phase, started, || {
            format!(
                "{} from stat cache, {} from index, {} read",
                capture.stats.from_cache, capture.stats.from_index, capture.stats.read
            )
        });
    }

    pub fn open(dir: &Path, reporter: Reporter) -> Result<Self, CkptError> {
        let Some(mut vault) = Vault::discover(dir)? else {
            return Err(CkptError::NoProvider(format!(
                "{} is not inside a git repository with a worktree (use --provider copy or auto)",
                dir.display()
            )));
        };
        let workdir = vault.workdir().canonicalize().map_err(|source| CkptError::Io {
            path: vault.workdir().to_path_buf(),
            source,
        })?;
        let state_root = vault.common_dir().join("ckpt");
        let workspace = Self::workspace_of(&vault, &state_root)?;
        // A copy store inside this worktree (a home directory kept in git) is ckpt's, not the
        // user's: never captured, never restored over.
        if let Ok(home) = crate::records::home::ckpt_home() {
            vault.reserve(&home);
        }
        Ok(Engine {
            reporter,
            vault,
            workdir,
            state_dir: state_root.join(workspace.as_str()),
            workspace,
            state_root,
            kind: StoreKind::Repository,
            _store_lock: None,
        })
    }

    /// The key this worktree's checkpoints live under. A linked worktree gets a mark of its own
    /// the first time ckpt sees it, so a worktree re-added at the same name never inherits the
    /// checkpoints of the one removed before it (a restore would write the other branch's files
    /// and delete this one's). Checkpoints taken under the plain name before worktrees were
    /// marked stay this worktree's only when every one of them is younger than the worktree.
    fn workspace_of(vault: &Vault, state_root: &Path) -> Result<crate::verbs::WorkspaceKey, CkptError> {
        let added = match vault.worktree_identity()? {
            None => return Ok(vault.workspace_key(None)?),
            Some(crate::verbs::WorktreeIdentity::Marked(mark)) => return Ok(vault.workspace_key(Some(&mark))?),
            Some(crate::verbs::WorktreeIdentity::Unmarked { added }) => added,
        };
        let legacy = vault.workspace_key(None)?;
        let legacy_records = match Registry::open_existing(&state_root.join(legacy.as_str())) {
            Ok(Some(registry)) => registry.load().unwrap_or_default(),
            _ => Vec::new(),
        };
        let added_secs = added
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64);
        let all_younger = added_secs.is_some_and(|added| {
            legacy_records
                .iter()
                .all(|r| r.unix_time().is_ok_and(|time| time + 1 >= added))
        });
        let mark = if !legacy_records.is_empty() && all_younger {
            crate::verbs::LEGACY_MARK.to_owned()
        } else {
            let mut random = [0u8; 6];
            getrandom::fill(&mut random).map_err(|e| CkptError::Io {
                path: vault.workdir().to_path_buf(),
                source: std::io::Error::other(format!("no random bytes for the worktree's mark: {e}")),
            })?;
            random.iter().map(|b| format!("{b:02x}")).collect()
        };
        // A worktree ckpt may not mark is refused, never served under a key of this run alone:
        // what a snapshot took under it could never be listed again.
        let mark = vault.mark_worktree(&mark)?;
        Ok(vault.workspace_key(Some(&mark))?)
    }

    /// Whether HEAD has no commit yet (a new repository, or an orphan branch an agent checked
    /// out): a checkpoint commit then has no parent.
    pub fn head_is_unborn(&self) -> Result<bool, CkptError> {
        Ok(self.vault.head_commit()?.is_none())
    }

    /// Whether this workspace has git checkpoints: a registry, or a pin a killed snapshot left
    /// before its record. Read-only.
    pub fn has_checkpoints(&self) -> Result<bool, CkptError> {
        if !self.stored_records()?.is_empty() {
            return Ok(true);
        }
        let (pins, _) = self.vault.list_pin_names()?;
        Ok(pins.iter().any(|(pin, _)| pin.workspace() == self.workspace))
    }

    fn registry(&self) -> Result<Registry, CkptError> {
        let registry = Registry::open(&self.state_dir)?;
        // Made with the umask's mode; a repository's sharing rule decides who may enter them.
        if self.kind == StoreKind::Repository {
            self.vault
                .share_state_dirs(&[self.state_root.clone(), self.state_dir.clone()]);
        }
        Ok(registry)
    }

    fn workspace_path(&self) -> WirePath {
        WirePath::from_bytes(self.workdir.as_os_str().as_encoded_bytes())
    }

    /// The registry as stored, without creating anything.
    fn stored_records(&self) -> Result<Vec<Record>, CkptError> {
        match Registry::open_existing(&self.state_dir)? {
            Some(registry) => Ok(registry.load()?),
            None => Ok(Vec::new()),
        }
    }

    /// The registry reconciled with this workspace's refs: a pinned checkpoint the registry
    /// lacks (a process killed between pin and record) is rebuilt from its commit's trailers.
    fn records(&self) -> Result<Vec<Record>, CkptError> {
        Ok(self.reconcile(self.stored_records()?)?.records)
    }

    /// The registry reconciled with this workspace's pins, taken by name: a loose pin's file is
    /// read only for a checkpoint the registry lacks (before its commit rebuilds a record) and
    /// for the newest pinned record, the one a snapshot builds on or answers with, which must
    /// be pinned at exactly its commit. Every other use of a checkpoint reads its pin first
    /// ([`Self::pinned_tree_id`]); `doctor` reads them all ([`Self::reconcile_every_pin`]).
    pub fn reconcile(&self, records: Vec<Record>) -> Result<Reconciled, CkptError> {
        let listing = self.vault.list_pin_names()?;
        self.reconcile_with(records, listing)
    }

    /// What a snapshot builds on: the newest checkpoint it may stand on, and every record
    /// reconciled with the pins when they had to be read for it. When the registry's append log
    /// holds the newest record and it stands (its pin at exactly its commit, the commit holding
    /// its tree: what [`Self::reconcile`] asks of the newest), that is all that is read, so a
    /// snapshot's cost does not grow with the history. Otherwise (and when a loose pin was
    /// written after the log, as a snapshot killed before its record leaves one) every record
    /// and pin is read, and the record a killed snapshot never stored is stored with the next.
    pub(super) fn footing(&self, registry: &Registry) -> Result<(Option<Record>, Option<Reconciled>), CkptError> {
        if let Some((newest, written)) = registry.newest_appended() {
            if !self.vault.loose_pin_written_after(&self.workspace, written) && self.stands(&newest) {
                return Ok((Some(newest), None));
            }
        }
        let reconciled = self.reconcile(registry.load()?)?;
        Ok((reconciled.newest_usable().cloned(), Some(reconciled)))
    }

    /// Whether `record` is pinned at exactly its commit, and that commit holds its tree.
    fn stands(&self, record: &Record) -> bool {
        let Ok(id) = record.object_id() else { return false };
        let pin = PinRef::for_checkpoint(&self.workspace, &id);
        matches!(self.vault.read_pin(&pin), Ok(Some(target)) if target == id)
            && self
                .vault
                .read_commit(&id)
                .is_ok_and(|commit| commit.tree.to_hex() == record.tree)
    }

    /// [`Self::reconcile`], with every pin's target read and checked.
    pub fn reconcile_every_pin(&self, records: Vec<Record>) -> Result<Reconciled, CkptError> {
        let (pins, foreign, unreadable) = self.vault.list_pins()?;
        let pins = pins.into_iter().map(|(pin, target)| (pin, Some(target))).collect();
        let mut reconciled = self.reconcile_with(records, (pins, foreign))?;
        reconciled.unreadable_pins.extend(
            unreadable
                .into_iter()
                .map(|why| ("a ref under refs/ckpt/".to_owned(), why)),
        );
        Ok(reconciled)
    }

    fn reconcile_with(&self, mut records: Vec<Record>, (pins, foreign): PinNames) -> Result<Reconciled, CkptError> {
        let known: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
        let mut pinned: HashSet<String> = HashSet::new();
        // Pinned by a name whose file was not read.
        let mut unread: HashSet<String> = HashSet::new();
        let mut out = Reconciled {
            foreign_refs: foreign,
            ..Reconciled::default()
        };
        for (pin, target) in pins {
            if pin.workspace() != self.workspace {
                continue;
            }
            let Some(id) = pin.checkpoint_id() else { continue };
            let is_known = known.contains(&id.to_hex());
            let target = match target {
                Some(target) => target,
                None if is_known => {
                    unread.insert(id.to_hex());
                    id
                }
                None => match self.vault.read_pin(&pin) {
                    Ok(Some(target)) => target,
                    // Removed since it was listed.
                    Ok(None) => continue,
                    Err(e) => {
                        out.unreadable_pins.push((pin.as_str().to_owned(), e.to_string()));
                        continue;
                    }
                },
            };
            if id != target {
                out.unreadable_pins
                    .push((pin.as_str().to_owned(), format!("points at {target}, not at {id}")));
                continue;
            }
            pinned.insert(id.to_hex());
            if is_known {
                continue;
            }
            match self.record_from_commit(&id) {
                Ok(record) => {
                    out.rebuilt.push(record.id.clone());
                    records.push(record);
                }
                Err(why) => out.unreadable_pins.push((pin.as_str().to_owned(), why)),
            }
        }
        records.sort_by(|a, b| a.time.cmp(&b.time));
        // The newest record a snapshot may stand on: pinned at exactly its commit, and that
        // commit there and holding the record's tree (a tampered `tree` field would be answered
        // as "nothing changed", and so make a guard that held nothing).
        for record in records.iter().rev() {
            if !pinned.contains(&record.id) {
                continue;
            }
            let Ok(id) = record.object_id() else { continue };
            if unread.contains(&record.id) {
                let pin = PinRef::for_checkpoint(&self.workspace, &id);
                let wrong = match self.vault.read_pin(&pin) {
                    Ok(Some(target)) if target == id => None,
                    Ok(Some(target)) => Some(format!("points at {target}, not at {id}")),
                    Ok(None) => Some("removed while it was read".to_owned()),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = wrong {
                    out.unreadable_pins.push((pin.as_str().to_owned(), why));
                    pinned.remove(&record.id);
                    continue;
                }
            }
            match self.vault.read_commit(&id) {
                Ok(info) if info.tree.to_hex() == record.tree => break,
                Ok(info) => out.unusable.push((
                    record.id.clone(),
                    format!(
                        "the record says tree {} but its commit has tree {}",
                        record.tree, info.tree
                    ),
                )),
                Err(e) => out.unusable.push((record.id.clone(), e.to_string())),
            }
        }
        out.unpinned = records
            .iter()
            .filter(|r| !pinned.contains(&r.id))
            .map(|r| r.id.clone())
            .collect();
        out.records = records;
        Ok(out)
    }

    fn record_from_commit(&self, id: &ObjectId) -> Result<Record, String> {
        let info = self.vault.read_commit(id).map_err(|e| e.to_string())?;
        let trailers = Trailers::parse(&info.message)?;
        if trailers.workspace_key != self.workspace.as_str() {
            return Err(format!("commit names workspace {:?}", trailers.workspace_key));
        }
        let record = trailers.into_record(self.name(), id.to_hex(), info.tree.to_hex(), self.workspace_path());
        record.validate()?;
        Ok(record)
    }

    /// Reads a checkpoint's tree, failing loudly if its objects are gone.
    fn checkpoint_tree(&self, record: &Record) -> Result<BTreeMap<RepoPath, TreeItem>, CkptError> {
        let tree = self.checkpoint_tree_id(record)?;
        Ok(self.vault.read_tree(&tree)?)
    }

    /// Checks that a record is pinned, matches its commit, and that every name in its tree is
    /// safe; returns the tree id. Runs before anything is written.
    fn checkpoint_tree_id(&self, record: &Record) -> Result<ObjectId, CkptError> {
        Ok(self.checkpoint_tree_counted(record)?.0)
    }

    /// [`Self::checkpoint_tree_id`], with the file count of every tree the validation read.
    fn checkpoint_tree_counted(&self, record: &Record) -> Result<(ObjectId, FileCounts), CkptError> {
        let tree = self.pinned_tree_id(record)?;
        let counts = self.vault.validate_tree(&tree)?;
        Ok((tree, counts))
    }

    /// The tree of a record that is pinned and matches its commit, without reading the tree:
    /// for reading only (a restore validates every name with [`Self::checkpoint_tree_id`]).
    fn pinned_tree_id(&self, record: &Record) -> Result<ObjectId, CkptError> {
        record.validate().map_err(CkptError::CorruptRecord)?;
        let commit = record
            .commit_id()
            .map_err(CkptError::CorruptRecord)?
            .ok_or_else(|| CkptError::CorruptRecord(format!("record {} names no commit", record.id)))?;
        let pin = PinRef::for_checkpoint(&self.workspace, &commit);
        if self.vault.read_pin(&pin)? != Some(commit) {
            return Err(CkptError::NotFound(format!(
                "checkpoint {} is not pinned at {} (pruned or tampered); refusing to use it (`ckpt doctor --fix` re-pins it if its commit is intact)",
                record.short(),
                pin.as_str()
            )));
        }
        let info = self.vault.read_commit(&commit)?;
        if info.tree.to_hex() != record.tree {
            return Err(CkptError::CorruptRecord(format!(
                "record {} says tree {} but its commit has tree {}",
                record.short(),
                record.tree,
                info.tree
            )));
        }
        Ok(info.tree)
    }
}

impl Provider for Engine {
    fn merge_own_packs(&self, more_than: usize) -> Result<Option<String>, CkptError> {
        if self.kind != StoreKind::Repository {
            return Ok(None);
        }
        // A workspace whose state is gone (removed with the worktree) has nothing to merge, and
        // opening it must not create that state again.
        let Some(registry) = Registry::open_existing(&self.state_dir)? else {
            return Ok(None);
        };
        // Never waits: a snapshot holding the lock may be waiting on the daemon that asks.
        let Some(lock) = registry.try_lock()? else {
            return Ok(None);
        };
        self.sweep_killed_writes();
        Ok(self.merge_ckpt_packs(&registry, &lock, None, more_than, true))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            StoreKind::Repository => "git",
            StoreKind::Private => "copy",
        }
    }

    fn workdir(&self) -> &Path {
        &self.workdir
    }

    fn watch_files(&self) -> crate::records::watch::WatchFiles {
        crate::records::watch::WatchFiles::new(&self.state_dir)
    }

    fn hook_positions(&self) -> crate::records::hooks::HookPositions {
        crate::records::hooks::HookPositions::new(&self.state_dir)
    }

    fn retention_file(&self) -> crate::records::retention::RetentionFile {
        crate::records::retention::RetentionFile::new(&self.state_dir)
    }

    fn own_dirs(&self) -> Vec<PathBuf> {
        self.vault.reserved_dirs()
    }

    fn repository_marker(&self) -> Option<PathBuf> {
        Some(self.vault.common_dir().join("HEAD"))
    }

    fn snapshot(&self, request: &SnapshotRequest) -> Result<SnapshotOutcome, CkptError> {
        Engine::snapshot(self, request)
    }

    fn diff(
        &self,
        from: &Record,
        to: Option<&Record>,
        paths: &[RepoPath],
        max_file_size: u64,
    ) -> Result<Vec<crate::provider::FileDiff>, CkptError> {
        Engine::diff(self, from, to, paths, max_file_size)
    }

    fn status(&self, max_file_size: u64) -> Result<crate::provider::StatusReport, CkptError> {
        Engine::status(self, max_file_size)
    }

    fn content_id(&self, bytes: &[u8]) -> Result<String, CkptError> {
        Ok(self.vault.blob_id(bytes)?.to_hex())
    }

    fn materialize(
        &self,
        now: &SnapshotRequest,
        request: &SnapshotRequest,
        files: &[(RepoPath, Vec<u8>)],
        named: &[RepoPath],
    ) -> Result<Materialized, CkptError> {
        Engine::materialize(self, now, request, files, named)
    }

    fn materialize_refusals(
        &self,
        max_file_size: u64,
        files: &[RepoPath],
        named: &[RepoPath],
    ) -> Result<Vec<(RepoPath, String)>, CkptError> {
        Engine::materialize_refusals(self, max_file_size, files, named)
    }

    fn file_at(&self, record: &Record, path: &RepoPath) -> Result<Option<Vec<u8>>, CkptError> {
        use crate::verbs::EntryKind;
        match self.item_at(&self.pinned_tree_id(record)?, path)? {
            Some(TreeItem {
                kind: EntryKind::File | EntryKind::Executable,
                id,
            }) => Ok(Some(self.vault.read_blob(&id)?)),
            _ => Ok(None),
        }
    }

    fn remove(&self, ids: &[String]) -> Result<Vec<String>, CkptError> {
        Engine::remove(self, ids)
    }

    fn audit(&self) -> Result<crate::provider::AuditReport, CkptError> {
        self.audit_report()
    }

    fn doctor(&self, fix: Option<crate::provider::JournalFix>) -> Result<crate::provider::DoctorReport, CkptError> {
        self.doctor_report(fix)
    }

    fn checkpoints(&self, all_workspaces: bool) -> Result<Vec<Record>, CkptError> {
        Engine::checkpoints(self, all_workspaces)
    }

    fn preview(&self, record: &Record, selection: &Selection, max_file_size: u64) -> Result<Preview, CkptError> {
        Engine::preview(self, record, selection, max_file_size)
    }

    fn restore(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError> {
        Engine::restore(self, record, selection, request, confirmation)
    }
}
