//! Nodes as QEMU microVMs (`svcroute run ROLE --vm`, `vm = true` in a lab;
//! see `docs/microvm.md`).
//!
//! ```text
//!   host (lab namespace)                        guest (microVM, -M microvm)
//!   svcroute run ROLE --vm  ── spawns ──▶ qemu-system-x86_64
//!     │ <node>.sock (the usual ctl socket)        │ kernel: Debian's cloud kernel
//!     │   ⇅ "<id> <request>" / "<id> <json>"      │ /init = this binary (pid 1):
//!     └── <node>.vm.sock ══ virtio-serial ══════▶ │   mounts, loads virtio modules,
//!   TAP <node>-<i> ══ virtio-net (one per port) ▶ │   asks the host for its node file,
//!                                                 │   runs the role on eth<i> (AF_PACKET)
//! ```
//!
//! - [`host`]: the supervisor on the host — one process per VM node, the
//!   node's pid as far as the lab is concerned: starts QEMU, maps the control
//!   socket onto the serial port, hands the guest its node file, exits when
//!   the VM does.
//! - [`guest`]: the init inside the VM.
//! - [`accel`]: KVM when a probe boot works on this machine, else TCG.
//!
//! One image serves every role: the kernel and an initramfs holding this
//! binary, its shared libraries and the virtio modules (`qemu/build-image`).

pub(crate) mod accel;
pub(crate) mod guest;
pub(crate) mod host;

pub(crate) use accel::Accel;

/// Name of the virtio-serial port carrying control requests.
pub(crate) const CTL_PORT: &str = "svcroute.ctl";

/// Kernel command line word that makes the init power off at once (the
/// accelerator probe).
pub(crate) const PROBE_WORD: &str = "svcroute.probe";

/// What the init prints when it ran under [`PROBE_WORD`].
pub(crate) const PROBE_OK: &str = "svcroute: probe boot reached init";
