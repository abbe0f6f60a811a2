//! The cross-process locks on ckpt's state: one workspace's registry, a whole copy store;
//! `flock`s on lock files that are never followed through a link nor opened when a FIFO.

use std::fs::{self, File};
use std::path::Path;

use super::*;

/// A held cross-process lock on one workspace's registry; released on drop.
pub struct RegistryLock {
    pub(super) _file: File,
}

/// A held lock on a whole copy store (`$CKPT_HOME/store.lock`): shared by every process that
/// may write objects into the store, exclusive for `ckpt gc`, so gc never deletes an object a
/// snapshot has just found present and is relying on. Released on drop.
pub struct StoreLock {
    _file: File,
}

/// Makes the copy store's directory, private to the user (0700): it holds copies of every file
/// it protects, a `0600` secret among them, whose objects are readable by anyone who can reach
/// them: another local user could read a `.env` from the store. A store made before, with wider
/// bits, is narrowed once it holds ckpt's own lock file.
pub(super) fn create_private_store(home: &Path) -> Result<(), RecordsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(parent) = home.parent() {
        fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    match fs::DirBuilder::new().mode(0o700).create(home) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error(home)(e)),
    }
    let meta = fs::symlink_metadata(home).map_err(io_error(home))?;
    let ours = home.join(STORE_LOCK_FILE).is_file();
    if meta.is_dir() && ours && meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(home, fs::Permissions::from_mode(0o700)).map_err(io_error(home))?;
    }
    Ok(())
}

impl StoreLock {
    /// Waits (like [`Registry::lock`]) for the shared store lock in the store directory `home`.
    pub fn shared(home: &Path, waiting: &dyn Fn(&Path)) -> Result<StoreLock, RecordsError> {
        create_private_store(home)?;
        let file = acquire_lock(&home.join(STORE_LOCK_FILE), LockMode::Shared, waiting)?;
        Ok(StoreLock { _file: file })
    }

    /// Waits for the exclusive store lock: no snapshot of any workspace runs while it is held.
    pub fn exclusive(home: &Path, waiting: &dyn Fn(&Path)) -> Result<StoreLock, RecordsError> {
        create_private_store(home)?;
        let file = acquire_lock(&home.join(STORE_LOCK_FILE), LockMode::Exclusive, waiting)?;
        Ok(StoreLock { _file: file })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LockMode {
    Shared,
    Exclusive,
}

/// The lock file at `path`, created if needed (never truncated: it may name its holder). Never
/// through a symlink someone put there (that would create or, for the daemon's pid, overwrite
/// its target), and never a FIFO or device (opened without blocking, then refused): either is
/// refused with its path, not removed, since removing a lock file another process may be
/// opening at that moment would let two processes hold "the" lock.
pub(super) fn open_lock_file(path: &Path) -> Result<File, RecordsError> {
    let refused = |what| RecordsError::UnsafeLockFile {
        path: path.to_path_buf(),
        what,
    };
    let file = crate::verbs::open_lock_no_follow(path).map_err(|e| match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => refused("a symlink"),
        // A FIFO with no reader, opened without blocking.
        Some(code) if code == rustix::io::Errno::NXIO.raw_os_error() => refused("a FIFO, socket or device"),
        Some(code) if code == rustix::io::Errno::ISDIR.raw_os_error() => refused("a directory"),
        _ => io_error(path)(e),
    })?;
    use std::os::unix::fs::MetadataExt;
    match file.metadata() {
        // Another name for the same file (a hard link someone made) would get the daemon's pid.
        Ok(meta) if meta.is_file() && meta.nlink() > 1 => Err(refused("a hard link to another file")),
        Ok(meta) if meta.is_file() => Ok(file),
        Ok(meta) => Err(refused(not_a_file(&meta))),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// What stands where a lock file should be, when it is neither a file nor a symlink.
pub(super) fn not_a_file(meta: &fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "a directory"
    } else {
        "a FIFO, socket or device"
    }
}

/// What is wrong with the lock file at `path`, as [`open_lock_file`] would refuse it; looked at
/// without opening or creating anything (for `audit`). `None`: absent, or a lone regular file.
pub(super) fn unsafe_lock_file(path: &Path) -> Option<RecordsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(path).ok()?;
    let what = if meta.file_type().is_symlink() {
        "a symlink"
    } else if !meta.is_file() {
        not_a_file(&meta)
    } else if meta.nlink() > 1 {
        "a hard link to another file"
    } else {
        return None;
    };
    Some(RecordsError::UnsafeLockFile {
        path: path.to_path_buf(),
        what,
    })
}

/// An exclusive `flock` on `path` (created if needed) if nobody holds it now; `None` without
/// waiting otherwise.
pub(super) fn try_lock_file(path: &Path) -> Result<Option<File>, RecordsError> {
    let file = open_lock_file(path)?;
    match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Ok(None),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Takes a `flock` on `path` (created if needed), calling `waiting` once after a second of
/// waiting and giving up after `CKPT_LOCK_TIMEOUT_SECS` (default 120) with an error naming the file.
pub(super) fn acquire_lock(path: &Path, mode: LockMode, waiting: &dyn Fn(&Path)) -> Result<File, RecordsError> {
    let file = open_lock_file(path)?;
    let timeout = std::env::var("CKPT_LOCK_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(120.0);
    let start = std::time::Instant::now();
    let mut announced = false;
    loop {
        let taken = match mode {
            LockMode::Shared => fs4::fs_std::FileExt::try_lock_shared(&file),
            LockMode::Exclusive => fs4::fs_std::FileExt::try_lock_exclusive(&file),
        };
        match taken {
            Ok(true) => return Ok(file),
            Ok(false) => {}
            Err(e) => return Err(io_error(path)(e)),
        }
        let waited = start.elapsed().as_secs_f64();
        if waited >= timeout {
            return Err(RecordsError::LockTimeout {
                path: path.to_path_buf(),
                seconds: waited,
            });
        }
        if waited >= 1.0 && !announced {
            waiting(path);
            announced = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
