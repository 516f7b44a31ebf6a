//! SLP attribute and tag lists: what parses re-emits unchanged. Body: `svcroute_stack::fuzz::slp_attr`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::slp_attr(data);
});
