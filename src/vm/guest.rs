//! The init of a microVM: this binary as pid 1 of the image's initramfs.
//!
//! 1. mount `/dev` (devtmpfs), `/proc`, `/sys`;
//! 2. under `svcroute.probe` on the kernel command line: say so and power
//!    off (the accelerator probe, [`super::accel`]);
//! 3. keep the kernel's IPv6 off every interface to come, then load the
//!    modules listed in `/lib/modules/svcroute.list` (dependency order;
//!    parameters `MODULE.KEY=VALUE` from the command line, as modprobe
//!    would pass them);
//! 4. open the virtio-serial port named [`super::CTL_PORT`], send a hello
//!    (`0 {"hello": ...}`), and read the host's answer: the role, the node
//!    file and each port's MAC;
//! 5. point each `[[port]]` at the interface with that MAC (`eth<i>`) over
//!    AF_PACKET, and run the role there with the serial port as its
//!    control channel, as `svcroute run` would.
//!
//! Whatever ends the node, the init powers the machine off, so QEMU exits
//! and the host supervisor with it: a node that stops is a VM that stops.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::ValueEnum as _;
use serde_json::{json, Value};
use svcroute_stack::phy::guest;

use super::{CTL_PORT, PROBE_OK, PROBE_WORD};
use crate::{Control, RoleName};

/// The init's entry point. Never returns while the machine runs.
pub(crate) fn main() -> ExitCode {
    if let Err(e) = boot() {
        eprintln!("svcroute init: {e:#}");
    }
    let e = guest::power_off();
    eprintln!("svcroute init: power off failed: {e}");
    loop {
        // pid 1 must not exit (the kernel would panic): wait for the end.
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn boot() -> Result<()> {
    for (src, target, fs) in [
        ("devtmpfs", "/dev", "devtmpfs"),
        ("proc", "/proc", "proc"),
        ("sysfs", "/sys", "sysfs"),
    ] {
        std::fs::create_dir_all(target).ok();
        if let Err(e) = guest::mount(src, target, fs) {
            // A kernel that mounted it already (devtmpfs automount).
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(e.into());
            }
        }
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").context("reading /proc/cmdline")?;
    if cmdline.split_whitespace().any(|w| w == PROBE_WORD) {
        println!("{PROBE_OK}");
        return Ok(());
    }
    // Before any NIC exists: no link-local address, no DAD, no router
    // solicitation from the kernel on them. The node is the IP stack.
    for knob in ["default", "all"] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{knob}/disable_ipv6"), "1");
    }
    load_modules(&cmdline)?;
    let port_path = find_port(CTL_PORT, Duration::from_secs(10))?;
    let port = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&port_path)
        .with_context(|| format!("opening {}", port_path.display()))?;
    let uptime_ms = uptime_ms();
    let hello =
        json!({ "hello": { "uptime_ms": uptime_ms, "version": env!("CARGO_PKG_VERSION") } });
    (&port)
        .write_all(format!("0 {hello}\n").as_bytes())
        .context("sending the hello")?;
    let setup = read_setup(&port)?;
    let role_name = setup["role"].as_str().context("setup without a role")?;
    let role = RoleName::from_str(role_name, true)
        .map_err(|e| anyhow::anyhow!("setup names role {role_name:?}: {e}"))?;
    let text = setup["config"]
        .as_str()
        .context("setup without a node file")?;
    let macs: Vec<String> = setup["macs"]
        .as_array()
        .context("setup without MACs")?
        .iter()
        .filter_map(|m| m.as_str().map(|m| m.to_lowercase().replace('-', ":")))
        .collect();
    let text = guest_node_file(text, &macs, &interfaces()?)?;
    let dir = Path::new("/etc/svcroute");
    std::fs::create_dir_all(dir)?;
    let path = dir.join("node.toml");
    std::fs::write(&path, text).context("writing the node file")?;
    let state = PathBuf::from("/var/lib/svcroute/node");
    crate::run(
        role,
        &path,
        None,
        Control::Serial(Arc::new(port)),
        Some(state),
    )
}

/// Load every module of `/lib/modules/svcroute.list`, in order.
fn load_modules(cmdline: &str) -> Result<()> {
    let list = std::fs::read_to_string("/lib/modules/svcroute.list")
        .context("reading /lib/modules/svcroute.list")?;
    for rel in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = Path::new("/lib/modules").join(rel);
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .replace('-', "_");
        let params = module_params(cmdline, &name);
        let f = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        guest::load_module(&f, &params).with_context(|| format!("loading {}", path.display()))?;
    }
    Ok(())
}

/// The `MODULE.KEY=VALUE` words of the command line for `module`, as
/// `KEY=VALUE ...` (`-` and `_` are the same in module names).
fn module_params(cmdline: &str, module: &str) -> String {
    cmdline
        .split_whitespace()
        .filter_map(|w| {
            let (m, rest) = w.split_once('.')?;
            (m.replace('-', "_") == module && rest.contains('=')).then_some(rest)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `/dev` node of the virtio-serial port called `name`, once it exists.
fn find_port(name: &str, within: Duration) -> Result<PathBuf> {
    let steps = within.as_millis() / 20;
    for _ in 0..steps.max(1) {
        if let Ok(rd) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.flatten() {
                let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                let dev = Path::new("/dev").join(e.file_name());
                if n.trim() == name && dev.exists() {
                    return Ok(dev);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("no virtio-serial port named {name:?} appeared (is virtio_console loaded?)")
}

/// Read the host's answer to the hello: the line `0 {json}`. Byte by byte,
/// so that control requests right behind it stay in the port for the node.
fn read_setup(mut port: &File) -> Result<Value> {
    let mut line = Vec::new();
    let mut idle = 0;
    // Until the host end connects, reads give end of file.
    while idle < 1000 {
        let mut b = [0u8; 1];
        if port.read(&mut b).context("reading the setup")? == 0 {
            idle += 1;
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if b[0] != b'\n' {
            line.push(b[0]);
            continue;
        }
        let line = String::from_utf8_lossy(&line);
        let Some(json) = line.trim_end().strip_prefix("0 ") else {
            bail!("expected the setup line, got {line:?}");
        };
        return serde_json::from_str(json).context("parsing the setup");
    }
    bail!("the host sent no setup within 10 s")
}

/// (interface name, MAC) of every non-loopback interface.
fn interfaces() -> Result<Vec<(String, String)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/class/net").context("reading /sys/class/net")? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "lo" {
            continue;
        }
        let mac = std::fs::read_to_string(e.path().join("address")).unwrap_or_default();
        v.push((name, mac.trim().to_lowercase()));
    }
    Ok(v)
}

/// The node file as the guest runs it: each `[[port]]` on the interface
/// whose MAC the host gave that port's NIC, over AF_PACKET.
fn guest_node_file(text: &str, macs: &[String], ifaces: &[(String, String)]) -> Result<String> {
    let mut root: toml::Table = toml::from_str(text).context("parsing the node file")?;
    let ports = root
        .get_mut("port")
        .and_then(toml::Value::as_array_mut)
        .context("node file without [[port]]")?;
    if ports.len() != macs.len() {
        bail!("{} [[port]]s but {} NICs", ports.len(), macs.len());
    }
    for (i, (p, mac)) in ports.iter_mut().zip(macs).enumerate() {
        let t = p.as_table_mut().context("[[port]] is not a table")?;
        let Some((ifname, _)) = ifaces.iter().find(|(_, m)| m == mac) else {
            bail!(
                "port #{}: no interface has MAC {mac} (have: {ifaces:?})",
                i + 1
            );
        };
        t.insert("tap".into(), ifname.clone().into());
        t.insert("link".into(), "packet".into());
        t.remove("offload");
    }
    toml::to_string(&root).context("writing the node file")
}

fn uptime_ms() -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| (s * 1000.0) as u64)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn module_parameters_come_from_the_command_line() {
        let cmd = "console=ttyS0 virtio_mmio.device=4K@0xd0000000:5 virtio-mmio.x=1 foo.bar";
        assert_eq!(
            module_params(cmd, "virtio_mmio"),
            "device=4K@0xd0000000:5 x=1"
        );
        assert_eq!(module_params(cmd, "virtio_net"), "");
    }

    #[test]
    fn ports_move_to_the_interface_with_their_mac() {
        let text = "name = \"n\"\n[[port]]\ntap = \"n-0\"\noffload = true\n\
                    [[port]]\ntap = \"n-1\"\n[host]\n";
        let macs = [
            "02:00:00:00:00:01".to_owned(),
            "02:00:00:00:00:02".to_owned(),
        ];
        let ifaces = [
            ("eth0".to_owned(), "02:00:00:00:00:02".to_owned()),
            ("eth1".to_owned(), "02:00:00:00:00:01".to_owned()),
        ];
        let out = guest_node_file(text, &macs, &ifaces).unwrap();
        let f: crate::config::HostFile = crate::config::parse_str(&out, "guest").unwrap();
        assert_eq!(f.ports[0].tap, "eth1");
        assert_eq!(f.ports[1].tap, "eth0");
        assert!(f
            .ports
            .iter()
            .all(|p| p.link == crate::config::LinkKind::Packet && !p.offload));
        let e = guest_node_file(text, &macs[..1], &ifaces).unwrap_err();
        assert!(format!("{e}").contains("2 [[port]]s but 1 NICs"), "{e}");
        let e = guest_node_file(text, &macs, &ifaces[..1]).unwrap_err();
        assert!(format!("{e}").contains("02:00:00:00:00:01"), "{e}");
    }
}
