//! The per-node control socket.
//!
//! A Unix stream socket (`/run/svcroute/<node>.sock` by default). A client
//! writes one request line — whitespace-separated words, e.g. `stats` or
//! `get http://10.0.0.1/ --requests 10` — and reads one JSON document back,
//! after which the node closes the connection. Requests a role answers later
//! (a client job) keep their connection open until the answer is ready.
//! Everything is non-blocking: a slow or silent client never stalls the node.
//!
//! Inside a microVM the same requests come over a virtio-serial port
//! instead ([`SerialControl`]), many at once, each line tagged with an id.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Longest request line accepted, in bytes.
pub const MAX_REQUEST: usize = 4096;
/// Most control connections open at once; more are refused.
pub const MAX_CONNS: usize = 64;

/// One parsed control request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The words of the request line.
    pub args: Vec<String>,
}

struct Conn {
    id: u64,
    stream: UnixStream,
    buf: Vec<u8>,
    /// Request seen, answer pending from the role.
    waiting: bool,
}

/// The listening control socket and its connections.
pub struct ControlServer {
    path: PathBuf,
    listener: UnixListener,
    conns: Vec<Conn>,
    next_id: u64,
}

impl ControlServer {
    /// Bind the socket at `path`, replacing a stale one left by a dead node.
    pub fn bind(path: &Path) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "control socket {} is served by a running node",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            path: path.to_owned(),
            listener,
            conns: Vec::new(),
            next_id: 1,
        })
    }

    /// The descriptors to wait on.
    pub fn fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.listener.as_raw_fd());
        out.extend(
            self.conns
                .iter()
                .filter(|c| !c.waiting)
                .map(|c| c.stream.as_raw_fd()),
        );
    }

    /// Accept connections, read requests, and answer each through `handle`
    /// (which returns `None` when the answer comes later via [`Self::reply`]).
    pub fn poll(
        &mut self,
        mut handle: impl FnMut(u64, &Request) -> Option<Value>,
    ) -> io::Result<bool> {
        let mut handled = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.conns.len() >= MAX_CONNS {
                        log::warn!("control: too many connections, refusing one");
                        continue;
                    }
                    stream.set_nonblocking(true)?;
                    let id = self.next_id;
                    self.next_id += 1;
                    self.conns.push(Conn {
                        id,
                        stream,
                        buf: Vec::new(),
                        waiting: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let mut i = 0;
        while i < self.conns.len() {
            let c = &mut self.conns[i];
            if c.waiting {
                i += 1;
                continue;
            }
            match read_line(c) {
                Ok(Some(line)) => {
                    let req = Request {
                        args: line.split_whitespace().map(str::to_owned).collect(),
                    };
                    c.waiting = true;
                    handled = true;
                    let id = c.id;
                    if let Some(v) = handle(id, &req) {
                        self.reply(id, &v);
                    }
                    // The list may have shrunk; re-check the same index.
                    continue;
                }
                Ok(None) => i += 1,
                Err(_) => {
                    self.conns.swap_remove(i);
                }
            }
        }
        Ok(handled)
    }

    /// Send the answer of request `id` and close its connection.
    pub fn reply(&mut self, id: u64, v: &Value) {
        let Some(pos) = self.conns.iter().position(|c| c.id == id) else {
            return;
        };
        let mut c = self.conns.swap_remove(pos);
        let mut text = serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
        text.push(b'\n');
        // Answers are small; a client that cannot take them in a second loses them.
        let _ = c.stream.set_nonblocking(false);
        let _ = c
            .stream
            .set_write_timeout(Some(std::time::Duration::from_secs(1)));
        if let Err(e) = c.stream.write_all(&text) {
            log::debug!("control: answer lost: {e}");
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The control protocol over one byte stream that carries many requests at
/// once: a microVM's virtio-serial port, which the host side (`svcroute run
/// --vm`) maps to the usual control socket. Requests arrive as `<id>
/// <words...>\n`, answers leave as `<id> <json>\n` (compact JSON holds no
/// newline), in any order; id 0 is the guest's own hello (see
/// `docs/microvm.md`). Non-blocking both ways: answers the host cannot take
/// yet wait in a bounded buffer.
pub struct SerialControl {
    port: std::sync::Arc<std::fs::File>,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// The host end is closed (reads give end of file): leave the port out
    /// of `poll(2)`, which would report it forever, and look again at the
    /// next wakeup.
    eof: bool,
}

/// Most answer bytes kept for a host that does not read.
pub const MAX_SERIAL_BACKLOG: usize = 1 << 20;

impl SerialControl {
    /// Serve requests on `port` (made non-blocking here).
    pub fn new(port: std::sync::Arc<std::fs::File>) -> io::Result<Self> {
        crate::phy::sys::set_nonblocking(port.as_raw_fd())?;
        Ok(Self {
            port,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            eof: false,
        })
    }

    /// The descriptors to wait on.
    pub fn fds(&self, out: &mut Vec<RawFd>) {
        if !self.eof {
            out.push(self.port.as_raw_fd());
        }
    }

    /// Read requests and answer each through `handle` (which returns
    /// `None` when the answer comes later via [`Self::reply`]).
    pub fn poll(
        &mut self,
        mut handle: impl FnMut(u64, &Request) -> Option<Value>,
    ) -> io::Result<bool> {
        self.write_out();
        let mut chunk = [0u8; 4096];
        loop {
            match (&*self.port).read(&mut chunk) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    self.eof = false;
                    self.inbuf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let mut handled = false;
        while let Some(pos) = self.inbuf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.inbuf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line[..pos]).into_owned();
            let mut words = line.split_whitespace();
            let Some(id) = words.next().and_then(|w| w.parse::<u64>().ok()) else {
                log::warn!("control: serial line without an id: {line:?}");
                continue;
            };
            let req = Request {
                args: words.map(str::to_owned).collect(),
            };
            handled = true;
            if let Some(v) = handle(id, &req) {
                self.reply(id, &v);
            }
        }
        if self.inbuf.len() > MAX_REQUEST {
            log::warn!("control: serial request too long, discarded");
            self.inbuf.clear();
        }
        Ok(handled)
    }

    /// Send the answer of request `id`.
    pub fn reply(&mut self, id: u64, v: &Value) {
        let text = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
        if self.outbuf.len() + text.len() > MAX_SERIAL_BACKLOG {
            log::warn!("control: host not reading; answer {id} lost");
            return;
        }
        self.outbuf
            .extend_from_slice(format!("{id} {text}\n").as_bytes());
        self.write_out();
    }

    fn write_out(&mut self) {
        while !self.outbuf.is_empty() {
            match (&*self.port).write(&self.outbuf) {
                Ok(0) => break,
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break, // host not reading yet, or gone: kept
            }
        }
    }
}

/// Read what is available; return the request line once complete.
fn read_line(c: &mut Conn) -> io::Result<Option<String>> {
    let mut chunk = [0u8; 512];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => {
                return if c.buf.is_empty() {
                    Err(io::ErrorKind::UnexpectedEof.into())
                } else {
                    Ok(Some(String::from_utf8_lossy(&c.buf).into_owned()))
                };
            }
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                if let Some(pos) = c.buf.iter().position(|&b| b == b'\n') {
                    return Ok(Some(String::from_utf8_lossy(&c.buf[..pos]).into_owned()));
                }
                if c.buf.len() > MAX_REQUEST {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "request too long",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Send one request to the control socket at `path` and wait for the answer.
pub fn request(path: &Path, args: &[String], timeout: std::time::Duration) -> io::Result<Value> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("connect {}: {e}", path.display())))?;
    s.set_read_timeout(Some(timeout))?;
    let mut line = args.join(" ");
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    serde_json::from_slice(&out).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad answer from {}: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn request_and_answer_over_a_real_socket() {
        let dir = std::env::temp_dir().join(format!("svcroute-ctl-{}", std::process::id()));
        let path = dir.join("n.sock");
        let mut srv = ControlServer::bind(&path).unwrap();
        let p2 = path.clone();
        let client = std::thread::spawn(move || {
            request(
                &p2,
                &["stats".into(), "--json".into()],
                std::time::Duration::from_secs(5),
            )
        });
        let mut seen = None;
        for _ in 0..500 {
            srv.poll(|_, r| {
                seen = Some(r.clone());
                Some(serde_json::json!({"ok": 1}))
            })
            .unwrap();
            if seen.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let v = client.join().unwrap().unwrap();
        assert_eq!(v["ok"], 1);
        assert_eq!(seen.unwrap().args, vec!["stats", "--json"]);
        drop(srv);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
