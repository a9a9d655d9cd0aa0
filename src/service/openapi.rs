//! `GET /openapi.json`: the OpenAPI 3.1 document of the service's routes, kept as data in
//! `openapi.json` beside this file (a test checks every route appears in it).

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The document's text.
pub(super) const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /openapi.json`.
pub(super) async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

#[cfg(test)]
mod tests {
    use super::DOCUMENT;

    #[test]
    fn every_route_is_documented() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        for (method, path) in super::super::ROUTES {
            assert!(doc["paths"][path][method].is_object(), "{method} {path} is missing from openapi.json");
        }
        let documented: usize =
            doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(documented, super::super::ROUTES.len(), "openapi.json documents a route the router lacks");
    }
}
