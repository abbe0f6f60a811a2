//! Where an agent's hooks stand in each of its sessions: `hooks/positions.json` in a workspace's
//! state directory holds, per (agent, session), the turn (prompts seen) and the step (tool calls
//! checkpointed in that turn), updated under a lock of its own so concurrent hooks of one session
//! each get a step of their own. Owns only that file and its lock; never touches the worktree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{acquire_lock, create_own_dirs, io_error, write_atomically, LockMode, RecordsError, OWN_STATE_LEVELS};

pub(super) const HOOKS_DIR: &str = "hooks";
pub(super) const POSITIONS_FILE: &str = "positions.json";
pub(super) const LOCK_FILE: &str = "positions.lock";
const POSITIONS_FORMAT: &str = "ckpt-hook-positions";
/// Sessions remembered per workspace; the least recently seen are forgotten first (a forgotten
/// session that comes back starts again from its transcript or from turn 1).
pub const MAX_SESSIONS: usize = 512;

/// One session's place: `turn` prompts seen, `step` tool calls checkpointed since the last one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub turn: u64,
    pub step: u64,
    /// The agent's own id of the current turn, where its events carry one (Claude Code's
    /// `prompt_id`, Codex's `turn_id`): a tool call under a new id opens a new turn even when
    /// no prompt event was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_key: Option<String>,
    /// Unix seconds of the last event, for forgetting the oldest sessions.
    pub seen: i64,
    /// The agent's ids of this session's tool calls, with the turn and step each got: every call
    /// of the open turn and the latest of earlier ones. The same call announced twice (ckpt's
    /// hook installed in both the user's and the project's settings) is one step, not two.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<(String, u64, u64)>,
    /// The agent's ids of this session's earlier turns: a late tool call of one of them (its
    /// prompt long answered) joins the current turn instead of opening a new one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_turn_keys: Vec<String>,
    /// This event announced a tool call already counted (and checkpointed by that first
    /// announcement): nothing more to do.
    #[serde(skip)]
    pub repeated: bool,
}

/// Tool call ids of earlier turns remembered per session: a second announcement arrives right
/// after the first, so only a call near a turn's end can meet a turn opened in between.
const RECENT_CALLS: usize = 16;
/// Tool call ids of the open turn remembered per session. A second announcement can trail the
/// first by any number of calls (parallel calls, each announced twice, arrive in any order),
/// so the open turn's are all kept; this only bounds the file an endless turn would grow.
pub const MAX_TURN_CALLS: usize = 4096;
/// Earlier turn ids remembered per session.
const RECENT_TURNS: usize = 8;

#[derive(Debug, Default, Serialize, Deserialize)]
struct PositionsFile {
    format: String,
    version: u32,
    sessions: BTreeMap<String, Position>,
}

/// The hook positions of one workspace.
#[derive(Debug, Clone)]
pub struct HookPositions {
    dir: PathBuf,
}

/// One hook event of an agent's session, as far as its position goes.
#[derive(Debug, Clone, Copy)]
pub struct SessionEvent<'a> {
    pub agent: &'a str,
    pub session: &'a str,
    pub advance: Advance,
    /// The agent's id of the turn the event belongs to, if it gives one.
    pub turn_key: Option<&'a str>,
    /// The agent's id of the tool call, if it gives one.
    pub call_id: Option<&'a str>,
}

/// What happened in a session, as far as its position goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The user submitted a prompt: a new turn, no steps yet.
    Prompt,
    /// A tool call is about to mutate the workspace: the next step of this turn.
    ToolCall,
}

impl HookPositions {
    /// The hook positions of the workspace whose state directory is `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        HookPositions {
            dir: state_dir.join(HOOKS_DIR),
        }
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join(POSITIONS_FILE)
    }

    /// Moves the event's session on and returns where it now stands. A session
    /// seen for the first time starts at turn `first_turn()` (1, or past the turns its
    /// checkpoints already have). An unreadable or corrupt positions file is replaced:
    /// positions only label checkpoints, and losing them must not stop a hook from taking one.
    pub fn advance(
        &self,
        event: &SessionEvent<'_>,
        first_turn: impl FnOnce() -> u64,
        now: i64,
    ) -> Result<Position, RecordsError> {
        let SessionEvent {
            agent,
            session,
            advance,
            turn_key,
            call_id,
        } = *event;
        create_own_dirs(&self.dir, OWN_STATE_LEVELS + 1, 0o777)?;
        let _lock = acquire_lock(&self.dir.join(LOCK_FILE), LockMode::Exclusive, &|_| {})?;
        let path = self.file();
        let mut file = match crate::verbs::read_regular_file(&path) {
            Ok(bytes) => parse(&bytes).unwrap_or_default(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PositionsFile::default(),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let key = format!("{agent}:{session}");
        let known = file.sessions.get(&key).cloned();
        let repeated = known.as_ref().zip(call_id).and_then(|(known, id)| {
            known
                .calls
                .iter()
                .find(|(seen, _, _)| seen == id)
                .map(|(_, turn, step)| (*turn, *step))
        });
        if let (Some((turn, step)), Some(known)) = (repeated, &known) {
            return Ok(Position {
                turn,
                step,
                repeated: true,
                ..known.clone()
            });
        }
        let same_turn = |known: &Position| {
            turn_key.is_none()
                || known.turn_key.as_deref() == turn_key
                || turn_key.is_some_and(|key| known.earlier_turn_keys.iter().any(|k| k == key))
        };
        let (turn, step) = match (known.clone(), advance) {
            // The same prompt announced twice: nothing moves.
            (Some(known), Advance::Prompt) if turn_key.is_some() && same_turn(&known) => (known.turn, known.step),
            (Some(known), Advance::Prompt) => (known.turn.saturating_add(1), 0),
            (Some(known), Advance::ToolCall) if same_turn(&known) || known.turn_key.is_none() => {
                (known.turn.max(1), known.step.saturating_add(1))
            }
            // A tool call of a turn whose prompt event was missed.
            (Some(known), Advance::ToolCall) => (known.turn.saturating_add(1), 1),
            (None, Advance::Prompt) => (first_turn().max(1), 0),
            (None, Advance::ToolCall) => (first_turn().max(1), 1),
        };
        // The key of the turn in force: a late call of an earlier turn does not replace it.
        let current_key = match (&known, turn_key) {
            (Some(known), Some(key)) if known.earlier_turn_keys.iter().any(|k| k == key) => known.turn_key.clone(),
            _ => turn_key.map(str::to_owned),
        };
        let mut earlier_turn_keys = known.as_ref().map(|k| k.earlier_turn_keys.clone()).unwrap_or_default();
        if let Some(old) = known.as_ref().and_then(|k| k.turn_key.clone()) {
            if current_key.as_ref() != Some(&old) && !earlier_turn_keys.contains(&old) {
                earlier_turn_keys.push(old);
                let excess = earlier_turn_keys.len().saturating_sub(RECENT_TURNS);
                earlier_turn_keys.drain(..excess);
            }
        }
        let mut calls = known.map(|k| k.calls).unwrap_or_default();
        if let Some(id) = call_id.filter(|_| advance == Advance::ToolCall) {
            calls.push((id.to_owned(), turn, step));
        }
        forget_calls(&mut calls, turn);
        let position = Position {
            turn,
            step,
            turn_key: current_key,
            seen: now,
            calls,
            earlier_turn_keys,
            repeated: false,
        };
        file.sessions.insert(key, position.clone());
        forget_oldest(&mut file.sessions, MAX_SESSIONS);
        file.format = POSITIONS_FORMAT.into();
        file.version = 1;
        let text = serde_json::to_vec_pretty(&file).map_err(|e| RecordsError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        write_atomically(&path, &text)?;
        Ok(position)
    }
}

fn parse(bytes: &[u8]) -> Option<PositionsFile> {
    let file: PositionsFile = serde_json::from_slice(bytes).ok()?;
    (file.format == POSITIONS_FORMAT && file.version == 1).then_some(file)
}

/// Keeps the calls of `open_turn` (at most [`MAX_TURN_CALLS`], the latest) and the latest
/// [`RECENT_CALLS`] of earlier turns, in the order they came.
fn forget_calls(calls: &mut Vec<(String, u64, u64)>, open_turn: u64) {
    let open = calls.iter().filter(|(_, turn, _)| *turn == open_turn).count();
    let mut open_excess = open.saturating_sub(MAX_TURN_CALLS);
    let mut earlier_excess = (calls.len() - open).saturating_sub(RECENT_CALLS);
    calls.retain(|(_, turn, _)| {
        let excess = if *turn == open_turn {
            &mut open_excess
        } else {
            &mut earlier_excess
        };
        let keep = *excess == 0;
        *excess = excess.saturating_sub(1);
        keep
    });
}

/// Keeps the `keep` most recently seen sessions.
fn forget_oldest(sessions: &mut BTreeMap<String, Position>, keep: usize) {
    if sessions.len() <= keep {
        return;
    }
    let mut by_age: Vec<(i64, String)> = sessions.iter().map(|(k, p)| (p.seen, k.clone())).collect();
    by_age.sort();
    for (_, key) in by_age.into_iter().take(sessions.len() - keep) {
        sessions.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn event<'a>(
        agent: &'a str,
        session: &'a str,
        advance: Advance,
        turn_key: Option<&'a str>,
        call_id: Option<&'a str>,
    ) -> SessionEvent<'a> {
        SessionEvent {
            agent,
            session,
            advance,
            turn_key,
            call_id,
        }
    }

    #[test]
    fn prompts_open_turns_and_tool_calls_count_steps_per_session() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        let at = |agent, session, advance| {
            let p = positions
                .advance(&event(agent, session, advance, None, None), || 1, 100)
                .expect("advance");
            (p.turn, p.step)
        };
        assert_eq!(at("claude", "s1", Advance::Prompt), (1, 0));
        assert_eq!(at("claude", "s1", Advance::ToolCall), (1, 1));
        assert_eq!(at("claude", "s1", Advance::ToolCall), (1, 2));
        // Another session, and the same id from another agent, count on their own.
        assert_eq!(at("claude", "s2", Advance::ToolCall), (1, 1));
        assert_eq!(at("gemini", "s1", Advance::ToolCall), (1, 1));
        assert_eq!(at("claude", "s1", Advance::Prompt), (2, 0));
        assert_eq!(at("claude", "s1", Advance::ToolCall), (2, 1));
    }

    #[test]
    fn the_agents_turn_ids_open_turns_even_without_a_prompt_event() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        let at = |advance, key| {
            let p = positions
                .advance(&event("codex", "s", advance, Some(key), None), || 1, 1)
                .expect("advance");
            (p.turn, p.step)
        };
        assert_eq!(at(Advance::Prompt, "t1"), (1, 0));
        assert_eq!(at(Advance::ToolCall, "t1"), (1, 1));
        // The prompt event announced again (two hook entries): nothing moves.
        assert_eq!(at(Advance::Prompt, "t1"), (1, 1));
        assert_eq!(at(Advance::ToolCall, "t1"), (1, 2));
        // No prompt event for turn t2 (the prompt hook is not installed): its first call opens it.
        assert_eq!(at(Advance::ToolCall, "t2"), (2, 1));
        assert_eq!(at(Advance::ToolCall, "t2"), (2, 2));
        assert_eq!(at(Advance::Prompt, "t3"), (3, 0));
        assert_eq!(at(Advance::ToolCall, "t3"), (3, 1));
        // A late call of turn t1 joins the turn in force; it does not open a fourth.
        assert_eq!(at(Advance::ToolCall, "t1"), (3, 2));
        assert_eq!(at(Advance::ToolCall, "t3"), (3, 3));
        assert_eq!(at(Advance::Prompt, "t4"), (4, 0));
    }

    #[test]
    fn one_tool_call_announced_twice_is_one_step() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        let call = |id| {
            let p = positions
                .advance(&event("claude", "s", Advance::ToolCall, Some("p1"), Some(id)), || 1, 1)
                .expect("advance");
            (p.turn, p.step)
        };
        assert_eq!(call("toolu_1"), (1, 1));
        assert_eq!(call("toolu_1"), (1, 1));
        assert_eq!(call("toolu_2"), (1, 2));
        assert_eq!(call("toolu_2"), (1, 2));
        assert_eq!(call("toolu_3"), (1, 3));
        assert_eq!(call("toolu_1"), (1, 1), "still known");
    }

    #[test]
    fn every_call_of_the_open_turn_is_remembered_and_earlier_turns_only_briefly() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        let call = |turn_key: &str, id: &str| {
            let p = positions
                .advance(
                    &event("claude", "s", Advance::ToolCall, Some(turn_key), Some(id)),
                    || 1,
                    1,
                )
                .expect("advance");
            (p.turn, p.step, p.repeated)
        };
        for n in 1..=40 {
            assert_eq!(call("p1", &format!("u{n}")), (1, n, false));
        }
        for n in 1..=40 {
            assert_eq!(call("p1", &format!("u{n}")), (1, n, true), "u{n} announced again");
        }
        assert_eq!(call("p2", "v1"), (2, 1, false));
        assert_eq!(
            call("p1", "u40"),
            (1, 40, true),
            "the end of the turn before is still known"
        );
        let file = parse(&fs::read(positions.file()).expect("read")).expect("parse");
        assert_eq!(file.sessions["claude:s"].calls.len(), RECENT_CALLS + 1);

        let mut calls: Vec<(String, u64, u64)> = (0..MAX_TURN_CALLS as u64 + 10)
            .map(|n| (format!("c{n}"), 7, n))
            .collect();
        forget_calls(&mut calls, 7);
        assert_eq!(calls.len(), MAX_TURN_CALLS);
        assert_eq!(calls[0].0, "c10", "the oldest go first");
    }

    #[test]
    fn a_session_first_seen_mid_way_starts_where_it_is_told() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        let p = positions
            .advance(&event("claude", "s", Advance::ToolCall, None, None), || 4, 1)
            .expect("advance");
        assert_eq!((p.turn, p.step), (4, 1));
        // Known afterwards: where it started is not asked again.
        let p = positions
            .advance(
                &event("claude", "s", Advance::ToolCall, None, None),
                || unreachable!("known session"),
                2,
            )
            .expect("advance");
        assert_eq!((p.turn, p.step), (4, 2));
    }

    #[test]
    fn a_corrupt_positions_file_is_replaced_and_old_sessions_are_forgotten() {
        let dir = tempfile::tempdir().expect("temp dir");
        let positions = HookPositions::new(dir.path());
        fs::create_dir_all(dir.path().join(HOOKS_DIR)).expect("mkdir");
        fs::write(positions.file(), b"{ not json").expect("write");
        let p = positions
            .advance(&event("claude", "s", Advance::ToolCall, None, None), || 1, 1)
            .expect("advance");
        assert_eq!((p.turn, p.step), (1, 1));
        let mut sessions = BTreeMap::new();
        for n in 0..5 {
            let position = Position {
                turn: 1,
                step: 1,
                turn_key: None,
                seen: n,
                calls: Vec::new(),
                earlier_turn_keys: Vec::new(),
                repeated: false,
            };
            sessions.insert(format!("a:{n}"), position);
        }
        forget_oldest(&mut sessions, 3);
        assert_eq!(sessions.keys().cloned().collect::<Vec<_>>(), ["a:2", "a:3", "a:4"]);
    }
}
