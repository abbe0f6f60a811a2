//! The daemon process: one per workspace (a lock in the state directory), inotify watches on
//! every worktree directory except `.git` (added for new directories and moved-in trees, removed
//! for moved-out ones), a change log keyed by path and bounded in size, and a Unix socket server
//! answering one request per connection. It exits when the workspace disappears, when asked,
//! or after an idle timeout. It never reads file contents and never writes the worktree.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RemoveKind};
use notify::{RecursiveMode, Watcher};

use super::{rand_u64, Request, SinceAnswer, StatusAnswer, MAX_REQUEST};

/// How long the worktree and the socket must be quiet before the daemon's housekeeping runs.
pub const QUIET: Duration = Duration::from_secs(2);
use crate::provider::CkptError;
use crate::records::watch::WatchFiles;
use crate::records::WirePath;

/// More changed paths than this and the log is dropped: a full scan is cheaper than the list.
const MAX_CHANGES: usize = 20_000;
/// How often the daemon asks whether the workspace still opens the provider it serves.
const LOOK_AGAIN: Duration = Duration::from_secs(5);
/// How long the events must pause before the watches a rename made stale are renewed.
const RENEW_AFTER: Duration = Duration::from_millis(100);
/// Why tokens from before a renewal of the watches are unknown.
const RENAMED: &str = "a directory was renamed (every watch was renewed)";
/// How many events wait to be read at most (a few MB); more are dropped, and the log with them.
const MAX_QUEUED_EVENTS: usize = 16_384;
/// How long a `since` waits for its cookie to be seen.
const COOKIE_WAIT: Duration = Duration::from_secs(6);
/// How many files most recently made or written the daemon keeps naming to every snapshot
/// (see [`State::written`]).
const RECENTLY_WRITTEN: usize = 256;

/// Names whose change alters what is ignored anywhere below them.
const IGNORE_FILES: [&[u8]; 2] = [b".gitignore", b".ckptignore"];

struct State {
    root: PathBuf,
    own: Vec<PathBuf>,
    idle: Duration,
    max_changes: usize,
    instance: u64,
    seq: u64,
    changes: HashMap<Vec<u8>, u64>,
    /// The files most recently made or written, oldest first: a write through a shared memory
    /// map raises no event until the map's last user lets the file go (a snapshot between the
    /// two would miss it), so each snapshot is told these paths too and looks
    /// at their stat again (the kernel moves the mtime on such a write), whatever its token.
    /// Bounded: older files are the documented blind spot.
    written: std::collections::VecDeque<Vec<u8>>,
    /// Tokens older than this cannot be answered, for `reset_reason`.
    reset_seq: u64,
    reset_reason: String,
    cookies: HashSet<String>,
    events_seen: u64,
    watched: BTreeSet<PathBuf>,
    broken: Option<String>,
    last_fallback: Option<String>,
    last_request: Instant,
    stopping: bool,
    /// A directory was renamed and the watches are not renewed yet: nothing is vouched for.
    renewing: bool,
    /// Cookies seen while `renewing`: they count as seen once the watches are renewed.
    held_cookies: Vec<String>,
    /// When a dropped event was last noticed: a client whose cookie was made before it may
    /// wait for an event that never comes.
    last_drop: Option<std::time::SystemTime>,
}

impl State {
    fn new(root: &Path, own: &[PathBuf], idle: Duration, max_changes: usize) -> State {
        State {
            root: root.to_path_buf(),
            own: own.to_vec(),
            idle,
            max_changes,
            instance: rand_u64(),
            seq: 0,
            changes: HashMap::new(),
            written: std::collections::VecDeque::new(),
            reset_seq: 0,
            reset_reason: String::new(),
            cookies: HashSet::new(),
            events_seen: 0,
            watched: BTreeSet::new(),
            broken: None,
            last_fallback: None,
            last_request: Instant::now(),
            stopping: false,
            last_drop: None,
            renewing: false,
            held_cookies: Vec::new(),
        }
    }

    fn token(&self) -> String {
        format!("{:016x}:{}", self.instance, self.seq)
    }

    fn reset(&mut self, reason: String) {
        self.seq += 1;
        self.changes.clear();
        self.reset_seq = self.seq;
        self.reset_reason = reason;
    }

    fn changed(&mut self, rel: Vec<u8>) {
        self.seq += 1;
        self.changes.insert(rel, self.seq);
        if self.changes.len() > self.max_changes {
            let reason = format!("more than {} paths changed", self.max_changes);
            self.reset(reason);
        }
    }

    fn answer_since(&mut self, token: Option<&str>) -> SinceAnswer {
        let unknown = |reason: String| SinceAnswer {
            token: self.token(),
            changed: None,
            unknown: Some(reason),
        };
        let answer = if let Some(broken) = &self.broken {
            unknown(broken.clone())
        } else if self.renewing {
            unknown(RENAMED.into())
        } else {
            match token.map(parse_token) {
                None => unknown("no token yet (first watched snapshot)".into()),
                Some(None) => unknown("the token is not one of this daemon's".into()),
                Some(Some((instance, _))) if instance != self.instance => {
                    unknown("the watch daemon restarted since the last snapshot".into())
                }
                Some(Some((_, seq))) if seq < self.reset_seq => unknown(self.reset_reason.clone()),
                Some(Some((_, seq))) if seq > self.seq => unknown("the token is from the future".into()),
                Some(Some((_, seq))) => {
                    // A workspace keeps one token, replaced under its lock, so no older token
                    // is asked after this one: what came before it is forgotten, and the log
                    // (and its bound) counts the changes since the asking snapshot's token,
                    // not since the oldest one ever given.
                    self.changes.retain(|_, at| *at > seq);
                    if seq > self.reset_seq {
                        self.reset_seq = seq;
                        self.reset_reason =
                            "a later token was asked for since (the daemon forgets what came before it)".into();
                    }
                    let mut paths: Vec<&Vec<u8>> = self.changes.keys().chain(self.written.iter()).collect();
                    paths.sort();
                    paths.dedup();
                    SinceAnswer {
                        token: self.token(),
                        changed: Some(paths.into_iter().map(|p| WirePath::from_bytes(p)).collect()),
                        unknown: None,
                    }
                }
            }
        };
        self.last_fallback = answer.unknown.clone();
        answer
    }
}

fn parse_token(text: &str) -> Option<(u64, u64)> {
    let (instance, seq) = text.split_once(':')?;
    Some((u64::from_str_radix(instance, 16).ok()?, seq.parse().ok()?))
}

struct Shared {
    state: Mutex<State>,
    seen: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Resets the log when the watcher dropped an event, and wakes the clients waiting for
    /// their cookie: it may have been the one dropped, and the answer is "unknown" anyway.
    fn note_dropped(&self, dropped: &std::sync::atomic::AtomicBool) {
        if dropped.swap(false, std::sync::atomic::Ordering::SeqCst) {
            let mut state = self.lock();
            state.reset("events came faster than the daemon could read them".into());
            state.last_drop = Some(std::time::SystemTime::now());
            self.seen.notify_all();
        }
    }
}

/// Watches `dir` and everything below it (`.git` directories left out); false (with the state
/// broken) at the watch limit. Each directory is watched before it is listed, so an entry made
/// meanwhile is either listed or reported by the new watch.
fn watch_tree(watcher: &mut impl Watcher, dir: &Path, state: &Mutex<State>) -> bool {
    match watcher.watch(dir, RecursiveMode::NonRecursive) {
        Ok(()) => {
            state
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .watched
                .insert(dir.to_path_buf());
        }
        Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => {
            let mut state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            state.broken = Some(format!(
                "the inotify watch limit was reached after {} directories (raise fs.inotify.max_user_watches)",
                state.watched.len()
            ));
            return false;
        }
        // Gone again already: its parent's event reports it.
        Err(_) => return true,
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return true;
    };
    for entry in entries.flatten() {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        // No repository's own directory is watched: the worktree's, or a nested repository's
        // (never entered by a capture either).
        if !is_dir || entry.file_name() == ".git" {
            continue;
        }
        let path = entry.path();
        let own = state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .own
            .contains(&path);
        if own {
            continue;
        }
        if !watch_tree(watcher, &path, state) {
            return false;
        }
    }
    true
}

fn unwatch_tree(watcher: &mut impl Watcher, dir: &Path, state: &Mutex<State>) {
    let below: Vec<PathBuf> = {
        let state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state
            .watched
            .range(dir.to_path_buf()..)
            .take_while(|p| p.starts_with(dir))
            .cloned()
            .collect()
    };
    let mut state_guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for path in below {
        watcher.unwatch(&path).ok();
        state_guard.watched.remove(&path);
    }
}

/// Runs the daemon for the workspace at `root` until it is stopped, idle, or the workspace is
/// gone. `files` are its state files; one daemon per workspace (a second one refuses to start).
/// `own` are ckpt's own directories inside the worktree (a store kept there): never watched.
/// `on_quiet` runs on this thread once the worktree and the socket have been quiet for
/// [`QUIET`], and again only after the next activity: housekeeping the snapshots leave for a
/// moment when no agent waits on them. Activity since the last run gets one more on the way out.
pub fn run(
    root: &Path,
    files: &WatchFiles,
    own: &[PathBuf],
    repository: Option<&Path>,
    idle: Duration,
    on_quiet: &mut dyn FnMut(),
    still_served: &dyn Fn() -> bool,
) -> Result<(), CkptError> {
    crate::fault::pause("watch:daemon-start");
    // Started for a workspace that went away meanwhile (removed while this process came up):
    // nothing to watch, and taking the daemon lock would create its state directories again.
    if !root.is_dir() {
        return Err(CkptError::NotFound(format!(
            "the workspace {} is gone; no watch daemon started",
            root.display()
        )));
    }
    // Removed between that look and the lock: the lock's directories are made only below a git
    // directory (or copy store workspace) that still exists, so nothing is brought back.
    crate::fault::pause("watch:daemon-lock");
    // A daemon that was just asked to stop may still be on its way out: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    let lock = loop {
        match files.try_lock_daemon()? {
            Some(lock) => break lock,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            None => {
                return Err(CkptError::Refused(format!(
                    "a watch daemon already runs for {}",
                    root.display()
                )))
            }
        }
    };
    let cookies = files.cookies();
    let shared = Arc::new(Shared {
        state: Mutex::new(State::new(
            root,
            own,
            idle,
            // A smaller bound, for tests that must see the log dropped.
            std::env::var("CKPT_WATCH_MAX_CHANGES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(MAX_CHANGES),
        )),
        seen: Condvar::new(),
    });
    // Bounded, and never blocking the watcher's thread (a blocked one would deadlock with the
    // watch this thread adds for a new directory): an event that finds the queue full is
    // dropped and marks the log as unvouchable, so churn faster than the daemon can read it
    // costs a walk, never memory (an unbounded queue grew a daemon to 4 GB).
    let queued = std::env::var("CKPT_WATCH_MAX_QUEUED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_QUEUED_EVENTS);
    let (sender, events) = std::sync::mpsc::sync_channel(queued);
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropped_by_watcher = Arc::clone(&dropped);
    let on_event = move |event: notify::Result<notify::Event>| {
        // Reads (every program's, ckpt's own walks too) are no changes: they never take room.
        if matches!(&event, Ok(e) if is_read(&e.kind)) {
            return;
        }
        if let Err(std::sync::mpsc::TrySendError::Full(_)) = sender.try_send(event) {
            dropped_by_watcher.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    };
    let mut watcher = notify::recommended_watcher(on_event).map_err(|e| CkptError::Io {
        path: root.to_path_buf(),
        source: std::io::Error::other(format!("cannot start watching: {e}")),
    })?;
    watch_tree(&mut watcher, root, &shared.state);
    // Cookies live in the state directory: below `.git` (not watched) or outside the worktree.
    watcher
        .watch(&cookies, RecursiveMode::NonRecursive)
        .map_err(|e| CkptError::Io {
            path: cookies.clone(),
            source: std::io::Error::other(format!("cannot watch the cookie directory: {e}")),
        })?;
    // Only now, with every watch in place, may a client get a token.
    let listener = files.bind_socket(&lock)?;
    let server = {
        let shared = Arc::clone(&shared);
        let cookies = cookies.clone();
        std::thread::spawn(move || serve(listener, &cookies, &shared))
    };
    let root_buf = root.to_path_buf();
    let mut last_event = Instant::now();
    let mut quiet_done = true;
    let mut renew = false;
    let mut next_look = Instant::now() + LOOK_AGAIN;
    loop {
        // Watches to renew wait for a pause in the events: a burst of renames renews them once.
        let wait = if renew { RENEW_AFTER } else { Duration::from_millis(500) };
        match events.recv_timeout(wait) {
            Ok(event) => {
                crate::fault::pause("watch:daemon-read");
                // Before this event (a cookie, perhaps) is seen: what was dropped came first.
                shared.note_dropped(&dropped);
                renew |= handle(event, &root_buf, &cookies, &mut watcher, &shared);
                // A client waits: the watches are renewed now, not after the renames stop.
                if renew && !shared.lock().held_cookies.is_empty() {
                    renew = false;
                    renew_watches(&mut watcher, &root_buf, &shared);
                }
                last_event = Instant::now();
                quiet_done = false;
            }
            // The dropped event may have been a cookie a client waits for.
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                shared.note_dropped(&dropped);
                if std::mem::take(&mut renew) {
                    renew_watches(&mut watcher, &root_buf, &shared);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let mut state = shared.lock();
        let idle_for = state.last_request.elapsed();
        if idle_for < QUIET {
            quiet_done = false;
        } else if !quiet_done && last_event.elapsed() >= QUIET && !state.stopping {
            quiet_done = true;
            drop(state);
            on_quiet();
            continue;
        }
        // Without its socket nobody can reach it, without its cookie directory nobody can sync
        // with it: a daemon that can serve no one ends (the next snapshot starts a fresh one).
        let unreachable = !files.socket().exists() || !cookies.is_dir();
        // A repository removed under a worktree that is still there (a temp dir half removed
        // while this daemon wrote its files, seen in the tests): nothing left to serve.
        let repository_gone = repository.is_some_and(|marker| std::fs::symlink_metadata(marker).is_err());
        // The workspace now opens another provider (a repository's first commit moves it from
        // the copy store to git): this daemon's socket is no one's to ask any more.
        let superseded = Instant::now() >= next_look && {
            next_look = Instant::now() + LOOK_AGAIN;
            drop(state);
            let superseded = !still_served();
            state = shared.lock();
            superseded
        };
        if !root.is_dir() || unreachable || repository_gone || superseded {
            quiet_done = true;
            break;
        }
        if state.stopping || idle_for > idle {
            break;
        }
    }
    files.unbind_socket(&lock);
    drop(server);
    // The housekeeping the last activity left, when stopped (or idle) before a quiet moment
    // came (a session that ends right after its last snapshot): after the socket is gone, so
    // nobody waits for it. Not when the workspace or its state went away.
    if !quiet_done {
        on_quiet();
    }
    Ok(())
}

/// Closing a file written through (also through a memory map) is a change; opening or reading
/// one is not.
fn is_read(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(kind) if *kind != AccessKind::Close(AccessMode::Write))
}

/// Handles one event; true when it renamed a directory, so every watch must be renewed (the
/// caller does it once the events stop coming: a storm of renames renews them once).
fn handle(
    event: notify::Result<notify::Event>,
    root: &Path,
    cookies: &Path,
    watcher: &mut impl Watcher,
    shared: &Shared,
) -> bool {
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            let mut state = shared.lock();
            if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) {
                state.broken = Some("the inotify watch limit was reached (raise fs.inotify.max_user_watches)".into());
            } else {
                state.reset(format!("watch error: {e}"));
            }
            return false;
        }
    };
    if event.need_rescan() {
        shared.lock().reset("the kernel's event queue overflowed".into());
        return false;
    }
    if is_read(&event.kind) {
        return false;
    }
    let renamed = matches!(event.kind, EventKind::Modify(ModifyKind::Name(_)));
    let mut rebuild = false;
    for path in &event.paths {
        if let Ok(name) = path.strip_prefix(cookies) {
            let mut state = shared.lock();
            let name = name.to_string_lossy().into_owned();
            if state.renewing {
                // Seen once the watches are renewed, so the answer's token comes after that.
                state.held_cookies.push(name);
            } else {
                state.cookies.insert(name);
                shared.seen.notify_all();
            }
            continue;
        }
        if shared.lock().own.iter().any(|own| path.starts_with(own)) {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let mut rel_bytes = rel.as_os_str().as_bytes().to_vec();
        // A `.git` below the root makes (or unmakes) its directory a nested repository: that
        // directory changed. The worktree's own `.git` is the fingerprint's business.
        // A nested repository's own files (its `.git`) are never a recently written file: the
        // directory named for them would stay in every snapshot's scope.
        let mut inside_git = false;
        if let Some(at) = rel_bytes.split(|&b| b == b'/').position(|c| c == b".git") {
            if at == 0 {
                continue;
            }
            inside_git = true;
            let keep: usize = rel_bytes
                .split(|&b| b == b'/')
                .take(at)
                .map(|c| c.len() + 1)
                .sum::<usize>()
                - 1;
            rel_bytes.truncate(keep);
        }
        if rel_bytes.is_empty() {
            continue;
        }
        let is_dir_now = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
        // A renamed directory leaves inotify naming its subdirectories by their old paths: every
        // watch is renewed instead (renames of directories are rare; a wrong path is not).
        if renamed && (is_dir_now || shared.lock().watched.contains(path)) {
            rebuild = true;
        }
        let became_dir = matches!(event.kind, EventKind::Create(CreateKind::Folder)) && !renamed;
        let went_away = matches!(event.kind, EventKind::Remove(RemoveKind::Folder));
        {
            let mut state = shared.lock();
            state.events_seen += 1;
            if Path::new(std::ffi::OsStr::from_bytes(&rel_bytes))
                .file_name()
                .is_some_and(|n| IGNORE_FILES.contains(&n.as_bytes()))
            {
                state.reset(format!("an ignore file changed: {}", rel.display()));
                continue;
            }
            state.changed(rel_bytes.clone());
            // A file written or made (not removed, renamed or a directory). A name that is no
            // repository path would make every later scope unusable.
            let written = matches!(
                event.kind,
                EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Modify(ModifyKind::Data(_))
                    | EventKind::Modify(ModifyKind::Any)
                    | EventKind::Create(CreateKind::File)
            );
            if written && !is_dir_now && !inside_git && crate::verbs::RepoPath::check(&rel_bytes).is_ok() {
                state.written.retain(|p| *p != rel_bytes);
                state.written.push_back(rel_bytes.clone());
                if state.written.len() > RECENTLY_WRITTEN {
                    state.written.pop_front();
                }
            }
        }
        if went_away {
            unwatch_tree(watcher, path, &shared.state);
        }
        if became_dir && watch_tree(watcher, path, &shared.state) {
            // What landed in the new tree before its watches were in place is covered by this
            // second mark: a token taken after it was taken after the watches.
            shared.lock().changed(rel_bytes);
        }
    }
    if rebuild {
        // Until the watches are renewed nothing is vouched for; a client's cookie seen meanwhile
        // makes them renewed at once (one renewal per client, not one per rename).
        shared.lock().renewing = true;
    }
    rebuild
}

/// Renews every watch (inotify names the subdirectories of a renamed directory by their old
/// paths); tokens from before cannot be vouched for.
fn renew_watches(watcher: &mut impl Watcher, root: &Path, shared: &Shared) {
    unwatch_tree(watcher, root, &shared.state);
    let watched = watch_tree(watcher, root, &shared.state);
    let mut state = shared.lock();
    state.renewing = false;
    if watched {
        state.reset(RENAMED.into());
    }
    let held = std::mem::take(&mut state.held_cookies);
    state.cookies.extend(held);
    shared.seen.notify_all();
}

fn serve(listener: UnixListener, cookies: &Path, shared: &Shared) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let stop = answer(stream, cookies, shared);
        if stop {
            shared.lock().stopping = true;
            return;
        }
    }
}

/// Answers one connection; true when it asked the daemon to stop.
fn answer(stream: UnixStream, cookies: &Path, shared: &Shared) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    stream.set_write_timeout(Some(Duration::from_secs(5))).ok();
    let mut line = String::new();
    let Ok(reader) = stream.try_clone() else { return false };
    if BufReader::new(reader.take(MAX_REQUEST as u64))
        .read_line(&mut line)
        .is_err()
    {
        return false;
    }
    shared.lock().last_request = Instant::now();
    let (reply, stop) = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Since { v: 1, token, cookie }) if valid_cookie(&cookie) => {
            let deadline = Instant::now() + COOKIE_WAIT;
            // A drop noticed after the cookie was made may have been its event (coarse file
            // times only make this say so more often, never less).
            let made = std::fs::metadata(cookies.join(&cookie))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            let dropped_since = |state: &State| state.last_drop.is_some_and(|at| at >= made);
            let mut state = shared.lock();
            while !state.cookies.contains(&cookie) && !dropped_since(&state) && Instant::now() < deadline {
                state = shared
                    .seen
                    .wait_timeout(state, deadline.saturating_duration_since(Instant::now()))
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            }
            let answer = if state.cookies.remove(&cookie) || dropped_since(&state) {
                // After a drop, the reset makes any earlier token unknown.
                state.answer_since(token.as_deref())
            } else {
                state.last_fallback = Some("the daemon did not see the sync cookie in time".into());
                SinceAnswer {
                    token: state.token(),
                    changed: None,
                    unknown: state.last_fallback.clone(),
                }
            };
            (serde_json::to_string(&answer), false)
        }
        Ok(Request::Status { v: 1 }) => {
            let state = shared.lock();
            let status = StatusAnswer {
                pid: std::process::id(),
                root: WirePath::from_bytes(state.root.as_os_str().as_bytes()),
                token: state.token(),
                watched_dirs: state.watched.len(),
                events_seen: state.events_seen,
                pending_changes: state.changes.len(),
                last_fallback: state.last_fallback.clone(),
                broken: state.broken.clone(),
                idle_timeout_secs: state.idle.as_secs(),
            };
            (serde_json::to_string(&status), false)
        }
        Ok(Request::Stop { v: 1 }) => (Ok(r#"{"stopping":true}"#.to_owned()), true),
        _ => (Ok(r#"{"error":"bad request"}"#.to_owned()), false),
    };
    let mut stream = stream;
    if let Ok(mut text) = reply {
        text.push('\n');
        stream.write_all(text.as_bytes()).ok();
    }
    stop
}

/// A cookie name is one of ours: short, no separators, nothing hidden.
fn valid_cookie(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed_paths(answer: &SinceAnswer) -> Option<usize> {
        answer.changed.as_ref().map(Vec::len)
    }

    /// Rounds of a few hundred changes, each asked for with the previous answer's token, never
    /// add up to the bound (issue #42: a snapshot with 320 changes fell back after ~63 rounds).
    #[test]
    fn changes_are_counted_from_the_asking_token_not_the_oldest() {
        let mut state = State::new(Path::new("/w"), &[], Duration::from_secs(60), 1_000);
        let mut token = state.answer_since(None).token;
        for round in 0..20 {
            for i in 0..300 {
                state.changed(format!("r{round}/f{i}").into_bytes());
            }
            let answer = state.answer_since(Some(&token));
            assert_eq!(changed_paths(&answer), Some(300), "round {round}: {:?}", answer.unknown);
            token = answer.token;
        }
        assert!(
            state.changes.len() <= 300,
            "the log kept {} entries",
            state.changes.len()
        );
    }

    /// The token a failed snapshot left is asked again and still answered in full; a token older
    /// than one asked since is refused, not answered with what was forgotten.
    #[test]
    fn the_asking_token_stays_answerable_and_older_ones_are_refused() {
        let mut state = State::new(Path::new("/w"), &[], Duration::from_secs(60), 1_000);
        let first = state.answer_since(None).token;
        state.changed(b"a".to_vec());
        let second = state.answer_since(Some(&first)).token;
        state.changed(b"b".to_vec());
        assert_eq!(changed_paths(&state.answer_since(Some(&second))), Some(1));
        // Asked again (the snapshot that got the answer failed before keeping its token).
        assert_eq!(changed_paths(&state.answer_since(Some(&second))), Some(1));
        let older = state.answer_since(Some(&first));
        assert_eq!(changed_paths(&older), None);
        assert!(older.unknown.unwrap_or_default().contains("later token"));
    }
}
