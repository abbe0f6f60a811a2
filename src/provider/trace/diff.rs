//! What a trace diff compares: the files a node knows, against the state before it (its own
//! change), against another node (of this session or another), or against a checkpoint; each
//! side exact bytes or unknown, and why. Read-only.

use std::collections::BTreeMap;
use std::path::Path;

use super::sessions::{find_node, load_session, node_address, parse_node, state_after, LogSource};
use super::Known;
use crate::provider::{CkptError, Provider};
use crate::records::Record;
use crate::verbs::RepoPath;

/// One side of a trace diff, for one file.
pub enum Side {
    /// Exactly these bytes (`None`: absent).
    Known(Option<Vec<u8>>),
    /// Not known, and why.
    Unknown(String),
}

impl Side {
    fn of(known: Option<&Known>, absent_means: &str) -> Side {
        match known {
            Some(Known::Content(content)) => Side::Known(content.clone()),
            Some(Known::Unknown(why)) => Side::Unknown(why.clone()),
            None => Side::Unknown(absent_means.to_owned()),
        }
    }
}

/// What a node is compared with.
pub enum DiffAgainst<'a> {
    /// The state before the node: what its call changed.
    OwnChange,
    /// Another node, by its address (`trace:<session>:<turn.step or call id>`).
    Node(&'a str),
    /// A checkpoint.
    Checkpoint(Box<Record>),
}

/// A trace diff: its two sides' labels, and each file's (path, older side, newer side).
pub struct TraceDiff {
    pub from: String,
    pub to: String,
    pub pairs: Vec<(RepoPath, Side, Side)>,
}

impl TraceDiff {
    /// The diff of the node at address `node` against `against`.
    pub fn of(
        provider: &dyn Provider,
        cwd: &Path,
        node: &str,
        against: DiffAgainst<'_>,
        logs: LogSource<'_>,
    ) -> Result<TraceDiff, CkptError> {
        let (prefix, name) = parse_node(node)?;
        let replayed = load_session(provider, cwd, prefix, logs)?;
        let nodes = replayed.nodes(provider);
        let at = find_node(&nodes, name, node)?;
        let from = node_address(&replayed.log.header.id, nodes[at].call);
        let mut pairs: Vec<(RepoPath, Side, Side)> = Vec::new();
        let to = match against {
            DiffAgainst::OwnChange => {
                let before = if at == 0 {
                    BTreeMap::new()
                } else {
                    state_after(&nodes, at - 1)
                };
                for (path, after) in &nodes[at].files {
                    // The base the replay used (an earlier node, or a checkpoint) comes first.
                    let was = nodes[at].before.get(path).or_else(|| before.get(path));
                    pairs.push((
                        path.clone(),
                        Side::of(was, "not known to the trace before this call"),
                        Side::of(Some(after), ""),
                    ));
                }
                format!("{from} (its own change)")
            }
            DiffAgainst::Node(text) => {
                let (other_prefix, other_name) = parse_node(text)?;
                let other_replayed;
                let (other_nodes, other_session) = if other_prefix == prefix {
                    (nodes.clone(), &replayed)
                } else {
                    other_replayed = load_session(provider, cwd, other_prefix, logs)?;
                    (other_replayed.nodes(provider), &other_replayed)
                };
                let other_at = find_node(&other_nodes, other_name, text)?;
                let a = state_after(&nodes, at);
                let b = state_after(&other_nodes, other_at);
                let paths: std::collections::BTreeSet<&RepoPath> = a.keys().chain(b.keys()).collect();
                for path in paths {
                    pairs.push((
                        path.clone(),
                        Side::of(a.get(path), "not known to the trace at this node"),
                        Side::of(b.get(path), "not known to the trace at that node"),
                    ));
                }
                node_address(&other_session.log.header.id, other_nodes[other_at].call)
            }
            DiffAgainst::Checkpoint(record) => {
                for (path, known) in state_after(&nodes, at) {
                    let held = provider.file_at(&record, &path)?;
                    pairs.push((path, Side::of(Some(&known), ""), Side::Known(held)));
                }
                format!("checkpoint {}", record.short())
            }
        };
        Ok(TraceDiff { from, to, pairs })
    }
}
