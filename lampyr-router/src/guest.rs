//! Where a guest runs, HTTP becomes the guest's frame types and back: the
//! request body is gathered (bounded by the Revision's limit and the
//! deadline), the guest's answer checked before it becomes a response.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use lampyr_abi::Header;
use tokio::time::Instant;

use crate::InvokeError;
use crate::body::{self, Body, DeadlinePassed, TooLarge, caused_by};

/// Gathers `req` into the guest's request: the body whole (at most `max_body`
/// bytes, before `deadline`), the host as a `Host` header however it came.
pub async fn guest_request(req: http::Request<Body>, max_body: u64, deadline: Instant) -> Result<lampyr_abi::Request, InvokeError> {
    let (parts, body) = req.into_parts();
    body::refuse_declared_over(&parts.headers, max_body)?;
    let body = match body::bounded(body, max_body, deadline).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if caused_by::<TooLarge>(e.as_ref()) => {
            return Err(InvokeError::RequestTooLarge { size: max_body.saturating_add(1), max: max_body });
        }
        Err(e) if caused_by::<DeadlinePassed>(e.as_ref()) => return Err(InvokeError::RequestTimeout),
        Err(e) => return Err(InvokeError::BadRequest(format!("could not read the request body: {e}"))),
    };
    let mut headers: Vec<Header> =
        parts.headers.iter().map(|(name, value)| Header { name: name.as_str().to_string(), value: value.as_bytes().to_vec() }).collect();
    // HTTP/2 carries the host as :authority; guests see it as Host either way.
    if !parts.headers.contains_key(http::header::HOST)
        && let Some(authority) = parts.uri.authority()
    {
        headers.insert(0, Header { name: "host".into(), value: authority.as_str().as_bytes().to_vec() });
    }
    let uri = parts.uri.path_and_query().map_or("/", |pq| pq.as_str()).to_string();
    let version = match parts.version {
        http::Version::HTTP_10 => lampyr_abi::HttpVersion::Http10,
        http::Version::HTTP_11 => lampyr_abi::HttpVersion::Http11,
        http::Version::HTTP_2 => lampyr_abi::HttpVersion::Http2,
        _ => lampyr_abi::HttpVersion::Unknown,
    };
    Ok(lampyr_abi::Request { method: parts.method.as_str().to_string(), uri, headers, body: body.to_vec(), version })
}

/// The guest's answer as an HTTP response; an invalid status or header is the guest's fault.
pub fn http_response(resp: lampyr_abi::Response) -> Result<http::Response<Body>, InvokeError> {
    let status = StatusCode::from_u16(resp.status)
        .map_err(|_| InvokeError::InvalidResponse(format!("the guest answered with invalid status {}", resp.status)))?;
    let mut out = http::Response::new(body::full(Bytes::from(resp.body)));
    *out.status_mut() = status;
    for h in resp.headers {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(&h.value)) else {
            return Err(InvokeError::InvalidResponse(format!("the guest answered with an invalid header {:?}", h.name)));
        };
        if !is_reserved_header(&name) {
            out.headers_mut().append(name, value);
        }
    }
    Ok(out)
}

/// Hop-by-hop and framing headers the server sets itself, and the router's own refusal mark.
fn is_reserved_header(name: &HeaderName) -> bool {
    matches!(name.as_str(), "connection" | "keep-alive" | "transfer-encoding" | "content-length" | "upgrade" | "te" | "trailer")
        || name.as_str() == crate::server::REFUSED_HEADER
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn in_a_minute() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn requests_keep_method_target_headers_and_body() {
        let req = http::Request::builder()
            .method("POST")
            .uri("http://hello.default.example.com/a?b=c")
            .version(http::Version::HTTP_2)
            .header("x-one", "1")
            .body(body::full("abc"))
            .expect("request");
        let g = guest_request(req, 3, in_a_minute()).await.expect("within limits");
        assert_eq!((g.method.as_str(), g.uri.as_str(), g.body.as_slice()), ("POST", "/a?b=c", b"abc".as_slice()));
        assert_eq!(g.headers[0].name, "host", "HTTP/2's authority reaches the guest as Host");
        assert_eq!(g.headers[0].value, b"hello.default.example.com");
        assert_eq!(g.version, lampyr_abi::HttpVersion::Http2);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_declared_or_streamed() {
        let declared = http::Request::builder().header("content-length", "4").body(body::full("abcd")).expect("request");
        assert_eq!(guest_request(declared, 3, in_a_minute()).await.expect_err("declared").http_status(), 413);
        let streamed = http::Request::new(body::full("abcd"));
        assert_eq!(guest_request(streamed, 3, in_a_minute()).await.expect_err("streamed").http_status(), 413);
    }

    #[test]
    fn a_guest_answer_with_an_invalid_header_is_a_bad_response_and_framing_is_dropped() {
        let resp = |name: &str| lampyr_abi::Response {
            status: 200,
            headers: vec![
                Header { name: name.into(), value: b"v".to_vec() },
                Header { name: "content-length".into(), value: b"99".to_vec() },
            ],
            body: b"ok".to_vec(),
        };
        let ok = http_response(resp("x-fine")).expect("valid");
        assert!(ok.headers().contains_key("x-fine") && !ok.headers().contains_key("content-length"));
        let marked = http_response(resp(crate::server::REFUSED_HEADER)).expect("valid");
        assert!(!marked.headers().contains_key(crate::server::REFUSED_HEADER), "a guest cannot claim its request was refused");
        assert_eq!(http_response(resp("bad name")).expect_err("invalid").http_status(), 502);
        let bad_status = lampyr_abi::Response { status: 42, headers: vec![], body: vec![] };
        assert_eq!(http_response(bad_status).expect_err("invalid status").http_status(), 502);
    }
}
