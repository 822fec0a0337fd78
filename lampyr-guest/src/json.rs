//! JSON request and response bodies through `serde` (no_std + alloc).

use alloc::format;

use lampyr_abi::{Request, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Error, IntoResponse};

/// The request body parsed as `T`. A body that is not JSON of that shape is a 400 naming
/// where it went wrong; a `content-type` other than JSON is a 415 (no `content-type` is accepted).
pub fn body<T: DeserializeOwned>(req: &Request) -> Result<T, Error> {
    if let Some(kind) = req.header_values("content-type").next() {
        let kind = core::str::from_utf8(kind).unwrap_or("");
        let essence = kind.split(';').next().unwrap_or("").trim();
        let json = essence.eq_ignore_ascii_case("application/json") || essence.to_ascii_lowercase().ends_with("+json");
        if !json {
            return Err(Error::unsupported_media_type(format!("expected an application/json body, got {kind:?}")));
        }
    }
    serde_json::from_slice(&req.body).map_err(|e| Error::bad_request(format!("request body is not the JSON expected: {e}")))
}

/// A response with `status` and `value` as its JSON body; a value that cannot be serialised is a 500.
pub fn response<T: Serialize + ?Sized>(status: u16, value: &T) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => Response::json(status, text),
        Err(e) => Error::internal(format!("serialising the response: {e}")).to_response(),
    }
}

/// A value answered as 200 JSON: `Ok(Json(item))` from a handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        response(200, &self.0)
    }
}
