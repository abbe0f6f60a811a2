//! Concurrency, kill -9 at random moments, and gc survival.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;

fn files_only(map: BTreeMap<Vec<u8>, Entry>) -> BTreeMap<Vec<u8>, Entry> {
    map.into_iter().filter(|(_, e)| !matches!(e, Entry::Dir)).collect()
}

#[test]
fn eight_snapshotters_and_a_restorer_keep_registry_and_refs_whole() {
    let repo = TestRepo::new();
    let first = repo.snapshot(&[]);
    let workers: Vec<_> = (0..9)
        .map(|worker| {
            let root = repo.root.clone();
            let mut cmd_base = repo.ckpt_command();
            cmd_base.current_dir(&root);
            let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = cmd_base
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned())))
                .collect();
            let first = first.clone();
            std::thread::spawn(move || {
                let mut outputs = Vec::new();
                for round in 0..4 {
                    let mut cmd = std::process::Command::new(CKPT);
                    cmd.env_clear().envs(envs.iter().cloned()).current_dir(&root);
                    if worker == 8 {
                        cmd.args(["--json", "restore", &first, "--yes", "--", "src"]);
                    } else {
                        std::fs::write(root.join(format!("w{worker}.txt")), format!("{worker}-{round}")).unwrap();
                        cmd.args(["--json", "snapshot", "--session", &format!("w{worker}")]);
                    }
                    let out = cmd.output().unwrap();
                    assert!(
                        out.status.success(),
                        "worker {worker}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                outputs
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker panicked");
    }
    let audit = repo.ckpt_json(&["audit"], 0);
    let summary = audit.one("audit");
    assert_eq!(summary["records"], summary["refs"]);
    assert!(repo.git_raw(&["fsck", "--full"]).status.success());
    let types = repo.git(&["for-each-ref", "--format=%(objecttype)", "refs/ckpt/"]);
    assert!(types.lines().all(|t| t == "commit"), "{types}");
}

#[test]
fn lock_waits_are_reported_and_bounded() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let lock_path = repo.common_dir().join("ckpt/main/lock");
    let holder = std::fs::OpenOptions::new().write(true).open(&lock_path).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&holder).unwrap();
    repo.write("new.txt", b"x");
    let out = repo
        .ckpt_command()
        .env("CKPT_LOCK_TIMEOUT_SECS", "1.5")
        .args(["--json", "snapshot"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("waiting for another ckpt process"), "{stderr}");
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["code"], "lock_timeout");
    assert!(error["message"].as_str().unwrap().contains("lock"), "{error}");
    drop(holder);
    repo.ckpt_json(&["snapshot"], 0);
}

#[test]
fn every_checkpoint_survives_aggressive_gc_and_restores_byte_exact() {
    let repo = TestRepo::new();
    let mut states = Vec::new();
    for i in 0..4 {
        repo.write(format!("untracked-{i}.bin"), &vec![i as u8; 3000 + i]);
        repo.write("src/lib.rs", format!("version {i}\n").as_bytes());
        if i == 2 {
            repo.symlink("src/lib.rs", "link");
            repo.write("run.sh", b"#!/bin/sh\n");
            repo.chmod("run.sh", 0o755);
        }
        let id = repo.snapshot(&[]);
        states.push((id, files_only(repo.worktree())));
    }
    repo.git(&["reflog", "expire", "--expire=now", "--all"]);
    repo.git(&["gc", "-q", "--prune=now", "--aggressive"]);
    repo.git(&["repack", "-adfq"]);
    repo.git(&["prune"]);
    assert!(repo.git_raw(&["fsck", "--full"]).status.success());
    for (id, expected) in states.iter().rev() {
        let run = repo.ckpt_json(&["restore", id, "--exact", "--yes"], 0);
        assert_eq!(run.one("restore")["verified"], true);
        assert_eq!(&files_only(repo.worktree()), expected, "checkpoint {id} after gc");
    }
    repo.ckpt_json(&["audit"], 0);
}

/// Deterministic pseudo-random delays (no dependency on a RNG crate).
fn delays(seed: u64, n: usize, max_ms: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % max_ms
        })
        .collect()
}

#[test]
fn kill_9_at_random_moments_leaves_whole_state_that_doctor_can_settle() {
    let repo = TestRepo::new();
    for d in 0..20 {
        for f in 0..40 {
            repo.write(
                format!("bulk/d{d}/f{f}.txt"),
                format!("file {d}/{f}\n").repeat(40).as_bytes(),
            );
        }
    }
    repo.commit_all("bulk");
    let base = repo.snapshot(&[]);
    let seed = std::env::var("CKPT_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9e37_79b9u64);
    for (round, delay) in delays(seed, 10, 250).into_iter().enumerate() {
        for d in 0..20 {
            repo.write(
                format!("bulk/d{d}/f{round}.txt"),
                format!("round {round} changed {d}\n").as_bytes(),
            );
        }
        repo.write(format!("new-{round}.txt"), b"created");
        let before = files_only(repo.worktree());
        let restore = round % 2 == 1;
        let mut child = if restore {
            repo.ckpt_command()
                .args(["restore", &base, "--exact", "--yes"])
                .spawn()
                .unwrap()
        } else {
            repo.ckpt_command().args(["snapshot"]).spawn().unwrap()
        };
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().ok();
        let finished = child.wait().unwrap().success();

        let audit = repo.ckpt(&["--json", "audit"]);
        assert!(
            audit.code == 0 || audit.code == 1,
            "audit itself must work: {}",
            audit.stderr
        );
        let codes: Vec<String> = audit
            .json
            .iter()
            .filter(|v| v["type"] == "audit.problem")
            .map(|v| v["code"].as_str().unwrap().to_owned())
            .collect();
        for code in &codes {
            assert!(
                [
                    "ref_without_record",
                    "pending_journal",
                    "temp_file",
                    "state_temp_file",
                    "staged_temp_file",
                ]
                .contains(&code.as_str()),
                "seed {seed} round {round} (delay {delay} ms, finished {finished}): unexpected problem {code}: {:?}",
                audit.json
            );
        }
        let pending = codes.iter().any(|c| c == "pending_journal");
        eprintln!("kill round {round}: delay {delay} ms, restore {restore}, finished {finished}, problems {codes:?}");
        repo.ckpt_json(&["doctor", "--fix"], 0);
        repo.ckpt_json(&["audit"], 0);
        let now = files_only(repo.worktree());
        if restore && !finished {
            if pending {
                assert_eq!(now, before, "seed {seed} round {round}: rolled back to the guard");
            } else {
                let untouched = now == before;
                let done = !now.contains_key(format!("new-{round}.txt").as_bytes());
                assert!(
                    untouched || done,
                    "seed {seed} round {round}: a killed restore without journal wrote nothing or finished"
                );
            }
        }
        assert!(
            !now.keys().any(|k| String::from_utf8_lossy(k).contains(".ckpt-")),
            "seed {seed} round {round}: temp files left"
        );
    }
}
