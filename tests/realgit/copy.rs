//! The copy provider: plain directories and unborn repositories get the same checkpoints, kept in
//! a private store outside the workspace ($CKPT_HOME), with the same restore transaction.

use std::path::Path;

use crate::common::*;

fn ckpt_home(repo: &TestRepo) -> std::path::PathBuf {
    repo.home.join("ckpt-home")
}

/// The copy store's directory for the (only) workspace of this test.
fn workspace_dir(repo: &TestRepo) -> std::path::PathBuf {
    let workspaces = ckpt_home(repo).join("workspaces");
    let mut entries: Vec<_> = std::fs::read_dir(workspaces).unwrap().flatten().collect();
    assert_eq!(entries.len(), 1, "one workspace");
    entries.remove(0).path()
}

/// `ckpt --json ARGS` with CKPT_HOME inside the test's home.
fn run(repo: &TestRepo, args: &[&str], code: i32) -> Run {
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_HOME", ckpt_home(repo)).arg("--json").args(args);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let result = Run {
        code: out.status.code().unwrap_or(-1),
        json: stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(result.code, code, "ckpt {args:?}\n{}\n{}", result.stdout, result.stderr);
    result
}

fn snapshot(repo: &TestRepo) -> String {
    let out = run(repo, &["snapshot"], 0);
    assert_eq!(out.one("snapshot")["provider"], "copy");
    out.one("snapshot")["id"].as_str().unwrap().to_owned()
}

fn files(root: &Path) -> std::collections::BTreeMap<Vec<u8>, Entry> {
    worktree_state(root)
        .into_iter()
        .filter(|(_, e)| !matches!(e, Entry::Dir))
        .collect()
}

#[test]
fn plain_directory_round_trip_exact_and_guard_undo() {
    let repo = TestRepo::bare_dir();
    repo.write("a.txt", b"alpha\n");
    repo.write(bpath(b"caf\xe9 notes..old.txt"), b"latin1 name\n");
    repo.write("bin/run.sh", b"#!/bin/sh\n");
    repo.chmod("bin/run.sh", 0o755);
    let outside = repo.root.parent().unwrap().join("outside-target");
    std::fs::create_dir_all(&outside).unwrap();
    repo.symlink(&outside, "link-out");
    repo.write("node_modules/pkg/index.js", b"excluded by default\n");
    let id = snapshot(&repo);
    let original = files(&repo.root);

    repo.write("a.txt", b"broken\n");
    repo.remove("bin");
    repo.write("new.txt", b"created after\n");
    repo.write("node_modules/pkg/index.js", b"changed, never touched\n");
    let edited = files(&repo.root);
    let preview = run(&repo, &["preview", &id, "--exact"], 0);
    assert!(json_paths(&preview.one("preview")["delete"]).contains(&b"new.txt".to_vec()));
    let restored = run(&repo, &["restore", &id, "--exact", "--yes"], 0);
    let report = restored.one("restore");
    assert_eq!(report["verified"], true);
    let mut now = files(&repo.root);
    assert_eq!(
        now.remove(&b"node_modules/pkg/index.js"[..]),
        Some(Entry::File {
            content: b"changed, never touched\n".to_vec(),
            exec: false
        }),
        "default-excluded paths are never restored over"
    );
    let mut want = original.clone();
    want.remove(&b"node_modules/pkg/index.js"[..]);
    assert_eq!(now, want);
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "the link was captured as a link, never followed"
    );

    let guard = report["guard"].as_str().unwrap().to_owned();
    run(&repo, &["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(files(&repo.root), edited, "the guard undoes the restore exactly");
    run(&repo, &["audit"], 0);
}

#[test]
fn the_store_lives_outside_the_workspace_and_names_cannot_collide() {
    let repo = TestRepo::bare_dir();
    for name in [
        "records.json",
        "statcache.bin",
        "statcache.blocks",
        "exclude",
        "lock",
        "config",
        "HEAD",
        "objects",
        "workspace",
    ] {
        repo.write(name, format!("user file named {name}\n").as_bytes());
    }
    repo.write("refs/ckpt/x", b"a user directory that looks like refs\n");
    let id = snapshot(&repo);
    let original = files(&repo.root);
    for path in original.keys() {
        std::fs::write(repo.root.join(bpath(path)), b"clobbered").unwrap();
    }
    run(&repo, &["restore", &id, "--yes"], 0);
    assert_eq!(files(&repo.root), original);
    let home = ckpt_home(&repo);
    assert!(home.join("objects").is_dir());
    assert!(
        !repo.root.join(".ckpt").exists() && !repo.root.join(".git").exists(),
        "nothing of ckpt's in the workspace"
    );
}

#[test]
fn ckptignore_and_gitignore_are_honoured_symmetrically() {
    let repo = TestRepo::bare_dir();
    repo.write(".ckptignore", b"*.tmp\n!dist/\n");
    repo.write(".gitignore", b"secret.env\n");
    repo.write("keep.txt", b"keep");
    repo.write("scratch.tmp", b"ignored by .ckptignore");
    repo.write("secret.env", b"ignored by .gitignore");
    repo.write("dist/bundle.js", b"re-included");
    repo.write("build/out.o", b"excluded by default");
    let run_out = run(&repo, &["snapshot"], 0);
    let id = run_out.one("snapshot")["id"].as_str().unwrap().to_owned();
    let key_dir = workspace_dir(&repo);
    let listing = std::process::Command::new("git")
        .args([
            "--git-dir",
            key_dir.join("git").to_str().unwrap(),
            "ls-tree",
            "-r",
            "--name-only",
            &id,
        ])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&listing.stdout).into_owned();
    assert!(
        names.contains("keep.txt") && names.contains("dist/bundle.js"),
        "{names}"
    );
    assert!(
        !names.contains("scratch.tmp") && !names.contains("secret.env") && !names.contains("build/"),
        "{names}"
    );

    repo.write("scratch.tmp", b"changed later");
    repo.write("keep.txt", b"edited");
    run(&repo, &["restore", &id, "--yes", "--exact"], 0);
    assert_eq!(
        repo.read("scratch.tmp"),
        b"changed later",
        "ignored paths are never restored over or deleted"
    );
    assert_eq!(repo.read("keep.txt"), b"keep");
}

#[test]
fn an_unborn_repository_gets_git_own_exclude_files_too() {
    let repo = TestRepo::bare_dir();
    repo.git(&["init", "-q"]);
    std::fs::write(repo.git_dir().join("info/exclude"), b"local-only.txt\n").unwrap();
    let global = repo.home.join(".config/git/ignore");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    std::fs::write(&global, b"*.bak\n").unwrap();
    repo.write(".ckptignore", b"!keep.bak\n");
    for name in ["a.txt", "local-only.txt", "old.bak", "keep.bak"] {
        repo.write(name, name.as_bytes());
    }
    let id = snapshot(&repo);
    let listing = std::process::Command::new("git")
        .args([
            "--git-dir",
            workspace_dir(&repo).join("git").to_str().unwrap(),
            "ls-tree",
            "--name-only",
            &id,
        ])
        .output()
        .unwrap();
    let names: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        names,
        vec![".ckptignore", "a.txt", "keep.bak"],
        "info/exclude and the global excludes apply; .ckptignore re-includes"
    );
}

#[test]
fn unborn_repository_then_first_commit_keeps_copy_checkpoints_restorable() {
    let repo = TestRepo::bare_dir();
    repo.git(&["init", "-q"]);
    repo.write(".gitignore", b"*.log\n");
    repo.write("a.txt", b"before the first commit\n");
    repo.write("debug.log", b"ignored\n");
    let git_files_before = worktree_state(&repo.git_dir());
    let copy_id = snapshot(&repo);
    assert_eq!(
        worktree_state(&repo.git_dir()),
        git_files_before,
        "the user's .git is untouched"
    );

    repo.commit_all("first");
    repo.write("a.txt", b"after the first commit\n");
    let out = run(&repo, &["snapshot"], 0);
    assert_eq!(
        out.one("snapshot")["provider"],
        "git",
        "auto switches to git once HEAD is born"
    );
    let listed = run(&repo, &["list"], 0);
    let providers: Vec<String> = listed
        .json
        .iter()
        .map(|v| v["provider"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(providers, vec!["copy", "git"], "earlier copy checkpoints stay listed");
    let before = repo.fingerprint();
    run(&repo, &["restore", &copy_id[..8], "--yes"], 0);
    assert_eq!(repo.read("a.txt"), b"before the first commit\n");
    assert_eq!(repo.fingerprint().without_status(), before.without_status());
}

#[test]
fn explicit_git_provider_on_a_plain_directory_fails_loudly() {
    let repo = TestRepo::bare_dir();
    repo.write("a.txt", b"a");
    let out = run(&repo, &["--provider", "git", "snapshot"], 1);
    assert_eq!(out.one("error")["code"], "no_provider");
}

#[test]
fn two_workspaces_with_the_same_content_share_its_objects() {
    let first = TestRepo::bare_dir();
    let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    first.write("big.bin", &content);
    snapshot(&first);
    let home = ckpt_home(&first);
    let count = |home: &Path| -> usize {
        let mut n = 0;
        for dir in std::fs::read_dir(home.join("objects")).unwrap().flatten() {
            if dir.file_name().len() == 2 {
                n += std::fs::read_dir(dir.path()).unwrap().count();
            }
        }
        n
    };
    let before = count(&home);
    let second_root = first.root.parent().unwrap().join("second");
    std::fs::create_dir_all(&second_root).unwrap();
    std::fs::write(second_root.join("big.bin"), &content).unwrap();
    let out = first
        .ckpt_command()
        .current_dir(&second_root)
        .env("CKPT_HOME", &home)
        .args(["--json", "snapshot"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        count(&home),
        before + 1,
        "only a new commit object: blob and tree are shared"
    );
}

#[test]
fn a_tampered_copy_registry_is_refused() {
    let repo = TestRepo::bare_dir();
    repo.write("a.txt", b"a");
    snapshot(&repo);
    let key_dir = workspace_dir(&repo);
    let records = key_dir.join("state/records.json");
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&records).unwrap()).unwrap();
    value["records"][0]["skipped"] = serde_json::json!([{"path": "../../escape", "reason": "x"}]);
    std::fs::write(&records, serde_json::to_vec(&value).unwrap()).unwrap();
    repo.write("a.txt", b"edited");
    let out = run(&repo, &["restore", "latest", "--yes"], 1);
    assert_eq!(out.one("error")["code"], "corrupt_registry");
    assert_eq!(repo.read("a.txt"), b"edited");
}

fn loose_objects(home: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for dir in std::fs::read_dir(home.join("objects")).unwrap().flatten() {
        let prefix = dir.file_name().to_string_lossy().into_owned();
        if prefix.len() == 2 {
            for object in std::fs::read_dir(dir.path()).unwrap().flatten() {
                out.insert(format!("{prefix}{}", object.file_name().to_string_lossy()));
            }
        }
    }
    out
}

#[test]
fn gc_removes_only_unreferenced_content_past_the_grace_period() {
    let repo = TestRepo::bare_dir();
    repo.write("shared.txt", b"content both workspaces have\n");
    repo.write("doomed.txt", b"content only a deleted checkpoint had\n");
    snapshot(&repo);
    let home = ckpt_home(&repo);
    let second = repo.root.parent().unwrap().join("second");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(second.join("shared.txt"), b"content both workspaces have\n").unwrap();
    let out = repo
        .ckpt_command()
        .current_dir(&second)
        .env("CKPT_HOME", &home)
        .args(["--json", "snapshot"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let second_id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    run(&repo, &["clear", "--yes"], 0);
    let young = run(&repo, &["gc"], 0);
    assert_eq!(
        young.one("gc")["removed"],
        0,
        "the default grace period keeps fresh content"
    );
    let before = loose_objects(&home);
    let dry = run(&repo, &["gc", "--grace-seconds", "0", "--dry-run"], 0);
    assert!(dry.one("gc")["removed"].as_u64().unwrap() >= 2);
    assert_eq!(loose_objects(&home), before, "--dry-run deletes nothing");

    // A held workspace lock makes gc wait (and here give up) rather than race a snapshot.
    let lock_path = workspace_dirs(&home).into_iter().next().unwrap().join("state/lock");
    let holder = std::fs::OpenOptions::new().write(true).open(&lock_path).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&holder).unwrap();
    let blocked = repo
        .ckpt_command()
        .env("CKPT_HOME", &home)
        .env("CKPT_LOCK_TIMEOUT_SECS", "1")
        .args(["--json", "gc", "--grace-seconds", "0"])
        .output()
        .unwrap();
    assert_eq!(blocked.status.code(), Some(1));
    assert_eq!(loose_objects(&home), before);
    drop(holder);

    let done = run(&repo, &["gc", "--grace-seconds", "0"], 0);
    assert!(done.one("gc")["removed"].as_u64().unwrap() >= 2);
    // The other workspace's checkpoint is whole and restorable.
    std::fs::write(second.join("shared.txt"), b"edited").unwrap();
    let restore = repo
        .ckpt_command()
        .current_dir(&second)
        .env("CKPT_HOME", &home)
        .args(["--json", "restore", &second_id, "--yes"])
        .output()
        .unwrap();
    assert!(restore.status.success(), "{}", String::from_utf8_lossy(&restore.stderr));
    assert_eq!(
        std::fs::read(second.join("shared.txt")).unwrap(),
        b"content both workspaces have\n"
    );
    let audit = repo
        .ckpt_command()
        .current_dir(&second)
        .env("CKPT_HOME", &home)
        .args(["audit"])
        .output()
        .unwrap();
    assert!(audit.status.success(), "{}", String::from_utf8_lossy(&audit.stdout));
}

fn workspace_dirs(home: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(home.join("workspaces"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// Found by a review: gc counted only the refs git could read, so a checkpoint whose pin had
/// become a FIFO, a link or a directory, or a workspace whose private git directory had gone,
/// lost its objects for good. A commit a record names is now live whether or not its pin reads,
/// and gc refuses a workspace with checkpoints but no git directory.
#[test]
fn gc_keeps_what_records_name_even_when_their_pins_cannot_be_read() {
    let repo = TestRepo::bare_dir();
    repo.write("keep.txt", b"content only the first checkpoint has\n");
    let first = snapshot(&repo);
    repo.remove("keep.txt");
    repo.write("other.txt", b"later\n");
    snapshot(&repo);
    let git = workspace_dir(&repo).join("git");
    let pin = git.join(format!("refs/ckpt/copy/{first}"));
    std::fs::remove_file(&pin).unwrap();
    mkfifo(&pin);
    let before = loose_objects(&ckpt_home(&repo));
    run(&repo, &["gc", "--grace-seconds", "0"], 0);
    assert_eq!(
        loose_objects(&ckpt_home(&repo)),
        before,
        "nothing a record names is removed"
    );
    run(&repo, &["doctor", "--fix"], 0);
    run(&repo, &["restore", &first, "--exact", "--yes"], 0);
    assert_eq!(repo.read("keep.txt"), b"content only the first checkpoint has\n");

    let aside = repo.home.join("git-aside");
    std::fs::rename(&git, &aside).unwrap();
    let left = loose_objects(&ckpt_home(&repo));
    let refused = run(&repo, &["gc", "--grace-seconds", "0"], 4);
    assert!(
        refused.one("error")["message"]
            .as_str()
            .unwrap_or_default()
            .contains("private git directory"),
        "{:?}",
        refused.json
    );
    assert_eq!(loose_objects(&ckpt_home(&repo)), left, "a refused gc removes nothing");
    std::fs::rename(&aside, &git).unwrap();
    run(&repo, &["audit"], 0);
}
