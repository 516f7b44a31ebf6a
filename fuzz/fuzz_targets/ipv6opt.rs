//! IPv6 options: one option, an options area and a Destination Options
//! header; parse → emit gives the same octets. Body: `svcroute_stack::fuzz::ipv6opt`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::ipv6opt(data);
});
