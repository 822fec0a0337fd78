//! `ly call`: one request to a Service served from fibers exactly as `ly run` serves it
//! (guest built, snapshotted, routed), answered, printed, and nothing left running: the
//! one command a guest crate's tests run to see the real fiber answer.

use std::sync::{Arc, Mutex};

use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_router::route::RouteOptions;
use lampyr_router::{Router, RouterConfig, ScalerConfig};
use prometheus_client::registry::Registry;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::CliError;
use super::run::load_all;
use super::source::{Source, source_of};
use crate::args::CallArgs;
use crate::ui::Ui;

/// The request `ly call` sends.
#[derive(Clone, Debug)]
pub struct CallRequest {
    /// Its method (GET by default).
    pub method: Method,
    /// Path and query, starting with `/`.
    pub target: String,
    /// Its body.
    pub body: String,
    /// Its `-H` headers.
    pub headers: HeaderMap,
}

/// What the service answered.
struct Answer {
    status: reqwest::StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// `ly call PATH [METHOD] TARGET [BODY] [-H 'Name: value']… [--host H] [-i]`.
pub fn run(args: CallArgs, ui: Ui) -> Result<(), CliError> {
    let request = parse_request(&args.request, &args.headers)?;
    let source = source_of(&args.path)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
    let ui = Mutex::new(ui);
    let answer = rt.block_on(call(&source, args.host, request, &ui))?;
    let mut ui = ui.into_inner().map_err(|_| CliError::Usage("terminal lock poisoned".into()))?;
    if args.include {
        ui.line(format!("{}", answer.status));
        for (name, value) in &answer.headers {
            ui.line(format!("{name}: {}", String::from_utf8_lossy(value.as_bytes())));
        }
        ui.line("");
    }
    ui.bytes(&answer.body);
    match answer.status.as_u16() {
        code @ 500.. => Err(CliError::ServerError(code)),
        _ => Ok(()),
    }
}

/// `[METHOD] TARGET [BODY]` (as `cargo run --` takes them on the host) and `Name: value` headers.
pub fn parse_request(words: &[String], headers: &[String]) -> Result<CallRequest, CliError> {
    let usage = |why: String| CliError::Usage(format!("{why} (ly call PATH [METHOD] TARGET [BODY], e.g. ly call . GET /hello)"));
    let (method, target, body) = match words {
        [target] => ("GET", target, ""),
        [method, target] => (method.as_str(), target, ""),
        [method, target, body] => (method.as_str(), target, body.as_str()),
        _ => return Err(usage(format!("{} request words", words.len()))),
    };
    if !target.starts_with('/') {
        return Err(usage(format!("the target {target:?} does not start with '/'")));
    }
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).map_err(|_| usage(format!("{method:?} is not a method")))?;
    let mut map = HeaderMap::new();
    for header in headers {
        let (name, value) = header.split_once(':').ok_or_else(|| usage(format!("-H {header:?} is not `Name: value`")))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| usage(format!("-H {header:?}: a bad header name")))?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| usage(format!("-H {header:?}: a bad header value")))?;
        map.append(name, value);
    }
    Ok(CallRequest { method, target: target.clone(), body: body.to_string(), headers: map })
}

/// Loads `source` as `ly run` does, serves it on a loopback port of its own for one request, and stops.
async fn call(source: &Source, host: Option<String>, request: CallRequest, ui: &Mutex<Ui>) -> Result<Answer, CliError> {
    let options = RouteOptions::default();
    let metrics = RuntimeMetrics::default();
    let (table, served) = load_all(std::slice::from_ref(source), &metrics, &ScalerConfig::default(), &options, ui).await?;
    let host = match (host, served.first()) {
        (Some(host), _) => host,
        (None, Some(first)) => format!("{}.{}.{}", first.traffic.name, first.traffic.namespace, options.domain),
        (None, None) => return Err(CliError::Usage(format!("{}: no Service to call", source.manifest.display()))),
    };
    let router = Router::new(RouterConfig::default(), Registry::default());
    router.set_table(table);
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| CliError::Usage(format!("cannot listen on loopback: {e}")))?;
    let addr = listener.local_addr().map_err(|e| CliError::Usage(format!("listener address: {e}")))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(Arc::clone(&router).serve(listener, async move {
        let _ = stopped.await;
    }));
    let failed = |e: reqwest::Error| CliError::Usage(format!("calling {host} through the local router failed: {e}"));
    // reqwest reads the process's rustls provider (TLS is linked in, though this call is plain HTTP).
    lampyr_artifact::registry::use_build_tls_provider();
    let client = reqwest::Client::builder().resolve(&host, addr).no_proxy().build().map_err(failed)?;
    let url = format!("http://{host}:{}{}", addr.port(), request.target);
    let response = client.request(request.method, url).headers(request.headers).body(request.body).send().await.map_err(failed)?;
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.bytes().await.map_err(failed)?.to_vec();
    drop(stop);
    let _ = serving.await;
    Ok(Answer { status, headers, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn requests_read_like_cargo_run_on_the_host() {
        let get = parse_request(&words(&["/hello/moth?x=1"]), &[]).expect("a GET");
        assert_eq!((get.method, get.target.as_str(), get.body.as_str()), (Method::GET, "/hello/moth?x=1", ""));
        let post = parse_request(&words(&["post", "/orders", "{}"]), &words(&["Content-Type: application/json"])).expect("a POST");
        assert_eq!((post.method, post.body.as_str()), (Method::POST, "{}"));
        assert_eq!(post.headers.get("content-type").map(|v| v.as_bytes()), Some(b"application/json".as_slice()));
        for (bad, header) in [(&["hello"][..], None), (&["GET", "hello"][..], None), (&["/"][..], Some("no colon"))] {
            let headers: Vec<String> = header.map(|h| vec![h.to_string()]).unwrap_or_default();
            assert!(matches!(parse_request(&words(bad), &headers), Err(CliError::Usage(_))), "{bad:?} {header:?} is refused");
        }
    }
}
