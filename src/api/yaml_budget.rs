//! The budget every YAML text from outside passes before it is read: size, nesting
//! depth, aliases and anchors (a "billion laughs" document expands quadratically or
//! worse), documents and nodes. Checked with `serde-saphyr`'s budgeted parser, which
//! stops at the first breach instead of building the expansion; a text within budget is
//! then read as before. Pure.

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
/// Most documents in one stream.
pub const MAX_DOCUMENTS: usize = 1_000;
/// Most nodes (scalars, mappings, sequences) in one text.
pub const MAX_NODES: usize = 1_000_000;

/// A text over one of the budgets: which, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input over budget: {what} (limit {limit}); nothing was read")]
pub struct OverBudget {
    pub what: String,
    pub limit: usize,
}

/// Checks `text` against every budget. A text that is not well-formed YAML but within
/// budget passes: the reader that follows reports its syntax error with line and column.
pub fn check(text: &str) -> Result<(), OverBudget> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(OverBudget {
            what: format!("{} bytes of input", text.len()),
            limit: MAX_INPUT_BYTES,
        });
    }
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_aliases: MAX_ALIASES,
            max_anchors: MAX_ANCHORS,
            max_recorded_anchor_events: MAX_REPLAYED_EVENTS,
            max_documents: MAX_DOCUMENTS,
            max_nodes: MAX_NODES,
        },
    };
    // The breach arrives wrapped with its location; its text names what was exceeded.
    match serde_saphyr::from_multiple_with_options::<serde::de::IgnoredAny>(text, options) {
        Err(e) => {
            // The first line: saphyr adds a source snippet below it.
            let message = e.to_string();
            let message = message.lines().next().unwrap_or_default().to_string();
            let what = message.trim_start_matches("error: ").to_string();
            if message.contains("recursion limit") || message.contains("Depth") {
                Err(OverBudget {
                    what: format!("nesting too deep ({what})"),
                    limit: MAX_DEPTH,
                })
            } else if let Some(i) = message.find("budget breached: ") {
                let breach = &message[i + "budget breached: ".len()..];
                let limit = match breach.split([' ', '{']).next().unwrap_or("") {
                    "Aliases" => MAX_ALIASES,
                    "Anchors" => MAX_ANCHORS,
                    "RecordedAnchorEvents" => MAX_REPLAYED_EVENTS,
                    "Documents" => MAX_DOCUMENTS,
                    "Nodes" => MAX_NODES,
                    _ => 0,
                };
                Err(OverBudget { what, limit })
            } else {
                Ok(())
            }
        }
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn quickly(text: &str) -> Result<(), OverBudget> {
        let t = Instant::now();
        let r = check(text);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
        r
    }

    #[test]
    fn an_ordinary_workload_is_within_budget() {
        let text = "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\n\
                    metadata: {name: web}\nspec:\n  replicas: 3\n  template: &t\n    spec:\n      \
                    containers: [{name: a, image: a}]\n  other: *t\n";
        assert_eq!(quickly(text), Ok(()));
        // Broken YAML within budget is left to the reader's error.
        assert_eq!(quickly("a: [unclosed"), Ok(()));
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
        assert!(quickly(&block).is_err(), "block-style nesting too");
    }

    #[test]
    fn too_many_documents_or_bytes_are_refused() {
        let docs = "---\na: 1\n".repeat(MAX_DOCUMENTS + 5);
        let err = quickly(&docs).unwrap_err();
        assert!(err.what.contains("Documents"), "{err}");
        assert_eq!(err.limit, MAX_DOCUMENTS);
        let big = "#".repeat(MAX_INPUT_BYTES + 1);
        let err = quickly(&big).unwrap_err();
        assert!(err.what.contains("bytes"), "{err}");
    }
}
