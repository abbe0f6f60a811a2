//! prune, delete and clear: explicit retention, never the newest checkpoint of a session by
//! quota, confirmation like restore, and refs and records removed together.

use crate::common::*;

fn sessions_and_ids(repo: &TestRepo) -> Vec<(String, String)> {
    repo.ckpt_json(&["list"], 0)
        .json
        .iter()
        .map(|v| {
            (
                v["session"].as_str().unwrap_or("-").to_owned(),
                v["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn three_sessions(repo: &TestRepo) -> Vec<(String, String)> {
    for round in 0..3 {
        for session in ["a", "b", "c"] {
            repo.write(format!("{session}.bin"), &vec![round as u8; 1000 * (round + 1)]);
            repo.snapshot(&["--session", session]);
        }
    }
    sessions_and_ids(repo)
}

#[test]
fn prune_by_quota_keeps_every_sessions_newest() {
    let repo = TestRepo::new();
    let all = three_sessions(&repo);
    let dry = repo.ckpt_json(&["prune", "--dry-run", "--quota-bytes", "0"], 0);
    assert_eq!(dry.one("prune")["planned"], 6);
    assert_eq!(sessions_and_ids(&repo), all, "--dry-run removes nothing");

    let run = repo.ckpt_json(&["prune", "--quota-bytes", "0"], 0);
    assert!(run
        .json
        .iter()
        .filter(|v| v["type"] == "prune.remove")
        .all(|v| v["rule"] == "quota"));
    let left = sessions_and_ids(&repo);
    let newest: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .map(|s| all.iter().rev().find(|(session, _)| session == s).unwrap().clone())
        .collect();
    assert_eq!(left, newest, "exactly each session's newest survives");
    assert_eq!(repo.ckpt_refs().len(), 3, "pruned checkpoints are unpinned");
    repo.ckpt_json(&["audit"], 0);
}

#[test]
fn prune_by_count_per_session() {
    let repo = TestRepo::new();
    let all = three_sessions(&repo);
    let run = repo.ckpt_json(&["prune", "--max-per-session", "2"], 0);
    assert_eq!(run.one("prune")["removed"], 3);
    assert!(run
        .json
        .iter()
        .filter(|v| v["type"] == "prune.remove")
        .all(|v| v["rule"] == "max_per_session"));
    let left = sessions_and_ids(&repo);
    assert_eq!(left.len(), 6);
    assert!(
        !left.contains(&all[0]) && !left.contains(&all[1]) && !left.contains(&all[2]),
        "the oldest round went"
    );
}

#[test]
fn delete_and_clear_need_confirmation_and_remove_refs_with_records() {
    let repo = TestRepo::new();
    let all = three_sessions(&repo);
    let before = sessions_and_ids(&repo);
    let refused = repo.ckpt_json(&["delete", &all[0].1[..8]], 4);
    assert_eq!(refused.one("error")["code"], "refused");
    assert_eq!(sessions_and_ids(&repo), before);

    repo.ckpt_json(&["delete", &all[0].1[..8], "--yes"], 0);
    assert_eq!(sessions_and_ids(&repo).len(), 8);
    repo.ckpt_json(&["delete", "--session", "b", "--yes"], 0);
    assert!(sessions_and_ids(&repo).iter().all(|(s, _)| s != "b"));
    assert_eq!(repo.ckpt_refs().len(), 5);
    repo.ckpt_json(&["audit"], 0);

    repo.ckpt_json(&["clear"], 4);
    repo.ckpt_json(&["clear", "--yes"], 0);
    assert!(sessions_and_ids(&repo).is_empty());
    assert!(repo.ckpt_refs().is_empty());
    let fp = repo.fingerprint();
    repo.snapshot(&[]);
    assert_eq!(repo.fingerprint(), fp, "life goes on after clear");
}

#[test]
fn status_reports_protection_sessions_and_disk_use_without_writing() {
    let repo = TestRepo::new();
    repo.write("huge.bin", &vec![7u8; 5000]);
    repo.write("debug.log", b"ignored");
    repo.write("only-in-ckpt.txt", &vec![b'x'; 3000]);
    repo.snapshot(&["--session", "s1", "--max-file-size", "4096"]);
    repo.write("only-in-ckpt.txt", &vec![b'y'; 3000]);
    repo.snapshot(&["--session", "s2"]);
    let before = (repo.fingerprint(), repo.ckpt_refs());
    let run = repo.ckpt_json(&["status", "--max-file-size", "4096"], 0);
    assert_eq!((repo.fingerprint(), repo.ckpt_refs()), before, "status writes nothing");
    let status = run.one("status");
    assert_eq!(status["checkpoints"], 2);
    assert_eq!(status["sessions"].as_array().unwrap().len(), 2);
    let reasons: Vec<(String, String)> = status["not_protected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_owned(),
                v["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        reasons.iter().any(|(p, r)| p == "debug.log" && r == "ignored"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(p, r)| p == "huge.bin" && r.starts_with("too_large")),
        "{reasons:?}"
    );
    // Both versions of only-in-ckpt.txt live only in checkpoints (3000 bytes each); the tracked
    // files are shared with HEAD.
    assert!(status["ckpt_only_bytes"].as_u64().unwrap() >= 6000, "{status}");
    assert!(status["shared_bytes"].as_u64().unwrap() > 0, "{status}");
}

/// Blob ids (no submodule pointers) reachable from `treeish`, by git itself.
fn blobs_by_git(repo: &TestRepo, treeish: &str) -> std::collections::BTreeSet<String> {
    repo.git(&["ls-tree", "-r", "--format=%(objecttype) %(objectname)", treeish])
        .lines()
        .filter_map(|line| line.strip_prefix("blob "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn status_disk_use_matches_git_own_view_of_the_objects() {
    let repo = TestRepo::new();
    repo.write("docs/guide.md", &vec![b'g'; 700]);
    repo.write("kept.txt", &vec![b'k'; 300]);
    repo.commit_all("more");
    // Staged only (index, not HEAD), committed but dropped from the index (HEAD, not index),
    // and two versions that live only in checkpoints.
    repo.write("staged.txt", &vec![b's'; 1100]);
    repo.git(&["add", "staged.txt"]);
    repo.git(&["rm", "-q", "--cached", "kept.txt"]);
    repo.write("scratch.txt", &vec![b'1'; 2300]);
    repo.snapshot(&["--session", "a"]);
    repo.write("scratch.txt", &vec![b'2'; 4100]);
    repo.write("docs/guide.md", &vec![b'h'; 900]);
    repo.snapshot(&["--session", "b"]);

    let mut in_checkpoints = std::collections::BTreeSet::new();
    for pin in repo.ckpt_refs() {
        in_checkpoints.extend(blobs_by_git(&repo, &format!("{pin}^{{tree}}")));
    }
    let in_head = blobs_by_git(&repo, "HEAD");
    let in_index: std::collections::BTreeSet<String> = repo
        .git(&["ls-files", "-s"])
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    let size = |id: &String| -> u64 { repo.git(&["cat-file", "-s", id]).trim().parse().unwrap() };
    let (shared, only): (Vec<&String>, Vec<&String>) = in_checkpoints
        .iter()
        .partition(|id| in_head.contains(*id) || in_index.contains(*id));
    assert!(only.len() >= 3 && shared.len() >= 5, "the scenario covers both sides");

    let status = repo.ckpt_json(&["status"], 0).one("status").clone();
    assert_eq!(status["blobs"].as_u64(), Some(in_checkpoints.len() as u64), "{status}");
    assert_eq!(
        status["shared_bytes"].as_u64(),
        Some(shared.iter().map(|id| size(id)).sum()),
        "{status}"
    );
    assert_eq!(
        status["ckpt_only_bytes"].as_u64(),
        Some(only.iter().map(|id| size(id)).sum()),
        "{status}"
    );
}

#[test]
fn config_file_sets_defaults_and_rejects_unknown_keys() {
    let repo = TestRepo::new();
    let config = repo.common_dir().join("ckpt/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "max_file_sise = 10\n").unwrap();
    let run = repo.ckpt_json(&["snapshot"], 2);
    let message = run.one("error")["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("max_file_sise") && message.contains("config.toml"),
        "{message}"
    );
    assert!(repo.ckpt_refs().is_empty(), "a bad config writes nothing");

    std::fs::write(
        &config,
        "max_file_size = 100\n[retention]\nmax_per_session = 2\nauto_prune = true\n",
    )
    .unwrap();
    repo.write("big.bin", &[1u8; 500]);
    let run = repo.ckpt_json(&["snapshot", "--session", "s"], 0);
    assert!(run.one("snapshot")["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["path"] == "big.bin"));
    for i in 0..3 {
        repo.write("a.txt", format!("{i}").as_bytes());
        repo.snapshot(&["--session", "s"]);
    }
    assert_eq!(
        repo.ckpt_json(&["list"], 0).json.len(),
        2,
        "auto_prune keeps max_per_session"
    );
    assert_eq!(repo.ckpt_refs().len(), 2);

    std::fs::write(&config, "provider = \"copy\"\n").unwrap();
    let run = repo.ckpt_json(&["snapshot"], 0);
    assert_eq!(
        run.one("snapshot")["provider"],
        "copy",
        "the config chooses the provider"
    );
    let run = repo.ckpt_json(&["--provider", "git", "snapshot"], 0);
    assert_eq!(run.one("snapshot")["provider"], "git", "the flag wins over the config");
}

/// `ckpt --json snapshot ARGS` with `CKPT_RETENTION_INTERVAL` set (seconds), when given.
fn snapshot_paced(repo: &TestRepo, args: &[&str], interval: Option<&str>) -> Run {
    let mut cmd = repo.ckpt_command();
    cmd.args(["--json", "snapshot"]).args(args);
    if let Some(secs) = interval {
        cmd.env("CKPT_RETENTION_INTERVAL", secs);
    }
    let run = run_ckpt(cmd);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

fn pruned(run: &Run) -> Vec<String> {
    run.one("snapshot")["pruned"]
        .as_array()
        .expect("pruned")
        .iter()
        .map(|id| id.as_str().expect("id").to_owned())
        .collect()
}

/// Retention runs with no config at all: on its own, at most every interval, by age too,
/// never taking a session's newest; the snapshot that removed something says so on stderr,
/// and `status` shows the policy and what it last removed. `auto_prune = true` looks after
/// every snapshot, `false` never.
#[test]
fn retention_is_on_by_default_paced_by_age_and_says_what_it_removed() {
    let repo = TestRepo::new();
    repo.set_config("[retention]\nmax_age = \"2s\"\n");
    let mut old_a = Vec::new();
    for i in 0..3 {
        repo.write("a.txt", format!("a {i}\n").as_bytes());
        old_a.push(repo.snapshot(&["--session", "a"]));
    }
    repo.write("b.txt", b"b\n");
    let only_b = repo.snapshot(&["--session", "b"]);
    std::thread::sleep(std::time::Duration::from_millis(3100));

    // The first snapshot looked at retention (nothing was old then): within the default
    // interval, the next one does not look again.
    repo.write("a.txt", b"a 3\n");
    let run = snapshot_paced(&repo, &["--session", "a"], None);
    assert!(
        pruned(&run).is_empty(),
        "looked again within the interval: {}",
        run.stdout
    );
    let newest_a = run.one("snapshot")["id"].as_str().expect("id").to_owned();

    // Due now: a's old ones go, b's only checkpoint is b's newest and stays.
    repo.write("a.txt", b"a 4\n");
    let run = snapshot_paced(&repo, &["--session", "a"], Some("0"));
    let mut removed = pruned(&run);
    removed.sort();
    let mut want = old_a.clone();
    want.sort();
    assert_eq!(removed, want, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("retention removed 3 old checkpoint(s): 3 replaced more than 2 seconds ago"),
        "said once, on stderr: {}",
        run.stderr
    );
    let listed = ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id");
    assert!(listed.contains(&only_b) && listed.contains(&newest_a), "{listed:?}");
    assert!(old_a.iter().all(|id| !listed.contains(id)), "{listed:?}");
    assert_eq!(repo.ckpt_refs().len(), listed.len(), "removed checkpoints are unpinned");

    let status = repo.ckpt_json(&["status"], 0);
    let retention = &status.one("status")["retention"];
    assert_eq!(retention["auto"], "periodic");
    assert_eq!(retention["interval_secs"], 600);
    assert_eq!(retention["max_age_secs"], 2);
    assert_eq!(retention["last_removal"]["removed"], 3);
    assert_eq!(retention["last_removal"]["by_rule"]["max_age"], 3);
    let human = repo.ckpt(&["status"]);
    assert!(
        human.stderr.contains("last removed 3 checkpoint(s)") || human.stdout.contains("last removed 3 checkpoint(s)"),
        "{}{}",
        human.stdout,
        human.stderr
    );

    // Off: nothing goes, however old.
    repo.set_config("[retention]\nmax_age = \"1s\"\nauto_prune = false\n");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    repo.write("a.txt", b"a 5\n");
    assert!(pruned(&snapshot_paced(&repo, &["--session", "a"], Some("0"))).is_empty());
    // Every snapshot: a 3 and a 4 were replaced more than a second ago; a 5 was replaced by
    // the snapshot just made, however old it is itself.
    repo.set_config("[retention]\nmax_age = \"1s\"\nauto_prune = true\n");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    repo.write("a.txt", b"a 6\n");
    let run = snapshot_paced(&repo, &["--session", "a"], None);
    assert_eq!(pruned(&run).len(), 2, "a 3 and a 4: {}", run.stdout);
    assert_eq!(
        repo.ckpt_json(&["status"], 0).one("status")["retention"]["auto"],
        "every_snapshot"
    );
}

#[test]
fn prune_by_age_names_its_rule() {
    let repo = TestRepo::new();
    let sessions = three_sessions(&repo);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let run = repo.ckpt_json(&["prune", "--dry-run", "--max-age", "1s"], 0);
    let rules: Vec<&str> = run
        .json
        .iter()
        .filter(|v| v["type"] == "prune.remove")
        .map(|v| v["rule"].as_str().unwrap_or_default())
        .collect();
    // Every session keeps its newest.
    assert_eq!(rules.len(), sessions.len() - 3, "{rules:?}");
    assert!(rules.iter().all(|r| *r == "max_age"), "{rules:?}");
    let refused = repo.ckpt_json(&["prune", "--max-age", "a while"], 2);
    assert!(refused.stderr.contains("a while") || refused.stdout.contains("a while"));
}

/// Every ref outside `refs/ckpt/` with what it points at and, for an annotated tag, what it
/// peels to: what a rewrite of `packed-refs` must give back unchanged.
fn user_refs(repo: &TestRepo) -> Vec<String> {
    repo.git(&["for-each-ref", "--format=%(refname) %(objectname) %(*objectname)"])
        .lines()
        .filter(|line| !line.starts_with("refs/ckpt/"))
        .map(str::to_owned)
        .collect()
}

/// The loose pin files of the repository's one workspace.
fn loose_pins(repo: &TestRepo) -> usize {
    let dir = repo.common_dir().join("refs/ckpt");
    std::fs::read_dir(&dir)
        .map(|workspaces| {
            workspaces
                .flatten()
                .filter(|ws| ws.path().is_dir())
                .map(|ws| std::fs::read_dir(ws.path()).map(|pins| pins.count()).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

fn snapshot_packing(repo: &TestRepo, at: &str, args: &[&str]) -> Run {
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_MAX_LOOSE_PINS", at)
        .args(["--json", "snapshot"])
        .args(args);
    run_ckpt(cmd)
}

/// A long history's pins do not stay one loose file each (every `for-each-ref`, `log --all`
/// and gc of the user reads them all): past a limit they move into `packed-refs`, under git's
/// lock, and every ref of the user's in that file — packed branches, a peeled annotated tag —
/// and every loose one stay exactly as they were; no reflog appears. Packed pins still pin:
/// list, restore and prune work on them, and git's fsck and gc stay clean.
#[test]
fn pins_move_into_packed_refs_and_no_user_ref_changes() {
    let repo = TestRepo::new();
    repo.write("second.txt", b"second\n");
    repo.commit_all("second");
    repo.git(&[
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@e",
        "tag",
        "-a",
        "v1",
        "-m",
        "release",
        "HEAD~1",
    ]);
    repo.git(&["branch", "topic", "HEAD~1"]);
    repo.git(&["pack-refs", "--all"]);
    repo.git(&["branch", "loose-after-packing"]);
    let refs_before = user_refs(&repo);
    let fingerprint = repo.fingerprint();

    let mut ids = Vec::new();
    for i in 0..10 {
        repo.write("a.txt", format!("version {i}\n").as_bytes());
        let run = snapshot_packing(&repo, "4", &["--session", "s"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        ids.push(run.one("snapshot")["id"].as_str().expect("id").to_owned());
    }
    assert!(loose_pins(&repo) < 4, "{} loose pins left", loose_pins(&repo));
    let packed = std::fs::read_to_string(repo.common_dir().join("packed-refs")).expect("packed-refs");
    assert!(packed.matches("refs/ckpt/").count() >= 7, "{packed}");
    assert_eq!(repo.ckpt_refs().len(), 10);
    assert_eq!(user_refs(&repo), refs_before, "a user's ref changed");
    assert_eq!(repo.fingerprint().without_status(), fingerprint.without_status());
    assert!(!repo.common_dir().join("logs/refs/ckpt").exists(), "no reflog for pins");

    // A packed pin pins: the first checkpoint restores byte for byte.
    repo.ckpt_json(&["restore", ids[0].as_str(), "--yes"], 0);
    assert_eq!(repo.read("a.txt"), b"version 0\n");
    // Prune removes packed and loose pins alike, in one rewrite.
    repo.ckpt_json(&["prune", "--max-per-session", "2"], 0);
    let listed = ids_of_list(&repo);
    assert_eq!(repo.ckpt_refs().len(), listed.len(), "{listed:?}");
    assert!(listed.contains(&ids[9]) && !listed.contains(&ids[0]), "{listed:?}");
    assert_eq!(user_refs(&repo), refs_before, "a user's ref changed");
    crate::badday::assert_repository_healthy(&repo);
}

fn ids_of_list(repo: &TestRepo) -> Vec<String> {
    ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id")
}

/// The user's own `git pack-refs --all`, branch updates and `update-ref` running beside
/// snapshots that pack their pins: both sides use `packed-refs.lock`, so neither loses an
/// update. Every user command succeeds, every user ref ends where the user last set it, every
/// snapshot succeeds and stays pinned.
#[test]
fn packing_pins_beside_the_users_pack_refs_and_branch_updates_loses_nothing() {
    let repo = TestRepo::new();
    repo.write("second.txt", b"second\n");
    repo.commit_all("second");
    let commits: Vec<String> = repo.git(&["rev-list", "HEAD"]).lines().map(str::to_owned).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let user = {
        let (root, home, stop) = (repo.root.clone(), repo.home.clone(), stop.clone());
        let commits = commits.clone();
        std::thread::spawn(move || {
            let git = |args: &[&str]| {
                let mut cmd = std::process::Command::new("git");
                isolate(&mut cmd, &home);
                let out = cmd.current_dir(&root).args(args).output().expect("git");
                assert!(
                    out.status.success(),
                    "git {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            let mut last = std::collections::BTreeMap::new();
            let mut round = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || round < 10 {
                let branch = format!("refs/heads/b{}", round % 3);
                let commit = &commits[round % commits.len()];
                git(&["update-ref", &branch, commit]);
                last.insert(branch, commit.clone());
                if round.is_multiple_of(2) {
                    git(&["pack-refs", "--all"]);
                }
                round += 1;
            }
            last
        })
    };
    let mut ids = Vec::new();
    for i in 0..16 {
        repo.write("a.txt", format!("version {i}\n").as_bytes());
        let run = snapshot_packing(&repo, "2", &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        ids.push(run.one("snapshot")["id"].as_str().expect("id").to_owned());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = user.join().expect("the user's git commands all succeeded");
    for (branch, commit) in &last {
        assert_eq!(repo.git(&["rev-parse", branch]).trim(), commit, "{branch}");
    }
    let pinned = repo.ckpt_refs();
    for id in &ids {
        assert!(pinned.iter().any(|pin| pin.ends_with(id.as_str())), "{id} lost its pin");
    }
    assert_eq!(ids_of_list(&repo), ids);
    crate::badday::assert_repository_healthy(&repo);
}

/// Found by a black-box round. A restore that finds nothing changed names the newest
/// checkpoint as its guard, however old: the next snapshot's retention must not take it (age
/// counts from when a state was replaced), or the undo the restore just printed is gone. And a
/// checkpoint dated in the future (a clock set wrong, then right) never makes retention take
/// the one just made.
#[test]
fn retention_never_takes_a_reused_guard_nor_the_checkpoint_just_made() {
    let repo = TestRepo::new();
    repo.set_config("[retention]\nmax_age = \"2s\"\nauto_prune = true\n");
    repo.write("f", b"1\n");
    let first = repo.snapshot(&["--session", "s", "--turn", "1"]);
    repo.write("f", b"2\n");
    let second = repo.snapshot(&["--session", "s", "--turn", "2"]);
    std::thread::sleep(std::time::Duration::from_millis(2600));
    let run = repo.ckpt_json(&["restore", first.as_str(), "--exact", "--yes"], 0);
    let report = run.one("restore");
    assert_eq!(
        report["guard"],
        second.as_str(),
        "nothing changed: the newest is the guard"
    );
    assert_eq!(report["guard_created"], false);
    repo.write("other", b"3\n");
    repo.snapshot(&["--session", "s", "--turn", "3"]);
    repo.ckpt_json(&["restore", second.as_str(), "--exact", "--yes"], 0);
    assert_eq!(repo.read("f"), b"2\n", "the undo point survived the next snapshot");

    // A record dated 2100 sorts after everything; the next snapshot stays.
    repo.set_config("[retention]\nmax_per_session = 1\nauto_prune = true\n");
    let records_file = std::fs::read_dir(repo.common_dir().join("ckpt"))
        .expect("state dir")
        .flatten()
        .map(|ws| ws.path().join("records.json"))
        .find(|path| path.is_file())
        .expect("records.json");
    let mut registry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&records_file).expect("read records")).expect("records JSON");
    let newest = registry["records"]
        .as_array_mut()
        .and_then(|records| records.last_mut())
        .expect("a record");
    newest["time"] = "2100-01-01T00:00:00.000Z".into();
    std::fs::write(&records_file, serde_json::to_vec(&registry).expect("JSON")).expect("write records");
    repo.write("f", b"4\n");
    let just_made = repo.snapshot(&["--session", "s", "--turn", "4"]);
    let listed = ids_of_list(&repo);
    assert!(
        listed.contains(&just_made),
        "{just_made} was removed by its own snapshot: {listed:?}"
    );
}

/// Found by a black-box round: every pin went through a gix transaction, which takes
/// `packed-refs.lock` whenever `packed-refs` exists, so a lock git holds (or a killed process
/// left) failed every snapshot after a second, and a snapshot killed while holding it broke
/// the user's `git branch -d`, `gc` and `pack-refs`. Pins are written as git writes a new
/// loose ref; the lock is never touched, and packing waits for a later snapshot.
#[test]
fn a_lock_on_packed_refs_never_stops_a_snapshot_and_is_never_touched() {
    let repo = TestRepo::new();
    repo.git(&["pack-refs", "--all"]);
    let lock = repo.common_dir().join("packed-refs.lock");
    std::fs::write(&lock, b"held by someone else\n").expect("lock");
    let packed_before = std::fs::read(repo.common_dir().join("packed-refs")).expect("packed-refs");
    let mut ids = Vec::new();
    for i in 0..5 {
        repo.write("a.txt", format!("{i}\n").as_bytes());
        let started = std::time::Instant::now();
        let run = snapshot_packing(&repo, "2", &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        ids.push(run.one("snapshot")["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(std::fs::read(&lock).expect("lock"), b"held by someone else\n");
    assert_eq!(
        std::fs::read(repo.common_dir().join("packed-refs")).expect("packed-refs"),
        packed_before,
        "packing waits while someone holds the lock"
    );
    assert_eq!(ids_of_list(&repo), ids);
    assert_eq!(repo.ckpt_refs().len(), 5);
    std::fs::remove_file(&lock).expect("unlock");
    repo.write("a.txt", b"after\n");
    assert_eq!(snapshot_packing(&repo, "2", &[]).code, 0);
    assert!(loose_pins(&repo) < 2, "packed once the lock is gone");
}

/// `packed-refs` is rewritten only when every line of it survives as git reads it: not one
/// whose header lacks `fully-peeled` (its annotated tags would lose their peeled values), not
/// through a symlink (git writes through it; a rewrite would replace it with a file).
#[test]
fn packed_refs_ckpt_cannot_rewrite_faithfully_is_left_alone() {
    for shape in ["no-header", "old-header", "symlink"] {
        let repo = TestRepo::new();
        repo.git(&["branch", "topic"]);
        repo.git(&["pack-refs", "--all"]);
        let packed = repo.common_dir().join("packed-refs");
        let text = std::fs::read_to_string(&packed).expect("packed-refs");
        let body: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        match shape {
            "no-header" => std::fs::write(&packed, &body).expect("write"),
            "old-header" => std::fs::write(&packed, format!("# pack-refs with: peeled \n{body}")).expect("write"),
            _ => {
                std::fs::rename(&packed, repo.common_dir().join("packed-refs.real")).expect("move");
                std::os::unix::fs::symlink("packed-refs.real", &packed).expect("symlink");
            }
        }
        let before = std::fs::read(&packed).expect("packed-refs");
        let refs_before = user_refs(&repo);
        for i in 0..4 {
            repo.write("a.txt", format!("{i}\n").as_bytes());
            assert_eq!(snapshot_packing(&repo, "2", &[]).code, 0, "{shape}");
        }
        assert_eq!(std::fs::read(&packed).expect("packed-refs"), before, "{shape}");
        assert_eq!(
            std::fs::symlink_metadata(&packed)
                .expect("meta")
                .file_type()
                .is_symlink(),
            shape == "symlink"
        );
        assert_eq!(loose_pins(&repo), 4, "{shape}: the pins stay loose");
        assert_eq!(user_refs(&repo), refs_before, "{shape}");
    }
}

/// Retention runs after the checkpoint is pinned and recorded: when it cannot run (here its
/// removal of packed pins waits on a `packed-refs.lock` someone holds), the snapshot still
/// succeeds and says why retention did not run.
#[test]
fn a_retention_that_cannot_run_never_fails_the_snapshot() {
    let repo = TestRepo::new();
    for i in 0..3 {
        repo.write("a.txt", format!("{i}\n").as_bytes());
        assert_eq!(snapshot_packing(&repo, "2", &["--session", "s"]).code, 0);
    }
    assert!(loose_pins(&repo) < 2, "the pins are packed");
    let lock = repo.common_dir().join("packed-refs.lock");
    std::fs::write(&lock, b"").expect("lock");
    repo.set_config("[retention]\nmax_per_session = 1\nauto_prune = true\n");
    repo.write("a.txt", b"new\n");
    let run = snapshot_packing(&repo, "1000", &["--session", "s"]);
    std::fs::remove_file(&lock).expect("unlock");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("retention could not run this time"),
        "{}",
        run.stderr
    );
    let id = run.one("snapshot")["id"].as_str().expect("id").to_owned();
    assert!(ids_of_list(&repo).contains(&id));
    assert_eq!(ids_of_list(&repo).len(), 4, "nothing was half removed");
}

/// A pin is never written through a symlink: a `refs/ckpt/<workspace>` that leads outside the
/// repository is refused by name, and nothing lands where it leads.
#[test]
fn a_pin_is_never_written_through_a_symlinked_refs_directory() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let pins = repo.common_dir().join("refs/ckpt/main");
    let outside = repo.root.parent().expect("parent").join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::rename(&pins, outside.join("moved")).expect("move");
    std::os::unix::fs::symlink(&outside, &pins).expect("symlink");
    repo.write("a.txt", b"changed\n");
    let run = repo.ckpt_json(&["snapshot"], 1);
    assert!(run.stderr.contains("is a symlink"), "{}", run.stderr);
    let landed: Vec<_> = std::fs::read_dir(&outside)
        .expect("read")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        landed,
        vec![std::ffi::OsString::from("moved")],
        "nothing written outside"
    );
}
