//! A rollout's optional user health check: a CEL expression over the member's
//! `clusters[]` entry, bound as `member`. Pure.

use cel_interpreter::{Context, Program, Value};

/// The expression compiled, or why it does not compile.
pub fn compile(expr: &str) -> Result<Program, String> {
    if expr.len() > 1024 {
        return Err(format!("{} characters: at most 1024", expr.len()));
    }
    Program::compile(expr).map_err(|e| e.to_string().replace('\n', " "))
}

/// Whether `member` (a `clusters[]` entry as JSON) satisfies `expr`: `Ok(true)` only for
/// a result that is `true`; a field the entry lacks or a failed evaluation says why.
pub fn judge(expr: &str, member: &serde_json::Value) -> Result<bool, String> {
    let program = compile(expr)?;
    let mut ctx = Context::default();
    ctx.add_variable("member", member)
        .map_err(|e| e.to_string())?;
    match program.execute(&ctx) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("is {other:?}, not a boolean")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_expression_over_the_member_entry_passes_only_when_true() {
        let m = json!({"cluster": "a", "state": "Ready", "readyReplicas": 3, "revision": 2});
        assert_eq!(
            judge("member.readyReplicas >= 2 && member.state == 'Ready'", &m),
            Ok(true)
        );
        assert_eq!(judge("member.readyReplicas >= 5", &m), Ok(false));
        assert!(
            judge("member.shardsFailed == 0", &m)
                .unwrap_err()
                .contains("shardsFailed")
        );
        assert!(
            judge("member.readyReplicas", &m)
                .unwrap_err()
                .contains("not a boolean")
        );
        let e = compile("member.(").err().unwrap();
        assert!(e.contains("Syntax error"), "{e}");
        assert!(compile(&"a".repeat(2000)).is_err());
    }
}
