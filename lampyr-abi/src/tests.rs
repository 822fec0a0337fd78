//! Round trips and refusals of the frame format.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use super::*;

fn sample_request() -> Request {
    Request {
        method: "POST".to_string(),
        uri: "/echo?x=1".to_string(),
        headers: vec![Header { name: "X-A".to_string(), value: b"1".to_vec() }, Header { name: "x-a".to_string(), value: b"2".to_vec() }],
        body: b"hello".to_vec(),
        version: HttpVersion::Http2,
    }
}

#[test]
fn the_http_version_rides_in_the_flags_and_old_frames_say_unknown() {
    for version in [HttpVersion::Unknown, HttpVersion::Http10, HttpVersion::Http11, HttpVersion::Http2] {
        let req = Request { version, ..sample_request() };
        assert_eq!(decode_request(&encode_request(&req), &Limits::default()).map(|r| r.version), Ok(version));
    }
    let mut frame = encode_request(&sample_request());
    frame[6] = 0; // flags as a host before the field wrote them
    assert_eq!(decode_request(&frame, &Limits::default()).map(|r| r.version), Ok(HttpVersion::Unknown));
    frame[6] = 0b110; // reserved bits are ignored
    assert_eq!(decode_request(&frame, &Limits::default()).map(|r| r.version), Ok(HttpVersion::Http11));
    assert_eq!(HttpVersion::Http2.numbers(), Some((2, 0)));
}

#[test]
fn request_round_trips_with_repeated_headers() {
    let req = sample_request();
    let frame = encode_request(&req);
    assert_eq!(decode_request(&frame, &Limits::default()), Ok(req.clone()));
    let values: Vec<&[u8]> = req.header_values("X-a").collect();
    assert_eq!(values, vec![b"1".as_slice(), b"2".as_slice()]);
    assert_eq!(req.path(), "/echo");
    assert_eq!(req.query(), Some("x=1"));
}

#[test]
fn response_and_env_round_trip() {
    let resp = Response {
        status: 201,
        headers: vec![Header { name: "content-type".to_string(), value: b"text/plain".to_vec() }],
        body: vec![0, 1, 2, 255],
    };
    assert_eq!(decode_response(&encode_response(&resp), &Limits::default()), Ok(resp));
    let env = Env { vars: vec![("A".to_string(), "1".to_string()), ("A".to_string(), "2".to_string())], ..Env::default() };
    let frame = encode_env(&env);
    assert_eq!(frame[6], 0, "no arguments: the frame a guest before arguments reads");
    let decoded = decode_env(&frame, &Limits::default()).expect("env decodes");
    assert_eq!(decoded.get("A"), Some("2"));
    assert_eq!(decoded.get("B"), None);
    let with_args = Env { args: vec!["/ko-app/runtime".to_string(), "".to_string(), "do".to_string()], ..env };
    let frame = encode_env(&with_args);
    assert_eq!(frame[6], 1, "flag bit 0: arguments follow");
    assert_eq!(decode_env(&frame, &Limits::default()), Ok(with_args));
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let frame = encode_request(&sample_request());
    for cut in 0..frame.len() {
        let err = decode_request(&frame[..cut], &Limits::default()).expect_err("truncated frame");
        assert!(matches!(err, DecodeError::Truncated { .. } | DecodeError::BadMagic { .. }), "{err:?}");
    }
}

#[test]
fn declared_lengths_are_checked_before_allocation() {
    let mut frame = encode_response(&Response { status: 200, headers: vec![], body: vec![] });
    // Header count field sits after magic(4) version(2) flags(2) status(2).
    frame[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode_response(&frame, &Limits::default()),
        Err(DecodeError::TooLarge { field: "header count", len: u32::MAX as usize, max: 256 })
    );
}

#[test]
fn body_over_limit_is_refused() {
    let resp = Response { status: 200, headers: vec![], body: vec![7; 100] };
    let limits = Limits { max_body: 99, ..Limits::default() };
    assert_eq!(decode_response(&encode_response(&resp), &limits), Err(DecodeError::TooLarge { field: "body", len: 100, max: 99 }));
}

#[test]
fn frame_over_limit_is_refused() {
    let frame = encode_request(&sample_request());
    let limits = Limits { max_frame: 8, ..Limits::default() };
    assert!(matches!(decode_request(&frame, &limits), Err(DecodeError::FrameTooLarge { .. })));
}

#[test]
fn wrong_magic_version_status_and_trailing_bytes_are_refused() {
    let resp = Response { status: 200, headers: vec![], body: vec![] };
    let frame = encode_response(&resp);
    assert!(matches!(decode_request(&frame, &Limits::default()), Err(DecodeError::BadMagic { .. })));

    let mut v2 = frame.clone();
    v2[4] = 2;
    assert_eq!(decode_response(&v2, &Limits::default()), Err(DecodeError::UnsupportedVersion { found: 2 }));

    let mut bad_status = frame.clone();
    bad_status[8..10].copy_from_slice(&42u16.to_le_bytes());
    assert_eq!(decode_response(&bad_status, &Limits::default()), Err(DecodeError::BadStatus { status: 42 }));

    let mut trailing = frame;
    trailing.push(0);
    assert_eq!(decode_response(&trailing, &Limits::default()), Err(DecodeError::TrailingBytes { count: 1 }));
}

#[test]
fn non_utf8_names_are_refused_with_offset() {
    let req = Request { method: "GET".to_string(), uri: "/".to_string(), ..Request::default() };
    let mut frame = encode_request(&req);
    frame[10] = 0xff; // first byte of the method
    assert_eq!(decode_request(&frame, &Limits::default()), Err(DecodeError::NotUtf8 { field: "method", offset: 8 }));
}
