//! Scope expressions and satisfaction (only a trailing `*` is special).

use serde_json::{json, Value};

/// A scope expression: a single scope, or nested `AllOf` / `AnyOf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeExpr {
    /// One required scope.
    Scope(String),
    /// Every sub-expression must be satisfied.
    AllOf(Vec<ScopeExpr>),
    /// At least one sub-expression must be satisfied.
    AnyOf(Vec<ScopeExpr>),
}

/// True if `held` satisfies `required`: equal, or `held` ends in `*` and is a prefix of it.
pub fn scope_match(held: &str, required: &str) -> bool {
    match held.strip_suffix('*') {
        Some(prefix) => required.starts_with(prefix),
        None => held == required,
    }
}

impl ScopeExpr {
    /// Shorthand for a single scope.
    pub fn scope(s: impl Into<String>) -> Self {
        ScopeExpr::Scope(s.into())
    }

    /// True if the held scopes satisfy this expression.
    pub fn satisfied_by(&self, held: &[String]) -> bool {
        match self {
            ScopeExpr::Scope(s) => held.iter().any(|h| scope_match(h, s)),
            ScopeExpr::AllOf(v) => v.iter().all(|e| e.satisfied_by(held)),
            ScopeExpr::AnyOf(v) => v.iter().any(|e| e.satisfied_by(held)),
        }
    }

    /// The part of the expression that `held` does not satisfy, simplified, or `None`.
    pub fn unsatisfied(&self, held: &[String]) -> Option<ScopeExpr> {
        match self {
            ScopeExpr::Scope(_) => (!self.satisfied_by(held)).then(|| self.clone()),
            ScopeExpr::AllOf(v) => {
                let missing: Vec<_> = v.iter().filter_map(|e| e.unsatisfied(held)).collect();
                match missing.len() {
                    0 => None,
                    1 => missing.into_iter().next(),
                    _ => Some(ScopeExpr::AllOf(missing)),
                }
            }
            ScopeExpr::AnyOf(v) => {
                if v.iter().any(|e| e.satisfied_by(held)) {
                    None
                } else {
                    Some(self.clone())
                }
            }
        }
    }

    /// The expression as Taskcluster renders it in JSON.
    pub fn to_json(&self) -> Value {
        match self {
            ScopeExpr::Scope(s) => json!(s),
            ScopeExpr::AllOf(v) => {
                json!({ "AllOf": v.iter().map(|e| e.to_json()).collect::<Vec<_>>() })
            }
            ScopeExpr::AnyOf(v) => {
                json!({ "AnyOf": v.iter().map(|e| e.to_json()).collect::<Vec<_>>() })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_a_trailing_star_is_a_wildcard() {
        assert!(scope_match("queue:*", "queue:create-task:x"));
        assert!(scope_match("*", "anything"));
        assert!(!scope_match("queue:*:x", "queue:a:x"));
        assert!(scope_match("a", "a"));
        assert!(!scope_match("a", "ab"));
    }

    #[test]
    fn all_of_reports_exactly_what_is_missing() {
        let e = ScopeExpr::AllOf(vec![
            ScopeExpr::scope("a"),
            ScopeExpr::scope("b"),
            ScopeExpr::scope("c"),
        ]);
        let missing = e.unsatisfied(&held(&["a"])).unwrap();
        assert_eq!(
            missing,
            ScopeExpr::AllOf(vec![ScopeExpr::scope("b"), ScopeExpr::scope("c")])
        );
        assert!(e.satisfied_by(&held(&["*"])));
    }

    #[test]
    fn any_of_needs_one_branch() {
        let e = ScopeExpr::AnyOf(vec![
            ScopeExpr::scope("x"),
            ScopeExpr::AllOf(vec![ScopeExpr::scope("y"), ScopeExpr::scope("z")]),
        ]);
        assert!(e.satisfied_by(&held(&["y", "z"])));
        assert!(!e.satisfied_by(&held(&["y"])));
        assert!(e.unsatisfied(&held(&["x"])).is_none());
    }
}
