//! The HTTP/1.1 decoders: bytes → request or response decoder in every
//! state, whole and in pieces → never panics, never spins, an error
//! poisons, pieces decode as the whole. Body: `svcroute_stack::fuzz::http`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::http(data);
});
