//! Validated value types that cross the verbs boundary: object ids, pin refs, workspace keys and
//! repo-relative paths. Each type can only hold a value that passed its validator, so a verb never
//! has to re-check its inputs. Nothing here touches the filesystem or a repository.

use std::fmt;

use crate::verbs::InvalidInput;

/// Whether one path component is a name git's own `fsck` reports as `hasDotgit` (a tree holding
/// it is rejected by any remote with `receive.fsckObjects`): `.git` in any case, the NTFS forms
/// (`.git` or its short name `git~1` followed only by spaces and dots, or by a `:` stream
/// suffix), the HFS+ form (`.git` with characters HFS+ ignores inside), and any of these after a
/// backslash, which NTFS reads as a separator. Git refuses to add such a name; so does ckpt.
pub fn names_git_dir(component: &[u8]) -> bool {
    // Every path component passes here, often many times: the common short names cost nothing.
    if component.len() < 4 {
        return false;
    }
    std::iter::once(component)
        .chain(component.split(|b| *b == b'\\').skip(1))
        .any(|part| is_ntfs_dot_git(part) || is_hfs_dot_git(part))
}

fn is_ntfs_dot_git(name: &[u8]) -> bool {
    let rest = if name.len() >= 4 && name[..4].eq_ignore_ascii_case(b".git") {
        &name[4..]
    } else if name.len() >= 5 && name[..3].eq_ignore_ascii_case(b"git") && &name[3..5] == b"~1" {
        &name[5..]
    } else {
        return false;
    };
    for &b in rest {
        match b {
            b'\\' | b':' => return true,
            b'.' | b' ' => {}
            _ => return false,
        }
    }
    true
}

/// Whether a name is one git reads as `.gitmodules` on some file system, as its fsck does:
/// any case, HFS+'s ignored code points, NTFS's trailing spaces and dots or `:` stream suffix,
/// its short names `gitmod~1`…`gitmod~4` and the fallback short names (`gi7eba~1`, `gi7e~123`,
/// `g~123456`: a prefix of `gi7eba`, `~`, digits, eight characters in all). `git fsck` rejects a
/// tree where such a name is a symlink (`gitmodulesSymlink`) and checks its content.
pub fn names_gitmodules(component: &[u8]) -> bool {
    names_dot_file(component, b"gitmodules", b"gi7eba")
}

/// Whether a name is one git reads as `.gitattributes` on some file system (as
/// [`names_gitmodules`], with the short names `gitatt~1`…`gitatt~4` and `gi7d29~N`): `git fsck`
/// checks its content.
pub fn names_gitattributes(component: &[u8]) -> bool {
    names_dot_file(component, b"gitattributes", b"gi7d29")
}

/// Whether `component` names `.<dotted>` as git reads names on NTFS and HFS+ (see
/// [`names_gitmodules`]); `short_prefix` starts NTFS's fallback short name for it.
fn names_dot_file(component: &[u8], dotted: &[u8], short_prefix: &[u8; 6]) -> bool {
    // The shortest form is an eight-character short name.
    if component.len() < 8 {
        return false;
    }
    let folded = if component.is_ascii() {
        component.to_vec()
    } else {
        without_hfs_ignorables(component)
    };
    is_ntfs_dot_generic(&folded, dotted, short_prefix)
}

/// git's `is_ntfs_dot_generic`: `.<name>`, or an NTFS short name of it, followed only by spaces
/// and dots, up to the end or a `:`.
fn is_ntfs_dot_generic(name: &[u8], dotted: &[u8], short_prefix: &[u8; 6]) -> bool {
    let only_spaces_and_dots = |rest: &[u8]| {
        for &c in rest {
            match c {
                b':' => return true,
                b' ' | b'.' => {}
                _ => return false,
            }
        }
        true
    };
    let len = dotted.len();
    if name.len() > len && name[0] == b'.' && name[1..=len].eq_ignore_ascii_case(dotted) {
        return only_spaces_and_dots(&name[len + 1..]);
    }
    if name.len() >= 8
        && name[..6].eq_ignore_ascii_case(&dotted[..6])
        && name[6] == b'~'
        && (b'1'..=b'4').contains(&name[7])
    {
        return only_spaces_and_dots(&name[8..]);
    }
    // The fallback: up to six characters of the short prefix, `~`, a digit 1-9, then digits,
    // eight characters in all.
    let mut i = 0;
    let mut saw_tilde = false;
    while i < 8 {
        let Some(&c) = name.get(i) else { return false };
        if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !name.get(i).is_some_and(|d| (b'1'..=b'9').contains(d)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c.to_ascii_lowercase() != short_prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_dots(&name[i..])
}

fn without_hfs_ignorables(name: &[u8]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        let ignorable = matches!(
            name[i..],
            [0xe2, 0x80, 0x8c..=0x8f, ..]
                | [0xe2, 0x80, 0xaa..=0xae, ..]
                | [0xe2, 0x81, 0xaa..=0xaf, ..]
                | [0xef, 0xbb, 0xbf, ..]
        );
        if ignorable {
            i += 3;
        } else {
            kept.push(name[i]);
            i += 1;
        }
    }
    kept
}

/// `.git` once the code points HFS+ drops from names (zero-width and direction marks, U+FEFF)
/// are left out, compared without ASCII case.
fn is_hfs_dot_git(name: &[u8]) -> bool {
    if name.is_ascii() {
        return name.eq_ignore_ascii_case(b".git");
    }
    without_hfs_ignorables(name).eq_ignore_ascii_case(b".git")
}

/// A git object id (SHA-1 or SHA-256), constructible only from validated lowercase hex or from an
/// id the object database itself produced.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub(in crate::verbs) gix::ObjectId);

impl ObjectId {
    /// Parses a full 40-hex (SHA-1) or 64-hex (SHA-256) lowercase object id.
    pub fn from_hex(text: &str) -> Result<Self, InvalidInput> {
        let bytes = text.as_bytes();
        if bytes.len() != 40 && bytes.len() != 64 {
            return Err(InvalidInput::ObjectId(text.to_owned()));
        }
        if !bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(InvalidInput::ObjectId(text.to_owned()));
        }
        gix::ObjectId::from_hex(bytes)
            .map(ObjectId)
            .map_err(|_| InvalidInput::ObjectId(text.to_owned()))
    }

    /// An id from its raw bytes: exactly 20 (SHA-1) or 32 (SHA-256) of them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidInput> {
        match bytes.len() {
            20 | 32 => gix::ObjectId::try_from(bytes)
                .map(ObjectId)
                .map_err(|_| InvalidInput::ObjectId(format!("{} raw bytes", bytes.len()))),
            n => Err(InvalidInput::ObjectId(format!("{n} raw bytes"))),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }

    pub fn to_hex(self) -> String {
        self.0.to_hex().to_string()
    }

    /// The first `len` hex digits, as shown to people.
    pub fn short(&self, len: usize) -> String {
        let hex = self.to_hex();
        hex[..len.min(hex.len())].to_owned()
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A set of object ids. Hashed with foldhash, several times faster than the default SipHash in
/// sets of tens of thousands of ids, and seeded at random: ids read from a tampered list or a
/// hostile tree are chosen, not spread evenly, and a hash of their leading bytes alone would let
/// ids sharing them make every lookup a scan.
pub type IdSet = std::collections::HashSet<ObjectId, foldhash::fast::RandomState>;
/// A map keyed by object ids, hashed as an [`IdSet`] is.
pub type IdMap<V> = std::collections::HashMap<ObjectId, V, foldhash::fast::RandomState>;

/// Is `text` usable as one component of a ref name under `refs/ckpt/`? Deliberately narrower than
/// git's own rules: ASCII letters, digits, `-`, `_` and non-leading `.`, no `..`, no `.lock` suffix.
fn is_safe_ref_component(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && !text.starts_with('.')
        && !text.ends_with('.')
        && !text.ends_with(".lock")
        && !text.contains("..")
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Names one workspace (a worktree of a repository) inside `refs/ckpt/` and the state directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceKey(String);

impl WorkspaceKey {
    pub fn new(text: &str) -> Result<Self, InvalidInput> {
        if is_safe_ref_component(text) {
            Ok(WorkspaceKey(text.to_owned()))
        } else {
            Err(InvalidInput::WorkspaceKey(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub const PIN_NAMESPACE: &str = "refs/ckpt/";
/// The directory below [`PIN_NAMESPACE`] that holds quarantined pins (never a workspace key:
/// those are `main`, `wt-<name>` and `copy`).
const QUARANTINE: &str = "quarantine";

/// A full ref name that is guaranteed to live under `refs/ckpt/<workspace>/<commit-hex>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PinRef(String);

impl PinRef {
    pub fn for_checkpoint(workspace: &WorkspaceKey, commit: &ObjectId) -> Self {
        PinRef(format!("{PIN_NAMESPACE}{}/{}", workspace.as_str(), commit.to_hex()))
    }

    /// Parses a full ref name, accepting only `refs/ckpt/<workspace>/<hex id>`.
    pub fn parse(full: &str) -> Result<Self, InvalidInput> {
        let rest = full
            .strip_prefix(PIN_NAMESPACE)
            .ok_or_else(|| InvalidInput::PinRef(full.to_owned()))?;
        let mut parts = rest.split('/');
        let (Some(workspace), Some(id), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(InvalidInput::PinRef(full.to_owned()));
        };
        WorkspaceKey::new(workspace).map_err(|_| InvalidInput::PinRef(full.to_owned()))?;
        ObjectId::from_hex(id).map_err(|_| InvalidInput::PinRef(full.to_owned()))?;
        Ok(PinRef(full.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Where `doctor --fix` sets this pin aside when its checkpoint cannot be used:
    /// `refs/ckpt/quarantine/<workspace>/<id>`. Still under `refs/ckpt/`, so git gc keeps the
    /// objects; no longer a pin, so nothing lists or restores it.
    pub fn quarantined(&self) -> PinRef {
        let rest = &self.0[PIN_NAMESPACE.len()..];
        PinRef(format!("{PIN_NAMESPACE}{QUARANTINE}/{rest}"))
    }

    /// True for a name [`Self::quarantined`] makes.
    pub fn is_quarantine_name(full: &str) -> bool {
        full.strip_prefix(PIN_NAMESPACE)
            .and_then(|rest| rest.strip_prefix(QUARANTINE))
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| PinRef::parse(&format!("{PIN_NAMESPACE}{rest}")).ok())
            .is_some()
    }

    /// The workspace component of the ref name.
    pub fn workspace(&self) -> WorkspaceKey {
        let rest = &self.0[PIN_NAMESPACE.len()..];
        let workspace = rest.split('/').next().unwrap_or_default();
        WorkspaceKey(workspace.to_owned())
    }

    /// The checkpoint id the ref name carries (the pinned commit, by construction).
    pub fn checkpoint_id(&self) -> Option<ObjectId> {
        self.0.rsplit('/').next().and_then(|hex| ObjectId::from_hex(hex).ok())
    }
}

/// A repository-relative path with `/` separators, held as bytes. It is never empty, never
/// absolute, and has no empty, `.`, `..` or `.git` component; names like `notes..old.txt` are fine.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoPath(Vec<u8>);

impl RepoPath {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, InvalidInput> {
        let bytes = bytes.into();
        Self::check(&bytes)?;
        Ok(RepoPath(bytes))
    }

    /// Whether `bytes` would make a valid path, without taking them.
    pub fn check(bytes: &[u8]) -> Result<(), InvalidInput> {
        Self::check_shape(bytes)?;
        match bytes.split(|b| *b == b'/').find(|c| names_git_dir(c)) {
            Some(_) => Err(InvalidInput::Path {
                path: String::from_utf8_lossy(bytes).into_owned(),
                why: "`.git` component",
            }),
            None => Ok(()),
        }
    }

    /// Whether `bytes` are shaped like a path inside a worktree (relative, no empty, `.` or `..`
    /// component, no NUL), whatever its names: what a path ckpt reports but never writes, such
    /// as a `.Git` it skipped, must still be.
    pub fn check_shape(bytes: &[u8]) -> Result<(), InvalidInput> {
        let reject = |why: &'static str| InvalidInput::Path {
            path: String::from_utf8_lossy(bytes).into_owned(),
            why,
        };
        if bytes.is_empty() {
            return Err(reject("empty path"));
        }
        if bytes.contains(&0) {
            return Err(reject("contains a NUL byte"));
        }
        if bytes[0] == b'/' {
            return Err(reject("absolute path"));
        }
        for component in bytes.split(|b| *b == b'/') {
            match component {
                b"" => return Err(reject("empty path component")),
                b"." | b".." => return Err(reject("`.` or `..` component")),
                _ => {}
            }
        }
        Ok(())
    }

    /// Joins a validated parent with one more validated component.
    pub fn join(&self, name: &[u8]) -> Result<Self, InvalidInput> {
        let mut bytes = self.0.clone();
        bytes.push(b'/');
        bytes.extend_from_slice(name);
        RepoPath::new(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|b| *b == b'/')
    }

    /// The parent directory, or `None` at the top level.
    pub fn parent(&self) -> Option<RepoPath> {
        let cut = self.0.iter().rposition(|b| *b == b'/')?;
        Some(RepoPath(self.0[..cut].to_vec()))
    }

    /// Every proper ancestor directory, shallowest first.
    pub fn ancestors(&self) -> Vec<RepoPath> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| RepoPath(self.0[..i].to_vec()))
            .collect()
    }

    /// True if `self` is `other` or lies below it.
    pub fn is_within(&self, other: &RepoPath) -> bool {
        self.0 == other.0 || (self.0.starts_with(&other.0) && self.0.get(other.0.len()) == Some(&b'/'))
    }

    /// The path as an OS path fragment (bytes as they are, on Unix).
    pub fn to_os_path(&self) -> std::path::PathBuf {
        use std::os::unix::ffi::OsStrExt;
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&self.0))
    }

    /// Lossy text for messages meant for people.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

impl fmt::Debug for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RepoPath({:?})", self.display())
    }
}

/// What a captured worktree entry is, as git records it in a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryKind {
    File,
    Executable,
    Symlink,
    /// A submodule or nested repository, recorded as a pointer only; never restored.
    Gitlink,
}

impl EntryKind {
    pub fn label(&self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Executable => "executable",
            EntryKind::Symlink => "symlink",
            EntryKind::Gitlink => "gitlink",
        }
    }
}

/// One non-directory entry of a flattened tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TreeItem {
    pub kind: EntryKind,
    pub id: ObjectId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_id_accepts_sha1_and_sha256_hex() {
        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            ObjectId::from_hex(sha1).map(|id| id.to_hex()).ok().as_deref(),
            Some(sha1)
        );
        let sha256 = "0123456789abcdef".repeat(4);
        assert_eq!(ObjectId::from_hex(&sha256).map(|id| id.to_hex()).ok(), Some(sha256));
    }

    #[test]
    fn object_id_rejects_everything_else() {
        for bad in [
            "",
            "abc",
            "0123456789abcdef0123456789abcdef0123456",
            "0123456789abcdef0123456789abcdef012345678",
            "0123456789ABCDEF0123456789abcdef01234567",
            "0123456789abcdef0123456789abcdef0123456g",
            "../../../../../../../../../../etc/passwd",
            "-0123456789abcdef0123456789abcdef0123456",
        ] {
            assert!(ObjectId::from_hex(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn repo_path_accepts_odd_but_legal_names() {
        for good in [
            &b"notes..old.txt"[..],
            b"a b/c d",
            b"new\nline",
            b"colon:name",
            b"glob*?[x]",
            b"-leading-dash",
            b"\xff\xfe latin",
            b".gitignore",
            b"dir/.github/x",
            b"...",
        ] {
            assert!(
                RepoPath::new(good.to_vec()).is_ok(),
                "{:?}",
                String::from_utf8_lossy(good)
            );
        }
    }

    #[test]
    fn repo_path_rejects_traversal_and_git_dir() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"../x",
            b"a/../b",
            b"a/./b",
            b".",
            b"a//b",
            b"a/",
            b".git",
            b".git/config",
            b"sub/.GIT/hooks/x",
            b".Git",
            b"docs/.GIT",
            b".git.",
            b".git ",
            b"a/.GIT. .",
            b"GIT~1",
            b"git~1/x",
            b".git::$INDEX_ALLOCATION",
            b"a\\.git",
            b".g\xe2\x80\x8cit",
            b"\xef\xbb\xbf.GIT",
            b"a\0b",
        ] {
            assert!(
                RepoPath::new(bad.to_vec()).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn gitmodules_names_as_git_reads_them() {
        for name in [
            &b".gitmodules"[..],
            b".GitModules",
            b".gitmodules. ",
            b"GITMOD~1",
            b".git\xe2\x80\x8dmodules",
        ] {
            assert!(names_gitmodules(name), "{:?}", String::from_utf8_lossy(name));
        }
        for name in [
            &b".gitmodule"[..],
            b".gitmodulesx",
            b"gitmod~5",
            b"gitmod~1x",
            b"a.gitmodules",
        ] {
            assert!(!names_gitmodules(name), "{:?}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn gitattributes_names_as_git_reads_them() {
        for name in [
            &b".gitattributes"[..],
            b".GITATTRIBUTES. ",
            b"GITATT~1",
            b"gi7d29~1",
            b".gitattributes:x",
        ] {
            assert!(names_gitattributes(name), "{:?}", String::from_utf8_lossy(name));
        }
        for name in [&b".gitattribute"[..], b"gi7d29~0", b"gitatt~5", b".gitattributes.bak"] {
            assert!(!names_gitattributes(name), "{:?}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn names_near_git_dir_stay_valid() {
        for good in [
            &b".gitignore"[..],
            b".github/workflows/ci.yml",
            b".gitmodules",
            b".git-blame-ignore-revs",
            b".git.x",
            b".gitx",
            b"a.git",
            b"git~2",
            b"git~1x",
            b"x\\.gitignore",
            b".g\xe2\x80\x8cithub",
        ] {
            assert!(
                RepoPath::new(good.to_vec()).is_ok(),
                "{:?}",
                String::from_utf8_lossy(good)
            );
        }
    }

    #[test]
    fn repo_path_relations() {
        let p = RepoPath::new(b"a/b/c".to_vec()).unwrap();
        let a = RepoPath::new(b"a".to_vec()).unwrap();
        let ab = RepoPath::new(b"a/b".to_vec()).unwrap();
        let abc_d = RepoPath::new(b"a/bc".to_vec()).unwrap();
        assert!(p.is_within(&a));
        assert!(p.is_within(&ab));
        assert!(p.is_within(&p));
        assert!(!abc_d.is_within(&ab));
        assert_eq!(p.ancestors(), vec![a, ab.clone()]);
        assert_eq!(p.parent(), Some(ab));
    }

    #[test]
    fn pin_refs_stay_inside_the_namespace() {
        let id = ObjectId::from_hex("0123456789abcdef0123456789abcdef01234567").unwrap();
        let ws = WorkspaceKey::new("main").unwrap();
        let pin = PinRef::for_checkpoint(&ws, &id);
        assert_eq!(pin.as_str(), "refs/ckpt/main/0123456789abcdef0123456789abcdef01234567");
        assert_eq!(PinRef::parse(pin.as_str()), Ok(pin.clone()));
        assert_eq!(pin.checkpoint_id(), Some(id));
        for bad in [
            "refs/heads/main",
            "refs/ckpt/main",
            "refs/ckpt/../heads/0123456789abcdef0123456789abcdef01234567",
            "refs/ckpt/main/x/0123456789abcdef0123456789abcdef01234567",
            "refs/ckpt/.hidden/0123456789abcdef0123456789abcdef01234567",
            "refs/ckpt/a.lock/0123456789abcdef0123456789abcdef01234567",
            "refs/ckpt/main/HEAD",
            "HEAD",
        ] {
            assert!(PinRef::parse(bad).is_err(), "{bad}");
        }
        for bad_key in ["", "a/b", "..", ".x", "x.lock", "a b", "a..b", "x."] {
            assert!(WorkspaceKey::new(bad_key).is_err(), "{bad_key}");
        }
    }
}

/// What `lstat` says about a worktree path, as far as change detection needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub ino: u64,
    pub dev: u64,
    pub mode: u32,
}

/// The kind of a worktree path as `lstat` sees it (the last component is never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    File,
    Symlink,
    Directory,
    /// A socket, fifo or device.
    Special,
}

/// One `lstat` of a worktree path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStat {
    pub kind: PathKind,
    pub stat: FileStat,
    /// Hard links to it (`st_nlink`).
    pub links: u64,
}

impl PathStat {
    /// Regular files with the owner's execute bit are executables, as git records them.
    pub fn is_executable(&self) -> bool {
        self.kind == PathKind::File && self.stat.mode & 0o100 != 0
    }
}
