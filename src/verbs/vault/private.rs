//! The copy provider's private store: a git directory of ckpt's own per workspace whose
//! `core.worktree` is the protected directory, with objects shared across workspaces; and the
//! read-only look-ups of an enclosing (possibly unborn) repository. Never writes inside the
//! protected directory.

use std::path::{Path, PathBuf};

use super::{Vault, CONFIG_OVERRIDES};
use crate::verbs::types::WorkspaceKey;
use crate::verbs::VerbError;

/// What a private store needs to know to open: where its git dir, the shared object store and
/// the generated exclude file live, and which directory it protects.
pub struct PrivateStore<'a> {
    pub git_dir: &'a Path,
    pub objects: &'a Path,
    pub excludes_file: &'a Path,
    pub workdir: &'a Path,
}

/// Quotes a value for a git config file (the path of the protected directory, byte-exact).
fn config_quote(value: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &b in value {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// A stable key for a directory path (its SHA-1, hex, cut to 20 digits), for naming the private
/// state of a workspace outside it.
pub fn path_key(path: &Path) -> Result<WorkspaceKey, VerbError> {
    let id = gix::objs::compute_hash(
        gix::hash::Kind::Sha1,
        gix::objs::Kind::Blob,
        path.as_os_str().as_encoded_bytes(),
    )
    .map_err(|e| VerbError::git("hashing a workspace path", e))?;
    Ok(WorkspaceKey::new(&format!("ws-{}", &id.to_hex().to_string()[..20]))?)
}

/// Refuses the repository containing `dir` when its `packed-refs` is not a regular file (a
/// FIFO, socket, device or directory): opening the repository reads it, and a FIFO there would
/// make every command hang, as it hangs git. Looked at before anything opens the repository,
/// with `lstat` only.
pub fn refuse_unreadable_packed_refs(dir: &Path) -> Result<(), VerbError> {
    let Ok((found, _trust)) = gix::discover::upwards(dir) else {
        return Ok(());
    };
    let git_dir = found.into_repository_and_work_tree_directories().0;
    let common_dir = match std::fs::read(git_dir.join("commondir")) {
        Ok(text) => {
            let named = PathBuf::from(String::from_utf8_lossy(&text).trim());
            if named.is_absolute() {
                named
            } else {
                git_dir.join(named)
            }
        }
        Err(_) => git_dir,
    };
    refuse_blocking_file(&common_dir.join("packed-refs"))
}

/// Refuses `path` when it is there but is not a regular file, or leads to one that is not (a
/// FIFO, socket, device or directory): opening a repository reads it, and a FIFO there makes
/// the read wait for a writer forever, as it makes git wait.
fn refuse_blocking_file(path: &Path) -> Result<(), VerbError> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(VerbError::Unsupported(format!(
            "{} is not a regular file (a FIFO, socket, device or directory), and git cannot read it either; remove it",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Refuses a private git directory (the copy provider's) whose files that opening it reads are
/// not regular files: a FIFO at its `HEAD` would make every command of the workspace hang.
/// Looked at before it is opened.
pub(super) fn refuse_blocking_git_files(git_dir: &Path) -> Result<(), VerbError> {
    for name in [
        "HEAD",
        "config",
        "packed-refs",
        "commondir",
        "index",
        "objects/info/alternates",
    ] {
        refuse_blocking_file(&git_dir.join(name))?;
    }
    Ok(())
}

/// The common git directory of the repository containing `dir` (unborn HEAD included), if any.
pub fn enclosing_common_dir(dir: &Path) -> Option<PathBuf> {
    gix::discover(dir).ok().map(|repo| repo.common_dir().to_path_buf())
}

/// The exclude files git itself applies in the repository containing `dir`, lowest precedence
/// first: the global one (`core.excludesFile`, else `$XDG_CONFIG_HOME/git/ignore` or
/// `~/.config/git/ignore`) and then `info/exclude`. Only files that exist are listed; empty
/// outside any repository. Read-only.
pub fn enclosing_exclude_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(repo) = gix::discover(dir) else {
        return Vec::new();
    };
    let configured = repo.config_snapshot().trusted_path("core.excludesFile").ok().flatten();
    let global = configured.or_else(|| {
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
            .map(|config| config.join("git").join("ignore"))
    });
    let info = repo.common_dir().join("info").join("exclude");
    global.into_iter().chain([info]).filter(|path| path.is_file()).collect()
}

/// The git directory of the bare repository `dir` is in (or is), if it is in one. Read-only.
pub fn enclosing_bare_repository(dir: &Path) -> Option<PathBuf> {
    gix::discover(dir)
        .ok()
        .filter(|repo| repo.is_bare())
        .map(|repo| repo.git_dir().to_path_buf())
}

/// Where the repository containing `dir` has its worktree, even when HEAD is unborn; `None`
/// outside any repository.
pub fn enclosing_worktree(dir: &Path) -> Option<PathBuf> {
    gix::discover(dir)
        .ok()
        .and_then(|repo| repo.workdir().map(Path::to_path_buf))
}

impl Vault {
    /// Opens (creating on first use) the private git directory that backs the copy provider for
    /// `store.workdir`: its own refs and config, `core.worktree` pointing at the protected
    /// directory, and an `objects` link into the shared content-addressed store, so identical
    /// content is stored once across all workspaces. Nothing is written inside the workdir.
    pub fn open_private(store: &PrivateStore<'_>) -> Result<Vault, VerbError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            VerbError::git_because(
                format!("preparing the private store at {}", store.git_dir.display()),
                format!("{what}: {e}"),
            )
        };
        // Before anything reads it, or takes a `config` that is no file for a store to set up.
        refuse_blocking_git_files(store.git_dir)?;
        if !store.git_dir.join("config").is_file() {
            for sub in ["pack", "info"] {
                std::fs::create_dir_all(store.objects.join(sub)).map_err(|e| fail("creating the object store", &e))?;
            }
            let parent = store.git_dir.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(parent).map_err(|e| fail("creating its directory", &e))?;
            let staging = parent.join(format!(".git-{}.tmp", std::process::id()));
            std::fs::remove_dir_all(&staging).ok();
            gix::init_bare(&staging).map_err(|e| fail("initializing", &e))?;
            std::fs::remove_dir_all(staging.join("objects")).map_err(|e| fail("replacing objects", &e))?;
            std::os::unix::fs::symlink(store.objects, staging.join("objects"))
                .map_err(|e| fail("linking the shared objects", &e))?;
            let mut config = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ".to_vec();
            config.extend(config_quote(store.workdir.as_os_str().as_encoded_bytes()));
            config.extend_from_slice(b"\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n");
            std::fs::write(staging.join("config"), &config).map_err(|e| fail("writing its config", &e))?;
            std::fs::remove_dir_all(staging.join("hooks")).ok();
            if let Err(e) = std::fs::rename(&staging, store.git_dir) {
                std::fs::remove_dir_all(&staging).ok();
                if !store.git_dir.join("config").is_file() {
                    return Err(fail("moving it into place", &e));
                }
            }
        }
        // An `objects` link that does not lead to the shared store (left by an older ckpt given a
        // relative CKPT_HOME, or by a moved store) is pointed at it again, atomically.
        let link = store.git_dir.join("objects");
        let relink = match std::fs::read_link(&link) {
            Ok(target) => target != store.objects,
            Err(_) => std::fs::symlink_metadata(&link).is_err(),
        };
        if relink {
            let fresh = store.git_dir.join(format!("objects-{}.tmp", std::process::id()));
            std::fs::remove_file(&fresh).ok();
            std::os::unix::fs::symlink(store.objects, &fresh)
                .and_then(|()| std::fs::rename(&fresh, &link))
                .map_err(|e| fail("linking the shared objects again", &e))?;
        }
        let mut overrides: Vec<gix::bstr::BString> = CONFIG_OVERRIDES.iter().map(|s| (*s).into()).collect();
        let mut excludes: gix::bstr::BString = "core.excludesFile=".into();
        excludes.extend_from_slice(store.excludes_file.as_os_str().as_encoded_bytes());
        overrides.push(excludes);
        let options = super::open_options().config_overrides(overrides);
        let repo = gix::open_opts(store.git_dir, options).map_err(|e| fail("opening", &e))?;
        let workdir = repo.workdir().map(Path::to_path_buf).ok_or_else(|| {
            VerbError::git_because(
                format!("opening the private store at {}", store.git_dir.display()),
                "it has no worktree configured",
            )
        })?;
        let same = workdir.canonicalize().ok() == store.workdir.canonicalize().ok();
        if !same {
            return Err(VerbError::git_because(
                format!("opening the private store at {}", store.git_dir.display()),
                format!("it protects {}, not {}", workdir.display(), store.workdir.display()),
            ));
        }
        Ok(Vault {
            repo,
            workdir,
            reserved: Vec::new(),
            batch: Default::default(),
            kept_index: Default::default(),
            prefetched_index: Default::default(),
            pending_keeps: Default::default(),
            written_loose: Default::default(),
            relied_on: Default::default(),
            levels: Default::default(),
            vouched_index: Default::default(),
        })
    }
}
