//! What every reconcile shares: the client, the caches that make
//! up the observed snapshot, the reconcile module, metrics and events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};

use shardgate_k8s::apply::Recent;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::events::Recorder;
use shardgate_k8s::snapshot::Caches;
use shardgate_wasm::swap::{ModuleManager, Serving};
use shardgate_wasm::{CallBudget, CallError, Reconciler};

use crate::metrics::Metrics;
use crate::reconcile::{Recheck, Said};

/// What every reconcile shares: the client, the caches, the reconcile
/// module, metrics, the event recorder and per-cluster failure counts.
pub struct Context {
    pub client: kube::Client,
    /// The clusters, in kube's reflector store.
    pub clusters: Store<ValkeyCluster>,
    /// The kinds the clusters own, in shardgate's caches. Reconciles never
    /// wait for them to fill: the controller polls the watches that fill
    /// them only while it has a free reconcile slot, so reconciles that
    /// waited could fill every slot and wait forever
    /// ([`Caches::synced`] is checked instead).
    pub caches: Caches,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// Whether reconciles talk to the Valkey nodes.
    pub manage_valkey: bool,
    /// How soon to look again at a reshaping cluster.
    pub recheck: Recheck,
    /// Applies the stores have not shown yet.
    pub recent: Recent,
    /// What was last said in Events, so a message is not repeated while
    /// it holds.
    pub said: Said,
    /// The live `spec.config` each Valkey node (by ID) was last given.
    pub settings_set: Mutex<HashMap<String, String>>,
    /// The meets Valkey nodes (by ID) made lately to spread news, whose
    /// broken links are not taken for moved nodes.
    pub spreads: Arc<shardgate_valkey::Spreads>,
    modules: Arc<ModuleManager>,
    failures: Mutex<HashMap<ObjectRef<ValkeyCluster>, u32>>,
    /// When each cluster's old topology Services were first found retiring.
    pub retiring: crate::reconcile::retire::Retiring,
}

impl Context {
    /// A context whose events are reported as controller `shardgate`, instance
    /// `instance`.
    pub fn new(
        client: kube::Client,
        clusters: Store<ValkeyCluster>,
        caches: Caches,
        modules: Arc<ModuleManager>,
        metrics: Arc<Metrics>,
        instance: String,
        manage_valkey: bool,
    ) -> Self {
        Context {
            recorder: Recorder::new(client.clone(), "shardgate", &instance),
            client,
            clusters,
            caches,
            metrics,
            manage_valkey,
            recheck: Recheck::default(),
            recent: Default::default(),
            said: Said::default(),
            settings_set: Mutex::new(HashMap::new()),
            spreads: Arc::default(),
            modules,
            failures: Mutex::new(HashMap::new()),
            retiring: Default::default(),
        }
    }

    /// With `false`, every apply serialises its object and every missing
    /// object is looked up with a GET (see [`Recent::without_shortcuts`]).
    pub fn with_apply_shortcuts(mut self, on: bool) -> Self {
        if !on {
            self.recent = Recent::without_shortcuts();
        }
        self
    }

    /// Looks again at reshaping clusters by `recheck`.
    pub fn with_recheck(mut self, recheck: Recheck) -> Self {
        self.recheck = recheck;
        self
    }

    /// The module new reconciles use. A reconcile keeps the one it started
    /// with, so a swap never changes the logic under a running reconcile.
    pub fn module(&self) -> Arc<dyn Reconciler> {
        self.modules.module()
    }

    /// The module manager shared by every leadership term.
    pub fn modules(&self) -> &Arc<ModuleManager> {
        &self.modules
    }

    /// Replaces the module for reconciles that start from now on, without
    /// any check (see [`ModuleManager::offer`] for the checked path).
    pub fn swap_module(&self, module: Arc<dyn Reconciler>) {
        self.modules.install(Serving {
            module,
            digest: "unverified".into(),
            source: "swap_module".into(),
        });
    }

    /// The guest call of a reconcile of `cluster` (`namespace/name`)
    /// through `used` answered (a verdict on an invalid spec is an answer
    /// too).
    pub fn module_succeeded(&self, used: &Arc<dyn Reconciler>, cluster: &str) {
        self.modules.module_succeeded_on(used, cluster);
    }

    /// The guest call of a reconcile of `cluster` (`namespace/name`) through
    /// `used` failed; enough of these in a row on one cluster roll the
    /// module back, whatever other clusters do.
    pub fn module_failed(&self, used: &Arc<dyn Reconciler>, cluster: &str, error: &CallError) {
        self.modules.module_failed_on(used, cluster, error);
    }

    /// The memory budget guest calls take a slot of.
    pub fn budget(&self) -> &CallBudget {
        self.modules.budget()
    }

    /// Backoff after consecutive failures: 200 ms, 400 ms, 800 ms ... at
    /// most 5 minutes.
    pub fn failed(&self, obj: ObjectRef<ValkeyCluster>) -> Duration {
        let mut f = self.failures.lock().unwrap();
        let n = f.entry(obj).or_insert(0);
        *n = (*n + 1).min(16);
        Duration::from_millis(200u64.saturating_mul(1 << (*n - 1))).min(Duration::from_secs(300))
    }

    /// Resets `obj`'s backoff after a successful reconcile.
    pub fn succeeded(&self, obj: &ObjectRef<ValkeyCluster>) {
        self.failures.lock().unwrap().remove(obj);
    }

    /// A context whose client answers nothing (every request would wait),
    /// for stages that never reach the API server.
    #[cfg(test)]
    pub(crate) fn for_tests(modules: Arc<ModuleManager>) -> Self {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let (clusters, _) = kube::runtime::reflector::store();
        Context::new(
            client,
            clusters,
            Caches::default(),
            modules,
            Arc::new(Metrics::default()),
            "test".into(),
            false,
        )
    }
}
