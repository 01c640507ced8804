//! The web inspector (`ui/`): its built bundle, embedded at build time (`build.rs`), served
//! for GET and HEAD of its pages and assets. Its pages (`/`, `/tasks/...`, `/task-queues/...`,
//! `/provisioners/...`, `/task-graphs/...`) get `index.html` (not cached, so a new release is
//! seen at once); hashed assets are cached for a year. Any other path is the API's: a browser
//! asking for a page there gets the inspector's "not found" page with a 404, anything else the
//! API's 404. The local server asks [`answer`] before the API; the `ui` Lambda function (the
//! HTTP API's `$default` route) answers everything with [`respond`].

use axum::http::Method;
use serde_json::json;
use shared::api::{error_response, ApiResponse};
use shared::error::ApiError;
use shared::time::Ts;

mod assets {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// The first segments of the inspector's pages (its client-side routes, `ui/src/lib/router.ts`).
const PAGES: &[&str] = &[
    "/tasks/",
    "/task-queues/",
    "/provisioners/",
    "/task-graphs/",
];

/// One embedded file.
pub fn asset(name: &str) -> Option<&'static [u8]> {
    assets::ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}

/// What the inspector makes of a request.
enum Target {
    /// `index.html`, with this status.
    Page(u16),
    /// An embedded file (`None`: a hashed asset that is not, 404).
    Asset(Option<(&'static str, &'static [u8])>),
}

/// The inspector's part in `method path`, if any: GET and HEAD of its pages, its assets, and
/// pages asked for by a browser outside the API's paths; the API answers the rest.
fn target(method: &Method, path: &str, accept: Option<&str>) -> Option<Target> {
    let api = [
        "/api/",
        "/schemas/",
        "/references/",
        shared::blobs::LOCAL_PREFIX,
    ]
    .iter()
    .any(|p| path.starts_with(p))
        || path == "/api";
    if (method != Method::GET && method != Method::HEAD) || api {
        return None;
    }
    let name = path.trim_start_matches('/');
    let file = assets::ASSETS.iter().find(|(n, _)| *n == name).copied();
    if name.starts_with("assets/")
        || (!name.contains('/') && file.is_some() && name != "index.html")
    {
        return Some(Target::Asset(file));
    }
    if path == "/" || path == "/index.html" || PAGES.iter().any(|p| path.starts_with(p)) {
        return Some(Target::Page(200));
    }
    // A browser navigating to a path no one serves: the inspector says so, as a 404.
    accept
        .is_some_and(|a| a.contains("text/html"))
        .then_some(Target::Page(404))
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The page's own requests go to this origin only; nothing may frame it.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The answer to `method path` for a client that accepts `accept`: the inspector's, else the
/// API's 404 (a route the API does not have). The `ui` Lambda function's whole job.
pub fn respond(method: &Method, path: &str, accept: Option<&str>) -> ApiResponse {
    answer(method, path, accept).unwrap_or_else(|| {
        let e = ApiError::not_found(format!("No such endpoint: {method} {path}"));
        let info = json!({ "method": "", "params": {}, "payload": {}, "time": Ts::now() });
        error_response(&e, method, info)
    })
}

/// The inspector's answer to `method path`, or `None` where the API answers (the local
/// server's choice between the two).
pub fn answer(method: &Method, path: &str, accept: Option<&str>) -> Option<ApiResponse> {
    let (status, name, body, cache) = match target(method, path, accept)? {
        Target::Asset(Some((name, body))) if name.starts_with("assets/") => {
            // Hashed file names: a changed file gets a new name.
            (200, name, body, "public, max-age=31536000, immutable")
        }
        Target::Asset(Some((name, body))) => (200, name, body, "public, max-age=3600"),
        // A missing hashed asset is an error, not the page (a browser would run HTML as JS).
        Target::Asset(None) => (404, "missing.txt", &b"Not found\n"[..], "no-cache"),
        Target::Page(status) => (
            status,
            "index.html",
            asset("index.html").unwrap_or_default(),
            "no-cache",
        ),
    };
    let mut headers = vec![
        ("cache-control", cache.to_string()),
        ("x-content-type-options", "nosniff".to_string()),
        ("content-type", content_type(name).to_string()),
    ];
    if name == "index.html" {
        headers.push(("content-security-policy", CSP.to_string()));
        headers.push(("referrer-policy", "same-origin".to_string()));
    }
    if method == Method::HEAD {
        // The length a GET would send, as HEAD promises (the body itself is left out).
        headers.push(("content-length", body.len().to_string()));
    }
    Some(ApiResponse {
        status,
        headers,
        body: if method == Method::HEAD {
            vec![]
        } else {
            body.to_vec()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTML: Option<&str> = Some("text/html,application/xhtml+xml,*/*;q=0.8");

    fn header<'a>(r: &'a ApiResponse, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn pages_get_the_page_and_assets_their_type() {
        let index = asset("index.html").expect("ui/dist/index.html is embedded");
        for path in [
            "/",
            "/tasks/groups/abc",
            "/task-queues/p/w",
            "/task-graphs/x",
            "/provisioners/p/worker-types/w",
        ] {
            for accept in [None, HTML] {
                let r = respond(&Method::GET, path, accept);
                assert_eq!(r.status, 200, "{path}");
                assert_eq!(r.body, index, "{path}");
                assert_eq!(header(&r, "cache-control"), Some("no-cache"));
                assert!(header(&r, "content-type").is_some_and(|t| t.starts_with("text/html")));
            }
        }
        let js = assets::ASSETS
            .iter()
            .map(|(n, _)| *n)
            .find(|n| n.starts_with("assets/") && n.ends_with(".js"))
            .expect("a script");
        let r = respond(&Method::GET, &format!("/{js}"), None);
        assert_eq!(r.status, 200);
        assert_eq!(
            header(&r, "content-type"),
            Some("text/javascript; charset=utf-8")
        );
        assert!(header(&r, "cache-control").is_some_and(|c| c.contains("immutable")));
        let head = respond(&Method::HEAD, &format!("/{js}"), None);
        assert!(head.body.is_empty());
        assert_eq!(
            header(&head, "content-length"),
            Some(r.body.len().to_string().as_str())
        );
        assert_eq!(
            respond(&Method::GET, "/assets/gone-123.js", HTML).status,
            404
        );
        assert_eq!(respond(&Method::GET, "/favicon.svg", None).status, 200);
        // A browser asking for a page nobody serves gets the inspector's "not found", as 404.
        let r = respond(&Method::GET, "/nothing-here", HTML);
        assert_eq!((r.status, r.body.as_slice()), (404, index));
    }

    #[test]
    fn the_api_and_the_blobs_are_not_the_inspectors() {
        for (m, path, accept) in [
            (Method::GET, "/api/queue/v1/nope", HTML),
            (Method::GET, "/api", HTML),
            (Method::GET, "/schemas/x", None),
            (Method::GET, "/references/x", None),
            (Method::GET, "/__blobs/x/y", HTML),
            (Method::POST, "/tasks/x", HTML),
            (Method::GET, "/nothing-here", None),
            (Method::GET, "/etc/passwd", Some("*/*")),
        ] {
            assert!(answer(&m, path, accept).is_none(), "{m} {path}");
            let r = respond(&m, path, accept);
            assert_eq!(r.status, 404, "{m} {path}");
            let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
            assert_eq!(body["code"], "ResourceNotFound");
        }
    }
}
