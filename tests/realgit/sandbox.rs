//! The sandbox boundary: only `src/verbs` may reach git (gix), only verbs and the registry may
//! mutate the filesystem, and other git clients keep working with ckpt's refs in place.

use std::path::{Path, PathBuf};

use crate::common::*;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn offenders(patterns: &[&str], allowed: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 5, "the scan must see the sources");
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if allowed.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if patterns.iter().any(|p| line.contains(p)) {
                found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn only_verbs_can_reach_a_repository() {
    let found = offenders(&["gix::", "gix ", "use gix", "git2", "rustix::fs::"], &["verbs/"]);
    assert!(
        found.is_empty(),
        "repository access outside src/verbs:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_verbs_and_the_registry_mutate_files() {
    let writes = [
        "fs::write",
        "remove_file",
        "fs::remove_dir",
        "fs::rename",
        "create_dir",
        "OpenOptions::new().write",
        ".write(true)",
        "set_permissions",
        "fs::symlink(",
        "unix::fs::symlink",
        "symlinkat",
        "unlinkat",
        "renameat",
    ];
    // The demo acts as the user of a scratch repository it creates itself; `ckpt integrate`
    // edits the one agent settings file the user asked it to (and keeps a backup of it), writes
    // Claude Code's /ckpt command, and records what it created in the clone's info/exclude.
    let found = offenders(&writes, &["verbs/", "records/", "cli/demo.rs", "cli/hook/integrate.rs"]);
    assert!(
        found.is_empty(),
        "filesystem writes outside verbs/records:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_engine_runs_no_git_subprocess() {
    // The demo plays the user (it runs git); the pager runs the user's own pager command.
    // `watch start` runs this very binary as the daemon; `ckpt ui` opens the user's browser.
    let found = offenders(
        &["Command::new"],
        &["cli/demo.rs", "cli/pager.rs", "cli/watch.rs", "cli/ui/mod.rs"],
    );
    assert!(found.is_empty(), "subprocesses in the engine:\n{}", found.join("\n"));
    let pager = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/pager.rs")).unwrap();
    let code: Vec<&str> = pager.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
    assert!(
        !code.iter().any(|l| l.contains("git")) && code.iter().filter(|l| l.contains("Command::new")).count() == 1,
        "the pager spawns one command, the user's pager, and never git"
    );
    let watch = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/watch.rs")).unwrap();
    assert!(
        watch.matches("Command::new(").count() == 1
            && watch.contains("Command::new(exe)")
            && watch.contains("current_exe()"),
        "watch start spawns only ckpt itself"
    );
    let ui = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/ui/mod.rs")).unwrap();
    assert!(
        ui.matches("Command::new(").count() == 1 && ui.contains("Command::new(opener)") && !ui.contains("\"git\""),
        "ckpt ui spawns only the browser opener"
    );
}

#[test]
fn only_the_cli_prints() {
    // Providers, records and verbs report through the caller's Reporter or their results; the
    // fault-injection points (a test-only feature) say where they stopped.
    let found = offenders(
        &["println!", "print!(", "std::io::stdout", "std::io::stderr", "dbg!("],
        &["cli/", "fault.rs", "main.rs"],
    );
    assert!(found.is_empty(), "printing outside src/cli:\n{}", found.join("\n"));
}

#[test]
fn other_git_clients_keep_working_with_pinned_checkpoints() {
    let repo = TestRepo::new();
    for i in 0..50 {
        repo.write(format!("f{}.txt", i % 7), format!("{i}").as_bytes());
        repo.snapshot(&[]);
    }
    let refs = repo.git(&["for-each-ref", "--format=%(refname) %(objecttype)"]);
    assert_eq!(
        refs.lines()
            .filter(|l| l.starts_with("refs/ckpt/") && l.ends_with(" commit"))
            .count(),
        50
    );
    repo.git(&["log", "--oneline"]);
    let all = repo.git(&["log", "--all", "--oneline"]);
    assert!(all.lines().count() >= 51, "{all}");
    let hidden = repo.git(&["log", "--exclude=refs/ckpt/*", "--all", "--oneline"]);
    assert_eq!(
        hidden.lines().count(),
        1,
        "the README's --exclude trick hides checkpoints: {hidden}"
    );
    assert!(repo.git_raw(&["fsck", "--full"]).status.success());
    let clone = repo.root.parent().unwrap().join("clone");
    repo.git(&["clone", "-q", repo.root.to_str().unwrap(), clone.to_str().unwrap()]);
    repo.git_in(&clone, &["fetch", "-q", "origin"]);

    let lib = git2::Repository::open(&repo.root).expect("libgit2 opens the repo");
    let mut pinned = 0;
    for reference in lib.references().unwrap() {
        let reference = reference.unwrap();
        let commit = reference.peel_to_commit().expect("every ref peels to a commit");
        commit.tree().expect("and its tree is readable");
        if reference.name().unwrap_or_default().starts_with("refs/ckpt/") {
            pinned += 1;
        }
    }
    assert_eq!(pinned, 50);
}

/// Every module of `src` (a file) with the modules it names through `crate::`, `super::` or
/// `self::` paths, its tests left out.
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|p| p == "mod" || p == "lib" || p == "main") {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: std::collections::BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let own: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
        let text = std::fs::read_to_string(file).unwrap();
        // Comments (a doc link to another module) import nothing.
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut named = std::collections::BTreeSet::new();
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| w.starts_with("crate::") || w.starts_with("super::") || w.starts_with("self::"))
            .collect();
        for word in words {
            let mut parts: Vec<&str> = word.split("::").filter(|p| !p.is_empty()).collect();
            let mut base: Vec<&str> = own.clone();
            match parts[0] {
                "crate" => base.clear(),
                "self" => {}
                _ => {
                    while parts.first() == Some(&"super") {
                        base.pop();
                        parts.remove(0);
                    }
                    parts.insert(0, "super");
                }
            }
            parts.remove(0);
            // The longest prefix that is a module of its own is the module named.
            let mut target = None;
            for len in 0..=parts.len() {
                let candidate = base.iter().chain(&parts[..len]).copied().collect::<Vec<_>>().join("::");
                if modules.contains(&candidate) {
                    target = Some(candidate);
                }
            }
            if let Some(target) = target {
                // A module naming one of its ancestors (a `mod.rs` re-export, say) is its own room.
                if !target.is_empty() && target != module && !module.starts_with(&format!("{target}::")) {
                    named.insert(target);
                }
            }
        }
        graph.insert(module, named);
    }
    graph
}

/// No two modules import each other, directly or in a loop: each cycle is one misplaced item.
#[test]
fn no_module_imports_another_that_imports_it_back() {
    let graph = module_graph();
    assert!(graph.len() > 20, "the scan must see the modules");
    let reaches = |from: &String| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo: Vec<&String> = graph[from].iter().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next.clone()) {
                todo.extend(graph.get(next).into_iter().flatten());
            }
        }
        seen
    };
    let mut cycles = Vec::new();
    for module in graph.keys() {
        let back: Vec<&String> = graph[module]
            .iter()
            .filter(|next| reaches(next).contains(module))
            .collect();
        if !back.is_empty() {
            cycles.push(format!("{module} -> {back:?} -> ... -> {module}"));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The layers only point down: `cli → provider → records → verbs`.
#[test]
fn the_layers_only_point_down() {
    let rank = |module: &str| match module.split("::").next() {
        Some("verbs") => Some(0),
        Some("records") => Some(1),
        Some("provider") => Some(2),
        Some("cli") => Some(3),
        _ => None,
    };
    let mut upward = Vec::new();
    for (module, named) in module_graph() {
        for target in named {
            if let (Some(from), Some(to)) = (rank(&module), rank(&target)) {
                if to > from {
                    upward.push(format!("{module} -> {target}"));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "a lower layer names a higher one:\n{}",
        upward.join("\n")
    );
}
