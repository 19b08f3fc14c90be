//! The budget every YAML text is read under: size, nesting depth, aliases and anchors (a
//! "billion laughs" document expands quadratically or worse), documents and nodes. The
//! budgets are options of the one `serde-saphyr` parse that builds the values
//! (`api::yaml`), which stops at the first breach instead of building the expansion; no
//! text is parsed outside them, nor twice. Pure.

use serde_saphyr::budget::BudgetBreach;

/// Largest text read (bytes). A workload is a few KiB; the JSS's body limit is lower.
pub const MAX_INPUT_BYTES: usize = 8 * 1024 * 1024;
/// Deepest nesting of mappings and sequences. A pod template is about 12 deep.
pub const MAX_DEPTH: usize = 64;
/// Most alias uses (`*ref`) in one text.
pub const MAX_ALIASES: usize = 1_000;
/// Most anchors (`&ref`) in one text.
pub const MAX_ANCHORS: usize = 1_000;
/// Most events replayed for aliases: what an alias expands to counts again.
pub const MAX_REPLAYED_EVENTS: usize = 100_000;
/// Most uses of each anchor on average, once 100 aliases are used.
pub const MAX_USES_PER_ANCHOR: usize = 10;
/// Most documents in one stream.
pub const MAX_DOCUMENTS: usize = 1_000;
/// Most nodes (scalars, mappings, sequences) in one text.
pub const MAX_NODES: usize = 1_000_000;

/// A text over one of the budgets: which, what was seen and where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input over budget{}: {what} (limit {limit}); nothing was read", at(*.line, *.column))]
pub struct OverBudget {
    pub what: String,
    pub limit: usize,
    /// Where the breach was found (none for the size, checked before parsing).
    pub line: Option<usize>,
    pub column: Option<usize>,
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        _ => String::new(),
    }
}

/// The size budget, the one limit checked before parsing (the text is in memory already).
pub(super) fn check_size(text: &str) -> Result<(), OverBudget> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(OverBudget {
            what: format!("{} bytes of input", text.len()),
            limit: MAX_INPUT_BYTES,
            line: None,
            column: None,
        });
    }
    Ok(())
}

/// The parser's options: every budget, and YAML 1.2 scalars (`yes`, `on` and `no` are
/// strings, as the YAML 1.2 core schema has them).
pub(super) fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            // The scanner's own cap on `[`/`{` nesting; one above the budget so a deep
            // flow collection is reported as the depth breach.
            flow_nesting_limit: MAX_DEPTH + 1,
            max_aliases: MAX_ALIASES,
            max_anchors: MAX_ANCHORS,
            alias_anchor_ratio_multiplier: MAX_USES_PER_ANCHOR,
            max_recorded_anchor_events: MAX_REPLAYED_EVENTS,
            max_documents: MAX_DOCUMENTS,
            max_nodes: MAX_NODES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
        },
        strict_booleans: true,
        // `.inf` and `.nan` have no JSON form; they stay text.
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        // Messages carry line and column; the caller names the file.
        with_snippet: false,
    }
}

/// The breach in a parse error, if the parse stopped at one.
pub(super) fn breach(error: &serde_saphyr::Error) -> Option<OverBudget> {
    let (line, column) = match error.location() {
        Some(l) if l.line() > 0 => (Some(l.line() as usize), Some(l.column() as usize)),
        _ => (None, None),
    };
    let over = |what: String, limit: usize| {
        Some(OverBudget {
            what,
            limit,
            line,
            column,
        })
    };
    match innermost(error) {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            BudgetBreach::Depth { depth } => over(format!("nesting {depth} deep"), MAX_DEPTH),
            BudgetBreach::Aliases { aliases } => over(format!("{aliases} aliases"), MAX_ALIASES),
            BudgetBreach::Anchors { anchors } => over(format!("{anchors} anchors"), MAX_ANCHORS),
            BudgetBreach::RecordedAnchorEvents {
                recorded_anchor_events: n,
            } => over(
                format!("{n} events replayed for aliases"),
                MAX_REPLAYED_EVENTS,
            ),
            BudgetBreach::Documents { documents } => {
                over(format!("{documents} documents"), MAX_DOCUMENTS)
            }
            BudgetBreach::Nodes { nodes } => over(format!("{nodes} nodes"), MAX_NODES),
            BudgetBreach::AliasAnchorRatio { aliases, anchors } => over(
                format!(
                    "{} uses per anchor ({aliases} aliases of {anchors} anchors)",
                    aliases / anchors.max(&1)
                ),
                MAX_USES_PER_ANCHOR,
            ),
            // The parser's defaults (events, scalar bytes, merge keys): named as it names them.
            other => over(format!("{other:?}"), 0),
        },
        serde_saphyr::Error::AliasReplayLimitExceeded {
            total_replayed_events: n,
            ..
        } => over(
            format!("{n} events replayed for aliases"),
            MAX_REPLAYED_EVENTS,
        ),
        e @ (serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
        | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }) => {
            over(format!("aliases nested or expanded too often ({e})"), 0)
        }
        serde_saphyr::Error::ExternalMessage { source, .. }
            if matches!(
                &**source,
                serde_saphyr::ExternalMessageSource::Parser(e)
                    if matches!(e.kind(), serde_saphyr::granit_parser::ErrorKind::RecursionLimitExceeded)
            ) =>
        {
            over(format!("nesting over {MAX_DEPTH} deep"), MAX_DEPTH)
        }
        _ => None,
    }
}

/// The error itself, without the snippet or alias wrappers saphyr puts around it.
pub(super) fn innermost(error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match error.without_snippet() {
        serde_saphyr::Error::AliasError { error, .. } => innermost(error),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::yaml::{ReadError, read_documents};
    use std::time::{Duration, Instant};

    /// Reads `text`. Whatever it holds, that ends within seconds (replaying the 100,000
    /// alias events allowed takes under half a second in a debug build); what a bomb would
    /// expand to would take hours.
    fn quickly(text: &str) -> Result<usize, OverBudget> {
        let t = Instant::now();
        let r = read_documents(text);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t.elapsed()
        );
        match r {
            Ok(docs) => Ok(docs.len()),
            Err(ReadError::OverBudget(b)) => Err(b),
            Err(other) => panic!("not a budget error: {other}"),
        }
    }

    #[test]
    fn an_ordinary_workload_is_within_budget() {
        let text = "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\n\
                    metadata: {name: web}\nspec:\n  replicas: 3\n  template: &t\n    spec:\n      \
                    containers: [{name: a, image: a}]\n  other: *t\n";
        assert_eq!(quickly(text), Ok(1));
        // Broken YAML within budget is a syntax error, not a breach.
        assert!(matches!(
            read_documents("a: [unclosed"),
            Err(ReadError::Syntax { .. })
        ));
    }

    #[test]
    fn a_billion_laughs_is_refused_before_it_expands() {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = quickly(&text).unwrap_err();
        assert!(err.to_string().contains("over budget"), "{err}");
        assert!(
            [MAX_ALIASES, MAX_REPLAYED_EVENTS].contains(&err.limit),
            "{err}"
        );
    }

    #[test]
    fn deep_nesting_is_refused_with_the_depth() {
        let text = format!("{}1{}", "[".repeat(30_000), "]".repeat(30_000));
        let err = quickly(&text).unwrap_err();
        assert!(err.what.contains("deep"), "{err}");
        assert_eq!(err.limit, MAX_DEPTH);
        assert!(
            err.to_string().contains("line 1"),
            "the place is named: {err}"
        );
        let block: String = (0..200)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        let err = quickly(&block).unwrap_err();
        assert_eq!(err.limit, MAX_DEPTH, "block-style nesting too: {err}");
    }

    #[test]
    fn sixty_kilobytes_nested_thirty_thousand_deep_are_refused_at_once_and_the_budget_still_reads()
    {
        // 30,000 block mappings, one per line, each a level deeper: `k:` then `- ` ...
        let deep: String = (0..30_000).map(|_| "- ").collect::<String>() + "x\n";
        assert!(deep.len() > 60_000 && deep.len() < 61_000);
        let err = quickly(&deep).unwrap_err();
        assert_eq!(err.limit, MAX_DEPTH);
        // Stopped where the 65th level opens: nothing after it was read.
        assert_eq!((err.line, err.column), (Some(1), Some(2 * MAX_DEPTH + 1)));
        assert_eq!(
            err.to_string(),
            format!(
                "input over budget at line {}, column {}: {} (limit 64); nothing was read",
                err.line.unwrap(),
                err.column.unwrap(),
                err.what
            )
        );
        // Within budget: as deep as allowed, and as long (60 KB of flow mapping).
        let nested = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(quickly(&nested), Ok(1));
        let wide = format!(
            "{{{}}}",
            (0..7_000)
                .map(|i| format!("k{i:04}: v"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(wide.len() > 60_000);
        assert_eq!(quickly(&wide), Ok(1));
    }

    #[test]
    fn one_anchor_used_hundreds_of_times_is_refused() {
        let text = format!("a: &a x\nb: [{}]\n", ["*a"; 200].join(", "));
        let err = quickly(&text).unwrap_err();
        assert_eq!(err.limit, MAX_USES_PER_ANCHOR, "{err}");
        assert!(err.what.starts_with("200 uses per anchor"), "{err}");
        let text = format!("a: &a x\nb: [{}]\n", ["*a"; 10].join(", "));
        assert_eq!(quickly(&text), Ok(1));
    }

    #[test]
    fn too_many_documents_or_bytes_are_refused() {
        let docs = "---\na: 1\n".repeat(MAX_DOCUMENTS + 5);
        let err = quickly(&docs).unwrap_err();
        assert!(err.what.contains("documents"), "{err}");
        assert_eq!(err.limit, MAX_DOCUMENTS);
        let big = "#".repeat(MAX_INPUT_BYTES + 1);
        let err = quickly(&big).unwrap_err();
        assert!(err.what.contains("bytes"), "{err}");
        assert_eq!(err.line, None);
    }
}
