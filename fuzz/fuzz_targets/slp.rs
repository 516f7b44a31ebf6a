//! SLP messages: parse → emit → parse is the identity. Body: `svcroute_stack::fuzz::slp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::slp(data);
});
