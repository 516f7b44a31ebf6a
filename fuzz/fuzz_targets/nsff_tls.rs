//! The nSFF's ClientHello reader on arbitrary first bytes of a connection:
//! never panics; a name it finds is carried by the first `len` octets
//! alone, which give the same answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use svcroute_nsff::tls::{peek, Peek};

fuzz_target!(|data: &[u8]| {
    if let Peek::Name { name, len } = peek(data) {
        assert!(len <= data.len());
        assert_eq!(peek(&data[..len]), Peek::Name { name, len });
    }
});
