//! The workspace's retention log: `retention.json` in its state directory, saying when automatic
//! retention last looked at the checkpoints and what it last removed, so `status` can tell the
//! user afterwards. Owns only that file; never removes a checkpoint itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{write_state_file, RecordsError};

const RETENTION_FILE: &str = "retention.json";

/// What automatic retention last did in a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionLog {
    /// When it last looked (seconds since the epoch).
    pub checked: i64,
    pub last_removal: Option<AutoRemoval>,
}

/// One automatic removal: when, and how many checkpoints by which rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoRemoval {
    /// RFC 3339, UTC.
    pub time: String,
    pub removed: u64,
    pub by_rule: BTreeMap<String, u64>,
}

/// Where one workspace's retention log lives.
#[derive(Debug, Clone)]
pub struct RetentionFile {
    path: PathBuf,
}

impl RetentionFile {
    pub fn new(state_dir: &Path) -> Self {
        RetentionFile {
            path: state_dir.join(RETENTION_FILE),
        }
    }

    /// The log; missing or unreadable, an empty one (it only paces retention and informs).
    pub fn load(&self) -> RetentionLog {
        crate::verbs::read_regular_file(&self.path)
            .ok()
            .and_then(|text| serde_json::from_slice(&text).ok())
            .unwrap_or_default()
    }

    pub fn save(&self, log: &RetentionLog) -> Result<(), RecordsError> {
        let text = serde_json::to_vec_pretty(log).map_err(|e| RecordsError::Corrupt {
            path: self.path.clone(),
            why: e.to_string(),
        })?;
        write_state_file(&self.path, &text)
    }
}
