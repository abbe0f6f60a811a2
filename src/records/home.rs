//! Where ckpt's own store for plain directories lives: `$CKPT_HOME`, else `$XDG_DATA_HOME/ckpt`,
//! else `~/.local/share/ckpt`. Reads the environment and resolves the path; creates nothing.

use std::path::PathBuf;

use super::RecordsError;

/// The copy store's home, absolute and resolved through its existing ancestors.
pub fn ckpt_home() -> Result<PathBuf, RecordsError> {
    let home = if let Some(home) = std::env::var_os("CKPT_HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(home)
    } else if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(data).join("ckpt")
    } else {
        match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/share/ckpt"),
            None => return Err(RecordsError::NoStoreHome),
        }
    };
    // A relative setting means the same store from every directory: resolved once, here, and
    // through any symlinks and `..` as far as the path exists.
    let absolute = std::path::absolute(&home).map_err(|source| RecordsError::Io {
        path: home.clone(),
        source,
    })?;
    crate::verbs::absolute_parent_canonical(&absolute).map_err(|source| RecordsError::Io { path: home, source })
}
