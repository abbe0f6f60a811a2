//! The watch daemon's files in a workspace's state directory: `watch/` (0700) holding the
//! daemon's lock, its socket, the cookie files a snapshot writes to sync with it, and `base.json`
//! — the token a snapshot's capture started from, with the checkpoint it produced and a
//! fingerprint of the git state it saw. Owns only those files; never touches the worktree.

use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    create_own_dirs, io_error, refuse_linked_state_dir, replace_unsynced, try_lock_file, RecordsError, OWN_STATE_LEVELS,
};

pub(super) const WATCH_DIR: &str = "watch";
/// The lock one daemon per workspace holds; it names its pid.
pub(super) const DAEMON_LOCK_FILE: &str = "daemon.lock";
const START_LOCK_FILE: &str = "start.lock";
pub(super) const BASE_FILE: &str = "base.json";

/// Where the watch daemon of one workspace keeps its files.
#[derive(Debug, Clone)]
pub struct WatchFiles {
    dir: PathBuf,
}

/// What the last watched snapshot started from: the daemon's token taken before its capture,
/// the checkpoint it produced (or found unchanged), and the git state around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchBase {
    pub token: String,
    pub checkpoint: String,
    pub fingerprint: String,
    /// Some file that capture protected has other hard links, possibly outside the worktree:
    /// a write through one of them raises no event here, so no answer can be vouched for.
    /// A base written before this was recorded counts as linked.
    #[serde(default = "linked_unless_known")]
    pub linked: bool,
}

fn linked_unless_known() -> bool {
    true
}

/// A `watch start` in progress for this workspace. Released on drop.
pub struct StartLock {
    _file: File,
}

/// The daemon's hold on its workspace: one daemon per workspace. Released on drop.
pub struct DaemonLock {
    _file: File,
}

impl WatchFiles {
    /// The watch files of the workspace whose state directory is `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        WatchFiles {
            dir: state_dir.join(WATCH_DIR),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("watch.sock")
    }

    pub fn cookies(&self) -> PathBuf {
        self.dir.join("cookies")
    }

    /// Creates `watch/` and `watch/cookies/` private to the user (0700), refusing symlinks.
    pub fn prepare(&self) -> Result<(), RecordsError> {
        // `<state>/watch` and `<state>/watch/cookies`: below the workspace's state directory,
        // made as the registry makes it, never the git directory above it.
        for (dir, own) in [
            (self.dir.clone(), OWN_STATE_LEVELS + 1),
            (self.cookies(), OWN_STATE_LEVELS + 2),
        ] {
            create_own_dirs(&dir, own, 0o700)?;
            // Made by someone else, or loosened since: only the user may reach the socket.
            let mode = fs::metadata(&dir).map_err(io_error(&dir))?.permissions().mode() & 0o777;
            if mode != 0o700 {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io_error(&dir))?;
            }
        }
        Ok(())
    }

    /// Whether a daemon could take its lock file as it is (a real file, not a link, FIFO or
    /// hard link; see the registry's lock files), without taking the lock: `watch start` asks
    /// first, so a refusal reaches the user with its reason, not as a daemon that exited.
    pub fn check_daemon_lock_file(&self) -> Result<(), RecordsError> {
        self.prepare()?;
        super::open_lock_file(&self.dir.join(DAEMON_LOCK_FILE)).map(drop)
    }

    /// Serializes `watch start` (and the on-demand start of `snapshot --watch`) for this
    /// workspace, waiting for another start to finish: two starts that both saw no daemon would
    /// otherwise spawn two, one of which could take over once the first is stopped.
    pub fn lock_start(&self) -> Result<StartLock, RecordsError> {
        self.prepare()?;
        let file = super::acquire_lock(&self.dir.join(START_LOCK_FILE), super::LockMode::Exclusive, &|_| {})?;
        Ok(StartLock { _file: file })
    }

    /// Takes the daemon lock without waiting; `None` when another daemon holds it.
    pub fn try_lock_daemon(&self) -> Result<Option<DaemonLock>, RecordsError> {
        self.prepare()?;
        let path = self.dir.join(DAEMON_LOCK_FILE);
        let Some(file) = try_lock_file(&path)? else {
            return Ok(None);
        };
        // Who holds it, for `watch stop` when the daemon no longer answers.
        file.set_len(0).map_err(io_error(&path))?;
        (&file)
            .write_all(std::process::id().to_string().as_bytes())
            .map_err(io_error(&path))?;
        Ok(Some(DaemonLock { _file: file }))
    }

    /// Binds the daemon's socket (the caller holds the daemon lock, so a socket file already
    /// there is a dead daemon's and is replaced). The directory is 0700, so only the user can
    /// connect.
    pub fn bind_socket(&self, _lock: &DaemonLock) -> Result<UnixListener, RecordsError> {
        let path = self.socket();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&path)(e)),
        }
        UnixListener::bind(&path).map_err(io_error(&path))
    }

    /// Removes the socket of a daemon that was ended from outside.
    pub fn remove_stale_socket(&self) {
        fs::remove_file(self.socket()).ok();
    }

    /// Removes the socket when the daemon ends.
    pub fn unbind_socket(&self, _lock: &DaemonLock) {
        fs::remove_file(self.socket()).ok();
    }

    /// The process id the last daemon wrote into its lock file, if any.
    pub fn daemon_pid(&self) -> Option<u32> {
        String::from_utf8(crate::verbs::read_regular_file(&self.dir.join(DAEMON_LOCK_FILE)).ok()?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Writes an empty cookie file named `name` (a snapshot's sync point with the daemon).
    pub fn write_cookie(&self, name: &str) -> Result<PathBuf, RecordsError> {
        // Never through a link someone put in place of the cookie (or watch) directory.
        refuse_linked_state_dir(&self.cookies())?;
        let path = self.cookies().join(name);
        fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        Ok(path)
    }

    pub fn remove_cookie(&self, path: &Path) {
        fs::remove_file(path).ok();
    }

    /// The base of the last watched snapshot, if any (an unreadable one counts as none: the
    /// next snapshot then scans in full, which is always correct).
    pub fn load_base(&self) -> Option<WatchBase> {
        let text = crate::verbs::read_regular_file(&self.dir.join(BASE_FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn save_base(&self, base: &WatchBase, _lock: &super::RegistryLock) -> Result<(), RecordsError> {
        self.prepare()?;
        let path = self.dir.join(BASE_FILE);
        let text = serde_json::to_vec(base).map_err(|e| RecordsError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        // Not synced: after a power cut no daemon is left whose token it could name, so an old
        // or a new base alike makes the next snapshot scan in full.
        replace_unsynced(&path, &text)
    }

    /// Forgets the base, so the next watched snapshot scans in full.
    pub fn clear_base(&self, _lock: &super::RegistryLock) {
        fs::remove_file(self.dir.join(BASE_FILE)).ok();
    }
}
