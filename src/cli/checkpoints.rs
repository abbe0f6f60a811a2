//! `snapshot`, `list` and `show`, and how a target on the command line becomes a checkpoint.

use super::args::*;
use super::exit::Exit;
use super::output::{self, Output};
use super::wire::{CheckpointRecord, SnapshotRecord};
use super::*;
use crate::provider::target::{self, ResolveError, Target};
use crate::provider::{self, CkptError, Provider, SnapshotRequest};
use crate::records::{Kind, Record};

pub(super) fn snapshot(
    provider: &dyn Provider,
    args: &SnapshotArgs,
    max_file_size: u64,
    config: &Config,
    out: &Output,
) -> Result<Exit, CkptError> {
    let request = snapshot_request(args, max_file_size, config);
    let mut followups = super::followups(provider, config);
    if !(args.watch || config.watch == Some(true)) {
        // A daemon that runs is asked all the same; only `--watch` or the config starts one.
        followups.start_daemon = None;
    }
    let settled = provider::settle::snapshot(provider, &request, &followups)?;
    if let Some(why) = &settled.daemon_not_started {
        sayln!("ckpt: warning: could not start the watch daemon: {why}");
    }
    let (outcome, pruned) = (&settled.outcome, &settled.pruned);
    for warning in &outcome.warnings {
        sayln!("ckpt: warning: {warning}");
    }
    out.record(&SnapshotRecord::new(outcome, pruned));
    let record = &outcome.record;
    if outcome.created {
        out.human(&format!(
            "checkpoint {} taken: {} file(s) changed, {} new, {} file(s) protected",
            record.short(),
            record.files,
            output::human_bytes(record.bytes),
            record.total_files
        ));
    } else {
        out.human(&format!(
            "nothing changed since checkpoint {}; no new checkpoint was needed",
            record.short()
        ));
    }
    for skipped in &outcome.not_protected {
        out.human(&not_protected_line(skipped));
    }
    if !pruned.is_empty() {
        sayln!(
            "{}",
            super::retention_text::removal_note(&settled.pruned_by_rule, &super::retention_policy(config))
        );
    }
    Ok(Exit::Ok)
}

/// The snapshot `args` ask for, with the config's defaults.
fn snapshot_request(args: &SnapshotArgs, max_file_size: u64, config: &Config) -> SnapshotRequest {
    SnapshotRequest {
        session: args.session.clone(),
        turn: args.turn,
        step: args.step,
        trigger: args.trigger.clone(),
        kind: match args.kind {
            KindArg::Auto => Kind::Auto,
            KindArg::Manual => Kind::Manual,
            KindArg::Guard => Kind::Guard,
        },
        max_file_size,
        watch: !args.no_watch && (args.watch || config.watch != Some(false)),
        opens_turn: args.opens_turn,
    }
}

pub(super) fn list(provider: &dyn Provider, session: Option<&str>, all: bool, out: &Output) -> Result<Exit, CkptError> {
    let every = provider.checkpoints(all)?;
    let total = every.len();
    let records: Vec<Record> = every
        .into_iter()
        .filter(|r| session.is_none_or(|s| r.session.as_deref() == Some(s)))
        .collect();
    for record in &records {
        out.record(&CheckpointRecord::listed(record));
    }
    if records.is_empty() && total > 0 {
        if let Some(session) = session {
            // Said even with --json (on stderr): an empty list is not "no checkpoints".
            sayln!(
                "ckpt: no checkpoint belongs to session {session:?} ({total} checkpoint(s) in other sessions; `ckpt status` lists the sessions)"
            );
            return Ok(Exit::Ok);
        }
    }
    if !out.json {
        if records.is_empty() {
            out.human("no checkpoints yet (take one with: ckpt snapshot)");
        } else {
            let mut text = output::list_header();
            text.push('\n');
            for record in &records {
                text.push_str(&output::list_line(record));
                text.push('\n');
            }
            out.paging.show_if_long(&text);
        }
    }
    Ok(Exit::Ok)
}

pub(super) fn resolve(provider: &dyn Provider, args: &TargetArgs) -> Result<Record, CkptError> {
    check_label("session", &args.session)?;
    let records = provider.checkpoints(false)?;
    let parsed = Target::parse(&args.target).map_err(|e| resolve_error(&args.target, e))?;
    target::resolve(&records, &parsed, args.session.as_deref())
        .cloned()
        .map_err(|e| resolve_error(&args.target, e))
}

pub(super) fn resolve_error(text: &str, error: ResolveError) -> CkptError {
    match error {
        ResolveError::Invalid(message) => CkptError::InvalidInput(message),
        ResolveError::NotFound(message) => CkptError::NotFound(message),
        ResolveError::Ambiguous(candidates) => CkptError::Ambiguous {
            target: text.to_owned(),
            candidates,
        },
    }
}

pub(super) fn show(provider: &dyn Provider, args: &TargetArgs, out: &Output) -> Result<Exit, CkptError> {
    let record = resolve(provider, args)?;
    out.record(&CheckpointRecord::shown(&record));
    if !out.json {
        let mut text = format!(
            "checkpoint {}\n  provider  {}\n  kind      {}\n  time      {}\n  session   {}\n  turn      {}\n  trigger   {}\n  files     {} changed, {} protected\n  bytes     {} new\n  tree      {}\n",
            record.id,
            record.provider,
            record.kind.as_str(),
            output::human_time(&record),
            record.session.as_deref().unwrap_or("-"),
            output::turn_step(&record),
            record.trigger.as_deref().unwrap_or("-"),
            record.files,
            record.total_files,
            output::human_bytes(record.bytes),
            record.tree
        );
        for skipped in &record.skipped {
            text.push_str(&not_protected_line(skipped));
            text.push('\n');
        }
        out.human(text.trim_end());
    }
    Ok(Exit::Ok)
}

/// One path a checkpoint did not protect, for people.
fn not_protected_line(skipped: &crate::records::Skipped) -> String {
    let path = output::human_wire_path(&skipped.path);
    format!("  not protected: {path}  [{}]", skipped.reason)
}
