//! `ckpt trace list` on hand-made harness session logs (the format of
//! @deepseek-ai/dsh-session-persistence-jsonl: concatenated zstd frames, a header line, then
//! events): multi-frame files, a torn last frame, a line that is not JSON, unknown events, a
//! failed edit, an ambiguous edit, a shell call in between, a base from a real checkpoint, and a
//! path outside the workspace (refused). Read-only: the git fingerprint and files stay.

use crate::common::*;

/// The harness's project directory name for `cwd` (see records/sessionlog.rs).
fn project_key(cwd: &str) -> String {
    format!("--{}--", cwd.trim_start_matches('/').replace('/', "-"))
}

fn call(seq: u64, turn: u64, step: u64, id: &str, name: &str, args: serde_json::Value) -> String {
    serde_json::json!({"type": "tool/call", "seq": seq, "time": 1_700_000_000_000u64 + seq,
        "data": {"turn": turn, "step": step, "callId": id, "name": name, "arguments": args.to_string()}})
    .to_string()
}

fn result(seq: u64, id: &str, failed: bool) -> String {
    serde_json::json!({"type": "tool/result", "seq": seq,
        "data": {"message": {"source": {"kind": "tool", "callId": id},
            "content": [{"type": "tool-result", "toolCallId": id, "isError": failed}]}}})
    .to_string()
}

#[test]
fn trace_list_rebuilds_what_the_log_proves_and_says_unknown_for_the_rest() {
    let repo = TestRepo::new();
    repo.write("b.txt", b"base from a checkpoint\n");
    repo.snapshot(&["--session", "sess-1", "--turn", "1", "--step", "3", "--kind", "auto"]);
    let before = repo.fingerprint();
    let files_before = repo.worktree();
    let root = repo.root.to_str().unwrap().to_owned();
    let home = repo.home.join("dsh");
    let dir = home.join("sessions").join(project_key(&root)).join("sess-1");
    std::fs::create_dir_all(&dir).unwrap();
    let header = serde_json::json!({"type": "session", "version": 0, "id": "sess-1", "createdAt": "2026-12-01T00:00:00Z", "cwd": root, "delegationDepth": 0}).to_string();
    let a = format!("{root}/a.txt");
    let batches: Vec<Vec<String>> = vec![
        vec![header],
        vec![
            call(
                1,
                1,
                1,
                "c1",
                "write",
                serde_json::json!({"file_path": a, "content": "one\ntwo\n"}),
            ),
            result(2, "c1", false),
            call(
                3,
                1,
                2,
                "c2",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}),
            ),
            result(4, "c2", false),
        ],
        vec![
            call(
                5,
                1,
                3,
                "c3",
                "edit",
                serde_json::json!({"file_path": "b.txt", "old_string": "base", "new_string": "BASE"}),
            ),
            result(6, "c3", false),
            "this line is not JSON".to_owned(),
            serde_json::json!({"type": "a/future-event", "seq": 7, "data": {"x": 1}}).to_string(),
            call(
                8,
                1,
                4,
                "c4",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "nope", "new_string": "x"}),
            ),
            result(9, "c4", true),
            call(
                10,
                1,
                5,
                "c5",
                "edit",
                serde_json::json!({"file_path": "a.txt", "old_string": "\n", "new_string": "|"}),
            ),
            result(11, "c5", false),
        ],
        vec![
            call(
                12,
                2,
                1,
                "c6",
                "bash",
                serde_json::json!({"command": "sed -i s/one/1/ a.txt"}),
            ),
            result(13, "c6", false),
            call(
                14,
                2,
                2,
                "c7",
                "edit",
                serde_json::json!({"file_path": "b.txt", "old_string": "BASE", "new_string": "b"}),
            ),
            result(15, "c7", false),
            call(
                16,
                2,
                3,
                "c8",
                "write",
                serde_json::json!({"file_path": "/etc/ckpt-trace-test", "content": "no"}),
            ),
            result(17, "c8", false),
        ],
    ];
    let mut log = Vec::new();
    for batch in &batches {
        let text = format!("{}\n", batch.join("\n"));
        log.extend(zstd::encode_all(text.as_bytes(), 3).unwrap());
    }
    // A torn last frame: an append cut short by a crash.
    let torn = zstd::encode_all(
        call(
            18,
            3,
            1,
            "c9",
            "write",
            serde_json::json!({"file_path": "z.txt", "content": "z"}),
        )
        .as_bytes(),
        3,
    )
    .unwrap();
    log.extend_from_slice(&torn[..torn.len() / 2]);
    std::fs::write(dir.join("session.jsonl.zstd"), &log).unwrap();

    let run = repo.ckpt_json(&["trace", "list", "--dsh-home", home.to_str().unwrap()], 0);
    let session = run.one("trace.session");
    assert_eq!(session["session"], "sess-1");
    assert_eq!(
        session["calls"], 8,
        "every complete frame was read, the torn one was not"
    );
    assert_eq!(session["checkpoints"], 1);
    let problems = session["problems"].to_string();
    assert!(
        problems.contains("not JSON") && problems.contains("not a complete zstd frame"),
        "{problems}"
    );
    let nodes: Vec<&serde_json::Value> = run.json.iter().filter(|r| r["type"] == "trace.node").collect();
    let node = |id: &str| {
        *nodes
            .iter()
            .find(|n| n["call_id"] == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    };
    let file = |id: &str| node(id)["files"][0].clone();
    assert_eq!(node("c1")["node"], "trace:sess-1:1.1");
    assert_eq!(
        (file("c1")["rebuildable"].clone(), file("c1")["bytes"].clone()),
        (true.into(), 8.into())
    );
    assert_eq!(file("c2")["rebuildable"], true, "an edit of known content");
    assert_eq!(file("c3")["rebuildable"], true, "an edit on the checkpoint's content");
    assert_eq!(node("c4")["outcome"], "failed");
    assert!(
        node("c4")["files"].as_array().unwrap().is_empty(),
        "a failed edit changes nothing"
    );
    assert!(file("c5")["reason"].as_str().unwrap().contains("ambiguous"));
    assert_eq!(node("c6")["tool"], "bash");
    assert!(node("c6")["files"].to_string().contains("a bash call ran"));
    assert!(
        file("c7")["reason"].as_str().unwrap().contains("unknown base"),
        "{}",
        file("c7")
    );
    assert!(node("c8")["refused"]
        .as_str()
        .unwrap()
        .contains("outside the workspace"));
    assert!(!std::path::Path::new("/etc/ckpt-trace-test").exists());
    assert_eq!(repo.fingerprint(), before, "read-only");
    assert_eq!(repo.worktree(), files_before);

    // Plain JSON Lines logs work too, and --session filters.
    let plain = home.join("sessions").join(project_key(&root)).join("sess-2");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(
        plain.join("session.jsonl"),
        format!(
            "{}\n{}\n",
            serde_json::json!({"type": "session", "id": "sess-2", "cwd": root}),
            call(
                1,
                1,
                1,
                "p1",
                "write",
                serde_json::json!({"file_path": "p.txt", "content": "p"})
            )
        ),
    )
    .unwrap();
    let run = repo.ckpt_json(
        &[
            "trace",
            "list",
            "--dsh-home",
            home.to_str().unwrap(),
            "--session",
            "sess-2",
        ],
        0,
    );
    let sessions: Vec<&serde_json::Value> = run.json.iter().filter(|r| r["type"] == "trace.session").collect();
    assert_eq!(sessions.len(), 1);
    let node = run.one("trace.node");
    assert_eq!(node["outcome"], "unknown", "no result was recorded");
    assert_eq!(node["files"][0]["rebuildable"], false);
}
