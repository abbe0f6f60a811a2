//! docs/cli.md is the `--help` of every command and subcommand, as the binary prints it: this test
//! renders it afresh and fails when the file differs, so the reference never drifts from the
//! CLI. `CKPT_BLESS_DOCS=1 cargo test clidoc` writes the rendering instead.

use std::process::Command;

use crate::common::CKPT;

fn help_of(words: &[&str]) -> String {
    let out = Command::new(CKPT)
        .args(words)
        .arg("--help")
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .output()
        .expect("run ckpt --help");
    assert!(out.status.success(), "ckpt {} --help failed", words.join(" "));
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands a help text lists under "Commands:", `help` itself left out.
fn subcommands(help: &str) -> Vec<String> {
    help.split("\nCommands:\n")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .take_while(|line| line.starts_with("  "))
                .filter_map(|line| line.split_whitespace().next())
                .filter(|name| *name != "help")
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn render(words: &mut Vec<String>, out: &mut String) {
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let help = help_of(&args);
    let depth = 2 + words.len().min(1);
    out.push_str(&format!(
        "{} `ckpt{}{}`\n\n```text\n{}```\n\n",
        "#".repeat(depth),
        if words.is_empty() { "" } else { " " },
        words.join(" "),
        help
    ));
    for sub in subcommands(&help) {
        words.push(sub);
        render(words, out);
        words.pop();
    }
}

#[test]
fn docs_cli_md_is_the_help_the_binary_prints() {
    let mut rendered = String::from(
        "# ckpt command-line reference\n\n\
         Generated from `ckpt --help` and each subcommand's `--help`; `tests/realgit/clidoc.rs` \
         fails when the binary and this file disagree (`CKPT_BLESS_DOCS=1 cargo test clidoc` \
         renders it again). What each command does, in prose: [commands.md](commands.md).\n\n",
    );
    render(&mut Vec::new(), &mut rendered);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
    if std::env::var_os("CKPT_BLESS_DOCS").is_some() {
        std::fs::write(path, &rendered).expect("write docs/cli.md");
        return;
    }
    let written = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        written == rendered,
        "docs/cli.md is not the binary's --help (run `CKPT_BLESS_DOCS=1 cargo test --all-features \
         --test realgit clidoc` and commit the result)"
    );
}
