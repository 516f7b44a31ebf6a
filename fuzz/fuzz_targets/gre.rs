//! GRE base header (RFC 2784) with checksum: parse → emit → same octets.
//! Body: `svcroute_stack::fuzz::gre`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::gre(data);
});
