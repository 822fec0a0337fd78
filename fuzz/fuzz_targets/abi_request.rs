//! Fuzz target: `lampyr_abi::decode_request` and `decode_env` must be total (no
//! panic on any bytes), and whatever they accept must survive `encode_request` /
//! `encode_env` and a second decode unchanged. One input feeds both decoders:
//! the magic bytes pick which one can accept it.
#![no_main]

use lampyr_abi::{Limits, decode_env, decode_request, encode_env, encode_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(request) = decode_request(data, &limits) {
        let encoded = encode_request(&request);
        match decode_request(&encoded, &limits) {
            Ok(again) => assert_eq!(again, request, "request changed across encode/decode"),
            Err(e) => panic!("re-encoded request does not decode: {e} ({request:?})"),
        }
    }
    if let Ok(env) = decode_env(data, &limits) {
        let encoded = encode_env(&env);
        match decode_env(&encoded, &limits) {
            Ok(again) => assert_eq!(again, env, "env changed across encode/decode"),
            Err(e) => panic!("re-encoded env does not decode: {e} ({env:?})"),
        }
    }
});
