//! Whether the ids the user's index holds stand for the bytes on disk: attributes that convert
//! content (text, eol, filters, ident, encodings) and configuration that does, judged for the
//! whole index or path by path. Read-only.

use std::path::{Path, PathBuf};

use gix::bstr::BStr;

use super::listed::TrackedEntry;
use super::walk::{refuse_blocking_rule_file, Follow};
use super::Vault;
use crate::verbs::types::{EntryKind, RepoPath};
use crate::verbs::VerbError;

/// Whether the index's ids are the bytes on disk, as far as configuration says.
pub(super) enum IdsRaw {
    Yes,
    No,
    /// Yes, except where an attribute that converts content applies.
    ExceptByAttributes,
}

/// How many index entries [`Vault::index_sizes_are_raw`] compares with their stored blobs.
const SIZE_SAMPLE: usize = 256;

/// The directories above `paths` (sorted) that are ckpt copy stores: they hold a `store.lock`
/// file and `objects/` and `workspaces/` directories. Each directory is looked at once.
pub(super) fn stores_among<'a>(root: &Path, paths: impl Iterator<Item = &'a RepoPath>) -> Vec<RepoPath> {
    let is_store = |dir: &Path| {
        std::fs::symlink_metadata(dir.join("store.lock")).is_ok_and(|m| m.is_file())
            && std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
            && std::fs::symlink_metadata(dir.join("workspaces")).is_ok_and(|m| m.is_dir())
    };
    let mut seen: std::collections::HashSet<RepoPath> = std::collections::HashSet::new();
    let mut stores = Vec::new();
    let mut last_parent: Option<RepoPath> = None;
    for path in paths {
        let parent = path.parent();
        if parent == last_parent {
            continue;
        }
        last_parent = parent;
        for dir in path.ancestors() {
            if seen.insert(dir.clone()) && is_store(&root.join(dir.to_os_path())) {
                stores.push(dir);
            }
        }
    }
    stores
}

/// The attributes that make git convert content between the worktree and the object store.
const CONVERTING_ATTRIBUTES: [&str; 6] = ["text", "eol", "crlf", "filter", "ident", "working-tree-encoding"];

/// True if no line of an attributes file sets an attribute that converts content.
fn attributes_are_raw(text: &[u8]) -> bool {
    text.split(|b| *b == b'\n').all(|line| {
        let line = String::from_utf8_lossy(line);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return true;
        }
        if line.starts_with("[attr]") {
            return false;
        }
        line.split_whitespace().skip(1).all(|token| {
            if matches!(token, "binary" | "-text" | "-crlf") {
                return true;
            }
            let name = token
                .trim_start_matches(['-', '!'])
                .split('=')
                .next()
                .unwrap_or_default();
            !CONVERTING_ATTRIBUTES.contains(&name)
        })
    })
}

impl Vault {
    /// The tracked paths that some attribute which converts content applies to, matched the way
    /// git matches them (every attributes file git reads for that path, macros expanded).
    pub(super) fn converted_by_attributes(
        &self,
        index: &gix::index::File,
        tracked: &[TrackedEntry],
    ) -> Result<std::collections::HashSet<RepoPath>, VerbError> {
        use gix::index::entry::Mode;
        let mut stack = self
            .repo
            .attributes_only(
                index,
                gix::worktree::stack::state::attributes::Source::WorktreeThenIdMapping,
            )
            .map_err(|e| VerbError::git("reading the attributes", e))?;
        let mut outcome = stack.selected_attribute_matches(CONVERTING_ATTRIBUTES);
        let mut converted = std::collections::HashSet::new();
        // Every directory's `.gitattributes`, tracked or not, is read for the paths in it: one
        // that is a FIFO would block the read (see [`IgnoreFiles`]), and fails the seeding.
        let attributes_in = |dir: Option<&RepoPath>| {
            let (full, shown) = match dir {
                Some(dir) => (
                    self.workdir.join(dir.to_os_path()),
                    format!("{}/.gitattributes", dir.display()),
                ),
                None => (self.workdir.clone(), ".gitattributes".to_owned()),
            };
            refuse_blocking_rule_file(&full.join(".gitattributes"), shown, Follow::NotLinks)
        };
        attributes_in(None)?;
        let mut looked_at: std::collections::HashSet<RepoPath> = std::collections::HashSet::new();
        for entry in tracked {
            for dir in entry.path.ancestors() {
                if looked_at.insert(dir.clone()) {
                    attributes_in(Some(&dir))?;
                }
            }
            let mode = match entry.item.kind {
                EntryKind::Symlink => Mode::SYMLINK,
                EntryKind::Gitlink => continue,
                _ => Mode::FILE,
            };
            outcome.reset();
            stack
                .at_entry(BStr::new(entry.path.as_bytes()), Some(mode))
                .map_err(|e| VerbError::git(format!("reading the attributes of {}", entry.path.display()), e))?
                .matching_attributes(&mut outcome);
            let converts = outcome.iter_selected().any(|m| {
                !matches!(
                    m.assignment.state,
                    gix::attrs::StateRef::Unspecified | gix::attrs::StateRef::Unset
                )
            });
            if converts {
                converted.insert(entry.path.clone());
            }
        }
        Ok(converted)
    }

    /// Conservative: any filter, eol/autocrlf setting, or attribute that may convert content
    /// (text, eol, crlf, filter, ident, working-tree-encoding) disables seeding from the index.
    pub(super) fn index_ids_are_raw(&self, tracked: &[TrackedEntry]) -> IdsRaw {
        let config = self.repo.config_snapshot();
        let converting = |key: &str| {
            config
                .string(key)
                .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_slice(), b"false" | b"lf" | b"native"))
        };
        if converting("core.autocrlf") || converting("core.eol") {
            return IdsRaw::No;
        }
        if config
            .plumbing()
            .sections_by_name("filter")
            .is_some_and(|mut s| s.next().is_some())
        {
            return IdsRaw::No;
        }
        let mut attribute_files: Vec<PathBuf> = tracked
            .iter()
            .filter(|t| t.path.components().last() == Some(&b".gitattributes"[..]))
            .map(|t| self.workdir.join(t.path.to_os_path()))
            .collect();
        attribute_files.push(self.repo.common_dir().join("info/attributes"));
        if let Ok(Some(global)) = config.trusted_path("core.attributesFile") {
            attribute_files.push(global);
        }
        if let Some(home) = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        {
            attribute_files.push(home.join("git/attributes"));
        }
        // An attributes file git could not read without waiting for a writer (a FIFO) leaves no
        // way to know what it converts: no index id stands for the bytes on disk.
        if attribute_files
            .iter()
            .any(|file| refuse_blocking_rule_file(file, file.display().to_string(), Follow::Links).is_err())
        {
            return IdsRaw::No;
        }
        let attributes_raw = attribute_files.iter().all(|file| match std::fs::read(file) {
            Ok(text) => attributes_are_raw(&text),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        });
        if attributes_raw {
            IdsRaw::Yes
        } else {
            IdsRaw::ExceptByAttributes
        }
    }

    /// A conversion that was active when files were checked out or added (autocrlf set then and
    /// unset since, an attributes file since removed) shows as a stored blob whose length
    /// differs from the file length the index recorded. Checked on an even sample of at most
    /// [`SIZE_SAMPLE`] entries: one mismatch turns seeding off for the whole capture.
    pub fn index_sizes_are_raw(
        &self,
        tracked: &[TrackedEntry],
        converted: &std::collections::HashSet<RepoPath>,
    ) -> bool {
        let plain: Vec<&TrackedEntry> = tracked
            .iter()
            .filter(|t| matches!(t.item.kind, EntryKind::File | EntryKind::Executable) && t.stat.is_some())
            .filter(|t| !converted.contains(&t.path))
            .collect();
        let step = plain.len().div_ceil(SIZE_SAMPLE).max(1);
        plain.iter().step_by(step).all(|entry| {
            let recorded = entry.stat.map(|s| s.size);
            match self.repo.find_header(entry.item.id.0) {
                // git keeps the low 32 bits of the size.
                Ok(header) => Some(header.size() as u32) == recorded,
                Err(_) => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::attributes_are_raw;

    #[test]
    fn converting_attributes_are_detected() {
        assert!(attributes_are_raw(
            b"# comment\n*.png binary\n*.rs diff=rust linguist-vendored\n*.bin -text\n"
        ));
        for converting in [
            &b"*.txt text\n"[..],
            b"* text=auto\n",
            b"*.sh eol=lf\n",
            b"*.x filter=lfs\n",
            b"*.c ident\n",
            b"[attr]mine text\n",
        ] {
            assert!(
                !attributes_are_raw(converting),
                "{}",
                String::from_utf8_lossy(converting)
            );
        }
    }
}
