//! Writing ckpt's own state files: atomic replaces (temp file + fsync + rename), files set
//! aside instead of deleted, and state directories whose own levels are never links.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

/// Creates the temp file `path` for an atomic replace, never through whatever is already there:
/// the create is exclusive (`O_CREAT|O_EXCL`, which does not follow a symlink), and a leftover
/// at that name (a crash of an earlier process with this pid, or a link someone planted) is
/// unlinked, not written through, before the one retry.
pub(crate) fn create_temp_exclusive(path: &Path) -> std::io::Result<File> {
    let create = || OpenOptions::new().write(true).create_new(true).open(path);
    match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::remove_file(path)?;
            create()
        }
        result => result,
    }
}

/// temp file in the same directory + fsync + rename + fsync of the directory.
pub(super) fn write_atomically(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    replace_file(path, content, true)
}

/// [`write_atomically`] without the fsyncs, for state whose loss in a power cut only costs
/// time: after one it is the old file or the new one (each safe to read), and no process that
/// depended on it survives the cut. Saves a watched snapshot two of its six fsyncs per file.
pub(super) fn replace_unsynced(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    replace_file(path, content, false)
}

pub(super) fn replace_file(path: &Path, content: &[u8], durable: bool) -> Result<(), RecordsError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = create_temp_exclusive(&temp)?;
        file.write_all(content)?;
        if durable {
            file.sync_all()?;
        }
        fs::rename(&temp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        fs::remove_file(&temp).ok();
    }
    result.map_err(io_error(path))
}

/// Replaces a file of the user's (an agent's settings file) atomically: a temp file beside it
/// with a random name (a user's directory is not ckpt's state, where `doctor` finds a killed
/// write's leftover by its pid name), the old file's permissions kept (a user file may be
/// private), fsync, rename, fsync of the directory. An agent reading the file sees the old one
/// or the new one, never half of either.
pub fn replace_user_file(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(io_error(dir))?;
    temp.write_all(content).map_err(io_error(path))?;
    if let Ok(meta) = fs::metadata(path) {
        fs::set_permissions(temp.path(), meta.permissions()).map_err(io_error(path))?;
    }
    temp.as_file().sync_all().map_err(io_error(path))?;
    temp.persist(path).map_err(|e| io_error(path)(e.error))?;
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
    Ok(())
}

/// The pid in a state write's temp name (`.<name>.<pid>.tmp`), if `name` is one.
pub(super) fn state_temp_pid(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (stem, pid) = inner.rsplit_once('.')?;
    // The names ckpt gives its state files, and a pid as the kernel gives it (no leading zero).
    let stem_ok = stem.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let pid_ok = !pid.is_empty() && !pid.starts_with('0') && pid.bytes().all(|b| b.is_ascii_digit());
    if !stem_ok || !pid_ok {
        return None;
    }
    pid.parse().ok()
}

/// Writes a file of ckpt's own state (outside any worktree) atomically, creating its directory;
/// unchanged content is left alone.
pub fn write_state_file(path: &Path, content: &[u8]) -> Result<(), RecordsError> {
    if crate::verbs::read_regular_file(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        create_state_dir(dir)?;
    }
    write_atomically(path, content)
}

/// Moves `path` to `<name>.corrupt-<UTC time to the nanosecond>[-N]` beside it, never over an
/// earlier one: what was set aside is never lost.
pub(super) fn set_aside(path: &Path) -> Result<PathBuf, RecordsError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.9f");
    for n in 0..1000 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let aside = path.with_file_name(format!("{name}.corrupt-{stamp}{suffix}"));
        // A hard link claims the name only if it is free; then the original goes. A directory
        // cannot be linked, so it could never be set aside that way: it is renamed to a name
        // that is free now, under the workspace lock.
        if fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
            if fs::symlink_metadata(&aside).is_ok() {
                continue;
            }
            fs::rename(path, &aside).map_err(io_error(path))?;
            return Ok(aside);
        }
        match fs::hard_link(path, &aside) {
            Ok(()) => {
                fs::remove_file(path).map_err(io_error(path))?;
                return Ok(aside);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&aside)(e)),
        }
    }
    Err(RecordsError::Corrupt {
        path: path.to_path_buf(),
        why: "could not find a free name to set it aside under".into(),
    })
}

/// How many trailing components of a state directory ckpt made itself and so must be real
/// directories (`<git-common-dir>/ckpt/<workspace>`, `workspaces/<key>/state`); the directory
/// above them (the git dir, `$CKPT_HOME`) is the user's and may be a link.
pub(super) const OWN_STATE_LEVELS: usize = 2;

/// Refuses a state directory whose own levels are symlinks: a planted link must not send
/// ckpt's lock, registry or cache writes anywhere else.
pub(super) fn refuse_linked_state_dir(dir: &Path) -> Result<(), RecordsError> {
    for level in dir.ancestors().take(OWN_STATE_LEVELS) {
        match fs::symlink_metadata(level) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(RecordsError::UnsafeStateDir {
                    path: level.to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(level)(e)),
        }
    }
    Ok(())
}

/// Creates a state directory (and its parents) after checking that none of its own levels is a
/// symlink, and checks again once it exists.
pub(super) fn create_state_dir(dir: &Path) -> Result<(), RecordsError> {
    refuse_linked_state_dir(dir)?;
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    refuse_linked_state_dir(dir)
}

/// Creates the state directory `dir`, of which the last `own` components are ckpt's: those are
/// made as needed (with `mode`), while the directory above them (the git directory, the copy
/// store's workspace) must exist already. ckpt never makes what is the user's, so a process
/// that outlives its workspace (a daemon starting as a test removes its repository) cannot
/// bring the workspace's path back and then keep watching it.
pub(super) fn create_own_dirs(dir: &Path, own: usize, mode: u32) -> Result<(), RecordsError> {
    use std::os::unix::fs::DirBuilderExt;
    refuse_linked_state_dir(dir)?;
    let levels: Vec<&Path> = dir.ancestors().take(own + 1).collect();
    let Some(base) = levels.last().filter(|_| levels.len() == own + 1) else {
        return Err(io_error(dir)(std::io::Error::other("not a state directory path")));
    };
    if !base.is_dir() {
        return Err(io_error(base)(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "gone (ckpt does not create it again)",
        )));
    }
    for level in levels[..own].iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(level) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io_error(level)(e)),
            _ => {}
        }
    }
    refuse_linked_state_dir(dir)
}
