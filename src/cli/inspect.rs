//! `diff` and `status`: read-only views of checkpoints and of the worktree.

use super::exit::Exit;
use std::io::IsTerminal;
use std::path::Path;

use super::args::*;
use super::checkpoints::resolve;
use super::output::{self, Output};
use super::wire::{AutoRetention, DiffFileRecord, DiffRecord, RetentionStatus, SessionCount, StatusRecord, WatchUse};
use super::*;
use crate::provider::{self, CkptError, Provider};

pub(super) struct DiffRequest<'a> {
    pub(super) from: &'a str,
    pub(super) to: Option<&'a str>,
    pub(super) session: Option<&'a str>,
    pub(super) view: output::DiffView,
    pub(super) max_file_size: u64,
    pub(super) paths: &'a [PathBuf],
}

pub(super) fn diff(
    provider: &dyn Provider,
    cwd: &Path,
    request: &DiffRequest<'_>,
    out: &Output,
) -> Result<Exit, CkptError> {
    let target = |text: &str| TargetArgs {
        target: text.to_owned(),
        session: request.session.map(str::to_owned),
    };
    let from = resolve(provider, &target(request.from))?;
    let to = request.to.map(|t| resolve(provider, &target(t))).transpose()?;
    let paths = request
        .paths
        .iter()
        .map(|arg| provider::repo_path_from_user(provider.workdir(), cwd, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let files = provider.diff(&from, to.as_ref(), &paths, request.max_file_size)?;
    let (added, removed) = files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
    for file in &files {
        out.record(&DiffFileRecord::new(file));
    }
    out.record(&DiffRecord {
        from: &from.id,
        to: to.as_ref().map(|r| r.id.as_str()),
        files: files.len(),
        added,
        removed,
    });
    if !out.json {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let text = output::diff_text(&files, request.view, color);
        if !text.is_empty() {
            out.paging.show(&text);
        }
        if files.is_empty() {
            let to_name = to
                .as_ref()
                .map(|r| r.short().to_owned())
                .unwrap_or_else(|| "the worktree".into());
            out.human(&format!("no differences between {} and {to_name}", from.short()));
        }
    }
    Ok(Exit::Ok)
}

pub(super) fn status(
    provider: &dyn Provider,
    max_file_size: u64,
    config: &Config,
    out: &Output,
) -> Result<Exit, CkptError> {
    let watch_off = config.watch == Some(false);
    let report = provider.status(max_file_size)?;
    let auto = auto_prune(config);
    let policy = retention_policy(config);
    let retention_log = provider.retention_file().load();
    let retention = RetentionStatus {
        auto: match &auto {
            None => AutoRetention::Off,
            Some(auto) if auto.every.is_none() => AutoRetention::EverySnapshot,
            Some(_) => AutoRetention::Periodic,
        },
        interval_secs: auto.as_ref().and_then(|a| a.every).map(|every| every.as_secs()),
        max_age_secs: policy.max_age_secs,
        max_per_session: policy.max_per_session,
        quota_bytes: policy.quota_bytes,
        last_removal: retention_log.last_removal.as_ref(),
    };
    let asked = crate::provider::watch::status(&provider.watch_files());
    let watch = match (watch_off, &asked) {
        (true, _) => WatchUse::TurnedOff,
        (false, Ok(Some(_))) => WatchUse::Used,
        (false, Ok(None)) => WatchUse::NotRunning,
        (false, Err(_)) => WatchUse::NotAnswering,
    };
    let daemon = asked.as_ref().ok().and_then(Option::as_ref);
    let mut sessions: std::collections::BTreeMap<Option<String>, usize> = std::collections::BTreeMap::new();
    for record in &report.checkpoints {
        *sessions.entry(record.session.clone()).or_default() += 1;
    }
    let oldest = report.checkpoints.first();
    let newest = report.checkpoints.last();
    out.record(&StatusRecord {
        provider: report.provider,
        workspace: crate::records::WirePath::from_bytes(provider.workdir().as_os_str().as_encoded_bytes()),
        protected: report.protected,
        not_protected: StatusRecord::not_protected(&report.not_protected, &report.unnamable),
        checkpoints: report.checkpoints.len(),
        sessions: sessions
            .iter()
            .map(|(session, count)| SessionCount {
                session: session.as_deref(),
                count: *count,
            })
            .collect(),
        oldest: oldest.map(|r| r.id.as_str()),
        newest: newest.map(|r| r.id.as_str()),
        ckpt_only_bytes: report.ckpt_only_bytes,
        shared_bytes: report.shared_bytes,
        blobs: report.blobs,
        watch,
        retention,
    });
    if !out.json {
        let mut text = format!("provider {} for {}\n", report.provider, provider.workdir().display());
        text.push_str(&format!("protected now: {} file(s)\n", report.protected));
        let unprotected = report.not_protected.len() + report.unnamable.len();
        if unprotected > 0 {
            text.push_str(&format!("not protected ({unprotected}):\n"));
            for (path, reason) in &report.not_protected {
                text.push_str(&format!("  {}  [{reason}]\n", output::human_path(path)));
            }
            for skipped in &report.unnamable {
                text.push_str(&format!(
                    "  {}  [{}]\n",
                    output::human_wire_path(&skipped.path),
                    skipped.reason
                ));
            }
        }
        text.push_str(&format!("checkpoints: {}\n", report.checkpoints.len()));
        for (session, count) in &sessions {
            text.push_str(&format!(
                "  {}: {count}\n",
                session.as_deref().unwrap_or("(no session)")
            ));
        }
        if let (Some(oldest), Some(newest)) = (oldest, newest) {
            text.push_str(&format!(
                "  oldest {}  {}\n",
                oldest.short(),
                output::human_time(oldest)
            ));
            text.push_str(&format!(
                "  newest {}  {}\n",
                newest.short(),
                output::human_time(newest)
            ));
        }
        text.push_str(&format!(
            "disk: {} kept alive only by ckpt, {} shared with your repository ({} distinct files)",
            output::human_bytes(report.ckpt_only_bytes),
            output::human_bytes(report.shared_bytes),
            report.blobs
        ));
        text.push('\n');
        text.push_str(&match (watch, &daemon) {
            (WatchUse::Used, Some(daemon)) => format!(
                "watch daemon: running (pid {}); snapshots ask it what changed",
                daemon.pid
            ),
            (WatchUse::TurnedOff, _) => {
                "watch daemon: not used (config watch = false); snapshots walk the worktree".to_owned()
            }
            (WatchUse::NotAnswering, _) => format!(
                "watch daemon: not answering ({}); snapshots wait for it, then walk the worktree",
                asked.as_ref().err().map(String::as_str).unwrap_or_default()
            ),
            _ => "watch daemon: not running; snapshots walk the worktree (`ckpt watch start` starts one)".to_owned(),
        });
        text.push('\n');
        text.push_str(&super::retention_text::status_text(
            auto.as_ref(),
            &policy,
            retention_log.last_removal.as_ref(),
        ));
        out.human(&text);
    }
    Ok(Exit::Ok)
}
