//! The one module with `unsafe`: thin wrappers over the system calls the
//! node loop needs that std and our chosen crates do not offer — signal
//! handlers that only set a flag, `ppoll(2)`, the TAP ioctls for virtio-net
//! offloads, MTU and link state, the AF_PACKET socket and its mapped rings
//! (`phy/packet.rs`), and the three calls of a microVM's init (mount,
//! module loading, power-off; see [`super::guest`]). Every `unsafe` block
//! carries a `SAFETY:` note.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
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

// ---- AF_PACKET with PACKET_MMAP rings (phy/packet.rs) -------------------------
//
// Constants from <linux/if_packet.h> and <linux/if_ether.h>.

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const TPACKET_V3: libc::c_int = 2;
const ETH_P_ALL: u16 = 0x0003;

/// `struct tpacket_req3`: the geometry of one ring.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TpacketReq3 {
    pub(crate) block_size: u32,
    pub(crate) block_nr: u32,
    pub(crate) frame_size: u32,
    pub(crate) frame_nr: u32,
    pub(crate) retire_blk_tov: u32,
    pub(crate) sizeof_priv: u32,
    pub(crate) feature_req_word: u32,
}

#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: libc::c_ushort,
    alen: libc::c_ushort,
    address: [u8; 8],
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live, initialised #[repr(C)] value (or a c_int) of the
    // size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An open AF_PACKET socket of version TPACKET_V3 with its receive and
/// transmit rings mapped, bound to one interface in promiscuous mode.
pub(crate) struct PacketSocket {
    fd: File,
    /// Both rings, receive ring first, as one mapping.
    pub(crate) map: RingMap,
}

impl PacketSocket {
    /// Open, configure the rings `rx` and `tx`, map them, and bind to
    /// interface `name`. `sndtimeo` bounds a blocking flush.
    pub(crate) fn open(
        name: &str,
        rx: &TpacketReq3,
        tx: &TpacketReq3,
        sndtimeo: Duration,
    ) -> io::Result<Self> {
        let ifname = ifname(name)?;
        // SAFETY: if_nametoindex reads a NUL-terminated name (IFNAMSIZ
        // bytes, the last always 0 by `ifname`).
        let ifindex = unsafe { libc::if_nametoindex(ifname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        let proto = ETH_P_ALL.to_be();
        // SAFETY: plain socket(2); the fd is owned by the File below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { File::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        setsockopt(s, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        // Our own frames are not received back.
        setsockopt(s, SOL_PACKET, PACKET_IGNORE_OUTGOING, &(1 as libc::c_int))?;
        // A frame the kernel finds malformed is skipped instead of
        // stalling the ring (the link never queues one: it checks lengths).
        setsockopt(s, SOL_PACKET, PACKET_LOSS, &(1 as libc::c_int))?;
        setsockopt(s, SOL_PACKET, PACKET_RX_RING, rx)?;
        setsockopt(s, SOL_PACKET, PACKET_TX_RING, tx)?;
        let tv = libc::timeval {
            tv_sec: sndtimeo.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(sndtimeo.subsec_micros() as i32),
        };
        setsockopt(s, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &tv)?;
        let len = rx.block_size as usize * rx.block_nr as usize
            + tx.block_size as usize * tx.block_nr as usize;
        let map = RingMap::map(s, len)?;
        let mreq = PacketMreq {
            ifindex: ifindex as libc::c_int,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        setsockopt(s, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)?;
        // SAFETY: sockaddr_ll is plain old data; zeroed is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as libc::c_ushort;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: a fully initialised sockaddr_ll of the size passed.
        let r = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd, map })
    }

    /// The socket's descriptor, for `poll(2)`.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Tell the kernel to send every frame marked `TP_STATUS_SEND_REQUEST`.
    /// With `wait`, block (at most the send timeout) until they are sent.
    pub(crate) fn kick_tx(&self, wait: bool) -> io::Result<()> {
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: a zero-length send with no buffer; the kernel reads the
        // frames from the mapped ring.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, flags) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped for want of room in the receive ring since
    /// the last call (`PACKET_STATISTICS` resets on read).
    pub(crate) fn take_rx_drops(&self) -> io::Result<u64> {
        let mut st = TpacketStatsV3::default();
        let mut len = size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` is a live #[repr(C)] tpacket_stats_v3 and `len` its size.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(st.drops))
    }
}

/// A shared mapping of packet rings. The kernel writes it concurrently, so
/// every access goes through these methods: status words are atomics with
/// acquire/release order (the ring's hand-over protocol), frame bytes are
/// copied in and out only while the status says user space owns them.
/// Every offset is bounds-checked.
pub(crate) struct RingMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl RingMap {
    fn map(fd: RawFd, len: usize) -> io::Result<Self> {
        // SAFETY: mapping the rings of packet socket `fd`, of exactly the
        // configured length; the kernel validates both.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        let p = if p == libc::MAP_FAILED {
            // MAP_LOCKED fails under a low RLIMIT_MEMLOCK; the rings work
            // unlocked.
            // SAFETY: as above, without MAP_LOCKED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            p
        } else {
            p
        };
        let ptr = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len })
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn check(&self, off: usize, n: usize, align: usize) {
        assert!(
            off % align == 0 && off.checked_add(n).is_some_and(|e| e <= self.len),
            "ring access {off}+{n} outside the {}-byte mapping",
            self.len
        );
    }

    /// Load the u32 at `off` with acquire order (a status word).
    pub(crate) fn load_u32(&self, off: usize) -> u32 {
        self.check(off, 4, 4);
        // SAFETY: in bounds and 4-aligned (checked; the mapping is
        // page-aligned); AtomicU32 has the layout of u32 and the kernel
        // accesses these words with its own atomics/barriers.
        unsafe { (*self.ptr.as_ptr().add(off).cast::<AtomicU32>()).load(Ordering::Acquire) }
    }

    /// Store the u32 at `off` with release order (hand a slot over).
    pub(crate) fn store_u32(&self, off: usize, v: u32) {
        self.check(off, 4, 4);
        // SAFETY: as in `load_u32`.
        unsafe { (*self.ptr.as_ptr().add(off).cast::<AtomicU32>()).store(v, Ordering::Release) }
    }

    /// Load the u16 at `off` (a header field of a slot user space owns).
    pub(crate) fn load_u16(&self, off: usize) -> u16 {
        self.check(off, 2, 2);
        // SAFETY: in bounds and 2-aligned (checked).
        unsafe { (*self.ptr.as_ptr().add(off).cast::<AtomicU16>()).load(Ordering::Relaxed) }
    }

    /// Copy `out.len()` bytes from `off`.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len(), 1);
        // SAFETY: in bounds (checked); `out` is exclusively borrowed and
        // cannot overlap the mapping (it is not ours to hand out).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len());
        }
    }

    /// Copy `data` to `off`.
    pub(crate) fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len(), 1);
        // SAFETY: in bounds (checked); the slot is owned by user space
        // (status AVAILABLE) until its status is stored.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len());
        }
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`, once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: the mapping is owned by this value alone (the socket's other
// user is the kernel); moving it to another thread moves that ownership.
unsafe impl Send for RingMap {}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_SGRO: u32 = 0x0000_002c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfReqPtr {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Turn generic receive offload off on `name`, so a packet socket sees the
/// frames as they came off the wire, not merged super-frames.
pub(crate) fn set_gro_off(name: &str) -> io::Result<()> {
    let sock = ctl_socket()?;
    let mut v = EthtoolValue {
        cmd: ETHTOOL_SGRO,
        data: 0,
    };
    let req = IfReqPtr {
        name: ifname(name)?,
        data: (&mut v as *mut EthtoolValue).cast(),
        _pad: [0; 16],
    };
    // SAFETY: ifreq-compatible struct whose data pointer points to a live
    // ethtool_value for the duration of the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---- a microVM's init (src/vm) -------------------------------------------------

/// `mount(2)` of `fstype` from `source` on `target` (flags 0, no data).
pub(crate) fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    let c = |s: &str| {
        std::ffi::CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let (src, tgt, fs) = (c(source)?, c(target)?, c(fstype)?);
    // SAFETY: three NUL-terminated strings that outlive the call; no data.
    let r = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Load the kernel module in `file` with parameters `params`
/// (`finit_module(2)`).
pub(crate) fn load_module(file: &File, params: &str) -> io::Result<()> {
    let p =
        std::ffi::CString::new(params).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an open module file and a NUL-terminated parameter string
    // that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            p.as_ptr(),
            0 as libc::c_int,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Power the machine off (`reboot(2)`); returns only on failure.
pub(crate) fn power_off() -> io::Error {
    // SAFETY: reboot(2) with a valid command; it does not return on success.
    unsafe {
        libc::sync();
        libc::reboot(libc::LINUX_REBOOT_CMD_POWER_OFF);
    }
    io::Error::last_os_error()
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
