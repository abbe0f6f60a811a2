//! The watch daemon: an accelerator that tells a snapshot which paths changed since a token,
//! like git's fsmonitor protocol v2 — never the source of truth. The daemon (`daemon.rs`) keeps
//! inotify watches (through `notify`) on every directory of the worktree except `.git`; a
//! snapshot asks it over a Unix socket in the state directory, after writing a cookie file the
//! daemon must see first, so no event still in flight is missed. Anything the daemon cannot vouch
//! for (no daemon, a restart, an overflowed queue, the watch limit, an ignore file changed) is
//! answered "unknown", and the snapshot scans in full. This module never writes the worktree.

mod daemon;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::records::watch::WatchFiles;
use crate::records::WirePath;

pub use daemon::run;

/// The fallback reason when no daemon listens for the workspace (the CLI then starts one).
pub const NO_DAEMON: &str = "no watch daemon runs for this workspace";

/// The protocol's version.
const VERSION: u8 = 1;
/// A request line longer than this is refused.
const MAX_REQUEST: usize = 4096;
/// How long a snapshot waits for the daemon's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(8);
/// How long `status` and `stop` wait: the daemon answers them from what it holds, without
/// syncing on the worktree, so a daemon silent this long is frozen (stopped, or wedged), and a
/// user asking how things stand should not wait seconds to be told.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);

/// What a client asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Which paths changed since `token` (none: just give a token), once the daemon has seen
    /// the cookie file `cookie`.
    Since {
        v: u8,
        token: Option<String>,
        cookie: String,
    },
    Status {
        v: u8,
    },
    Stop {
        v: u8,
    },
}

/// The daemon's answer to `since`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinceAnswer {
    /// The token to ask from next time: every change after it will be reported.
    pub token: String,
    /// Changed paths (files or directories: everything below a directory may have changed),
    /// when the daemon can vouch for them.
    pub changed: Option<Vec<WirePath>>,
    /// Why it cannot, when it cannot.
    pub unknown: Option<String>,
}

/// The daemon's answer to `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub pid: u32,
    pub root: WirePath,
    pub token: String,
    pub watched_dirs: usize,
    pub events_seen: u64,
    pub pending_changes: usize,
    /// Why the last `since` could not be answered with a path list, if one could not.
    pub last_fallback: Option<String>,
    /// A failure that keeps every answer "unknown" (e.g. the inotify watch limit).
    pub broken: Option<String>,
    pub idle_timeout_secs: u64,
}

/// What a snapshot learns from the daemon.
#[derive(Debug, Clone)]
pub enum Changes {
    /// No daemon answers for this workspace.
    NoDaemon,
    /// The daemon answered; `paths` is `None` when it cannot vouch for the changes.
    Answered {
        token: String,
        paths: Option<Vec<WirePath>>,
        unknown: Option<String>,
    },
    /// The daemon is there but the exchange failed.
    Failed(String),
}

/// The longest answer read (a change list of 20,000 paths is a few MB).
const MAX_ANSWER: u64 = 32 << 20;

/// One request and its answer, within `timeout` in all: a frozen daemon (stopped, or with a
/// full backlog that blocks `connect`) costs a snapshot seconds, never a hang.
fn exchange<T: for<'de> Deserialize<'de> + Send + 'static>(
    files: &WatchFiles,
    request: &Request,
    timeout: Duration,
) -> Result<Option<T>, String> {
    let socket = files.socket();
    let line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    let (sender, answer) = std::sync::mpsc::channel();
    // The thread is left behind if the daemon never answers; the process ends soon after.
    std::thread::spawn(move || {
        sender.send(exchange_now::<T>(&socket, line, timeout)).ok();
    });
    answer
        .recv_timeout(timeout + Duration::from_millis(500))
        .unwrap_or_else(|_| {
            Err(format!(
                "the watch daemon did not answer within {} s (frozen? `ckpt watch stop` ends it)",
                timeout.as_secs()
            ))
        })
}

fn exchange_now<T: for<'de> Deserialize<'de>>(
    socket: &std::path::Path,
    mut line: String,
    timeout: Duration,
) -> Result<Option<T>, String> {
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(format!("cannot reach the watch daemon: {e}")),
    };
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("cannot talk to the watch daemon: {e}"))?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(stream, MAX_ANSWER))
        .read_line(&mut answer)
        .map_err(|e| format!("the watch daemon did not answer: {e}"))?;
    serde_json::from_str(&answer)
        .map(Some)
        .map_err(|e| format!("the watch daemon's answer is not understood: {e}"))
}

/// Asks the daemon of this workspace what changed since `token`, syncing on a fresh cookie.
pub fn changes_since(files: &WatchFiles, token: Option<&str>) -> Changes {
    if !files.socket().exists() {
        return Changes::NoDaemon;
    }
    let name = format!("c-{}-{:x}", std::process::id(), rand_u64());
    let cookie = match files.write_cookie(&name) {
        Ok(path) => path,
        Err(e) => return Changes::Failed(format!("cannot write the sync cookie: {e}")),
    };
    let request = Request::Since {
        v: VERSION,
        token: token.map(str::to_owned),
        cookie: name,
    };
    let answer = exchange::<SinceAnswer>(files, &request, ANSWER_TIMEOUT);
    files.remove_cookie(&cookie);
    match answer {
        Ok(None) => Changes::NoDaemon,
        Ok(Some(answer)) => Changes::Answered {
            token: answer.token,
            paths: answer.changed,
            unknown: answer.unknown,
        },
        Err(e) => Changes::Failed(e),
    }
}

/// The daemon's status, `None` when none runs for this workspace.
pub fn status(files: &WatchFiles) -> Result<Option<StatusAnswer>, String> {
    exchange(files, &Request::Status { v: VERSION }, CONTROL_TIMEOUT)
}

/// Asks the daemon to stop and waits (up to 5 s) until its socket is gone; false when none was
/// running.
pub fn stop(files: &WatchFiles) -> Result<bool, String> {
    let was_running = match exchange::<serde_json::Value>(files, &Request::Stop { v: VERSION }, CONTROL_TIMEOUT) {
        Ok(answer) => answer.is_some(),
        // Frozen or wedged: end it by the pid its lock file names (only if that is a daemon).
        Err(why) => match files.daemon_pid() {
            Some(pid) if crate::verbs::end_watch_daemon(pid) => {
                files.remove_stale_socket();
                return Ok(true);
            }
            _ => return Err(why),
        },
    };
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    while was_running && files.socket().exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(was_running)
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).ok();
    u64::from_le_bytes(bytes)
}
