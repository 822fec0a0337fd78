//! Errors a handler returns, and what a handler may return: [`IntoResponse`].

use alloc::string::{String, ToString};

use lampyr_abi::Response;

/// An error answer: an HTTP status and a message, sent as `{"error": message}` JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// HTTP status of the answer (400..=599 for errors).
    pub status: u16,
    /// What went wrong, for the client.
    pub message: String,
}

impl Error {
    /// An error with `status` and `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Error { status, message: message.into() }
    }

    /// 400 Bad Request: the request itself was wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Error::new(400, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::new(404, message)
    }

    /// 415 Unsupported Media Type.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Error::new(415, message)
    }

    /// 500 Internal Server Error: the service failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(500, message)
    }

    /// The answer sent for this error.
    pub fn to_response(&self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        Response::json(self.status, body.to_string())
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

impl core::error::Error for Error {}

/// What a handler may return: turned into the [`Response`] the client gets.
pub trait IntoResponse {
    /// The response.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        self.to_response()
    }
}

impl<T: IntoResponse> IntoResponse for Result<T, Error> {
    fn into_response(self) -> Response {
        match self {
            Ok(answer) => answer.into_response(),
            Err(error) => error.to_response(),
        }
    }
}

impl IntoResponse for &str {
    /// 200 with the text as `text/plain`.
    fn into_response(self) -> Response {
        Response::text(200, self.to_string())
    }
}

impl IntoResponse for String {
    /// 200 with the text as `text/plain`.
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}
