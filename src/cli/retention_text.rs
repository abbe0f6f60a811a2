//! Retention as a person reads it: a rule with its value, the line a snapshot prints when
//! retention removed checkpoints on its own, and `status`'s line about it. Text only; never
//! removes anything.

use super::output;
use crate::provider;

/// A retention rule as a person reads it, with the policy's value.
fn rule_text(rule: &str, policy: &provider::retention::Policy) -> String {
    match rule {
        "max_age" => format!("replaced more than {} ago", age_text(policy.max_age_secs)),
        "max_per_session" => format!("past the newest {} of their session", policy.max_per_session),
        "quota" => format!("over the {} quota", output::human_bytes(policy.quota_bytes)),
        "turn" => "with their turn's start".to_owned(),
        other => other.to_owned(),
    }
}

/// An age in its largest whole unit ("30 days", "90 minutes"), else as humantime writes it.
fn age_text(secs: u64) -> String {
    let units = [(86_400, "day"), (3_600, "hour"), (60, "minute"), (1, "second")];
    match units
        .iter()
        .find(|(size, _)| secs.is_multiple_of(*size) && secs >= *size)
    {
        Some((size, name)) => {
            let count = secs / size;
            format!("{count} {name}{}", if count == 1 { "" } else { "s" })
        }
        None => humantime::format_duration(std::time::Duration::from_secs(secs)).to_string(),
    }
}

fn by_rule_text(by_rule: &std::collections::BTreeMap<String, u64>, policy: &provider::retention::Policy) -> String {
    by_rule
        .iter()
        .map(|(rule, count)| format!("{count} {}", rule_text(rule, policy)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The line a snapshot prints when retention removed checkpoints on its own: said once, when
/// it happens, with how to keep everything.
pub(super) fn removal_note(
    by_rule: &std::collections::BTreeMap<String, u64>,
    policy: &provider::retention::Policy,
) -> String {
    let removed: u64 = by_rule.values().sum();
    format!(
        "ckpt: retention removed {removed} old checkpoint(s): {}; `ckpt status` shows the policy, `auto_prune = false` under [retention] in the config keeps everything",
        by_rule_text(by_rule, policy)
    )
}

/// `status`'s line about retention: when it runs on its own, its policy, what it last removed.
pub(super) fn status_text(
    auto: Option<&provider::settle::AutoPrune>,
    policy: &provider::retention::Policy,
    last: Option<&crate::records::retention::AutoRemoval>,
) -> String {
    let keeps = format!(
        "keeps {}, the newest {} per session, {} of content",
        if policy.max_age_secs == 0 {
            "every age".to_owned()
        } else {
            format!("{} of history", age_text(policy.max_age_secs))
        },
        policy.max_per_session,
        output::human_bytes(policy.quota_bytes)
    );
    let when = match auto {
        None => return format!("retention: only by `ckpt prune` (config auto_prune = false); it {keeps}"),
        Some(provider::settle::AutoPrune { every: None, .. }) => "after every snapshot".to_owned(),
        Some(provider::settle::AutoPrune { every: Some(every), .. }) => {
            format!("on its own, at most every {}", age_text(every.as_secs()))
        }
    };
    let last = match last {
        Some(last) => format!(
            "last removed {} checkpoint(s) at {} ({})",
            last.removed,
            last.time,
            by_rule_text(&last.by_rule, policy)
        ),
        None => "has removed nothing so far".to_owned(),
    };
    format!("retention: {when}; {keeps}; {last}")
}
