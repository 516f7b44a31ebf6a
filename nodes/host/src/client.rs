//! Load-generating HTTP client jobs.
//!
//! `svcroute ctl h1 get http://10.0.0.20:8000/ --requests 1000 --concurrency 8`
//! starts a [job](JobSpec): `C` connections, each sending its requests one
//! after the other with keep-alive (or one per connection with `--close`),
//! until `N` have completed or failed. The control request is answered when
//! the job ends, with counts, status codes, bytes and latency percentiles.
//!
//! Bodies are streamed out of the socket's receive ring and counted, never
//! buffered whole; with `--verify`, a `/bytes/<n>` body is checked against
//! [`crate::server::pattern_byte`] as it streams and its length against `n`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint};
use svcroute_stack::http::{BodyMode, ClientConn, ClientEvent, Limits, Request};
use svcroute_stack::runtime::{Context, PortStack};

use crate::latency::Latencies;
use crate::server::pattern_byte;
use crate::url::Url;
use crate::HostConfig;

/// Most requests one job may make.
pub const MAX_REQUESTS: u64 = 100_000_000;
/// Most connections one job may open at once.
pub const MAX_CONCURRENCY: usize = 4096;
/// Most jobs running at once.
pub const MAX_JOBS: usize = 16;

/// What a job does, parsed from the control command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// What to fetch.
    pub url: Url,
    /// `GET` or `POST`.
    pub method: &'static str,
    /// Requests to complete (successfully or not).
    pub requests: u64,
    /// Connections in parallel.
    pub concurrency: usize,
    /// One request per connection instead of keep-alive.
    pub close: bool,
    /// POST body size, bytes.
    pub body_size: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Check `/bytes/<n>` bodies against the pattern.
    pub verify: bool,
    /// `Host` header to send instead of the URL's authority (`--host`),
    /// e.g. a service name at an nSFF's address.
    pub host_header: Option<String>,
    /// Reach the service by ROSA even without `[host.rosa] ingress`
    /// (`--rosa`; the ingress is then the port's IPv6 gateway).
    pub rosa: bool,
    /// The ROSA service name to ask for instead of the URL's host
    /// (`--service`, e.g. `service.org/video`).
    pub service: Option<String>,
}

/// Where a job's connections go when it is not the URL's address: the
/// virtual address of a ROSA service and the port to open them on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The service's virtual address.
    pub addr: IpAddress,
    /// The port index.
    pub port: usize,
    /// The service name, for the result.
    pub service: String,
}

/// Most distinct `X-Instance` values a job result lists (more are counted
/// under `(other)`).
pub const MAX_INSTANCES: usize = 64;

impl JobSpec {
    /// Parse `get|post URL [--requests N] [--concurrency C] [--close]
    /// [--body-size B] [--timeout-ms T] [--verify] [--host NAME] [--rosa]
    /// [--service NAME]`.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let method = match args.first().map(String::as_str) {
            Some("get") => "GET",
            Some("post") => "POST",
            _ => return Err("expected get|post URL [options]".into()),
        };
        let url = Url::parse(args.get(1).ok_or("missing URL")?)?;
        let mut spec = Self {
            url,
            method,
            requests: 1,
            concurrency: 1,
            close: false,
            body_size: 0,
            timeout: Duration::from_secs(10),
            verify: false,
            host_header: None,
            rosa: false,
            service: None,
        };
        let mut it = args[2..].iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str, max: u64| -> Result<u64, String> {
                let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
                v.parse::<u64>()
                    .ok()
                    .filter(|&n| n <= max)
                    .ok_or_else(|| format!("{name}: {v:?} is not a number in 0..={max}"))
            };
            match flag.as_str() {
                "--requests" | "-n" => spec.requests = value("--requests", MAX_REQUESTS)?.max(1),
                "--concurrency" | "-c" => {
                    spec.concurrency =
                        value("--concurrency", MAX_CONCURRENCY as u64)?.max(1) as usize;
                }
                "--body-size" => spec.body_size = value("--body-size", 1 << 30)? as usize,
                "--timeout-ms" => {
                    spec.timeout = Duration::from_millis(value("--timeout-ms", 3_600_000)?.max(1));
                }
                "--close" => spec.close = true,
                "--verify" => spec.verify = true,
                "--host" => {
                    let v = it.next().ok_or("--host needs a value")?;
                    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_graphic()) {
                        return Err(format!("--host: {v:?} is not a usable Host value"));
                    }
                    spec.host_header = Some(v.clone());
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
                "--rosa: {} names an address; give a service name (http://service.org/) \
                 or --service NAME",
                spec.url
            ));
        }
        spec.concurrency = spec.concurrency.min(spec.requests as usize);
        Ok(spec)
    }

    /// The ROSA service the job fetches, if any: `--service`, else the
    /// URL's host when it is a name.
    pub fn service_name(&self) -> Option<&str> {
        self.service.as_deref().or_else(|| self.url.name())
    }

    fn expected_len(&self) -> Option<u64> {
        self.url.path.strip_prefix("/bytes/")?.parse().ok()
    }
}

#[derive(Debug)]
struct Slot {
    port: usize,
    handle: SocketHandle,
    http: ClientConn,
    /// When the request in flight was sent.
    since: Instant,
    /// Body bytes of the response in flight, and whether they matched.
    got: u64,
    good: bool,
    status: u16,
}

#[derive(Debug)]
struct Job {
    ctl_id: u64,
    spec: JobSpec,
    dest: Option<Destination>,
    body: std::rc::Rc<[u8]>,
    started: Instant,
    slots: Vec<Slot>,
    sent: u64,
    ok: u64,
    failed: u64,
    bytes: u64,
    lat: Latencies,
    status: BTreeMap<u16, u64>,
    errors: BTreeMap<&'static str, u64>,
    /// Responses by their `X-Instance` header.
    instances: BTreeMap<String, u64>,
    sample: Option<Value>,
    /// The connection whose response is being sampled, until it ends.
    sampling: Option<SocketHandle>,
}

/// Every running job.
#[derive(Debug)]
pub struct Clients {
    jobs: Vec<Job>,
    limits: Limits,
    rx: usize,
    tx: usize,
    /// The next local port; the port's random ephemeral start (RFC 6056)
    /// on the first connection, so a restarted host does not reuse the
    /// 4-tuples of its previous incarnation.
    next_port: Option<u16>,
    /// Sockets of finished connections, removed once fully closed.
    closing: Vec<(usize, SocketHandle)>,
}

impl Clients {
    pub(crate) fn new(cfg: &HostConfig) -> Self {
        Self {
            jobs: Vec::new(),
            limits: Limits {
                max_head_bytes: cfg.max_header_bytes,
                max_body_bytes: u64::MAX,
                ..Limits::default()
            },
            rx: cfg.tcp_rx_buffer,
            tx: cfg.tcp_tx_buffer,
            next_port: None,
            closing: Vec::new(),
        }
    }

    /// Jobs still running.
    pub fn running(&self) -> usize {
        self.jobs.len()
    }

    /// Start a job; its result is sent to control request `ctl_id`. Its
    /// connections go to `dest` if given, else to the URL's address.
    pub fn start_job(
        &mut self,
        cx: &mut Context<'_>,
        ctl_id: u64,
        spec: JobSpec,
        dest: Option<Destination>,
    ) {
        if dest.is_none() && spec.url.addr().is_none() {
            cx.replies.push((
                ctl_id,
                json!({ "error": format!("{}: no address to connect to", spec.url) }),
            ));
            return;
        }
        if self.jobs.len() >= MAX_JOBS {
            cx.replies.push((
                ctl_id,
                json!({ "error": format!("{MAX_JOBS} jobs already running") }),
            ));
            return;
        }
        cx.stats.bump("client.jobs");
        let body: std::rc::Rc<[u8]> = vec![b'p'; spec.body_size].into();
        let mut job = Job {
            ctl_id,
            dest,
            instances: BTreeMap::new(),
            body,
            started: cx.now,
            slots: Vec::new(),
            sent: 0,
            ok: 0,
            failed: 0,
            bytes: 0,
            lat: Latencies::default(),
            status: BTreeMap::new(),
            errors: BTreeMap::new(),
            sample: None,
            sampling: None,
            spec,
        };
        for _ in 0..job.spec.concurrency {
            if let Err(e) = self.open(cx, &mut job) {
                cx.replies.push((ctl_id, json!({ "error": e })));
                return;
            }
        }
        self.jobs.push(job);
    }

    /// Open one connection for `job` and queue its first request.
    fn open(&mut self, cx: &mut Context<'_>, job: &mut Job) -> Result<(), String> {
        let (port, addr) = match (&job.dest, job.spec.url.addr()) {
            (Some(d), _) => (d.port, d.addr),
            (None, Some(a)) => (route(cx.ports, a), a),
            (None, None) => return Err(format!("{}: no address", job.spec.url)),
        };
        let p = &mut cx.ports[port];
        let mut sock = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; self.rx]),
            tcp::SocketBuffer::new(vec![0; self.tx]),
        );
        sock.set_nagle_enabled(false);
        let local = *self.next_port.get_or_insert_with(|| p.ephemeral_port());
        self.next_port = Some(if local == u16::MAX { 49152 } else { local + 1 });
        let remote = IpEndpoint::new(addr, job.spec.url.port);
        sock.connect(p.iface.context(), remote, local)
            .map_err(|e| format!("connect to {remote} from port {}: {e}", p.name))?;
        let handle = p.sockets.add(sock);
        let mut slot = Slot {
            port,
            handle,
            http: ClientConn::new(
                job.spec
                    .host_header
                    .clone()
                    .unwrap_or_else(|| job.spec.url.authority.clone()),
                self.limits,
            ),
            since: cx.now,
            got: 0,
            good: true,
            status: 0,
        };
        let req = job.next_request();
        if slot.arm(req, cx.now).is_err() {
            *job.errors.entry("client_state").or_default() += 1;
        }
        job.slots.push(slot);
        Ok(())
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        let mut jobs = std::mem::take(&mut self.jobs);
        for job in &mut jobs {
            let mut i = 0;
            while i < job.slots.len() {
                let (progress, done) = job.drive(i, cx);
                any |= progress;
                if !done {
                    i += 1;
                    continue;
                }
                let slot = job.slots.swap_remove(i);
                if job.sampling == Some(slot.handle) {
                    // Ended mid-response; its handle may be reused.
                    job.sampling = None;
                }
                let sock = cx.ports[slot.port]
                    .sockets
                    .get_mut::<tcp::Socket>(slot.handle);
                sock.close();
                self.closing.push((slot.port, slot.handle));
                if job.sent < job.spec.requests {
                    if let Err(e) = self.open(cx, job) {
                        job.failed += job.spec.requests - job.sent;
                        job.sent = job.spec.requests;
                        *job.errors.entry("connect").or_default() += 1;
                        log::warn!("client: {e}");
                    }
                }
            }
        }
        jobs.retain_mut(|job| {
            if job.ok + job.failed < job.spec.requests {
                return true;
            }
            for s in job.slots.drain(..) {
                cx.ports[s.port]
                    .sockets
                    .get_mut::<tcp::Socket>(s.handle)
                    .close();
                self.closing.push((s.port, s.handle));
            }
            cx.replies.push((job.ctl_id, job.result(cx.now)));
            any = true;
            false
        });
        self.jobs = jobs;
        self.closing.retain(|&(port, h)| {
            let sockets = &mut cx.ports[port].sockets;
            if sockets.get::<tcp::Socket>(h).is_open() {
                return true;
            }
            sockets.remove(h);
            false
        });
        any
    }

    pub(crate) fn poll_at(&self, _now: Instant) -> Option<Instant> {
        self.jobs
            .iter()
            .flat_map(|j| j.slots.iter().map(move |s| s.since + j.spec.timeout))
            .min()
    }
}

impl Slot {
    /// Queue `req` and start its clock.
    fn arm(&mut self, req: Request, now: Instant) -> Result<(), svcroute_stack::http::StateError> {
        self.since = now;
        self.got = 0;
        self.good = true;
        self.status = 0;
        self.http.send(req, BodyMode::Stream)
    }

    /// Whether a request is waiting for (the rest of) its response.
    fn in_flight(&self) -> bool {
        self.status != DONE
    }
}

/// `Slot::status` once the response in flight is complete.
const DONE: u16 = u16::MAX;

impl Job {
    /// The next request to send; counts it as sent.
    fn next_request(&mut self) -> Request {
        self.sent += 1;
        let mut req = Request::new(self.spec.method, self.spec.url.path.clone());
        if self.spec.method == "POST" {
            req = req.with_body(svcroute_stack::http::Body::Shared(self.body.clone()));
        }
        if self.spec.close {
            req = req.with_header("Connection", "close");
        }
        req
    }

    fn fail(&mut self, why: &'static str) {
        self.failed += 1;
        *self.errors.entry(why).or_default() += 1;
    }

    /// Drive slot `i`; returns (progress, connection finished).
    fn drive(&mut self, i: usize, cx: &mut Context<'_>) -> (bool, bool) {
        let now = cx.now;
        let (port, handle) = (self.slots[i].port, self.slots[i].handle);
        let sock = cx.ports[port].sockets.get_mut::<tcp::Socket>(handle);
        let mut any = false;
        loop {
            let s = &mut self.slots[i];
            if now - s.since >= self.spec.timeout {
                sock.abort();
                self.fail("timeout");
                return (true, true);
            }
            if sock.state() == tcp::State::Closed {
                if s.in_flight() {
                    let why = if s.status == 0 {
                        "connect_or_reset"
                    } else {
                        "closed_mid_response"
                    };
                    self.fail(why);
                }
                return (true, true);
            }
            match s.http.poll(sock) {
                ClientEvent::Head(h) => {
                    any = true;
                    s.status = h.status;
                    if let Some(f) = h
                        .headers
                        .iter()
                        .find(|f| f.name.eq_ignore_ascii_case("x-instance"))
                    {
                        let v = String::from_utf8_lossy(&f.value).into_owned();
                        let known =
                            self.instances.len() < MAX_INSTANCES || self.instances.contains_key(&v);
                        let k = if known { v } else { "(other)".to_owned() };
                        *self.instances.entry(k).or_default() += 1;
                    }
                    if self.sample.is_none() {
                        let headers: serde_json::Map<String, Value> = h
                            .headers
                            .iter()
                            .map(|f| {
                                (
                                    f.name.to_ascii_lowercase(),
                                    json!(String::from_utf8_lossy(&f.value)),
                                )
                            })
                            .collect();
                        self.sample =
                            Some(json!({ "status": h.status, "headers": headers, "body": "" }));
                        self.sampling = Some(handle);
                    }
                }
                ClientEvent::Data(d) => {
                    any = true;
                    if self.spec.verify && s.good {
                        s.good = d
                            .iter()
                            .enumerate()
                            .all(|(k, &b)| b == pattern_byte(s.got + k as u64));
                    }
                    if let (Some(sample), true) = (&mut self.sample, self.sampling == Some(handle))
                    {
                        if let Some(Value::String(b)) = sample.get_mut("body") {
                            if b.len() < 4096 {
                                let take = d.len().min(4096 - b.len());
                                b.push_str(&String::from_utf8_lossy(&d[..take]));
                            }
                        }
                    }
                    s.got += d.len() as u64;
                    self.bytes += d.len() as u64;
                }
                ClientEvent::End { body_len } => {
                    any = true;
                    if self.sampling == Some(handle) {
                        self.sampling = None;
                    }
                    let (status, since, matched) = (s.status, s.since, s.good);
                    s.status = DONE;
                    let good = !self.spec.verify
                        || (matched && self.spec.expected_len().is_none_or(|n| n == body_len));
                    self.lat.record((now - since).total_micros());
                    *self.status.entry(status).or_default() += 1;
                    if good {
                        self.ok += 1;
                    } else {
                        self.fail("body_mismatch");
                    }
                    let reusable = self.slots[i].http.is_reusable();
                    if self.sent >= self.spec.requests || self.spec.close || !reusable {
                        return (true, true);
                    }
                    let req = self.next_request();
                    if self.slots[i].arm(req, now).is_err() {
                        self.fail("client_state");
                        return (true, true);
                    }
                }
                ClientEvent::Response(_) => {}
                ClientEvent::Error(_) => {
                    sock.abort();
                    self.fail("protocol");
                    return (true, true);
                }
                ClientEvent::Idle => return (any, false),
                ClientEvent::Closed => {
                    let s = &self.slots[i];
                    if s.in_flight() {
                        self.fail(if s.status == 0 {
                            "closed_before_response"
                        } else {
                            "closed_mid_response"
                        });
                    }
                    return (true, true);
                }
            }
        }
    }

    fn result(&self, now: Instant) -> Value {
        let elapsed = (now - self.started).total_micros().max(1);
        json!({
            "url": self.spec.url.to_string(),
            "method": self.spec.method,
            "requests": self.spec.requests,
            "concurrency": self.spec.concurrency,
            "ok": self.ok,
            "failed": self.failed,
            "errors": self.errors,
            "status": self.status.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "body_bytes": self.bytes,
            "elapsed_us": elapsed,
            "requests_per_s": (self.ok + self.failed) as f64 * 1e6 / elapsed as f64,
            "latency_us": self.lat.summary(),
            "first_response": self.sample,
            "instances": self.instances,
            "service": self.dest.as_ref().map(|d| d.service.clone()),
            "virtual": self.dest.as_ref().map(|d| d.addr.to_string()),
        })
    }
}

/// The port to reach `dst` from: one with an address in the same subnet,
/// else one with a default route of that family, else the first.
pub(crate) fn route(ports: &[PortStack], dst: IpAddress) -> usize {
    if let Some(i) = ports
        .iter()
        .position(|p| p.iface.ip_addrs().iter().any(|c| c.contains_addr(&dst)))
    {
        return i;
    }
    ports
        .iter()
        .position(|p| {
            p.gateways.iter().any(|g| {
                matches!(
                    (g, dst),
                    (IpAddress::Ipv4(_), IpAddress::Ipv4(_))
                        | (IpAddress::Ipv6(_), IpAddress::Ipv6(_))
                )
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod test {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn job_specs_parse_and_reject() {
        let j = JobSpec::parse(&args(
            "get http://10.0.0.20:8000/ --requests 100 -c 4 --verify",
        ))
        .unwrap();
        assert_eq!(
            (j.method, j.requests, j.concurrency, j.verify),
            ("GET", 100, 4, true)
        );
        let j =
            JobSpec::parse(&args("post http://[fd00::2]/echo --body-size 1000 --close")).unwrap();
        assert_eq!(
            (j.method, j.body_size, j.close, j.concurrency),
            ("POST", 1000, true, 1)
        );
        // Concurrency never exceeds the requests.
        let j = JobSpec::parse(&args("get http://10.0.0.2/ -n 2 -c 50")).unwrap();
        assert_eq!(j.concurrency, 2);
        assert_eq!(
            JobSpec::parse(&args("get http://10.0.0.2/bytes/77"))
                .unwrap()
                .expected_len(),
            Some(77)
        );
        let j = JobSpec::parse(&args("get http://service.org/x --rosa")).unwrap();
        assert_eq!((j.rosa, j.service_name()), (true, Some("service.org")));
        let j = JobSpec::parse(&args("get http://service.org/x")).unwrap();
        assert_eq!((j.rosa, j.service_name()), (false, Some("service.org")));
        let j = JobSpec::parse(&args("get http://s.org/ --service s.org/video")).unwrap();
        assert_eq!((j.rosa, j.service_name()), (true, Some("s.org/video")));
        for bad in [
            "get",
            "get http://10.0.0.2/ --rosa",
            "get http://s.org/ --service",
            "put http://10.0.0.2/",
            "get http://10.0.0.2/ --requests",
            "get http://10.0.0.2/ --requests x",
            "get http://10.0.0.2/ --concurrency 100000",
            "get http://10.0.0.2/ --bogus",
        ] {
            assert!(JobSpec::parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
