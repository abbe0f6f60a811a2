//! The optional config file (TOML): `<git-common-dir>/ckpt/config.toml` inside a repository,
//! `$CKPT_HOME/workspaces/<key>/config.toml` for a plain directory. Unknown keys and bad values
//! are refused at load, naming the key; a missing file means the defaults.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `auto`, `git` or `copy`.
    pub provider: Option<String>,
    /// Files larger than this are skipped (bytes).
    pub max_file_size: Option<u64>,
    pub retention: Option<Retention>,
    pub copy: Option<Copy>,
    /// Whether snapshots ask the workspace's watch daemon what changed: `true` also starts one
    /// when none runs, `false` never asks one; unset, a daemon that runs is asked.
    pub watch: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    pub max_per_session: Option<usize>,
    pub quota_bytes: Option<u64>,
    /// Checkpoints older than this go: a duration as people write one (`30d`, `12h`, `2w`);
    /// `0` keeps every age.
    pub max_age: Option<String>,
    /// `true`: apply the policy after every snapshot that created a checkpoint; `false`: never
    /// on its own; unset: at most every ten minutes.
    pub auto_prune: Option<bool>,
}

impl Retention {
    /// `max_age` in seconds, if set and readable.
    pub fn max_age_secs(&self) -> Option<Result<u64, String>> {
        self.max_age.as_deref().map(parse_age)
    }
}

/// A retention age as people write one: `30d`, `12h 30m`, `2weeks`; `0` is no limit.
pub fn parse_age(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    humantime::parse_duration(text.trim())
        .map(|age| age.as_secs())
        .map_err(|e| format!("{text:?} is not a duration like 30d, 12h or 0 ({e})"))
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Copy {
    /// Replaces the copy provider's default exclude patterns (gitignore syntax).
    pub excludes: Option<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
#[error("config {path}: {message}")]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let fail = |message: String| ConfigError {
            path: path.to_path_buf(),
            message,
        };
        let config: Config = toml::from_str(text).map_err(|e| fail(e.to_string().trim().to_owned()))?;
        if let Some(provider) = &config.provider {
            if !matches!(provider.as_str(), "auto" | "git" | "copy") {
                return Err(fail(format!(
                    "key `provider`: {provider:?} is not one of auto, git, copy"
                )));
            }
        }
        if config.max_file_size == Some(0) {
            return Err(fail("key `max_file_size`: must be at least 1".into()));
        }
        if let Some(retention) = &config.retention {
            if retention.max_per_session == Some(0) {
                return Err(fail("key `retention.max_per_session`: must be at least 1".into()));
            }
            if let Some(Err(why)) = retention.max_age_secs() {
                return Err(fail(format!("key `retention.max_age`: {why}")));
            }
        }
        if let Some(excludes) = config.copy.as_ref().and_then(|c| c.excludes.as_ref()) {
            if let Some(bad) = excludes.iter().find(|e| e.contains('\n') || e.trim().is_empty()) {
                return Err(fail(format!("key `copy.excludes`: {bad:?} is not a single pattern")));
            }
        }
        Ok(config)
    }

    /// Loads `path`; a missing file is the default config.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        // Opened without waiting: a FIFO there would make every command wait for a writer;
        // anything but a regular file is refused.
        match crate::verbs::read_regular_file(path).map(String::from_utf8) {
            Ok(Ok(text)) => Config::parse(&text, path),
            Ok(Err(_)) => Err(ConfigError {
                path: path.to_path_buf(),
                message: "not UTF-8 text".into(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(ConfigError {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("config.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_config_that_is_not_a_file_is_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        // A socket stands in for a FIFO here (tests/realgit covers the FIFO itself).
        let _socket = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let error = Config::load(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("not a regular file"), "{error}");
        std::fs::remove_file(&path).unwrap();
        assert!(Config::load(&path).is_ok(), "an absent config is the default one");
    }

    #[test]
    fn a_full_config_parses() {
        let config = parse(
            "provider = \"copy\"\nmax_file_size = 1024\n[retention]\nmax_per_session = 5\nquota_bytes = 99\nmax_age = \"2w 3d\"\nauto_prune = true\n[copy]\nexcludes = [\"*.tmp\", \"cache/\"]\n",
        )
        .unwrap();
        assert_eq!(config.provider.as_deref(), Some("copy"));
        let retention = config.retention.unwrap();
        assert_eq!(retention.auto_prune, Some(true));
        assert_eq!(retention.max_age_secs(), Some(Ok(17 * 24 * 3600)));
        assert_eq!(parse_age("0"), Ok(0));
        assert_eq!(parse_age("30d"), Ok(30 * 24 * 3600));
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        for (text, key) in [
            ("max_file_sise = 3", "max_file_sise"),
            ("[retention]\nquota = 3", "quota"),
            ("provider = \"svn\"", "provider"),
            ("max_file_size = \"big\"", "max_file_size"),
            ("max_file_size = 0", "max_file_size"),
            ("[retention]\nmax_per_session = 0", "retention.max_per_session"),
            ("[retention]\nmax_age = \"a month\"", "retention.max_age"),
            ("[retention]\nmax_age = 30", "max_age"),
            ("[copy]\nexcludes = [\"a\\nb\"]", "copy.excludes"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text:?}: {error}");
        }
    }
}
