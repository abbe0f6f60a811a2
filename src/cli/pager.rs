//! The pager for long human output, as git's: `diff`, and a `list` longer than the screen, go
//! through `$CKPT_PAGER`, else `$PAGER`, else `less` (with `LESS=FRX` when `LESS` is unset, so
//! colours pass and a text shorter than the screen is just printed). Only when stdout is a
//! terminal, never with `--json` or `--no-pager`; an empty or `cat` pager means none. It runs
//! the user's own pager command through `sh -c` (as git does), never git, and nothing else.

use std::io::{IsTerminal, Write};
use std::process::{Command, Stdio};

/// Whether output may be paged at all: a terminal, no `--json`, no `--no-pager`.
#[derive(Clone, Copy)]
pub struct Paging(bool);

impl Paging {
    pub fn decide(json: bool, no_pager: bool) -> Self {
        Paging(!json && !no_pager && std::io::stdout().is_terminal())
    }

    /// `text` through the pager when paging is on; otherwise (or when no pager can run)
    /// straight to stdout.
    pub fn show(self, text: &str) {
        if !self.0 || !through_pager(text) {
            to_stdout(text);
        }
    }

    /// Like [`Self::show`], but pages only a text taller than the terminal.
    pub fn show_if_long(self, text: &str) {
        let rows = console::Term::stdout()
            .size_checked()
            .map(|(rows, _)| usize::from(rows));
        let long = rows.is_some_and(|rows| text.lines().count() >= rows);
        Paging(self.0 && long).show(text);
    }
}

/// The pager command the user chose, `None` for no pager.
fn pager_command() -> Option<String> {
    let chosen = ["CKPT_PAGER", "PAGER"]
        .iter()
        .find_map(|name| std::env::var(name).ok())
        .unwrap_or_else(|| "less".into());
    let chosen = chosen.trim();
    (!chosen.is_empty() && chosen != "cat").then(|| chosen.to_owned())
}

/// Writes `text` into the pager and waits for it; false if no pager could be started. A pager
/// quit early (`q` in less) is the reader's choice, not an error.
fn through_pager(text: &str) -> bool {
    let Some(command) = pager_command() else {
        return false;
    };
    let mut pager = Command::new("sh");
    pager.arg("-c").arg(&command).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        pager.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        pager.env("LV", "-c");
    }
    let Ok(mut child) = pager.spawn() else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A closed pipe means the reader quit; anything else is said, and the pager still awaited.
        if let Err(e) = stdin.write_all(text.as_bytes()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                sayln!("ckpt: cannot write to the pager {command:?}: {e}");
            }
        }
    }
    // 127: the shell could not find the pager. The text is still owed to the reader.
    if child.wait().is_ok_and(|status| status.code() == Some(127)) {
        sayln!("ckpt: cannot run the pager {command:?}; showing the text directly");
        return false;
    }
    true
}

/// Writes `text` to stdout. A reader that went away (`ckpt list | head -1`) ends the process
/// quietly with the closed-pipe status instead of a panic; other write errors are reported.
pub fn to_stdout(text: &str) {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(super::exit::Exit::ClosedPipe.code())
        }
        Err(e) => {
            // Whoever reads stdout gets nothing more: say so once and end as failed, as git does.
            sayln!("ckpt: error: cannot write to standard output: {e}");
            std::process::exit(super::exit::Exit::Failed.code())
        }
    }
}
