//! A snapshot as every caller asks for it (the CLI, an agent's hook, the web view): the request's
//! labels checked, the capture, then what the workspace's settings say follows it — the watch
//! daemon started for next time when the snapshot wanted one and none answered, and retention
//! applied when a checkpoint was created (at most as often as asked, noted in the workspace's
//! retention log). Prints nothing; starting a process is the caller's (it knows how to run
//! ckpt), deciding when is here.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{retention, CkptError, Provider, ScanMode, SnapshotOutcome, SnapshotRequest};
use crate::records::retention::AutoRemoval;

/// Retention applied after a snapshot that created a checkpoint.
pub struct AutoPrune {
    pub policy: retention::Policy,
    /// At most this often (retention on by default costs a look at every checkpoint, so not on
    /// every snapshot); `None`: after every such snapshot (config `retention.auto_prune = true`).
    pub every: Option<Duration>,
}

/// What the workspace's settings add to a snapshot.
pub struct Followups<'a> {
    pub auto_prune: Option<AutoPrune>,
    /// Starts the workspace's watch daemon in the background when a snapshot that asked for one
    /// found none; `None`: a daemon that runs is used, none is started.
    pub start_daemon: Option<Box<dyn Fn() -> Result<(), String> + 'a>>,
}

/// A snapshot and what followed it.
pub struct Settled {
    pub outcome: SnapshotOutcome,
    /// The checkpoints retention removed.
    pub pruned: Vec<String>,
    /// How many of them each retention rule removed.
    pub pruned_by_rule: BTreeMap<String, u64>,
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
    let (pruned, pruned_by_rule) = match &followups.auto_prune {
        // The checkpoint is pinned and recorded by now: retention failing (a lock git holds,
        // an interrupted restore's guard in the plan) costs nothing but the tidying, so it is
        // said, not turned into a failed snapshot.
        Some(auto) if outcome.created => {
            let just_taken = outcome.record.id.clone();
            auto_prune(provider, auto, &just_taken, &mut outcome.warnings).unwrap_or_else(|e| {
                outcome.warnings.push(format!("retention could not run this time: {e}"));
                Default::default()
            })
        }
        _ => Default::default(),
    };
    Ok(Settled {
        outcome,
        pruned,
        pruned_by_rule,
        daemon_not_started,
    })
}

/// Applies `auto` unless its interval has not passed since retention last looked; notes the
/// look, and what it removed, in the workspace's retention log. Never removes `just_taken`: a
/// checkpoint dated in the future (a clock set wrong, then right) sorts after it, and would
/// otherwise count as its session's newest.
fn auto_prune(
    provider: &dyn Provider,
    auto: &AutoPrune,
    just_taken: &str,
    warnings: &mut Vec<String>,
) -> Result<(Vec<String>, BTreeMap<String, u64>), CkptError> {
    let file = provider.retention_file();
    let mut log = file.load();
    let now = chrono::Utc::now();
    if let Some(every) = auto.every {
        // A look noted in the future (the clock went back) does not hold retention off.
        let since = now.timestamp().saturating_sub(log.checked);
        if (0..i64::try_from(every.as_secs()).unwrap_or(i64::MAX)).contains(&since) {
            return Ok(Default::default());
        }
    }
    let mut plan = retention::plan(&provider.checkpoints(false)?, &auto.policy, now.timestamp_millis());
    plan.retain(|removal| removal.id != just_taken);
    let removed = provider.remove(&plan.iter().map(|r| r.id.clone()).collect::<Vec<_>>())?;
    let mut by_rule: BTreeMap<String, u64> = BTreeMap::new();
    for removal in plan.iter().filter(|r| removed.contains(&r.id)) {
        *by_rule.entry(removal.rule.to_owned()).or_default() += 1;
    }
    log.checked = now.timestamp();
    if !removed.is_empty() {
        log.last_removal = Some(AutoRemoval {
            time: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            removed: removed.len() as u64,
            by_rule: by_rule.clone(),
        });
    }
    if let Err(e) = file.save(&log) {
        warnings.push(format!("could not note what retention did: {e}"));
    }
    Ok((removed, by_rule))
}
