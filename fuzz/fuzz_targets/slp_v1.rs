//! SLPv1 messages at an SLPv2 agent: only requests are answered, with a
//! whole VER_NOT_SUPPORTED reply. Body: `svcroute_stack::fuzz::slp_v1`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::slp_v1(data);
});
