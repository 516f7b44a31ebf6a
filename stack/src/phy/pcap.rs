//! A [`Link`] wrapper that records every frame it moves to a pcap file
//! (`--pcap FILE`), so Wireshark shows exactly what the node saw and sent.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;

use smoltcp::phy::{PcapLinkType, PcapSink};
use smoltcp::time::Instant;

use super::Link;

struct Sink(BufWriter<File>);

impl PcapSink for Sink {
    fn write(&mut self, data: &[u8]) {
        if let Err(e) = self.0.write_all(data) {
            log::warn!("pcap: write failed: {e}");
        }
    }
    fn flush(&mut self) {
        let _ = Write::flush(&mut self.0);
    }
}

/// Records frames of the inner link, both directions, with wall-clock times.
pub struct PcapLink<L> {
    inner: L,
    sink: Sink,
}

impl<L: Link> PcapLink<L> {
    /// Wrap `inner`, writing a new pcap file at `path`.
    pub fn create(inner: L, path: &Path) -> io::Result<Self> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("pcap {}: {e}", path.display())))?;
        let mut sink = Sink(BufWriter::new(file));
        sink.global_header(PcapLinkType::Ethernet);
        sink.flush();
        Ok(Self { inner, sink })
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    #[allow(clippy::disallowed_methods)] // captures carry wall-clock times
    fn record(&mut self, frame: &[u8]) {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.sink
            .packet(Instant::from_micros(t.as_micros() as i64), frame);
        // Flush per frame: a capture must be readable while the node runs and
        // complete when it is killed. Captures are for debugging, not speed.
        self.sink.flush();
    }
}

impl<L: Link> Link for PcapLink<L> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            self.record(&buf[..n]);
        }
        Ok(r)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let sent = self.inner.send(frame)?;
        if sent {
            self.record(frame);
        }
        Ok(sent)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }

    fn poll_at(&self) -> Option<std::time::Instant> {
        self.inner.poll_at()
    }

    fn shape(&self) -> Option<super::impair::Shape> {
        self.inner.shape()
    }

    fn set_shape(&mut self, shape: super::impair::Shape) -> bool {
        self.inner.set_shape(shape)
    }
}
