//! `ckpt audit` and `ckpt doctor`: consistency of registry, refs, objects and journal, and the
//! repairs doctor makes.

use crate::common::*;

fn problems(run: &Run, kind: &str) -> Vec<String> {
    run.json
        .iter()
        .filter(|v| v["type"] == kind)
        .map(|v| v["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn audit_is_clean_on_a_healthy_workspace_and_writes_nothing() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    repo.write("x.txt", b"x");
    repo.snapshot(&["--session", "s"]);
    let before = repo.fingerprint();
    let state = std::fs::read(repo.common_dir().join("ckpt/main/records.json")).unwrap();
    let run = repo.ckpt_json(&["audit"], 0);
    let summary = run.one("audit");
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["records"], 2);
    assert_eq!(summary["refs"], 2);
    assert_eq!(repo.fingerprint(), before);
    assert_eq!(
        std::fs::read(repo.common_dir().join("ckpt/main/records.json")).unwrap(),
        state
    );
}

#[test]
fn doctor_rebuilds_a_deleted_registry_from_refs() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"1");
    repo.snapshot(&[
        "--session",
        "s1",
        "--turn",
        "1",
        "--step",
        "2",
        "--trigger",
        "bash",
        "--kind",
        "auto",
    ]);
    repo.write("a.txt", b"2");
    repo.snapshot(&["--session", "s1", "--turn", "2"]);
    let listed = repo.ckpt_json(&["list"], 0).json;
    std::fs::remove_file(repo.common_dir().join("ckpt/main/records.json")).unwrap();

    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(
        problems(&audit, "audit.problem"),
        vec!["ref_without_record", "ref_without_record"]
    );
    let report = repo.ckpt_json(&["doctor"], 1);
    assert_eq!(report.one("doctor")["fixed"], false);
    assert!(
        !repo.common_dir().join("ckpt/main/records.json").exists(),
        "doctor without --fix writes nothing"
    );

    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(fixed.one("doctor")["remaining"].as_array().unwrap().len(), 0);
    repo.ckpt_json(&["audit"], 0);
    assert_eq!(
        repo.ckpt_json(&["list"], 0).json,
        listed,
        "rebuilt records equal the originals"
    );
}

#[test]
fn doctor_repins_a_record_whose_ref_was_deleted() {
    let repo = TestRepo::new();
    let id = repo.snapshot(&[]);
    repo.git(&["update-ref", "-d", &format!("refs/ckpt/main/{id}")]);
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["record_without_ref"]);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/main/{id}")]);
    repo.ckpt_json(&["audit"], 0);
}

#[test]
fn audit_reports_missing_objects() {
    let repo = TestRepo::new();
    repo.write("only.txt", b"only in the checkpoint");
    let id = repo.snapshot(&[]);
    let blob = repo.git(&["rev-parse", &format!("{id}:only.txt")]).trim().to_owned();
    repo.loosen();
    std::fs::remove_file(repo.common_dir().join("objects").join(&blob[..2]).join(&blob[2..])).unwrap();
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["unreadable_checkpoint"]);
    let message = audit.json[0]["message"].as_str().unwrap();
    assert!(message.contains("only.txt"), "{message}");
    // The dry run says what --fix will do (found by a review: it said "nothing automatic").
    let report = repo.ckpt_json(&["doctor"], 1);
    let actions = report.one("doctor")["actions"].to_string();
    assert!(
        actions.contains("refs/ckpt/quarantine/") && !actions.contains("nothing automatic"),
        "{actions}"
    );
    // Its objects are gone: a ref to it, even a quarantined one, would make every `git gc`
    // fail, so it is removed (a black-box run saw gc fail on after doctor --fix).
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(
        fixed.one("doctor")["actions"].to_string().contains("removed"),
        "{}",
        fixed.stdout
    );
    assert!(repo.ckpt_refs().is_empty(), "{:?}", repo.ckpt_refs());
    repo.ckpt_json(&["audit"], 0);
    assert!(
        repo.git_raw(&["gc", "-q"]).status.success(),
        "the user's gc works again"
    );
    assert!(repo.git_raw(&["fsck", "--full", "--strict"]).status.success());
}

/// A quarantined ref (an older ckpt moved it aside) whose objects are gone is named by audit
/// and removed by doctor --fix, so the user's gc works again.
#[test]
fn a_quarantined_checkpoint_whose_objects_are_gone_is_removed() {
    let repo = TestRepo::new();
    repo.write("only.txt", b"only in the checkpoint");
    let id = repo.snapshot(&[]);
    let blob = repo.git(&["rev-parse", &format!("{id}:only.txt")]).trim().to_owned();
    repo.git(&["update-ref", &format!("refs/ckpt/quarantine/main/{id}"), &id]);
    repo.ckpt_json(&["delete", &id, "--yes"], 0);
    assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/quarantine/main/{id}")]);
    repo.ckpt_json(&["audit"], 0);
    repo.loosen();
    std::fs::remove_file(repo.common_dir().join("objects").join(&blob[..2]).join(&blob[2..])).unwrap();
    assert!(
        !repo.git_raw(&["gc", "-q"]).status.success(),
        "git's gc fails on the ref"
    );
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["quarantined_missing_objects"]);
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(repo.ckpt_refs().is_empty(), "{:?}", repo.ckpt_refs());
    repo.ckpt_json(&["audit"], 0);
    assert!(
        repo.git_raw(&["gc", "-q"]).status.success(),
        "the user's gc works again"
    );
}

/// A checkpoint with a forged object (a loose file whose bytes are not what its name says) is
/// moved aside by doctor --fix, its objects kept; git fsck still reports that object, so audit
/// names it too and never calls the repository consistent while it is there.
#[test]
fn a_quarantined_checkpoint_with_a_forged_object_is_named_until_the_object_is_dealt_with() {
    let repo = TestRepo::new();
    repo.write("only.txt", b"only in the checkpoint");
    let id = repo.snapshot(&[]);
    let blob = repo.git(&["rev-parse", &format!("{id}:only.txt")]).trim().to_owned();
    repo.loosen();
    let file = repo.common_dir().join("objects").join(&blob[..2]).join(&blob[2..]);
    // Other bytes, stored under the blob's name: a well-formed object that hashes elsewhere.
    let forged = repo.common_dir().join("forged");
    std::fs::write(&forged, b"forged content").unwrap();
    let other = repo
        .git(&["hash-object", "-w", forged.to_str().unwrap()])
        .trim()
        .to_owned();
    let other_file = repo.common_dir().join("objects").join(&other[..2]).join(&other[2..]);
    std::fs::remove_file(&file).unwrap();
    std::fs::copy(&other_file, &file).unwrap();
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["unreadable_checkpoint"]);
    repo.ckpt_json(&["doctor", "--fix"], 1);
    assert_eq!(repo.ckpt_refs(), vec![format!("refs/ckpt/quarantine/main/{id}")]);
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["quarantined_damaged_objects"]);
    let message = audit.one("audit.problem")["message"].to_string();
    assert!(
        message.contains(&blob) && message.contains("git update-ref -d"),
        "{message}"
    );
    assert!(!repo.git_raw(&["fsck", "--full", "--strict"]).status.success());
    // The user deals with it as the message says: the object file, then the quarantined ref.
    std::fs::remove_file(&file).unwrap();
    repo.git(&["update-ref", "-d", &format!("refs/ckpt/quarantine/main/{id}")]);
    repo.ckpt_json(&["audit"], 0);
    assert!(repo.git_raw(&["fsck", "--full", "--strict"]).status.success());
}

#[cfg(feature = "fault-injection")]
mod interrupted {
    use super::*;

    type Worktree = std::collections::BTreeMap<Vec<u8>, Entry>;

    fn interrupted_restore(repo: &TestRepo) -> (String, Worktree, Worktree) {
        for i in 0..6 {
            repo.write(format!("f{i}.txt"), format!("original {i}").as_bytes());
        }
        let id = repo.snapshot(&[]);
        let original = repo.worktree();
        for i in 0..6 {
            repo.write(format!("f{i}.txt"), format!("agent {i}").as_bytes());
        }
        repo.write("agent-new.txt", b"new");
        let edited = repo.worktree();
        let out = repo
            .ckpt_command()
            .env("CKPT_FAULT", "restore:after-first-write")
            .args(["restore", &id, "--yes", "--exact"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        (id, original, edited)
    }

    #[test]
    fn doctor_rolls_an_interrupted_restore_back_to_its_guard() {
        let repo = TestRepo::new();
        let (_, _, edited) = interrupted_restore(&repo);
        let audit = repo.ckpt_json(&["audit"], 1);
        assert!(problems(&audit, "audit.problem").contains(&"pending_journal".to_owned()));
        let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
        assert_eq!(fixed.one("restore")["verified"], true);
        assert_eq!(
            repo.worktree(),
            edited,
            "rolled back to the state before the interrupted restore"
        );
        repo.ckpt_json(&["audit"], 0);
    }

    #[test]
    fn doctor_can_complete_an_interrupted_restore() {
        let repo = TestRepo::new();
        let (_, original, _) = interrupted_restore(&repo);
        repo.ckpt_json(&["doctor", "--fix", "--complete"], 0);
        assert_eq!(repo.worktree(), original, "the interrupted exact restore finished");
        repo.ckpt_json(&["audit"], 0);
    }

    #[test]
    fn a_snapshot_killed_between_pin_and_record_is_whole_and_self_heals() {
        let repo = TestRepo::new();
        repo.write("a.txt", b"state");
        let out = repo
            .ckpt_command()
            .env("CKPT_FAULT", "snapshot:after-pin")
            .args(["snapshot", "--session", "k"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let refs = repo.ckpt_refs();
        assert_eq!(refs.len(), 1);
        let listed = repo.ckpt_json(&["list"], 0);
        assert_eq!(
            listed.one("checkpoint")["session"],
            "k",
            "the record is rebuilt from the commit's trailers"
        );
        repo.write("a.txt", b"changed");
        let id = refs[0].rsplit('/').next().unwrap().to_owned();
        repo.ckpt_json(&["restore", &id, "--yes"], 0);
        assert_eq!(repo.read("a.txt"), b"state");
        repo.ckpt_json(&["audit"], 0);
    }
}

#[test]
fn doctor_removes_only_the_pack_writers_old_leftover_temp_files() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let pack_dir = repo.common_dir().join("objects/pack");
    std::fs::create_dir_all(&pack_dir).unwrap();
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 24 * 3600);
    let make = |name: &str, old: bool| {
        let path = pack_dir.join(name);
        std::fs::write(&path, b"PACK\0\0\0\x02 torn").unwrap();
        if old {
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(two_days_ago).unwrap();
        }
        path
    };
    // A killed pack write's leftover; one still being written; git's own temp pack.
    let leftover = make(".tmpAb3xZ9", true);
    let in_progress = make(".tmpQr5tU7", false);
    let gits_own = make("tmp_pack_Ab3xZ9", true);
    // Another name for a file that is not a leftover (here, git's own temp pack).
    let linked = pack_dir.join(".tmpHrd123");
    std::fs::hard_link(&gits_own, &linked).unwrap();
    let before = repo.fingerprint();

    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(problems(&audit, "audit.problem"), vec!["pack_temp_file"]);
    let message = audit.one("audit.problem")["message"].as_str().unwrap().to_owned();
    assert!(message.contains(".tmpAb3xZ9"), "{message}");
    repo.ckpt_json(&["doctor"], 1);
    assert!(leftover.exists(), "doctor without --fix removes nothing");

    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert_eq!(fixed.one("doctor")["remaining"].as_array().unwrap().len(), 0);
    assert!(!leftover.exists());
    assert!(
        in_progress.exists() && gits_own.exists() && linked.exists(),
        "nothing else is touched"
    );
    assert_eq!(repo.fingerprint(), before);
    repo.ckpt_json(&["audit"], 0);
}

/// Snapshots take pins by name, loose or packed, without reading each loose pin's file, except
/// the newest one's: an unchanged worktree must never be answered with a checkpoint whose pin
/// now points at another commit (that pin no longer keeps it from git's gc). A pin the registry
/// lacks is read before its commit rebuilds a record.
#[test]
fn a_snapshot_reads_the_newest_pin_before_it_answers_with_that_checkpoint() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"1");
    let first = repo.snapshot(&[]);
    repo.write("a.txt", b"2");
    let second = repo.snapshot(&[]);
    // The older pins packed, the newest loose.
    repo.git(&["pack-refs", "--all"]);
    repo.write("a.txt", b"3");
    let newest = repo.snapshot(&[]);
    let listed: Vec<String> = repo
        .ckpt_json(&["list"], 0)
        .json
        .iter()
        .map(|line| line["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, vec![first.clone(), second.clone(), newest.clone()]);

    repo.git(&["update-ref", &format!("refs/ckpt/main/{newest}"), &second]);
    let again = repo.ckpt_json(&["snapshot"], 0);
    let snap = again.one("snapshot");
    assert_eq!(
        snap["created"], true,
        "not answered with the repointed checkpoint: {snap}"
    );
    let taken = snap["id"].as_str().unwrap().to_owned();
    assert_ne!(taken, newest);
    assert_eq!(
        repo.git(&["rev-parse", &format!("{taken}:a.txt")]).trim(),
        repo.git(&["hash-object", "a.txt"]).trim()
    );
    let audit = repo.ckpt_json(&["audit"], 1);
    let message = audit.json[0]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&newest) || audit.stdout.contains(&newest),
        "doctor reads every pin: {}",
        audit.stdout
    );

    // A pin without a record (a process killed between pin and record) is read and rebuilt.
    repo.git(&["update-ref", &format!("refs/ckpt/main/{newest}"), &newest]);
    let records = repo.common_dir().join("ckpt/main/records.json");
    let text = std::fs::read_to_string(&records).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    file["records"]
        .as_array_mut()
        .unwrap()
        .retain(|r| r["id"] != taken.as_str());
    std::fs::write(&records, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let listed = repo.ckpt_json(&["list"], 0);
    assert!(
        listed.json.iter().any(|line| line["id"] == taken.as_str()),
        "{}",
        listed.stdout
    );
}

/// The newest checkpoint of a tampered state (found by a review): a record whose commit holds
/// another tree than the record says, or whose commit is gone, is never the answer to an
/// unchanged worktree, so a restore's guard never stands on it.
#[test]
fn a_snapshot_never_stands_on_a_newest_record_its_commit_does_not_back() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"old\n");
    let old = repo.snapshot(&[]);
    repo.write("a.txt", b"new\n");
    let newest = repo.snapshot(&[]);
    // The record of the newest says the tree of the worktree about to be captured.
    repo.write("a.txt", b"only here\n");
    let unique_tree = {
        let index = repo.root.join(".git/ckpt-test-index");
        let with_index = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(&repo.root)
                .env("GIT_INDEX_FILE", &index)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        with_index(&["add", "-A", "."]);
        let tree = with_index(&["write-tree"]).trim().to_owned();
        std::fs::remove_file(&index).unwrap();
        tree
    };
    let records_path = repo.common_dir().join("ckpt/main/records.json");
    let original = std::fs::read(&records_path).unwrap();
    let mut file: serde_json::Value = serde_json::from_slice(&original).unwrap();
    let last = file["records"].as_array().unwrap().len() - 1;
    file["records"][last]["tree"] = serde_json::json!(unique_tree);
    std::fs::write(&records_path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let snap = repo.ckpt_json(&["snapshot"], 0);
    let snap = snap.one("snapshot");
    assert_eq!(snap["created"], true, "answered with the tampered record: {snap}");
    let guard = snap["id"].as_str().unwrap().to_owned();
    assert_eq!(repo.git(&["cat-file", "-p", &format!("{guard}:a.txt")]), "only here\n");
    std::fs::write(&records_path, &original).unwrap();

    // The newest commit object gone, its pin intact.
    repo.write("a.txt", b"new\n");
    let third = repo.snapshot(&[]);
    assert_ne!(third, newest);
    repo.loosen();
    let object = repo.common_dir().join("objects").join(&third[..2]).join(&third[2..]);
    assert!(object.exists(), "a loose commit");
    std::fs::remove_file(&object).unwrap();
    let run = repo.ckpt_json(&["restore", &old, "--exact", "--yes"], 0);
    let restore = run.one("restore");
    assert_eq!(restore["guard_created"], true, "{restore}");
    let guard = restore["guard"].as_str().unwrap().to_owned();
    assert_eq!(repo.git(&["cat-file", "-p", &format!("{guard}:a.txt")]), "new\n");
    assert_eq!(repo.read("a.txt"), b"old\n");
}

/// `doctor --fix` re-pins a record whose checkpoint is intact when its pin was made to point
/// elsewhere, instead of dropping it as gone (found by a review: the checkpoint was then left
/// to git's gc), and a pin file holding garbage or a FIFO neither hangs a command nor is
/// opened; `doctor --fix` moves either aside and re-pins.
#[test]
fn a_repointed_or_unreadable_pin_is_repaired_or_refused_never_a_lost_record() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"old\n");
    let old = repo.snapshot(&[]);
    repo.write("a.txt", b"new\n");
    let newest = repo.snapshot(&[]);
    let pin = format!("refs/ckpt/main/{newest}");
    for target in [
        old.clone(),
        repo.git(&["rev-parse", &format!("{old}^{{tree}}")]).trim().to_owned(),
    ] {
        repo.git(&["update-ref", &pin, &target]);
        let audit = repo.ckpt_json(&["audit"], 1);
        assert!(audit.stdout.contains("bad_ref"), "{}", audit.stdout);
        let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
        assert!(fixed.stdout.contains("re-pinned"), "{}", fixed.stdout);
        assert_eq!(repo.git(&["rev-parse", &pin]).trim(), newest);
        repo.ckpt_json(&["audit"], 0);
        let listed = repo.ckpt_json(&["list"], 0);
        assert!(
            listed.json.iter().any(|l| l["id"] == newest.as_str()),
            "{}",
            listed.stdout
        );
    }

    // Garbage in the pin file: audit names it instead of giving up, and `doctor --fix` moves
    // it into the state directory (kept, never deleted) and re-pins (it could not, before).
    let loose = repo.common_dir().join(&pin);
    let set_aside = || -> Vec<Vec<u8>> {
        let mut found: Vec<Vec<u8>> = std::fs::read_dir(repo.common_dir().join("ckpt/main"))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().starts_with("unreadable-pin-"))
            .map(|e| match e.file_type().unwrap().is_file() {
                true => std::fs::read(e.path()).unwrap(),
                false => b"(not a file)".to_vec(),
            })
            .collect();
        found.sort();
        found
    };
    std::fs::write(&loose, b"garbage\n").unwrap();
    let audit = repo.ckpt_json(&["audit"], 1);
    assert!(audit.stdout.contains("bad_ref"), "{}", audit.stdout);
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(fixed.stdout.contains("re-pinned"), "{}", fixed.stdout);
    assert_eq!(repo.git(&["rev-parse", &pin]).trim(), newest);
    assert_eq!(set_aside(), vec![b"garbage\n".to_vec()]);
    repo.ckpt_json(&["audit"], 0);

    // A FIFO where the pin was: refused with its path, within seconds.
    std::fs::remove_file(&loose).unwrap();
    mkfifo(loose.as_path());
    let within = |args: &[&str]| ckpt_json_within_30s(&repo, args);
    let run = within(&["restore", &newest, "--exact", "--yes"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("FIFO"), "{}", run.stdout);
    assert_eq!(repo.read("a.txt"), b"new\n");
    within(&["snapshot"]);
    within(&["restore", &old, "--exact", "--yes"]);
    let audit = within(&["audit"]);
    assert_eq!(audit.code, 1, "{}", audit.stdout);
    // `doctor --fix` moves the FIFO aside without opening it, and re-pins.
    let fixed = within(&["doctor", "--fix"]);
    assert_eq!(fixed.code, 0, "{}", fixed.stdout);
    assert_eq!(repo.git(&["rev-parse", &pin]).trim(), newest);
    assert_eq!(set_aside().len(), 2, "the garbage and the FIFO are both kept");
    within(&["audit"]);
}

/// A checkpoint's commit that reads as another commit (a `git replace`, or its object file
/// overwritten with another's) never lends that other commit's tree to a snapshot: the
/// snapshot holds the worktree, and a restore's guard does too (found by a review).
#[test]
fn a_commit_that_reads_as_another_never_gives_a_snapshot_its_tree() {
    for overwrite in [false, true] {
        let repo = TestRepo::new();
        repo.write("f.txt", b"v1\n");
        let first = repo.snapshot(&[]);
        repo.write("f.txt", b"v2\n");
        repo.snapshot(&[]);
        repo.write("f.txt", b"v3\n");
        let third = repo.snapshot(&[]);
        if overwrite {
            repo.loosen();
            let object = |id: &str| repo.common_dir().join("objects").join(&id[..2]).join(&id[2..]);
            std::fs::remove_file(object(&third)).unwrap();
            std::fs::copy(object(&first), object(&third)).unwrap();
        } else {
            repo.git(&["replace", &third, &first]);
        }
        let snap = repo.ckpt_json(&["snapshot"], 0);
        let taken = snap.one("snapshot")["id"].as_str().unwrap().to_owned();
        let show = |id: &str| {
            let out = std::process::Command::new("git")
                .args(["--no-replace-objects", "cat-file", "-p", &format!("{id}:f.txt")])
                .current_dir(&repo.root)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        if overwrite {
            // The newest is not stood on: a new checkpoint of the worktree.
            assert_ne!(taken, third, "overwrite: {}", snap.stdout);
        }
        assert_eq!(show(&taken), "v3\n", "overwrite {overwrite}: {}", snap.stdout);
        let run = repo.ckpt_json(&["restore", &first, "--exact", "--yes"], 0);
        let guard = run.one("restore")["guard"].as_str().unwrap().to_owned();
        assert_eq!(repo.read("f.txt"), b"v1\n", "overwrite {overwrite}: {}", run.stdout);
        assert_eq!(
            show(&guard),
            "v3\n",
            "overwrite {overwrite}: the guard holds what was overwritten"
        );
        if !overwrite {
            // ckpt reads objects as stored: the replaced checkpoint is still itself.
            let run = repo.ckpt_json(&["restore", &third, "--exact", "--yes"], 0);
            assert_eq!(repo.read("f.txt"), b"v3\n", "{}", run.stdout);
        }
    }
}

/// A pin whose commit object is gone is removed by `doctor --fix` (a ref to nothing keeps
/// nothing and breaks git's own gc), and a FIFO at `packed-refs` is refused at once instead of
/// hanging every command (found by a review).
#[test]
fn doctor_removes_a_pin_to_nothing_and_a_fifo_packed_refs_is_refused() {
    let repo = TestRepo::new();
    repo.write("f.txt", b"v1\n");
    repo.snapshot(&[]);
    repo.write("f.txt", b"v2\n");
    let gone = repo.snapshot(&[]);
    repo.write("f.txt", b"v3\n");
    repo.snapshot(&[]);
    repo.loosen();
    std::fs::remove_file(repo.common_dir().join("objects").join(&gone[..2]).join(&gone[2..])).unwrap();
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(fixed.stdout.contains("removed"), "{}", fixed.stdout);
    repo.ckpt_json(&["audit"], 0);
    assert!(
        !repo.ckpt_refs().iter().any(|r| r.contains(&gone)),
        "{:?}",
        repo.ckpt_refs()
    );
    repo.git(&["for-each-ref"]);

    let packed = repo.common_dir().join("packed-refs");
    std::fs::remove_file(&packed).ok();
    mkfifo(packed.as_path());
    for args in [vec!["snapshot"], vec!["list"], vec!["audit"]] {
        let run = ckpt_json_within_30s(&repo, &args);
        assert_ne!(run.code, 0, "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("packed-refs"), "{args:?}: {}", run.stdout);
    }
    std::fs::remove_file(&packed).unwrap();
    repo.ckpt_json(&["snapshot"], 0);
}

/// A state write killed between its temp file and its rename (`kill -9`) left
/// `.<name>.<pid>.tmp` in the state directory for good. `audit` names such a file when its
/// process is gone, and `doctor --fix` removes it; a live process's temp file, and anything
/// else that only looks like one, is left alone.
#[test]
fn a_killed_state_writes_temp_file_is_named_and_removed_never_a_live_ones() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let state = repo.common_dir().join("ckpt/main");
    let gone = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    };
    let abandoned = state.join(format!(".restore-journal.json.{gone}.tmp"));
    std::fs::write(&abandoned, b"{\"half\":").unwrap();
    let live = state.join(format!(".records.json.{}.tmp", std::process::id()));
    std::fs::write(&live, b"being written").unwrap();
    let lookalike = state.join(format!(".notes.{gone}.tmp.bak"));
    std::fs::write(&lookalike, b"user's").unwrap();
    let audit = repo.ckpt_json(&["audit"], 1);
    let named: Vec<&str> = audit
        .json
        .iter()
        .filter(|l| l["code"] == "state_temp_file")
        .filter_map(|l| l["message"].as_str())
        .collect();
    assert_eq!(named.len(), 1, "{}", audit.stdout);
    assert!(
        named[0].contains(&format!(".restore-journal.json.{gone}.tmp")),
        "{}",
        named[0]
    );
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(fixed.stdout.contains("leftover temp file"), "{}", fixed.stdout);
    assert!(!abandoned.exists());
    assert_eq!(std::fs::read(&live).unwrap(), b"being written");
    assert_eq!(std::fs::read(&lookalike).unwrap(), b"user's");
    std::fs::remove_file(&live).unwrap();
    repo.ckpt_json(&["audit"], 0);
}

/// A FIFO at one of ckpt's own state files made commands wait forever for a writer (found by
/// a review): the registry, the stat cache, the restore journal, the hooks' positions. Each is
/// now opened without waiting and refused or passed over, and nothing hangs.
#[test]
fn a_fifo_at_a_state_file_never_hangs_a_command() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"a\n");
    repo.snapshot(&[]);
    let state = repo.common_dir().join("ckpt/main");
    for (file, args) in [
        ("records.json", &["list"][..]),
        ("records.json", &["audit"]),
        ("statcache.bin", &["snapshot"]),
        ("restore-journal.json", &["audit"]),
        ("restore-journal.json", &["doctor", "--fix"]),
    ] {
        let path = state.join(file);
        let saved = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        mkfifo(&path);
        repo.write("a.txt", format!("edit under {file}").as_bytes());
        let run = ckpt_json_within_30s(&repo, args);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            std::fs::remove_file(&path).unwrap();
        }
        if let Some(saved) = saved {
            if !path.exists() {
                std::fs::write(&path, saved).unwrap();
            }
        }
        assert!(
            run.code == 0 || run.stdout.contains(file),
            "{file} {args:?}: {}",
            run.stdout
        );
    }
    repo.ckpt_json(&["snapshot"], 0);
}

/// A loose pin file that is a FIFO or a symlink, shadowing the pin's `packed-refs` line, was
/// invisible to audit and doctor while every use of the checkpoint refused it (found by a
/// review). audit names it, and `doctor --fix` moves it aside, after which the checkpoint can
/// be used again.
#[test]
fn a_shadowing_loose_pin_that_is_no_file_is_found_and_moved_aside() {
    let repo = TestRepo::new();
    repo.write("a.txt", b"old\n");
    let old = repo.snapshot(&[]);
    repo.write("a.txt", b"new\n");
    repo.snapshot(&[]);
    repo.git(&["pack-refs", "--all"]);
    let loose = repo.common_dir().join(format!("refs/ckpt/main/{old}"));
    std::fs::create_dir_all(loose.parent().unwrap()).unwrap();
    mkfifo(&loose);
    let audit = ckpt_json_within_30s(&repo, &["audit"]);
    assert_eq!(audit.code, 1, "{}", audit.stdout);
    assert!(audit.stdout.contains("unreadable_pin"), "{}", audit.stdout);
    let fixed = ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(fixed.code, 0, "{}", fixed.stdout);
    assert!(std::fs::symlink_metadata(&loose).is_err(), "the FIFO was moved aside");
    ckpt_json_within_30s(&repo, &["audit"]);
    let restored = ckpt_json_within_30s(&repo, &["restore", &old, "--exact", "--yes"]);
    assert_eq!(restored.code, 0, "{}", restored.stdout);
    assert_eq!(repo.read("a.txt"), b"old\n");

    // A pin directory that is a link is named, and nothing is moved through it.
    let outside = repo.home.join("outrefs");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(&old), b"garbage\n").unwrap();
    let pins = repo.common_dir().join("refs/ckpt/main");
    std::fs::rename(&pins, repo.home.join("real-pins")).unwrap();
    std::os::unix::fs::symlink(&outside, &pins).unwrap();
    let audit = ckpt_json_within_30s(&repo, &["audit"]);
    assert!(audit.stdout.contains("a symlink to a directory"), "{}", audit.stdout);
    ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(std::fs::read(outside.join(&old)).unwrap(), b"garbage\n");
    std::fs::remove_file(&pins).unwrap();
    std::fs::rename(repo.home.join("real-pins"), &pins).unwrap();
}

/// `doctor --fix` followed a `watch/` directory that was a link and removed a temp-looking
/// file outside the state directory (found by a review); a linked subdirectory is not looked in.
#[test]
fn a_linked_state_subdirectory_is_never_cleaned_through() {
    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let victim = repo.home.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    let gone = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    };
    let outside = victim.join(format!(".important.{gone}.tmp"));
    std::fs::write(&outside, b"not ckpt's").unwrap();
    let watch = repo.common_dir().join("ckpt/main/watch");
    let _ = std::fs::remove_dir_all(&watch);
    std::os::unix::fs::symlink(&victim, &watch).unwrap();
    ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(std::fs::read(&outside).unwrap(), b"not ckpt's");
    std::fs::remove_file(&watch).unwrap();
}

/// Found by a third review: a FIFO at the copy store's private `HEAD` hung every command of a
/// non-git workspace (ckpt itself blocked opening the store); a FIFO at the hooks' positions
/// left every later tool call unprotected while audit called the state consistent; a directory
/// at `records.json` could never be set aside. Each is now refused, reported or repaired.
#[test]
fn blocking_or_misplaced_state_is_refused_reported_and_repaired() {
    let plain = TestRepo::bare_dir();
    plain.write("a.txt", b"a\n");
    plain.ckpt_json(&["snapshot"], 0);
    let workspaces = plain.home.join(".local/share/ckpt/workspaces");
    let ws = std::fs::read_dir(&workspaces).unwrap().next().unwrap().unwrap().path();
    let head = ws.join("git/HEAD");
    let saved = std::fs::read(&head).unwrap();
    std::fs::remove_file(&head).unwrap();
    mkfifo(&head);
    for args in [&["list"][..], &["snapshot"], &["audit"], &["gc"]] {
        let run = ckpt_json_within_30s(&plain, args);
        assert_ne!(run.code, 0, "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("HEAD"), "{args:?}: {}", run.stdout);
    }
    std::fs::remove_file(&head).unwrap();
    std::fs::write(&head, saved).unwrap();
    plain.ckpt_json(&["list"], 0);
    // Its `config` as a FIFO: named, where the store's set-up used to fail on "Directory not
    // empty" (found by a review).
    let config = ws.join("git/config");
    let saved = std::fs::read(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    mkfifo(&config);
    let run = ckpt_json_within_30s(&plain, &["list"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("git/config"), "{}", run.stdout);
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, saved).unwrap();
    plain.ckpt_json(&["list"], 0);

    let repo = TestRepo::new();
    repo.snapshot(&[]);
    let state = repo.common_dir().join("ckpt/main");
    std::fs::create_dir_all(state.join("hooks")).unwrap();
    let positions = state.join("hooks/positions.json");
    mkfifo(&positions);
    let audit = ckpt_json_within_30s(&repo, &["audit"]);
    assert!(audit.stdout.contains("unusable_state_file"), "{}", audit.stdout);
    let fixed = ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(fixed.code, 0, "{}", fixed.stdout);
    assert!(std::fs::symlink_metadata(&positions).is_err());
    ckpt_json_within_30s(&repo, &["audit"]);

    let records = state.join("records.json");
    std::fs::remove_file(&records).unwrap();
    std::fs::create_dir(&records).unwrap();
    let fixed = ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(fixed.code, 0, "{}", fixed.stdout);
    assert!(
        std::fs::symlink_metadata(&records).is_ok_and(|m| m.is_file()),
        "rebuilt from the pins"
    );
    let again = ckpt_json_within_30s(&repo, &["doctor", "--fix"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    ckpt_json_within_30s(&repo, &["audit"]);
    repo.ckpt_json(&["list"], 0);
}

/// `ckpt --json ARGS` with the registry appending from its first byte (it appends only once
/// `records.json` is large by default).
fn ckpt_appending(repo: &TestRepo, args: &[&str]) -> Run {
    let mut cmd = repo.ckpt_command();
    cmd.env("CKPT_RECORDS_APPEND_FROM", "0").arg("--json").args(args);
    run_ckpt(cmd)
}

/// A long registry takes a new record as one appended line, not a rewrite of every record,
/// and stays exactly as safe: a line cut short by a kill is left out (its pin turns back into
/// a record, stored with the next snapshot's), a tampered line is refused naming the log, and
/// `doctor --fix` sets both files aside and rebuilds every record from the pins. A removal
/// writes `records.json` whole and the log goes.
#[test]
fn an_appended_registry_survives_kills_tampering_and_removals() {
    let repo = TestRepo::new();
    let state = repo.common_dir().join("ckpt/main");
    let log = state.join("records.log");
    let mut ids = Vec::new();
    for n in 0..5 {
        repo.write("a.txt", format!("version {n}\n").as_bytes());
        let run = ckpt_appending(&repo, &["snapshot", "--session", "s"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        ids.push(run.one("snapshot")["id"].as_str().unwrap().to_owned());
    }
    let base = std::fs::read(state.join("records.json")).unwrap();
    let logged = std::fs::read_to_string(&log).expect("the log");
    assert_eq!(logged.lines().count(), 5, "a header and four records:\n{logged}");
    let listed = |repo: &TestRepo| -> Vec<String> { ids_of(&repo.ckpt_json(&["list"], 0)) };
    let mut expected: Vec<String> = ids.clone();
    assert_eq!(listed(&repo), expected);
    repo.ckpt_json(&["audit"], 0);

    // A kill after the pin, before the record; then a kill mid-append (half a line, the log's
    // time left as the kill would leave it). The pin is listed, turned back into a record, and
    // that record is stored with the next snapshot's.
    repo.write("a.txt", b"version 5\n");
    let mut killed = repo.ckpt_command();
    killed
        .env("CKPT_RECORDS_APPEND_FROM", "0")
        .env("CKPT_FAULT", "snapshot:after-pin")
        .args(["--json", "snapshot", "--session", "s"]);
    assert_ne!(run_ckpt(killed).code, 0, "killed");
    let sixth = repo
        .ckpt_refs()
        .into_iter()
        .filter_map(|name| name.rsplit('/').next().map(str::to_owned))
        .find(|id| !ids.contains(id))
        .expect("the killed snapshot's pin");
    let whole = std::fs::read(&log).unwrap();
    let written = std::fs::metadata(&log).unwrap().modified().unwrap();
    let last_line_start = whole[..whole.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[last_line_start..whole.len() - 10]);
    std::fs::write(&log, &torn).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&log)
        .unwrap()
        .set_modified(written)
        .unwrap();
    expected.push(sixth.clone());
    assert_eq!(listed(&repo), expected, "rebuilt from its pin");
    repo.write("a.txt", b"version 6\n");
    let run = ckpt_appending(&repo, &["snapshot", "--session", "s"]);
    expected.push(run.one("snapshot")["id"].as_str().unwrap().to_owned());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged.lines().count(),
        7,
        "a header, the four, the rebuilt sixth and the seventh:\n{logged}"
    );
    assert!(logged.contains(&sixth), "the rebuilt record is stored:\n{logged}");
    assert_eq!(listed(&repo), expected);
    repo.ckpt_json(&["audit"], 0);
    assert_eq!(
        std::fs::read(state.join("records.json")).unwrap(),
        base,
        "never rewritten"
    );

    // A tampered line (a commit id that is no id) is refused, named; doctor rebuilds from
    // the pins.
    let tampered = logged.replacen("\"commit\":\"", "\"commit\":\"../", 1);
    assert_ne!(tampered, logged);
    std::fs::write(&log, &tampered).unwrap();
    let refused = repo.ckpt_json(&["list"], 1);
    assert!(
        refused.stderr.contains("records.log") || refused.stdout.contains("records.log"),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    let fixed = repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(fixed.stdout.contains("records.log.corrupt-"), "{}", fixed.stdout);
    assert_eq!(listed(&repo), expected, "every record rebuilt from its pin");
    repo.ckpt_json(&["audit"], 0);

    // A removal writes records.json whole; the log goes.
    repo.write("a.txt", b"version 7\n");
    let run = ckpt_appending(&repo, &["snapshot", "--session", "s"]);
    expected.push(run.one("snapshot")["id"].as_str().unwrap().to_owned());
    assert!(log.exists());
    repo.ckpt_json(&["delete", &expected[2], "--yes"], 0);
    expected.remove(2);
    assert!(!log.exists(), "folded into records.json");
    assert_eq!(listed(&repo), expected);
    repo.ckpt_json(&["audit"], 0);
}

fn ids_of(run: &Run) -> Vec<String> {
    run.json
        .iter()
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

/// A snapshot reads only the newest appended record when it stands: pinned at its commit, the
/// commit holding its tree. A newest record whose pin was deleted, or whose tree was tampered
/// with, is never built on or answered with: the snapshot then reads every record and pin.
#[test]
fn a_snapshot_never_stands_on_an_appended_record_that_does_not() {
    let repo = TestRepo::new();
    let snapshot = |content: &[u8]| -> (String, bool) {
        repo.write("a.txt", content);
        let run = ckpt_appending(&repo, &["snapshot"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let line = run.one("snapshot");
        (line["id"].as_str().unwrap().to_owned(), line["created"] == true)
    };
    let (a, _) = snapshot(b"state a\n");
    let (b, _) = snapshot(b"state b\n");
    repo.git(&["update-ref", "-d", &format!("refs/ckpt/main/{b}")]);
    let (again, created) = snapshot(b"state b\n");
    assert!(created && again != b, "the unpinned newest is not the unchanged state");

    let (c, _) = snapshot(b"state c\n");
    let log = repo.common_dir().join("ckpt/main/records.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let tree_of = |id: &str| repo.git(&["rev-parse", &format!("{id}^{{tree}}")]).trim().to_owned();
    let tampered = text.replace(&tree_of(&c), &tree_of(&a));
    assert_ne!(tampered, text);
    std::fs::write(&log, tampered).unwrap();
    let (answer, _) = snapshot(b"state a\n");
    assert_ne!(answer, c, "a record whose commit holds another tree stands for nothing");
    assert_eq!(tree_of(&answer), tree_of(&a));
}

/// A prune, delete or pin killed mid-update leaves `refs/ckpt/<workspace>/<id>.lock`: every
/// later prune of that checkpoint failed and the user's `git gc` stopped on it, while audit
/// and doctor saw nothing (found by a black-box round). An old one is named by audit, removed
/// by `doctor --fix` and by the next walking snapshot; a fresh one (an update under way) is
/// left alone.
#[test]
fn a_killed_updates_pin_locks_are_named_and_removed() {
    let repo = TestRepo::new();
    let mut ids = Vec::new();
    for n in 0..3 {
        repo.write("a.txt", format!("{n}\n").as_bytes());
        ids.push(repo.snapshot(&[]));
    }
    let lock_of = |id: &str| repo.common_dir().join(format!("refs/ckpt/main/{id}.lock"));
    let plant = |id: &str, age_secs: u64| {
        std::fs::write(lock_of(id), format!("{id}\n")).unwrap();
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age_secs);
        std::fs::File::options()
            .write(true)
            .open(lock_of(id))
            .unwrap()
            .set_modified(when)
            .unwrap();
    };
    plant(&ids[0], 300);
    plant(&ids[1], 0);
    let audit = repo.ckpt_json(&["audit"], 1);
    assert_eq!(
        problems(&audit, "audit.problem"),
        vec!["stale_pin_lock"],
        "{}",
        audit.stdout
    );
    assert!(audit.stdout.contains(&ids[0]) && !audit.stdout.contains(&format!("{}.lock", ids[1])));
    repo.ckpt_json(&["doctor", "--fix"], 0);
    assert!(!lock_of(&ids[0]).exists(), "the old lock goes");
    assert!(lock_of(&ids[1]).exists(), "a fresh one is left to whoever holds it");
    std::fs::remove_file(lock_of(&ids[1])).unwrap();
    repo.ckpt_json(&["audit"], 0);

    // The next walking snapshot removes an old one on its own; then prune and git gc work.
    plant(&ids[0], 300);
    repo.write("a.txt", b"later\n");
    repo.snapshot(&["--no-watch"]);
    assert!(!lock_of(&ids[0]).exists());
    repo.ckpt_json(&["prune", "--max-per-session", "1"], 0);
    repo.git(&["gc", "--prune=now", "--quiet"]);
    repo.ckpt_json(&["audit"], 0);

    // Never through a link: a pin directory that leads elsewhere keeps that place's files.
    let pins = repo.common_dir().join("refs/ckpt/main");
    let elsewhere = repo.home.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // git gc packed the pins, so the directory may be gone already.
    let _ = std::fs::remove_dir_all(&pins);
    std::fs::create_dir_all(pins.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &pins).unwrap();
    plant(&ids[2], 300);
    repo.write("a.txt", b"through a link\n");
    repo.ckpt(&["snapshot", "--no-watch"]);
    repo.ckpt(&["doctor", "--fix"]);
    assert!(
        elsewhere.join(format!("{}.lock", ids[2])).exists(),
        "nothing removed through the link"
    );
}
