//! `prune`, `delete` and `clear`: removing checkpoints, with confirmation.

use super::exit::Exit;
use std::io::IsTerminal;

use super::args::*;
use super::checkpoints::resolve;
use super::output::Output;
use super::wire::{PruneRecord, PruneRemoveRecord, Removal, RemovedRecord};
use super::*;
use crate::provider::{self, CkptError, Provider};
use crate::records::Record;

pub(super) fn prune(
    provider: &dyn Provider,
    policy: &provider::retention::Policy,
    dry_run: bool,
    out: &Output,
) -> Result<Exit, CkptError> {
    let records = provider.checkpoints(false)?;
    let plan = provider::retention::plan(&records, policy, chrono::Utc::now().timestamp_millis());
    let ids: Vec<String> = plan.iter().map(|r| r.id.clone()).collect();
    let removed = if dry_run { Vec::new() } else { provider.remove(&ids)? };
    for removal in &plan {
        out.record(&PruneRemoveRecord {
            id: &removal.id,
            rule: removal.rule,
            done: !dry_run,
        });
        let short = &removal.id[..8.min(removal.id.len())];
        out.human(&format!(
            "{} {short}  [{}]",
            if dry_run { "would remove" } else { "removed" },
            removal.rule
        ));
    }
    out.record(&PruneRecord {
        removed: removed.len(),
        planned: plan.len(),
        kept: records.len() - plan.len(),
        dry_run,
    });
    out.human(&format!(
        "prune: {} of {} checkpoint(s) {}; objects are freed by git gc (git provider)",
        plan.len(),
        records.len(),
        if dry_run { "would be removed" } else { "removed" }
    ));
    Ok(Exit::Ok)
}

/// Removing checkpoints follows the restore rule: `--yes`, or a `y` on a terminal.
pub(super) fn confirm_removal(records: &[Record], yes: bool, by: Removal) -> Result<(), CkptError> {
    let what = by.name();
    if yes || records.is_empty() {
        return Ok(());
    }
    if std::io::stdin().is_terminal()
        && std::io::stderr().is_terminal()
        && ask_yes(&format!("{what}: delete {} checkpoint(s)?", records.len()))
    {
        return Ok(());
    }
    Err(CkptError::Refused(format!(
        "{what} of {} checkpoint(s) needs confirmation: pass --yes; nothing was deleted",
        records.len()
    )))
}

pub(super) fn remove(
    provider: &dyn Provider,
    records: &[Record],
    by: Removal,
    out: &Output,
) -> Result<Exit, CkptError> {
    let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    let removed = provider.remove(&ids)?;
    out.record(&RemovedRecord { by, removed: &removed });
    out.human(&format!("{}: removed {} checkpoint(s)", by.name(), removed.len()));
    Ok(Exit::Ok)
}

pub(super) fn delete(
    provider: &dyn Provider,
    targets: &[String],
    session: Option<&str>,
    yes: bool,
    out: &Output,
) -> Result<Exit, CkptError> {
    let records: Vec<Record> = if targets.is_empty() {
        let Some(session) = session else {
            return Err(CkptError::InvalidInput(
                "delete needs targets, or --session S for a whole session".into(),
            ));
        };
        provider
            .checkpoints(false)?
            .into_iter()
            .filter(|r| r.session.as_deref() == Some(session))
            .collect()
    } else {
        let mut chosen: Vec<Record> = Vec::new();
        for target in targets {
            let record = resolve(
                provider,
                &TargetArgs {
                    target: target.clone(),
                    session: session.map(str::to_owned),
                },
            )?;
            if !chosen.iter().any(|r| r.id == record.id) {
                chosen.push(record);
            }
        }
        chosen
    };
    if records.is_empty() {
        return Err(CkptError::NotFound("no checkpoint matches".into()));
    }
    confirm_removal(&records, yes, Removal::Delete)?;
    remove(provider, &records, Removal::Delete, out)
}
