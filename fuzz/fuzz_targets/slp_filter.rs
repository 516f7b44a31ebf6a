//! SLP predicates: parse and evaluate against an attribute list. Body: `svcroute_stack::fuzz::slp_filter`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::slp_filter(data);
});
