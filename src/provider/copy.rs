//! The copy provider's side of the engine: where its private store lives (`$CKPT_HOME`), how a
//! workspace's store is laid out and opened (default excludes, the unborn repository's own
//! exclude files, `.ckptignore`), and `ckpt gc` over the shared objects. Never writes inside
//! the protected directory.

use std::path::{Path, PathBuf};

use crate::provider::engine::{Engine, StoreKind};
use crate::provider::report::Reporter;
use crate::provider::CkptError;
use crate::records::{Registry, StoreLock};
use crate::verbs::{Vault, WorkspaceKey};

/// `ckpt gc` for the copy store: with every workspace's lock held (so no snapshot can be
/// publishing objects meanwhile), removes loose objects no pin of any workspace reaches and that
/// are older than the grace period.
pub fn collect_copy_store_garbage(
    grace: std::time::Duration,
    dry_run: bool,
    reporter: &Reporter,
) -> Result<crate::verbs::GarbageReport, CkptError> {
    let waiting = |lock: &Path| reporter.waiting_for_lock(lock);
    let home = crate::records::home::ckpt_home()?;
    // First the whole store (waits for every running snapshot, and keeps new workspaces out),
    // then each workspace, in the same order snapshots take them.
    let store_lock = StoreLock::exclusive(&home, &waiting)?;
    let mut locks = Vec::new();
    let mut git_dirs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(home.join("workspaces")) {
        for entry in entries.flatten() {
            let dir = entry.path();
            if WorkspaceKey::new(&entry.file_name().to_string_lossy()).is_err() {
                continue;
            }
            // Every commit a record names is live too, pinned or not: a pin that is gone, or
            // that no ref can be read from (a FIFO, a link, a directory), would let gc remove a
            // checkpoint's objects for good.
            let recorded: Vec<crate::verbs::ObjectId> = match Registry::open_existing(&dir.join("state")) {
                Ok(Some(registry)) => registry
                    .load()
                    .map_err(|e| {
                        CkptError::Refused(format!(
                            "gc removed nothing: the checkpoints of {} cannot be read ({e}); run `ckpt doctor --fix` in that workspace first",
                            dir.display()
                        ))
                    })?
                    .iter()
                    .filter_map(|record| record.object_id().ok())
                    .collect(),
                Ok(None) | Err(crate::records::RecordsError::UnsafeStateDir { .. }) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            if !dir.join("git").is_dir() {
                if recorded.is_empty() {
                    continue;
                }
                return Err(CkptError::Refused(format!(
                    "gc removed nothing: {} has checkpoints but its private git directory is missing",
                    dir.display()
                )));
            }
            match Registry::open(&dir.join("state")).and_then(|registry| registry.lock(&waiting)) {
                Ok(lock) => locks.push(lock),
                // A workspace whose state directory is a link refuses every write, and the store
                // lock keeps its snapshots out anyway; its pins still count as live below.
                Err(crate::records::RecordsError::UnsafeStateDir { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            git_dirs.push((dir.join("git"), recorded));
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
    pub workspace_dir: PathBuf,
    pub git_dir: PathBuf,
    pub objects: PathBuf,
    pub excludes_file: PathBuf,
    pub state_dir: PathBuf,
}

impl CopyLayout {
    pub fn for_root(root: &Path) -> Result<CopyLayout, CkptError> {
        let home = crate::records::home::ckpt_home()?;
        let key = crate::verbs::path_key(root)?;
        let workspace_dir = home.join("workspaces").join(key.as_str());
        Ok(CopyLayout {
            git_dir: workspace_dir.join("git"),
            objects: home.join("objects"),
            excludes_file: workspace_dir.join("exclude"),
            state_dir: workspace_dir.join("state"),
            workspace_dir,
            home,
        })
    }
}

impl Engine {
    /// A copy workspace is known by its path, and a new directory at an old path (removed and
    /// made again, or another checkout cloned there) must not inherit the checkpoints of the
    /// one before: a restore would write the other project's files into it.
    /// The store keeps the directory's identity beside its checkpoints; when the directory at
    /// the path is another, the earlier workspace is set aside whole (listed apart by `list
    /// --all`). A workspace from before identities is the directory's own unless the directory
    /// was born after its oldest checkpoint.
    fn set_aside_an_earlier_directory(root: &Path, layout: &CopyLayout, reporter: &Reporter) -> Result<(), CkptError> {
        let (identity, born) = crate::verbs::directory_identity(root);
        let identity_file = layout.workspace_dir.join("identity");
        let earlier = match crate::verbs::read_small_state_file(&identity_file, 256) {
            Ok(stored) => stored != identity.as_bytes(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let records = match Registry::open_existing(&layout.state_dir) {
                    Ok(Some(registry)) => registry.load().unwrap_or_default(),
                    _ => Vec::new(),
                };
                born.is_some_and(|born| records.iter().any(|r| r.unix_time().is_ok_and(|time| time + 1 < born)))
            }
            Err(source) => {
                return Err(CkptError::Io {
                    path: identity_file,
                    source,
                })
            }
        };
        if earlier {
            let registry = Registry::open(&layout.state_dir)?;
            let lock = registry.lock(&|path| reporter.waiting_for_lock(path))?;
            let aside = Registry::retire_workspace(&layout.workspace_dir, &lock)?;
            drop(lock);
            reporter.warning(&format!(
                "{} is another directory than the one whose checkpoints ckpt kept for this path; those were set aside in {} (`ckpt list --all` lists them) and none is offered as this directory's",
                root.display(),
                aside.display()
            ));
        }
        if earlier || !identity_file.exists() {
            crate::records::write_state_file(&identity_file, identity.as_bytes())?;
        }
        Ok(())
    }

    /// The copy provider for the workspace containing `dir`: the enclosing repository's worktree
    /// if there is one (an unborn repository), else `dir` itself.
    pub fn open_copy(dir: &Path, reporter: Reporter, excludes: Option<&[String]>) -> Result<Self, CkptError> {
        if let Some(git_dir) = crate::verbs::enclosing_bare_repository(dir) {
            // Its files are git's own (config, hooks, refs): never a workspace to capture or
            // restore over.
            return Err(CkptError::NoProvider(format!(
                "{} is inside the bare git repository {}, which has no worktree to protect; run ckpt in a worktree (git worktree add) or a plain directory",
                dir.display(),
                git_dir.display()
            )));
        }
        let root = crate::verbs::enclosing_worktree(dir).unwrap_or_else(|| dir.to_path_buf());
        let root = root.canonicalize().map_err(|source| CkptError::Io {
            path: root.clone(),
            source,
        })?;
        let layout = CopyLayout::for_root(&root)?;
        // Checkpointing the store into itself would grow it by itself on every snapshot.
        if let Ok(home) = layout.home.canonicalize() {
            if root.starts_with(&home) {
                return Err(CkptError::NoProvider(format!(
                    "{} is inside ckpt's own copy store {}; run ckpt in the workspace you want protected",
                    dir.display(),
                    home.display()
                )));
            }
        }
        let store_lock = StoreLock::shared(&layout.home, &|lock| reporter.waiting_for_lock(lock))?;
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
            let shown = source_path.display().to_string();
            crate::verbs::refuse_blocking_rule_file(&source_path, shown, crate::verbs::Follow::Links)?;
            // A directory there holds no rules, as git reads a directory named `.gitignore`.
            if source_path.is_dir() {
                continue;
            }
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
        Self::set_aside_an_earlier_directory(&root, &layout, &reporter)?;
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
        Ok(Engine {
            reporter,
            vault,
            workdir: root,
            workspace: WorkspaceKey::new("copy")?,
            state_root: layout.workspace_dir.clone(),
            state_dir: layout.state_dir,
            kind: StoreKind::Private,
            _store_lock: Some(store_lock),
        })
    }
}
