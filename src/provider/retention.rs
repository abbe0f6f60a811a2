//! The retention plan: which checkpoints a prune removes, and by which rule. Pure and
//! unit-tested; applying it (unpinning refs, dropping records) is the provider's job.

use std::collections::BTreeMap;

use crate::records::Record;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Newest checkpoints kept per session (records without a session form one group).
    pub max_per_session: usize,
    /// Soft cap on the sum of incremental bytes of the kept checkpoints.
    pub quota_bytes: u64,
    /// Checkpoints whose state was replaced (by the next checkpoint) longer ago than this many
    /// seconds go; 0 keeps every age.
    pub max_age_secs: u64,
}

/// The default policy is generous: retention is on by default, and must only ever bound a
/// history no one will go back to (a month old, past a thousand steps of one session, or
/// past 2 GiB of content ckpt alone keeps).
impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_per_session: 1000,
            quota_bytes: 2 * 1024 * 1024 * 1024,
            max_age_secs: 30 * 24 * 3600,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub id: String,
    pub rule: &'static str,
}

/// Records are oldest first; `now_ms` is in milliseconds since the epoch. First each session keeps its
/// newest `max_per_session`; then checkpoints whose state was replaced longer ago than
/// `max_age_secs` go (the age counts from the next checkpoint's time, not the checkpoint's own:
/// a restore that names an old checkpoint as its guard, nothing having changed since, must not
/// lose it to the very next snapshot); then, while the kept checkpoints' incremental bytes
/// exceed the quota, the oldest are removed. Never the newest checkpoint of a session by age or
/// quota, and never by age when the time it was replaced cannot be read. A turn whose first
/// checkpoint goes loses the rest of its checkpoints too (rule `turn`), unless one of them is
/// its session's newest: then the whole turn stays.
pub fn plan(records: &[Record], policy: &Policy, now_ms: i64) -> Vec<Removal> {
    let mut by_session: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        by_session.entry(record.session.as_deref()).or_default().push(index);
    }
    let mut removed = vec![false; records.len()];
    let mut newest_of_session = vec![false; records.len()];
    let mut out = Vec::new();
    for indices in by_session.values() {
        if let Some(&newest) = indices.last() {
            newest_of_session[newest] = true;
        }
        let keep_from = indices.len().saturating_sub(policy.max_per_session.max(1));
        for &index in &indices[..keep_from] {
            removed[index] = true;
            out.push((index, "max_per_session"));
        }
    }
    if policy.max_age_secs > 0 {
        let age_ms = i64::try_from(policy.max_age_secs).map_or(i64::MAX, |secs| secs.saturating_mul(1000));
        let cutoff = now_ms.saturating_sub(age_ms);
        for (index, next) in records.iter().skip(1).enumerate() {
            if removed[index] || newest_of_session[index] {
                continue;
            }
            let replaced = chrono::DateTime::parse_from_rfc3339(&next.time).map(|t| t.timestamp_millis());
            if replaced.is_ok_and(|replaced| replaced < cutoff) {
                removed[index] = true;
                out.push((index, "max_age"));
            }
        }
    }
    let mut total: u64 = records
        .iter()
        .enumerate()
        .filter(|(i, _)| !removed[*i])
        .map(|(_, r)| r.bytes)
        .sum();
    for (index, record) in records.iter().enumerate() {
        if total <= policy.quota_bytes {
            break;
        }
        if removed[index] || newest_of_session[index] {
            continue;
        }
        removed[index] = true;
        total = total.saturating_sub(record.bytes);
        out.push((index, "quota"));
    }
    // A turn goes from its start or not at all: `turn:T` names the turn's first checkpoint,
    // the state before it, and must not come to name a later step of it.
    let mut turns: BTreeMap<(Option<&str>, u64), Vec<usize>> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        if let (Some(turn), true) = (record.turn, record.kind != crate::records::Kind::Guard) {
            turns.entry((record.session.as_deref(), turn)).or_default().push(index);
        }
    }
    for indices in turns.values() {
        let (&start, later) = match indices.split_first() {
            Some(split) => split,
            None => continue,
        };
        let kept_later: Vec<usize> = later.iter().copied().filter(|&i| !removed[i]).collect();
        if !removed[start] || kept_later.is_empty() {
            continue;
        }
        if kept_later.iter().any(|&i| newest_of_session[i]) {
            // The session's newest stays, so its whole turn does: with a step's checkpoint
            // gone, `turn:T.S` would name an earlier step's state.
            for &index in indices {
                removed[index] = false;
            }
            out.retain(|(index, _)| !indices.contains(index));
        } else {
            for index in kept_later {
                removed[index] = true;
                out.push((index, "turn"));
            }
        }
    }
    out.sort_by_key(|(index, _)| *index);
    out.into_iter()
        .map(|(index, rule)| Removal {
            id: records[index].id.clone(),
            rule,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Kind, WirePath};

    fn record(n: usize, session: Option<&str>, bytes: u64) -> Record {
        let id = format!("{n:040x}");
        Record {
            id: id.clone(),
            provider: "git".into(),
            commit: Some(id),
            tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
            workspace: WirePath::from_bytes(b"/w"),
            session: session.map(str::to_owned),
            turn: None,
            step: None,
            trigger: None,
            kind: Kind::Auto,
            time: format!("2026-01-01T00:00:{:02}Z", n % 60),
            files: 1,
            total_files: 1,
            bytes,
            skipped: vec![],
            narrow_modes: vec![],
        }
    }

    /// A minute after the records' times (`2026-01-01T00:00:SS`).
    const NOW: i64 = (1_767_225_600 + 60) * 1000;

    fn ids(removals: &[Removal]) -> Vec<(usize, &'static str)> {
        removals
            .iter()
            .map(|r| (usize::from_str_radix(&r.id, 16).unwrap(), r.rule))
            .collect()
    }

    #[test]
    fn keeps_the_newest_per_session() {
        let records: Vec<Record> = (0..5)
            .map(|n| record(n, Some(if n % 2 == 0 { "a" } else { "b" }), 1))
            .collect();
        let policy = Policy {
            max_per_session: 1,
            quota_bytes: u64::MAX,
            max_age_secs: 0,
        };
        assert_eq!(
            ids(&plan(&records, &policy, NOW)),
            vec![(0, "max_per_session"), (1, "max_per_session"), (2, "max_per_session")]
        );
    }

    #[test]
    fn quota_removes_oldest_first_but_never_a_sessions_newest() {
        let records = vec![
            record(0, Some("a"), 100),
            record(1, Some("b"), 100),
            record(2, Some("a"), 100),
            record(3, Some("b"), 100),
        ];
        let policy = Policy {
            max_per_session: 50,
            quota_bytes: 150,
            max_age_secs: 0,
        };
        // Over quota even after removing 0 and 1, but 2 and 3 are their sessions' newest.
        assert_eq!(ids(&plan(&records, &policy, NOW)), vec![(0, "quota"), (1, "quota")]);
        let generous = Policy {
            max_per_session: 50,
            quota_bytes: 1000,
            max_age_secs: 0,
        };
        assert!(plan(&records, &generous, NOW).is_empty());
    }

    #[test]
    fn a_turn_goes_from_its_start_or_not_at_all() {
        let at = |n, turn| Record {
            turn: Some(turn),
            step: Some(n as u64),
            ..record(n, Some("s"), 1)
        };
        let records = vec![at(0, 1), at(1, 1), at(2, 2), at(3, 2), at(4, 2)];
        let keep = |max| {
            ids(&plan(
                &records,
                &Policy {
                    max_per_session: max,
                    quota_bytes: u64::MAX,
                    max_age_secs: 0,
                },
                NOW,
            ))
        };
        // Keeping 4 would leave turn 1 without its start: its other checkpoint goes too.
        assert_eq!(keep(4), vec![(0, "max_per_session"), (1, "turn")]);
        assert_eq!(keep(3), vec![(0, "max_per_session"), (1, "max_per_session")]);
        // Keeping 2 would cut turn 2 after its start; its newest stays, and so does the start
        // (one more than asked for).
        assert_eq!(keep(2), vec![(0, "max_per_session"), (1, "max_per_session")]);
        // Keeping 1 would leave turn 2 without its middle step, so that `turn:2.3` named step
        // 2's state: a turn that keeps its newest keeps every step.
        assert_eq!(keep(1), vec![(0, "max_per_session"), (1, "max_per_session")]);
    }

    #[test]
    fn age_counts_from_when_a_state_was_replaced_never_taking_a_sessions_newest() {
        let at = |n, session, second: u32| Record {
            time: format!("2026-01-01T00:00:{second:02}Z"),
            ..record(n, Some(session), 1)
        };
        let records = vec![
            at(0, "a", 0),
            at(1, "b", 0),
            at(2, "a", 0),
            Record {
                time: "not a time".into(),
                ..record(3, Some("a"), 1)
            },
            at(4, "a", 1),
            at(5, "a", 30),
            at(6, "a", 31),
        ];
        let policy = Policy {
            max_per_session: 50,
            quota_bytes: u64::MAX,
            max_age_secs: 58,
        };
        // NOW is :60, so states replaced before :02 go: 0 (replaced at :00) and 3 (at :01).
        // b's only one is its newest; 2 was replaced at a time that cannot be read; 4 was
        // replaced at :30, however old it is itself.
        assert_eq!(ids(&plan(&records, &policy, NOW)), vec![(0, "max_age"), (3, "max_age")]);
        let no_limit = Policy {
            max_age_secs: 0,
            ..policy
        };
        assert!(plan(&records, &no_limit, NOW).is_empty());
    }

    #[test]
    fn sessionless_records_form_one_group() {
        let records: Vec<Record> = (0..3).map(|n| record(n, None, 0)).collect();
        let policy = Policy {
            max_per_session: 2,
            quota_bytes: 0,
            max_age_secs: 0,
        };
        assert_eq!(ids(&plan(&records, &policy, NOW)), vec![(0, "max_per_session")]);
    }
}
