//! What a microVM's init needs from the kernel beyond std: mounting the
//! pseudo file systems, loading a kernel module from a file, powering off.
//! Safe wrappers over `phy/sys.rs`; the init itself is `src/vm/guest.rs`
//! of the binary (see `docs/microvm.md`).

use std::fs::File;
use std::io;

use super::sys;

/// Mount a file system of type `fstype` from `source` on `target`.
pub fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    sys::mount(source, target, fstype)
        .map_err(|e| io::Error::new(e.kind(), format!("mount {fstype} on {target}: {e}")))
}

/// Load the kernel module in `file` with `params` (`name=value ...`).
/// A module already loaded (`EEXIST`) is not an error.
pub fn load_module(file: &File, params: &str) -> io::Result<()> {
    match sys::load_module(file, params) {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        r => r,
    }
}

/// Power the machine off. Returns only if that failed.
pub fn power_off() -> io::Error {
    sys::power_off()
}
