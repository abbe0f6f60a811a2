//! What `git fsck` refuses in the content of a file it reads as `.gitmodules`: a submodule name
//! that climbs out with `..`, a URL or path that reads as a command-line option, a URL hiding a
//! newline, an `update` command. A tree holding such a blob is rejected by any remote with
//! `receive.fsckObjects`, so a capture leaves it out and names it. Pure: bytes in, verdict out.

/// The largest `.gitmodules` ckpt judges; a larger one is not captured (git's own are tiny).
pub const MOST_BYTES: u64 = 1 << 20;

/// Why `git fsck` would reject `content` as a `.gitmodules` blob, or `None`. Reads git's config
/// syntax as far as these checks need: a line git could not parse is no error to fsck either.
pub fn fsck_problem(content: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(content);
    let mut in_submodule = false;
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or_default();
            let (section, name) = match header.split_once([' ', '\t', '.']) {
                Some((section, rest)) => (section, unquote(rest.trim())),
                None => (header, String::new()),
            };
            in_submodule = section.eq_ignore_ascii_case("submodule");
            if in_submodule && name.split(['/', '\\']).any(|part| part == "..") {
                return Some(format!("submodule name {name:?} climbs out with `..`"));
            }
            continue;
        }
        if !in_submodule {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = unquote(value.trim());
        match key.as_str() {
            "url" if value.starts_with('-') => return Some(format!("url {value:?} reads as an option")),
            "url" if hides_newline(&value) => return Some(format!("url {value:?} holds an encoded newline")),
            "url" if is_relative(&value) && value.contains(':') => {
                return Some(format!("relative url {value:?} holds a `:`"))
            }
            "path" if value.starts_with('-') => return Some(format!("path {value:?} reads as an option")),
            "update" if value.starts_with('!') => return Some(format!("update {value:?} runs a command")),
            _ => {}
        }
    }
    None
}

/// A config value without its surrounding quotes and with `\"` and `\\` read.
fn unquote(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {}
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

fn hides_newline(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.contains("%0a") || lower.contains("%0d") || url.contains('\n') || url.contains('\r')
}

fn is_relative(url: &str) -> bool {
    url.starts_with("./") || url.starts_with("../")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_fsck_rejects_is_named_and_ordinary_files_pass() {
        for bad in [
            &b"[submodule \"../../evil\"]\n\tpath = x\n\turl = https://example.invalid/x\n"[..],
            b"[submodule \"a\"]\n\turl = --upload-pack=touch /tmp/x\n",
            b"[submodule \"a\"]\n\tpath = -x\n",
            b"[submodule \"a\"]\n\tupdate = !sh -c id\n",
            b"[submodule \"a\"]\n\turl = https://example.invalid/%0aevil\n",
            b"[Submodule \"a\\\\..\\\\b\"]\n",
            b"[submodule \"a\"]\n\turl = ../x:y\n",
        ] {
            assert!(fsck_problem(bad).is_some(), "{}", String::from_utf8_lossy(bad));
        }
        for good in [
            &b"[submodule \"lib/foo\"]\n\tpath = lib/foo\n\turl = https://example.invalid/foo.git\n\tupdate = rebase\n"
                [..],
            b"[submodule \"x\"]\n\turl = ../sibling.git\n",
            b"# a comment\n[core]\n\tpath = -fine-outside-submodules\n",
            b"not config at all \xff\n",
            b"",
        ] {
            assert_eq!(fsck_problem(good), None, "{}", String::from_utf8_lossy(good));
        }
    }
}
