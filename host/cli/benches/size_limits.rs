//! Size limits: how the guest's input, time and memory grow with the
//! cluster, up to the largest cluster the CRD allows (400 nodes, counted as
//! shards x (replicas + 1); the limit these figures set), against the
//! module's 64 MiB memory cap.
//!
//! Each size is a formed cluster in steady state: external access by
//! NodePort, every Service and NodePort in place, every pod ready, and every
//! Valkey node observed with its view of every peer (`observed.valkey`), as
//! the operator passes it each reconcile. Per size: the input's size as
//! JSON (serde_json, a proxy for the canonical ABI's lowered size), the
//! wasm call as the operator makes it (`Module`: fresh Store, instantiate,
//! lower, run, lift), the most linear memory the guest held during it (the
//! Store's limiter adds up every growth), and whether the call fits the cap.
//!
//! - `cargo bench -p shardgate --bench size_limits`: every size, 3 rounds
//!   each (one for sizes whose call takes over a second).
//! - quick: `SHARDGATE_BENCH_QUICK=1`, `-- --quick`, or `cargo test
//!   --benches` (no `--bench`): the small sizes, one round. Asserts only
//!   that the guest answers, never timings or memory.
//! - `SHARDGATE_BENCH_SIZES=1000x2,1000x16` picks sizes.

use std::time::{Duration, Instant};

use shardgate_contract::model::*;
use shardgate_tests::bench::{Invocation, machine, median};
use shardgate_tests::fuzz;
use shardgate_tests::sizes::{formed as input, json_bytes, status_bytes};
use shardgate_wasm::{CallError, Engine, Limits, Module};

/// `(shards, nodes per shard)`: up to the allowed 400 nodes in several
/// shapes, and one past it (refused by validation).
const SIZES: [(u32, u32); 8] = [
    (10, 2),
    (100, 2),
    (150, 2),
    (200, 2),
    (400, 1),
    (100, 4),
    (25, 16),
    (201, 2),
];
const QUICK: [(u32, u32); 3] = [(10, 2), (100, 2), (200, 2)];
/// Peers past which an input is not built (it would take gigabytes on the
/// host too); its size is computed instead.
const MAX_PEERS: u64 = 16_100_000;

/// The JSON size of the input of a size too large to build: the input with
/// no peers, plus each node's view of every other node.
fn projected_json_bytes(shards: u32, nodes: u32) -> u64 {
    let mut bare = input(shards, nodes);
    let peer = Peer {
        id: fuzz::node_id(0, 0, 0),
        failed: false,
        linked: true,
    };
    // `{...},` per peer but the last of each list.
    let per_peer = json_bytes(&peer) + 1;
    let n = u64::from(shards * nodes);
    for f in bare.observed.valkey.as_mut().unwrap() {
        f.peers.clear();
    }
    json_bytes(&bare) + n * (n - 1) * per_peer - n
}

/// One size's figures.
struct Row {
    label: String,
    nodes: u32,
    json: u64,
    built: bool,
    time: Option<Duration>,
    peak: Option<usize>,
    status: Option<u64>,
    verdict: String,
}

fn measure(module: &Module, shards: u32, nodes: u32, rounds: usize) -> Row {
    let label = format!("{shards}x{nodes}");
    let n = u64::from(shards * nodes);
    if n * (n - 1) > MAX_PEERS {
        return Row {
            label,
            nodes: shards * nodes,
            json: projected_json_bytes(shards, nodes),
            built: false,
            time: None,
            peak: None,
            status: None,
            verdict: "not built (gigabytes on the host)".into(),
        };
    }
    let input = input(shards, nodes);
    let json = json_bytes(&input);
    let mut times = Vec::new();
    let mut peak = 0;
    let mut status = None;
    let mut verdict = String::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let (answer, p) = module.reconcile_metered(&input);
        times.push(started.elapsed());
        peak = peak.max(p);
        verdict = match answer {
            Ok(Ok(d)) => {
                assert_eq!(d.nodes.len() as u32, shards * nodes, "{label}");
                assert!(d.topology.formed, "{label}: {}", d.topology.waiting);
                status = Some(status_bytes(&input, &d));
                "fits".into()
            }
            Ok(Err(e))
                if e.violations
                    .iter()
                    .all(|v| v.field == "spec.shards" && v.message.contains("nodes")) =>
            {
                "refused: over the node limit".into()
            }
            Ok(Err(e)) => panic!("{label}: the guest refused the input: {:?}", e.violations),
            Err(CallError::MemoryCap(_)) => "MEMORY CAP".into(),
            Err(e) => format!("failed: {e}"),
        };
        if times[0] > Duration::from_secs(1) {
            break;
        }
    }
    Row {
        label,
        nodes: shards * nodes,
        json,
        built: true,
        time: Some(median(&times)),
        peak: Some(peak),
        status,
        verdict,
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn main() -> anyhow::Result<()> {
    let invocation = Invocation::from_env();
    let quick = invocation.quick();
    if invocation.has("--list") {
        return Ok(());
    }
    let sizes: Vec<(u32, u32)> = match std::env::var("SHARDGATE_BENCH_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                let (a, b) = s.trim().split_once('x').expect("SIZES are like 100x2");
                (a.parse().unwrap(), b.parse().unwrap())
            })
            .collect(),
        Err(_) if quick => QUICK.to_vec(),
        Err(_) => SIZES.to_vec(),
    };
    let limits = Limits {
        // The operator's cap, and no deadline to speak of: time is what is
        // measured here, and a call past a second is reported, not stopped.
        deadline: Duration::from_secs(120),
        ..Limits::default()
    };
    let runtime = Engine::new(limits)?;
    let module = runtime.load_embedded()?;
    let rounds = if quick { 1 } else { 3 };

    println!(
        "\n## guest input, time and memory by cluster size (cap {})\n",
        mib(limits.memory_bytes as u64)
    );
    println!(
        "| size | nodes | input (JSON) | wasm call | peak guest memory | 64 MiB cap | status (JSON) |"
    );
    println!("|---|---:|---:|---:|---:|---|---:|");
    for (shards, nodes) in sizes {
        let r = measure(&module, shards, nodes, rounds);
        println!(
            "| {} | {} | {}{} | {} | {} | {} | {} |",
            r.label,
            r.nodes,
            mib(r.json),
            if r.built { "" } else { " (computed)" },
            r.time
                .map_or("-".into(), |t| format!("{:.1} ms", t.as_secs_f64() * 1e3)),
            r.peak.map_or("-".into(), |p| mib(p as u64)),
            r.verdict,
            r.status
                .map_or("-".into(), |b| format!("{:.1} KiB", b as f64 / 1024.0)),
        );
    }
    println!(
        "\ninput: serde_json bytes of the whole input (a proxy for the canonical ABI's \
         lowered size); wasm call: Module::reconcile (fresh Store, instantiate, lower, run, \
         lift), median of {rounds}; peak: the guest's linear memory at its largest during \
         the call."
    );
    println!("{}", machine());
    if quick {
        println!("(quick mode: small sizes, one round; timings are not meaningful)");
    }
    Ok(())
}
