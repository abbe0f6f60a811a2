//! Working a trace backwards from the worktree: where the replay forwards found no base for a
//! file (no earlier node or checkpoint holds it), the file as it is now, undone edit by edit,
//! gives what each call left — but only with evidence that nothing else changed it. The file's
//! status-change time must fall inside the last call that changed it (a write by anything later,
//! even one that sets an old modification time, moves it), no call the trace cannot replay (a
//! shell, another session's change, an unreadable line, an unknown outcome) may overlap the span
//! worked back, the file and every path the span's calls name must be one plain file now (no
//! hard link, no symlink on the way, inside the workspace), and every undo must be the only one
//! that gives the content (an edit's new text found exactly once, overlaps counted). A forwards
//! result is never replaced by a worked-back one: a disagreement drops everything worked back
//! for that file, and a file provably untouched since the last call that is not what the
//! forwards replay says makes every state of it unknown. Pure logic: the caller reads the
//! worktree.

use std::collections::BTreeMap;

use super::{apply, blinds_the_trace, call_millis, change_of, is_content_tool, result_millis, Change, ForeignChange};
use super::{place_of as place, Known, TraceNode};
use crate::records::sessionlog::CallOutcome;
use crate::verbs::RepoPath;

/// What the worktree holds of one file now.
#[derive(Debug, Clone)]
pub struct FileNow {
    /// The bytes of the regular file there now; `None`: none readable (missing, not a regular
    /// file, reached through a symlink, or changing while read).
    pub content: Option<Vec<u8>>,
    /// The file's last status change (any write, rename or chmod), ms since the epoch.
    pub changed_at: i64,
    /// Its hard links: another name of the same file may have changed it.
    pub links: u64,
}

/// How far a file time may lag the harness's clock: the kernel stamps files from a coarse clock
/// (a scheduler tick behind), the log from the precise one.
const CLOCK_SLACK_MS: i64 = 20;

/// A content call whose result came later than this after it (a long approval, say) leaves too
/// long a span in which something else may have written the file.
const LONGEST_CALL_MS: i64 = 30_000;

/// A span in which something the trace cannot replay may have changed `path` (every file when
/// `None`); `until: None`: it may not have ended.
struct Blind {
    from: i64,
    until: Option<i64>,
    path: Option<RepoPath>,
    what: String,
}

impl Blind {
    fn overlaps(&self, path: &RepoPath, from: i64, until: i64) -> bool {
        self.path.as_ref().is_none_or(|p| p == path) && self.from <= until && self.until.is_none_or(|end| end >= from)
    }
}

/// How often `needle` occurs in `text`, overlapping occurrences included, counted up to two
/// (all an undo needs to know), in time linear in the text.
fn overlapping_count(text: &str, needle: &str) -> usize {
    let Some(first) = text.find(needle) else { return 0 };
    // The next occurrence may start one character after the first.
    let next = first + text[first..].chars().next().map_or(1, char::len_utf8);
    if text[next..].contains(needle) {
        2
    } else {
        1
    }
}

/// The content `change` was applied to, from the content it left, when exactly one base gives
/// it; otherwise why not.
pub(super) fn unapply(after: &[u8], change: &Change<'_>) -> Result<Vec<u8>, String> {
    let text = || std::str::from_utf8(after).map_err(|_| "the file is not UTF-8 text".to_owned());
    let base = match change {
        Change::Write(_) => {
            return Err("a later write replaced the whole file, so what it held before cannot be worked back".into())
        }
        Change::Replace { all: true, .. } => {
            return Err("a later replace_all edit cannot be undone exactly".into());
        }
        Change::Replace { new, old, all: false } => {
            let text = text()?;
            if new.is_empty() {
                return Err("a later edit deleted text, and where it stood cannot be told".into());
            }
            // Overlapping matches count: in "aXaXa", "aXa" occurs twice.
            match overlapping_count(text, new) {
                1 => text.replacen(new, old, 1).into_bytes(),
                0 => return Err("a later edit's new text is not in the file, so it cannot be undone".into()),
                _ => {
                    return Err(
                        "a later edit's new text occurs more than once in the file, so it cannot be undone exactly"
                            .into(),
                    )
                }
            }
        }
        Change::Insert {
            after_line,
            text: inserted,
        } => {
            let text = text()?;
            let mut inserted = (*inserted).to_owned();
            if !inserted.ends_with('\n') {
                inserted.push('\n');
            }
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            if *after_line > lines.len() {
                return Err("a later insert's line is past the end of the file".into());
            }
            let at: usize = lines[..*after_line].iter().map(|line| line.len()).sum();
            if !text[at..].starts_with(&inserted) {
                return Err("a later insert's text is not where it was inserted".into());
            }
            let base = format!("{}{}", &text[..at], &text[at + inserted.len()..]);
            // At the end of a file, a base with and one without a last newline give the same.
            if at == base.len() && base.ends_with('\n') {
                return Err(
                    "a later insert at the end of the file cannot tell whether the file ended in a newline".into(),
                );
            }
            base.into_bytes()
        }
        Change::Nothing | Change::Opaque(_) => return Err("not a content change".into()),
    };
    // The call, applied to that base, must leave exactly what it left.
    match apply(&base, change) {
        Ok(again) if again == after => Ok(base),
        _ => Err("undoing a later edit does not give a base it applies to exactly once".into()),
    }
}

/// The spans in which something the trace cannot replay ran: this session's shells and other
/// unreplayable or unreadable calls, its content calls of unknown outcome, and every change of
/// another session (`None`: some of it cannot be placed in time, so nothing can be worked back).
fn blinds(
    nodes: &[TraceNode<'_>],
    foreign: &[ForeignChange],
    plain_file_now: &mut impl FnMut(&RepoPath) -> bool,
) -> Option<Vec<Blind>> {
    let mut out = Vec::new();
    for node in nodes {
        let call = node.call;
        // A shell that failed may still have changed files (a command that exits non-zero).
        if call.outcome == CallOutcome::Failed && !blinds_the_trace(&call.name) {
            continue;
        }
        let from = call_millis(call)?;
        // A content call may have changed a file under another name: through a symlink, a hard
        // link, or a path outside the workspace that leads back into it. Unless its path is one
        // plain file now, which file it changed cannot be told.
        if is_content_tool(&call.name) && node.refused.is_some() && call.arguments.is_ok() {
            out.push(Blind {
                from,
                until: result_millis(call),
                path: None,
                what: format!(
                    "call {} ({}) on a path outside the workspace, which may lead into it,",
                    place(call),
                    call.name
                ),
            });
            continue;
        }
        if let Some(path) = node.path.as_ref().filter(|path| !plain_file_now(path)) {
            out.push(Blind {
                from,
                until: result_millis(call),
                path: None,
                what: format!(
                    "call {} ({}) on {}, which is not one plain file now (missing, linked, or reached through a symlink),",
                    place(call),
                    call.name,
                    path.display()
                ),
            });
            continue;
        }
        let until = if call.outcome == CallOutcome::Unknown {
            None
        } else {
            result_millis(call)
        };
        let change = call
            .arguments
            .as_ref()
            .ok()
            .and_then(|args| change_of(&call.name, args));
        let path = match change {
            _ if blinds_the_trace(&call.name) => None,
            Some((_, Change::Nothing)) => continue,
            None if is_content_tool(&call.name) => None,
            None => continue,
            Some((_, Change::Opaque(_))) => match &node.path {
                Some(path) => Some(path.clone()),
                None => continue,
            },
            Some(_) if call.outcome != CallOutcome::Ok => match &node.path {
                Some(path) => Some(path.clone()),
                None => continue,
            },
            Some(_) => continue,
        };
        out.push(Blind {
            from,
            until,
            path,
            what: format!("call {} ({})", place(call), call.name),
        });
    }
    for change in foreign {
        out.push(Blind {
            from: change.at?,
            until: change.until,
            path: change.path.clone(),
            what: format!("session {}'s {}", change.session, change.tool),
        });
    }
    Some(out)
}

/// Fills in, from the worktree now (`now_of`), what the replay forwards left unknown for the
/// files the session's content calls changed: each such node's content after it, and the base
/// before it, as far back as the evidence reaches. Nodes so filled name the file in
/// `worked_back`; where it could not be done the unknown reason says why.
pub fn work_backwards(
    nodes: &mut [TraceNode<'_>],
    foreign: &[ForeignChange],
    now_ms: i64,
    mut now_of: impl FnMut(&RepoPath) -> Option<FileNow>,
) {
    // The content calls of each file that did change it, in log (and time) order.
    let mut chains: BTreeMap<RepoPath, Vec<usize>> = BTreeMap::new();
    for (at, node) in nodes.iter().enumerate() {
        let Some(path) = &node.path else { continue };
        let changes = node.call.outcome == CallOutcome::Ok
            && node
                .call
                .arguments
                .as_ref()
                .ok()
                .and_then(|args| change_of(&node.call.name, args))
                .is_some_and(|(_, change)| !matches!(change, Change::Nothing | Change::Opaque(_)));
        if changes {
            chains.entry(path.clone()).or_default().push(at);
        }
    }
    if chains.is_empty() {
        return;
    }
    // Each path read once.
    let mut seen: BTreeMap<RepoPath, Option<FileNow>> = BTreeMap::new();
    let mut now_of =
        |path: &RepoPath| -> Option<FileNow> { seen.entry(path.clone()).or_insert_with(|| now_of(path)).clone() };
    let mut plain = |path: &RepoPath| now_of(path).is_some_and(|file| file.content.is_some() && file.links == 1);
    let Some(blinds) = blinds(nodes, foreign, &mut plain) else {
        explain(
            nodes,
            &chains,
            "a call that may have changed files cannot be placed in time",
        );
        return;
    };
    for (path, chain) in &chains {
        let unknown = |at: &usize| matches!(nodes[*at].files.get(path), Some(Known::Unknown(_)));
        if !chain.iter().any(unknown) {
            // All replayed forwards: the file now, if it provably held still since the last
            // call, must be what the replay says; otherwise something the log does not show
            // changed it in between, and none of it can be trusted.
            contradicted(nodes, &blinds, path, chain, now_ms, &mut now_of);
            continue;
        }
        let (found, stopped) = match worked_back(nodes, &blinds, path, chain, now_ms, &mut now_of) {
            Ok(done) => done,
            Err(why) => (Vec::new(), Some(why)),
        };
        for (at, after, before) in found {
            let node = &mut nodes[at];
            if matches!(node.files.get(path), Some(Known::Unknown(_))) {
                node.files.insert(path.clone(), Known::Content(Some(after)));
                node.worked_back.insert(path.clone());
            }
            if let Some(before) = before {
                if !matches!(node.before.get(path), Some(Known::Content(_))) {
                    node.before.insert(path.clone(), Known::Content(Some(before)));
                }
            }
        }
        // The nodes the evidence did not reach say why.
        if let Some(why) = stopped {
            explain(nodes, &BTreeMap::from([(path.clone(), chain.clone())]), &why);
        }
    }
}

/// Appends why the worktree could not fill them to the unknown states of `chains`' nodes.
fn explain(nodes: &mut [TraceNode<'_>], chains: &BTreeMap<RepoPath, Vec<usize>>, why: &str) {
    for (path, chain) in chains {
        for &at in chain {
            if let Some(Known::Unknown(reason)) = nodes[at].files.get_mut(path) {
                if !reason.contains("; not worked back from the worktree: ") {
                    reason.push_str("; not worked back from the worktree: ");
                    reason.push_str(why);
                }
            }
        }
    }
}

/// What was worked back per node of `chain` (newest first): the node, the content after it and
/// the base before it (when the undo is exact); and why it stopped short, if it did. `Err`:
/// nothing can be, and why.
type Found = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

/// The file as it is now, when the evidence says nothing changed it since the last call of
/// `chain` did: its status-change time inside that call, a plausible call, one plain file.
fn anchor(
    nodes: &[TraceNode<'_>],
    path: &RepoPath,
    last: usize,
    now_ms: i64,
    now_of: &mut impl FnMut(&RepoPath) -> Option<FileNow>,
) -> Result<(Vec<u8>, i64), String> {
    let last_call = nodes[last].call;
    let (Some(started), Some(ended)) = (call_millis(last_call), result_millis(last_call)) else {
        return Err(format!("call {} has no logged start or end", place(last_call)));
    };
    if ended < started || ended > now_ms.saturating_add(1000) {
        return Err(format!("call {}'s logged times are not plausible", place(last_call)));
    }
    if ended.saturating_sub(started) > LONGEST_CALL_MS {
        return Err(format!(
            "call {} took {} s, too long a span to tell its write from another",
            place(last_call),
            ended.saturating_sub(started) / 1000
        ));
    }
    let Some(FileNow {
        content: Some(state),
        changed_at,
        links,
    }) = now_of(path)
    else {
        return Err("there is no settled regular file there now".into());
    };
    if links != 1 {
        return Err(format!(
            "it has {links} hard links, and another name may have changed it"
        ));
    }
    if changed_at > ended.saturating_add(CLOCK_SLACK_MS) {
        return Err(format!(
            "it changed after call {}, the last one that changed it",
            place(last_call)
        ));
    }
    if changed_at < started.saturating_sub(CLOCK_SLACK_MS) {
        return Err(format!(
            "it has not changed since before call {}, which the log says changed it",
            place(last_call)
        ));
    }
    Ok((state, ended.saturating_add(CLOCK_SLACK_MS)))
}

/// Marks every state of `path` along `chain` unknown when the file now, provably untouched
/// since the last call, is not what the replay forwards says that call left.
fn contradicted(
    nodes: &mut [TraceNode<'_>],
    blinds: &[Blind],
    path: &RepoPath,
    chain: &[usize],
    now_ms: i64,
    now_of: &mut impl FnMut(&RepoPath) -> Option<FileNow>,
) {
    let Some(&last) = chain.last() else { return };
    let Ok((now, window_end)) = anchor(nodes, path, last, now_ms, now_of) else {
        return;
    };
    let from = call_millis(nodes[last].call)
        .unwrap_or(i64::MIN)
        .saturating_sub(CLOCK_SLACK_MS);
    if blinds.iter().any(|b| b.overlaps(path, from, window_end)) {
        return;
    }
    let Some(Known::Content(replayed)) = nodes[last].files.get(path) else {
        return;
    };
    if replayed.as_deref() == Some(now.as_slice()) {
        return;
    }
    let why = format!(
        "the file now, untouched since call {} by its status-change time, is not what the replay gives: something the log does not show changed it",
        place(nodes[last].call)
    );
    for &at in chain {
        nodes[at].files.insert(path.clone(), Known::Unknown(why.clone()));
        nodes[at].before.remove(path);
    }
}

fn worked_back(
    nodes: &[TraceNode<'_>],
    blinds: &[Blind],
    path: &RepoPath,
    chain: &[usize],
    now_ms: i64,
    now_of: &mut impl FnMut(&RepoPath) -> Option<FileNow>,
) -> Result<(Found, Option<String>), String> {
    let Some(&last) = chain.last() else {
        return Ok((Vec::new(), None));
    };
    let (mut state, window_end) = anchor(nodes, path, last, now_ms, now_of)?;

    let mut found = Vec::new();
    for &at in chain.iter().rev() {
        let node = &nodes[at];
        let from = call_millis(node.call)
            .unwrap_or(i64::MIN)
            .saturating_sub(CLOCK_SLACK_MS);
        if let Some(blind) = blinds.iter().find(|b| b.overlaps(path, from, window_end)) {
            return Ok((
                found,
                Some(format!("{} ran between call {} and now", blind.what, place(node.call))),
            ));
        }
        // An earlier call on the file still running when this one started (in the same
        // millisecond, as far as the log can tell) may have written after it.
        let started = call_millis(node.call).unwrap_or(i64::MIN);
        if let Some(&earlier) = chain
            .iter()
            .take_while(|&&other| other < at)
            .find(|&&other| result_millis(nodes[other].call).is_none_or(|ended| ended >= started))
        {
            return Ok((
                found,
                Some(format!(
                    "calls {} and {} ran at once",
                    place(nodes[earlier].call),
                    place(node.call)
                )),
            ));
        }
        if let Some(Known::Content(known)) = node.files.get(path) {
            if known.as_deref() != Some(state.as_slice()) {
                return Err(format!(
                    "undoing the later calls does not give what the replay forwards rebuilt after call {}",
                    place(node.call)
                ));
            }
        }
        let Some((_, change)) = node
            .call
            .arguments
            .as_ref()
            .ok()
            .and_then(|args| change_of(&node.call.name, args))
        else {
            return Ok((
                found,
                Some(format!("call {}'s arguments cannot be read", place(node.call))),
            ));
        };
        let before = unapply(&state, &change);
        if let (Ok(before), Some(Known::Content(known))) = (&before, node.before.get(path)) {
            if known.as_deref() != Some(before.as_slice()) {
                return Err(format!(
                    "undoing call {} does not give what the replay forwards knew before it",
                    place(node.call)
                ));
            }
        }
        let after = std::mem::take(&mut state);
        match before {
            Ok(before) => {
                found.push((at, after, Some(before.clone())));
                state = before;
            }
            Err(why) => {
                found.push((at, after, None));
                return Ok((found, Some(format!("call {}: {why}", place(node.call)))));
            }
        }
    }
    Ok((found, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace<'a>(old: &'a str, new: &'a str) -> Change<'a> {
        Change::Replace { old, new, all: false }
    }

    #[test]
    fn an_edit_is_undone_only_when_one_base_gives_what_it_left() {
        assert_eq!(unapply(b"a NEW c", &replace("old", "NEW")).unwrap(), b"a old c");
        // The new text twice: which one the edit made cannot be told.
        assert!(unapply(b"NEW NEW", &replace("old", "NEW"))
            .unwrap_err()
            .contains("more than once"));
        // Undone, the old text would occur twice, where the edit needs it once.
        assert!(unapply(b"old NEW", &replace("old", "NEW")).is_err());
        assert!(unapply(b"gone", &replace("x", "")).is_err(), "a deletion has no place");
        let all = Change::Replace {
            old: "a",
            new: "b",
            all: true,
        };
        assert!(unapply(b"b b", &all).is_err());
        assert!(unapply(b"anything", &Change::Write("anything")).is_err());
        assert!(unapply(&[0xff, 0xfe], &replace("a", "b")).is_err(), "not text");
        // "- item\n" occurs twice in "- item\n- item\n- item\n" once overlaps are counted
        // no, three times; the edit made the last two, which a first match would miss.
        assert!(unapply(
            b"# TODO\n- item\n- item\n- item\n",
            &replace("- other\n", "- item\n- item\n")
        )
        .is_err());
        assert!(unapply(b"aXaXa", &replace("b", "aXa"))
            .unwrap_err()
            .contains("more than once"));
        assert_eq!(overlapping_count("aaa", "aa"), 2);
        assert_eq!(overlapping_count("éaé", "é"), 2);
        assert_eq!(overlapping_count("xyz", "y"), 1);
        assert_eq!(overlapping_count("xyz", "q"), 0);
    }

    #[test]
    fn an_insert_is_undone_where_it_was_made_and_not_at_an_ambiguous_end() {
        let insert = Change::Insert {
            after_line: 1,
            text: "two",
        };
        assert_eq!(unapply(b"one\ntwo\nthree\n", &insert).unwrap(), b"one\nthree\n");
        assert!(unapply(b"one\nthree\ntwo\n", &insert).is_err(), "not at its line");
        // "one" and "one\n" both give "one\ntwo\n".
        assert!(unapply(b"one\ntwo\n", &insert).is_err());
        let at_start = Change::Insert {
            after_line: 0,
            text: "zero\n",
        };
        assert_eq!(unapply(b"zero\none\n", &at_start).unwrap(), b"one\n");
    }

    #[test]
    fn undoing_what_an_edit_did_gives_its_base_back_whenever_it_claims_to() {
        // Every base and edit over a small alphabet: an undo that answers must be exact.
        let words = ["", "a", "b", "ab", "a\n", "b\na", "ba\n\n"];
        let mut undone = 0;
        for base in words {
            for old in ["a", "b", "ab", "\n"] {
                for new in ["", "b", "ba", "x\n", "a"] {
                    let change = replace(old, new);
                    let Ok(after) = apply(base.as_bytes(), &change) else {
                        continue;
                    };
                    if let Ok(back) = unapply(&after, &change) {
                        assert_eq!(back, base.as_bytes(), "{base:?} {old:?}->{new:?}");
                        undone += 1;
                    }
                }
                for line in 0..3 {
                    let change = Change::Insert {
                        after_line: line,
                        text: old,
                    };
                    let Ok(after) = apply(base.as_bytes(), &change) else {
                        continue;
                    };
                    if let Ok(back) = unapply(&after, &change) {
                        assert_eq!(back, base.as_bytes(), "{base:?} insert {old:?} after {line}");
                        undone += 1;
                    }
                }
            }
        }
        assert!(undone > 20, "the check ran on real cases: {undone}");
    }
}
