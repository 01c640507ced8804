//! Scope satisfaction, expressions, normalisation, merging and role expansion
//! (`shared::scopes`, `auth::roles`) on arbitrary scopes and roles.
//! Properties: `scope_order` is a total order (sorting with it never panics and is
//! consistent); `unsatisfied` is `None` exactly when `satisfied_by` holds, and what it
//! returns is itself unsatisfied; `normalize` and `merge_scope_sets` keep only given scopes
//! and cover every given one (as sets too: holding the result grants all that holding the
//! input does); role expansion covers its input, is normalised, is closed
//! (every role a held scope assumes is already granted) and stays within its size limit.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use shared::auth::roles::{expand, normalize, Role, MAX_EXPANDED};
use shared::scopes::{covers, merge_scope_sets, scope_match, scope_order, ScopeExpr};

/// Short scopes over a small alphabet, so that stars, prefixes and `assume:` meet often.
fn scope(u: &mut Unstructured) -> arbitrary::Result<String> {
    const PARTS: [&str; 10] = [
        "assume:", "a", "b", ":", "*", "<..>", "r", "x", "", "assume:r",
    ];
    let n = u.int_in_range(0..=4)?;
    let mut s = String::new();
    for _ in 0..n {
        s.push_str(u.choose(&PARTS)?);
    }
    if u.ratio(1, 8)? {
        s.push_str(<&str>::arbitrary(u)?);
    }
    Ok(s)
}

fn scopes(u: &mut Unstructured, max: usize) -> arbitrary::Result<Vec<String>> {
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| scope(u)).collect()
}

fn expr(u: &mut Unstructured, depth: u32) -> arbitrary::Result<ScopeExpr> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 if depth < 3 => ScopeExpr::AllOf(
            (0..u.int_in_range(0..=3)?)
                .map(|_| expr(u, depth + 1))
                .collect::<arbitrary::Result<_>>()?,
        ),
        1 if depth < 3 => ScopeExpr::AnyOf(
            (0..u.int_in_range(0..=3)?)
                .map(|_| expr(u, depth + 1))
                .collect::<arbitrary::Result<_>>()?,
        ),
        _ => ScopeExpr::Scope(scope(u)?),
    })
}

fn covered(s: &str, by: &[String]) -> bool {
    by.iter().any(|h| scope_match(h, s))
}

fn run(u: &mut Unstructured) -> arbitrary::Result<()> {
    let held = scopes(u, 8)?;
    let other = scopes(u, 8)?;

    // A total order: sorting does not panic, and sorted output is ordered pairwise.
    let mut sorted = held.clone();
    sorted.extend(other.iter().cloned());
    sorted.sort_by(|a, b| scope_order(a, b));
    for w in sorted.windows(2) {
        assert!(scope_order(&w[0], &w[1]).is_le());
        assert_eq!(
            scope_order(&w[0], &w[1]),
            scope_order(&w[1], &w[0]).reverse()
        );
    }

    let e = expr(u, 0)?;
    // Sorting (above) and normalising are what a scope set goes through; expressions next.
    let sat = e.satisfied_by(&held);
    let missing = e.unsatisfied(&held);
    assert_eq!(sat, missing.is_none(), "{e:?} {held:?}");
    if let Some(m) = missing {
        assert!(!m.satisfied_by(&held));
    }

    let norm = normalize(held.clone());
    assert!(norm.windows(2).all(|w| w[0] < w[1]));
    assert!(norm.iter().all(|s| held.contains(s)));
    assert!(
        held.iter().all(|s| covered(s, &norm)),
        "{held:?} -> {norm:?}"
    );
    // As sets, too: holding `norm` grants all that holding `held` does (`a**` is not `a*`).
    assert!(
        held.iter().all(|s| norm.iter().any(|t| covers(t, s))),
        "{held:?} -> {norm:?}"
    );
    assert_eq!(normalize(norm.clone()), norm);

    // Merging is defined on sets sorted in scope order (any input: no panic).
    let merged = merge_scope_sets(&held, &other);
    assert!(merged.iter().all(|s| held.contains(s) || other.contains(s)));
    let sorted_set = |v: &[String]| {
        let mut v = normalize(v.to_vec());
        v.sort_by(|a, b| scope_order(a, b));
        v
    };
    let (a, b) = (sorted_set(&held), sorted_set(&other));
    let merged = merge_scope_sets(&a, &b);
    assert!(
        a.iter().chain(&b).all(|s| covered(s, &merged)),
        "{a:?} + {b:?} -> {merged:?}"
    );
    assert!(merged.windows(2).all(|w| scope_order(&w[0], &w[1]).is_lt()));

    let n_roles = u.int_in_range(0..=6)?;
    let roles: Vec<Role> = (0..n_roles)
        .map(|_| {
            Ok(Role {
                role_id: scope(u)?.trim_start_matches("assume:").to_string(),
                scopes: scopes(u, 4)?,
            })
        })
        .collect::<arbitrary::Result<_>>()?;
    match expand(&held, &roles) {
        Ok(out) => {
            assert!(held.iter().all(|s| covered(s, &out)), "{held:?} {out:?}");
            assert!(held.iter().all(|s| out.iter().any(|t| covers(t, s))));
            assert_eq!(normalize(out.clone()), out);
            // Closed: expanding again adds nothing.
            assert_eq!(expand(&out, &roles).as_ref(), Ok(&out));
        }
        // Expansion that does not converge stops at the limit, with what it had.
        Err(partial) => {
            assert!(partial.len() <= MAX_EXPANDED);
            assert!(held.iter().all(|s| covered(s, &partial)));
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
