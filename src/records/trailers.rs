//! The metadata a git checkpoint carries in its commit message as `Ckpt-*` trailers, so the
//! registry can be rebuilt from the pinned commits alone. Formatting and parsing live together
//! so they cannot drift; parsing treats the message as untrusted input.

use super::{validate_label, Kind, NarrowMode, Record, Skipped, WirePath, MAX_NARROW_MODES};

/// Everything in a checkpoint record that is not derived from the commit itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailers {
    pub workspace_key: String,
    pub session: Option<String>,
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub trigger: Option<String>,
    pub kind: Kind,
    pub time: String,
    pub files: u64,
    pub total_files: u64,
    pub bytes: u64,
    pub skipped: Vec<Skipped>,
    pub narrow_modes: Vec<NarrowMode>,
}

impl Trailers {
    pub fn format(&self) -> String {
        let mut text = format!("ckpt: {} checkpoint", self.kind.as_str());
        if let Some(trigger) = &self.trigger {
            text.push_str(&format!(" before {trigger}"));
        }
        text.push_str("\n\n");
        let mut trailer = |key: &str, value: &str| text.push_str(&format!("Ckpt-{key}: {value}\n"));
        trailer("Format", "1");
        trailer("Workspace", &self.workspace_key);
        trailer("Kind", self.kind.as_str());
        trailer("Time", &self.time);
        if let Some(session) = &self.session {
            trailer("Session", session);
        }
        if let Some(turn) = self.turn {
            trailer("Turn", &turn.to_string());
        }
        if let Some(step) = self.step {
            trailer("Step", &step.to_string());
        }
        if let Some(trigger) = &self.trigger {
            trailer("Trigger", trigger);
        }
        trailer("Files", &self.files.to_string());
        trailer("Total-Files", &self.total_files.to_string());
        trailer("Bytes", &self.bytes.to_string());
        for entry in &self.skipped {
            trailer("Skipped", &serde_json::to_string(entry).unwrap_or_default());
        }
        for entry in &self.narrow_modes {
            trailer("Mode", &serde_json::to_string(entry).unwrap_or_default());
        }
        text
    }

    /// Parses a checkpoint commit message; anything malformed is an error, never a guess.
    pub fn parse(message: &[u8]) -> Result<Trailers, String> {
        let text = std::str::from_utf8(message).map_err(|_| "commit message is not UTF-8".to_owned())?;
        let mut fields: Vec<(&str, &str)> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("Ckpt-") {
                let (key, value) = rest
                    .split_once(": ")
                    .ok_or_else(|| format!("malformed trailer {line:?}"))?;
                fields.push((key, value));
            }
        }
        let one = |key: &str| -> Result<Option<&str>, String> {
            let mut values = fields.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v);
            let first = values.next();
            if values.next().is_some() {
                return Err(format!("trailer Ckpt-{key} appears twice"));
            }
            Ok(first)
        };
        let required = |key: &str| one(key)?.ok_or_else(|| format!("missing trailer Ckpt-{key}"));
        let number = |key: &str| -> Result<Option<u64>, String> {
            one(key)?
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("Ckpt-{key} is not a number: {v:?}"))
                })
                .transpose()
        };
        if required("Format")? != "1" {
            return Err("unknown Ckpt-Format".into());
        }
        let label = |key: &str, what: &str| -> Result<Option<String>, String> {
            match one(key)? {
                Some(v) => validate_label(what, v).map(|()| Some(v.to_owned())),
                None => Ok(None),
            }
        };
        let kind = Kind::parse(required("Kind")?).ok_or("unknown Ckpt-Kind")?;
        let time = required("Time")?.to_owned();
        chrono::DateTime::parse_from_rfc3339(&time).map_err(|e| format!("bad Ckpt-Time: {e}"))?;
        let mut skipped = Vec::new();
        for (_, value) in fields.iter().filter(|(k, _)| *k == "Skipped") {
            let entry: Skipped = serde_json::from_str(value).map_err(|e| format!("bad Ckpt-Skipped: {e}"))?;
            entry.check()?;
            skipped.push(entry);
        }
        let mut narrow_modes = Vec::new();
        for (_, value) in fields.iter().filter(|(k, _)| *k == "Mode") {
            let entry: NarrowMode = serde_json::from_str(value).map_err(|e| format!("bad Ckpt-Mode: {e}"))?;
            entry.check()?;
            narrow_modes.push(entry);
        }
        if narrow_modes.len() > MAX_NARROW_MODES {
            return Err(format!("more than {MAX_NARROW_MODES} Ckpt-Mode trailers"));
        }
        Ok(Trailers {
            workspace_key: required("Workspace")?.to_owned(),
            session: label("Session", "session")?,
            turn: number("Turn")?,
            step: number("Step")?,
            trigger: label("Trigger", "trigger")?,
            kind,
            time,
            files: number("Files")?.unwrap_or(0),
            total_files: number("Total-Files")?.unwrap_or(0),
            bytes: number("Bytes")?.unwrap_or(0),
            skipped,
            narrow_modes,
        })
    }

    /// The registry record for the git checkpoint `id` with tree `tree`.
    pub fn into_record(self, provider: &str, id: String, tree: String, workspace: WirePath) -> Record {
        Record {
            commit: Some(id.clone()),
            id,
            provider: provider.into(),
            tree,
            workspace,
            session: self.session,
            turn: self.turn,
            step: self.step,
            trigger: self.trigger,
            kind: self.kind,
            time: self.time,
            files: self.files,
            total_files: self.total_files,
            bytes: self.bytes,
            skipped: self.skipped,
            narrow_modes: self.narrow_modes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trailers {
        Trailers {
            workspace_key: "main".into(),
            session: Some("sess 1".into()),
            turn: Some(3),
            step: Some(2),
            trigger: Some("bash".into()),
            kind: Kind::Auto,
            time: "2026-11-30T05:00:00Z".into(),
            files: 4,
            total_files: 10,
            bytes: 99,
            skipped: vec![Skipped {
                path: WirePath::from_bytes(b"big\xff.bin"),
                reason: "too_large: 9 bytes, limit 1".into(),
            }],
            narrow_modes: vec![NarrowMode {
                path: WirePath::from_bytes(b"keys/.env"),
                mode: 0o600,
            }],
        }
    }

    #[test]
    fn format_then_parse_round_trips() {
        let trailers = sample();
        assert_eq!(Trailers::parse(trailers.format().as_bytes()), Ok(trailers));
    }

    #[test]
    fn malformed_messages_are_rejected() {
        let good = sample().format();
        for bad in [
            good.replace("Ckpt-Format: 1", "Ckpt-Format: 2"),
            good.replace("Ckpt-Kind: auto", "Ckpt-Kind: evil"),
            good.replace("Ckpt-Turn: 3", "Ckpt-Turn: three"),
            good.replace("Ckpt-Time: 2026-11-30T05:00:00Z", "Ckpt-Time: now"),
            format!("{good}Ckpt-Kind: guard\n"),
            good.replace("Ckpt-Skipped: {", "Ckpt-Skipped: {{"),
            "plain commit message".into(),
        ] {
            assert!(Trailers::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        let traversal = good.replace(
            &serde_json::to_string(&sample().skipped[0]).unwrap(),
            r#"{"path":"../escape","reason":"x"}"#,
        );
        assert!(Trailers::parse(traversal.as_bytes()).is_err());
    }
}
