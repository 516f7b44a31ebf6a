//! NR and fabric control messages (GFF types 3–8): parse → emit → same octets.
//! Body: `svcroute_stack::fuzz::nr`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::nr(data);
});
