//! Scope expressions and satisfaction (only a trailing `*` is special), and the templates
//! that endpoints declare their scopes with.

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

/// True if holding `a` grants everything that holding `b` grants. For a starred `b` that is
/// not `scope_match`: `a**` satisfies the literal scope `a*` but does not cover `ab`, which
/// holding `a*` grants; so a starred `b` is compared by its prefix.
pub fn covers(a: &str, b: &str) -> bool {
    match a.strip_suffix('*') {
        Some(prefix) => b.strip_suffix('*').unwrap_or(b).starts_with(prefix),
        None => a == b,
    }
}

/// True for a scope as Taskcluster allows it anywhere: printable ASCII (`^[\x20-\x7e]*$`).
/// A line break in a scope would let one signed certificate stand for another (a
/// certificate signs its scopes one per line).
pub fn is_valid_scope(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
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

/// A scope expression as an endpoint declares it, with `<param>` placeholders filled from
/// the request (upstream's declaration format: strings, `AllOf`, `AnyOf` and `for`/`in`/`each`).
#[derive(Debug, Clone, Copy)]
pub enum Template {
    /// One scope, with placeholders.
    Scope(&'static str),
    /// Every sub-template.
    AllOf(&'static [Template]),
    /// At least one sub-template.
    AnyOf(&'static [Template]),
    /// `each` once per element of the list parameter `in_`, bound to `var` (inside `AllOf` or
    /// `AnyOf` the scopes join their siblings; alone they must all be held).
    For {
        /// The loop variable.
        var: &'static str,
        /// The list parameter.
        in_: &'static str,
        /// The scope, with placeholders (`var` among them).
        each: &'static str,
    },
}

/// One parameter of a [`Template`]: a value, or a list for `For`.
#[derive(Debug, Clone)]
pub enum Param {
    /// A single value.
    One(String),
    /// A list.
    Many(Vec<String>),
}

/// The parameters a template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct Params(Vec<(&'static str, Param)>);

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Params::default()
    }

    /// Adds a single-valued parameter.
    pub fn one(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.0.push((name, Param::One(value.into())));
        self
    }

    /// Adds a list parameter.
    pub fn many(mut self, name: &'static str, values: Vec<String>) -> Self {
        self.0.push((name, Param::Many(values)));
        self
    }

    fn get(&self, name: &str) -> Option<&Param> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| p)
    }
}

/// Replaces every `<name>` in `s` with its single-valued parameter.
/// `s` with its placeholders filled from `params`, and from `bound` (a `for` loop's variable
/// and its value) before them.
fn fill(s: &str, params: &Params, bound: Option<(&str, &str)>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        let Some(j) = rest[i..].find('>') else { break };
        let name = &rest[i + 1..i + j];
        let value = match (bound, params.get(name)) {
            (Some((var, v)), _) if var == name => v,
            (_, Some(Param::One(v))) => v.as_str(),
            _ => return Err(format!("scope template {s:?} has no value for <{name}>")),
        };
        out.push_str(&rest[..i]);
        out.push_str(value);
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Template {
    /// The expression with every placeholder filled; an unknown parameter is a bug in the
    /// endpoint that declared the template.
    pub fn render(&self, params: &Params) -> Result<ScopeExpr, String> {
        match self {
            Template::For { .. } => Ok(ScopeExpr::AllOf(self.render_items(params)?)),
            Template::Scope(s) => Ok(ScopeExpr::Scope(fill(s, params, None)?)),
            Template::AllOf(v) => Ok(ScopeExpr::AllOf(Self::render_list(v, params)?)),
            Template::AnyOf(v) => Ok(ScopeExpr::AnyOf(Self::render_list(v, params)?)),
        }
    }

    fn render_list(v: &[Template], params: &Params) -> Result<Vec<ScopeExpr>, String> {
        let mut out = vec![];
        for t in v {
            out.extend(t.render_items(params)?);
        }
        Ok(out)
    }

    /// The expressions this template adds to an enclosing list.
    fn render_items(&self, params: &Params) -> Result<Vec<ScopeExpr>, String> {
        let Template::For { var, in_, each } = self else {
            return Ok(vec![self.render(params)?]);
        };
        let Some(Param::Many(values)) = params.get(in_) else {
            return Err(format!("scope template has no list for {in_:?}"));
        };
        // The loop's variable is looked up before the others, as if added last.
        values
            .iter()
            .map(|v| fill(each, params, Some((var, v))).map(ScopeExpr::Scope))
            .collect()
    }

    /// The template in upstream's declaration format.
    pub fn to_json(&self) -> Value {
        match self {
            Template::Scope(s) => json!(s),
            Template::AllOf(v) => {
                json!({ "AllOf": v.iter().map(Template::to_json).collect::<Vec<_>>() })
            }
            Template::AnyOf(v) => {
                json!({ "AnyOf": v.iter().map(Template::to_json).collect::<Vec<_>>() })
            }
            Template::For { var, in_, each } => json!({ "for": var, "in": in_, "each": each }),
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
    fn a_star_covers_a_starred_scope_by_its_prefix() {
        assert!(covers("a*", "a**"));
        assert!(covers("a*", "ab"));
        assert!(covers("a*", "a*"));
        // `a**` satisfies the literal `a*`, yet holding it does not grant `ab`.
        assert!(scope_match("a**", "a*"));
        assert!(!covers("a**", "a*"));
        assert!(!covers("a", "a*"));
        assert!(covers("a", "a"));
    }

    #[test]
    fn valid_scopes_are_printable_ascii() {
        assert!(is_valid_scope("queue:create-task:high:p/w *"));
        assert!(is_valid_scope(""));
        assert!(!is_valid_scope("a\nb"));
        assert!(!is_valid_scope("\u{e9}"));
        assert!(!is_valid_scope("\u{7f}"));
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

    #[test]
    fn templates_fill_placeholders_and_expand_lists_into_their_parent() {
        static T: Template = Template::AllOf(&[
            Template::For {
                var: "scope",
                in_: "scopes",
                each: "<scope>",
            },
            Template::Scope("queue:create-task:project:<projectId>"),
            Template::AnyOf(&[Template::For {
                var: "p",
                in_: "priorities",
                each: "queue:create-task:<p>:<taskQueueId>",
            }]),
        ]);
        let params = Params::new()
            .many("scopes", vec!["a".into(), "b".into()])
            .one("projectId", "none")
            .many("priorities", vec!["high".into(), "low".into()])
            .one("taskQueueId", "p/w");
        assert_eq!(
            T.render(&params).unwrap(),
            ScopeExpr::AllOf(vec![
                ScopeExpr::scope("a"),
                ScopeExpr::scope("b"),
                ScopeExpr::scope("queue:create-task:project:none"),
                ScopeExpr::AnyOf(vec![
                    ScopeExpr::scope("queue:create-task:high:p/w"),
                    ScopeExpr::scope("queue:create-task:low:p/w"),
                ]),
            ])
        );
        assert!(Template::Scope("x:<missing>")
            .render(&Params::new())
            .is_err());
        assert_eq!(
            T.to_json()["AllOf"][0],
            json!({"for": "scope", "in": "scopes", "each": "<scope>"})
        );
    }
}

/// Orders scopes so that `P*` comes right before `P`, and otherwise lexically: a trailing `*`
/// sorts before the end of the string (upstream's scope order).
pub fn scope_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (a_star, b_star) = (a.ends_with('*'), b.ends_with('*'));
    let a_base = if a_star { &a[..a.len() - 1] } else { a };
    let b_base = if b_star { &b[..b.len() - 1] } else { b };
    if a_star != b_star && a_base == b_base {
        return if a_star {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Greater
        };
    }
    a_base.cmp(b_base)
}

/// Merges two scope sets as upstream's `mergeScopeSets` does: one pass over both in
/// [`scope_order`], taking the earlier scope each time (equal ones once), and skipping what
/// a just-taken `*` scope covers. On sorted sets the result is sorted and normalized; other
/// sets keep their own order (upstream's testAuthenticate returns them so).
pub fn merge_scope_sets(a: &[String], b: &[String]) -> Vec<String> {
    let (mut i, mut j) = (0, 0);
    let mut out: Vec<String> = Vec::with_capacity(a.len() + b.len());
    let skip_covered = |scope: &str, list: &[String], k: &mut usize| {
        if let Some(prefix) = scope.strip_suffix('*') {
            while *k < list.len() && list[*k].starts_with(prefix) {
                *k += 1;
            }
        }
    };
    while i < a.len() || j < b.len() {
        let take_a = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                j += 1;
                true
            }
            (Some(x), Some(y)) => scope_order(x, y).is_lt(),
            (Some(_), None) => true,
            _ => false,
        };
        let scope = if take_a {
            i += 1;
            a[i - 1].clone()
        } else {
            j += 1;
            b[j - 1].clone()
        };
        skip_covered(&scope, a, &mut i);
        skip_covered(&scope, b, &mut j);
        out.push(scope);
    }
    out
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn merging_keeps_the_given_order_and_drops_what_a_star_covers() {
        let anon = v(&["assume:anonymous"]);
        assert_eq!(
            merge_scope_sets(&v(&["test:b", "test:a"]), &anon),
            v(&["assume:anonymous", "test:b", "test:a"])
        );
        assert_eq!(
            merge_scope_sets(&v(&["test:a", "test:*"]), &anon),
            v(&["assume:anonymous", "test:a", "test:*"])
        );
        assert_eq!(
            merge_scope_sets(&v(&["a*", "a", "ab", "b"]), &v(&["a", "c"])),
            v(&["a*", "b", "c"])
        );
        assert_eq!(merge_scope_sets(&[], &anon), anon);
        let mut sorted = v(&["b", "a*", "", "*", "a", "aa", "a("]);
        sorted.sort_by(|x, y| scope_order(x, y));
        assert_eq!(sorted, v(&["*", "", "a*", "a", "a(", "aa", "b"]));
    }
}
