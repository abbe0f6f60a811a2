//! The contract's exit codes, in one place: every command ends in an [`Exit`], and every error
//! maps to one here. 0 ok, 1 failed, 2 usage, 3 partial, 4 refused, 141 stdout closed early;
//! a hook (`ckpt hook`) ends 0 (go on), 1 (go on, with a warning) or 2 (block the tool).
//! Nothing else in ckpt chooses a process status, nor the JSON `code` an error is given.

use crate::provider::CkptError;
use crate::records::RecordsError;
use crate::verbs::VerbError;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// It ran, and the answer is "no" (audit found problems) or it failed.
    Failed,
    /// Bad arguments, bad target syntax, a path outside the workspace.
    Usage,
    /// Some paths failed or were in conflict; the rest landed, and each is named.
    Partial,
    /// Not confirmed, ambiguous, or refused for safety; nothing was changed.
    Refused,
    /// The reader of stdout went away (`ckpt list | head -1`): 128 + SIGPIPE, as git's.
    ClosedPipe,
    /// `ckpt hook --fail-closed` found no checkpoint could be taken: the agent must not run the
    /// tool. 2 is what every supported agent's hook protocol reads as "block".
    BlockTool,
}

impl Exit {
    /// The process status.
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Partial => 3,
            Exit::Refused => 4,
            Exit::ClosedPipe => 141,
            Exit::BlockTool => 2,
        }
    }

    /// The exit for a command that failed with `error`.
    pub fn of_error(error: &CkptError) -> Exit {
        match error {
            CkptError::Ambiguous { .. } | CkptError::Refused(_) => Exit::Refused,
            CkptError::InvalidInput(_) | CkptError::Verb(VerbError::Invalid(_)) => Exit::Usage,
            _ => Exit::Failed,
        }
    }

    /// `Ok` when every path landed, `Partial` when some were named as failed.
    pub fn partial_if(some_failed: bool) -> Exit {
        if some_failed {
            Exit::Partial
        } else {
            Exit::Ok
        }
    }
}

/// The JSON `code` of each error (docs/json.md lists them): the contract's, so it lives with the
/// exit codes, not in the engine.
impl CkptError {
    pub fn code(&self) -> &'static str {
        match self {
            CkptError::NoProvider(_) => "no_provider",
            CkptError::NotFound(_) => "not_found",
            CkptError::Ambiguous { .. } => "ambiguous",
            CkptError::Refused(_) => "refused",
            CkptError::InvalidInput(_) => "invalid_input",
            CkptError::CorruptRecord(_) => "corrupt_registry",
            CkptError::Records(RecordsError::NoStoreHome) => "no_provider",
            CkptError::Records(RecordsError::Corrupt { .. }) => "corrupt_registry",
            CkptError::Records(RecordsError::UnsupportedVersion { .. }) => "unsupported_version",
            CkptError::Records(RecordsError::Io { .. }) => "io",
            CkptError::Records(RecordsError::LockTimeout { .. }) => "lock_timeout",
            CkptError::Records(RecordsError::UnsafeStateDir { .. } | RecordsError::UnsafeLockFile { .. }) => {
                "unsafe_state_dir"
            }
            CkptError::Verb(VerbError::Invalid(_)) => "invalid_input",
            CkptError::Verb(VerbError::MissingObject { .. }) => "missing_object",
            CkptError::Verb(VerbError::UnusableObject { .. }) => "unusable_object",
            CkptError::Verb(VerbError::RefConflict { .. }) => "ref_conflict",
            CkptError::Verb(VerbError::CollectedBeforePin { .. }) => "git",
            CkptError::Verb(VerbError::Worktree { .. }) => "worktree",
            CkptError::Verb(VerbError::Unsupported(_)) => "unsupported",
            CkptError::Verb(VerbError::Git { .. }) => "git",
            CkptError::Io { .. } => "io",
        }
    }
}
