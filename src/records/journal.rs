//! The restore journal: what a restore is about to change, written before its first worktree
//! write and cleared after verification, so that `doctor` can settle a restore that was
//! interrupted. It owns only `restore-journal.json` in a workspace's state directory, reads it
//! back fully validated (a tampered journal is refused, never half-trusted), and never touches
//! the worktree.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{io_error, write_atomically, RecordsError, WirePath};
use crate::verbs::{ObjectId, RepoPath};

const FORMAT: &str = "ckpt-restore-journal";
const VERSION: u32 = 1;

/// What a restore does to one path, in the order it does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalOp {
    Remove,
    RemoveDir,
    PruneDir,
    Write,
}

/// One restore in flight, with every id and path validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreJournal {
    /// The checkpoint being restored.
    pub target: ObjectId,
    /// The guard checkpoint: the state before the restore.
    pub guard: ObjectId,
    pub exact: bool,
    /// The paths the user asked for (empty: everything).
    pub paths: Vec<RepoPath>,
    /// RFC 3339, UTC.
    pub started: String,
    /// The restoring process; its temp files carry this pid in their names.
    pub pid: u32,
    pub ops: Vec<(JournalOp, RepoPath)>,
}

/// The file's shape; `RestoreJournal` is what it means once validated.
#[derive(Serialize, Deserialize)]
struct JournalFile {
    format: String,
    version: u32,
    target: String,
    guard: String,
    exact: bool,
    paths: Vec<WirePath>,
    started: String,
    pid: u32,
    ops: Vec<OpLine>,
}

#[derive(Serialize, Deserialize)]
struct OpLine {
    op: JournalOp,
    path: WirePath,
}

impl RestoreJournal {
    pub(super) fn write(&self, path: &Path) -> Result<(), RecordsError> {
        let file = JournalFile {
            format: FORMAT.into(),
            version: VERSION,
            target: self.target.to_string(),
            guard: self.guard.to_string(),
            exact: self.exact,
            paths: self.paths.iter().map(WirePath::from_repo_path).collect(),
            started: self.started.clone(),
            pid: self.pid,
            ops: self
                .ops
                .iter()
                .map(|(op, path)| OpLine {
                    op: *op,
                    path: WirePath::from_repo_path(path),
                })
                .collect(),
        };
        let mut text = serde_json::to_vec_pretty(&file).map_err(|e| corrupt(path, e.to_string()))?;
        text.push(b'\n');
        write_atomically(path, &text)
    }

    /// The journal at `path`, if one is there; anything malformed is `Corrupt`, naming why.
    pub(super) fn read(path: &Path) -> Result<Option<Self>, RecordsError> {
        let text = match crate::verbs::read_regular_file(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            // Not a regular file: set aside like any unreadable journal (`doctor --fix`).
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Err(corrupt(path, e.to_string())),
            Err(e) => return Err(io_error(path)(e)),
        };
        let file: JournalFile = serde_json::from_slice(&text).map_err(|e| corrupt(path, e.to_string()))?;
        if file.format != FORMAT {
            return Err(corrupt(path, format!("format is {:?}, not {FORMAT:?}", file.format)));
        }
        if file.version != VERSION {
            return Err(RecordsError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: u64::from(file.version),
            });
        }
        let id = |text: &str| ObjectId::from_hex(text).map_err(|e| corrupt(path, format!("bad checkpoint id: {e}")));
        let repo_path = |wire: &WirePath| {
            wire.to_repo_path()
                .map_err(|e| corrupt(path, format!("bad path in the journal: {e}")))
        };
        Ok(Some(RestoreJournal {
            target: id(&file.target)?,
            guard: id(&file.guard)?,
            exact: file.exact,
            paths: file.paths.iter().map(repo_path).collect::<Result<_, _>>()?,
            started: file.started,
            pid: file.pid,
            ops: file
                .ops
                .iter()
                .map(|line| Ok((line.op, repo_path(&line.path)?)))
                .collect::<Result<_, RecordsError>>()?,
        }))
    }
}

fn corrupt(path: &Path, why: String) -> RecordsError {
    RecordsError::Corrupt {
        path: path.to_path_buf(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn journal() -> RestoreJournal {
        let id = |c: char| ObjectId::from_hex(&c.to_string().repeat(40)).ok();
        RestoreJournal {
            target: id('a').unwrap_or_else(|| unreachable!()),
            guard: id('b').unwrap_or_else(|| unreachable!()),
            exact: true,
            paths: vec![],
            started: "2026-12-01T00:00:00.000Z".into(),
            pid: 42,
            ops: vec![
                (
                    JournalOp::Remove,
                    RepoPath::new(b"old".to_vec()).unwrap_or_else(|_| unreachable!()),
                ),
                (
                    JournalOp::Write,
                    RepoPath::new(b"caf\xe9".to_vec()).unwrap_or_else(|_| unreachable!()),
                ),
            ],
        }
    }

    #[test]
    fn a_journal_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("restore-journal.json");
        journal().write(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(RestoreJournal::read(&path).ok().flatten(), Some(journal()));
        let text = fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.contains(r#""op": "remove""#) && text.contains("bytes_b64"),
            "{text}"
        );
    }

    #[test]
    fn a_tampered_journal_is_refused_naming_why() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("restore-journal.json");
        journal().write(&path).unwrap_or_else(|e| panic!("{e}"));
        let good = fs::read_to_string(&path).unwrap_or_default();
        for (from, to, why) in [
            (r#""old""#, r#""../escape""#, "bad path"),
            (r#""op": "remove""#, r#""op": "rm_rf""#, "unknown variant"),
            (&"a".repeat(40), "not-hex", "bad checkpoint id"),
            (r#""version": 1"#, r#""version": 9"#, "version 9"),
        ] {
            fs::write(&path, good.replacen(from, to, 1)).unwrap_or_else(|e| panic!("{e}"));
            let error = RestoreJournal::read(&path)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(error.contains(why), "{from} -> {to}: {error}");
        }
        assert_eq!(RestoreJournal::read(&dir.path().join("none")).ok(), Some(None));
    }
}
