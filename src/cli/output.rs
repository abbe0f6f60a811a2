//! How answers are printed: JSON Lines on stdout (each object with `"v":1` and a `"type"`) when
//! `--json` is given, human text otherwise. In JSON mode human text goes to stderr, so stdout
//! stays machine-readable. Nothing here decides what a command does.

use crate::provider::{FileDiff, Preview, RestoreReport};
use crate::records::Record;
use crate::verbs::EntryKind;
use crate::verbs::RepoPath;

use super::wire::{mode, Envelope, ErrorRecord, WireRecord};

pub struct Output {
    pub json: bool,
    /// Whether long human text may go through the pager.
    pub paging: super::pager::Paging,
    /// Records kept instead of printed (the web view answers with them); human text is dropped.
    pub collected: Option<std::cell::RefCell<Vec<serde_json::Value>>>,
}

impl Output {
    pub fn new(json: bool, paging: super::pager::Paging) -> Self {
        Output {
            json,
            paging,
            collected: None,
        }
    }

    /// An output that prints nothing and keeps every record, for [`Self::take_records`].
    pub fn collecting() -> Self {
        Output {
            json: true,
            paging: super::pager::Paging::decide(true, true),
            collected: Some(Default::default()),
        }
    }

    /// The records a collecting output kept.
    pub fn take_records(&self) -> Vec<serde_json::Value> {
        self.collected.as_ref().map(|c| c.take()).unwrap_or_default()
    }

    /// Emits one JSON Lines record of the contract (JSON mode only).
    pub fn record<T: WireRecord>(&self, record: &T) {
        if !self.json {
            return;
        }
        if let Some(collected) = &self.collected {
            match serde_json::to_value(Envelope::of(record)) {
                Ok(value) => collected.borrow_mut().push(value),
                Err(e) => collected.borrow_mut().push(serde_json::json!({
                    "v": 1, "type": "error", "code": "io",
                    "message": format!("could not encode a {} record: {e}", record.record_type()),
                })),
            }
            return;
        }
        match serde_json::to_string(&Envelope::of(record)) {
            Ok(line) => to_stdout(&format!("{line}\n")),
            // Only a serializer bug gets here; say so in a record a caller still understands.
            Err(e) => self.record(&ErrorRecord {
                code: "io",
                message: &format!("could not encode a {} record: {e}", record.record_type()),
            }),
        }
    }

    /// Human text: stdout normally, stderr in JSON mode.
    pub fn human(&self, text: &str) {
        if self.collected.is_some() {
            return;
        }
        if self.json {
            sayln!("{text}");
        } else {
            to_stdout(&format!("{text}\n"));
        }
    }
}

/// The engine's notices for a person at the terminal: warnings and lock waits on stderr, phase
/// timings too when `CKPT_TIMING` is set.
pub struct StderrReport {
    pub timings: bool,
}

impl crate::provider::report::Report for StderrReport {
    fn warning(&self, text: &str) {
        sayln!("ckpt: warning: {text}");
    }

    fn waiting_for_lock(&self, lock: &std::path::Path) {
        sayln!(
            "ckpt: waiting for another ckpt process to finish (lock {})",
            lock.display()
        );
    }

    fn timing(&self, phase: &str, elapsed: std::time::Duration, detail: &str) {
        let ms = elapsed.as_secs_f64() * 1000.0;
        if detail.is_empty() {
            sayln!("ckpt: {phase}: {ms:.1} ms");
        } else {
            sayln!("ckpt: {phase}: {ms:.1} ms ({detail})");
        }
    }

    fn wants_timings(&self) -> bool {
        self.timings
    }
}

/// The reporter the CLI hands the engine: notices on stderr, a progress bar when `progress`.
pub fn reporter(progress: bool) -> crate::provider::report::Reporter {
    let report = StderrReport {
        timings: std::env::var_os("CKPT_TIMING").is_some(),
    };
    crate::provider::report::Reporter::new(
        std::sync::Arc::new(report),
        crate::provider::progress::Progress::terminal(progress),
    )
}

pub use super::pager::to_stdout;

/// A path for people: as is when it is printable UTF-8, otherwise quoted with escapes.
pub fn human_path(path: &RepoPath) -> String {
    human_path_bytes(path.as_bytes())
}

/// A recorded path for people, whether or not it is a repository path (a skipped `.Git`).
pub fn human_wire_path(path: &crate::records::WirePath) -> String {
    match path.to_bytes() {
        Ok(bytes) => human_path_bytes(&bytes),
        Err(e) => format!("(unreadable path: {e})"),
    }
}

fn human_path_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_owned(),
        _ => format!("\"{}\"", bytes.escape_ascii()),
    }
}

pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `word` as one shell word, for a command the user is shown to paste: left bare when every
/// character is one no shell reads specially, else in single quotes. Every command ckpt shows
/// with an argument it did not make itself goes through here.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && !word.starts_with('=')
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@%,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn relative_age(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86400),
    }
}

/// Local time and age, e.g. `2026-11-30 06:12:03 (5 min ago)`.
pub fn human_time(record: &Record) -> String {
    match chrono::DateTime::parse_from_rfc3339(&record.time) {
        Ok(time) => {
            let local = time.with_timezone(&chrono::Local);
            let age = chrono::Utc::now().timestamp() - time.timestamp();
            format!("{} ({})", local.format("%Y-%m-%d %H:%M:%S"), relative_age(age.max(0)))
        }
        Err(_) => record.time.clone(),
    }
}

pub fn turn_step(record: &Record) -> String {
    match (record.turn, record.step) {
        (Some(turn), Some(step)) => format!("{turn}.{step}"),
        (Some(turn), None) => turn.to_string(),
        _ => "-".into(),
    }
}

pub fn list_header() -> String {
    format!(
        "{:<8}  {:<8}  {:<7}  {:<32}  {:<12}  {:>6}  {:>10}  {}",
        "ID", "PROVIDER", "TURN", "TIME", "TRIGGER", "FILES", "BYTES", "KIND"
    )
}

pub fn list_line(record: &Record) -> String {
    format!(
        "{:<8}  {:<8}  {:<7}  {:<32}  {:<12}  {:>6}  {:>10}  {}",
        record.short(),
        record.provider,
        turn_step(record),
        human_time(record),
        record.trigger.as_deref().unwrap_or("-"),
        record.files,
        human_bytes(record.bytes),
        record.kind.as_str(),
    )
}

fn push_paths(text: &mut String, title: &str, paths: &[RepoPath]) {
    if paths.is_empty() {
        return;
    }
    text.push_str(&format!("  {title} ({}):\n", paths.len()));
    for path in paths {
        text.push_str(&format!("    {}\n", human_path(path)));
    }
}

fn push_reasons(text: &mut String, title: &str, entries: &[(RepoPath, String)]) {
    if entries.is_empty() {
        return;
    }
    text.push_str(&format!("  {title} ({}):\n", entries.len()));
    for (path, reason) in entries {
        text.push_str(&format!("    {}  [{reason}]\n", human_path(path)));
    }
}

pub fn preview_text(preview: &Preview, record: &Record) -> String {
    let mut text = format!(
        "Restoring {} ({}, turn {}, {}) would:\n",
        record.short(),
        record.kind.as_str(),
        turn_step(record),
        human_time(record)
    );
    push_paths(&mut text, "overwrite or recreate", &preview.overwrite);
    push_paths(&mut text, "delete", &preview.delete);
    let left: Vec<RepoPath> = preview
        .created_after
        .iter()
        .filter(|p| !preview.delete.contains(p))
        .cloned()
        .collect();
    push_paths(
        &mut text,
        "leave in place, created after the checkpoint (--exact removes them)",
        &left,
    );
    push_reasons(&mut text, "skip, conflicts", &preview.conflicts);
    push_reasons(&mut text, "not protected, never touched", &preview.not_protected);
    text.push_str(&format!("  {} path(s) already match\n", preview.unchanged));
    if preview.overwrite.is_empty() && preview.delete.is_empty() {
        text.push_str("  nothing to change: the worktree already matches this checkpoint\n");
    }
    text
}

pub fn restore_text(report: &RestoreReport) -> String {
    let short = &report.id[..8.min(report.id.len())];
    let mut text = format!("Restored {short}:\n");
    push_paths(&mut text, "written", &report.written);
    push_paths(&mut text, "deleted", &report.deleted);
    push_paths(&mut text, "left in place (created after the checkpoint)", &report.left);
    push_reasons(
        &mut text,
        "left in place, not protected (ckpt has no copy of it)",
        &report.not_protected,
    );
    push_reasons(&mut text, "FAILED", &report.failed);
    text.push_str(&format!("  {} path(s) already matched\n", report.unchanged));
    if report.written.is_empty() && report.deleted.is_empty() && report.failed.is_empty() {
        text.push_str("  nothing needed changing: the worktree already matched\n");
    }
    text.push_str(&format!(
        "  verified: {}\n",
        if report.verified {
            "yes, every written path matches the checkpoint"
        } else {
            "NO"
        }
    ));
    if let Some(guard) = &report.guard {
        text.push_str(&format!(
            "  guard checkpoint {} holds the state before this restore; undo with: ckpt restore {} --exact --yes\n",
            &guard[..8.min(guard.len())],
            shell_word(guard)
        ));
    }
    text
}

/// How `ckpt diff` shows its result to people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffView {
    Patch,
    Stat,
    NameStatus,
}

fn paint(text: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

pub fn diff_text(files: &[FileDiff], view: DiffView, color: bool) -> String {
    let mut text = String::new();
    match view {
        DiffView::NameStatus => {
            for file in files {
                text.push_str(&format!(
                    "{}\t{}\n",
                    file.change.status.letter(),
                    human_path(&file.change.path)
                ));
            }
        }
        DiffView::Stat => {
            let width = files
                .iter()
                .map(|f| human_path(&f.change.path).len())
                .max()
                .unwrap_or(0);
            for file in files {
                let detail = if file.binary {
                    let size = |b: &Option<Vec<u8>>| b.as_ref().map(Vec::len).unwrap_or(0);
                    format!("Bin {} -> {} bytes", size(&file.old), size(&file.new))
                } else {
                    format!(
                        "{:>5} {}{}",
                        file.added + file.removed,
                        paint(&"+".repeat(file.added.min(40)), "32", color),
                        paint(&"-".repeat(file.removed.min(40)), "31", color)
                    )
                };
                text.push_str(&format!(" {:<width$} | {detail}\n", human_path(&file.change.path)));
            }
            let (added, removed) = files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
            text.push_str(&format!(
                " {} file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)\n",
                files.len()
            ));
        }
        DiffView::Patch => {
            for file in files {
                let path = human_path(&file.change.path);
                text.push_str(&paint(&format!("diff --ckpt a/{path} b/{path}\n"), "1", color));
                let (old_mode, new_mode) = (
                    mode(file.change.old.map(|i| i.kind)),
                    mode(file.change.new.map(|i| i.kind)),
                );
                match (old_mode, new_mode) {
                    (None, Some(m)) => text.push_str(&format!("new file mode {m}\n")),
                    (Some(m), None) => text.push_str(&format!("deleted file mode {m}\n")),
                    (Some(a), Some(b)) if a != b => text.push_str(&format!("old mode {a}\nnew mode {b}\n")),
                    _ => {}
                }
                if file.change.old.is_some_and(|i| i.kind == EntryKind::Gitlink)
                    || file.change.new.is_some_and(|i| i.kind == EntryKind::Gitlink)
                {
                    text.push_str("Submodule pointer changed\n");
                    continue;
                }
                if file.binary {
                    text.push_str(&format!("Binary files a/{path} and b/{path} differ\n"));
                    continue;
                }
                let old = file.old.as_deref().unwrap_or_default();
                let new = file.new.as_deref().unwrap_or_default();
                for line in crate::provider::diff::unified(&path, old, new).lines() {
                    let painted = if line.starts_with("+++") || line.starts_with("---") {
                        paint(line, "1", color)
                    } else if line.starts_with('+') {
                        paint(line, "32", color)
                    } else if line.starts_with('-') {
                        paint(line, "31", color)
                    } else if line.starts_with("@@") {
                        paint(line, "36", color)
                    } else {
                        line.to_owned()
                    };
                    text.push_str(&painted);
                    text.push('\n');
                }
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_are_quoted_wherever_a_shell_would_read_more_into_them() {
        assert_eq!(shell_word("trace:s1:1.2"), "trace:s1:1.2");
        assert_eq!(shell_word("0123abcd"), "0123abcd");
        assert_eq!(shell_word("trace:`id>x`:1.1"), "'trace:`id>x`:1.1'");
        assert_eq!(shell_word("it's $(id)"), r"'it'\''s $(id)'");
        assert_eq!(shell_word("=ls"), "'=ls'");
        assert_eq!(shell_word(""), "''");
    }
}
