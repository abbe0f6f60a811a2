//! The JSON Lines contract as docs/json.md writes it: every command's `--json` stdout is JSON
//! Lines only (every line an object with `"v":1` and a `"type"`), every record type the doc lists
//! is produced by some command, and carries every field the doc names for it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::*;

/// Runs `ckpt --json ARGS` and checks that every stdout line is a contract record.
fn json_lines(repo: &TestRepo, args: &[&str], seen: &mut Vec<Value>) -> i32 {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let run = repo.ckpt(&full);
    for line in run.stdout.lines() {
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("ckpt {args:?}: stdout line is not JSON ({e}): {line:?}"));
        assert!(value.is_object(), "ckpt {args:?}: not an object: {line}");
        assert_eq!(value["v"], 1, "ckpt {args:?}: no v:1 in {line}");
        assert!(value["type"].is_string(), "ckpt {args:?}: no type in {line}");
        seen.push(value);
    }
    assert!(
        !run.stdout.is_empty(),
        "ckpt {args:?} printed no record (exit {}): {}",
        run.code,
        run.stderr
    );
    run.code
}

/// The contract's table (docs/json.md): record type → the top-level fields it names.
fn documented_records() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md")).unwrap();
    let section = doc
        .split("# JSON Lines contract (v1)")
        .nth(1)
        .and_then(|rest| rest.split("\n# ").next())
        .expect("docs/json.md has the contract section");
    let mut records = BTreeMap::new();
    let mut codes = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let Some(cell) = row.splitn(3, '|').nth(2) else {
            continue;
        };
        for block in cell.split("`{").skip(1) {
            let block = block.split("}`").next().unwrap_or_default();
            let (types, fields) = top_level_keys(block);
            for record_type in types {
                records.insert(record_type, fields.clone());
            }
        }
        if let Some(list) = cell.split("codes:").nth(1) {
            codes.extend(list.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    (records, codes)
}

/// In `"type":"a"|"b","f1","f2":[{"x"}],...` (one table cell's object): the types and the
/// top-level keys. A quoted word after `:` or `|` is a value (of `type`: a record type).
fn top_level_keys(block: &str) -> (Vec<String>, BTreeSet<String>) {
    let mut types = Vec::new();
    let mut fields = BTreeSet::new();
    let (mut depth, mut previous, mut key, mut rest) = (0i32, ',', String::new(), block);
    while let Some(c) = rest.chars().next() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            '"' => {
                let end = rest[1..].find('"').map(|i| i + 1).unwrap_or(rest.len() - 1);
                let word = &rest[1..end];
                let is_value = previous == ':' || previous == '|';
                if is_value && depth == 0 && key == "type" {
                    types.push(word.to_owned());
                } else if !is_value && depth == 0 {
                    // `"name"?` is a field that only some records carry.
                    if !rest[end + 1..].starts_with('?') {
                        fields.insert(word.to_owned());
                    }
                    key = word.to_owned();
                }
                rest = &rest[end + 1..];
                previous = '"';
                continue;
            }
            ',' | ':' | '|' => previous = c,
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    fields.remove("type");
    (types, fields)
}

#[test]
fn the_contract_parser_reads_the_readme_notation() {
    let (types, fields) = top_level_keys(r#""type":"delete"|"clear","removed":[ids]"#);
    assert_eq!(types, ["delete", "clear"]);
    assert_eq!(fields, BTreeSet::from(["removed".to_owned()]));
    let (_, fields) = top_level_keys(r#""type":"restore","guard","guard_fallback"?,"written":[..]"#);
    assert_eq!(fields, BTreeSet::from(["guard".to_owned(), "written".to_owned()]));
    let (types, fields) =
        top_level_keys(r#""type":"snapshot","id","provider":"git","status":"A"|"D","skipped":[{"path","reason"}]"#);
    assert_eq!(types, ["snapshot"]);
    assert_eq!(
        fields,
        ["id", "provider", "status", "skipped"].map(str::to_owned).into()
    );
    let (documented, codes) = documented_records();
    assert!(
        documented.len() >= 20 && codes.contains("not_found"),
        "{documented:?} {codes:?}"
    );
}

#[test]
fn every_command_speaks_only_json_lines_and_matches_the_readme() {
    let repo = TestRepo::new();
    let mut seen = Vec::new();
    let mut run = |args: &[&str], code: i32| {
        let got = json_lines(&repo, args, &mut seen);
        assert_eq!(got, code, "ckpt --json {args:?}");
    };
    run(&["snapshot", "--session", "s", "--turn", "1"], 0);
    repo.write("src/lib.rs", b"changed\n");
    repo.write("new.txt", b"new\n");
    run(&["snapshot", "--session", "s", "--turn", "2"], 0);
    run(&["list"], 0);
    run(&["list", "--all"], 0);
    run(&["show", "latest"], 0);
    run(&["preview", "turn:1", "--session", "s"], 0);
    run(&["diff", "turn:1", "latest", "--session", "s"], 0);
    run(&["diff", "turn:1", "--session", "s", "--stat"], 0);
    run(&["restore", "turn:1", "--session", "s", "--yes", "--exact"], 0);
    run(&["status"], 0);
    run(&["prune", "--dry-run", "--max-per-session", "1"], 0);
    run(&["audit"], 0);
    run(&["doctor"], 0);
    run(&["completions", "bash"], 0);
    run(&["man"], 0);
    run(&["gc", "--dry-run"], 0);
    run(&["watch", "status"], 0);
    run(&["watch", "start"], 0);
    run(&["snapshot", "--watch"], 0);
    run(&["watch", "status"], 0);
    run(&["watch", "stop"], 0);
    run(&["demo"], 0);
    run(&["integrate", "claude", "--dry-run"], 0);
    // A one-call harness session log of this workspace, for `trace list`.
    let key = format!(
        "--{}--",
        repo.root.to_str().unwrap().trim_start_matches('/').replace('/', "-")
    );
    let log_dir = repo.home.join("dsh/sessions").join(key).join("s");
    std::fs::create_dir_all(&log_dir).unwrap();
    std::fs::write(
        log_dir.join("session.jsonl"),
        "{\"type\":\"session\",\"id\":\"s\"}\n{\"type\":\"tool/call\",\"seq\":1,\"data\":{\"turn\":1,\"step\":1,\"callId\":\"c\",\"name\":\"write\",\"arguments\":\"{\\\"file_path\\\":\\\"t.txt\\\",\\\"content\\\":\\\"t\\\"}\"}}\n{\"type\":\"tool/result\",\"seq\":2,\"data\":{\"message\":{\"source\":{\"kind\":\"tool\",\"callId\":\"c\"},\"content\":[{\"type\":\"tool-result\",\"toolCallId\":\"c\",\"isError\":false}]}}}\n",
    )
    .unwrap();
    let home = repo.home.join("dsh");
    run(&["trace", "list", "--dsh-home", home.to_str().unwrap()], 0);
    run(
        &["trace", "diff", "trace:s:1.1", "--dsh-home", home.to_str().unwrap()],
        0,
    );
    run(
        &[
            "trace",
            "restore",
            "trace:s:1.1",
            "--yes",
            "--dsh-home",
            home.to_str().unwrap(),
        ],
        0,
    );
    run(&["preview", "ffffffff"], 1);
    run(&["no-such-command"], 2);
    run(&["--help"], 0);
    run(&["list", "--help"], 0);
    run(&["--version"], 0);
    run(&["restore", "latest"], 4);

    // A checkpoint whose pin is gone: audit and doctor have a problem to report.
    let victim = repo.snapshot(&[]);
    let pin = repo
        .ckpt_refs()
        .into_iter()
        .find(|r| r.ends_with(&victim))
        .expect("the new checkpoint is pinned");
    repo.git(&["update-ref", "-d", &pin]);
    run(&["audit"], 1);
    run(&["doctor"], 1);
    run(&["doctor", "--fix"], 0);
    let first = ids(&repo.ckpt_json(&["list"], 0), "checkpoint", "id").remove(0);
    run(&["delete", &first, "--yes"], 0);
    run(&["clear", "--yes"], 0);

    let (documented, codes) = documented_records();
    let mut by_type: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for record in &seen {
        by_type
            .entry(record["type"].as_str().unwrap())
            .or_default()
            .push(record);
    }
    for (record_type, fields) in &documented {
        let Some(records) = by_type.get(record_type.as_str()) else {
            panic!(
                "no command produced a {record_type:?} record; seen: {:?}",
                by_type.keys()
            );
        };
        for record in records {
            for field in fields {
                assert!(
                    record.get(field).is_some(),
                    "docs/json.md says {record_type} has {field:?}; got {record}"
                );
            }
        }
    }
    for record_type in by_type.keys() {
        assert!(
            documented.contains_key(*record_type),
            "{record_type:?} is not in docs/json.md's contract"
        );
    }
    for error in by_type.get("error").into_iter().flatten() {
        let code = error["code"].as_str().unwrap();
        assert!(
            codes.contains(code),
            "error code {code:?} is not in docs/json.md's list"
        );
    }
}
