//! `audit` and `doctor`: problems, actions and what is left, as text and JSON Lines.

use super::exit::Exit;
use super::output::{self, Output};
use super::wire::{AuditRecord, Check, DoctorRecord, ProblemRecord, RestoreRecord};
use crate::provider::{self, CkptError, Provider};

pub(super) fn audit(provider: &dyn Provider, out: &Output) -> Result<Exit, CkptError> {
    let report = provider.audit()?;
    for problem in &report.problems {
        out.record(&ProblemRecord::new(Check::Audit, problem));
        out.human(&format!("problem [{}]: {}", problem.code, problem.message));
    }
    let ok = report.problems.is_empty();
    out.record(&AuditRecord {
        ok,
        records: report.records,
        refs: report.refs,
        problems: report.problems.len(),
    });
    out.human(&format!(
        "audit: {} record(s), {} ref(s), {} problem(s){}",
        report.records,
        report.refs,
        report.problems.len(),
        if ok { " — all consistent" } else { "" }
    ));
    Ok(if ok { Exit::Ok } else { Exit::Failed })
}

pub(super) fn doctor(provider: &dyn Provider, fix: bool, complete: bool, out: &Output) -> Result<Exit, CkptError> {
    let mode = fix.then_some(if complete {
        provider::JournalFix::Complete
    } else {
        provider::JournalFix::RollBack
    });
    let report = provider.doctor(mode)?;
    for problem in &report.problems {
        out.record(&ProblemRecord::new(Check::Doctor, problem));
        out.human(&format!("problem [{}]: {}", problem.code, problem.message));
    }
    if let Some(restore) = &report.restore {
        out.record(&RestoreRecord::new(restore));
        out.human(output::restore_text(restore).trim_end());
    }
    for action in &report.actions {
        out.human(&format!("{} {action}", if report.fixed { "done:" } else { "would:" }));
    }
    out.record(&DoctorRecord {
        fixed: report.fixed,
        problems: report.problems.len(),
        actions: &report.actions,
        remaining: report
            .remaining
            .iter()
            .map(|problem| ProblemRecord::new(Check::Doctor, problem))
            .collect(),
    });
    let healthy = if report.fixed {
        report.remaining.is_empty()
    } else {
        report.problems.is_empty()
    };
    if report.problems.is_empty() {
        out.human("doctor: no problems found");
    } else if !report.fixed {
        out.human("doctor: run `ckpt doctor --fix` to repair");
    } else if !healthy {
        out.human(&format!("doctor: {} problem(s) remain", report.remaining.len()));
    }
    let partial = report.restore.as_ref().is_some_and(|r| !r.failed.is_empty());
    Ok(match (healthy, partial) {
        (false, _) => Exit::Failed,
        // The interrupted restore was settled, but paths changed since were left and named.
        (true, true) => Exit::Partial,
        (true, false) => Exit::Ok,
    })
}
