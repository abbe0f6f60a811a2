//! Property suite: random sequences of agent edits, user git operations and ckpt commands over a
//! matrix of starting repository states, with the repo-safety invariants checked after every
//! step. `CKPT_PROP_CASES` (default 60) sets the number of cases, `CKPT_PROP_STEPS` (default 16)
//! their length, `CKPT_PROP_SEED` replays one case. A failure prints its seed and step log.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::*;

/// SplitMix64: tiny, seedable, good enough to pick test operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Start {
    Clean,
    StagedUnstagedUntracked,
    Unmerged,
    Detached,
    LinkedWorktree,
    SubmoduleClean,
    SubmoduleDirty,
    CrlfAndFilter,
    Sparse,
    Sha256,
    Symlinks,
    ExecBits,
    NonUtf8Names,
    DeepTree,
    IndexLockHeld,
    /// Copy provider: a plain directory.
    PlainDir,
    /// Copy provider: a repository with no commit yet.
    UnbornRepo,
    /// An untracked `.gitattributes` converted the text files at checkout (CRLF on disk, LF in
    /// the index): index ids must not seed the capture.
    UntrackedAttributes,
    /// `core.ignorecase=true` on a filesystem that tells cases apart, with names differing
    /// only in case.
    IgnoreCase,
    /// Copy provider whose store (`CKPT_HOME`) lies inside the workspace.
    StoreInWorkspace,
    /// History, then `git checkout --orphan` and `git rm -rf .`: HEAD unborn again, the git
    /// checkpoints taken before go on being the workspace's.
    OrphanAfterHistory,
    /// Untracked names git reserves (`.Git`, `docs/.GIT`, `.git.`): never in a tree, always
    /// named as skipped.
    ReservedNames,
    /// `git init --shared=group`: what ckpt creates follows git's sharing rules.
    SharedGroup,
}

const STARTS: [Start; 23] = [
    Start::Clean,
    Start::StagedUnstagedUntracked,
    Start::Unmerged,
    Start::Detached,
    Start::LinkedWorktree,
    Start::SubmoduleClean,
    Start::SubmoduleDirty,
    Start::CrlfAndFilter,
    Start::Sparse,
    Start::Sha256,
    Start::Symlinks,
    Start::ExecBits,
    Start::NonUtf8Names,
    Start::DeepTree,
    Start::IndexLockHeld,
    Start::PlainDir,
    Start::UnbornRepo,
    Start::UntrackedAttributes,
    Start::IgnoreCase,
    Start::StoreInWorkspace,
    Start::OrphanAfterHistory,
    Start::ReservedNames,
    Start::SharedGroup,
];

/// Where `StoreInWorkspace` keeps its copy store, relative to the workspace.
const STORE_IN_WORKSPACE: &str = "tools/ckpt-store";

type Files = BTreeMap<Vec<u8>, Entry>;

struct World {
    repo: TestRepo,
    /// The worktree the case works in (the repo root, or a linked worktree).
    ws: PathBuf,
    start: Start,
    names: Vec<Vec<u8>>,
    /// Checkpoint id → the protected files the oracle saw when it was taken.
    checkpoints: Vec<(String, Files)>,
    /// Checkpoint id → the paths its record left out as unstable: a restore to it has no
    /// evidence about them, so it must leave them as they are, `--exact` or not.
    unknown_in: BTreeMap<String, BTreeSet<Vec<u8>>>,
    /// (guard id, worktree files before that restore) of the last restore.
    last_restore: Option<(String, Files)>,
    checks: u64,
    log: Vec<String>,
    _upstream: Option<TestRepo>,
    /// The copy provider protects this workspace (plain directory or unborn repository).
    copy: bool,
    /// The registry appends each record to its log from the first one (every other case), not
    /// only once it is large: the log's reads and folds meet every shape and operation.
    appending: bool,
}

/// Everything ckpt must leave alone: the user's git state (none for a plain directory), a
/// directory outside the workspace that symlinks point into, and (unborn repos) the raw `.git`.
#[derive(Debug, PartialEq, Eq)]
struct Untouchable {
    git: Option<Fingerprint>,
    outside: Files,
    dot_git: Files,
}

impl Untouchable {
    fn same_but_status(&self, other: &Untouchable) -> bool {
        self.git.as_ref().map(Fingerprint::without_status) == other.git.as_ref().map(Fingerprint::without_status)
            && self.outside == other.outside
            && self.dot_git == other.dot_git
    }
}

fn files_only(map: &Files) -> Files {
    map.iter()
        .filter(|(_, e)| !matches!(e, Entry::Dir))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn within(path: &[u8], dir: &[u8]) -> bool {
    path == dir || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// Which of `paths` git ignores under the ignore files `checkpoint` holds (and the repository's
/// `info/exclude` as it is now): a checkpoint never holds an ignored file, so lacking one of
/// these is no evidence it should go. git itself decides, in a scratch repository holding just
/// those ignore files and an empty stand-in for each path.
fn ignored_under(repo: &TestRepo, checkpoint: &Files, paths: &[Vec<u8>]) -> BTreeSet<Vec<u8>> {
    if paths.is_empty() {
        return BTreeSet::new();
    }
    let scratch = tempfile::tempdir().expect("scratch dir");
    repo.git_in(scratch.path(), &["init", "-q"]);
    let info = repo.root.join(".git/info/exclude");
    if let Ok(rules) = std::fs::read(&info) {
        std::fs::write(scratch.path().join(".git/info/exclude"), rules).ok();
    }
    let put = |path: &[u8], content: &[u8]| {
        let full = scratch.path().join(OsStr::from_bytes(path));
        make_parent(&full);
        std::fs::write(full, content).ok();
    };
    for (path, entry) in checkpoint {
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
        if let (b".gitignore", Entry::File { content, .. }) = (name, entry) {
            put(path, content);
        }
    }
    for path in paths {
        put(path, b"");
    }
    let input: Vec<u8> = paths.iter().flat_map(|p| p.iter().copied().chain([0])).collect();
    let mut cmd = std::process::Command::new("git");
    cmd.current_dir(scratch.path())
        .args(["check-ignore", "--no-index", "-z", "--stdin"])
        .env("HOME", scratch.path())
        .env("XDG_CONFIG_HOME", scratch.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("git check-ignore");
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, &input).expect("feed git check-ignore");
    }
    let out = child.wait_with_output().expect("git check-ignore");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "git check-ignore: {:?}",
        out.status
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

impl World {
    fn new(start: Start) -> World {
        let repo = TestRepo::bare_dir();
        let copy = matches!(start, Start::PlainDir | Start::UnbornRepo | Start::StoreInWorkspace);
        if start == Start::Sha256 {
            repo.git(&["init", "-q", "-b", "main", "--object-format=sha256"]);
        } else if start == Start::SharedGroup {
            repo.git(&["init", "-q", "-b", "main", "--shared=group"]);
        } else if !matches!(start, Start::PlainDir | Start::StoreInWorkspace) {
            repo.git(&["init", "-q", "-b", "main"]);
        }
        let mut names: Vec<Vec<u8>> = [
            "a.txt",
            "b.bin",
            "dir/c.txt",
            "dir/sub/d.txt",
            "e f.txt",
            "-dash.txt",
            "notes..old",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        repo.write(".gitignore", b"*.log\nbuild/\n");
        repo.write("a.txt", b"alpha\n");
        repo.write("dir/c.txt", b"gamma\n");
        repo.write("dir/sub/d.txt", b"delta\n");
        repo.write("b.bin", &[0u8, 1, 2, 255, 254, 0, 10, 13]);
        let mut upstream = None;
        match start {
            Start::NonUtf8Names => {
                names.extend([
                    b"caf\xe9.txt".to_vec(),
                    b"new\nline".to_vec(),
                    b"glob*?[x]".to_vec(),
                    b"c:colon".to_vec(),
                ]);
                repo.write(bpath(b"caf\xe9.txt"), b"latin1\n");
            }
            Start::DeepTree => {
                let deep = b"d1/d2/d3/d4/d5/d6/d7/d8/deep.txt".to_vec();
                repo.write(bpath(&deep), b"deep\n");
                names.push(deep);
                names.push(b"d1/d2/d3/other.txt".to_vec());
            }
            Start::Symlinks => {
                repo.symlink("a.txt", "link-file");
                repo.symlink("dir", "link-dir");
                names.push(b"link-file".to_vec());
            }
            Start::ExecBits => {
                repo.write("run.sh", b"#!/bin/sh\n");
                repo.chmod("run.sh", 0o755);
                names.push(b"run.sh".to_vec());
            }
            Start::IgnoreCase => {
                repo.write("Readme", b"tracked readme\n");
                names.extend([b"Readme".to_vec(), b"README".to_vec(), b"readme".to_vec()]);
            }
            Start::StoreInWorkspace => {
                repo.write("tools/run.sh", b"#!/bin/sh\n");
                names.push(b"tools/run.sh".to_vec());
            }
            Start::CrlfAndFilter => {
                repo.git(&["config", "core.autocrlf", "true"]);
                repo.git(&["config", "filter.upper.clean", "tr a-z A-Z"]);
                repo.git(&["config", "filter.upper.smudge", "cat"]);
                repo.write(".gitattributes", b"*.up filter=upper\n");
                repo.write("crlf.txt", b"one\r\ntwo\r\n");
                repo.write("x.up", b"lower\n");
                names.push(b"crlf.txt".to_vec());
                names.push(b"x.up".to_vec());
            }
            _ => {}
        }
        if !copy {
            repo.commit_all("initial");
            repo.git(&["branch", "other"]);
        }
        let mut ws = repo.root.clone();
        match start {
            Start::StagedUnstagedUntracked => {
                repo.write("a.txt", b"staged\n");
                repo.git(&["add", "a.txt"]);
                repo.write("a.txt", b"unstaged on top\n");
                repo.write("untracked.txt", b"untracked\n");
                repo.remove("dir/c.txt");
            }
            Start::Unmerged => {
                repo.git(&["checkout", "-q", "other"]);
                repo.write("a.txt", b"other side\n");
                repo.commit_all("other");
                repo.git(&["checkout", "-q", "main"]);
                repo.write("a.txt", b"main side\n");
                repo.commit_all("main");
                let merge = repo.git_raw(&["-c", "user.name=T", "-c", "user.email=t@e", "merge", "other"]);
                assert!(!merge.status.success(), "the merge must conflict");
            }
            Start::Detached => {
                repo.git(&["checkout", "-q", "--detach"]);
            }
            Start::LinkedWorktree => {
                let linked = repo.root.parent().unwrap_or(&repo.root).join("linked");
                repo.git(&["worktree", "add", "-q", "-b", "wt", linked.to_str().unwrap_or_default()]);
                ws = linked;
            }
            Start::SubmoduleClean | Start::SubmoduleDirty => {
                let up = TestRepo::new();
                repo.add_submodule(&up, "sub");
                repo.commit_all("submodule");
                if start == Start::SubmoduleDirty {
                    repo.write("sub/README.md", b"dirty inside the submodule\n");
                    repo.write("sub/new-inside.txt", b"new inside\n");
                }
                upstream = Some(up);
            }
            Start::Sparse => {
                repo.git(&["sparse-checkout", "set", "dir"]);
            }
            Start::UntrackedAttributes => {
                repo.write(".gitattributes", b"*.txt text eol=crlf\n");
                for name in ["a.txt", "dir/c.txt", "dir/sub/d.txt"] {
                    repo.remove(name);
                }
                repo.git(&["checkout", "--", "a.txt", "dir"]);
                // Past the racy-clean second, so the index's stat data would match.
                repo.settle();
            }
            Start::IgnoreCase => {
                repo.git(&["config", "core.ignorecase", "true"]);
                std::fs::rename(repo.path("Readme"), repo.path("README")).ok();
                repo.write("readme", b"lower case\n");
            }
            Start::OrphanAfterHistory => {
                // A git checkpoint first: the workspace's timeline began on a born HEAD.
                repo.ckpt_json(&["snapshot"], 0);
                repo.git(&["checkout", "-q", "--orphan", "pages"]);
                repo.git(&["rm", "-rfq", "."]);
                repo.write("index.html", b"<h1>pages</h1>\n");
            }
            Start::ReservedNames => {
                for name in [".Git", "docs/.GIT", ".git.", "dir/GIT~1"] {
                    repo.write(name, b"a name git reserves\n");
                }
            }
            _ => {}
        }
        World {
            repo,
            ws,
            start,
            names,
            checkpoints: Vec::new(),
            unknown_in: BTreeMap::new(),
            last_restore: None,
            checks: 0,
            log: Vec::new(),
            _upstream: upstream,
            copy,
            appending: false,
        }
    }

    fn git(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = std::process::Command::new("git");
        cmd.current_dir(&self.ws)
            .env("HOME", &self.repo.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.repo.home.join(".gitconfig"))
            .args([
                "-c",
                "user.name=User",
                "-c",
                "user.email=user@example.invalid",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args);
        cmd.output().expect("git")
    }

    fn git_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.git(args);
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn ckpt(&self, args: &[&OsStr]) -> Run {
        let lock = self.start == Start::IndexLockHeld;
        let lock_path = if lock {
            PathBuf::from(String::from_utf8_lossy(&self.git_ok(&["rev-parse", "--absolute-git-dir"])).trim())
                .join("index.lock")
        } else {
            PathBuf::new()
        };
        if lock {
            std::fs::write(&lock_path, b"held by someone else").expect("lock");
        }
        let mut cmd = self.ckpt_command();
        cmd.arg("--json").args(args);
        let run = run_ckpt(cmd);
        if lock {
            assert_eq!(
                std::fs::read(&lock_path).ok().as_deref(),
                Some(&b"held by someone else"[..]),
                "ckpt touched index.lock"
            );
            std::fs::remove_file(&lock_path).expect("unlock");
        }
        run
    }

    /// `ckpt` in the workspace, with the copy store inside it for `StoreInWorkspace`.
    fn ckpt_command(&self) -> std::process::Command {
        let mut cmd = self.repo.ckpt_command();
        cmd.current_dir(&self.ws);
        if self.start == Start::StoreInWorkspace {
            cmd.env("CKPT_HOME", self.ws.join(STORE_IN_WORKSPACE));
        }
        if self.appending {
            cmd.env("CKPT_RECORDS_APPEND_FROM", "0");
        }
        cmd
    }

    /// The workspace's files, less ckpt's own store where it lies inside (that is ckpt's, and
    /// changes with every checkpoint).
    fn files(&self) -> Files {
        let mut files = worktree_state(&self.ws);
        if self.start == Start::StoreInWorkspace {
            files.retain(|path, _| !within(path, STORE_IN_WORKSPACE.as_bytes()));
        }
        files
    }

    /// git's own view of what a checkpoint must protect now: tracked and untracked-not-ignored
    /// files and symlinks present on disk, not below a symlink, submodule contents excluded.
    /// The copy provider's private git directory (there is one workspace per case).
    fn store(&self) -> Option<PathBuf> {
        let home = if self.start == Start::StoreInWorkspace {
            self.ws.join(STORE_IN_WORKSPACE)
        } else {
            self.repo.home.join(".local/share/ckpt")
        };
        let workspaces = home.join("workspaces");
        let entry = std::fs::read_dir(workspaces).ok()?.flatten().next()?;
        Some(entry.path().join("git"))
    }

    fn store_git(&self, args: &[&str]) -> Vec<u8> {
        let store = self.store().expect("the copy store exists after a snapshot");
        let mut cmd = std::process::Command::new("git");
        cmd.env("HOME", &self.repo.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .arg("--git-dir")
            .arg(&store)
            .args(args);
        let out = cmd.output().expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// For the copy provider, git itself is the oracle too: a scratch git directory over the
    /// workspace, with the documented default excludes, lists what is not ignored.
    fn copy_oracle_paths(&self) -> BTreeSet<Vec<u8>> {
        let scratch = self.repo.home.join("oracle.git");
        let excludes = self.repo.home.join("oracle-excludes");
        if !scratch.exists() {
            self.repo
                .git(&["init", "-q", "--bare", scratch.to_str().unwrap_or_default()]);
            // The documented defaults, and ckpt's own store where it lies inside.
            std::fs::write(
                &excludes,
                format!(".git/\nnode_modules/\ntarget/\n.venv/\n__pycache__/\ndist/\nbuild/\n/{STORE_IN_WORKSPACE}/\n"),
            )
            .ok();
        }
        let out = std::process::Command::new("git")
            .env("HOME", &self.repo.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .arg("--git-dir")
            .arg(&scratch)
            .arg("--work-tree")
            .arg(&self.ws)
            .arg("-c")
            .arg(format!("core.excludesFile={}", excludes.display()))
            .args(["ls-files", "-z", "-o", "--exclude-standard"])
            .current_dir(&self.ws)
            .output()
            .expect("git");
        assert!(out.status.success(), "oracle: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty() && !p.ends_with(b"/"))
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn oracle(&self) -> Files {
        let all = self.files();
        let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
        if self.copy {
            paths = self.copy_oracle_paths();
        }
        // On this filesystem names differ by case: git's true view has ignorecase off.
        let case = if self.start == Start::IgnoreCase {
            &["-c", "core.ignorecase=false"][..]
        } else {
            &[][..]
        };
        let staged = if self.copy {
            Vec::new()
        } else {
            self.git_ok(&[case, &["ls-files", "-z", "-s"]].concat())
        };
        for entry in staged.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let (meta, path) = match entry.iter().position(|b| *b == b'\t') {
                Some(tab) => (&entry[..tab], &entry[tab + 1..]),
                None => continue,
            };
            if !meta.starts_with(b"160000") {
                paths.insert(path.to_vec());
            }
        }
        let untracked = if self.copy {
            Vec::new()
        } else {
            self.git_ok(&[case, &["ls-files", "-z", "-o", "--exclude-standard"]].concat())
        };
        for path in untracked
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty() && !p.ends_with(b"/"))
        {
            paths.insert(path.to_vec());
        }
        paths
            .into_iter()
            .filter(|p| !names_a_reserved_component(p))
            .filter_map(|p| match all.get(&p) {
                Some(e @ Entry::File { .. }) | Some(e @ Entry::Link(_)) => {
                    let below_link = p
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| **b == b'/')
                        .any(|(i, _)| !matches!(all.get(&p[..i]), Some(Entry::Dir)));
                    (!below_link).then(|| (p.clone(), e.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Fingerprint of the user's git state plus a directory outside the workspace that symlinks
    /// point into: ckpt must never write there.
    fn fingerprint(&self) -> Untouchable {
        Untouchable {
            git: (!self.copy).then(|| fingerprint_of(&self.repo, &self.ws)),
            outside: worktree_state(&self.outside()),
            dot_git: if self.start == Start::UnbornRepo {
                worktree_state(&self.ws.join(".git"))
            } else {
                Files::new()
            },
        }
    }

    fn outside(&self) -> PathBuf {
        let dir = self.repo.root.parent().unwrap_or(&self.repo.root).join("outside");
        std::fs::create_dir_all(&dir).ok();
        if !dir.join("precious.txt").exists() {
            std::fs::write(dir.join("precious.txt"), b"outside the workspace").ok();
        }
        dir
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        assert!(ok, "invariant broken: {}", what());
        self.checks += 1;
    }

    fn global_invariants(&mut self) {
        if self.copy {
            if self.store().is_some() {
                let types =
                    String::from_utf8_lossy(&self.store_git(&["for-each-ref", "--format=%(objecttype)", "refs/ckpt/"]))
                        .into_owned();
                self.check(types.lines().all(|t| t == "commit"), || {
                    format!("copy pins must point at commits: {types}")
                });
                self.store_git(&["fsck", "--no-progress", "--no-dangling"]);
                self.checks += 1;
            }
            return;
        }
        let fsck = self.git(&["fsck", "--full", "--strict", "--no-progress"]);
        self.check(fsck.status.success(), || {
            format!("git fsck --strict: {}", String::from_utf8_lossy(&fsck.stderr))
        });
        // One timeline whatever HEAD is: every checkpoint taken stays listed.
        let listed = self.ckpt(&["list".as_ref()]);
        let ids: BTreeSet<&str> = listed.json.iter().filter_map(|line| line["id"].as_str()).collect();
        let lost: Vec<String> = self
            .checkpoints
            .iter()
            .map(|(id, _)| id.clone())
            .filter(|id| !ids.contains(id.as_str()))
            .collect();
        self.check(lost.is_empty(), || format!("checkpoints no longer listed: {lost:?}"));
        if self.start == Start::SharedGroup {
            let common = self.repo.common_dir();
            let unshared: Vec<String> = [common.join("objects"), common.join("refs/ckpt")]
                .iter()
                .flat_map(|dir| dirs_below(dir))
                .filter(|(_, mode)| mode & 0o2070 != 0o2070)
                .map(|(path, mode)| format!("{} {mode:o}", path.display()))
                .collect();
            self.check(unshared.is_empty(), || {
                format!("not shared as git shares: {unshared:?}")
            });
        }
        let types = String::from_utf8_lossy(&self.git_ok(&["for-each-ref", "--format=%(objecttype)", "refs/ckpt/"]))
            .into_owned();
        self.check(types.lines().all(|t| t == "commit"), || {
            format!("refs/ckpt/ must point at commits: {types}")
        });
    }

    // ---- operations ---------------------------------------------------------------------

    fn agent_edit(&mut self, rng: &mut Rng) {
        let name = rng.pick(&self.names).clone();
        let path = self.ws.join(bpath(&name));
        let exists = std::fs::symlink_metadata(&path).is_ok();
        let what = rng.below(11);
        let described = match what {
            0 | 1 => {
                let content = format!("edit {}\n", rng.next()).into_bytes();
                make_parent(&path);
                if std::fs::symlink_metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
                    std::fs::remove_dir_all(&path).ok();
                }
                std::fs::remove_file(&path).ok();
                std::fs::write(&path, &content).ok();
                "write"
            }
            2 if exists => {
                remove_any(&path);
                "delete"
            }
            3 if exists => {
                use std::os::unix::fs::PermissionsExt;
                let mode = if rng.chance(50) { 0o755 } else { 0o644 };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).ok();
                "chmod"
            }
            4 if exists => {
                let to = rng.pick(&self.names).clone();
                let to_path = self.ws.join(bpath(&to));
                if to_path != path && !to_path.starts_with(&path) && !path.starts_with(&to_path) {
                    remove_any(&to_path);
                    make_parent(&to_path);
                    std::fs::rename(&path, &to_path).ok();
                }
                "rename"
            }
            5 => {
                remove_any(&path);
                make_parent(&path);
                let picked: &Vec<u8> = rng.pick(&self.names);
                let target = String::from_utf8_lossy(picked).into_owned();
                std::os::unix::fs::symlink(target, &path).ok();
                "symlink"
            }
            6 => {
                // file <-> directory
                if std::fs::symlink_metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
                    remove_any(&path);
                    std::fs::write(&path, b"was a directory\n").ok();
                } else {
                    remove_any(&path);
                    std::fs::create_dir_all(&path).ok();
                    std::fs::write(path.join("inside.txt"), b"was a file\n").ok();
                }
                "file<->dir"
            }
            9 => {
                // A directory swapped for a symlink, inside the workspace or out of it.
                let Some(slash) = name.iter().position(|b| *b == b'/') else {
                    return;
                };
                if within(STORE_IN_WORKSPACE.as_bytes(), &name[..slash]) {
                    return; // that directory holds ckpt's own store in this case
                }
                let dir = self.ws.join(bpath(&name[..slash]));
                remove_any(&dir);
                let outside = self.outside();
                if rng.chance(50) {
                    std::os::unix::fs::symlink(&outside, &dir).ok();
                } else {
                    std::os::unix::fs::symlink("dir-elsewhere", &dir).ok();
                    std::fs::create_dir_all(self.ws.join("dir-elsewhere")).ok();
                }
                "dir->symlink"
            }
            8 => {
                // An untracked nested repository appears (never entered, never restored over).
                let nested = self.ws.join("vendor/nested");
                if !nested.join(".git").exists() {
                    std::fs::create_dir_all(&nested).ok();
                    self.repo.git_in(&nested, &["init", "-q"]);
                }
                std::fs::write(nested.join("inner.txt"), format!("inner {}", rng.next())).ok();
                "nested repo"
            }
            _ => {
                let ignored = self.ws.join(if rng.chance(50) { "x.log" } else { "build/out.o" });
                make_parent(&ignored);
                std::fs::write(&ignored, format!("ignored {}", rng.next())).ok();
                "ignored file"
            }
        };
        self.log
            .push(format!("agent {described} {:?}", String::from_utf8_lossy(&name)));
    }

    fn user_git(&mut self, rng: &mut Rng) {
        if self.copy {
            return;
        }
        let op = rng.below(7);
        if op == 6 {
            // The agent's bad day: a new root branch with everything removed from it.
            if self.start == Start::LinkedWorktree {
                return;
            }
            let branch = format!("orphan{}", rng.below(1000));
            let ok = self.git(&["checkout", "-q", "--orphan", &branch]).status.success()
                && self.git(&["rm", "-rfq", "--ignore-unmatch", "."]).status.success();
            self.log
                .push(format!("user git checkout --orphan {branch} && git rm -rf . ({ok})"));
            return;
        }
        let args: Vec<&str> = match op {
            0 => vec!["add", "-A"],
            1 => vec!["commit", "-q", "-a", "-m", "user commit"],
            2 => vec!["branch", "-f", "topic"],
            3 => vec!["stash", "push", "-q", "-u"],
            4 => vec!["stash", "pop", "-q"],
            _ => vec!["checkout", "-q", if rng.chance(50) { "other" } else { "main" }],
        };
        if self.start == Start::LinkedWorktree && args[0] == "checkout" {
            return; // main/other may be checked out elsewhere
        }
        let ok = self.git(&args).status.success();
        self.log.push(format!(
            "user git {} ({})",
            args.join(" "),
            if ok { "ok" } else { "failed" }
        ));
    }

    fn snapshot(&mut self) {
        let before = self.fingerprint();
        self.snapshot_unfingerprinted();
        let after = self.fingerprint();
        self.check(after == before, || {
            format!("snapshot changed git state:\n{before:?}\n{after:?}")
        });
    }

    /// A snapshot and its checks except the untouched-state one, for a caller that runs something
    /// beside it which may itself hold git's locks (a user's gc takes `logs/HEAD.lock`).
    fn snapshot_unfingerprinted(&mut self) {
        let expected = self.oracle();
        // Every snapshot asks the watch daemon (started by the first), then a full walk must find
        // exactly the same checkpoint: the daemon may only make a snapshot faster.
        let run = self.ckpt(&["snapshot".as_ref(), "--watch".as_ref()]);
        self.check(run.code == 0, || format!("snapshot failed: {}", run.stderr));
        let snap = run.one("snapshot");
        let id = snap["id"].as_str().unwrap_or_default().to_owned();
        // The checkpoint's tree holds exactly the oracle's paths with their modes.
        let expected_provider = if self.copy { "copy" } else { "git" };
        self.check(snap["provider"] == expected_provider, || {
            format!("provider {}", snap["provider"])
        });
        let listing = if self.copy {
            self.store_git(&["ls-tree", "-r", "-z", &id])
        } else {
            self.git_ok(&["ls-tree", "-r", "-z", &id])
        };
        let mut tree: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            if let Some(tab) = entry.iter().position(|b| *b == b'\t') {
                if !entry.starts_with(b"160000") {
                    tree.insert(entry[tab + 1..].to_vec(), entry[..6].to_vec());
                }
            }
        }
        let want: BTreeMap<Vec<u8>, Vec<u8>> = expected
            .iter()
            .map(|(p, e)| {
                let mode: &[u8] = match e {
                    Entry::Link(_) => b"120000",
                    Entry::File { exec: true, .. } => b"100755",
                    _ => b"100644",
                };
                (p.clone(), mode.to_vec())
            })
            .collect();
        self.check(tree == want, || {
            format!("checkpoint tree differs from git's view:\n tree {tree:?}\n want {want:?}")
        });
        if snap["created"] == false {
            let same = self
                .checkpoints
                .iter()
                .any(|(cid, files)| *cid == id && *files == expected);
            self.check(same, || {
                "created:false must name a checkpoint with identical content".into()
            });
        } else {
            self.checkpoints.push((id.clone(), expected));
        }
        let walk = self.ckpt(&["snapshot".as_ref(), "--no-watch".as_ref()]);
        let walked = walk.one("snapshot");
        self.check(walked["id"] == snap["id"] && walked["created"] == false, || {
            format!(
                "a full walk disagrees with the watched snapshot ({}): {walked}",
                snap["scan"]
            )
        });
        self.log
            .push(format!("snapshot {} (scan {})", &id[..8], snap["scan"]["mode"]));
    }

    fn preview(&mut self, rng: &mut Rng) {
        if self.checkpoints.is_empty() {
            return;
        }
        let (id, target) = self.checkpoints[rng.below(self.checkpoints.len())].clone();
        let before = self.fingerprint();
        let files_before = self.files();
        let now = self.oracle();
        let run = self.ckpt(&["preview".as_ref(), id.as_str().as_ref()]);
        self.check(run.code == 0, || format!("preview failed: {}", run.stderr));
        self.check(self.fingerprint() == before && self.files() == files_before, || {
            "preview wrote something".into()
        });
        let preview = run.one("preview");
        let overwrite: BTreeSet<Vec<u8>> = json_paths(&preview["overwrite"]).into_iter().collect();
        let conflicts: BTreeSet<Vec<u8>> = preview["conflicts"]
            .as_array()
            .map(|a| a.iter().map(|c| json_path(&c["path"])).collect())
            .unwrap_or_default();
        for (path, entry) in &target {
            // A file ignored now that already holds the target's bytes has nothing to change.
            let ignored_but_same = !now.contains_key(path) && files_before.get(path) == Some(entry);
            let differs = now.get(path) != Some(entry) && !ignored_but_same;
            self.check(
                differs == (overwrite.contains(path) || conflicts.contains(path)),
                || {
                    format!(
                        "preview of {} disagrees about {}",
                        &id[..8],
                        String::from_utf8_lossy(path)
                    )
                },
            );
        }
        self.log.push(format!("preview {}", &id[..8]));
    }

    fn restore(&mut self, rng: &mut Rng) {
        if self.checkpoints.is_empty() {
            return;
        }
        let (id, target) = self.checkpoints[rng.below(self.checkpoints.len())].clone();
        let exact = rng.chance(50);
        let selection: Vec<Vec<u8>> = if rng.chance(30) && !target.is_empty() {
            let keys: Vec<&Vec<u8>> = target.keys().collect();
            let path = (*rng.pick(&keys)).clone();
            match path.iter().position(|b| *b == b'/') {
                Some(slash) if rng.chance(50) => vec![path[..slash].to_vec()],
                _ => vec![path],
            }
        } else {
            Vec::new()
        };
        let pre = self.files();
        let pre_protected = self.oracle();
        let before = self.fingerprint();
        let mut args: Vec<&OsStr> = vec!["restore".as_ref(), id.as_str().as_ref(), "--yes".as_ref()];
        if exact {
            args.push("--exact".as_ref());
        }
        if !selection.is_empty() {
            args.push("--".as_ref());
            args.extend(selection.iter().map(|p| OsStr::from_bytes(p)));
        }
        let run = self.ckpt(&args);
        let debug = if std::env::var_os("CKPT_PROP_DEBUG").is_some() {
            run.stdout.clone()
        } else {
            String::new()
        };
        self.log.push(format!(
            "restore {}{} {:?} -> exit {} {debug}",
            &id[..8],
            if exact { " --exact" } else { "" },
            selection
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>(),
            run.code
        ));
        self.check(run.code == 0 || run.code == 3, || {
            format!("restore failed: {}\n{}", run.stderr, run.stdout)
        });
        let after = self.fingerprint();
        self.check(after.same_but_status(&before), || {
            "restore changed git state or wrote outside the workspace".into()
        });
        let report = run.one("restore");
        let failed: Vec<Vec<u8>> = report["failed"]
            .as_array()
            .map(|a| a.iter().map(|f| json_path(&f["path"])).collect())
            .unwrap_or_default();
        let touches_failed = |p: &[u8]| failed.iter().any(|f| within(p, f) || within(f, p));
        let selected = |p: &[u8]| selection.is_empty() || selection.iter().any(|s| within(p, s));
        let post = self.files();

        for (path, entry) in target.iter().filter(|(p, _)| selected(p)) {
            if !touches_failed(path) {
                self.check(post.get(path) == Some(entry), || {
                    format!(
                        "after restore {}, {} is {:?}, want {entry:?}",
                        &id[..8],
                        String::from_utf8_lossy(path),
                        post.get(path)
                    )
                });
            }
        }
        let unknown = self.unknown_in.get(&id).cloned().unwrap_or_default();
        let lacking: Vec<Vec<u8>> = pre_protected
            .keys()
            .filter(|p| exact && selected(p) && !target.contains_key(*p))
            .cloned()
            .collect();
        let ignored_by_target = ignored_under(&self.repo, &target, &lacking);
        for (path, entry) in pre_protected
            .iter()
            .filter(|(p, _)| selected(p) && !target.contains_key(*p))
        {
            let type_change = target.keys().any(|t| within(path, t) || within(t, path));
            if ignored_by_target.contains(path) && !type_change {
                self.check(post.get(path) == Some(entry), || {
                    format!(
                        "{} is ignored by {}'s own ignore rules, so even --exact must leave it",
                        String::from_utf8_lossy(path),
                        &id[..8]
                    )
                });
            } else if unknown.contains(path) {
                self.check(post.get(path) == Some(entry), || {
                    format!(
                        "{} was left out of {} as unstable, so a restore to it must leave it",
                        String::from_utf8_lossy(path),
                        &id[..8]
                    )
                });
            } else if exact {
                let gone = !matches!(post.get(path), Some(Entry::File { .. }) | Some(Entry::Link(_)));
                self.check(gone || touches_failed(path), || {
                    format!("--exact left created-after {}", String::from_utf8_lossy(path))
                });
            } else if !type_change {
                self.check(post.get(path) == Some(entry), || {
                    format!(
                        "created-after {} must stay without --exact",
                        String::from_utf8_lossy(path)
                    )
                });
            }
        }
        for (path, entry) in pre
            .iter()
            .filter(|(p, e)| !matches!(e, Entry::Dir) && !pre_protected.contains_key(*p))
        {
            self.check(post.get(path) == Some(entry), || {
                format!("unprotected {} was touched", String::from_utf8_lossy(path))
            });
        }
        if !selection.is_empty() {
            for (path, entry) in pre.iter().filter(|(p, e)| !matches!(e, Entry::Dir) && !selected(p)) {
                let ancestor_of_selection = selection.iter().any(|s| within(s, path));
                if !ancestor_of_selection {
                    self.check(post.get(path) == Some(entry), || {
                        format!("{} is outside the selection but changed", String::from_utf8_lossy(path))
                    });
                }
            }
        }
        let guard = report["guard"].as_str().unwrap_or_default().to_owned();
        if !self.checkpoints.iter().any(|(g, _)| *g == guard) {
            self.checkpoints.push((guard.clone(), pre_protected));
        }
        self.last_restore = Some((guard, pre));
        if rng.chance(40) {
            self.global_invariants();
            self.undo_last_restore();
        }
    }

    fn undo_last_restore(&mut self) {
        let Some((guard, pre)) = self.last_restore.take() else {
            return;
        };
        let before = self.fingerprint();
        let now_protected = self.oracle();
        let run = self.ckpt(&[
            "restore".as_ref(),
            guard.as_str().as_ref(),
            "--exact".as_ref(),
            "--yes".as_ref(),
        ]);
        // The undo takes a guard of its own; later snapshots may name it.
        if let Some(undo_guard) = run
            .json
            .iter()
            .find(|v| v["type"] == "restore")
            .and_then(|v| v["guard"].as_str())
        {
            if !self.checkpoints.iter().any(|(g, _)| g == undo_guard) {
                self.checkpoints.push((undo_guard.to_owned(), now_protected));
            }
        }
        let debug = if std::env::var_os("CKPT_PROP_DEBUG").is_some() {
            run.stdout.clone()
        } else {
            String::new()
        };
        self.log
            .push(format!("undo via guard {} -> exit {} {debug}", &guard[..8], run.code));
        self.check(run.code == 0, || {
            format!("guard restore failed: {}\n{}", run.stderr, run.stdout)
        });
        let after = self.fingerprint();
        self.check(after.same_but_status(&before), || {
            "undo changed git state or wrote outside the workspace".into()
        });
        let post = files_only(&self.files());
        let pre = files_only(&pre);
        self.check(post == pre, || {
            let diff: Vec<String> = pre
                .keys()
                .chain(post.keys())
                .filter(|k| pre.get(*k) != post.get(*k))
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            format!("restoring the guard must give back the pre-restore worktree; differs at {diff:?}")
        });
    }

    /// A snapshot while another process rewrites a file above the streaming threshold (8 MiB),
    /// truncating it first: whatever the checkpoint holds of it was on disk as one piece, and
    /// no object store ever holds a torn object (fsck in `global_invariants`).
    fn snapshot_while_a_large_file_changes(&mut self) {
        let path = self.ws.join("churn.bin");
        let versions = [vec![b'a'; 9 << 20], vec![b'b'; 33 << 18]];
        // On disk before ckpt starts: a file that exists throughout must be captured or reported.
        std::fs::write(&path, &versions[1]).expect("write churn.bin");
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            let path = path.clone();
            std::thread::spawn(move || {
                for version in versions.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::fs::write(&path, version).ok();
                }
            })
        };
        let run = self.ckpt(&["snapshot".as_ref()]);
        stop.store(true, Ordering::Relaxed);
        writer.join().ok();
        self.check(run.code == 0, || {
            format!("snapshot during churn failed: {}", run.stderr)
        });
        let id = run.one("snapshot")["id"].as_str().unwrap_or_default().to_owned();
        let spec = format!("{id}:churn.bin");
        let held = if self.copy {
            let store = self.store().unwrap_or_default();
            std::process::Command::new("git")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .arg("--git-dir")
                .arg(store)
                .args(["cat-file", "blob", &spec])
                .output()
        } else {
            std::process::Command::new("git")
                .current_dir(&self.ws)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(["cat-file", "blob", &spec])
                .output()
        }
        .expect("git cat-file");
        // What the checkpoint must hold: the worktree as it stands now, with churn.bin as caught
        // (in one piece) or, when it kept changing, left out and reported.
        let snap = run.one("snapshot");
        let mut holds = self.oracle();
        let churn = b"churn.bin".to_vec();
        let exec = match holds.get(&churn) {
            Some(Entry::File { exec, .. }) => Some(*exec),
            _ => None,
        };
        if held.status.success() {
            let first = held.stdout.first().copied();
            self.check(held.stdout.iter().all(|b| Some(*b) == first), || {
                format!("checkpoint {} holds a torn churn.bin", &id[..8])
            });
            if let Some(exec) = exec {
                holds.insert(
                    churn,
                    Entry::File {
                        content: held.stdout,
                        exec,
                    },
                );
            }
        } else if exec.is_some() {
            let reported = snap["skipped"].as_array().is_some_and(|skipped| {
                skipped.iter().any(|s| {
                    json_path(&s["path"]) == churn && s["reason"].as_str().is_some_and(|r| r.starts_with("unstable"))
                })
            });
            self.check(reported, || {
                format!(
                    "checkpoint {} neither holds churn.bin nor reports it unstable: {snap}",
                    &id[..8]
                )
            });
            holds.remove(&churn);
            if snap["created"] == true {
                self.unknown_in.entry(id.clone()).or_default().insert(churn);
            }
        }
        if snap["created"] == true {
            self.checkpoints.push((id.clone(), holds));
        } else {
            let same = self
                .checkpoints
                .iter()
                .any(|(cid, files)| *cid == id && *files == holds);
            self.check(same, || {
                format!(
                    "created:false during churn must name a checkpoint with that content ({})",
                    &id[..8]
                )
            });
        }
        self.log.push(format!("snapshot {} while churn.bin changes", &id[..8]));
    }

    /// The user writes files while a restore is held between its check and its replace: every
    /// such write is still on disk afterwards (kept, reported as a conflict), never lost.
    #[cfg(feature = "fault-injection")]
    fn user_writes_during_restore(&mut self, rng: &mut Rng) {
        // (With `IndexLockHeld`, ckpt() holds index.lock around its own runs only.)
        if self.checkpoints.is_empty() || self.start == Start::IndexLockHeld {
            return;
        }
        let (id, _) = self.checkpoints[rng.below(self.checkpoints.len())].clone();
        let preview = self.ckpt(&["preview".as_ref(), id.as_str().as_ref()]);
        if preview.code != 0 {
            return;
        }
        let now = self.files();
        let victims: Vec<Vec<u8>> = json_paths(&preview.one("preview")["overwrite"])
            .into_iter()
            .filter(|p| matches!(now.get(p), Some(Entry::File { .. })))
            .collect();
        if victims.is_empty() {
            return;
        }
        let resume = self.repo.home.join(format!("resume-{}", rng.next()));
        let mut cmd = self.ckpt_command();
        cmd.env("CKPT_PAUSE", "restore:before-replace")
            .env("CKPT_PAUSE_RESUME", &resume)
            .args(["--json", "restore", &id, "--yes"]);
        // What the restore's guard will hold: a later snapshot may name it.
        let before = self.oracle();
        let ws = self.ws.clone();
        let written = victims.clone();
        // Unique bytes: content the guard already holds would not be a loss if replaced.
        let words = format!("the user's write {} during the restore\n", rng.next()).into_bytes();
        let out = crate::safety::run_paused_command(cmd, "restore:before-replace", &resume, || {
            for path in &written {
                std::fs::write(ws.join(bpath(path)), &words).ok();
            }
        });
        let code = out.status.code().unwrap_or(-1);
        let guard = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "restore")
            .and_then(|v| v["guard"].as_str().map(str::to_owned));
        if let Some(guard) = guard.filter(|g| !self.checkpoints.iter().any(|(c, _)| c == g)) {
            self.checkpoints.push((guard, before));
        }
        self.check(code == 3, || {
            format!(
                "restore with user writes must report conflicts (exit {code}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        let after = self.files();
        for path in &victims {
            self.check(
                after.get(path)
                    == Some(&Entry::File {
                        content: words.clone(),
                        exec: matches!(now.get(path), Some(Entry::File { exec: true, .. })),
                    }),
                || format!("the user's write to {} was lost", String::from_utf8_lossy(path)),
            );
        }
        self.log.push(format!(
            "restore {} with user writes to {} path(s) -> exit {code}",
            &id[..8],
            victims.len()
        ));
    }

    /// A gc with no grace period racing a snapshot: `ckpt gc` for a copy workspace; for a
    /// repository the user's `git gc --prune=now`, `git repack -a -d` or `git prune
    /// --expire=now`, which remove every unreachable object however new. The snapshot's
    /// checkpoint (kept by the oracle, restored later) loses nothing, the gc succeeds, and so
    /// does the user's next `git gc`.
    fn gc_during_snapshot(&mut self, rng: &mut Rng) {
        let mut gc = if self.copy {
            let mut gc = self.ckpt_command();
            gc.args(["--json", "gc", "--grace-seconds", "0"]);
            gc
        } else {
            let args: &[&str] = match rng.below(3) {
                0 => &["gc", "-q", "--prune=now"],
                1 => &["repack", "-a", "-d", "-q"],
                _ => &["prune", "--expire=now"],
            };
            let mut gc = std::process::Command::new("git");
            gc.current_dir(&self.ws)
                .env("HOME", &self.repo.home)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", self.repo.home.join(".gitconfig"))
                .args(args);
            gc
        };
        gc.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // The state is compared around the whole race: while the user's gc runs, git's own lock
        // files come and go. The user's gc also rewrites reflogs in its own form (`reflog expire`
        // gives a linked worktree's first entry a tab), so it runs once before the state is taken.
        if !self.copy {
            let first = gc.output().expect("gc");
            self.check(first.status.success(), || {
                format!("the user's gc failed: {}", String::from_utf8_lossy(&first.stderr))
            });
        }
        let before = self.fingerprint();
        let gc = gc.spawn().expect("gc");
        self.snapshot_unfingerprinted();
        let gc = gc.wait_with_output().expect("gc");
        self.check(gc.status.success(), || {
            format!(
                "the gc beside a snapshot failed: {}",
                String::from_utf8_lossy(&gc.stderr)
            )
        });
        let after = self.fingerprint();
        self.check(after == before, || {
            format!("a snapshot beside a gc changed git state:\n{before:?}\n{after:?}")
        });
        if !self.copy {
            let after = self.git(&["gc", "-q"]);
            self.check(after.status.success(), || {
                format!("the user's git gc failed: {}", String::from_utf8_lossy(&after.stderr))
            });
        }
        let audit = self.ckpt(&["audit".as_ref()]);
        self.check(audit.code == 0, || format!("after gc: {}", audit.stdout));
        self.log.push("gc raced a snapshot".into());
    }

    fn step(&mut self, rng: &mut Rng) {
        let roll = rng.below(100);
        if !(81..=89).contains(&roll) {
            // The guard undo is only checked right after its restore.
            self.last_restore = None;
        }
        match roll {
            0..=26 => self.agent_edit(rng),
            27..=37 => self.user_git(rng),
            38..=53 => self.snapshot(),
            54..=55 => self.gc_during_snapshot(rng),
            56..=62 => self.preview(rng),
            63..=80 => self.restore(rng),
            81..=89 => self.undo_last_restore(),
            90..=93 => self.snapshot_while_a_large_file_changes(),
            #[cfg(feature = "fault-injection")]
            94..=97 => self.user_writes_during_restore(rng),
            _ => self.gc_during_snapshot(rng),
        }
        self.global_invariants();
    }
}

/// Whether a path holds a component git reserves (its fsck's `hasDotgit`): `.git` in any case,
/// alone or followed only by dots and spaces, or its short name `git~1`. Written apart from
/// ckpt's own check, as the oracle's view.
fn names_a_reserved_component(path: &[u8]) -> bool {
    path.split(|b| *b == b'/').any(|component| {
        let lower = component.to_ascii_lowercase();
        let trimmed: &[u8] = {
            let mut end = lower.len();
            while end > 0 && matches!(lower[end - 1], b'.' | b' ') {
                end -= 1;
            }
            &lower[..end]
        };
        trimmed == b".git" || trimmed == b"git~1"
    })
}

/// Every directory below `dir` (itself included) with its permission bits.
fn dirs_below(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&current) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        out.push((current.clone(), meta.permissions().mode() & 0o7777));
        if let Ok(entries) = std::fs::read_dir(&current) {
            pending.extend(entries.flatten().map(|e| e.path()));
        }
    }
    out
}

fn make_parent(path: &Path) {
    if let Some(parent) = path.parent() {
        let mut cur = parent.to_path_buf();
        // A file where a directory must go is replaced, like an agent's `mkdir -p` after `rm`.
        while !cur.as_os_str().is_empty() {
            if std::fs::symlink_metadata(&cur).map(|m| !m.is_dir()).unwrap_or(false) {
                std::fs::remove_file(&cur).ok();
            }
            if !cur.pop() {
                break;
            }
        }
        std::fs::create_dir_all(parent).ok();
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir_all(path).ok();
        }
        Ok(_) => {
            std::fs::remove_file(path).ok();
        }
        Err(_) => {}
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// How one property case ended: its invariant checks, or why it failed (with its step log).
enum CaseOutcome {
    Passed(u64),
    Failed(String),
}

fn run_case(seed: u64, start: Start, steps: u64) -> CaseOutcome {
    let mut rng = Rng(seed);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut world = World::new(start);
        world.appending = (seed / STARTS.len() as u64) % 2 == 1;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            world.snapshot();
            world.global_invariants();
            for _ in 0..steps {
                world.step(&mut rng);
            }
        }));
        (result, world.checks, std::mem::take(&mut world.log))
    }));
    match outcome {
        Ok((Ok(()), checks, _)) => CaseOutcome::Passed(checks),
        Ok((Err(panic), _, log)) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            CaseOutcome::Failed(format!("steps: {}\n  {message}", log.join("\n         ")))
        }
        Err(_) => CaseOutcome::Failed("failed while setting up".into()),
    }
}

#[test]
fn repo_safety_properties_hold_over_random_sequences() {
    let cases = env_number("CKPT_PROP_CASES", 60);
    let steps = env_number("CKPT_PROP_STEPS", 16);
    let base = env_number("CKPT_PROP_BASE_SEED", 0x5eed_c0de);
    let seeds: Vec<u64> = match std::env::var("CKPT_PROP_SEED").ok().and_then(|v| v.parse().ok()) {
        Some(seed) => vec![seed],
        None => (0..cases).map(|i| base + i).collect(),
    };
    // Cases run on as many workers as there are cores; each case is independent (its own
    // repositories and homes) and reports back a line in seed order.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(seeds.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut outcomes: Vec<(u64, Start, CaseOutcome)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&seed) = seeds.get(at) else { break };
                        let start = STARTS[(seed % STARTS.len() as u64) as usize];
                        done.push((seed, start, run_case(seed, start, steps)));
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    outcomes.sort_by_key(|(seed, _, _)| *seed);
    let mut covered: BTreeSet<Start> = BTreeSet::new();
    let mut checks = 0u64;
    let mut failures = Vec::new();
    for (seed, start, outcome) in outcomes {
        match outcome {
            CaseOutcome::Passed(n) => {
                checks += n;
                covered.insert(start);
            }
            CaseOutcome::Failed(message) => failures.push(format!(
                "seed {seed} ({start:?}) failed; replay with CKPT_PROP_SEED={seed}\n  {message}"
            )),
        }
    }
    let summary = format!(
        "property suite: {} cases run, {} of {} start states covered, {} invariant checks passed, {} failures",
        seeds.len(),
        covered.len(),
        STARTS.len(),
        checks,
        failures.len()
    );
    println!("{summary}");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ckpt-property-summary.txt");
    std::fs::write(&target, format!("{summary}\n")).ok();
    assert!(failures.is_empty(), "{summary}\n\n{}", failures.join("\n\n"));
}
