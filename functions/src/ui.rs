//! The web inspector (`ui/`): its built bundle, embedded at build time (`build.rs`), served
//! for GET and HEAD of every path that is not the API's, the schemas', the references' or the
//! local blob store's. Client-side routes get `index.html` (not cached, so a new release is
//! seen at once); hashed assets are cached for a year. The local server and the `ui` Lambda
//! function (the HTTP API's `$default` route) both answer with [`respond`].

use axum::http::Method;
use serde_json::json;
use shared::api::{error_response, ApiResponse};
use shared::error::ApiError;
use shared::time::Ts;

mod assets {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// Paths under which the inspector never answers.
const NOT_OURS: &[&str] = &[
    "/api/",
    "/schemas/",
    "/references/",
    shared::blobs::LOCAL_PREFIX,
];

/// True if the inspector answers `method path`.
pub fn serves(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && path != "/api"
        && !NOT_OURS.iter().any(|p| path.starts_with(p))
}

/// One embedded file.
pub fn asset(name: &str) -> Option<&'static [u8]> {
    assets::ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
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

/// The answer to `method path` (for a method and path that [`serves`] accepts, the
/// inspector's; for any other, the API's 404, as a route the API does not have).
pub fn respond(method: &Method, path: &str) -> ApiResponse {
    if !serves(method, path) {
        let e = ApiError::not_found(format!("No such endpoint: {method} {path}"));
        let info = json!({ "method": "", "params": {}, "payload": {}, "time": Ts::now() });
        return error_response(&e, method, info);
    }
    let name = path.trim_start_matches('/');
    let (status, name, cache) = match asset(name) {
        // Hashed file names: a changed file gets a new name.
        Some(_) if name.starts_with("assets/") => {
            (200, name, "public, max-age=31536000, immutable")
        }
        Some(_) if name != "index.html" => (200, name, "public, max-age=3600"),
        // A missing hashed asset is an error, not the page (a browser would run HTML as JS).
        None if name.starts_with("assets/") => (404, "", "no-cache"),
        _ => (200, "index.html", "no-cache"),
    };
    let body = asset(name).unwrap_or_default();
    let mut headers = vec![
        ("cache-control", cache.to_string()),
        ("x-content-type-options", "nosniff".to_string()),
    ];
    if status == 404 {
        headers.push(("content-type", "text/plain; charset=utf-8".into()));
        let body = b"Not found\n".to_vec();
        return ApiResponse {
            status,
            headers,
            body: if method == Method::HEAD { vec![] } else { body },
        };
    }
    headers.push(("content-type", content_type(name).to_string()));
    if name == "index.html" {
        headers.push(("content-security-policy", CSP.to_string()));
        headers.push(("referrer-policy", "same-origin".to_string()));
    }
    ApiResponse {
        status,
        headers,
        body: if method == Method::HEAD {
            vec![]
        } else {
            body.to_vec()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(r: &'a ApiResponse, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn client_routes_get_the_page_and_assets_their_type() {
        let index = asset("index.html").expect("ui/dist/index.html is embedded");
        for path in [
            "/",
            "/tasks/groups/abc",
            "/task-queues/p/w",
            "/task-graphs/x",
            "/nope",
        ] {
            let r = respond(&Method::GET, path);
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(r.body, index, "{path}");
            assert_eq!(header(&r, "cache-control"), Some("no-cache"));
            assert!(header(&r, "content-type").is_some_and(|t| t.starts_with("text/html")));
        }
        let js = assets::ASSETS
            .iter()
            .map(|(n, _)| *n)
            .find(|n| n.starts_with("assets/") && n.ends_with(".js"))
            .expect("a script");
        let r = respond(&Method::GET, &format!("/{js}"));
        assert_eq!(r.status, 200);
        assert_eq!(
            header(&r, "content-type"),
            Some("text/javascript; charset=utf-8")
        );
        assert!(header(&r, "cache-control").is_some_and(|c| c.contains("immutable")));
        let head = respond(&Method::HEAD, &format!("/{js}"));
        assert!(head.body.is_empty());
        assert_eq!(respond(&Method::GET, "/assets/gone-123.js").status, 404);
    }

    #[test]
    fn the_api_and_the_blobs_are_not_the_inspectors() {
        for (m, path) in [
            (Method::GET, "/api/queue/v1/nope"),
            (Method::GET, "/api"),
            (Method::GET, "/schemas/x"),
            (Method::GET, "/references/x"),
            (Method::GET, "/__blobs/x/y"),
            (Method::POST, "/tasks/x"),
        ] {
            assert!(!serves(&m, path), "{m} {path}");
            let r = respond(&m, path);
            assert_eq!(r.status, 404, "{m} {path}");
            let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
            assert_eq!(body["code"], "ResourceNotFound");
        }
    }
}
