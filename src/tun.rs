//! TUN mode of the ROSA shim (`svcroute shim --tun`, `svcroute run shim`):
//! the I/O half. The shim itself is the sans-IO role
//! [`svcroute_host::rosa::tun::TunShim`]; this module gives it its second
//! port and prepares the kernel client's namespace (`docs/shim.md`, "TUN
//! mode"):
//!
//! - [`TunLink`]: a TUN device as a [`Link`], wrapping every IP packet the
//!   kernel sends into an Ethernet frame and unwrapping what the node sends.
//! - [`setup_kernel_side`]: move the TUN into the client's namespace, name
//!   it, give it the client's address, the MTU and the routes (default and
//!   the virtual prefix). A TUN keeps working across `ip link set netns`,
//!   and disappears with the process that holds it.
//! - [`HostsFile`]: the names and their virtual addresses in the
//!   namespace's hosts file, removed again when the shim stops.

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use svcroute_host::rosa::tun::{unwrap, wrap};
use svcroute_stack::phy::Link;
use tun_tap::{Iface, Mode};

use crate::lab::netns;

// The Ethernet header the link adds in front of each IP packet.
use smoltcp::wire::ETHERNET_HEADER_LEN as ETH_LEN;
/// Largest IP packet a TUN hands over.
const MAX_PACKET: usize = 65_535;

/// A TUN device (no packet information) as an Ethernet [`Link`].
pub(crate) struct TunLink {
    iface: Iface,
    mtu: usize,
}

impl TunLink {
    /// Create a TUN in this namespace, under a name the kernel picks
    /// (`svtunN`): [`setup_kernel_side`] moves and renames it.
    pub(crate) fn create(mtu: usize) -> io::Result<Self> {
        let iface = Iface::without_packet_info("svtun%d", Mode::Tun)
            .map_err(|e| io::Error::new(e.kind(), format!("creating a TUN: {e}")))?;
        iface.set_non_blocking()?;
        Ok(Self { iface, mtu })
    }

    /// The name the kernel gave it at creation.
    pub(crate) fn created_name(&self) -> &str {
        self.iface.name()
    }
}

impl Link for TunLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(packet) = buf.get_mut(ETH_LEN..) else {
            return Ok(None);
        };
        let n = match self.iface.recv(packet) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        wrap(&mut buf[..ETH_LEN + n]);
        Ok(Some(ETH_LEN + n))
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let Some(packet) = unwrap(frame) else {
            return Ok(false);
        };
        match self.iface.send(packet) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            // The kernel refuses a malformed packet (EINVAL) and every
            // packet while the TUN is down (EIO): lost, counted by the node.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIO)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn max_frame(&self) -> usize {
        ETH_LEN + MAX_PACKET
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.iface.as_raw_fd())
    }
}

/// Give the TUN to the kernel client: into namespace `ns` as `name`, MTU,
/// no link-local address of its own (nothing on the segment is for the
/// kernel to discover), the client's address, and routes of the default
/// and of the virtual prefix through it.
pub(crate) fn setup_kernel_side(
    link: &TunLink,
    ns: &str,
    name: &str,
    client: (Ipv6Addr, u8),
    prefix: (Ipv6Addr, u8),
) -> Result<()> {
    let created = link.created_name();
    netns::ip(&["link", "set", "dev", created, "netns", ns])
        .with_context(|| format!("moving TUN {created} into namespace {ns}"))?;
    let step = |args: &[&str]| {
        netns::ip_in(ns, args).with_context(|| format!("setting up TUN {name} in namespace {ns}"))
    };
    if created != name {
        step(&["link", "set", "dev", created, "name", name])?;
    }
    step(&["link", "set", "dev", name, "mtu", &link.mtu.to_string()])?;
    step(&["link", "set", "dev", name, "addrgenmode", "none"])?;
    let addr = format!("{}/{}", client.0, client.1);
    step(&["-6", "addr", "add", &addr, "dev", name, "nodad"])?;
    step(&["link", "set", "dev", name, "up"])?;
    let virt = format!("{}/{}", prefix.0, prefix.1);
    step(&["-6", "route", "add", &virt, "dev", name])?;
    step(&["-6", "route", "add", "default", "dev", name]).context(
        "the TUN must be the namespace's only link (does it have another default route?)",
    )?;
    Ok(())
}

/// A hosts file this process wrote; removed (with the directories it
/// created, once empty) when dropped, or, if a file was there before, put
/// back as it was.
pub(crate) struct HostsFile {
    path: PathBuf,
    created: Vec<PathBuf>,
    /// What the file held before we wrote it.
    before: Option<Vec<u8>>,
}

impl HostsFile {
    /// Write `text` to `path`, creating missing parent directories.
    pub(crate) fn write(path: &Path, text: &str) -> Result<Self> {
        let mut created = Vec::new();
        let mut missing = Vec::new();
        let mut at = path.parent();
        while let Some(d) = at {
            if d.as_os_str().is_empty() || d.exists() {
                break;
            }
            missing.push(d.to_owned());
            at = d.parent();
        }
        for d in missing.iter().rev() {
            match std::fs::create_dir(d) {
                Ok(()) => created.push(d.clone()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
            }
        }
        // Deepest first, for removal.
        created.reverse();
        let before = match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let file = Self {
            path: path.to_owned(),
            created,
            before,
        };
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(file)
    }
}

impl Drop for HostsFile {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = std::fs::write(&self.path, before);
            return;
        }
        let _ = std::fs::remove_file(&self.path);
        for d in &self.created {
            // Only once empty: another namespace's files may share /etc/netns.
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_hosts_file_and_the_directories_it_made_go_when_dropped() {
        let base = std::env::temp_dir().join(format!("svcroute-hosts-{}", std::process::id()));
        let path = base.join("netns/ns1/hosts");
        {
            let _f = HostsFile::write(&path, "::1 localhost\n").unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "::1 localhost\n");
        }
        assert!(!path.exists());
        assert!(!base.exists(), "{} left", base.display());
    }

    #[test]
    fn a_hosts_file_that_was_there_is_put_back() {
        let base = std::env::temp_dir().join(format!("svcroute-hosts-b-{}", std::process::id()));
        let path = base.join("hosts");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(&path, "10.0.0.1 mine\n").unwrap();
        {
            let _f = HostsFile::write(&path, "::1 localhost\n").unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "::1 localhost\n");
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "10.0.0.1 mine\n");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
