//! A trace restore: which files the replay rebuilds exactly at a node (never a deletion, never
//! a file the trace knows both at a path and above or below it), and the transaction that puts
//! them back through a checkpoint of the rebuilt state, whose checkpoint goes again when the
//! restore is declined or refused before anything was written. Writes only through the
//! provider's materialize and restore.

use super::sessions::state_after;
use super::{Known, TraceNode};
use crate::provider::{CkptError, Confirmation, Provider, RestoreReport, Selection, SnapshotRequest};
use crate::records::{Kind, Record};
use crate::verbs::RepoPath;

/// What a trace restore of one node can put back, and what it leaves.
pub struct RestorePlan {
    /// The files rebuilt exactly, with their bytes.
    pub rebuilt: Vec<(RepoPath, Vec<u8>)>,
    /// The files the trace names there that are not put back, and why.
    pub not_restored: Vec<(RepoPath, String)>,
    /// Every path the trace knows of at that node: the materialized checkpoint's safety checks
    /// look at each.
    pub named: Vec<RepoPath>,
}

impl RestorePlan {
    /// The plan for the state after `nodes[at]`, limited to `wanted` (every path when empty).
    pub fn at(nodes: &[TraceNode<'_>], at: usize, wanted: &[RepoPath]) -> RestorePlan {
        let state = state_after(nodes, at);
        let named: Vec<RepoPath> = state.keys().cloned().collect();
        let mut rebuilt: Vec<(RepoPath, Vec<u8>)> = Vec::new();
        let mut not_restored: Vec<(RepoPath, String)> = Vec::new();
        for (path, known) in state {
            if !wanted.is_empty() && !wanted.iter().any(|w| path == *w || path.is_within(w)) {
                continue;
            }
            match known {
                Known::Content(Some(bytes)) => rebuilt.push((path, bytes)),
                Known::Content(None) => {
                    not_restored.push((path, "absent at that point; a trace restore never deletes".into()))
                }
                Known::Unknown(why) => not_restored.push((path, why)),
            }
        }
        // A file the trace knows below another it knows as a file (`d`, then `d/x`): one of
        // the two calls cannot have done what its arguments say, so neither is written.
        let files_known: Vec<RepoPath> = rebuilt.iter().map(|(p, _)| p.clone()).collect();
        let clashing = |path: &RepoPath| {
            files_known
                .iter()
                .any(|other| other != path && (path.is_within(other) || other.is_within(path)))
        };
        let (clash, fine): (Vec<_>, Vec<_>) = rebuilt.into_iter().partition(|(p, _)| clashing(p));
        for (path, _) in clash {
            not_restored.push((
                path,
                "the trace knows a file both at this path and above or below it; neither is written".into(),
            ));
        }
        let mut plan = RestorePlan {
            rebuilt: fine,
            not_restored,
            named,
        };
        for path in wanted {
            let named_here = |(p, _): &(RepoPath, _)| p == path || p.is_within(path);
            if !plan.rebuilt.iter().any(named_here)
                && !plan.not_restored.iter().any(|(p, _)| p == path || p.is_within(path))
            {
                plan.not_restored
                    .push((path.clone(), "the trace knows nothing of it at that point".into()));
            }
        }
        plan
    }

    /// Moves the files in `refused` from what is rebuilt to what is not restored.
    pub fn refuse(&mut self, refused: Vec<(RepoPath, String)>) {
        self.rebuilt.retain(|(path, _)| !refused.iter().any(|(p, _)| p == path));
        self.not_restored.extend(refused);
    }

    /// The same checks [`Self::materialize`] makes, on a listing of the worktree that stores
    /// nothing: a dry run's answer. Read-only.
    pub fn check(&mut self, provider: &dyn Provider, max_file_size: u64) -> Result<(), CkptError> {
        let paths: Vec<RepoPath> = self.rebuilt.iter().map(|(p, _)| p.clone()).collect();
        let refused = provider.materialize_refusals(max_file_size, &paths, &self.named)?;
        self.refuse(refused);
        Ok(())
    }

    /// Takes a guard checkpoint of the worktree (by `guard`) and a checkpoint of the worktree
    /// with the rebuilt files in place, labelled `address`: the checkpoint a restore then puts
    /// back. A file that cannot be written safely is moved to what is not restored.
    pub fn materialize(
        &mut self,
        provider: &dyn Provider,
        address: &str,
        guard: &SnapshotRequest,
    ) -> Result<Record, CkptError> {
        let request = SnapshotRequest {
            trigger: Some(address.to_owned()),
            kind: Kind::Manual,
            ..guard.clone()
        };
        let made = provider.materialize(guard, &request, &self.rebuilt, &self.named)?;
        self.refuse(made.refused);
        Ok(made.checkpoint)
    }

    /// Restores the rebuilt files from `checkpoint` ([`Self::materialize`]'s, for `address`).
    /// Declined, or refused before anything was written, that checkpoint is removed again, so
    /// nothing is left of it; after any other error it stays (an interrupted restore's journal
    /// may name it, for `doctor --fix` to complete). A file the restore could not write is moved
    /// to what is not restored.
    pub fn restore(
        &mut self,
        provider: &dyn Provider,
        checkpoint: &Record,
        address: &str,
        guard: &SnapshotRequest,
        confirmation: Confirmation<'_>,
    ) -> Result<RestoreReport, CkptError> {
        let selection = Selection {
            paths: self.rebuilt.iter().map(|(p, _)| p.clone()).collect(),
            exact: false,
        };
        let report = match provider.restore(checkpoint, &selection, guard, confirmation) {
            Ok(report) => report,
            Err(CkptError::Refused(why)) => {
                if checkpoint.trigger.as_deref() == Some(address) && checkpoint.kind == Kind::Manual {
                    provider.remove(std::slice::from_ref(&checkpoint.id))?;
                }
                return Err(CkptError::Refused(why));
            }
            Err(error) => return Err(error),
        };
        let failed: Vec<(RepoPath, String)> = report
            .failed
            .iter()
            .filter(|(path, _)| self.rebuilt.iter().any(|(p, _)| p == path))
            .cloned()
            .collect();
        self.refuse(failed);
        Ok(report)
    }
}
