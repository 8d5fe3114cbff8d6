//! Hot-swappable reconcile modules.
//!
//! A [`ModuleSource`] says where the module comes from: the one embedded in
//! the binary, a file (watched for changes) or a ConfigMap's `binaryData`
//! (watched through the API). Every new version is a [`Candidate`]: its
//! SHA-256 is compared with the pinned one, it is compiled and type-checked
//! ([`Engine::load`](crate::Engine::load)) and then run on the golden inputs ([`golden`]), all
//! off the reconcile path. Only then does the [`ModuleManager`] swap it in,
//! atomically: reconciles that already started keep the module they started
//! with, new ones get the new module, and every cluster is re-reconciled.
//!
//! A rejected candidate changes nothing: the last good module keeps serving,
//! and the rejection is logged and reported to the [`Observer`] (the
//! operator counts it, `shardgate_module_swaps_total{result="rejected"}`, and
//! records a `ModuleRejected` Event). A module that passes the checks but
//! then fails at reconcile time (trap, deadline, memory cap, exit)
//! `rollback_after` times in a row *on one cluster* is replaced by the
//! previous good module (`ModuleRolledBack`), however many other clusters
//! it serves well: failures are counted per cluster ([`Failures`]).
//!
//! Every guest call of the hosts, and the self-check of an offered
//! candidate, takes a slot of the manager's memory budget
//! ([`ModuleManager::budget`]).
//!
//! A file source is followed here ([`source`]); a host follows other
//! sources (a ConfigMap, through the Kubernetes API) and offers what it
//! reads to [`ModuleManager::offer`].

pub mod candidate;
pub mod golden;
pub mod source;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::broadcast;
use tracing::{info, warn};

pub use candidate::{Accepted, Candidate, CheckTimings, Rejection};
pub use golden::Golden;

use crate::budget::CallBudget;
use crate::precompiled::{Precompiled, sha256_hex};
use crate::{CallError, EMBEDDED_GUEST, Engine, Reconciler, Tier};

/// What a host hears of the manager: which module serves, each checked
/// candidate, rollbacks, and warnings an operator must see. Every method
/// has a default that does nothing.
/// A checked candidate's result, as [`Observer::checked`] reports it: it
/// passed every check and serves.
pub const ACCEPTED: &str = "accepted";
/// A checked candidate's result: it failed a check; the last good module
/// keeps serving.
pub const REJECTED: &str = "rejected";
/// Every result [`Observer::checked`] reports.
pub const CHECK_RESULTS: [&str; 2] = [ACCEPTED, REJECTED];

pub trait Observer: Send + Sync {
    /// `serving` now serves; `replaced` served before it.
    fn serving(&self, replaced: Option<&Serving>, serving: &Serving) {
        let _ = (replaced, serving);
    }
    /// A candidate was checked: `result` is `accepted` or `rejected`.
    fn checked(&self, result: &'static str) {
        let _ = result;
    }
    /// The serving module was rolled back to the previous one.
    fn rolled_back(&self) {}
    /// A rejection or a rollback, in words: `reason` is a CamelCase reason
    /// (`ModuleRejected`, `ModuleRolledBack`), `action` what was done.
    fn warning(&self, reason: &'static str, action: &'static str, note: String) {
        let _ = (reason, action, note);
    }
}

/// An observer that ignores everything.
pub struct Unobserved;

impl Observer for Unobserved {}

/// The default for `--module-rollback-after`.
pub const DEFAULT_ROLLBACK_AFTER: u32 = 3;
/// The default `binaryData` key of a ConfigMap source.
pub const DEFAULT_CONFIGMAP_KEY: &str = "reconcile.wasm";

/// Where the reconcile module comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// The guest built into this binary.
    Embedded,
    /// A component file, watched for changes (its directory is watched, so
    /// an atomic rename and a Kubernetes volume update are seen too).
    File {
        path: PathBuf,
        sha256: Option<String>,
    },
    /// A ConfigMap carrying the component in `binaryData[key]`, watched
    /// through the API.
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
        sha256: Option<String>,
    },
}

impl ModuleSource {
    /// The `source` label of `shardgate_module_info`: `embedded`,
    /// `file:PATH` or `configmap:NAMESPACE/NAME/KEY`.
    pub fn label(&self) -> String {
        match self {
            ModuleSource::Embedded => "embedded".into(),
            ModuleSource::File { path, .. } => format!("file:{}", path.display()),
            ModuleSource::ConfigMap {
                namespace,
                name,
                key,
                ..
            } => format!("configmap:{namespace}/{name}/{key}"),
        }
    }

    /// The pinned digest, if any.
    pub fn sha256(&self) -> Option<&str> {
        match self {
            ModuleSource::Embedded => None,
            ModuleSource::File { sha256, .. } | ModuleSource::ConfigMap { sha256, .. } => {
                sha256.as_deref()
            }
        }
    }
}

/// A module that serves (or served): the module, its digest and where it
/// came from.
#[derive(Clone)]
pub struct Serving {
    pub module: Arc<dyn Reconciler>,
    pub digest: String,
    pub source: String,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("digest", &self.digest)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Serving {
    /// The embedded guest, loaded by `engine`.
    pub fn embedded(engine: &Engine) -> anyhow::Result<Serving> {
        Ok(Serving {
            module: Arc::new(engine.load_embedded()?),
            digest: sha256_hex(EMBEDDED_GUEST),
            source: ModuleSource::Embedded.label(),
        })
    }
}

/// What checks candidates: the engine that compiles them and the golden
/// inputs they run on.
#[derive(Clone)]
pub struct Checker {
    /// The optimising engine: the code that serves in the end.
    pub engine: Arc<Engine>,
    /// A baseline engine ([`Tier::Baseline`]). With one, a candidate whose
    /// optimised code is not precompiled is compiled by it first and, once
    /// checked, serves at once; the optimised code replaces it when it is
    /// compiled and checked too ([`ModuleManager::offer`]).
    pub baseline: Option<Arc<Engine>>,
    pub golden: Arc<Golden>,
    /// Precompiled modules, when a directory for them is configured.
    pub precompiled: Option<Precompiled>,
}

impl Checker {
    /// A checker that compiles with `engine` and self-checks on the built-in
    /// golden inputs, with no baseline engine and no precompiled modules.
    pub fn new(engine: Arc<Engine>) -> Self {
        Checker {
            engine,
            baseline: None,
            golden: Arc::new(Golden::builtin()),
            precompiled: None,
        }
    }

    /// Serves new modules from baseline code while the optimised code
    /// compiles.
    pub fn with_baseline(mut self, baseline: Arc<Engine>) -> Self {
        self.baseline = Some(baseline);
        self
    }

    /// Whether a candidate with this digest should be compiled by the
    /// baseline engine first: there is one, and no precompiled optimised
    /// code is stored.
    fn baseline_first(&self, digest: &str) -> bool {
        self.baseline.is_some()
            && self
                .precompiled
                .as_ref()
                .is_none_or(|c| !c.contains(&self.engine, digest))
    }

    /// Loads candidates through a directory of precompiled modules.
    pub fn with_precompiled(mut self, precompiled: Precompiled) -> Self {
        self.precompiled = Some(precompiled);
        self
    }

    /// Checks on a blocking thread with the optimising engine.
    pub async fn check(
        &self,
        bytes: Vec<u8>,
        sha256: Option<String>,
    ) -> Result<Accepted, Rejection> {
        self.check_on(Tier::Optimized, bytes.into(), sha256).await
    }

    /// Checks on a blocking thread with the engine of `tier` (only
    /// optimised code is precompiled). `Baseline` needs a baseline engine.
    async fn check_on(
        &self,
        tier: Tier,
        bytes: Arc<[u8]>,
        sha256: Option<String>,
    ) -> Result<Accepted, Rejection> {
        let (engine, precompiled) = match (tier, &self.baseline) {
            (Tier::Baseline, Some(baseline)) => (baseline.clone(), None),
            _ => (self.engine.clone(), self.precompiled.clone()),
        };
        let golden = self.golden.clone();
        tokio::task::spawn_blocking(move || {
            Candidate {
                bytes: &bytes,
                sha256: sha256.as_deref(),
            }
            .check(&engine, &golden, precompiled.as_ref())
        })
        .await
        .unwrap_or_else(|e| Err(Rejection::Load(format!("the check itself failed: {e}"))))
    }
}

/// Consecutive reconcile-time failures of the serving module, per cluster
/// (`namespace/name`; the empty key for callers that name none). A
/// cluster's count goes when it succeeds, and every count when the module
/// is swapped or rolled back.
#[derive(Debug, Default)]
pub struct Failures(HashMap<String, u32>);

impl Failures {
    /// Counts a failure on `cluster`; returns its failures in a row.
    pub fn failed(&mut self, cluster: &str) -> u32 {
        let n = self.0.entry(cluster.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// `cluster` was answered: its run of failures ends. Others' do not.
    pub fn succeeded(&mut self, cluster: &str) {
        self.0.remove(cluster);
    }

    /// `cluster`'s failures in a row.
    pub fn of(&self, cluster: &str) -> u32 {
        self.0.get(cluster).copied().unwrap_or(0)
    }

    /// Forgets every count (a new module serves).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

struct State {
    current: Serving,
    previous: Option<Serving>,
    /// Consecutive reconcile-time failures of `current`, per cluster.
    failures: Failures,
    /// Digests rolled back; never taken again.
    rolled_back: HashSet<String>,
    last_check: Option<CheckTimings>,
    last_rejection: Option<String>,
}

/// Holds the serving module and the previous good one, swaps them, and
/// rolls back on repeated reconcile-time failures.
pub struct ModuleManager {
    state: Mutex<State>,
    /// What reconciles read: swapped under the state lock, read without it.
    serving: RwLock<Arc<dyn Reconciler>>,
    observer: Arc<dyn Observer>,
    rollback_after: u32,
    budget: CallBudget,
    reconcile_all: broadcast::Sender<()>,
}

impl ModuleManager {
    /// Starts serving `initial`, telling `observer` what happens.
    pub fn new(initial: Serving, observer: Arc<dyn Observer>) -> Self {
        observer.serving(None, &initial);
        let (reconcile_all, _) = broadcast::channel(16);
        ModuleManager {
            serving: RwLock::new(initial.module.clone()),
            state: Mutex::new(State {
                current: initial,
                previous: None,
                failures: Failures::default(),
                rolled_back: HashSet::new(),
                last_check: None,
                last_rejection: None,
            }),
            observer,
            rollback_after: DEFAULT_ROLLBACK_AFTER,
            budget: CallBudget::operator_default(),
            reconcile_all,
        }
    }

    /// Runs guest calls within `budget` (default:
    /// [`CallBudget::operator_default`]).
    pub fn with_budget(mut self, budget: CallBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The memory budget every guest call through this manager's modules
    /// takes a slot of ([`crate::guard::call`]).
    pub fn budget(&self) -> &CallBudget {
        &self.budget
    }

    /// Rolls back after `n` consecutive reconcile-time failures (at least 1).
    pub fn with_rollback_after(mut self, n: u32) -> Self {
        self.rollback_after = n.max(1);
        self
    }

    /// The module for a reconcile that starts now.
    pub fn module(&self) -> Arc<dyn Reconciler> {
        self.serving.read().unwrap().clone()
    }

    /// The serving module with its digest and source.
    pub fn serving(&self) -> Serving {
        self.state.lock().unwrap().current.clone()
    }

    /// The previous good module, the one a rollback restores.
    pub fn previous(&self) -> Option<Serving> {
        self.state.lock().unwrap().previous.clone()
    }

    /// Timings of the last accepted candidate's check.
    pub fn last_check(&self) -> Option<CheckTimings> {
        self.state.lock().unwrap().last_check
    }

    /// The last rejection or rollback, as logged.
    pub fn last_rejection(&self) -> Option<String> {
        self.state.lock().unwrap().last_rejection.clone()
    }

    /// Each message asks to re-reconcile every cluster (after a swap or a
    /// rollback).
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.reconcile_all.subscribe()
    }

    /// Checks `bytes` from `source` and swaps them in if they pass; on any
    /// rejection the serving module stays and the rejection is reported.
    /// With a baseline engine in `checker` (and no precompiled optimised code),
    /// the baseline code serves as soon as it passes, and this returns once
    /// the optimised code serves too (or failed to, which is logged).
    /// Returns the new digest.
    pub async fn offer(
        &self,
        checker: &Checker,
        bytes: Vec<u8>,
        source: &ModuleSource,
    ) -> Result<String, Rejection> {
        let label = source.label();
        let digest = sha256_hex(&bytes);
        if self.state.lock().unwrap().rolled_back.contains(&digest)
            && source
                .sha256()
                .is_none_or(|pin| pin.eq_ignore_ascii_case(&digest))
        {
            let r = Rejection::RolledBack(digest);
            self.reject(&label, &r);
            return Err(r);
        }
        let pin = source.sha256().map(String::from);
        let bytes: Arc<[u8]> = bytes.into();
        // The self-check calls the candidate: a slot of the budget, held
        // for the whole check.
        let _slot = match self.budget.acquire(None).await {
            Ok(slot) => slot,
            Err(e) => {
                let r = Rejection::Read(format!("no guest call slot for the check: {e}"));
                self.reject(&label, &r);
                return Err(r);
            }
        };
        if checker.baseline_first(&digest) {
            match checker
                .check_on(Tier::Baseline, bytes.clone(), pin.clone())
                .await
            {
                Ok(accepted) => {
                    self.accept(&label, accepted, Tier::Baseline);
                    // Then the optimised code, which replaces it.
                    match checker.check_on(Tier::Optimized, bytes, pin).await {
                        Ok(optimized) => self.tier_up(optimized),
                        Err(r) => warn!(
                            source = %label,
                            %digest,
                            error = %r,
                            "the optimised compile of an accepted module failed; its baseline code keeps serving"
                        ),
                    }
                    return Ok(digest);
                }
                // The optimising check below gives the verdict (and compiles
                // what the baseline compiler cannot).
                Err(r) => info!(
                    source = %label,
                    %digest,
                    error = %r,
                    "baseline check failed; checking with the optimising compiler"
                ),
            }
        }
        match checker.check_on(Tier::Optimized, bytes, pin).await {
            Ok(accepted) => {
                self.accept(&label, accepted, Tier::Optimized);
                Ok(digest)
            }
            Err(r) => {
                self.reject(&label, &r);
                Err(r)
            }
        }
    }

    /// Swaps in a checked candidate.
    fn accept(&self, label: &str, accepted: Accepted, tier: Tier) {
        info!(
            source = %label,
            digest = %accepted.digest,
            ?tier,
            compile_ms = accepted.timings.compile.as_secs_f64() * 1e3,
            self_check_ms = accepted.timings.self_check.as_secs_f64() * 1e3,
            "reconcile module accepted"
        );
        self.state.lock().unwrap().last_check = Some(accepted.timings);
        self.install(Serving {
            module: accepted.module,
            digest: accepted.digest,
            source: label.to_string(),
        });
        self.observer.checked(ACCEPTED);
    }

    /// Replaces the serving module's code with `optimized`, the same module
    /// compiled by the optimising compiler, if that module still serves.
    /// Same digest, same answers: nothing is re-reconciled, and the previous
    /// module and the failure count stay.
    fn tier_up(&self, optimized: Accepted) {
        let mut st = self.state.lock().unwrap();
        if st.current.digest != optimized.digest {
            return;
        }
        st.current.module = optimized.module.clone();
        *self.serving.write().unwrap() = optimized.module;
        info!(
            digest = %optimized.digest,
            compile_ms = optimized.timings.compile.as_secs_f64() * 1e3,
            "reconcile module now runs optimised code"
        );
    }

    /// Swaps `serving` in without any check (the checked path is
    /// [`Self::offer`]): the current module becomes the previous one, new
    /// reconciles get `serving`, and every cluster is re-reconciled.
    pub fn install(&self, serving: Serving) {
        {
            let mut st = self.state.lock().unwrap();
            let old = std::mem::replace(&mut st.current, serving.clone());
            self.observer.serving(Some(&old), &serving);
            *self.serving.write().unwrap() = serving.module.clone();
            // Swapping to the same digest (a re-offer) keeps the previous.
            if old.digest != serving.digest {
                st.previous = Some(old);
            }
            st.failures.clear();
        }
        info!(digest = %serving.digest, source = %serving.source, "reconcile module serving");
        let _ = self.reconcile_all.send(());
    }

    /// Reports a rejected candidate: log, counter, Event.
    pub fn reject(&self, source: &str, rejection: &Rejection) {
        let serving = {
            let mut st = self.state.lock().unwrap();
            st.last_rejection = Some(rejection.to_string());
            st.current.digest.clone()
        };
        warn!(
            %source,
            reason = rejection.kind(),
            error = %rejection,
            serving = %serving,
            "reconcile module rejected; the last good module keeps serving"
        );
        self.observer.checked(REJECTED);
        self.observer.warning(
            "ModuleRejected",
            "SwapModule",
            format!("{source}: {rejection}; still serving {serving}"),
        );
    }

    /// A guest call through `used` succeeded, for no cluster in
    /// particular: [`Self::module_succeeded_on`] with the empty key.
    pub fn module_succeeded(&self, used: &Arc<dyn Reconciler>) {
        self.module_succeeded_on(used, "");
    }

    /// A guest call through `used` failed, for no cluster in particular:
    /// [`Self::module_failed_on`] with the empty key.
    pub fn module_failed(&self, used: &Arc<dyn Reconciler>, error: &CallError) -> bool {
        self.module_failed_on(used, "", error)
    }

    /// A reconcile of `cluster` (`namespace/name`) got an answer through
    /// `used` (an invalid-spec verdict is an answer too): that cluster's run
    /// of failures ends; other clusters' runs go on.
    pub fn module_succeeded_on(&self, used: &Arc<dyn Reconciler>, cluster: &str) {
        let mut st = self.state.lock().unwrap();
        if Arc::ptr_eq(used, &st.current.module) {
            st.failures.succeeded(cluster);
        }
    }

    /// A reconcile of `cluster` (`namespace/name`) failed in its guest call
    /// through `used`. Module failures ([`CallError::is_module_failure`]:
    /// deadline, memory cap, trap, exit, abandoned) count towards a
    /// rollback; host errors do not, nor do failures of a module that no
    /// longer serves. `rollback_after` failures in a row on one cluster
    /// roll back, whatever other clusters do. Returns whether this rolled
    /// back.
    pub fn module_failed_on(
        &self,
        used: &Arc<dyn Reconciler>,
        cluster: &str,
        error: &CallError,
    ) -> bool {
        if !error.is_module_failure() {
            return false;
        }
        let (from, to) = {
            let mut st = self.state.lock().unwrap();
            if !Arc::ptr_eq(used, &st.current.module) {
                return false;
            }
            let failures = st.failures.failed(cluster);
            if failures < self.rollback_after {
                return false;
            }
            let Some(previous) = st.previous.take() else {
                if failures == self.rollback_after {
                    warn!(
                        failures,
                        %cluster,
                        digest = %st.current.digest,
                        "reconcile module keeps failing and there is no previous module to roll back to"
                    );
                }
                return false;
            };
            let bad = std::mem::replace(&mut st.current, previous.clone());
            st.rolled_back.insert(bad.digest.clone());
            st.failures.clear();
            self.observer.serving(Some(&bad), &previous);
            *self.serving.write().unwrap() = previous.module.clone();
            st.last_rejection = Some(format!(
                "rolled back {} after {} failures in a row on {}: {error}",
                bad.digest,
                self.rollback_after,
                cluster_label(cluster)
            ));
            (bad, previous)
        };
        warn!(
            from = %from.digest,
            to = %to.digest,
            failures = self.rollback_after,
            %cluster,
            last_error = %error,
            "reconcile module rolled back to the previous good module"
        );
        self.observer.rolled_back();
        self.observer.warning(
            "ModuleRolledBack",
            "RollbackModule",
            format!(
                "{} ({}) failed {} reconciles in a row on {} (last: {error}); rolled back to {} ({})",
                from.digest,
                from.source,
                self.rollback_after,
                cluster_label(cluster),
                to.digest,
                to.source
            ),
        );
        let _ = self.reconcile_all.send(());
        true
    }
}

/// How a failure key reads in messages.
fn cluster_label(cluster: &str) -> String {
    if cluster.is_empty() {
        "any cluster".into()
    } else {
        format!("cluster {cluster}")
    }
}

#[cfg(test)]
mod tests;
