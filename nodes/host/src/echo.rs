//! UDP echo client jobs: `svcroute ctl h1 echo udp://ADDR:PORT` or, by
//! ROSA, `udp://SERVICE:PORT`.
//!
//! A job owns one UDP socket on an ephemeral port (so, for ROSA, one
//! transaction) and sends `count` datagrams one at a time: the next when
//! the echo of the last came back, or when it timed out (counted `lost`).
//! Each datagram starts with its sequence number, so a late echo of an
//! earlier one is not taken for the current one. The control request is
//! answered when the job ends.

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpEndpoint;
use svcroute_stack::runtime::Context;

use crate::client::Destination;
use crate::latency::Latencies;
use crate::url::{Url, UrlHost};

/// Most datagrams one job sends.
pub const MAX_COUNT: u64 = 1_000_000;
/// Largest datagram, bytes.
pub const MAX_SIZE: usize = 1400;
/// Most echo jobs at once.
pub const MAX_JOBS: usize = 16;

/// What an echo job does, parsed from the control command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoSpec {
    /// The target: an address or a service name.
    pub host: UrlHost,
    /// The UDP port.
    pub port: u16,
    /// Datagrams to send.
    pub count: u64,
    /// Bytes per datagram (at least 4: the sequence number).
    pub size: usize,
    /// How long to wait for each echo.
    pub timeout: Duration,
    /// Reach a name by ROSA without `[host.rosa] ingress` (`--rosa`).
    pub rosa: bool,
    /// The service name to ask for instead of the host (`--service`).
    pub service: Option<String>,
}

impl EchoSpec {
    /// Parse `echo udp://HOST[:PORT] [--count N] [--size B] [--timeout-ms T]
    /// [--rosa] [--service NAME]` (port 7 by default).
    pub fn parse(args: &[String]) -> Result<Self, String> {
        if args.first().map(String::as_str) != Some("echo") {
            return Err("expected echo udp://HOST[:PORT] [options]".into());
        }
        let text = args.get(1).ok_or("missing udp://HOST[:PORT]")?;
        let rest = text
            .strip_prefix("udp://")
            .ok_or_else(|| format!("{text:?}: expected udp://HOST[:PORT]"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err(format!("{text:?}: a UDP target has no path"));
        }
        let url = Url::parse(&format!("http://{rest}/"))?;
        let explicit_port = !rest.ends_with(']') && rest.rsplit_once(':').is_some();
        let mut spec = Self {
            host: url.host,
            port: if explicit_port { url.port } else { 7 },
            count: 1,
            size: 64,
            timeout: Duration::from_secs(1),
            rosa: false,
            service: None,
        };
        let mut it = args[2..].iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str, lo: u64, hi: u64| -> Result<u64, String> {
                let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
                v.parse::<u64>()
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| format!("{name}: {v:?} is not a number in {lo}..={hi}"))
            };
            match flag.as_str() {
                "--count" | "-n" => spec.count = value("--count", 1, MAX_COUNT)?,
                "--size" => spec.size = value("--size", 4, MAX_SIZE as u64)? as usize,
                "--timeout-ms" => {
                    spec.timeout = Duration::from_millis(value("--timeout-ms", 1, 3_600_000)?);
                }
                "--rosa" => spec.rosa = true,
                "--service" => {
                    let v = it.next().ok_or("--service needs a value")?;
                    spec.service = Some(v.clone());
                    spec.rosa = true;
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if spec.rosa && spec.service_name().is_none() {
            return Err(format!(
                "--rosa: {text} names an address; give a service name or --service NAME"
            ));
        }
        Ok(spec)
    }

    /// The ROSA service the job talks to, if any.
    pub fn service_name(&self) -> Option<&str> {
        match (&self.service, &self.host) {
            (Some(s), _) => Some(s),
            (None, UrlHost::Name(n)) => Some(n),
            (None, UrlHost::Addr(_)) => None,
        }
    }
}

#[derive(Debug)]
struct Job {
    ctl_id: u64,
    spec: EchoSpec,
    dest: Option<Destination>,
    port: usize,
    handle: SocketHandle,
    local_port: u16,
    remote: IpEndpoint,
    started: Instant,
    /// The datagram in flight: its sequence number and when it left.
    in_flight: Option<(u32, Instant)>,
    sent: u64,
    ok: u64,
    lost: u64,
    stale: u64,
    lat: Latencies,
}

/// Every running echo job.
#[derive(Debug)]
pub struct Echoes {
    jobs: Vec<Job>,
    next_port: u16,
}

impl Default for Echoes {
    fn default() -> Self {
        Self {
            jobs: Vec::new(),
            next_port: 40000,
        }
    }
}

/// A finished job: its control request and result; the driver adds what
/// the ROSA shim knows of its flow (`local_port`).
pub(crate) struct Finished {
    pub(crate) ctl_id: u64,
    pub(crate) local_port: u16,
    pub(crate) result: Value,
}

impl Echoes {
    /// Jobs still running.
    pub fn running(&self) -> usize {
        self.jobs.len()
    }

    /// Start a job toward `dest` (a ROSA service) or the spec's address.
    pub(crate) fn start(
        &mut self,
        cx: &mut Context<'_>,
        ctl_id: u64,
        spec: EchoSpec,
        dest: Option<Destination>,
    ) -> Result<(), String> {
        if self.jobs.len() >= MAX_JOBS {
            return Err(format!("{MAX_JOBS} echo jobs already running"));
        }
        let (port, addr) = match (&dest, &spec.host) {
            (Some(d), _) => (d.port, d.addr),
            (None, UrlHost::Addr(a)) => (crate::client::route(cx.ports, *a), *a),
            (None, UrlHost::Name(n)) => return Err(format!("{n}: no address to send to")),
        };
        let p = cx.ports.get_mut(port).ok_or("no such port")?;
        let mk = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 4], vec![0; 4 * 2048]);
        let mut sock = udp::Socket::new(mk(), mk());
        let mut local = 0;
        for _ in 0..1024 {
            let candidate = self.next_port;
            self.next_port = if self.next_port >= 48999 {
                40000
            } else {
                self.next_port + 1
            };
            if !self.jobs.iter().any(|j| j.local_port == candidate) {
                local = candidate;
                break;
            }
        }
        if local == 0 || sock.bind(local).is_err() {
            return Err("no free local UDP port".into());
        }
        let handle = p.sockets.add(sock);
        cx.stats.bump("echo.jobs");
        self.jobs.push(Job {
            ctl_id,
            remote: IpEndpoint::new(addr, spec.port),
            spec,
            dest,
            port,
            handle,
            local_port: local,
            started: cx.now,
            in_flight: None,
            sent: 0,
            ok: 0,
            lost: 0,
            stale: 0,
            lat: Latencies::default(),
        });
        Ok(())
    }

    /// Drive every job; the finished ones are returned.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> (bool, Vec<Finished>) {
        let mut any = false;
        let mut done = Vec::new();
        self.jobs.retain_mut(|job| {
            let sock = cx.ports[job.port]
                .sockets
                .get_mut::<udp::Socket>(job.handle);
            let mut buf = [0_u8; 2048];
            while let Ok((n, _)) = sock.recv_slice(&mut buf) {
                any = true;
                let seq = (n >= 4).then(|| u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
                match (job.in_flight, seq) {
                    (Some((want, since)), Some(got)) if want == got && n == job.spec.size => {
                        job.ok += 1;
                        job.lat.record((cx.now - since).total_micros());
                        job.in_flight = None;
                    }
                    _ => job.stale += 1,
                }
            }
            if let Some((_, since)) = job.in_flight {
                if cx.now - since >= job.spec.timeout {
                    job.lost += 1;
                    job.in_flight = None;
                    any = true;
                }
            }
            if job.in_flight.is_none() && job.sent < job.spec.count {
                let seq = job.sent as u32;
                let mut data = vec![b'e'; job.spec.size];
                data[..4].copy_from_slice(&seq.to_be_bytes());
                match sock.send_slice(&data, job.remote) {
                    Ok(()) => {
                        job.sent += 1;
                        job.in_flight = Some((seq, cx.now));
                    }
                    Err(_) => {
                        job.sent += 1;
                        job.lost += 1;
                        cx.stats.drop("echo_tx_full");
                    }
                }
                any = true;
            }
            if job.in_flight.is_some() || job.sent < job.spec.count {
                return true;
            }
            let sockets = &mut cx.ports[job.port].sockets;
            sockets.get_mut::<udp::Socket>(job.handle).close();
            sockets.remove(job.handle);
            done.push(Finished {
                ctl_id: job.ctl_id,
                local_port: job.local_port,
                result: job.result(cx.now),
            });
            false
        });
        (any, done)
    }

    /// When a datagram in flight times out.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.jobs
            .iter()
            .filter_map(|j| j.in_flight.map(|(_, since)| since + j.spec.timeout))
            .min()
    }
}

impl Job {
    fn result(&self, now: Instant) -> Value {
        json!({
            "target": self.remote.to_string(),
            "service": self.dest.as_ref().map(|d| d.service.clone()),
            "virtual": self.dest.as_ref().map(|d| d.addr.to_string()),
            "local_port": self.local_port,
            "sent": self.sent,
            "ok": self.ok,
            "lost": self.lost,
            "stale": self.stale,
            "elapsed_us": (now - self.started).total_micros(),
            "latency_us": self.lat.summary(),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn echo_specs_parse_and_reject() {
        let e = EchoSpec::parse(&args("echo udp://service.org -n 5 --size 100")).unwrap();
        assert_eq!(e.host, UrlHost::Name("service.org".into()));
        assert_eq!((e.port, e.count, e.size), (7, 5, 100));
        assert_eq!(e.service_name(), Some("service.org"));
        let e = EchoSpec::parse(&args("echo udp://[fd00::2]:9000 --timeout-ms 50")).unwrap();
        assert_eq!(e.port, 9000);
        assert_eq!(e.service_name(), None);
        assert_eq!(e.timeout, Duration::from_millis(50));
        let e = EchoSpec::parse(&args("echo udp://[fd00::2]")).unwrap();
        assert_eq!(e.port, 7);
        for bad in [
            "echo",
            "echo http://s.org/",
            "echo udp://s.org/x",
            "echo udp://[fd00::2] --rosa",
            "echo udp://s.org --size 2",
            "echo udp://s.org --size 5000",
            "echo udp://s.org --bogus",
        ] {
            assert!(EchoSpec::parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
