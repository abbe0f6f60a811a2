//! `preview` and `restore`: the selection of paths, the confirmation on a terminal, the report.

use super::exit::Exit;
use std::io::IsTerminal;
use std::path::Path;

use super::args::*;
use super::checkpoints::resolve;
use super::output::{self, Output};
use super::wire::{PreviewRecord, RestoreRecord};
use super::*;
use crate::provider::{self, CkptError, Confirmation, Provider, Selection, SnapshotRequest};
use crate::records::{Kind, Record};

pub(super) fn selection(provider: &dyn Provider, cwd: &Path, args: &RestoreArgs) -> Result<Selection, CkptError> {
    let paths = args
        .paths
        .iter()
        .map(|arg| provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Selection {
        paths,
        exact: args.exact,
    })
}

pub(super) fn preview(
    provider: &dyn Provider,
    cwd: &Path,
    args: &RestoreArgs,
    max_file_size: u64,
    out: &Output,
) -> Result<Exit, CkptError> {
    let record = resolve(provider, &args.target)?;
    let selection = selection(provider, cwd, args)?;
    let preview = provider.preview(&record, &selection, max_file_size)?;
    out.record(&PreviewRecord::new(&preview));
    out.human(output::preview_text(&preview, &record).trim_end());
    Ok(Exit::Ok)
}

pub(super) fn ask_on_terminal(record: &Record) -> impl FnMut(&provider::Preview) -> bool + '_ {
    move |preview| {
        say!("{}", output::preview_text(preview, record));
        ask_yes("Restore these paths? A guard checkpoint is taken first.")
    }
}

pub(super) fn restore(
    provider: &dyn Provider,
    cwd: &Path,
    args: &RestoreArgs,
    yes: bool,
    max_file_size: u64,
    watch: bool,
    out: &Output,
) -> Result<Exit, CkptError> {
    let record = resolve(provider, &args.target)?;
    let selection = selection(provider, cwd, args)?;
    let request = SnapshotRequest {
        session: args.target.session.clone(),
        turn: None,
        step: None,
        trigger: Some("restore".into()),
        kind: Kind::Guard,
        max_file_size,
        watch,
        opens_turn: false,
    };
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut ask = ask_on_terminal(&record);
    let confirmation = if yes {
        Confirmation::Given
    } else if interactive {
        Confirmation::Ask(&mut ask)
    } else {
        return Err(CkptError::Refused(format!(
            "restore of {} needs confirmation: pass --yes (see what it would do with: ckpt preview {}); nothing was changed",
            record.short(),
            output::shell_word(record.short())
        )));
    };
    let report = provider.restore(&record, &selection, &request, confirmation)?;
    out.record(&RestoreRecord::new(&report));
    out.human(output::restore_text(&report).trim_end());
    Ok(Exit::partial_if(!report.failed.is_empty()))
}
