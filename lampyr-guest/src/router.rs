//! Dispatch by method and path: [`Router`], with `{name}` and `{*rest}` path parameters.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use lampyr_abi::{Request, Response};

use crate::{Error, IntoResponse};

/// A route's handler, as the router stores it.
pub type Route = Box<dyn Fn(&Request, &Params) -> Response + Send + Sync>;

/// Routes a request to the first handler whose method and path pattern match.
///
/// Patterns are `/`-separated: a literal segment matches itself, `{name}` matches any one
/// segment (percent-decoded into [`Params`]), and a final `{*name}` matches the rest of the
/// path. Empty segments are ignored, so `/items/` is `/items`. A path that matches with
/// another method is a 405 with `Allow`; no match is a 404; `HEAD` runs the `GET` handler
/// without its body.
///
/// Building the routes per request is cheap (one small allocation per route):
///
/// ```
/// use lampyr_guest::{Params, Request, Response, Router};
///
/// fn item(_req: &Request, p: &Params) -> Result<Response, lampyr_guest::Error> {
///     let id: u32 = p.parse("id")?;
///     Ok(Response::text(200, format!("item {id}")))
/// }
///
/// fn handle(req: Request) -> Response {
///     Router::new().get("/items/{id}", item).handle(&req)
/// }
/// # assert_eq!(handle(lampyr_guest::host::request("GET", "/items/4")).body, b"item 4");
/// ```
#[derive(Default)]
pub struct Router {
    routes: Vec<(&'static str, Vec<Segment>, Route)>,
}

/// One segment of a path pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(&'static str),
    Param(&'static str),
    Rest(&'static str),
}

/// The path parameters a route's pattern captured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    values: Vec<(&'static str, String)>,
}

impl Params {
    /// The parameter `name`, percent-decoded.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The parameter `name` parsed as `T`: a 400 naming it when it does not parse
    /// (or 500 when the pattern has no such parameter, a bug in the routes).
    pub fn parse<T>(&self, name: &str) -> Result<T, Error>
    where
        T: core::str::FromStr,
        T::Err: core::fmt::Display,
    {
        let text = self.get(name).ok_or_else(|| Error::internal(format!("the route has no path parameter {name}")))?;
        text.parse().map_err(|e| Error::bad_request(format!("path parameter {name}={text:?} is not valid: {e}")))
    }
}

impl Router {
    /// A router with no routes (everything is a 404).
    pub fn new() -> Self {
        Router::default()
    }

    /// Adds `handler` for `method` requests whose path matches `pattern`.
    pub fn route<R, F>(mut self, method: &'static str, pattern: &'static str, handler: F) -> Self
    where
        R: IntoResponse,
        F: Fn(&Request, &Params) -> R + Send + Sync + 'static,
    {
        let route: Route = Box::new(move |req, params| handler(req, params).into_response());
        self.routes.push((method, parse_pattern(pattern), route));
        self
    }

    /// [`Router::route`] for `GET` (and so `HEAD`).
    pub fn get<R: IntoResponse, F: Fn(&Request, &Params) -> R + Send + Sync + 'static>(self, pattern: &'static str, handler: F) -> Self {
        self.route("GET", pattern, handler)
    }

    /// [`Router::route`] for `POST`.
    pub fn post<R: IntoResponse, F: Fn(&Request, &Params) -> R + Send + Sync + 'static>(self, pattern: &'static str, handler: F) -> Self {
        self.route("POST", pattern, handler)
    }

    /// [`Router::route`] for `PUT`.
    pub fn put<R: IntoResponse, F: Fn(&Request, &Params) -> R + Send + Sync + 'static>(self, pattern: &'static str, handler: F) -> Self {
        self.route("PUT", pattern, handler)
    }

    /// [`Router::route`] for `DELETE`.
    pub fn delete<R: IntoResponse, F: Fn(&Request, &Params) -> R + Send + Sync + 'static>(self, pattern: &'static str, handler: F) -> Self {
        self.route("DELETE", pattern, handler)
    }

    /// The answer to `req`: its route's, or the 404 / 405 described on [`Router`].
    pub fn handle(&self, req: &Request) -> Response {
        let path: Vec<&str> = req.path().split('/').filter(|s| !s.is_empty()).collect();
        let head = req.method == "HEAD";
        let mut allowed: Vec<&'static str> = Vec::new();
        let mut get_for_head = None;
        for (method, pattern, route) in &self.routes {
            let Some(params) = match_path(pattern, &path) else { continue };
            if *method == req.method {
                return route(req, &params);
            }
            if head && *method == "GET" && get_for_head.is_none() {
                get_for_head = Some((route, params));
            }
            if !allowed.contains(method) {
                allowed.push(method);
            }
        }
        if let Some((route, params)) = get_for_head {
            return route(req, &params).with_body(Vec::new());
        }
        if allowed.is_empty() {
            return Error::not_found(format!("no route for {} {}", req.method, req.path())).to_response();
        }
        if allowed.contains(&"GET") && !allowed.contains(&"HEAD") {
            allowed.push("HEAD");
        }
        Error::new(405, format!("{} is not allowed on {}", req.method, req.path())).to_response().with_header("allow", allowed.join(", "))
    }
}

fn parse_pattern(pattern: &'static str) -> Vec<Segment> {
    pattern
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => match name.strip_prefix('*') {
                Some(rest) => Segment::Rest(rest),
                None => Segment::Param(name),
            },
            None => Segment::Literal(s),
        })
        .collect()
}

/// The parameters `pattern` captures from `path`, when it matches.
fn match_path(pattern: &[Segment], path: &[&str]) -> Option<Params> {
    let mut params = Params::default();
    for (i, segment) in pattern.iter().enumerate() {
        match segment {
            Segment::Rest(name) => {
                let rest: Vec<String> = path.get(i..).unwrap_or(&[]).iter().map(|s| percent_decode(s)).collect();
                params.values.push((name, rest.join("/")));
                return Some(params);
            }
            Segment::Literal(text) => {
                if path.get(i) != Some(text) {
                    return None;
                }
            }
            Segment::Param(name) => params.values.push((name, percent_decode(path.get(i)?))),
        }
    }
    (pattern.len() == path.len()).then_some(params)
}

/// `%XX` sequences decoded; an invalid sequence or non-UTF-8 result is kept as written.
fn percent_decode(text: &str) -> String {
    String::from_utf8(crate::percent::decode(text.as_bytes())).unwrap_or_else(|_| String::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::request;

    fn routes() -> Router {
        Router::new()
            .get("/items", |_, _| "list")
            .get("/items/{id}", |_, p: &Params| p.parse::<u32>("id").map(|id| Response::text(200, format!("item {id}"))))
            .post("/items", |_, _| Response::new(201))
            .get("/files/{*path}", |_, p: &Params| Response::text(200, String::from(p.get("path").unwrap_or(""))))
    }

    fn body(response: &Response) -> &str {
        core::str::from_utf8(&response.body).unwrap_or("(not UTF-8)")
    }

    #[test]
    fn routes_by_method_and_path_with_parameters() {
        let r = routes();
        assert_eq!(body(&r.handle(&request("GET", "/items/"))), "list");
        assert_eq!(body(&r.handle(&request("GET", "/items/7?x=1"))), "item 7");
        assert_eq!(r.handle(&request("POST", "/items")).status, 201);
        assert_eq!(body(&r.handle(&request("GET", "/files/a/b%20c"))), "a/b c");
        assert_eq!(body(&r.handle(&request("GET", "/files"))), "");
    }

    #[test]
    fn a_parameter_that_does_not_parse_is_a_400_naming_it() {
        let answer = routes().handle(&request("GET", "/items/seven"));
        assert_eq!(answer.status, 400);
        assert!(body(&answer).contains(r#"path parameter id=\"seven\""#), "{}", body(&answer));
    }

    #[test]
    fn another_method_is_a_405_with_allow_and_no_route_a_404() {
        let answer = routes().handle(&request("DELETE", "/items"));
        assert_eq!(answer.status, 405);
        let allow: Vec<&[u8]> = answer.headers.iter().filter(|h| h.name == "allow").map(|h| h.value.as_slice()).collect();
        assert_eq!(allow, [b"GET, POST, HEAD".as_slice()]);
        let missing = routes().handle(&request("GET", "/nothing"));
        assert_eq!((missing.status, body(&missing)), (404, r#"{"error":"no route for GET /nothing"}"#));
    }

    #[test]
    fn head_runs_get_without_the_body() {
        let answer = routes().handle(&request("HEAD", "/items/3"));
        assert_eq!((answer.status, answer.body.len()), (200, 0));
        assert!(answer.headers.iter().any(|h| h.name == "content-type"), "GET's headers are kept");
    }

    #[test]
    fn invalid_percent_sequences_are_kept() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%ff"), "%zz%ff");
    }
}
