//! The values carried by ABI frames and the limits a decoder enforces.

use alloc::string::String;
use alloc::vec::Vec;

/// One HTTP header field; names may repeat within a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Field name as sent (HTTP/1 case is preserved; h2 names are lowercase).
    pub name: String,
    /// Raw field value bytes.
    pub value: Vec<u8>,
}

/// An HTTP request as a guest sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Request method, e.g. `GET`.
    pub method: String,
    /// Request target: path and query, e.g. `/items?id=3`.
    pub uri: String,
    /// Header fields in arrival order.
    pub headers: Vec<Header>,
    /// The whole request body.
    pub body: Vec<u8>,
    /// The HTTP version of the request the host received (the hop into the guest), when it said.
    pub version: HttpVersion,
}

/// An HTTP version, as a request frame's flags carry it (bits 0-1; 0 when the host did not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// Not given (a host before this field, or a frame built by hand).
    #[default]
    Unknown,
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
    /// HTTP/2 (h2c or h2).
    Http2,
}

impl HttpVersion {
    /// `(major, minor)`, when known.
    pub fn numbers(self) -> Option<(u8, u8)> {
        match self {
            HttpVersion::Unknown => None,
            HttpVersion::Http10 => Some((1, 0)),
            HttpVersion::Http11 => Some((1, 1)),
            HttpVersion::Http2 => Some((2, 0)),
        }
    }

    /// The flag bits of a request frame.
    pub(crate) fn flags(self) -> u16 {
        match self {
            HttpVersion::Unknown => 0,
            HttpVersion::Http10 => 1,
            HttpVersion::Http11 => 2,
            HttpVersion::Http2 => 3,
        }
    }

    /// From a request frame's flags (other bits are reserved and ignored).
    pub(crate) fn from_flags(flags: u16) -> Self {
        match flags & 0b11 {
            1 => HttpVersion::Http10,
            2 => HttpVersion::Http11,
            3 => HttpVersion::Http2,
            _ => HttpVersion::Unknown,
        }
    }
}

/// An HTTP response as a guest returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code, 100..=999.
    pub status: u16,
    /// Header fields in order.
    pub headers: Vec<Header>,
    /// The whole response body.
    pub body: Vec<u8>,
}

/// The Revision's environment variables, in declaration order, and its arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    /// `(name, value)` pairs; a later duplicate name wins on lookup.
    pub vars: Vec<(String, String)>,
    /// The container's `command` then `args` (empty when it has none).
    pub args: Vec<String>,
}

/// Bounds a decoder enforces before allocating anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame accepted, in bytes.
    pub max_frame: usize,
    /// Most header fields (or environment variables) in one frame.
    pub max_headers: usize,
    /// Largest header name, method or environment name, in bytes.
    pub max_name: usize,
    /// Largest header value, URI or environment value, in bytes.
    pub max_value: usize,
    /// Largest body, in bytes.
    pub max_body: usize,
}

impl Limits {
    /// Limits for bodies of up to `max_body` bytes with default header bounds.
    pub const fn for_body(max_body: usize) -> Self {
        Limits { max_frame: max_body + 256 * 1024, max_headers: 256, max_name: 1024, max_value: 64 * 1024, max_body }
    }
}

impl Default for Limits {
    /// 1 MiB bodies, 256 headers.
    fn default() -> Self {
        Limits::for_body(1024 * 1024)
    }
}

impl Env {
    /// Value of the last variable called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Request {
    /// Values of every header called `name` (ASCII case-insensitive), in order.
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value.as_slice())
    }

    /// Path part of the URI (before `?`).
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }

    /// Query part of the URI (after `?`), if any.
    pub fn query(&self) -> Option<&str> {
        self.uri.split_once('?').map(|(_, q)| q)
    }
}

impl Response {
    /// A response with `status`, no headers and an empty body.
    pub fn new(status: u16) -> Self {
        Response { status, headers: Vec::new(), body: Vec::new() }
    }

    /// A `text/plain; charset=utf-8` response.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        let body: String = body.into();
        Response::new(status).with_header("content-type", "text/plain; charset=utf-8").with_body(body.into_bytes())
    }

    /// An `application/json` response from already-serialised JSON.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        let body: String = body.into();
        Response::new(status).with_header("content-type", "application/json").with_body(body.into_bytes())
    }

    /// Appends a header field (names may repeat).
    pub fn with_header(mut self, name: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        self.headers.push(Header { name: name.into(), value: value.as_ref().to_vec() });
        self
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}
