//! What `git fsck` refuses in the content of the files it reads itself: in a `.gitmodules`, a
//! submodule name that climbs out with `..`, a URL or path that reads as a command-line option,
//! a URL git cannot resolve safely (hiding a newline, with no host, a transport helper, a port
//! out of range, a relative one that climbs into `/` or holds a `:` or `\`), an `update`
//! command; in a `.gitattributes`, a line over 2048 bytes. A tree holding such a blob is
//! rejected by any remote with `receive.fsckObjects`, so a capture leaves it out and names it.
//! Judged conservatively (a URL this cannot read as plainly sound is refused too). Pure: bytes
//! in, verdict out.

/// The largest such file ckpt judges; a larger one is not captured (git's own are tiny).
pub const MOST_BYTES: u64 = 1 << 20;

/// Which of git's own files a name is, as git's fsck reads names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitFile {
    Modules,
    Attributes,
}

impl GitFile {
    pub fn of(name: &[u8]) -> Option<GitFile> {
        if crate::verbs::names_gitmodules(name) {
            Some(GitFile::Modules)
        } else if crate::verbs::names_gitattributes(name) {
            Some(GitFile::Attributes)
        } else {
            None
        }
    }

    pub fn shown(self) -> &'static str {
        match self {
            GitFile::Modules => ".gitmodules",
            GitFile::Attributes => ".gitattributes",
        }
    }

    /// The reason a capture skips this file with `content`, or `None` when git's fsck takes it.
    pub fn skip_reason(self, content: &[u8]) -> Option<String> {
        self.fsck_problem(content).map(|problem| {
            format!(
                "{}: a {} whose {problem}, which git fsck rejects in a tree",
                crate::records::RESERVED_NAME,
                self.shown()
            )
        })
    }

    /// Why `git fsck` would reject `content` as this file's blob, or `None`.
    pub fn fsck_problem(self, content: &[u8]) -> Option<String> {
        match self {
            GitFile::Modules => fsck_problem(content),
            GitFile::Attributes => attributes_problem(content),
        }
    }
}

/// git reads no attributes line longer than this, and its fsck rejects a blob holding one.
const MOST_ATTRIBUTES_LINE: usize = 2048;

fn attributes_problem(content: &[u8]) -> Option<String> {
    let longest = content.split(|b| *b == b'\n').map(<[u8]>::len).max().unwrap_or(0);
    (longest > MOST_ATTRIBUTES_LINE)
        .then(|| format!("line of {longest} bytes is longer than git reads ({MOST_ATTRIBUTES_LINE})"))
}

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
        // A backslash in the value as written: git reads escapes there, and Windows reads a
        // separator; either way ckpt cannot vouch for the URL git will see.
        let raw_backslash = value.contains('\\');
        let value = unquote(value.trim());
        match key.as_str() {
            "url" if raw_backslash => return Some(format!("url {value:?} holds a backslash")),
            "url" => {
                if let Some(why) = url_problem(&value) {
                    return Some(format!("url {value:?} {why}"));
                }
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

/// Why git's fsck would refuse (or ckpt cannot vouch for) a submodule URL, or `None`.
fn url_problem(url: &str) -> Option<&'static str> {
    if url.starts_with('-') {
        return Some("reads as an option");
    }
    if hides_newline(url) {
        return Some("holds an encoded newline");
    }
    if url.contains('\\') {
        return Some("holds a backslash");
    }
    if is_relative(url) {
        let mut rest = url;
        while let Some(next) = rest.strip_prefix("./").or_else(|| rest.strip_prefix("../")) {
            rest = next;
        }
        if rest.starts_with('/') || rest.contains(':') {
            return Some("is a relative url git cannot resolve safely");
        }
        return None;
    }
    // Without a scheme: a local path or scp-like `host:path`, which git takes as it is.
    let (scheme, after) = url.split_once("://")?;
    if scheme.contains(':') {
        return Some("goes through a transport helper");
    }
    let authority = after.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':')),
            None => return Some("has a malformed host"),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() && !scheme.eq_ignore_ascii_case("file") {
        return Some("has no host");
    }
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u32>().map_or(true, |p| p > 65535) {
            return Some("has a port out of range");
        }
    }
    None
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
    fn attributes_lines_longer_than_git_reads_are_named() {
        let long = format!("*.x {}\n", "a".repeat(3000));
        assert!(GitFile::Attributes.fsck_problem(long.as_bytes()).is_some());
        assert_eq!(
            GitFile::Attributes.fsck_problem(b"*.txt text eol=lf\n*.bin -diff\n"),
            None
        );
    }

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
            b"[submodule \"a\"]\n\turl = https:///example.com/x\n",
            b"[submodule \"a\"]\n\turl = http::https:///x\n",
            b"[submodule \"a\"]\n\turl = ftp:///x\n",
            b"[submodule \"a\"]\n\turl = ..\\..\\:x\n",
            b"[submodule \"a\"]\n\turl = .././/x\n",
            b"[submodule \"a\"]\n\turl = https://e.com:99999999999/x\n",
        ] {
            assert!(fsck_problem(bad).is_some(), "{}", String::from_utf8_lossy(bad));
        }
        for good in [
            &b"[submodule \"lib/foo\"]\n\tpath = lib/foo\n\turl = https://example.invalid/foo.git\n\tupdate = rebase\n"
                [..],
            b"[submodule \"x\"]\n\turl = ../sibling.git\n",
            b"[submodule \"x\"]\n\turl = git@github.com:o/r.git\n[submodule \"y\"]\n\turl = ssh://git@h:22/r\n",
            b"[submodule \"x\"]\n\turl = https://[::1]:8080/r.git\n",
            b"[submodule \"x\"]\n\turl = file:///srv/r.git\n",
            b"# a comment\n[core]\n\tpath = -fine-outside-submodules\n",
            b"not config at all \xff\n",
            b"",
        ] {
            assert_eq!(fsck_problem(good), None, "{}", String::from_utf8_lossy(good));
        }
    }
}
