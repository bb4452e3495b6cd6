//! The answers of a failure: E2B's error body for the REST API, envd's
//! Connect error for files and processes, and what a template's started
//! container is made of.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dockhand::{Error, FileErrorKind};
use serde_json::json;

use super::connect::ConnectError;

/// E2B's error body.
pub fn api_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({"code": status.as_u16(), "message": message.into()});
    (status, axum::Json(body)).into_response()
}

/// The answer for a failure of the SDK: what the backend cannot do
/// (`Unsupported`, say pausing on a cluster) is 501 with its hint, the rest 500.
pub fn sdk_failure(context: impl std::fmt::Display, e: &dockhand::Error) -> Response {
    let status = match e {
        dockhand::Error::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    api_error(status, format!("{context}: {e}"))
}

/// The answer for a sandbox the key cannot see (missing or another's).
pub fn not_found(id: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
    )
}

/// A dockhand error as envd's Connect error.
pub fn file_error(e: &Error) -> ConnectError {
    match e {
        Error::SessionFile { kind, message, .. } => {
            let code = match kind {
                FileErrorKind::NotFound => "not_found",
                FileErrorKind::OutsideSession | FileErrorKind::PermissionDenied => {
                    "permission_denied"
                }
                FileErrorKind::TooLarge => "resource_exhausted",
                _ => "invalid_argument",
            };
            ConnectError::new(code, message.clone())
        }
        Error::ProcessLimit { .. } => ConnectError::new("resource_exhausted", e.to_string()),
        _ => ConnectError::new("unavailable", e.to_string()),
    }
}

/// What a template's container is, started (from its pool when the
/// network is the pool's).
pub type Parts = (dockhand::session::Session, Option<dockhand::kernel::Kernel>);
