//! SAR IGP datagrams: decoding never panics; a decoded message re-encodes
//! and decodes to itself. Body: `svcroute_stack::fuzz::igp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::igp(data);
});
