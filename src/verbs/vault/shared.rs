//! git's sharing rules (`core.sharedRepository`) for what ckpt creates in a repository: a
//! repository shared with a group gets group-writable, set-group-id directories and
//! group-writable ref files, so a teammate's `git add` can still write into an `objects/xx`
//! directory ckpt made. Only permission bits of files and directories ckpt itself just created
//! are changed, never through a link, and only when the repository asks for sharing.

use std::path::Path;

use super::Vault;

/// What `core.sharedRepository` asks for, as git reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sharing {
    /// `false`, `umask`, `0` or unset: permissions follow the umask.
    Umask,
    /// `group`/`true`/`1` (`0660`) or `all`/`world`/`everybody`/`2` (`0664`): these bits are
    /// added.
    Add(u32),
    /// An octal mode such as `0640`: exactly these bits.
    Exact(u32),
}

impl Sharing {
    pub(super) fn parse(value: Option<&str>) -> Sharing {
        let Some(value) = value.map(str::trim) else {
            return Sharing::Umask;
        };
        match value.to_ascii_lowercase().as_str() {
            "" | "false" | "umask" | "0" | "no" | "off" => Sharing::Umask,
            "true" | "group" | "1" | "yes" | "on" => Sharing::Add(0o660),
            "all" | "world" | "everybody" | "2" => Sharing::Add(0o664),
            octal => match u32::from_str_radix(octal, 8) {
                // git insists its owner can read and write an exact mode, and ignores others' writes.
                Ok(mode) if mode & 0o600 == 0o600 && mode <= 0o777 => Sharing::Exact(mode & 0o666),
                _ => Sharing::Umask,
            },
        }
    }

    /// The mode git gives a path whose mode is now `mode` (type bits included).
    pub(super) fn mode_for(self, mode: u32, is_dir: bool) -> u32 {
        let mut tweak = match self {
            Sharing::Umask => return mode,
            Sharing::Add(bits) | Sharing::Exact(bits) => bits,
        };
        if mode & 0o200 == 0 {
            tweak &= !0o222;
        }
        if mode & 0o100 != 0 {
            tweak |= (tweak & 0o444) >> 2;
        }
        let mut shared = match self {
            Sharing::Exact(_) => (mode & !0o777) | tweak,
            _ => mode | tweak,
        };
        if is_dir {
            shared |= (shared & 0o444) >> 2;
            if shared & 0o060 != 0 {
                shared |= 0o2000;
            }
        }
        shared
    }
}

impl Vault {
    /// The mode git gives a new pack or pack index: read-only, less the umask (so a repository
    /// worked in under `umask 077` gets packs only its owner reads, as git's own), then the
    /// read bits the repository's sharing adds.
    pub(super) fn new_pack_mode(&self) -> u32 {
        self.sharing().mode_for(0o444 & !process_umask(), false) & 0o7777
    }

    pub(super) fn sharing(&self) -> Sharing {
        let config = self.repo.config_snapshot();
        let value = config.string("core.sharedRepository");
        Sharing::parse(value.as_ref().map(|v| v.to_string()).as_deref())
    }

    /// Gives each path in `paths` (files and directories ckpt just created) the permissions git
    /// would under the repository's sharing rule. A link is never followed, and a path that is
    /// gone is passed over. Best effort: a path another user owns cannot be changed, and git
    /// would fail the same way.
    pub(super) fn share(&self, paths: &[std::path::PathBuf]) {
        let sharing = self.sharing();
        if sharing == Sharing::Umask {
            return;
        }
        for path in paths {
            share_one(path, sharing);
        }
    }

    /// [`Self::share`] for the directories of ckpt's own state in this repository's git
    /// directory (`ckpt/` and a workspace's directory below it): under `core.sharedRepository
    /// = 0600` only their owner may enter them, shared with a group they are the group's, as
    /// git makes its own directories. Nothing else is touched.
    pub fn share_state_dirs(&self, dirs: &[std::path::PathBuf]) {
        let common = self.repo.common_dir().to_path_buf();
        let own: Vec<std::path::PathBuf> = dirs.iter().filter(|dir| dir.starts_with(&common)).cloned().collect();
        self.share(&own);
    }
}

fn share_one(path: &Path, sharing: Sharing) {
    use rustix::fs::{fchmod, fstat, open, FileType, Mode, OFlags};
    // Judged and changed through one descriptor opened without following a link, so a link
    // swapped in after a look is never followed.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = open(path, flags, Mode::empty()) else {
        return;
    };
    let Ok(stat) = fstat(&fd) else {
        return;
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    if !matches!(kind, FileType::RegularFile | FileType::Directory) {
        return;
    }
    let mode = stat.st_mode;
    let wanted = sharing.mode_for(mode, kind == FileType::Directory);
    if wanted & 0o7777 != mode & 0o7777 {
        fchmod(&fd, Mode::from_raw_mode(wanted & 0o7777)).ok();
    }
}

/// The process's umask, as `/proc/self/status` says it (read, never set: setting it to read it
/// would change it for the other threads meanwhile); 022 where that cannot be read.
fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Umask:"))
                .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_follow_gits_sharing_rules() {
        let group = Sharing::parse(Some("group"));
        assert_eq!(group, Sharing::Add(0o660));
        assert_eq!(group.mode_for(0o40755, true) & 0o7777, 0o2775, "a directory");
        assert_eq!(group.mode_for(0o100644, false) & 0o7777, 0o664, "a ref file");
        assert_eq!(group.mode_for(0o100444, false) & 0o7777, 0o444, "a read-only object");
        let all = Sharing::parse(Some("all"));
        assert_eq!(all.mode_for(0o40700, true) & 0o7777, 0o2775);
        assert_eq!(all.mode_for(0o100600, false) & 0o7777, 0o664);
        let exact = Sharing::parse(Some("0640"));
        assert_eq!(exact, Sharing::Exact(0o640));
        assert_eq!(exact.mode_for(0o100666, false) & 0o7777, 0o640);
        assert_eq!(exact.mode_for(0o40777, true) & 0o7777, 0o2750);
        assert_eq!(Sharing::parse(Some("0666")), Sharing::Exact(0o666));
        for none in [None, Some("false"), Some("umask"), Some("0"), Some("0400")] {
            assert_eq!(Sharing::parse(none).mode_for(0o40755, true), 0o40755, "{none:?}");
        }
    }
}
