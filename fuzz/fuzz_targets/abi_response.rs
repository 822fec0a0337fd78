//! Fuzz target: `lampyr_abi::decode_response` must be total (no panic on any
//! bytes), and whatever it accepts must survive `encode_response` and a second
//! decode unchanged.
#![no_main]

use lampyr_abi::{Limits, decode_response, encode_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let Ok(response) = decode_response(data, &limits) else {
        return;
    };
    let encoded = encode_response(&response);
    match decode_response(&encoded, &limits) {
        Ok(again) => assert_eq!(again, response, "response changed across encode/decode"),
        Err(e) => panic!("re-encoded response does not decode: {e} ({response:?})"),
    }
});
