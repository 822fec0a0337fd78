//! Bounded, total frame decoders.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::frame::{Env, Header, HttpVersion, Limits, Request, Response};
use crate::{ABI_VERSION, ENV_MAGIC, REQUEST_MAGIC, RESPONSE_MAGIC};

/// Why a frame was refused: what was wrong, in which field, at which byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The frame is larger than `Limits::max_frame`.
    FrameTooLarge {
        /// Frame length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame does not start with the expected magic bytes.
    BadMagic {
        /// Magic expected for this frame kind.
        expected: [u8; 4],
    },
    /// The frame was written for another ABI version.
    UnsupportedVersion {
        /// Version found in the frame.
        found: u16,
    },
    /// The frame ended inside `field`.
    Truncated {
        /// Field being read.
        field: &'static str,
        /// Byte offset where it starts.
        offset: usize,
    },
    /// `field` declares a length or count beyond its limit.
    TooLarge {
        /// Offending field.
        field: &'static str,
        /// Declared length or count.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `field` is not valid UTF-8.
    NotUtf8 {
        /// Offending field.
        field: &'static str,
        /// Byte offset where it starts.
        offset: usize,
    },
    /// The status code is outside 100..=999.
    BadStatus {
        /// Status found.
        status: u16,
    },
    /// Bytes follow the last field.
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::FrameTooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the {max}-byte limit")
            }
            DecodeError::BadMagic { expected } => {
                write!(f, "frame does not start with {:?}", core::str::from_utf8(expected).unwrap_or("?"))
            }
            DecodeError::UnsupportedVersion { found } => {
                write!(f, "frame has ABI version {found}, this side speaks {ABI_VERSION}")
            }
            DecodeError::Truncated { field, offset } => {
                write!(f, "frame ends inside {field} (offset {offset})")
            }
            DecodeError::TooLarge { field, len, max } => {
                write!(f, "{field} declares {len}, above the limit of {max}")
            }
            DecodeError::NotUtf8 { field, offset } => {
                write!(f, "{field} at offset {offset} is not UTF-8")
            }
            DecodeError::BadStatus { status } => {
                write!(f, "status {status} is outside 100..=999")
            }
            DecodeError::TrailingBytes { count } => {
                write!(f, "{count} unexpected bytes after the last field")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

/// A cursor over a frame; every read checks bounds first.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let end = start.checked_add(n).filter(|&end| end <= self.buf.len()).ok_or(DecodeError::Truncated { field, offset: start })?;
        self.pos = end;
        Ok(&self.buf[start..end])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// Length-prefixed bytes, the length checked against `max` before reading.
    fn bytes(&mut self, wide: bool, max: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = if wide { self.u32(field)? } else { usize::from(self.u16(field)?) };
        if len > max {
            return Err(DecodeError::TooLarge { field, len, max });
        }
        self.take(len, field)
    }

    fn string(&mut self, wide: bool, max: usize, field: &'static str) -> Result<String, DecodeError> {
        let offset = self.pos;
        let bytes = self.bytes(wide, max, field)?;
        core::str::from_utf8(bytes).map(String::from).map_err(|_| DecodeError::NotUtf8 { field, offset })
    }

    /// Checks the magic and version; returns the flags.
    fn preamble(&mut self, magic: [u8; 4], limits: &Limits) -> Result<u16, DecodeError> {
        if self.buf.len() > limits.max_frame {
            return Err(DecodeError::FrameTooLarge { len: self.buf.len(), max: limits.max_frame });
        }
        if self.take(4, "magic")? != magic {
            return Err(DecodeError::BadMagic { expected: magic });
        }
        let version = self.u16("version")?;
        if version != ABI_VERSION {
            return Err(DecodeError::UnsupportedVersion { found: version });
        }
        self.u16("flags")
    }

    /// A count, refused above `max` before anything is allocated for it.
    fn count(&mut self, max: usize, field: &'static str) -> Result<usize, DecodeError> {
        let n = self.u32(field)?;
        if n > max {
            return Err(DecodeError::TooLarge { field, len: n, max });
        }
        Ok(n)
    }

    fn headers(&mut self, limits: &Limits) -> Result<Vec<Header>, DecodeError> {
        let n = self.count(limits.max_headers, "header count")?;
        let mut headers = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string(false, limits.max_name, "header name")?;
            let value = self.bytes(true, limits.max_value, "header value")?.to_vec();
            headers.push(Header { name, value });
        }
        Ok(headers)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }
}

/// Decodes a request frame within `limits`.
pub fn decode_request(buf: &[u8], limits: &Limits) -> Result<Request, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let flags = r.preamble(REQUEST_MAGIC, limits)?;
    let method = r.string(false, limits.max_name, "method")?;
    let uri = r.string(true, limits.max_value, "uri")?;
    let headers = r.headers(limits)?;
    let body = r.bytes(true, limits.max_body, "body")?.to_vec();
    r.finish()?;
    Ok(Request { method, uri, headers, body, version: HttpVersion::from_flags(flags) })
}

/// Decodes a response frame within `limits`.
pub fn decode_response(buf: &[u8], limits: &Limits) -> Result<Response, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    r.preamble(RESPONSE_MAGIC, limits)?;
    let status = r.u16("status")?;
    if !(100..=999).contains(&status) {
        return Err(DecodeError::BadStatus { status });
    }
    let headers = r.headers(limits)?;
    let body = r.bytes(true, limits.max_body, "body")?.to_vec();
    r.finish()?;
    Ok(Response { status, headers, body })
}

/// Decodes an environment frame within `limits` (`max_headers` bounds the variable count).
pub fn decode_env(buf: &[u8], limits: &Limits) -> Result<Env, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let flags = r.preamble(ENV_MAGIC, limits)?;
    let n = r.count(limits.max_headers, "variable count")?;
    let mut vars = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string(false, limits.max_name, "variable name")?;
        let value = r.string(true, limits.max_value, "variable value")?;
        vars.push((name, value));
    }
    let mut args = Vec::new();
    if flags & 1 != 0 {
        let n = r.count(limits.max_headers, "argument count")?;
        args.reserve(n);
        for _ in 0..n {
            args.push(r.string(true, limits.max_value, "argument")?);
        }
    }
    r.finish()?;
    Ok(Env { vars, args })
}
