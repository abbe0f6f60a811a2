//! A snapshot as every caller asks for it (the CLI, an agent's hook, the web view): the request's
//! labels checked, the capture, then what the workspace's settings say follows it — the watch
//! daemon started for next time when the snapshot wanted one and none answered, and retention
//! applied when a checkpoint was created. Prints nothing; starting a process is the caller's
//! (it knows how to run ckpt), deciding when is here.

use super::{retention, CkptError, Provider, ScanMode, SnapshotOutcome, SnapshotRequest};

/// What the workspace's settings add to a snapshot.
pub struct Followups<'a> {
    /// Applied after a snapshot that created a checkpoint (config `retention.auto_prune`).
    pub auto_prune: Option<retention::Policy>,
    /// Starts the workspace's watch daemon in the background when a snapshot that asked for one
    /// found none; `None`: a daemon that runs is used, none is started.
    pub start_daemon: Option<Box<dyn Fn() -> Result<(), String> + 'a>>,
}

/// A snapshot and what followed it.
pub struct Settled {
    pub outcome: SnapshotOutcome,
    /// The checkpoints retention removed.
    pub pruned: Vec<String>,
    /// Why the daemon the snapshot wanted could not be started (it only costs speed).
    pub daemon_not_started: Option<String>,
}

/// Takes the snapshot `request` asks for, then its follow-ups.
pub fn snapshot(
    provider: &dyn Provider,
    request: &SnapshotRequest,
    followups: &Followups,
) -> Result<Settled, CkptError> {
    for (what, label) in [("session", &request.session), ("trigger", &request.trigger)] {
        if let Some(text) = label {
            crate::records::validate_new_label(what, text).map_err(CkptError::InvalidInput)?;
        }
    }
    let mut outcome = provider.snapshot(request)?;
    // No socket: no daemon, so one is started for the next snapshot when this one wanted it. A
    // daemon that is there but did not answer is not replaced behind the user's back (the
    // fallback says so).
    let no_daemon =
        matches!(&outcome.scan_mode, ScanMode::Full { fallback: Some(why) } if why == super::watch::NO_DAEMON);
    let daemon_not_started = match &followups.start_daemon {
        Some(start) if request.watch && no_daemon => start().err(),
        // Only a running daemon was to be used: walking without one is no fallback.
        None if no_daemon => {
            outcome.scan_mode = ScanMode::Full { fallback: None };
            None
        }
        _ => None,
    };
    let pruned = match &followups.auto_prune {
        Some(policy) if outcome.created => {
            let plan = retention::plan(&provider.checkpoints(false)?, policy);
            provider.remove(&plan.into_iter().map(|r| r.id).collect::<Vec<_>>())?
        }
        _ => Vec::new(),
    };
    Ok(Settled {
        outcome,
        pruned,
        daemon_not_started,
    })
}
