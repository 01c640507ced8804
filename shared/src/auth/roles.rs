//! Roles: `assume:<roleId>` expansion (roles ending in `*`, `<..>` parameters) and scope-set
//! normalisation.

use crate::scopes::scope_match;
use std::ops::Bound::{Included, Unbounded};

/// Expansion stops growing a scope set past this size: a role set whose expansion does not
/// converge (parameterised roles feeding themselves) must not take the server down.
pub const MAX_EXPANDED: usize = 10_000;

/// ... nor past this many bytes of scopes (10,000 scopes of 100 bytes): a runaway expansion
/// grows its scopes too (each round wraps the parameter again), and 10,000 ever longer
/// scopes took seconds on every request (found by fuzzing).
pub const MAX_EXPANDED_BYTES: usize = 1 << 20;

/// A role: what `assume:<role_id>` grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// The roleId; a trailing `*` makes it match every roleId with that prefix.
    pub role_id: String,
    /// The scopes it grants (may contain `<..>`).
    pub scopes: Vec<String>,
}

/// If `held` grants `role_id`, the text that `<..>` stands for.
fn grants(held: &str, role_id: &str) -> Option<String> {
    let rest = held.strip_prefix("assume:");
    match (role_id.strip_suffix('*'), rest) {
        // Role `p*`: any `assume:p...` assumes it, the rest being the parameter.
        (Some(prefix), Some(r)) if r.starts_with(prefix) => Some(r[prefix.len()..].to_string()),
        // `assume:x*` covers roles whose roleId starts with x.
        (Some(prefix), _) => {
            let star = held.strip_suffix('*')?;
            ("assume:".to_string() + prefix)
                .starts_with(star)
                .then(|| "*".to_string())
        }
        (None, _) => scope_match(held, &format!("assume:{role_id}")).then(String::new),
    }
}

fn substitute(scope: &str, param: &str) -> String {
    match scope.find("<..>") {
        None => scope.to_string(),
        // A parameter ending in `*` already covers whatever follows it.
        Some(i) if param.ends_with('*') => format!("{}{param}", &scope[..i]),
        Some(i) => format!("{}{param}{}", &scope[..i], &scope[i + 4..]),
    }
}

/// The scopes `scopes` grant once every role they assume is expanded, normalised.
/// Returns `Err` with the partial set if expansion does not converge.
pub fn expand(scopes: &[String], roles: &[Role]) -> Result<Vec<String>, Vec<String>> {
    let start = normalize(scopes.to_vec());
    if start.iter().any(|s| s == "*") {
        return Ok(vec!["*".into()]);
    }
    // Exact scopes in a set, starred ones by prefix: "already covered?" stays cheap.
    let mut exact: std::collections::HashSet<String> = start.iter().cloned().collect();
    let mut stars = Stars::default();
    for s in &start {
        stars.add(s);
    }
    let mut bytes: usize = exact.iter().map(String::len).sum();
    let mut todo = start;
    while let Some(held) = todo.pop() {
        let may_assume = held.starts_with("assume:")
            || held
                .strip_suffix('*')
                .is_some_and(|p| "assume:".starts_with(p));
        if !may_assume {
            continue;
        }
        for role in roles {
            let Some(param) = grants(&held, &role.role_id) else {
                continue;
            };
            for s in &role.scopes {
                let s = substitute(s, &param);
                if exact.contains(&s) || stars.covering(&s).is_some() {
                    continue;
                }
                bytes += s.len();
                if exact.len() >= MAX_EXPANDED || bytes > MAX_EXPANDED_BYTES {
                    return Err(normalize(exact.into_iter().collect()));
                }
                stars.add(&s);
                exact.insert(s.clone());
                todo.push(s);
            }
        }
    }
    Ok(normalize(exact.into_iter().collect()))
}

/// The prefixes of a set's starred scopes, none a prefix of another. The greatest prefix not
/// after a scope is then the only one that can be its prefix, so whether a scope is covered
/// is one look-up: comparing each scope with every star was quadratic, and a runaway role
/// expansion of ever longer starred scopes took most of a second (found by fuzzing).
#[derive(Default)]
struct Stars(std::collections::BTreeSet<String>);

impl Stars {
    /// The prefix of the star that covers `s` (see [`covers`]), if any.
    fn covering(&self, s: &str) -> Option<&str> {
        let base = s.strip_suffix('*').unwrap_or(s);
        let p = self
            .0
            .range::<str, _>((Unbounded, Included(base)))
            .next_back()?;
        base.starts_with(p.as_str()).then_some(p.as_str())
    }

    /// Adds `s` if it is a star that no other covers, dropping those it covers.
    fn add(&mut self, s: &str) {
        let Some(prefix) = s.strip_suffix('*') else {
            return;
        };
        if self.covering(s).is_some() {
            return;
        }
        let covered: Vec<String> = self
            .0
            .range::<str, _>((Included(prefix), Unbounded))
            .take_while(|p| p.starts_with(prefix))
            .cloned()
            .collect();
        for p in covered {
            self.0.remove(&p);
        }
        self.0.insert(prefix.to_string());
    }
}

/// Sorted, deduplicated, and without scopes that another (starred) scope already covers.
pub fn normalize(mut scopes: Vec<String>) -> Vec<String> {
    scopes.sort();
    scopes.dedup();
    let mut stars = Stars::default();
    for s in &scopes {
        stars.add(s);
    }
    // Kept: what no star covers, and each star whose prefix is itself in the set.
    scopes.retain(|s| match stars.covering(s) {
        None => true,
        Some(p) => s.strip_suffix('*') == Some(p),
    });
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    fn role(id: &str, scopes: &[&str]) -> Role {
        Role {
            role_id: id.into(),
            scopes: v(scopes),
        }
    }

    #[test]
    fn assume_expands_transitively() {
        let roles = [
            role("a", &["x", "assume:b"]),
            role("b", &["y"]),
            role("c", &["z"]),
        ];
        assert_eq!(
            expand(&v(&["assume:a"]), &roles).unwrap(),
            v(&["assume:a", "assume:b", "x", "y"])
        );
    }

    #[test]
    fn star_roles_match_by_prefix_and_fill_parameters() {
        let roles = [
            role(
                "repo:*",
                &["secrets:get:<..>", "queue:route:index.<..>.latest"],
            ),
            role("worker-pool:*", &["queue:claim-work:<..>"]),
        ];
        assert_eq!(
            expand(&v(&["assume:repo:gh/me"]), &roles).unwrap(),
            v(&[
                "assume:repo:gh/me",
                "queue:route:index.gh/me.latest",
                "secrets:get:gh/me"
            ])
        );
        // A starred parameter swallows the rest of the scope.
        assert_eq!(
            expand(&v(&["assume:worker-pool:p/*"]), &roles).unwrap(),
            v(&["assume:worker-pool:p/*", "queue:claim-work:p/*"])
        );
    }

    #[test]
    fn starred_assume_scopes_cover_roles() {
        let roles = [
            role("team:a", &["a"]),
            role("team:b", &["b"]),
            role("other", &["o"]),
        ];
        assert_eq!(
            expand(&v(&["assume:team:*"]), &roles).unwrap(),
            v(&["a", "assume:team:*", "b"])
        );
        assert_eq!(expand(&v(&["x", "*"]), &roles).unwrap(), v(&["*"]));
    }

    #[test]
    fn cycles_terminate_and_runaway_expansion_is_reported() {
        let roles = [role("a", &["assume:b"]), role("b", &["assume:a", "q"])];
        assert_eq!(
            expand(&v(&["assume:a"]), &roles).unwrap(),
            v(&["assume:a", "assume:b", "q"])
        );
        let runaway = [role("r*", &["assume:r<..>x"])];
        assert!(expand(&v(&["assume:r"]), &runaway).is_err());
    }

    #[test]
    fn runaway_expansion_of_growing_scopes_stops_early() {
        // Found by fuzzing (fuzz/seeds/scopes): each round wraps the parameter in 9 more
        // bytes; 10,000 rounds held ~450 MB of scopes and took seconds.
        let runaway = [role("*", &["assume:r<..>aassume:"])];
        let partial = expand(&v(&["assume:x"]), &runaway).unwrap_err();
        let bytes: usize = partial.iter().map(String::len).sum();
        assert!(bytes <= MAX_EXPANDED_BYTES, "{bytes}");
        assert!(partial.len() < MAX_EXPANDED / 5, "{}", partial.len());
    }

    #[test]
    fn normalize_drops_covered_scopes() {
        assert_eq!(
            normalize(v(&["a:b", "a:*", "c", "c", "a:*"])),
            v(&["a:*", "c"])
        );
    }

    #[test]
    fn a_star_and_the_same_star_starred_again_keep_the_wider() {
        // Found by fuzzing (fuzz/seeds/scopes): each of `a*` and `a**` satisfies the other as
        // a literal scope, so both were dropped and the set lost every scope.
        assert_eq!(normalize(v(&["a**", "a*"])), v(&["a*"]));
        assert_eq!(normalize(v(&["x:**", "x:*", "x:a"])), v(&["x:*"]));
        // Holding `x:**` does not cover `x:*` that a role grants.
        let roles = [role("r", &["x:*"])];
        assert_eq!(
            expand(&v(&["x:**", "assume:r"]), &roles).unwrap(),
            v(&["assume:r", "x:*"])
        );
    }
}
