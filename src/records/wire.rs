//! The JSON form of a path: a string when the bytes are UTF-8, `{"bytes_b64": "..."}` otherwise,
//! so paths stay byte-exact through every record and every JSON Lines answer.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::verbs::RepoPath;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WirePath {
    Text(String),
    Bytes { bytes_b64: String },
}

impl WirePath {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => WirePath::Text(text.to_owned()),
            Err(_) => WirePath::Bytes {
                bytes_b64: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
        }
    }

    pub fn from_repo_path(path: &RepoPath) -> Self {
        Self::from_bytes(path.as_bytes())
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            WirePath::Text(text) => Ok(text.as_bytes().to_vec()),
            WirePath::Bytes { bytes_b64 } => base64::engine::general_purpose::STANDARD
                .decode(bytes_b64)
                .map_err(|e| format!("bad base64 path: {e}")),
        }
    }

    pub fn to_repo_path(&self) -> Result<RepoPath, String> {
        RepoPath::new(self.to_bytes()?).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_text_and_other_bytes_are_base64() {
        assert_eq!(WirePath::from_bytes(b"a b.txt"), WirePath::Text("a b.txt".into()));
        let raw = b"caf\xe9";
        let wire = WirePath::from_bytes(raw);
        assert!(matches!(wire, WirePath::Bytes { .. }));
        assert_eq!(wire.to_bytes().ok().as_deref(), Some(&raw[..]));
        assert_eq!(
            serde_json::to_string(&wire).ok().as_deref(),
            Some(r#"{"bytes_b64":"Y2Fm6Q=="}"#)
        );
    }
}
