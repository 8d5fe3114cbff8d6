//! P6: one cluster's edit latency, under load and idle.
//!
//! An edit is a JSON merge patch of one ValkeyCluster's spec, sent as a
//! user's `kubectl patch` would be, through the emulator's HTTP API with a
//! `kube::Client` (the emulator has no in-process spec patch); its latency
//! runs from just before the patch is sent until the cluster's status is
//! Ready=True and Progressing=False for the generation the patch made
//! ([`crate::converged`]). The status is polled in process every [`POLL`]
//! from a blocking thread (one shared read of one object, no copy), so each
//! figure is late by at most about that much.
//!
//! Two kinds, one after the other:
//! - **annotations**: `spec.externalAccess.serviceAnnotations` gets a new
//!   value each edit, which every shard Service carries: the operator applies
//!   the changed Services and reports Ready for the new generation;
//! - **shards**: `spec.shards` alternates between one more than the cluster
//!   has and back (10 -> 11 -> 10 ...): a scale-out (a new shard's
//!   StatefulSet, Services and ConfigMap; the emulator's Pods start Ready)
//!   then a scale-in (the operator runs with `--no-manage-valkey`, so a
//!   departing shard's objects are deleted without draining), each until
//!   Ready for its generation.
//!
//! Edits run one at a time: each starts once the one before it converged.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::api::{Api, Patch, PatchParams};
use kube_emulator::Emulator;
use serde_json::{Value, json};
use shardgate_k8s::crd::ValkeyCluster;

/// How often the cluster's status is read while an edit is under way.
pub const POLL: Duration = Duration::from_millis(2);

/// The annotation the edits set, a new value each time.
const ANNOTATION: &str = "bench.shardgate.io/edit";

/// One kind of edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    Annotations,
    Shards,
}

impl Edit {
    pub const ALL: [Edit; 2] = [Edit::Annotations, Edit::Shards];

    pub fn name(self) -> &'static str {
        match self {
            Edit::Annotations => "serviceAnnotations",
            Edit::Shards => "spec.shards",
        }
    }

    /// The `i`th patch of this kind, for a cluster created with `shards`.
    fn patch(self, i: usize, shards: u32) -> Value {
        match self {
            Edit::Annotations => json!({
                "spec": {"externalAccess": {"serviceAnnotations": {ANNOTATION: i.to_string()}}}
            }),
            // Out on even edits, back in on odd ones.
            Edit::Shards => json!({"spec": {"shards": shards + u32::from(i.is_multiple_of(2))}}),
        }
    }
}

/// The latencies of one kind of edit, in the order they ran.
pub struct Latencies {
    pub edit: Edit,
    pub samples: Vec<Duration>,
    /// When each edit was sent, since the first edit of any kind was.
    pub sent: Vec<Duration>,
}

impl Latencies {
    /// The nearest-rank percentile `p` (0 < p <= 1), in ms.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
        sorted
            .get(rank - 1)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    }

    pub fn median_ms(&self) -> f64 {
        self.percentile_ms(0.5)
    }

    pub fn p99_ms(&self) -> f64 {
        self.percentile_ms(0.99)
    }
}

/// Runs `count` edits of each kind, in turn, on cluster `ns/name` (created
/// with `shards` shards), each allowed `deadline` to converge; an edit that
/// does not converge in time is an error.
pub async fn run(
    emu: &Emulator,
    ns: &str,
    name: &str,
    shards: u32,
    count: usize,
    deadline: Duration,
) -> anyhow::Result<Vec<Latencies>> {
    let api: Api<ValkeyCluster> = Api::namespaced(emu.client().await?, ns);
    let mut all = Vec::new();
    let first = Instant::now();
    for edit in Edit::ALL {
        let mut samples = Vec::with_capacity(count);
        let mut sent = Vec::with_capacity(count);
        for i in 0..count {
            let started = Instant::now();
            sent.push(started - first);
            let patched = api
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(edit.patch(i, shards)),
                )
                .await
                .with_context(|| format!("{} edit {i} of {ns}/{name}", edit.name()))?;
            let generation = patched
                .metadata
                .generation
                .context("a patched ValkeyCluster has a generation")?;
            let took = tokio::task::block_in_place(|| {
                until_converged(emu, ns, name, generation, started, deadline)
            })
            .with_context(|| format!("{} edit {i} of {ns}/{name}", edit.name()))?;
            samples.push(took);
        }
        all.push(Latencies {
            edit,
            samples,
            sent,
        });
    }
    Ok(all)
}

/// Polls `ns/name` every [`POLL`] until it is converged for `generation`;
/// returns the time since `started`.
fn until_converged(
    emu: &Emulator,
    ns: &str,
    name: &str,
    generation: i64,
    started: Instant,
    deadline: Duration,
) -> anyhow::Result<Duration> {
    loop {
        let clusters = emu.list_shared("valkeyclusters", Some(ns));
        let vc = clusters
            .iter()
            .find(|vc| vc["metadata"]["name"] == name)
            .context("the edited cluster exists")?;
        let seen = vc["metadata"]["generation"].as_i64().unwrap_or_default();
        anyhow::ensure!(
            seen == generation,
            "generation {seen} where the patch made {generation}: something else edits the cluster"
        );
        if crate::converged(vc) {
            return Ok(started.elapsed());
        }
        let waited = started.elapsed();
        if waited > deadline {
            anyhow::bail!(
                "not Ready for generation {generation} after {waited:?}; status: {}",
                vc["status"]["conditions"]
            );
        }
        std::thread::sleep(POLL);
    }
}
