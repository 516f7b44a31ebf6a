//! Node configuration files (`svcroute run <role> -c node.toml`).
//!
//! ```toml
//! name = "h1"                          # node name (control socket, logs)
//! busy_poll_us = 0                     # optional: poll this long after work before sleeping
//!
//! [[port]]                             # one per TAP
//! tap = "h1-0"                         # existing TAP device (≤ 15 bytes)
//! link = "tap"                         # optional: "packet" opens the interface
//!                                      #   named by `tap` (a veth, a VM's eth0)
//!                                      #   with AF_PACKET rings instead
//! name = "eth0"                        # optional, default eth<index>
//! mac = "02:00:00:00:00:01"            # optional, derived from name + index
//! addrs = ["10.0.1.2/24", "fd00:1::2/64"]
//! gateways = ["10.0.1.1", "fd00:1::1"] # optional default routes
//! offload = false                      # optional virtio-net offloads
//! max_burst = 0                        # optional TCP segments per poll (0: no limit)
//!
//! [host]                               # the role's own section, named after the role
//! ```
//!
//! Unknown keys are errors; every error names the file, the key and the line.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};
use svcroute_stack::runtime::{PortConfig, MAX_ADDRS};

/// One `[[port]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PortFile {
    pub(crate) tap: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) mac: Option<String>,
    #[serde(default)]
    pub(crate) addrs: Vec<String>,
    #[serde(default)]
    pub(crate) gateways: Vec<String>,
    #[serde(default)]
    pub(crate) offload: bool,
    #[serde(default)]
    pub(crate) max_burst: usize,
    #[serde(default)]
    pub(crate) link: LinkKind,
}

/// How a port reaches its interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LinkKind {
    /// A TAP device (`phy::tap`).
    #[default]
    Tap,
    /// Any interface through an AF_PACKET socket with mapped rings
    /// (`phy::packet`): a veth, a microVM's `eth0`.
    Packet,
}

/// A whole node file for the role whose section is `R`.
pub(crate) trait NodeFile: DeserializeOwned {
    /// The node name.
    fn name(&self) -> &str;
    /// Microseconds to keep polling after work before sleeping (0: none).
    fn busy_poll_us(&self) -> u64;
    /// The ports.
    fn ports(&self) -> &[PortFile];
}

/// Define the file struct of one role: `name`, `[[port]]` and `[<role>]`.
macro_rules! node_file {
    ($file:ident, $field:ident, $cfg:ty) => {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $file {
            pub(crate) name: String,
            #[serde(default)]
            pub(crate) busy_poll_us: u64,
            #[serde(rename = "port", default)]
            pub(crate) ports: Vec<$crate::config::PortFile>,
            #[serde(default)]
            pub(crate) $field: $cfg,
        }
        impl $crate::config::NodeFile for $file {
            fn name(&self) -> &str {
                &self.name
            }
            fn busy_poll_us(&self) -> u64 {
                self.busy_poll_us
            }
            fn ports(&self) -> &[$crate::config::PortFile] {
                &self.ports
            }
        }
    };
}

node_file!(HostFile, host, svcroute_host::HostConfig);
node_file!(FwdFile, fwd, svcroute_fwd::FwdConfig);
node_file!(NrFile, nr, svcroute_nr::NrConfig);
node_file!(NsffFile, nsff, svcroute_nsff::NsffConfig);
node_file!(MdaFile, mda, svcroute_mda::driver::MdaConfig);
node_file!(SarFile, sar, svcroute_sar::SarConfig);
node_file!(SagFile, sag, svcroute_sar::SarConfig);
node_file!(ShimFile, shim, svcroute_host::rosa::tun::TunConfig);

/// The `shim` role of a node file (TUN mode): its one `[[port]]` (the TAP
/// on the client's segment) and the role, names mapped. The TUN port's
/// config comes from [`shim_tun_port`] once the TAP's MTU is known.
pub(crate) fn shim_role(f: &ShimFile) -> Result<(PortConfig, svcroute_host::rosa::tun::TunShim)> {
    if f.ports.len() != 1 {
        bail!(
            "a shim node has exactly one [[port]] (the TAP on the client's segment), not {}",
            f.ports.len()
        );
    }
    let cfg = port_config(&f.name, 0, &f.ports[0]).context("[[port]] #1")?;
    let info = svcroute_host::rosa::PortInfo {
        mac: cfg.mac,
        addrs: cfg.addrs.clone(),
        gateways: cfg.gateways.clone(),
    };
    let mut shim = f.shim.clone();
    // A fresh flow-label key per start, unless the file fixes one.
    shim.flow_label_seed.get_or_insert(fresh_seed()?);
    let role = svcroute_host::rosa::tun::TunShim::new(&shim, info)
        .map_err(|e| anyhow::anyhow!("[shim]: {e}"))?;
    Ok((cfg, role))
}

/// The runtime's config of a shim's TUN port: no address (the kernel has
/// it), nothing for its smoltcp to say.
pub(crate) fn shim_tun_port(f: &ShimFile, mtu: usize) -> Result<PortConfig> {
    Ok(PortConfig {
        name: f.shim.tun.clone(),
        mac: derived_mac(&f.name, 1),
        addrs: Vec::new(),
        gateways: Vec::new(),
        mtu,
        max_burst: None,
        random_seed: Some(fresh_seed()?),
    })
}

/// Check an `[mda]` section the way the node would at start, touching no
/// disk: a directory agent with an in-memory store.
pub(crate) fn check_mda(f: &MdaFile) -> Result<()> {
    svcroute_mda::driver::Mda::new(
        &f.name,
        f.mda.clone(),
        Box::new(svcroute_mda::driver::MemStore::default()),
        Vec::new(),
        0,
    )
    .map(drop)
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The `sar` role of a node file: its `[sar]` section checked against the
/// file's ports (neighbours on-link, addresses owned, no IPv6 gateways).
pub(crate) fn sar_role(f: &SarFile) -> Result<svcroute_sar::SarNode> {
    let ports = f
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| port_config(&f.name, i, p))
        .collect::<Result<Vec<_>>>()?;
    svcroute_sar::SarNode::new(&f.name, &f.sar, &ports).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Check a `[sar]` section the way the node would at start.
pub(crate) fn check_sar(f: &SarFile) -> Result<()> {
    sar_role(f).map(drop)
}

/// The `sag` role of a node file: its `[sag]` section (the keys of
/// `[sar]` plus `[sag.gateway]`) checked against the file's ports.
pub(crate) fn sag_role(f: &SagFile) -> Result<svcroute_sar::SarNode> {
    let ports = f
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| port_config(&f.name, i, p))
        .collect::<Result<Vec<_>>>()?;
    svcroute_sar::SarNode::new_sag(&f.name, &f.sag, &ports).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Check a `[sag]` section the way the node would at start.
pub(crate) fn check_sag(f: &SagFile) -> Result<()> {
    sag_role(f).map(drop)
}

/// Read and validate a node file.
pub(crate) fn load<F: NodeFile>(path: &Path) -> Result<F> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_str(&text, &path.display().to_string())
}

/// Parse and validate a node file held in memory (`svcroute lab` generates
/// them); `origin` names it in errors, like the path does for [`load`].
pub(crate) fn parse_str<F: NodeFile>(text: &str, origin: &str) -> Result<F> {
    let file: F = toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    validate_name(file.name()).with_context(|| format!("{origin}: key `name`"))?;
    if file.busy_poll_us() > 1_000_000 {
        bail!("{origin}: key `busy_poll_us`: at most 1000000 (one second)");
    }
    if file.ports().is_empty() {
        bail!("{origin}: no [[port]]: a node needs at least one TAP");
    }
    for (i, p) in file.ports().iter().enumerate() {
        port_config(file.name(), i, p).with_context(|| format!("{origin}: [[port]] #{}", i + 1))?;
    }
    Ok(file)
}

/// Node names become socket and log file names.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        bail!("node name {name:?} must be 1..32 of [A-Za-z0-9_-]");
    }
    Ok(())
}

/// Turn a port entry into the runtime's port config (MTU filled in later from
/// the link).
pub(crate) fn port_config(node: &str, index: usize, p: &PortFile) -> Result<PortConfig> {
    if p.tap.is_empty() || p.tap.len() > 15 {
        bail!("key `tap`: {:?} must be a 1..15 byte interface name", p.tap);
    }
    let mac = match &p.mac {
        Some(m) => m
            .parse::<EthernetAddress>()
            .ok()
            .filter(|m| m.is_unicast())
            .with_context(|| format!("key `mac`: {m:?} is not a unicast MAC address"))?,
        None => derived_mac(node, index),
    };
    if p.offload && p.link == LinkKind::Packet {
        bail!("key `offload`: virtio-net offloads are a TAP's; not with link = \"packet\"");
    }
    if p.addrs.len() > MAX_ADDRS {
        bail!("key `addrs`: at most {MAX_ADDRS} addresses per port");
    }
    let addrs = p
        .addrs
        .iter()
        .map(|a| {
            a.parse::<IpCidr>()
                .ok()
                .with_context(|| format!("key `addrs`: {a:?} is not an address/prefix"))
        })
        .collect::<Result<Vec<_>>>()?;
    let gateways = p
        .gateways
        .iter()
        .map(|a| {
            a.parse::<IpAddress>()
                .ok()
                .with_context(|| format!("key `gateways`: {a:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PortConfig {
        name: p.name.clone().unwrap_or_else(|| format!("eth{index}")),
        mac,
        addrs,
        gateways,
        mtu: 1500,
        max_burst: (p.max_burst > 0).then_some(p.max_burst),
        random_seed: Some(fresh_seed()?),
    })
}

/// 64 bits from the system's random source, for smoltcp's random numbers
/// (initial sequence numbers differ across restarts of the same node) and
/// the nSFF's first transaction ID.
/// The wall clock now, µs since the UNIX epoch: the `epoch_us` of a role
/// whose monotonic clock starts at 0 just after it is built (as
/// `stack::runtime::run`'s does), for its replay-protected sequence numbers.
#[allow(clippy::disallowed_methods)] // the binary is where real time enters
pub(crate) fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn fresh_seed() -> Result<u64> {
    use ring::rand::SecureRandom;
    let mut b = [0; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| anyhow::anyhow!("the system random source failed"))?;
    Ok(u64::from_le_bytes(b))
}

/// A stable locally administered MAC from node name and port index.
pub(crate) fn derived_mac(node: &str, index: usize) -> EthernetAddress {
    let mut h: u32 = 0x811c_9dc5;
    for b in node.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let h = h.to_be_bytes();
    EthernetAddress([0x02, h[0], h[1], h[2], h[3], index as u8])
}

#[cfg(test)]
mod test {
    use super::*;

    fn parse(text: &str) -> Result<HostFile> {
        let dir = std::env::temp_dir().join(format!("svcroute-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let p = dir.join(format!(
            "{:x}.toml",
            text.len() * 31 + text.as_bytes()[0] as usize
        ));
        std::fs::write(&p, text)?;
        let r = load::<HostFile>(&p);
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn a_good_file_loads() {
        let f = parse(
            "name = \"h1\"\n[[port]]\ntap = \"h1-0\"\naddrs = [\"10.0.0.2/24\", \"fd00::2/64\"]\n\
             gateways = [\"10.0.0.1\"]\n[host]\nbody_size = 10\n",
        )
        .unwrap();
        assert_eq!(f.name, "h1");
        assert_eq!(f.host.body_size, 10);
        let pc = port_config(&f.name, 0, &f.ports[0]).unwrap();
        assert_eq!(pc.addrs.len(), 2);
        assert_eq!(pc.mac, derived_mac("h1", 0));
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = parse("name = \"h1\"\n[[port]]\ntap = \"h1-0\"\nadrs = []\n").unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("adrs") && msg.contains("line 4"), "{msg}");
        let e = parse("name = \"h1\"\n[[port]]\ntap = \"h1-0\"\naddrs = [\"10.0.0.300/24\"]\n")
            .unwrap_err();
        assert!(format!("{e:#}").contains("10.0.0.300/24"), "{e:#}");
        let e = parse("name = \"h 1\"\n[[port]]\ntap = \"x\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("name"), "{e:#}");
        let e = parse("name = \"h1\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("port"), "{e:#}");
    }
}
