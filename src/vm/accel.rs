//! The accelerator a microVM boots with: KVM where a probe boot works, TCG
//! everywhere else.
//!
//! `/dev/kvm` existing is not enough: on the machines this project runs on
//! it is a nested hypervisor that hangs a stock kernel in early setup. So
//! the first VM boot on a machine is a probe — the image's kernel under KVM
//! with [`super::PROBE_WORD`], which makes the init print
//! [`super::PROBE_OK`] and power off — bounded by [`PROBE_TIMEOUT`]. The
//! verdict is kept in `/run/svcroute/vm-accel.json` (per kernel image) until
//! the machine reboots, so later boots pay nothing.
//! `SVCROUTE_VM_ACCEL=kvm|tcg` skips the probe.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::host::Image;
use super::{PROBE_OK, PROBE_WORD};

/// Longest a KVM probe boot may take before it counts as hung. A working
/// KVM reaches the init in well under a second.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// A QEMU accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Accel {
    /// The kernel's hypervisor (`-accel kvm -cpu host`).
    Kvm,
    /// QEMU's own emulation (`-accel tcg -cpu max`).
    Tcg,
}

impl Accel {
    /// QEMU's arguments for this accelerator.
    pub(crate) fn qemu_args(self) -> [&'static str; 4] {
        match self {
            Self::Kvm => ["-accel", "kvm", "-cpu", "host"],
            Self::Tcg => ["-accel", "tcg", "-cpu", "max"],
        }
    }

    /// `kvm` or `tcg`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Verdict {
    kernel: String,
    kernel_bytes: u64,
    accel: Accel,
    probe_ms: u64,
}

fn cache_path() -> std::path::PathBuf {
    Path::new(crate::CTL_DIR).join("vm-accel.json")
}

/// The accelerator for `image` on this machine (see the module doc).
#[allow(clippy::disallowed_methods)] // a driver: the probe runs in real time
pub(crate) fn choose(image: &Image) -> Accel {
    match std::env::var("SVCROUTE_VM_ACCEL").as_deref() {
        Ok("kvm") => return Accel::Kvm,
        Ok("tcg") => return Accel::Tcg,
        _ => {}
    }
    if !Path::new("/dev/kvm").exists() {
        return Accel::Tcg;
    }
    let kernel = image.kernel.display().to_string();
    let kernel_bytes = std::fs::metadata(&image.kernel).map_or(0, |m| m.len());
    if let Some(v) = std::fs::read_to_string(cache_path())
        .ok()
        .and_then(|t| serde_json::from_str::<Verdict>(&t).ok())
        .filter(|v| v.kernel == kernel && v.kernel_bytes == kernel_bytes)
    {
        return v.accel;
    }
    let t0 = Instant::now();
    let accel = if probe(image) { Accel::Kvm } else { Accel::Tcg };
    let v = Verdict {
        kernel,
        kernel_bytes,
        accel,
        probe_ms: t0.elapsed().as_millis() as u64,
    };
    log::info!(
        "microVM accelerator: {} (KVM probe boot {} in {} ms; kept in {})",
        accel.name(),
        if accel == Accel::Kvm {
            "reached init"
        } else {
            "failed or hung"
        },
        v.probe_ms,
        cache_path().display()
    );
    if let Ok(text) = serde_json::to_string(&v) {
        let _ = std::fs::create_dir_all(crate::CTL_DIR);
        let tmp = cache_path().with_extension("tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, cache_path());
        }
    }
    accel
}

/// Boot `image` under KVM to its init and back; whether that worked.
#[allow(clippy::disallowed_methods)] // a driver: the probe runs in real time
fn probe(image: &Image) -> bool {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(Accel::Kvm.qemu_args())
        .args(super::host::base_args(
            image,
            128,
            &format!("{PROBE_WORD} quiet"),
        ))
        .args(["-serial", "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let exited = loop {
        match child.try_wait() {
            Ok(Some(_)) => break true,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => break false,
        }
    };
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = reader.join().unwrap_or_default();
    exited && text.contains(PROBE_OK)
}
