//! SLP messages: parse → emit → parse is the identity. Body: `svcroute_stack::wire::fuzz::slp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::wire::fuzz::slp(data);
});
