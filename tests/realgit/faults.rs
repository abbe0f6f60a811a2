//! Fault injection (built with `--features fault-injection`): the process aborts at a named point
//! inside snapshot or restore, and what is left must be whole — no ref or record for an aborted
//! capture, and an aborted restore that the guard can still undo byte for byte.

use crate::common::*;

fn ckpt_with_fault(repo: &TestRepo, fault: &str, args: &[&str]) -> std::process::Output {
    repo.ckpt_command()
        .env("CKPT_FAULT", fault)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn an_aborted_snapshot_publishes_no_ref_and_no_record() {
    let repo = TestRepo::new();
    let first = repo.snapshot(&[]);
    repo.write("new.txt", b"captured by the aborted snapshot");
    for fault in ["snapshot:after-blobs", "snapshot:after-commit"] {
        let before = repo.fingerprint();
        let out = ckpt_with_fault(&repo, fault, &["--json", "snapshot"]);
        assert!(!out.status.success(), "{fault}: the process must have aborted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(fault));
        assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/main/{first}")], "{fault}");
        assert_eq!(
            ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id"),
            vec![first.clone()],
            "{fault}"
        );
        assert_eq!(repo.fingerprint(), before, "{fault}");
    }
    let second = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(
        second.one("snapshot")["created"],
        true,
        "the next snapshot works normally"
    );
}

#[test]
fn an_aborted_restore_can_be_undone_through_its_guard() {
    let repo = TestRepo::new();
    for i in 0..10 {
        repo.write(format!("f{i}.txt"), format!("original {i}").as_bytes());
    }
    let id = repo.snapshot(&[]);
    let original = repo.worktree();
    for i in 0..10 {
        repo.write(format!("f{i}.txt"), format!("agent {i}").as_bytes());
    }
    repo.write("agent-new.txt", b"new");
    let edited = repo.worktree();
    let out = ckpt_with_fault(
        &repo,
        "restore:after-first-write",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(!out.status.success());
    let journal = repo.common_dir().join("ckpt/main/restore-journal.json");
    assert!(journal.is_file(), "an interrupted restore leaves its journal");
    let journal: serde_json::Value = serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
    let guard = journal["guard"].as_str().unwrap().to_owned();
    let mut now = repo.worktree();
    assert_ne!(now, edited, "the first write landed before the abort");
    // Temp files of writes staged but not yet in place may remain; the next restore removes them.
    let with_temps = now.len();
    now.retain(|path, _| {
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
        !(name.starts_with(b".ckpt-") && name.ends_with(b".tmp"))
    });
    let temps = with_temps - now.len();
    for (path, entry) in &now {
        let whole = Some(entry) == original.get(path) || Some(entry) == edited.get(path);
        assert!(
            whole,
            "{} is neither the old nor the new version",
            String::from_utf8_lossy(path)
        );
    }
    // Its guard and target cannot be deleted while the journal is pending.
    for id in [&guard, &id] {
        let delete = repo.ckpt(&["--json", "delete", id, "--yes"]);
        assert_eq!(delete.code, 4, "{}", delete.stdout);
        assert!(delete.stdout.contains("interrupted restore"), "{}", delete.stdout);
    }
    assert_eq!(repo.ckpt(&["--json", "clear", "--yes"]).code, 4);
    let undo = repo.ckpt_json(&["restore", &guard, "--exact", "--yes"], 0);
    assert_eq!(undo.one("restore")["verified"], true);
    let removed = undo.stderr.matches("removed leftover temp file").count();
    assert_eq!(removed, temps, "{}", undo.stderr);
    assert_eq!(
        repo.worktree(),
        edited,
        "the guard undoes a half-finished restore exactly"
    );
}

/// A restore whose directory sync fails (an I/O error made up by the fault point) names every
/// path in that directory as failed and is not verified: its renames may not survive a crash.
#[test]
fn a_directory_that_cannot_be_synced_fails_the_restore_loudly() {
    let repo = TestRepo::new();
    repo.write("docs/a.txt", b"original a\n");
    repo.write("docs/b.txt", b"original b\n");
    let id = repo.snapshot(&[]);
    repo.write("docs/a.txt", b"agent a\n");
    repo.remove("docs/b.txt");
    repo.write("docs/new.txt", b"agent new\n");
    let out = ckpt_with_fault(
        &repo,
        "restore:directory-sync",
        &["--json", "restore", &id, "--yes", "--exact"],
    );
    assert!(
        !out.status.success(),
        "a restore that may not be durable must not succeed"
    );
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let restore = records
        .iter()
        .find(|r| r["type"] == "restore")
        .unwrap_or_else(|| panic!("no restore record: {records:?}"));
    assert_eq!(restore["verified"], false, "{restore}");
    let failed: Vec<(String, String)> = restore["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut paths: Vec<&str> = failed.iter().map(|(p, _)| p.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["docs/a.txt", "docs/b.txt", "docs/new.txt"], "{restore}");
    for (path, error) in &failed {
        assert!(error.contains("could not be synced"), "{path}: {error}");
    }
    // The content itself was put in place: only its durability is in doubt.
    assert_eq!(repo.read("docs/a.txt"), b"original a\n");
    let again = repo.ckpt_json(&["restore", &id, "--yes", "--exact"], 0);
    assert_eq!(again.one("restore")["verified"], true);
}
