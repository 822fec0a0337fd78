//! Frame encoders: infallible, producing exactly the layout `decode` reads.

use alloc::vec::Vec;

use crate::frame::{Env, Header, Request, Response};
use crate::{ABI_VERSION, ENV_MAGIC, REQUEST_MAGIC, RESPONSE_MAGIC};

/// Encodes a request frame.
pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + req.uri.len() + req.body.len() + headers_len(&req.headers));
    preamble(&mut out, REQUEST_MAGIC, req.version.flags());
    put_u16_bytes(&mut out, req.method.as_bytes());
    put_u32_bytes(&mut out, req.uri.as_bytes());
    put_headers(&mut out, &req.headers);
    put_u32_bytes(&mut out, &req.body);
    out
}

/// Encodes a response frame.
pub fn encode_response(resp: &Response) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + resp.body.len() + headers_len(&resp.headers));
    preamble(&mut out, RESPONSE_MAGIC, 0);
    out.extend_from_slice(&resp.status.to_le_bytes());
    put_headers(&mut out, &resp.headers);
    put_u32_bytes(&mut out, &resp.body);
    out
}

/// Encodes an environment frame.
pub fn encode_env(env: &Env) -> Vec<u8> {
    let mut out = Vec::new();
    // Flag bit 0: an argument list follows the variables (only then, so a guest built
    // before arguments were carried still reads the frames of Revisions without any).
    preamble(&mut out, ENV_MAGIC, u16::from(!env.args.is_empty()));
    put_len_u32(&mut out, env.vars.len());
    for (name, value) in &env.vars {
        put_u16_bytes(&mut out, name.as_bytes());
        put_u32_bytes(&mut out, value.as_bytes());
    }
    if !env.args.is_empty() {
        put_len_u32(&mut out, env.args.len());
        for arg in &env.args {
            put_u32_bytes(&mut out, arg.as_bytes());
        }
    }
    out
}

fn preamble(out: &mut Vec<u8>, magic: [u8; 4], flags: u16) {
    out.extend_from_slice(&magic);
    out.extend_from_slice(&ABI_VERSION.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
}

fn headers_len(headers: &[Header]) -> usize {
    headers.iter().map(|h| 6 + h.name.len() + h.value.len()).sum()
}

fn put_headers(out: &mut Vec<u8>, headers: &[Header]) {
    put_len_u32(out, headers.len());
    for h in headers {
        put_u16_bytes(out, h.name.as_bytes());
        put_u32_bytes(out, &h.value);
    }
}

/// Lengths beyond the field's width are truncated to it; decoders then reject
/// the frame, so an encoder bug can never be read as a shorter valid value.
fn put_u16_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_u32_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len_u32(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_len_u32(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
}
