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
            .contains("retention removed 3 old checkpoint(s): 3 older than 2s"),
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
    // Every snapshot: all but the one just made are older than a second.
    repo.set_config("[retention]\nmax_age = \"1s\"\nauto_prune = true\n");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    repo.write("a.txt", b"a 6\n");
    let run = snapshot_paced(&repo, &["--session", "a"], None);
    assert_eq!(pruned(&run).len(), 3, "a 3, a 4 and a 5: {}", run.stdout);
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
