//! P1 "guest stage" benchmark: from the observed Kubernetes objects to the
//! objects to apply, native vs wasm, with the same input in the same run.
//!
//! One end-to-end iteration is what the operator does per reconcile between
//! reading its caches and applying: `convert::input` (ValkeyCluster, shard
//! Services, Pods -> `Input`), the guest (`Native`, or the embedded component
//! through `Module`: fresh Store, instantiate, lower, run, lift), then
//! `convert::objects` and `convert::status`.
//!
//! Modes:
//! - `cargo bench -p shardgate --bench guest_stage`: criterion (group
//!   `guest_stage/<shards>x<nodes>`, functions `native` and `wasm`), then an
//!   interleaved side-by-side table with the breakdown.
//! - quick: `SHARDGATE_BENCH_QUICK=1`, `-- --quick`, or `cargo test --benches`
//!   (no `--bench` argument): no criterion, a few rounds per size, the same
//!   table. Asserts only that native and wasm agree, never timings.
//! - `SHARDGATE_BENCH_SIZES=100x3,80x5` limits the sizes (both parts).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};
use shardgate_contract::{labels, names};
use shardgate_k8s::convert::{self, Objects};
use shardgate_k8s::crd::{
    EndpointType, ExternalAccessSpec, ServiceType, TrafficPolicy, ValkeyCluster, ValkeyClusterSpec,
    ValkeyClusterStatus,
};
use shardgate_k8s::status::{self, Outcome, Progress};
use shardgate_tests::bench::{Invocation, median};
use shardgate_wasm::{EMBEDDED_GUEST, Engine, Limits, Module, RECONCILER_INTERFACE};
use shardgate_wasm::{Native, Reconciler};
use wasmtime::Store;
use wasmtime::component::{Component, ComponentExportIndex, Instance, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// `(shards, nodes per shard)`; replicas = nodes - 1.
const SIZES: [(u32, u32); 4] = [(1, 1), (10, 3), (100, 3), (80, 5)];
const CLUSTER: &str = "bench";
const NAMESPACE: &str = "default";

// ---- the observed snapshot -------------------------------------------------

/// What the operator's caches hold for one cluster in steady state.
struct Snapshot {
    shards: u32,
    nodes: u32,
    vc: ValkeyCluster,
    services: Vec<Service>,
    pods: Vec<Pod>,
    now: Time,
}

impl Snapshot {
    fn new(shards: u32, nodes: u32) -> Self {
        let mut vc = ValkeyCluster::new(
            CLUSTER,
            ValkeyClusterSpec {
                shards: shards as i32,
                replicas: nodes as i32 - 1,
                image: None,
                resources: None,
                tls: None,
                external_access: Some(ExternalAccessSpec {
                    enabled: true,
                    service_type: Some(ServiceType::NodePort),
                    external_traffic_policy: TrafficPolicy::Cluster,
                    service_annotations: BTreeMap::new(),
                    hostname_prefix: names::DEFAULT_HOSTNAME_PREFIX.into(),
                    domain: None,
                    preferred_endpoint_type: EndpointType::Ip,
                    ..ExternalAccessSpec::default()
                }),
                users: Vec::new(),
                config: BTreeMap::new(),
                persistence: None,
                pod_disruption_budget: None,
                scheduling: None,
            },
        );
        vc.metadata.namespace = Some(NAMESPACE.into());
        vc.metadata.uid = Some("5f0c6f3e-8a51-4c1e-9d7b-2a3b4c5d6e7f".into());
        vc.metadata.generation = Some(1);

        let services = (0..shards)
            .map(|shard| Service {
                metadata: meta(names::shard_service(CLUSTER, shard), shard, None),
                spec: Some(ServiceSpec {
                    type_: Some("NodePort".into()),
                    ports: Some(
                        (0..nodes)
                            .map(|node| ServicePort {
                                name: Some(names::port_name(node)),
                                port: (names::CLIENT_PORT + node) as i32,
                                protocol: Some("TCP".into()),
                                node_port: Some(30000 + (shard * nodes + node) as i32),
                                ..ServicePort::default()
                            })
                            .collect(),
                    ),
                    ..ServiceSpec::default()
                }),
                status: None,
            })
            .collect();

        let pods = (0..shards)
            .flat_map(|shard| (0..nodes).map(move |node| (shard, node)))
            .map(|(shard, node)| {
                let k = shard * nodes + node;
                Pod {
                    metadata: meta(
                        format!("{}-0", names::node_object(CLUSTER, shard, node)),
                        shard,
                        Some(node),
                    ),
                    spec: None,
                    status: Some(PodStatus {
                        host_ip: Some(format!("10.0.{}.{}", k / 250, k % 250 + 1)),
                        pod_ip: Some(format!("10.244.{}.{}", k / 250, k % 250 + 1)),
                        phase: Some("Running".into()),
                        conditions: Some(vec![PodCondition {
                            type_: "Ready".into(),
                            status: "True".into(),
                            ..PodCondition::default()
                        }]),
                        ..PodStatus::default()
                    }),
                }
            })
            .collect();

        Snapshot {
            shards,
            nodes,
            vc,
            services,
            pods,
            now: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn label(&self) -> String {
        format!("{}x{}", self.shards, self.nodes)
    }

    fn input(&self) -> Input {
        convert::input(&self.vc, &self.services, &self.pods, Vec::new())
    }

    fn output(&self, desired: &Desired) -> (Objects, ValkeyClusterStatus) {
        let objects = convert::objects(&self.vc, desired);
        let outcome = Outcome::Reconciled {
            guest: &desired.status,
            progress: Progress {
                wanted_nodes: desired.nodes.len(),
                ready_nodes: desired.nodes.len(),
                ..Progress::default()
            },
        };
        let status = status::compute(
            &outcome,
            self.vc.status.as_ref(),
            self.vc.metadata.generation,
            &self.now,
        );
        (objects, status)
    }

    /// The whole stage, as the operator runs it.
    fn end_to_end(&self, r: &dyn Reconciler) -> (Objects, ValkeyClusterStatus) {
        let desired = r
            .reconcile(&self.input())
            .expect("the guest call failed")
            .expect("the guest rejected the input");
        self.output(&desired)
    }
}

fn meta(name: String, shard: u32, node: Option<u32>) -> ObjectMeta {
    let mut label_map = BTreeMap::from([
        (labels::CLUSTER.to_string(), CLUSTER.to_string()),
        (labels::SHARD.to_string(), shard.to_string()),
    ]);
    if let Some(node) = node {
        label_map.insert(labels::NODE.to_string(), node.to_string());
    }
    ObjectMeta {
        name: Some(name),
        namespace: Some(NAMESPACE.into()),
        labels: Some(label_map),
        ..ObjectMeta::default()
    }
}

// ---- a reused instance (bench-only, no runtime API) ------------------------

/// The embedded guest instantiated once in one long-lived Store on the
/// runtime's own Engine, to measure a call without the per-call Store and
/// instantiation that [`Module`] does. Not what the operator does: it shows
/// what instance reuse would save. Its WASI context is a default one, not
/// the runtime's deny-all one; the guest touches WASI in neither case.
struct Reused {
    store: Store<Host>,
    instance: Instance,
    reconcile: ComponentExportIndex,
    validate: ComponentExportIndex,
}

struct Host {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

type ReconcileResult = Result<Desired, GuestError>;

impl Reused {
    fn new(runtime: &Engine) -> anyhow::Result<Self> {
        let engine = runtime.wasmtime();
        let component = Component::new(engine, EMBEDDED_GUEST)?;
        let mut linker = Linker::<Host>::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        let iface = component
            .get_export_index(None, RECONCILER_INTERFACE)
            .ok_or_else(|| anyhow::anyhow!("no {RECONCILER_INTERFACE}"))?;
        let func = |name: &str| {
            component
                .get_export_index(Some(&iface), name)
                .ok_or_else(|| anyhow::anyhow!("no {name}"))
        };
        let (reconcile, validate) = (func("reconcile")?, func("validate")?);
        let mut store = Store::new(
            engine,
            Host {
                ctx: WasiCtx::builder().build(),
                table: ResourceTable::new(),
            },
        );
        // The engine interrupts on epochs (5 ms ticks): never, here.
        store.set_epoch_deadline(1 << 40);
        let instance = linker.instantiate(&mut store, &component)?;
        Ok(Reused {
            store,
            instance,
            reconcile,
            validate,
        })
    }

    fn reconcile(&mut self, input: &Input) -> ReconcileResult {
        let f = self
            .instance
            .get_typed_func::<(&Input,), (ReconcileResult,)>(&mut self.store, self.reconcile)
            .expect("reconcile has the expected type");
        f.call(&mut self.store, (input,))
            .expect("reused reconcile call")
            .0
    }

    fn validate(&mut self, cluster: &Cluster) -> Vec<Violation> {
        let f = self
            .instance
            .get_typed_func::<(&Cluster,), (Vec<Violation>,)>(&mut self.store, self.validate)
            .expect("validate has the expected type");
        f.call(&mut self.store, (cluster,))
            .expect("reused validate call")
            .0
    }
}

// ---- the interleaved table -------------------------------------------------

/// Everything timed per round, each once, in a rotating order.
#[derive(Clone, Copy)]
enum Op {
    /// End to end, native guest.
    NativeE2e,
    /// End to end, wasm guest through `Module`.
    WasmE2e,
    /// `convert::input`.
    ConvertIn,
    /// `Native::reconcile`.
    NativeCall,
    /// `Module::reconcile`: fresh Store, instantiate, lower, run, lift.
    WasmCall,
    /// `convert::objects` + `convert::status`.
    ConvertOut,
    /// `Module::validate` on a one-shard cluster: fresh Store, instantiate
    /// and a call that moves almost nothing.
    WasmFreshEmpty,
    /// `Module::reconcile` on the real input with `shards = 0`: the guest
    /// lifts the whole input, rejects it at once, returns one violation.
    WasmFreshRejected,
    /// [`Reused::reconcile`] on the real input.
    ReusedCall,
    /// [`Reused::reconcile`] on the rejected input.
    ReusedRejected,
    /// [`Reused::validate`] on the one-shard cluster.
    ReusedEmpty,
}

const OPS: [Op; 11] = [
    Op::NativeE2e,
    Op::WasmE2e,
    Op::ConvertIn,
    Op::NativeCall,
    Op::WasmCall,
    Op::ConvertOut,
    Op::WasmFreshEmpty,
    Op::WasmFreshRejected,
    Op::ReusedCall,
    Op::ReusedRejected,
    Op::ReusedEmpty,
];

struct Fixture<'a> {
    snap: &'a Snapshot,
    module: &'a Module,
    reused: &'a mut Reused,
    input: Input,
    rejected: Input,
    desired: Desired,
    tiny: Cluster,
}

impl Fixture<'_> {
    fn time(&mut self, op: Op) -> Duration {
        let start = Instant::now();
        match op {
            Op::NativeE2e => drop(black_box(self.snap.end_to_end(&Native))),
            Op::WasmE2e => drop(black_box(self.snap.end_to_end(self.module))),
            Op::ConvertIn => drop(black_box(self.snap.input())),
            Op::NativeCall => drop(black_box(Native.reconcile(black_box(&self.input)))),
            Op::WasmCall => drop(black_box(self.module.reconcile(black_box(&self.input)))),
            Op::ConvertOut => drop(black_box(self.snap.output(black_box(&self.desired)))),
            Op::WasmFreshEmpty => drop(black_box(self.module.validate(&self.tiny))),
            Op::WasmFreshRejected => drop(black_box(self.module.reconcile(&self.rejected))),
            Op::ReusedCall => drop(black_box(self.reused.reconcile(&self.input))),
            Op::ReusedRejected => drop(black_box(self.reused.reconcile(&self.rejected))),
            Op::ReusedEmpty => drop(black_box(self.reused.validate(&self.tiny))),
        }
        start.elapsed()
    }
}

/// Medians of one size, indexed like [`OPS`].
struct Row {
    label: String,
    rounds: usize,
    median: [Duration; OPS.len()],
}

impl Row {
    fn get(&self, op: Op) -> Duration {
        self.median[op as usize]
    }
}

fn measure(
    snap: &Snapshot,
    module: &Module,
    reused: &mut Reused,
    budget: Duration,
    min_rounds: usize,
    max_rounds: usize,
) -> Row {
    let input = snap.input();
    let native = Native
        .reconcile(&input)
        .unwrap()
        .expect("native accepts the input");
    let wasm = module
        .reconcile(&input)
        .expect("wasm call")
        .expect("wasm accepts the input");
    assert_eq!(native, wasm, "{}: native and wasm disagree", snap.label());
    assert_eq!(
        reused.reconcile(&input).expect("reused accepts the input"),
        native
    );
    check_steady_state(snap, &native);

    let mut rejected = input.clone();
    rejected.cluster.shards = 0;
    let err = module
        .reconcile(&rejected)
        .expect("wasm call")
        .expect_err("shards = 0");
    assert!(!err.violations.is_empty());
    let mut tiny = input.cluster.clone();
    tiny.shards = 1;
    tiny.replicas = 0;
    assert!(module.validate(&tiny).expect("wasm call").is_empty());

    let mut fx = Fixture {
        snap,
        module,
        reused,
        input,
        rejected,
        desired: native,
        tiny,
    };
    // Warm every path once (allocator, caches, lazy init).
    for op in OPS {
        fx.time(op);
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); OPS.len()];
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < max_rounds && (rounds < min_rounds || started.elapsed() < budget) {
        // Rotate and alternate direction so each op follows each other op,
        // and native and wasm trade places, across rounds.
        let n = OPS.len();
        for i in 0..n {
            let j = (i + rounds) % n;
            let j = if rounds % 2 == 0 { j } else { n - 1 - j };
            let op = OPS[j];
            samples[op as usize].push(fx.time(op));
        }
        rounds += 1;
    }
    Row {
        label: snap.label(),
        rounds,
        median: std::array::from_fn(|i| median(&samples[i])),
    }
}

/// The snapshot is what it claims: every node reachable at its NodePort and
/// ready, so the guest does its full steady-state work.
fn check_steady_state(snap: &Snapshot, desired: &Desired) {
    let eps = desired
        .status
        .external_endpoints
        .as_ref()
        .expect("external endpoints");
    assert_eq!(eps.len(), snap.shards as usize);
    for ep in eps {
        assert_eq!(ep.nodes.len(), snap.nodes as usize);
        for n in &ep.nodes {
            assert!(n.ready && n.port >= 30000 && !n.host.is_empty(), "{n:?}");
        }
    }
    assert_eq!(desired.nodes.len(), (snap.shards * snap.nodes) as usize);
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// `a - b` of two medians, signed (noise can make it negative).
fn fmt_diff(a: Duration, b: Duration) -> String {
    if a >= b {
        fmt(a - b)
    } else {
        format!("-{}", fmt(b - a))
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

fn print_table(rows: &[Row]) {
    println!("\n## guest stage: end to end (medians of interleaved samples)\n");
    println!("| size | rounds | native e2e | wasm e2e | wasm/native |");
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.2}x |",
            r.label,
            r.rounds,
            fmt(r.get(Op::NativeE2e)),
            fmt(r.get(Op::WasmE2e)),
            ratio(r.get(Op::WasmE2e), r.get(Op::NativeE2e)),
        );
    }

    println!("\n## where the time goes (medians; the same for both paths except the guest)\n");
    println!(
        "| size | (a) convert in | (b) native fn | (b) wasm call | (c) convert out | wasm call / native fn |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.1}x |",
            r.label,
            fmt(r.get(Op::ConvertIn)),
            fmt(r.get(Op::NativeCall)),
            fmt(r.get(Op::WasmCall)),
            fmt(r.get(Op::ConvertOut)),
            ratio(r.get(Op::WasmCall), r.get(Op::NativeCall)),
        );
    }

    println!("\n## the wasm call split (differences of medians, so estimates)\n");
    println!(
        "| size | fresh: store+instantiate (empty call) | fresh: input lowered+lifted | fresh: run + output lifted | reused instance: call | reused: input | reused: run + output |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            fmt(r.get(Op::WasmFreshEmpty)),
            fmt_diff(r.get(Op::WasmFreshRejected), r.get(Op::WasmFreshEmpty)),
            fmt_diff(r.get(Op::WasmCall), r.get(Op::WasmFreshRejected)),
            fmt(r.get(Op::ReusedCall)),
            fmt_diff(r.get(Op::ReusedRejected), r.get(Op::ReusedEmpty)),
            fmt_diff(r.get(Op::ReusedCall), r.get(Op::ReusedRejected)),
        );
    }
    println!(
        "\nfresh = Module::reconcile as the operator calls it (new Store + instantiate per call); \
         \"empty call\" = Module::validate of a 1-shard spec; \"input\" = reconcile with \
         shards = 0 (whole input crosses, guest rejects at once) minus the empty call; \
         \"run + output\" = the real call minus that. reused = one instance kept across calls \
         (bench-only, not the runtime's behaviour)."
    );
    if let Some(r) = rows.iter().find(|r| r.label == "100x3") {
        let x = ratio(r.get(Op::WasmE2e), r.get(Op::NativeE2e));
        println!(
            "goal wasm <= 2x native end to end at 100x3: {:.2}x ({})",
            x,
            if x <= 2.0 { "met" } else { "NOT met" }
        );
    }
}

// ---- entry point -----------------------------------------------------------

fn selected_sizes() -> Vec<(u32, u32)> {
    let Ok(list) = std::env::var("SHARDGATE_BENCH_SIZES") else {
        return SIZES.to_vec();
    };
    let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
    SIZES
        .iter()
        .copied()
        .filter(|(s, n)| wanted.contains(&format!("{s}x{n}").as_str()))
        .collect()
}

fn run_criterion(snaps: &[Snapshot], module: &Module) {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    for snap in snaps {
        let mut g = c.benchmark_group(format!("guest_stage/{}", snap.label()));
        if snap.shards * snap.nodes >= 300 {
            // Milliseconds per iteration: few, evenly sized samples.
            g.sampling_mode(SamplingMode::Flat)
                .sample_size(20)
                .measurement_time(Duration::from_secs(4));
        }
        g.bench_function("native", |b| b.iter(|| snap.end_to_end(&Native)));
        g.bench_function("wasm", |b| b.iter(|| snap.end_to_end(module)));
        g.finish();
    }
    c.final_summary();
}

fn main() -> anyhow::Result<()> {
    let invocation = Invocation::from_env();
    let quick = invocation.quick();

    let runtime = Engine::new(Limits::default())?;
    let module = runtime.load_embedded()?;
    let mut reused = Reused::new(&runtime)?;
    let snaps: Vec<Snapshot> = selected_sizes()
        .into_iter()
        .map(|(s, n)| Snapshot::new(s, n))
        .collect();

    if !quick {
        run_criterion(&snaps, &module);
        if invocation.has("--list") {
            return Ok(());
        }
    }
    let (budget, min_rounds, max_rounds) = if quick {
        (Duration::ZERO, 3, 3)
    } else {
        (Duration::from_secs(6), 15, 2000)
    };
    let rows: Vec<Row> = snaps
        .iter()
        .map(|s| measure(s, &module, &mut reused, budget, min_rounds, max_rounds))
        .collect();
    print_table(&rows);
    if quick {
        println!("(quick mode: {min_rounds} rounds per size; timings are not meaningful)");
    }
    Ok(())
}
