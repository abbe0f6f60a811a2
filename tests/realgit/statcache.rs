//! The stat cache and index seeding: unchanged files are not read, and every shortcut is
//! abandoned the moment it could be wrong (racy timestamps, corrupt cache, pruned checkpoint,
//! content-converting filters).

use std::time::{Duration, SystemTime};

use crate::common::*;

fn scan(run: &Run) -> (u64, u64, u64) {
    let s = &run.one("snapshot")["scan"];
    (
        s["from_cache"].as_u64().unwrap(),
        s["from_index"].as_u64().unwrap(),
        s["read"].as_u64().unwrap(),
    )
}

#[test]
fn unchanged_files_come_from_the_stat_cache() {
    let repo = TestRepo::new();
    repo.write("untracked.txt", b"u");
    repo.settle();
    repo.ckpt_json(&["snapshot"], 0);
    repo.settle();
    repo.write("changed.txt", b"new");
    let run = repo.ckpt_json(&["snapshot"], 0);
    let (cache, _, read) = scan(&run);
    assert_eq!(read, 1, "only the new file is read: {:?}", run.one("snapshot")["scan"]);
    assert!(cache >= 4, "{cache}");
}

#[test]
fn trees_rebuilt_from_the_cached_checkpoint_match_git_exactly() {
    let repo = TestRepo::new();
    repo.write("deep/a/b/c.txt", b"c");
    repo.write("deep/a/b/sibling.txt", b"s");
    repo.write("deep/a/keep.txt", b"k");
    repo.write("deep/z/untouched.txt", b"u");
    repo.write("deep/z/deleted.txt", b"d");
    repo.write("lonely/only.txt", b"o");
    repo.write("x", b"a file, then a directory");
    repo.write("exec.sh", b"#!/bin/sh\n");
    repo.symlink("deep/a/keep.txt", "link");
    repo.write("gone-dir/sub/f.txt", b"g");
    repo.commit_all("tree shapes");
    repo.write("untracked/u.txt", b"u");
    repo.settle();
    repo.snapshot(&[]);
    repo.settle();

    repo.write("deep/a/b/c.txt", b"changed");
    // The only change in deep/z: nothing but the cache says it was there.
    repo.remove("deep/z/deleted.txt");
    repo.remove("lonely/only.txt");
    std::fs::remove_dir(repo.path("lonely")).unwrap();
    repo.remove("x");
    repo.write("x/y.txt", b"now a directory");
    repo.write("brand/new/dir/z.txt", b"new");
    repo.chmod("exec.sh", 0o755);
    repo.remove("link");
    repo.write("link", b"a file now");
    std::fs::remove_dir_all(repo.path("gone-dir")).unwrap();
    repo.write("untracked/u.txt", b"edited");
    let run = repo.ckpt_json(&["snapshot"], 0);
    let (cached, _, read) = scan(&run);
    assert!(
        cached >= 5 && read >= 5,
        "the cache served the unchanged files: {cached} cached, {read} read"
    );
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(
        repo.git(&["rev-parse", &format!("{id}^{{tree}}")]).trim(),
        repo.worktree_tree_by_git(),
        "the checkpoint's tree is the tree git writes for this worktree"
    );
}

#[test]
fn files_written_in_the_second_of_the_cache_are_read_again_not_trusted() {
    let repo = TestRepo::new();
    repo.write("hot.txt", b"v1");
    // hot.txt and the cache must share a second (or hot.txt be newer), so its entry is racy;
    // a loaded machine can cross a second boundary between the write and the cache's, so the
    // file's mtime is put a few seconds ahead.
    std::fs::File::options()
        .write(true)
        .open(repo.path("hot.txt"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(3))
        .unwrap();
    let first = repo.snapshot(&[]);
    let run = repo.ckpt_json(&["snapshot"], 0);
    let (_, _, read) = scan(&run);
    assert!(
        read >= 1,
        "a racy entry is read again: {:?}",
        run.one("snapshot")["scan"]
    );
    assert_eq!(
        run.one("snapshot")["created"],
        false,
        "read back unchanged: same checkpoint"
    );
    assert_eq!(run.one("snapshot")["id"].as_str(), Some(first.as_str()));

    repo.write("hot.txt", b"v2");
    repo.write("sub/new.txt", b"new");
    let id = repo.snapshot(&[]);
    assert_ne!(id, first);
    assert_eq!(repo.git(&["show", &format!("{id}:hot.txt")]), "v2");
    assert_eq!(
        repo.git(&["rev-parse", &format!("{id}^{{tree}}")]).trim(),
        repo.worktree_tree_by_git()
    );
}

#[test]
fn same_size_rewrite_with_old_mtime_is_still_seen() {
    let repo = TestRepo::new();
    repo.write("f.txt", b"aaaa");
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(repo.path("f.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    repo.settle();
    repo.snapshot(&[]);
    repo.settle();
    repo.write("f.txt", b"bbbb");
    std::fs::File::options()
        .write(true)
        .open(repo.path("f.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let id = repo.snapshot(&[]);
    assert_eq!(
        repo.git(&["show", &format!("{id}:f.txt")]),
        "bbbb",
        "ctime changed, so the file is re-read"
    );
}

#[test]
fn a_corrupt_cache_is_discarded_not_trusted() {
    let repo = TestRepo::new();
    repo.settle();
    repo.snapshot(&[]);
    let cache = repo.common_dir().join("ckpt/main/statcache.bin");
    let mut bytes = std::fs::read(&cache).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&cache, &bytes).unwrap();
    repo.write("README.md", b"changed");
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(scan(&run).0, 0, "nothing may come from a corrupt cache");
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(repo.git(&["show", &format!("{id}:README.md")]), "changed");
}

#[test]
fn a_cache_of_a_deleted_checkpoint_is_not_used() {
    let repo = TestRepo::new();
    repo.write("only-untracked.txt", b"content only a checkpoint holds");
    repo.settle();
    let id = repo.snapshot(&[]);
    repo.git(&["update-ref", "-d", &format!("refs/ckpt/main/{id}")]);
    repo.git(&["reflog", "expire", "--expire=now", "--all"]);
    repo.git(&["gc", "-q", "--prune=now"]);
    repo.settle();
    repo.write("other.txt", b"x");
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(scan(&run).0, 0, "the cache named a checkpoint that is gone");
    let new = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    repo.remove("only-untracked.txt");
    repo.ckpt_json(&["restore", &new, "--yes"], 0);
    assert_eq!(repo.read("only-untracked.txt"), b"content only a checkpoint holds");
}

#[test]
fn the_first_snapshot_is_seeded_from_the_index_only_when_safe() {
    let origin = TestRepo::new();
    for i in 0..30 {
        origin.write(format!("many/f{i}.txt"), format!("file {i}\n").as_bytes());
    }
    origin.commit_all("many");
    let clone = TestRepo::bare_dir();
    let dest = clone.root.join("clone");
    clone.git(&["clone", "-q", origin.root.to_str().unwrap(), dest.to_str().unwrap()]);
    // Past the racy second, with the index's stat data refreshed, like `git status` does.
    settle_worktree(&dest, &[]);
    let index_before_run = std::fs::read(dest.join(".git/index")).unwrap();
    let run = clone.ckpt_in(&dest, &["--json".as_ref(), "snapshot".as_ref()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (_, seeded, read) = scan(&run);
    assert!(
        seeded >= 30,
        "tracked files come from the index: seeded {seeded}, read {read}"
    );
    assert_eq!(read, 0);
    let id = run.one("snapshot")["id"].as_str().unwrap().to_owned();
    assert_eq!(
        clone.git_in(&dest, &["rev-parse", &format!("{id}^{{tree}}")]),
        clone.git_in(&dest, &["rev-parse", "HEAD^{tree}"])
    );
    assert_eq!(
        std::fs::read(dest.join(".git/index")).unwrap(),
        index_before_run,
        "the index is only read"
    );

    // With a content filter configured, index ids are not raw bytes: no seeding.
    let filtered = TestRepo::new();
    filtered.git(&["config", "core.autocrlf", "true"]);
    filtered.settle();
    let run = filtered.ckpt_json(&["snapshot"], 0);
    assert_eq!(scan(&run).1, 0, "autocrlf disables seeding");
}
