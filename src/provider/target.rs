//! Checkpoint addressing: parses `latest`, an id prefix, `turn:T` and `turn:T.S`, and resolves
//! them against the registry's records. Pure: it never reads or writes anything.

use crate::records::{Kind, Record};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Latest,
    IdPrefix(String),
    Turn { turn: u64, step: Option<u64> },
}

pub const MIN_PREFIX: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    Invalid(String),
    NotFound(String),
    Ambiguous(Vec<String>),
}

impl Target {
    pub fn parse(text: &str) -> Result<Target, ResolveError> {
        if text == "latest" {
            return Ok(Target::Latest);
        }
        if let Some(rest) = text.strip_prefix("turn:") {
            let (turn, step) = match rest.split_once('.') {
                Some((t, s)) => (t, Some(s)),
                None => (rest, None),
            };
            let number = |s: &str| {
                s.parse::<u64>().map_err(|_| {
                    ResolveError::Invalid(format!("bad turn target {text:?}: expected turn:T or turn:T.S"))
                })
            };
            return Ok(Target::Turn {
                turn: number(turn)?,
                step: step.map(number).transpose()?,
            });
        }
        if text.len() < MIN_PREFIX || text.len() > 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ResolveError::Invalid(format!(
                "bad target {text:?}: expected `latest`, `turn:T`, `turn:T.S` or a hex id prefix of at least {MIN_PREFIX} digits"
            )));
        }
        Ok(Target::IdPrefix(text.to_ascii_lowercase()))
    }
}

fn describe(record: &Record) -> String {
    let mut text = format!("{} {} {}", record.short(), record.kind.as_str(), record.time);
    if let Some(session) = &record.session {
        text.push_str(&format!(" session={session}"));
    }
    if let Some(turn) = record.turn {
        text.push_str(&format!(" turn={turn}"));
        if let Some(step) = record.step {
            text.push_str(&format!(".{step}"));
        }
    }
    text
}

/// Finds the one record `target` names. Records are oldest first.
pub fn resolve<'a>(records: &'a [Record], target: &Target, session: Option<&str>) -> Result<&'a Record, ResolveError> {
    let in_session = |r: &&Record| session.is_none_or(|s| r.session.as_deref() == Some(s));
    match target {
        Target::Latest => records.iter().rev().find(in_session).ok_or_else(|| {
            ResolveError::NotFound(match session {
                Some(session) if !records.is_empty() => {
                    format!("no checkpoint belongs to session {session:?} (`ckpt status` lists the sessions)")
                }
                _ => "there are no checkpoints yet".into(),
            })
        }),
        Target::IdPrefix(prefix) => {
            let matches: Vec<&Record> = records.iter().filter(|r| r.id.starts_with(prefix.as_str())).collect();
            match matches.as_slice() {
                [] => Err(ResolveError::NotFound(format!("no checkpoint id starts with {prefix}"))),
                [one] => Ok(one),
                many => Err(ResolveError::Ambiguous(many.iter().map(|r| describe(r)).collect())),
            }
        }
        Target::Turn { turn, step } => {
            let candidates: Vec<&Record> = records
                .iter()
                .filter(in_session)
                .filter(|r| r.kind != Kind::Guard && r.turn.is_some())
                .collect();
            let sessions: std::collections::BTreeSet<Option<&str>> = candidates
                .iter()
                .filter(|r| r.turn == Some(*turn))
                .map(|r| r.session.as_deref())
                .collect();
            if session.is_none() && sessions.len() > 1 {
                return Err(ResolveError::Ambiguous(
                    candidates
                        .iter()
                        .filter(|r| r.turn == Some(*turn))
                        .map(|r| describe(r))
                        .collect(),
                ));
            }
            let key = |r: &Record| (r.turn.unwrap_or(0), r.step.unwrap_or(0));
            let found = match step {
                None => candidates
                    .iter()
                    .filter(|r| r.turn == Some(*turn))
                    .min_by_key(|r| r.step.unwrap_or(0))
                    .copied(),
                Some(step) => candidates
                    .iter()
                    .find(|r| key(r) == (*turn, *step))
                    .or_else(|| {
                        candidates
                            .iter()
                            .filter(|r| key(r) < (*turn, *step))
                            .max_by_key(|r| key(r))
                    })
                    .copied(),
            };
            found.ok_or_else(|| {
                ResolveError::NotFound(match step {
                    None => format!("no checkpoint for turn {turn}"),
                    Some(step) => format!("no checkpoint at or before turn {turn} step {step}"),
                })
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::WirePath;

    fn rec(id: &str, session: &str, turn: Option<u64>, step: Option<u64>, kind: Kind) -> Record {
        Record {
            id: id.into(),
            provider: "git".into(),
            commit: Some(id.into()),
            tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
            workspace: WirePath::from_bytes(b"/w"),
            session: Some(session.into()),
            turn,
            step,
            trigger: None,
            kind,
            time: "2026-01-01T00:00:00Z".into(),
            files: 0,
            total_files: 0,
            bytes: 0,
            skipped: vec![],
            narrow_modes: vec![],
        }
    }

    fn fixture() -> Vec<Record> {
        vec![
            rec("aaaa1111", "s1", Some(1), Some(1), Kind::Auto),
            rec("aaaa2222", "s1", Some(1), Some(2), Kind::Auto),
            rec("bbbb3333", "s1", Some(2), Some(1), Kind::Auto),
            rec("cccc4444", "s1", None, None, Kind::Guard),
            rec("dddd5555", "s2", Some(1), Some(3), Kind::Auto),
            rec("dddd6666", "s1", Some(3), Some(4), Kind::Auto),
        ]
    }

    #[test]
    fn parse_forms() {
        assert_eq!(Target::parse("latest"), Ok(Target::Latest));
        assert_eq!(Target::parse("turn:3"), Ok(Target::Turn { turn: 3, step: None }));
        assert_eq!(Target::parse("turn:3.2"), Ok(Target::Turn { turn: 3, step: Some(2) }));
        assert_eq!(Target::parse("ABCD"), Ok(Target::IdPrefix("abcd".into())));
        for bad in ["abc", "xyz1", "turn:", "turn:a", "turn:1.x", "../etc", ""] {
            assert!(matches!(Target::parse(bad), Err(ResolveError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn prefixes_resolve_or_list_candidates() {
        let records = fixture();
        let found = resolve(&records, &Target::IdPrefix("bbbb".into()), None);
        assert_eq!(found.map(|r| r.id.as_str()), Ok("bbbb3333"));
        match resolve(&records, &Target::IdPrefix("aaaa".into()), None) {
            Err(ResolveError::Ambiguous(list)) => assert_eq!(list.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resolve(&records, &Target::IdPrefix("eeee".into()), None),
            Err(ResolveError::NotFound(_))
        ));
    }

    #[test]
    fn latest_respects_session() {
        let records = fixture();
        assert_eq!(
            resolve(&records, &Target::Latest, None).map(|r| r.id.as_str()),
            Ok("dddd6666")
        );
        assert_eq!(
            resolve(&records, &Target::Latest, Some("s2")).map(|r| r.id.as_str()),
            Ok("dddd5555")
        );
        assert!(resolve(&[], &Target::Latest, None).is_err());
    }

    #[test]
    fn turns_pick_first_step_or_nearest_earlier() {
        let records = fixture();
        let s1 = Some("s1");
        let turn = |t, s| Target::Turn { turn: t, step: s };
        assert_eq!(
            resolve(&records, &turn(1, None), s1).map(|r| r.id.as_str()),
            Ok("aaaa1111")
        );
        assert_eq!(
            resolve(&records, &turn(1, Some(2)), s1).map(|r| r.id.as_str()),
            Ok("aaaa2222")
        );
        assert_eq!(
            resolve(&records, &turn(2, Some(9)), s1).map(|r| r.id.as_str()),
            Ok("bbbb3333")
        );
        assert_eq!(
            resolve(&records, &turn(3, Some(1)), s1).map(|r| r.id.as_str()),
            Ok("bbbb3333")
        );
        assert!(matches!(
            resolve(&records, &turn(9, None), s1),
            Err(ResolveError::NotFound(_))
        ));
        assert!(matches!(
            resolve(&records, &turn(1, None), None),
            Err(ResolveError::Ambiguous(_))
        ));
        assert_eq!(
            resolve(&records, &turn(2, None), None).map(|r| r.id.as_str()),
            Ok("bbbb3333")
        );
    }
}
