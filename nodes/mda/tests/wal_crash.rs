//! Crash test for the write-ahead log: a child process appends records and
//! reports each one on stdout the moment `append` returns; the parent
//! SIGKILLs it at a random moment, reopens the log and checks that every
//! reported record is there, in order, exactly once.
//!
//! The child is this test binary itself, re-executed with
//! `--exact crash_child` and [`CHILD_ENV`] naming the log directory.
//! The same directory carries over from round to round, so each child also
//! recovers what its killed predecessors left, torn tails included.

// A test of the write-ahead log: it makes and breaks files itself (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use svcroute_mda::wal::{Wal, WalOptions};

/// Set in the child's environment to the log directory; selects child mode.
const CHILD_ENV: &str = "SVCROUTE_WAL_CRASH_CHILD_DIR";
/// Overrides the parent's RNG seed.
const SEED_ENV: &str = "SVCROUTE_WAL_CRASH_SEED";
const ROUNDS: u64 = 20;
/// The child compacts after this many records.
const COMPACT_EVERY: u64 = 40;
/// What the child prints after each acknowledged record, before its number.
const ACKED: &str = "@@acked ";
/// What the child prints just before it starts a compaction.
const COMPACTING: &str = "@@compacting";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Rec {
    seq: u64,
    body: Vec<u8>,
}

/// Record `seq`, its contents a function of `seq`; every 16th one is 32 KiB,
/// so a kill can land in the middle of a longer write.
fn rec(seq: u64) -> Rec {
    let len = if seq % 16 == 5 {
        32 << 10
    } else {
        (seq % 97) as usize
    };
    Rec {
        seq,
        body: vec![seq as u8; len],
    }
}

fn opts() -> WalOptions {
    WalOptions {
        compact_after: Some(COMPACT_EVERY),
        ..WalOptions::default()
    }
}

/// Child mode; returns at once in a normal test run.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (mut wal, mut state) = Wal::<Rec>::open(Path::new(&dir), opts()).expect("child: open");
    let mut out = std::io::stdout().lock();
    let mut seq = state.last().map_or(0, |r| r.seq + 1);
    // Bounded in case the parent goes away without killing us (writing to
    // a closed pipe also ends us).
    for _ in 0..100_000 {
        if seq % 5 == 2 {
            let batch: Vec<Rec> = (seq..seq + 3).map(rec).collect();
            wal.append_batch(&batch).expect("child: append_batch");
            for r in &batch {
                writeln!(out, "{ACKED}{}", r.seq).expect("child: stdout");
            }
            state.extend(batch);
            seq += 3;
        } else {
            let r = rec(seq);
            wal.append(&r).expect("child: append");
            writeln!(out, "{ACKED}{seq}").expect("child: stdout");
            state.push(r);
            seq += 1;
        }
        out.flush().expect("child: stdout");
        if wal.should_compact() {
            writeln!(out, "{COMPACTING}").expect("child: stdout");
            out.flush().expect("child: stdout");
            wal.compact(&state).expect("child: compact");
        }
    }
}

#[test]
fn sigkill_never_loses_an_acknowledged_record() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("wal-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0a11_c0de_f00d_u64);
    println!("{SEED_ENV}={seed}");
    let mut rng = XorShift(seed | 1);

    let mut recovered = 0u64;
    let mut total_acked = 0u64;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

        // When to kill: after a random number of acknowledgements, or (every
        // fourth round) right as a compaction starts; then a random delay.
        let at_compaction = round % 4 == 3;
        let wait_acks = rng.below(60);
        let mut acked = Vec::new();
        while at_compaction || (acked.len() as u64) < wait_acks {
            let Some(line) = lines.next() else { break };
            let line = line.unwrap();
            if let Some(seq) = parse_ack(&line) {
                acked.push(seq);
            } else if at_compaction && line.contains(COMPACTING) {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        acked.extend(lines.map_while(Result::ok).filter_map(|l| parse_ack(&l)));
        let mut stderr = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
        assert_eq!(
            status.signal(),
            Some(9),
            "round {round}: child did not die by SIGKILL ({status}):\n{stderr}"
        );

        // Acknowledgements continue from what the child recovered.
        for (i, seq) in acked.iter().enumerate() {
            assert_eq!(*seq, recovered + i as u64, "round {round}: ack order");
        }
        let (wal, got) = Wal::<Rec>::open(&dir, opts()).unwrap();
        for (i, r) in got.iter().enumerate() {
            assert_eq!(
                r.seq, i as u64,
                "round {round}: records out of order or duplicated"
            );
            assert_eq!(*r, rec(r.seq), "round {round}: record {i} damaged");
        }
        let must_have = recovered + acked.len() as u64;
        assert!(
            got.len() as u64 >= must_have,
            "round {round}: {} acknowledged, only {} recovered",
            must_have,
            got.len()
        );
        println!(
            "round {round}: {} acked, {} recovered (+{} unacknowledged), log {} bytes",
            acked.len(),
            got.len(),
            got.len() as u64 - must_have,
            wal.len_bytes()
        );
        total_acked += acked.len() as u64;
        recovered = got.len() as u64;
    }
    assert!(total_acked > 0, "no child ever acknowledged a record");
    let _ = std::fs::remove_dir_all(&dir);
}

fn parse_ack(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once(ACKED)?;
    rest.trim().parse().ok()
}

/// xorshift64: timing choices without a rand dependency.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
