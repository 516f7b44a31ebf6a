//! A UDP packet-rate probe on the kernel stack, for `scripts/bench-sar`.
//!
//! ```text
//! udp_blast send ADDR PORT SECONDS PAYLOAD   # as fast as the socket takes
//! udp_blast recv ADDR PORT SECONDS           # count for SECONDS after the first
//! ```
//!
//! `send` prints `sent N errors E pps X`; `recv` prints `received N pps X`
//! (datagrams in the SECONDS after the first one arrived). Neither asserts
//! anything: the script compares the receiver's rate across paths.

#![allow(clippy::disallowed_methods)] // wall-clock rates are the point

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn usage() -> ExitCode {
    eprintln!(
        "usage: udp_blast send ADDR PORT SECONDS PAYLOAD\n       udp_blast recv ADDR PORT SECONDS"
    );
    ExitCode::from(2)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    let s = args.get(i).ok_or_else(|| format!("missing {what}"))?;
    s.parse().map_err(|_| format!("bad {what}: {s:?}"))
}

fn send(to: SocketAddr, secs: f64, payload: usize) -> std::io::Result<()> {
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let sock = UdpSocket::bind(any)?;
    sock.connect(to)?;
    let buf = vec![0x5a; payload];
    let (mut sent, mut errors) = (0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        // Check the clock every 256 datagrams only.
        for _ in 0..256 {
            match sock.send(&buf) {
                Ok(_) => sent += 1,
                Err(_) => errors += 1,
            }
        }
    }
    let t = start.elapsed().as_secs_f64();
    println!("sent {sent} errors {errors} pps {:.0}", sent as f64 / t);
    Ok(())
}

fn recv(at: SocketAddr, secs: f64) -> std::io::Result<()> {
    let sock = UdpSocket::bind(at)?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut buf = [0u8; 2048];
    let wait_end = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match sock.recv(&mut buf) {
            Ok(_) => break Instant::now(),
            Err(_) if Instant::now() < wait_end => continue,
            Err(e) => return Err(e),
        }
    };
    let end = first + Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while Instant::now() < end {
        if sock.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    println!("received {n} pps {:.0}", n as f64 / secs);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = (|| -> Result<(String, SocketAddr, f64, usize), String> {
        let mode: String = arg(&args, 0, "mode")?;
        let addr: IpAddr = arg(&args, 1, "ADDR")?;
        let port: u16 = arg(&args, 2, "PORT")?;
        let secs: f64 = arg(&args, 3, "SECONDS")?;
        let payload = if mode == "send" {
            arg(&args, 4, "PAYLOAD")?
        } else {
            0
        };
        Ok((mode, SocketAddr::new(addr, port), secs, payload))
    })();
    let (mode, addr, secs, payload) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("udp_blast: {e}");
            return usage();
        }
    };
    let r = match mode.as_str() {
        "send" => send(addr, secs, payload),
        "recv" => recv(addr, secs),
        _ => return usage(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udp_blast {mode} {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}
