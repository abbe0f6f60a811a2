//! `ckpt watch start|stop|status|run`, and starting the daemon for `snapshot --watch`. `start`
//! runs this same binary as `ckpt -C <workspace> watch run` in its own process group, detached
//! from the terminal; nothing else is ever spawned here.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::args::WatchAction;
use super::exit::Exit;
use super::output::Output;
use super::wire::{WatchRecord, WatchStatusRecord};
use crate::provider::{watch, CkptError, Provider};
use crate::records::watch::WatchFiles;

/// How long `start` waits for a new daemon to answer (its watches are in place by then).
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn watch(provider: &dyn Provider, action: &WatchAction, out: &Output) -> Result<Exit, CkptError> {
    let files = provider.watch_files();
    match action {
        // Run by `run_daemon`, after the provider (and the store lock it holds) is dropped.
        WatchAction::Run { .. } => Ok(Exit::Usage),
        WatchAction::Start => {
            let started = start(provider.workdir(), &files)?;
            let status = daemon_status(&files)?;
            out.record(&WatchRecord {
                action: "start",
                running: status.is_some(),
                started,
            });
            out.human(&match (&status, started) {
                (Some(s), true) => format!("watch daemon started (pid {}, {} directories)", s.pid, s.watched_dirs),
                (Some(s), false) => format!("watch daemon already running (pid {})", s.pid),
                (None, _) => "watch daemon did not come up".into(),
            });
            Ok(if status.is_some() { Exit::Ok } else { Exit::Failed })
        }
        WatchAction::Stop => {
            let was_running = watch::stop(&files).map_err(daemon_error)?;
            out.record(&WatchRecord {
                action: "stop",
                running: false,
                started: false,
            });
            out.human(if was_running {
                "watch daemon stopped"
            } else {
                "no watch daemon was running"
            });
            Ok(Exit::Ok)
        }
        WatchAction::Status => {
            let status = daemon_status(&files)?;
            out.record(&WatchStatusRecord::new(status.as_ref()));
            match &status {
                None => out.human("no watch daemon runs for this workspace (start one: ckpt watch start)"),
                Some(s) => out.human(&format!(
                    "watch daemon pid {}: {} directories watched, {} events seen, {} paths changed since the last snapshot that asked it\n  token {}\n  last fallback: {}{}",
                    s.pid,
                    s.watched_dirs,
                    s.events_seen,
                    s.pending_changes,
                    s.token,
                    s.last_fallback.as_deref().unwrap_or("none"),
                    s.broken.as_deref().map(|b| format!("\n  BROKEN (every snapshot scans in full): {b}")).unwrap_or_default(),
                )),
            }
            Ok(Exit::Ok)
        }
    }
}

fn daemon_error(why: String) -> CkptError {
    CkptError::Io {
        path: "watch daemon".into(),
        source: std::io::Error::other(why),
    }
}

fn daemon_status(files: &WatchFiles) -> Result<Option<watch::StatusAnswer>, CkptError> {
    watch::status(files).map_err(daemon_error)
}

/// Runs the daemon for the workspace `provider` opened, after dropping the provider: the daemon
/// lives for minutes and must not hold the copy store's lock (`ckpt gc` waits for it).
/// `reopened` names the socket of the provider the workspace opens now: when it is another,
/// the daemon ends.
pub(super) fn run_daemon(
    provider: Box<dyn Provider>,
    idle_seconds: u64,
    reopened: &dyn Fn() -> Option<std::path::PathBuf>,
) -> Result<Exit, CkptError> {
    let (root, files, own, repository) = (
        provider.workdir().to_path_buf(),
        provider.watch_files(),
        provider.own_dirs(),
        provider.repository_marker(),
    );
    drop(provider);
    // When the worktree is quiet: merge the packs the watched snapshots wrote (opened afresh
    // each time, so the daemon holds no repository or store between them).
    let mut housekeeping = || {
        let reporter = super::output::reporter(false);
        if let Ok(provider) = crate::provider::open(&root, crate::provider::ProviderChoice::Git, reporter, None) {
            provider.merge_own_packs(crate::provider::engine::MAX_CKPT_PACKS).ok();
        }
    };
    watch::run(
        &root,
        &files,
        &own,
        repository.as_deref(),
        Duration::from_secs(idle_seconds),
        &mut housekeeping,
        // A workspace that cannot be opened now is the other checks' business.
        &|| reopened().is_none_or(|socket| socket == files.socket()),
    )?;
    Ok(Exit::Ok)
}

/// The `--provider` this process was given, for the daemon it starts: without it, a daemon
/// for `--provider copy` in a repository with commits would serve git instead (and the start
/// would wait for the copy store's socket in vain).
static PROVIDER_FLAG: std::sync::OnceLock<Option<super::args::ProviderArg>> = std::sync::OnceLock::new();

/// Remembers the `--provider` the command line gave (once per process).
pub(super) fn remember_provider_flag(flag: Option<super::args::ProviderArg>) {
    PROVIDER_FLAG.get_or_init(|| flag);
}

/// Starts the daemon for `root` unless one answers already; true if this call started it.
pub(super) fn start(root: &Path, files: &WatchFiles) -> Result<bool, CkptError> {
    if daemon_status(files)?.is_some() {
        return Ok(false);
    }
    files.check_daemon_lock_file()?;
    // One start at a time: the one that waited finds the daemon the other started.
    let _starting = files.lock_start()?;
    if daemon_status(files)?.is_some() {
        return Ok(false);
    }
    let exe = std::env::current_exe().map_err(|source| CkptError::Io {
        path: "the ckpt executable".into(),
        source,
    })?;
    let mut command = Command::new(exe);
    command.arg("-C").arg(root);
    if let Some(flag) = PROVIDER_FLAG.get().copied().flatten() {
        if let Some(value) = clap::ValueEnum::to_possible_value(&flag) {
            command.args(["--provider", value.get_name()]);
        }
    }
    command
        .args(["watch", "run"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().map_err(|source| CkptError::Io {
        path: "ckpt watch run".into(),
        source,
    })?;
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if daemon_status(files)?.is_some() {
            // The daemon outlives this process; its exit status is nobody's business here.
            std::thread::spawn(move || child.wait());
            return Ok(true);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(daemon_error(format!("the watch daemon exited at once ({status})")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(daemon_error(format!(
        "the watch daemon did not answer within {} s",
        START_TIMEOUT.as_secs()
    )))
}
