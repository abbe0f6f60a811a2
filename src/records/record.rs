//! One checkpoint's record as the registry keeps it: why it was taken, what it did not protect
//! and why, the narrow file modes it saw, and the checks every label and record must pass.

use serde::{Deserialize, Serialize};

use crate::verbs::{ObjectId, RepoPath};

use super::WirePath;

/// Longest session or trigger label accepted.
pub const MAX_LABEL_LEN: usize = 200;

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Auto,
    Manual,
    Guard,
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Auto => "auto",
            Kind::Manual => "manual",
            Kind::Guard => "guard",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        match text {
            "auto" => Some(Kind::Auto),
            "manual" => Some(Kind::Manual),
            "guard" => Some(Kind::Guard),
            _ => None,
        }
    }
}

/// A path that a checkpoint did not protect, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub path: WirePath,
    pub reason: String,
}

/// The reason code for a path git itself refuses to name (`.Git`, `.git.`, `git~1`): never
/// written into a tree, which `git fsck` would reject, and never reached by a restore.
pub const RESERVED_NAME: &str = "reserved_name";

impl Skipped {
    /// A skipped path must be a repository path; one skipped for its reserved name need only be
    /// shaped like one, since no tree and no restore ever holds it.
    pub fn check(&self) -> Result<(), String> {
        let bytes = self.path.to_bytes()?;
        let checked = if self.reason == RESERVED_NAME {
            RepoPath::check_shape(&bytes)
        } else {
            RepoPath::check(&bytes)
        };
        checked.map_err(|e| e.to_string())
    }
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Full hex id; for the git provider, the pinned commit's id.
    pub id: String,
    pub provider: String,
    pub commit: Option<String>,
    pub tree: String,
    pub workspace: WirePath,
    pub session: Option<String>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub trigger: Option<String>,
    pub kind: Kind,
    /// RFC 3339, UTC.
    pub time: String,
    /// Paths that differ from the previous checkpoint (from HEAD's tree for the first one).
    pub files: u64,
    /// Files and links the checkpoint holds in all.
    pub total_files: u64,
    /// Bytes of blobs new relative to the previous checkpoint.
    pub bytes: u64,
    pub skipped: Vec<Skipped>,
    /// Files whose permission bits keep group or others from reading them (a `0600` `.env`):
    /// a restore that has to create one again gives it these bits, never git's wider default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub narrow_modes: Vec<NarrowMode>,
}

/// A file's permission bits, kept where they are narrower than a new file's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NarrowMode {
    pub path: WirePath,
    pub mode: u32,
}

/// At most this many narrow modes are kept per checkpoint (a worktree made under a `077` umask
/// is narrow throughout, and a restore under that umask creates files narrow anyway).
pub const MAX_NARROW_MODES: usize = 4096;

impl NarrowMode {
    /// Whether a file with these permission bits is kept from group or others reading it.
    pub fn is_narrow(mode: u32) -> bool {
        mode & 0o044 != 0o044
    }

    pub fn check(&self) -> Result<(), String> {
        self.path.to_repo_path()?;
        if self.mode > 0o777 {
            return Err(format!("mode {:o} is more than permission bits", self.mode));
        }
        Ok(())
    }
}

/// Checks a free-text label (session, trigger): one line, printable, bounded.
pub fn validate_label(what: &str, text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if text.len() > MAX_LABEL_LEN {
        return Err(format!("{what} is longer than {MAX_LABEL_LEN} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters or newlines"));
    }
    Ok(())
}

/// [`validate_label`] for a label about to be stored: also nothing that hides text or turns it
/// around where lists and terminals show it. (Labels already stored are read as before.)
pub fn validate_new_label(what: &str, text: &str) -> Result<(), String> {
    validate_label(what, text)?;
    let invisible = |c: char| matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2028}' | '\u{2029}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}');
    if text.chars().any(invisible) {
        return Err(format!(
            "{what} must not contain invisible or direction-changing characters (U+200B–U+200F, U+202A–U+202E, U+2028, U+2029, U+2060–U+2069, U+FEFF)"
        ));
    }
    Ok(())
}

impl Record {
    pub fn object_id(&self) -> Result<ObjectId, String> {
        ObjectId::from_hex(&self.id).map_err(|e| e.to_string())
    }

    pub fn short(&self) -> &str {
        &self.id[..8.min(self.id.len())]
    }

    pub fn tree_id(&self) -> Result<ObjectId, String> {
        ObjectId::from_hex(&self.tree).map_err(|e| e.to_string())
    }

    pub fn commit_id(&self) -> Result<Option<ObjectId>, String> {
        self.commit
            .as_deref()
            .map(|hex| ObjectId::from_hex(hex).map_err(|e| e.to_string()))
            .transpose()
    }

    pub fn unix_time(&self) -> Result<i64, String> {
        chrono::DateTime::parse_from_rfc3339(&self.time)
            .map(|t| t.timestamp())
            .map_err(|e| format!("bad time {:?}: {e}", self.time))
    }

    /// Every field that later code trusts is checked here, so a tampered registry is refused
    /// before anything acts on it.
    pub fn validate(&self) -> Result<(), String> {
        let id = self.object_id().map_err(|e| format!("record id: {e}"))?;
        self.tree_id().map_err(|e| format!("record {}: tree: {e}", self.id))?;
        match self.provider.as_str() {
            // Both providers store checkpoints as commits; a copy checkpoint's commit lives in
            // the private store.
            "git" | "copy" => {
                let commit = self
                    .commit_id()
                    .map_err(|e| format!("record {}: commit: {e}", self.id))?;
                if commit != Some(id) {
                    return Err(format!("record {}: a git checkpoint's id must be its commit", self.id));
                }
            }
            other => return Err(format!("record {}: unknown provider {other:?}", self.id)),
        }
        self.unix_time().map_err(|e| format!("record {}: {e}", self.id))?;
        if let Some(session) = &self.session {
            validate_label("session", session).map_err(|e| format!("record {}: {e}", self.id))?;
        }
        if let Some(trigger) = &self.trigger {
            validate_label("trigger", trigger).map_err(|e| format!("record {}: {e}", self.id))?;
        }
        self.workspace
            .to_bytes()
            .map_err(|e| format!("record {}: workspace: {e}", self.id))?;
        for skipped in &self.skipped {
            skipped
                .check()
                .map_err(|e| format!("record {}: skipped path: {e}", self.id))?;
        }
        for narrow in &self.narrow_modes {
            narrow
                .check()
                .map_err(|e| format!("record {}: narrow mode: {e}", self.id))?;
        }
        Ok(())
    }
}

/// Converts a checked skipped path back to a repository path.
pub fn skipped_path(skipped: &Skipped) -> Option<RepoPath> {
    skipped.path.to_repo_path().ok()
}
