//! The route matcher and its percent-decoding (`api::router`): the first byte picks the
//! method, the rest is the path as a server or API Gateway hands it over.
//! Properties: no panic; a parameter is never empty; `check_params` refuses with `400
//! InvalidRequestArguments` only; the canonical path (what an official client signs) is
//! ASCII, matches the same endpoint with the same decoded parameters, and is its own
//! canonical path; once a gateway has decoded it (valid parameters without `%` or, unless
//! they span segments, `/`) it becomes the canonical path again, unless a spanning parameter
//! makes it read as another endpoint; every spelling `signed_paths` offers decodes to the same
//! path.
#![no_main]

use http::Method;
use libfuzzer_sys::fuzz_target;
use shared::api::router::{canonical_path, check_params, decode, find, signed_paths};
use shared::error::ErrorCode;
use shared_fuzz::text;

const METHODS: [Method; 6] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::PATCH,
];

fn decoded(raw: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    raw.iter().map(|(n, v)| (*n, decode(v))).collect()
}

fn spans(route: &str, name: &str) -> bool {
    route.contains(&format!("<*{name}>"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = &METHODS[usize::from(m) % METHODS.len()];
    let Some(path) = text(rest) else { return };

    let spellings = signed_paths(method, path);
    let canonical = canonical_path(method, path);
    assert_eq!(canonical.as_ref(), spellings.first());
    let Some(found) = find(method, path) else {
        assert!(canonical.is_none());
        return;
    };
    assert!(found.raw.iter().all(|(_, v)| !v.is_empty()));
    if let Err(e) = check_params(&found.raw) {
        assert_eq!(e.code, ErrorCode::InvalidRequestArguments, "{e:?}");
    }
    let params = decoded(&found.raw);
    let route = found.endpoint.route;

    let canonical = canonical.expect("a matched path has a canonical spelling");
    assert!(canonical.is_ascii(), "{canonical}");
    assert!(canonical.starts_with(found.service.prefix));
    let again = find(method, &canonical).expect("the canonical path matches");
    assert_eq!(again.endpoint.name, found.endpoint.name, "{canonical}");
    assert_eq!(decoded(&again.raw), params, "{canonical}");
    assert_eq!(
        canonical_path(method, &canonical).as_ref(),
        Some(&canonical)
    );
    // The other spellings are signatures to accept, not routes: each is the canonical path
    // with some `%2F` left as `/`, so a gateway decodes them all to the same path.
    for s in &spellings {
        assert!(s.is_ascii());
        assert_eq!(decode(s), decode(&canonical), "{s}");
    }

    // Valid parameters only: with invalid ones a decoded path may pick another route, which
    // refuses them as well.
    let gateway_safe = check_params(&found.raw).is_ok()
        && params
            .iter()
            .all(|(n, v)| !v.contains('%') && (spans(route, n) || !v.contains('/')));
    if gateway_safe {
        let gateway = decode(&canonical);
        // Decoded, a parameter spanning segments may end like a longer route (updateClient
        // of a client named `a/reset` reads as resetAccessToken of `a`): a gateway cannot
        // tell them apart (differences.md), so only a path that keeps its endpoint returns.
        let same = find(method, &gateway).is_some_and(|g| g.endpoint.name == found.endpoint.name);
        if same || !params.iter().any(|(n, _)| spans(route, n)) {
            assert_eq!(
                canonical_path(method, &gateway).as_ref(),
                Some(&canonical),
                "{gateway}"
            );
        }
    }
});
