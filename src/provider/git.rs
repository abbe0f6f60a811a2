//! The git provider: each checkpoint is a commit in the repository's own object database whose
//! tree is the captured worktree, pinned by `refs/ckpt/<workspace>/<id>` and described by a
//! registry record. The user's index, HEAD, branches, reflogs, config and hooks are never written:
//! all repository access goes through `crate::verbs`, and only `refs/ckpt/` is ever edited.

mod health;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::provider::plan::{self, PlanInput};
use crate::provider::progress::Progress;
use crate::provider::scan::{self, BlobSink, Capture};
use crate::provider::treebuild;
use crate::provider::{
    CkptError, Confirmation, Preview, Provider, RestoreReport, Selection, SnapshotOutcome, SnapshotRequest,
};
use crate::records::statcache::StatCache;
use crate::records::{Record, Registry, RegistryLock, Skipped, StoreLock, Trailers, WirePath};
use crate::verbs::{EntryKind, ObjectId, PinRef, RepoPath, RestoreOp, TreeItem, Vault, WorkspaceKey};

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
pub struct GitProvider {
    progress: Progress,
    vault: Vault,
    workdir: PathBuf,
    workspace: WorkspaceKey,
    /// This workspace's registry, stat cache, journal and lock.
    state_dir: PathBuf,
    /// The directory holding the state dirs of every workspace sharing this store (`list --all`).
    state_root: PathBuf,
    kind: StoreKind,
    /// Held (shared) while this process may write into a copy store, so `ckpt gc` waits.
    _store_lock: Option<StoreLock>,
}

/// The copy provider's home: `$CKPT_HOME`, else `$XDG_DATA_HOME/ckpt`, else
/// `~/.local/share/ckpt`.
pub fn ckpt_home() -> Result<PathBuf, CkptError> {
    if let Some(home) = std::env::var_os("CKPT_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(data).join("ckpt"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/ckpt")),
        None => Err(CkptError::NoProvider(
            "the copy provider needs a place for its store: set CKPT_HOME (or HOME)".into(),
        )),
    }
}

/// `ckpt gc` for the copy store: with every workspace's lock held (so no snapshot can be
/// publishing objects meanwhile), removes loose objects no pin of any workspace reaches and that
/// are older than the grace period.
pub fn collect_copy_store_garbage(
    grace: std::time::Duration,
    dry_run: bool,
) -> Result<crate::verbs::GarbageReport, CkptError> {
    let home = ckpt_home()?;
    // First the whole store (waits for every running snapshot, and keeps new workspaces out),
    // then each workspace, in the same order snapshots take them.
    let store_lock = StoreLock::exclusive(&home)?;
    let mut locks = Vec::new();
    let mut git_dirs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(home.join("workspaces")) {
        for entry in entries.flatten() {
            let dir = entry.path();
            if WorkspaceKey::new(&entry.file_name().to_string_lossy()).is_err() || !dir.join("git").is_dir() {
                continue;
            }
            let registry = Registry::open(&dir.join("state"))?;
            locks.push(registry.lock()?);
            git_dirs.push(dir.join("git"));
        }
    }
    crate::fault::pause("gc:before-marking");
    let older_than = std::time::SystemTime::now() - grace;
    let report = crate::verbs::collect_private_garbage(&git_dirs, &home.join("objects"), older_than, dry_run)?;
    drop(locks);
    drop(store_lock);
    Ok(report)
}

/// Never captured by the copy provider unless `.ckptignore` re-includes them (`!dist/`).
pub const DEFAULT_EXCLUDES: [&str; 7] = [
    ".git/",
    "node_modules/",
    "target/",
    ".venv/",
    "__pycache__/",
    "dist/",
    "build/",
];

/// Where the copy provider keeps everything for the workspace `root`.
pub struct CopyLayout {
    pub home: PathBuf,
    pub key: WorkspaceKey,
    pub workspace_dir: PathBuf,
    pub git_dir: PathBuf,
    pub objects: PathBuf,
    pub excludes_file: PathBuf,
    pub state_dir: PathBuf,
}

impl CopyLayout {
    pub fn for_root(root: &Path) -> Result<CopyLayout, CkptError> {
        let home = ckpt_home()?;
        let key = crate::verbs::path_key(root)?;
        let workspace_dir = home.join("workspaces").join(key.as_str());
        Ok(CopyLayout {
            git_dir: workspace_dir.join("git"),
            objects: home.join("objects"),
            excludes_file: workspace_dir.join("exclude"),
            state_dir: workspace_dir.join("state"),
            workspace_dir,
            key,
            home,
        })
    }
}

fn phase_time(phase: &str, started: std::time::Instant) {
    if std::env::var_os("CKPT_TIMING").is_some() {
        eprintln!("ckpt: {phase}: {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
    }
}

/// With `CKPT_TIMING` set, says on stderr how long a phase took and how the capture was served.
fn timing(phase: &str, started: std::time::Instant, capture: &Capture) {
    if std::env::var_os("CKPT_TIMING").is_some() {
        eprintln!(
            "ckpt: {phase}: {:.1} ms ({} from stat cache, {} from index, {} read)",
            started.elapsed().as_secs_f64() * 1000.0,
            capture.stats.from_cache,
            capture.stats.from_index,
            capture.stats.read
        );
    }
}

fn now_rfc3339() -> (i64, String) {
    let now = chrono::Utc::now();
    (
        now.timestamp(),
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

impl GitProvider {
    pub fn open(dir: &Path, progress: Progress) -> Result<Self, CkptError> {
        let Some(mut vault) = Vault::discover(dir)? else {
            return Err(CkptError::NoProvider(format!(
                "{} is not inside a git repository with a worktree (use --provider copy or auto)",
                dir.display()
            )));
        };
        if vault.head_commit()?.is_none() {
            return Err(CkptError::NoProvider(format!(
                "the repository at {} has no commit yet (unborn HEAD); use --provider copy or auto",
                vault.workdir().display()
            )));
        }
        let workdir = vault.workdir().canonicalize().map_err(|source| CkptError::Io {
            path: vault.workdir().to_path_buf(),
            source,
        })?;
        let workspace = vault.workspace_key()?;
        let state_root = vault.common_dir().join("ckpt");
        // A copy store inside this worktree (a home directory kept in git) is ckpt's, not the
        // user's: never captured, never restored over.
        if let Ok(home) = ckpt_home() {
            vault.reserve(&home);
        }
        Ok(GitProvider {
            progress,
            vault,
            workdir,
            state_dir: state_root.join(workspace.as_str()),
            workspace,
            state_root,
            kind: StoreKind::Repository,
            _store_lock: None,
        })
    }

    /// The copy provider for the workspace containing `dir`: the enclosing repository's worktree
    /// if there is one (an unborn repository), else `dir` itself.
    pub fn open_copy(dir: &Path, progress: Progress, excludes: Option<&[String]>) -> Result<Self, CkptError> {
        let root = crate::verbs::enclosing_worktree(dir).unwrap_or_else(|| dir.to_path_buf());
        let root = root.canonicalize().map_err(|source| CkptError::Io {
            path: root.clone(),
            source,
        })?;
        let layout = CopyLayout::for_root(&root)?;
        let store_lock = StoreLock::shared(&layout.home)?;
        let mut excludes = match excludes {
            Some(patterns) => patterns.join("\n"),
            None => DEFAULT_EXCLUDES.join("\n"),
        };
        excludes.push('\n');
        // Within one excludes file the last match wins: git's own exclude files of an unborn
        // repository come after the defaults, and `.ckptignore` last so it can re-include.
        let mut sources = crate::verbs::enclosing_exclude_files(&root);
        sources.push(root.join(".ckptignore"));
        for source_path in sources {
            match std::fs::read(&source_path) {
                Ok(text) => {
                    excludes.push_str(&String::from_utf8_lossy(&text));
                    excludes.push('\n');
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CkptError::Io {
                        path: source_path,
                        source,
                    })
                }
            }
        }
        crate::records::write_state_file(&layout.excludes_file, excludes.as_bytes())?;
        crate::records::write_state_file(
            &layout.workspace_dir.join("workspace"),
            root.as_os_str().as_encoded_bytes(),
        )?;
        let mut vault = Vault::open_private(&crate::verbs::PrivateStore {
            git_dir: &layout.git_dir,
            objects: &layout.objects,
            excludes_file: &layout.excludes_file,
            workdir: &root,
        })?;
        // The store may sit inside the workspace (workspace = the home directory).
        vault.reserve(&layout.home);
        Ok(GitProvider {
            progress,
            vault,
            workdir: root,
            workspace: WorkspaceKey::new("copy")?,
            state_root: layout.workspace_dir.clone(),
            state_dir: layout.state_dir,
            kind: StoreKind::Private,
            _store_lock: Some(store_lock),
        })
    }

    fn registry(&self) -> Result<Registry, CkptError> {
        Ok(Registry::open(&self.state_dir)?)
    }

    fn workspace_path(&self) -> WirePath {
        WirePath::from_bytes(self.workdir.as_os_str().as_encoded_bytes())
    }

    /// The registry as stored, without creating anything.
    fn stored_records(&self) -> Result<Vec<Record>, CkptError> {
        match Registry::open_existing(&self.state_dir) {
            Some(registry) => Ok(registry.load()?),
            None => Ok(Vec::new()),
        }
    }

    /// The registry reconciled with this workspace's refs: a pinned checkpoint the registry
    /// lacks (a process killed between pin and record) is rebuilt from its commit's trailers.
    fn records(&self) -> Result<Vec<Record>, CkptError> {
        Ok(self.reconcile(self.stored_records()?)?.records)
    }

    pub fn reconcile(&self, mut records: Vec<Record>) -> Result<Reconciled, CkptError> {
        let (pins, foreign) = self.vault.list_pins()?;
        let known: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
        let mut pinned: HashSet<String> = HashSet::new();
        let mut out = Reconciled {
            foreign_refs: foreign,
            ..Reconciled::default()
        };
        for (pin, target) in pins {
            if pin.workspace() != self.workspace {
                continue;
            }
            let Some(id) = pin.checkpoint_id() else { continue };
            if id != target {
                out.unreadable_pins
                    .push((pin.as_str().to_owned(), format!("points at {target}, not at {id}")));
                continue;
            }
            pinned.insert(id.to_hex());
            if known.contains(&id.to_hex()) {
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
        out.unpinned = records
            .iter()
            .filter(|r| !pinned.contains(&r.id))
            .map(|r| r.id.clone())
            .collect();
        records.sort_by(|a, b| a.time.cmp(&b.time));
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

    /// Writes the capture's trees. With a stat cache (which names every file of its checkpoint),
    /// that checkpoint's tree is the base: only directories holding a file that is not the
    /// checkpoint's own (`CapturedFile::cached`), or a cached file that is gone, are written
    /// again; every other subtree id is the base's.
    fn write_trees(&self, capture: &Capture, cache: Option<&StatCache>) -> Result<ObjectId, CkptError> {
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
        treebuild::build_trees(&self.vault, &files, Some(&base))
    }

    /// The snapshot transaction; the caller holds the workspace lock. All or nothing: the record
    /// is the last step, and a failure to save it removes the ref it just pinned.
    fn snapshot_locked(
        &self,
        registry: &Registry,
        lock: &RegistryLock,
        request: &SnapshotRequest,
    ) -> Result<(SnapshotOutcome, Capture), CkptError> {
        let t0 = std::time::Instant::now();
        let reconciled = self.reconcile(registry.load()?)?;
        phase_time("registry + refs", t0);
        // The previous checkpoint is the newest one still pinned: an unpinned record's objects
        // may already be collected, so nothing may be built on it.
        let previous: Option<Record> = reconciled
            .records
            .iter()
            .rev()
            .find(|r| !reconciled.unpinned.contains(&r.id))
            .cloned();
        let mut records = reconciled.records;
        // A private store has no history of its own: copy checkpoints have no parent.
        let head = match self.kind {
            StoreKind::Repository => self.vault.head_commit()?,
            StoreKind::Private => None,
        };
        let started = std::time::Instant::now();
        let cache = self.trusted_stat_cache(registry);
        phase_time("stat cache load", started);
        let capture = scan::capture(
            &self.vault,
            request.max_file_size,
            BlobSink::Store,
            cache.as_ref(),
            &self.progress,
        )?;
        timing("capture", started, &capture);
        crate::fault::point("snapshot:after-blobs");
        let t1 = std::time::Instant::now();
        let tree = match self.unchanged_since_cache(&capture, cache.as_ref()) {
            Some(tree) => tree,
            None => self.write_trees(&capture, cache.as_ref())?,
        };
        phase_time("trees", t1);
        // Only its size and checkpoint matter from here on; the entries go (memory at 200k files).
        let loaded = cache.as_ref().map(|cache| (cache.len(), cache.checkpoint));
        drop(cache);
        let warnings = capture.warnings.clone();

        if let Some(previous) = &previous {
            if previous.tree_id().ok() == Some(tree) {
                let outcome = SnapshotOutcome {
                    record: previous.clone(),
                    created: false,
                    warnings,
                    scan: capture.stats,
                };
                let t2 = std::time::Instant::now();
                self.save_stat_cache(registry, lock, &capture, &outcome.record, loaded);
                phase_time("stat cache save", t2);
                return Ok((outcome, capture));
            }
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
                    self.vault.diff_trees(head_tree.as_ref(), Some(&tree))?
                }
            },
            _ => self.vault.diff_trees(head_tree.as_ref(), Some(&tree))?,
        };
        phase_time("diff against the previous checkpoint", t3);
        // New bytes: content this snapshot added to the object store. What a checkpoint, HEAD or
        // any other commit already held costs nothing more, so the quota measures what ckpt keeps.
        let mut counted: HashSet<ObjectId> = HashSet::new();
        let bytes: u64 = capture
            .files
            .values()
            .filter(|f| f.fresh && counted.insert(f.item.id))
            .map(|f| f.size)
            .sum();
        let files = changes.len() as u64;
        let skipped: Vec<Skipped> = capture
            .skipped
            .iter()
            .map(|(path, reason)| Skipped {
                path: WirePath::from_repo_path(path),
                reason: reason.clone(),
            })
            .collect();

        let (unix, time) = now_rfc3339();
        let trailers = Trailers {
            workspace_key: self.workspace.as_str().to_owned(),
            session: request.session.clone(),
            turn: request.turn,
            step: request.step,
            trigger: request.trigger.clone(),
            kind: request.kind,
            time,
            files,
            total_files: capture.files.len() as u64,
            bytes,
            skipped,
        };
        let t4 = std::time::Instant::now();
        let commit = self
            .vault
            .write_commit(&tree, head.as_ref(), &trailers.format(), unix)?;
        crate::fault::point("snapshot:after-commit");
        let pin = PinRef::for_checkpoint(&self.workspace, &commit);
        self.vault.pin(&pin, &commit, None)?;
        crate::fault::point("snapshot:after-pin");

        let record = trailers.into_record(self.name(), commit.to_hex(), tree.to_hex(), self.workspace_path());
        records.push(record.clone());
        if let Err(error) = registry.save(&records, lock) {
            self.vault.unpin(&pin, &commit).ok();
            return Err(error.into());
        }
        phase_time("commit, pin and record", t4);
        let t5 = std::time::Instant::now();
        self.save_stat_cache(registry, lock, &capture, &record, loaded);
        phase_time("stat cache save", t5);
        Ok((
            SnapshotOutcome {
                record,
                created: true,
                warnings,
                scan: capture.stats,
            },
            capture,
        ))
    }

    /// The bytes at a worktree path as a checkpoint would hold them (a symlink's target).
    fn read_worktree_bytes(&self, path: &RepoPath, kind: EntryKind) -> Result<Vec<u8>, CkptError> {
        let full = self.workdir.join(path.to_os_path());
        let io = |source| CkptError::Io {
            path: full.clone(),
            source,
        };
        if kind == EntryKind::Symlink {
            Ok(std::fs::read_link(&full)
                .map_err(io)?
                .into_os_string()
                .into_encoded_bytes())
        } else {
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut crate::verbs::open_no_follow(&full).map_err(io)?, &mut content).map_err(
                |source| CkptError::Io {
                    path: full.clone(),
                    source,
                },
            )?;
            Ok(content)
        }
    }

    /// The stat cache, if it refers to a checkpoint that is still pinned (so every object it
    /// names is still in the object database). Anything else means starting afresh.
    fn trusted_stat_cache(&self, registry: &Registry) -> Option<StatCache> {
        let cache = StatCache::load(registry.dir())?;
        let checkpoint = cache.checkpoint?;
        let pin = PinRef::for_checkpoint(&self.workspace, &checkpoint);
        (self.vault.read_pin(&pin).ok()? == Some(checkpoint)).then_some(cache)
    }

    /// When every captured file is the cached checkpoint's own (by stat, or read back to the same
    /// id and kind) and the set of paths is the cache's own, the worktree is exactly that
    /// checkpoint: its tree is reused without hashing a single tree object. Submodule pointers
    /// come from the index, so their presence disables it.
    fn unchanged_since_cache(&self, capture: &Capture, cache: Option<&StatCache>) -> Option<ObjectId> {
        let cache = cache?;
        // Every file is the checkpoint's own and none of its files is missing.
        let only_cached_files = capture.files.values().all(|f| f.cached) && capture.files.len() == cache.len();
        if !only_cached_files {
            return None;
        }
        self.vault.read_commit(&cache.checkpoint?).ok().map(|info| info.tree)
    }

    /// Best effort: a cache that cannot be written only costs speed next time. When every file
    /// came from the loaded cache (`loaded`: its length and checkpoint) for the same checkpoint,
    /// the file on disk already says it all.
    fn save_stat_cache(
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
            eprintln!("ckpt: warning: could not write the stat cache: {e}");
        }
    }

    /// Reads a checkpoint's tree, failing loudly if its objects are gone.
    fn checkpoint_tree(&self, record: &Record) -> Result<BTreeMap<RepoPath, TreeItem>, CkptError> {
        let tree = self.checkpoint_tree_id(record)?;
        Ok(self.vault.read_tree(&tree)?)
    }

    /// Checks that a record is pinned, matches its commit, and that every name in its tree is
    /// safe; returns the tree id. Runs before anything is written.
    fn checkpoint_tree_id(&self, record: &Record) -> Result<ObjectId, CkptError> {
        record.validate().map_err(CkptError::InvalidInput)?;
        let commit = record
            .commit_id()
            .map_err(CkptError::InvalidInput)?
            .ok_or_else(|| CkptError::InvalidInput(format!("record {} names no commit", record.id)))?;
        let pin = PinRef::for_checkpoint(&self.workspace, &commit);
        if self.vault.read_pin(&pin)? != Some(commit) {
            return Err(CkptError::NotFound(format!(
                "checkpoint {} is not pinned at {} (pruned or tampered); refusing to use it",
                record.short(),
                pin.as_str()
            )));
        }
        let info = self.vault.read_commit(&commit)?;
        if info.tree.to_hex() != record.tree {
            return Err(CkptError::InvalidInput(format!(
                "record {} says tree {} but its commit has tree {}",
                record.short(),
                record.tree,
                info.tree
            )));
        }
        self.vault.validate_tree(&info.tree)?;
        Ok(info.tree)
    }

    /// The restore plan from the difference between the guard and the target: only differing
    /// paths are looked at, so the cost follows the size of the change, not of the tree.
    fn plan_from_diff(
        &self,
        guard_tree: &ObjectId,
        target_tree: &ObjectId,
        record: &Record,
        capture: &Capture,
        selection: &Selection,
    ) -> Result<plan::Plan, CkptError> {
        let changes = self.vault.diff_trees(Some(guard_tree), Some(target_tree))?;
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
        let mut plan = plan::plan(&PlanInput {
            target: &target,
            current: &current,
            unprotected: &capture.unprotected(),
            filter: &selection.paths,
            untouchable: &Self::untouchable(record, capture),
            exact: selection.exact,
        });
        let in_scope = |p: &RepoPath| selection.paths.is_empty() || selection.paths.iter().any(|f| p.is_within(f));
        // Paths equal on both sides are exactly the guard's paths the diff did not name.
        plan.unchanged = capture
            .files
            .iter()
            .filter(|(p, f)| {
                f.item.kind != crate::verbs::EntryKind::Gitlink && in_scope(p) && !current.contains_key(*p)
            })
            .count();
        plan.unmatched_filter
            .retain(|f| !capture.files.keys().any(|p| p.is_within(f)));
        if let Some(unmatched) = plan.unmatched_filter.first() {
            return Err(CkptError::NotFound(format!(
                "path {} is neither in the checkpoint nor in the worktree",
                unmatched.display()
            )));
        }
        Ok(plan)
    }

    fn not_protected(record: &Record, capture: &Capture, selection: &Selection) -> Vec<(RepoPath, String)> {
        let in_scope = |p: &RepoPath| {
            selection.paths.is_empty() || selection.paths.iter().any(|f| p.is_within(f) || f.is_within(p))
        };
        let mut out: Vec<(RepoPath, String)> = capture.unprotected().into_iter().filter(|(p, _)| in_scope(p)).collect();
        for skipped in &record.skipped {
            if let Ok(path) = skipped.path.to_repo_path() {
                if in_scope(&path) {
                    out.push((path, format!("not in checkpoint: {}", skipped.reason)));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// What a restore to `record` must leave alone: the paths the checkpoint saw but did not
    /// protect (it holds no evidence about them), and ckpt's own store inside the workspace.
    fn untouchable(record: &Record, capture: &Capture) -> Vec<RepoPath> {
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

    fn make_plan(
        target: &BTreeMap<RepoPath, TreeItem>,
        record: &Record,
        capture: &Capture,
        selection: &Selection,
    ) -> Result<plan::Plan, CkptError> {
        let plan = plan::plan(&PlanInput {
            target,
            current: &capture.items(),
            unprotected: &capture.unprotected(),
            filter: &selection.paths,
            untouchable: &Self::untouchable(record, capture),
            exact: selection.exact,
        });
        if let Some(unmatched) = plan.unmatched_filter.first() {
            return Err(CkptError::NotFound(format!(
                "path {} is neither in the checkpoint nor in the worktree",
                unmatched.display()
            )));
        }
        Ok(plan)
    }

    fn preview_from(
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

    fn ensure_blobs_present(&self, ops: &[RestoreOp]) -> Result<(), CkptError> {
        for op in ops {
            if let RestoreOp::Write { item, path, .. } = op {
                if !self.vault.has_object(&item.id) {
                    return Err(CkptError::Verb(crate::verbs::VerbError::Worktree {
                        path: path.display(),
                        message: format!(
                            "content {} is missing from the object database; the checkpoint cannot be restored and nothing was written",
                            item.id
                        ),
                    }));
                }
            }
        }
        Ok(())
    }
}

fn journal(record: &Record, guard: &Record, selection: &Selection, ops: &[RestoreOp]) -> serde_json::Value {
    let ops: Vec<serde_json::Value> = ops
        .iter()
        .map(|op| {
            let (name, path) = match op {
                RestoreOp::Remove { path, .. } => ("remove", path),
                RestoreOp::RemoveEmptyDir { path } => ("remove_dir", path),
                RestoreOp::PruneEmptyDir { path } => ("prune_dir", path),
                RestoreOp::Write { path, .. } => ("write", path),
            };
            serde_json::json!({"op": name, "path": WirePath::from_repo_path(path)})
        })
        .collect();
    serde_json::json!({
        "format": "ckpt-restore-journal",
        "version": 1,
        "target": record.id,
        "guard": guard.id,
        "exact": selection.exact,
        "paths": selection.paths.iter().map(WirePath::from_repo_path).collect::<Vec<_>>(),
        "started": now_rfc3339().1,
        "pid": std::process::id(),
        "ops": ops,
    })
}

impl Provider for GitProvider {
    fn name(&self) -> &'static str {
        match self.kind {
            StoreKind::Repository => "git",
            StoreKind::Private => "copy",
        }
    }

    fn workdir(&self) -> &Path {
        &self.workdir
    }

    fn snapshot(&self, request: &SnapshotRequest) -> Result<SnapshotOutcome, CkptError> {
        let registry = self.registry()?;
        let lock = registry.lock()?;
        Ok(self.snapshot_locked(&registry, &lock, request)?.0)
    }

    fn diff(
        &self,
        from: &Record,
        to: Option<&Record>,
        paths: &[RepoPath],
        max_file_size: u64,
    ) -> Result<Vec<crate::provider::FileDiff>, CkptError> {
        let old = self.checkpoint_tree(from)?;
        let new = match to {
            Some(to) => self.checkpoint_tree(to)?,
            None => {
                let cache = Registry::open_existing(&self.state_dir).and_then(|r| self.trusted_stat_cache(&r));
                scan::capture(
                    &self.vault,
                    max_file_size,
                    BlobSink::HashOnly,
                    cache.as_ref(),
                    &Progress::hidden(),
                )?
                .items()
            }
        };
        let mut out = Vec::new();
        for change in crate::provider::diff::changes(&old, &new, paths) {
            let old_bytes = match change.old {
                Some(item) if item.kind != EntryKind::Gitlink => Some(self.vault.read_blob(&item.id)?),
                _ => None,
            };
            let new_bytes = match change.new {
                Some(item) if item.kind == EntryKind::Gitlink => None,
                Some(item) if to.is_some() => Some(self.vault.read_blob(&item.id)?),
                Some(item) => Some(self.read_worktree_bytes(&change.path, item.kind)?),
                None => None,
            };
            let binary = old_bytes.as_deref().is_some_and(crate::provider::diff::is_binary)
                || new_bytes.as_deref().is_some_and(crate::provider::diff::is_binary);
            let (added, removed) = if binary {
                (0, 0)
            } else {
                crate::provider::diff::line_counts(
                    old_bytes.as_deref().unwrap_or_default(),
                    new_bytes.as_deref().unwrap_or_default(),
                )
            };
            out.push(crate::provider::FileDiff {
                change,
                old: old_bytes,
                new: new_bytes,
                binary,
                added,
                removed,
            });
        }
        Ok(out)
    }

    fn status(&self, max_file_size: u64) -> Result<crate::provider::StatusReport, CkptError> {
        // Read-only and without reading file contents: protection comes from lstat alone. The
        // checkpoint trees are walked on another thread while this one surveys the worktree.
        let reconciled = self.reconcile(self.stored_records()?)?;
        let pinned_trees: Vec<ObjectId> = reconciled
            .records
            .iter()
            .filter(|r| !reconciled.unpinned.contains(&r.id))
            .filter_map(|r| r.tree_id().ok())
            .collect();
        let head_tree = match (self.kind, self.vault.head_commit()?) {
            (StoreKind::Repository, Some(head)) => Some(self.vault.read_commit(&head)?.tree),
            _ => None,
        };
        let started = std::time::Instant::now();
        let census = self.vault.spawn_blob_census(pinned_trees, head_tree);
        let survey = scan::survey(&self.vault, max_file_size);
        phase_time("survey", started);
        let census = census.join()?;
        phase_time("survey and blob census", started);
        let survey = survey?;
        let mut report = crate::provider::StatusReport {
            provider: self.name(),
            protected: survey.protected,
            not_protected: survey.unprotected,
            checkpoints: reconciled.records,
            blobs: census.blobs.len(),
            ..Default::default()
        };
        for blob in &census.blobs {
            let outside_head = census.sizes_outside_head.get(blob).copied();
            match (survey.index_ids.get(blob).copied(), outside_head) {
                // The index records the worktree size of its files; good enough for an estimate.
                (Some(index_size), _) => report.shared_bytes += index_size,
                (None, None) => report.shared_bytes += self.vault.object_size(blob).unwrap_or(0),
                (None, Some(size)) => report.ckpt_only_bytes += size,
            }
        }
        Ok(report)
    }

    fn remove(&self, ids: &[String]) -> Result<Vec<String>, CkptError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let registry = self.registry()?;
        let lock = registry.lock()?;
        let records = self.reconcile(registry.load()?)?.records;
        let wanted: HashSet<&String> = ids.iter().collect();
        let mut kept = Vec::with_capacity(records.len());
        let mut removed = Vec::new();
        for record in records {
            if !wanted.contains(&record.id) {
                kept.push(record);
                continue;
            }
            // Unpin first: a crash before the registry is saved leaves a record without a ref,
            // which audit reports, rather than a ref that silently brings the checkpoint back.
            let id = record.object_id().map_err(CkptError::InvalidInput)?;
            let pin = PinRef::for_checkpoint(&self.workspace, &id);
            if self.vault.read_pin(&pin)? == Some(id) {
                self.vault.unpin(&pin, &id)?;
            }
            removed.push(record.id);
        }
        registry.save(&kept, &lock)?;
        Ok(removed)
    }

    fn audit(&self) -> Result<crate::provider::AuditReport, CkptError> {
        self.audit_report()
    }

    fn doctor(&self, fix: Option<crate::provider::JournalFix>) -> Result<crate::provider::DoctorReport, CkptError> {
        self.doctor_report(fix)
    }

    fn checkpoints(&self, all_workspaces: bool) -> Result<Vec<Record>, CkptError> {
        if !all_workspaces {
            return self.records();
        }
        let mut all = Vec::new();
        let entries = match std::fs::read_dir(&self.state_root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(all),
            Err(source) => {
                return Err(CkptError::Io {
                    path: self.state_root.clone(),
                    source,
                })
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if WorkspaceKey::new(&name.to_string_lossy()).is_err() {
                continue;
            }
            if let Some(registry) = Registry::open_existing(&entry.path()) {
                all.extend(registry.load()?);
            }
        }
        all.sort_by(|a, b| a.time.cmp(&b.time));
        Ok(all)
    }

    fn preview(&self, record: &Record, selection: &Selection, max_file_size: u64) -> Result<Preview, CkptError> {
        let target = self.checkpoint_tree(record)?;
        let cache = Registry::open_existing(&self.state_dir).and_then(|registry| self.trusted_stat_cache(&registry));
        let capture = scan::capture(
            &self.vault,
            max_file_size,
            BlobSink::HashOnly,
            cache.as_ref(),
            &self.progress,
        )?;
        let plan = Self::make_plan(&target, record, &capture, selection)?;
        let not_protected = Self::not_protected(record, &capture, selection);
        Ok(Self::preview_from(record, &plan, not_protected, selection.exact))
    }

    fn restore(
        &self,
        record: &Record,
        selection: &Selection,
        request: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError> {
        let t0 = std::time::Instant::now();
        let target_tree = self.checkpoint_tree_id(record)?;
        phase_time("check target tree", t0);
        if let Confirmation::Ask(ask) = confirmation {
            let preview = self.preview(record, selection, request.max_file_size)?;
            if !ask(&preview) {
                return Err(CkptError::Refused("restore not confirmed; nothing was changed".into()));
            }
        }
        let registry = self.registry()?;
        let lock = registry.lock()?;
        if let Some(stale) = registry.read_journal()? {
            eprintln!(
                "ckpt: warning: an earlier restore was interrupted (journal: {}); its guard {} still holds the state before it",
                registry.dir().join("restore-journal.json").display(),
                stale.get("guard").and_then(|g| g.as_str()).unwrap_or("?")
            );
        }

        let t1 = std::time::Instant::now();
        let (guard, capture) = self.snapshot_locked(&registry, &lock, request)?;
        phase_time("guard snapshot", t1);
        let t2 = std::time::Instant::now();
        let guard_tree = guard.record.tree_id().map_err(CkptError::InvalidInput)?;
        let plan = self.plan_from_diff(&guard_tree, &target_tree, record, &capture, selection)?;
        self.ensure_blobs_present(&plan.ops)?;
        phase_time("plan", t2);
        let t3 = std::time::Instant::now();

        registry.write_journal(&journal(record, &guard.record, selection, &plan.ops), &lock)?;
        crate::fault::point("restore:after-journal");
        let phase = self.progress.phase("restoring", plan.ops.len() as u64);
        let progress = &self.progress;
        let results = self.vault.restore_paths_with(&plan.ops, |done| {
            progress.inc(1);
            if done == 1 {
                crate::fault::point("restore:after-first-write");
            }
        });
        drop(phase);

        let mut report = RestoreReport {
            id: record.id.clone(),
            guard: Some(guard.record.id.clone()),
            guard_created: guard.created,
            written: Vec::new(),
            deleted: Vec::new(),
            left: if selection.exact {
                Vec::new()
            } else {
                plan.created_after.clone()
            },
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

        phase_time("writes", t3);
        let t4 = std::time::Instant::now();
        let mut verified = report.failed.is_empty();
        for op in &plan.ops {
            let expected = match op {
                RestoreOp::Write { path, item, .. } => Some((path, Some(item))),
                RestoreOp::Remove { path, .. } => Some((path, None)),
                _ => None,
            };
            if let Some((path, item)) = expected {
                if report.failed.iter().any(|(p, _)| p == path) {
                    continue;
                }
                if !self.vault.verify_path(path, item)? {
                    verified = false;
                    report.failed.push((
                        path.clone(),
                        "verification failed: content differs after restore".into(),
                    ));
                }
            }
        }
        report.verified = verified;
        phase_time("verify", t4);
        registry.clear_journal(&lock)?;
        Ok(report)
    }
}
