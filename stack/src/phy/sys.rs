//! The one module with `unsafe`: thin wrappers over the system calls the
//! node loop needs that std and our chosen crates do not offer — signal
//! handlers that only set a flag, `ppoll(2)`, and the TAP ioctls for
//! virtio-net offloads, MTU and link state.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Make SIGTERM and SIGINT set the stop flag (and interrupt `ppoll`).
pub(crate) fn install_stop_handlers() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the sigaction struct is fully initialised.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived.
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Wait until one of `fds` is readable or `timeout` passes (`None`: forever).
/// A signal ends the wait early; that is not an error.
pub(crate) fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds is a valid array of pollfd of the given length; tsp is
    // null or points to a live timespec; no signal mask is passed.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if !interrupted(&e) {
            return Err(e);
        }
    }
    Ok(())
}

/// Whether a failed `ppoll` was only interrupted. Besides `EINTR`, a
/// tracer (gdb calling a function in the node, `strace -p` attaching) can
/// make the kernel's internal restart codes (`ERESTARTSYS` 512,
/// `ERESTARTNOINTR` 513, `ERESTARTNOHAND` 514, `ERESTART_RESTARTBLOCK` 516;
/// 515 is `ENOIOCTLCMD`, not one of them) reach user space; they mean "try
/// again", not "the node is broken".
fn interrupted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
        || matches!(e.raw_os_error(), Some(512 | 513 | 514 | 516))
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;

/// Size of the virtio-net header we ask the kernel for (with `num_buffers`).
pub(crate) const VNET_HDR_LEN: usize = 12;

#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

#[repr(C)]
struct IfReqInt {
    name: [libc::c_char; libc::IFNAMSIZ],
    value: libc::c_int,
    _pad: [u8; 20],
}

fn ifname(name: &str) -> io::Result<[libc::c_char; libc::IFNAMSIZ]> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} must be 1..15 bytes"),
        ));
    }
    let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
    for (o, b) in out.iter_mut().zip(name.bytes()) {
        *o = b as libc::c_char;
    }
    Ok(out)
}

/// Open TAP `name` with a virtio-net header and TCP segmentation offloads:
/// the kernel then hands over and accepts frames of up to 64 KiB.
pub(crate) fn open_tap_vnet(name: &str) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let req = IfReqFlags {
        name: ifname(name)?,
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    let fd = file.as_raw_fd();
    let hdr_len: libc::c_int = VNET_HDR_LEN as libc::c_int;
    // SAFETY: fd is an open tun fd; the request structs are #[repr(C)]
    // ifreq-compatible and live for the call.
    unsafe {
        if libc::ioctl(fd, TUNSETIFF, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(fd, TUNSETVNETHDRSZ, &hdr_len) < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(
            fd,
            TUNSETOFFLOAD,
            (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) as libc::c_ulong,
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    set_nonblocking(fd)?;
    Ok(file)
}

/// Put `fd` into non-blocking mode.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn ctl_socket() -> io::Result<File> {
    // SAFETY: plain socket(2); the fd is owned by the returned File.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Bring interface `name` up (SIOCSIFFLAGS |= IFF_UP).
pub(crate) fn set_link_up(name: &str) -> io::Result<()> {
    let sock = ctl_socket()?;
    let mut req = IfReqFlags {
        name: ifname(name)?,
        flags: 0,
        _pad: [0; 22],
    };
    // SAFETY: ifreq-compatible struct, valid for the calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Read the MTU of interface `name`.
pub(crate) fn link_mtu(name: &str) -> io::Result<usize> {
    let sock = ctl_socket()?;
    let mut req = IfReqInt {
        name: ifname(name)?,
        value: 0,
        _pad: [0; 20],
    };
    // SAFETY: ifreq-compatible struct, valid for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req.value.max(0) as usize)
}

/// `readv(2)` into two buffers (a virtio-net header, then the frame).
pub(crate) fn readv2(fd: RawFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: both iovecs point into live, exclusively borrowed buffers of
    // the stated lengths for the duration of the call.
    let n = unsafe { libc::readv(fd, iov.as_ptr(), 2) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `writev(2)` of two buffers (a virtio-net header, then the frame).
pub(crate) fn writev2(fd: RawFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: both iovecs point into live buffers of the stated lengths; the
    // kernel only reads them.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_codes_are_interruptions_not_failures() {
        for code in [libc::EINTR, 512, 513, 514, 516] {
            assert!(interrupted(&io::Error::from_raw_os_error(code)), "{code}");
        }
        for code in [libc::EBADF, libc::EINVAL, 511, 515, 517] {
            assert!(!interrupted(&io::Error::from_raw_os_error(code)), "{code}");
        }
    }
}
