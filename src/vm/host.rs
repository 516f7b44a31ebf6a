//! `svcroute run ROLE -c FILE --vm`: the host half of a microVM node.
//!
//! One process per VM node, which is the node as far as anyone on the host
//! can tell: it is the pid `lab status` watches, it serves the usual control
//! socket, and it exits when the VM does (for whatever reason: a crashed
//! node powers its VM off). It
//!
//! - checks the node file with the role's own loader, as `run` would;
//! - starts QEMU (`-M microvm`, one virtio-net NIC per `[[port]]` on that
//!   port's TAP with the port's MAC, a virtio-serial port for control, the
//!   console on this process's stdout, i.e. the node's log), under
//!   `setpriv --pdeathsig` so the VM cannot outlive it;
//! - answers the guest init's hello with the role, the node file and the
//!   MACs;
//! - maps each control connection onto the serial port: the request goes
//!   out as `<id> <request>`, the answer that comes back as `<id> <json>`
//!   goes to that connection (`ping` answers carry this process's pid and a
//!   `vm` object with the accelerator, memory and boot times).
//!
//! Threads are fine here: this is not a node, it moves a few control lines.

#![allow(clippy::disallowed_methods)] // a driver: it boots a VM in real time

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{accel, Accel, CTL_PORT};
use crate::config::{self, LinkKind, PortFile};
use crate::RoleName;

/// Options of `run --vm`.
#[derive(Debug, Default)]
pub(crate) struct VmOptions {
    /// Guest memory [default: [`DEFAULT_MEMORY_MIB`]].
    pub(crate) memory_mib: Option<u32>,
    /// The image directory [default: [`Image::find`]].
    pub(crate) image: Option<PathBuf>,
    /// The accelerator [default: [`accel::choose`]].
    pub(crate) accel: Option<Accel>,
}

/// The guest memory a node gets unless told otherwise: the smallest every
/// role boots and serves with (`scripts/bench-microvm` found 96 MiB for
/// host, fwd, nr, nsff, mda and sar alike, 88 failing: the kernel and the
/// unpacking initramfs take most of it; see docs/microvm.md).
pub(crate) const DEFAULT_MEMORY_MIB: u32 = 96;

/// A bootable image: `vmlinuz` and `initrd.img` (see `qemu/build-image`).
#[derive(Debug, Clone)]
pub(crate) struct Image {
    /// The kernel.
    pub(crate) kernel: PathBuf,
    /// The initramfs with this binary as its init.
    pub(crate) initrd: PathBuf,
}

impl Image {
    /// The image in `dir`, else `$SVCROUTE_VM_IMAGE`, else `microvm/`
    /// beside this binary (where `qemu/build-image` puts it).
    pub(crate) fn find(dir: Option<&Path>) -> Result<Self> {
        let dir = match dir {
            Some(d) => d.to_owned(),
            None => match std::env::var_os("SVCROUTE_VM_IMAGE") {
                Some(d) => PathBuf::from(d),
                None => std::env::current_exe()
                    .context("finding the svcroute binary")?
                    .parent()
                    .map(|p| p.join("microvm"))
                    .unwrap_or_default(),
            },
        };
        let image = Self {
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.img"),
        };
        for f in [&image.kernel, &image.initrd] {
            if !f.is_file() {
                bail!(
                    "no microVM image: {} is missing; build one with `scripts/setup --vm` \
                     (qemu/build-image)",
                    f.display()
                );
            }
        }
        Ok(image)
    }
}

/// QEMU arguments every boot of `image` shares: the machine, memory,
/// kernel, initramfs and command line (plus `extra`), no default devices.
pub(crate) fn base_args(image: &Image, memory_mib: u32, extra: &str) -> Vec<String> {
    // Under TCG the kernel hangs calibrating the TSC without the hint.
    let cmdline = format!("console=ttyS0 tsc_early_khz=2000000 panic=-1 {extra}");
    [
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-M",
        "microvm,pit=on,pic=on,rtc=on",
        "-smp",
        "1",
        "-m",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        memory_mib.to_string(),
        "-kernel".into(),
        image.kernel.display().to_string(),
        "-initrd".into(),
        image.initrd.display().to_string(),
        "-append".into(),
        cmdline,
    ])
    .collect()
}

/// What `run --vm` needs of any role's node file.
#[derive(Debug, Deserialize)]
struct View {
    name: String,
    #[serde(rename = "port", default)]
    ports: Vec<PortFile>,
}

/// State shared by the supervisor's threads.
struct Shared {
    /// Requests sent to the guest, waiting for their answer.
    pending: Mutex<HashMap<u64, Sender<Value>>>,
    /// The serial port's host end, for writing.
    serial: Mutex<UnixStream>,
    next_id: AtomicU64,
    /// The answer to the guest's hello.
    setup: Value,
    /// The `vm` object of `ping` answers (boot times filled in as they come).
    info: Mutex<Value>,
    started: Instant,
    node: String,
    role: RoleName,
}

/// Run node file `path` of `role` as a microVM until the VM stops.
pub(crate) fn run(
    role: RoleName,
    path: &Path,
    pcap: Option<&Path>,
    ctl: Option<PathBuf>,
    opts: VmOptions,
) -> Result<()> {
    if role == RoleName::Shim {
        bail!(
            "role shim cannot run in a VM: its TUN serves a kernel namespace of this host \
             (docs/shim.md)"
        );
    }
    crate::validate(role, path)?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let view: View =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut macs = Vec::new();
    for (i, p) in view.ports.iter().enumerate() {
        if p.link != LinkKind::Tap {
            bail!(
                "{}: [[port]] #{}: a VM's NICs are TAPs (the guest reaches them over AF_PACKET \
                 itself); drop `link`",
                path.display(),
                i + 1
            );
        }
        // QEMU and sysfs write MACs with colons; smoltcp with dashes.
        let mac = config::port_config(&view.name, i, p)?.mac.to_string();
        macs.push(mac.replace('-', ":"));
    }
    let image = Image::find(opts.image.as_deref())?;
    let accel = opts.accel.unwrap_or_else(|| accel::choose(&image));
    let memory = opts.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB);
    let control =
        ctl.unwrap_or_else(|| Path::new(crate::CTL_DIR).join(format!("{}.sock", view.name)));
    let dir = control.parent().unwrap_or(Path::new(".")).to_owned();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let serial_path = dir.join(format!("{}.vm.sock", view.name));
    let _ = std::fs::remove_file(&serial_path);

    // The console is a terminal to the guest's logger: no colours.
    let mut extra = String::from("quiet RUST_LOG_STYLE=never");
    if let Ok(l) = std::env::var("RUST_LOG") {
        // The kernel hands `KEY=VALUE` words it does not know to init's
        // environment.
        if !l.contains(char::is_whitespace) {
            extra.push_str(&format!(" RUST_LOG={l}"));
        }
    }
    let mut args: Vec<String> = accel.qemu_args().iter().map(|s| s.to_string()).collect();
    args.extend(base_args(&image, memory, &extra));
    args.extend(
        [
            "-chardev",
            "stdio,id=con,signal=off",
            "-serial",
            "chardev:con",
            "-device",
            "virtio-serial-device",
        ]
        .map(String::from),
    );
    args.push("-chardev".into());
    args.push(format!(
        "socket,id=ctl,path={},server=on,wait=off",
        serial_path.display()
    ));
    args.push("-device".into());
    args.push(format!("virtserialport,chardev=ctl,name={CTL_PORT}"));
    for (i, (p, mac)) in view.ports.iter().zip(&macs).enumerate() {
        args.push("-netdev".into());
        args.push(format!(
            "tap,id=n{i},ifname={},script=no,downscript=no,vnet_hdr=off",
            p.tap
        ));
        args.push("-device".into());
        // Plain frames both ways: no offloads to negotiate, so the host
        // kernel completes checksums and never merges segments.
        args.push(format!(
            "virtio-net-device,netdev=n{i},mac={mac},csum=off,guest_csum=off,\
             guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off"
        ));
        if let Some(pcap) = pcap {
            let file = if i == 0 {
                pcap.display().to_string()
            } else {
                format!("{}.{i}", pcap.display())
            };
            args.push("-object".into());
            args.push(format!("filter-dump,id=d{i},netdev=n{i},file={file}"));
        }
    }
    log::info!(
        "node {} ({}) as a microVM: {} MiB, {}, {} NIC(s) on {}; image {}",
        view.name,
        role_name(role),
        memory,
        accel.name(),
        view.ports.len(),
        view.ports
            .iter()
            .map(|p| p.tap.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        image.initrd.display()
    );
    let started = Instant::now();
    let mut child = Command::new("setpriv")
        .args(["--pdeathsig", "TERM", "--", "qemu-system-x86_64"])
        .args(&args)
        .stdin(Stdio::null())
        .spawn()
        .context("starting qemu-system-x86_64 (is qemu-system-x86 installed?)")?;

    // QEMU listens on the serial socket before the guest runs.
    let serial = loop {
        match UnixStream::connect(&serial_path) {
            Ok(s) => break s,
            Err(e) => {
                if let Some(st) = child.try_wait()? {
                    bail!("QEMU exited ({st}) before the VM started");
                }
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    bail!("QEMU's serial socket {}: {e}", serial_path.display());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    let listener = bind(&control)?;
    let shared = Arc::new(Shared {
        pending: Mutex::new(HashMap::new()),
        serial: Mutex::new(serial.try_clone()?),
        next_id: AtomicU64::new(1),
        setup: json!({ "role": role_name(role), "config": text, "macs": macs }),
        info: Mutex::new(json!({
            "accel": accel.name(), "memory_mib": memory, "qemu_pid": child.id(),
            "phase": "booting", "init_ms": null, "ready_ms": null,
        })),
        started,
        node: view.name.clone(),
        role,
    });
    {
        let shared = shared.clone();
        std::thread::spawn(move || read_guest(&shared, serial));
    }
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve(&shared, conn));
            }
        });
    }
    let status = child.wait().context("waiting for QEMU")?;
    let _ = std::fs::remove_file(&control);
    let _ = std::fs::remove_file(&serial_path);
    bail!(
        "the VM of node {} stopped ({status}) after {} ms",
        view.name,
        started.elapsed().as_millis()
    )
}

fn role_name(role: RoleName) -> String {
    use clap::ValueEnum as _;
    role.to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// Bind the control socket, replacing a stale one (as the node would).
fn bind(path: &Path) -> Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!(
                "control socket {} is served by a running node",
                path.display()
            );
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))
}

/// Lines from the guest: its hello (id 0), answered with the setup, and
/// answers to the requests in flight.
fn read_guest(shared: &Shared, serial: UnixStream) {
    let mut r = BufReader::new(serial);
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return, // QEMU is gone; `run` sees it exit
            Ok(_) => {}
        }
        let Some((id, json)) = line.trim_end().split_once(' ') else {
            continue;
        };
        let (Ok(id), Ok(v)) = (id.parse::<u64>(), serde_json::from_str::<Value>(json)) else {
            log::warn!("VM {}: unreadable control line {line:?}", shared.node);
            continue;
        };
        if id == 0 {
            let ms = shared.started.elapsed().as_millis() as u64;
            let uptime = v["hello"]["uptime_ms"].as_u64();
            log::info!(
                "VM {}: init reached {ms} ms after QEMU start (guest kernel uptime {} ms); \
                 sending the node file",
                shared.node,
                uptime.map_or_else(|| "?".into(), |u| u.to_string())
            );
            {
                let mut info = lock(&shared.info);
                info["phase"] = json!("starting");
                info["init_ms"] = json!(ms);
                info["guest_uptime_ms"] = json!(uptime);
            }
            let text = format!("0 {}\n", shared.setup);
            if let Err(e) = lock(&shared.serial).write_all(text.as_bytes()) {
                log::error!("VM {}: sending the setup: {e}", shared.node);
            }
            continue;
        }
        if let Some(tx) = lock(&shared.pending).remove(&id) {
            let _ = tx.send(v);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One control connection: a request line in, one JSON answer out.
fn serve(shared: &Shared, mut conn: UnixStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.contains(&b'\n') && buf.len() <= svcroute_stack::ctl::MAX_REQUEST {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let line = line.lines().next().unwrap_or("").trim().to_owned();
    let answer = answer(shared, &line);
    let mut text = serde_json::to_vec(&answer).unwrap_or_else(|_| b"null".to_vec());
    text.push(b'\n');
    let _ = conn.write_all(&text);
}

fn answer(shared: &Shared, line: &str) -> Value {
    let cmd = line.split_whitespace().next().unwrap_or("");
    let phase = lock(&shared.info)["phase"].clone();
    if phase == "booting" {
        return if cmd == "ping" {
            json!({
                "name": shared.node, "role": role_name(shared.role), "ready": false,
                "pid": std::process::id(), "vm": lock(&shared.info).clone(),
            })
        } else {
            json!({ "error": format!("node {} is still booting its VM", shared.node) })
        };
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    lock(&shared.pending).insert(id, tx);
    let sent = lock(&shared.serial).write_all(format!("{id} {line}\n").as_bytes());
    if let Err(e) = sent {
        lock(&shared.pending).remove(&id);
        return json!({ "error": format!("VM {}: control port: {e}", shared.node) });
    }
    // As long as a client job may take (`get ... --requests N`).
    let Ok(mut v) = rx.recv_timeout(Duration::from_secs(600)) else {
        lock(&shared.pending).remove(&id);
        return json!({ "error": format!("VM {}: no answer", shared.node) });
    };
    if cmd == "ping" {
        let mut info = lock(&shared.info);
        if v["ready"] == true && info["ready_ms"].is_null() {
            let ms = shared.started.elapsed().as_millis() as u64;
            log::info!("VM {}: node ready {ms} ms after QEMU start", shared.node);
            info["ready_ms"] = json!(ms);
            info["phase"] = json!("running");
        }
        v["guest_pid"] = v["pid"].clone();
        v["pid"] = json!(std::process::id());
        v["vm"] = info.clone();
    }
    v
}
