//! What `status` needs without reading a file: how many paths are protected, and what is not
//! and why, decided by `lstat` alone. Read-only.

use super::*;

/// What `status` needs without reading any file: how many paths are protected, what is not and
/// why (by `lstat` alone), and the sizes the user's index records per blob.
#[derive(Debug, Default)]
pub struct Survey {
    pub protected: usize,
    pub unprotected: Vec<(RepoPath, String)>,
    /// Present, not protected, and no repository path at all (`.Git`): raw bytes and reason.
    pub unnamable: Vec<(Vec<u8>, String)>,
    pub index_ids: crate::verbs::IdMap<u64>,
}

pub fn survey(vault: &Vault, max_file_size: u64) -> Result<Survey, CkptError> {
    let probe = vault.worktree_probe()?;
    let root = vault.workdir();
    let verdict_of_each = |candidates: Vec<Candidate>, _: Option<(i64, u32)>| {
        candidates
            .into_par_iter()
            .map(|candidate| {
                let verdict = survey_one(&probe, root, &candidate.path, max_file_size);
                (candidate.path, verdict)
            })
            .collect::<Vec<(RepoPath, Option<Result<(), String>>)>>()
    };
    let (prepared, verdicts) = prepare_and_run(vault, None, true, false, verdict_of_each)?;
    let mut survey = Survey {
        protected: 0,
        unprotected: prepared.unprotected(),
        unnamable: prepared.unnamable,
        index_ids: prepared.index_ids,
    };
    for (path, verdict) in verdicts {
        match verdict {
            Some(Ok(())) => survey.protected += 1,
            Some(Err(reason)) => survey.unprotected.push((path, reason)),
            None => {}
        }
    }
    survey.unprotected.sort();
    survey.unprotected.dedup();
    Ok(survey)
}

/// Whether `status` counts `path` as protected (`Ok`), not protected and why (`Err`), or not a
/// file at all (`None`), by `lstat` alone.
fn survey_one(probe: &WorktreeProbe, root: &Path, path: &RepoPath, max_file_size: u64) -> Option<Result<(), String>> {
    let probed = match probe.lstat(path) {
        Ok(probed) => probed,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("unreadable: {e}"))),
    };
    match probed.kind {
        PathKind::Directory => None,
        PathKind::Symlink => Some(Ok(())),
        PathKind::File if probed.stat.size > max_file_size => Some(Err(format!(
            "too_large: {} bytes, limit {max_file_size}",
            probed.stat.size
        ))),
        PathKind::File if !probe.may_read(path) => Some(Err("unreadable: permission denied".into())),
        // A file git reads itself is judged by its content, as a snapshot judges it.
        PathKind::File => match path.components().last().and_then(super::gitfiles::GitFile::of) {
            Some(git_file) => {
                let bytes =
                    crate::verbs::read_small_state_file(&root.join(path.to_os_path()), super::gitfiles::MOST_BYTES);
                match bytes {
                    Ok(bytes) => Some(git_file.skip_reason(&bytes).map_or(Ok(()), Err)),
                    Err(e) => Some(Err(format!("unreadable: {e}"))),
                }
            }
            None => Some(Ok(())),
        },
        PathKind::Special => Some(Err("special_file".into())),
    }
}
