//! The safe-verb sandbox: the only module that can write to a repository or its worktree.
//!
//! It owns the open `gix` repository handle and exposes a closed set of primitives — write blob,
//! tree and commit; pin and unpin a ref under `refs/ckpt/` with compare-and-swap; read a tree, a
//! commit or a blob; diff two trees; list the worktree read-only; restore a batch of paths into
//! the worktree. Every input is a validated type from [`types`]. It must never offer a way to run
//! git with caller-chosen arguments, write the index, HEAD, any ref outside `refs/ckpt/`, a
//! reflog, config or hooks, and never write a worktree file through a symlink or outside the root.

mod types;
mod vault;
mod worktree;

pub use types::{
    names_gitattributes, names_gitmodules, EntryKind, FileStat, IdMap, IdSet, ObjectId, PathKind, PinRef, RepoPath,
    TreeItem, WorkspaceKey,
};
pub use vault::{
    absolute_parent_canonical, collect_private_garbage, enclosing_bare_repository, enclosing_common_dir,
    enclosing_exclude_files, enclosing_worktree, path_key, refuse_blocking_rule_file, refuse_unreadable_packed_refs,
    FileCounts, FileRead, Follow, GarbageReport, IndexStat, LevelEntry, LocalBlobs, NewTreeEntry, PackCompression,
    ParallelBlobs, PathScope, PinNames, PrivateStore, TreeChange, TreeCheck, Vault, WorktreeIdentity, LEGACY_MARK,
    READ_ATTEMPTS,
};
pub use worktree::{
    any_staged_files, dead_staged_files, directory_identity, end_watch_daemon, open_lock_no_follow, open_no_follow,
    open_regular_file, open_regular_file_no_follow, open_state_file_for_update, process_is_alive, read_regular_file,
    read_settled_file, read_small_state_file, remove_staged_files, symlink_on_path, temp_file_owner, DiskItem,
    Prestaged, RestoreOp, SeenFile, SeenStats, WorktreeProbe,
};

/// A value that failed validation before reaching a verb.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    #[error("not a full lowercase hex object id: {0:?}")]
    ObjectId(String),
    #[error("not a ref inside refs/ckpt/<workspace>/<id>: {0:?}")]
    PinRef(String),
    #[error("not a valid workspace key: {0:?}")]
    WorkspaceKey(String),
    #[error("invalid repository path {path:?}: {why}")]
    Path { path: String, why: &'static str },
    #[error("invalid tree entry name {name:?}: {why}")]
    TreeName { name: String, why: &'static str },
    #[error("tree entry {name:?} has file mode {mode:06o}, a mode git never writes (a corrupt or hand-made tree)")]
    TreeMode { name: String, mode: u16 },
    #[error(
        "the tree holds {files} or more paths, more than ckpt reads ({most}): a hand-made tree that names the same subtree many times?"
    )]
    TreeTooLarge { files: u64, most: u64 },
    #[error(
        "the tree holds a path of {bytes} bytes (`{start}…`): with the worktree's own path it is longer than this system lets a file be named ({most} bytes); a hand-made tree?"
    )]
    PathTooLong { start: String, bytes: usize, most: usize },
}

/// A verb that could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// A repository operation that failed. `source` keeps the cause (gix's error, an I/O error,
    /// or ckpt's own explanation); the message names every cause in its chain.
    #[error("{action}: {}", error_chain(.source.as_ref()))]
    Git {
        action: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("object {id} is missing from the object database ({what})")]
    MissingObject {
        id: ObjectId,
        what: std::borrow::Cow<'static, str>,
    },
    /// Present, but not the kind of object wanted, or not readable as one (corrupt).
    #[error("object {id} is in the object database but is not a usable {what}: {why}")]
    UnusableObject {
        id: ObjectId,
        what: std::borrow::Cow<'static, str>,
        why: String,
    },
    #[error("ref {name} changed concurrently: {message}")]
    RefConflict { name: String, message: String },
    /// Objects a new checkpoint needs were removed before its pin was written (a gc running
    /// beside ckpt took stored objects no ref reached yet); the pin was taken back.
    #[error("pinning {pin}: {gone} of the objects it needs ({first} among them) were removed before its pin was written (a `git prune` or `git gc --prune=now` running beside ckpt removes every unreachable object); nothing was published, take the checkpoint again")]
    CollectedBeforePin { pin: String, gone: usize, first: ObjectId },
    #[error("{path}: {message}")]
    Worktree { path: String, message: String },
    /// A repository feature ckpt cannot work with (yet).
    #[error("{0}")]
    Unsupported(String),
}

impl VerbError {
    /// This error of reading the object at `dir` of a checkpoint's tree (`None`: its root; for
    /// a tree, a bad name is one of its entries), with that place named: a hostile or corrupt
    /// tree is refused at a place a person can find.
    pub(crate) fn at_tree_path(self, dir: Option<&RepoPath>) -> VerbError {
        let Some(dir) = dir else {
            return self;
        };
        let at = |what: std::borrow::Cow<'static, str>| format!("{what} at `{}`", dir.display()).into();
        match self {
            VerbError::Invalid(InvalidInput::TreeName { name, why }) => VerbError::Invalid(InvalidInput::TreeName {
                name: format!("{}/{name}", dir.display()),
                why,
            }),
            VerbError::Invalid(InvalidInput::TreeMode { name, mode }) => VerbError::Invalid(InvalidInput::TreeMode {
                name: format!("{}/{name}", dir.display()),
                mode,
            }),
            VerbError::MissingObject { id, what } => VerbError::MissingObject { id, what: at(what) },
            VerbError::UnusableObject { id, what, why } => VerbError::UnusableObject {
                id,
                what: at(what),
                why,
            },
            VerbError::Git { action, source } => VerbError::Git {
                action: format!("{action} (at `{}`)", dir.display()),
                source,
            },
            other => other,
        }
    }

    /// A gix failure, with every cause in its chain: the one that matters ("No space left on
    /// device", "Permission denied") is often only in the innermost source.
    fn git(action: impl Into<String>, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        VerbError::Git {
            action: action.into(),
            source: Box::new(error),
        }
    }

    /// A failed repository operation whose cause is ckpt's own finding, not an error value.
    fn git_because(action: impl Into<String>, why: impl Into<String>) -> Self {
        VerbError::Git {
            action: action.into(),
            source: why.into().into(),
        }
    }
}

/// `error` and each of its sources, joined with `: `, skipping a cause whose text the message
/// so far already contains.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !more.is_empty() && !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("writing the pack")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_git_error_keeps_its_cause_and_names_the_whole_chain() {
        let disk_full = std::io::Error::from_raw_os_error(28);
        let error = VerbError::git("writing a blob", Outer(disk_full));
        let message = error.to_string();
        assert!(message.starts_with("writing a blob: writing the pack: "), "{message}");
        assert!(message.contains("No space left on device"), "{message}");
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("writing the pack"));
        let ours = VerbError::git_because("pinning", "a tree, only commits may be pinned");
        assert!(std::error::Error::source(&ours).is_some_and(|c| c.to_string().contains("only commits")));
    }
}
