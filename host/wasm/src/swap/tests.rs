//! The manager's swap and rollback logic, with fake reconcilers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};

use super::*;
use crate::{Limits, Native, Reconciler};

/// An observer that records what it hears.
#[derive(Default)]
struct Recorded {
    /// The module serving now, as "digest source".
    serving: Mutex<Option<String>>,
    checked: Mutex<Vec<&'static str>>,
    rollbacks: Mutex<u32>,
    warnings: Mutex<Vec<&'static str>>,
}

impl Observer for Recorded {
    fn serving(&self, _: Option<&Serving>, serving: &Serving) {
        *self.serving.lock().unwrap() = Some(format!("{} {}", serving.digest, serving.source));
    }
    fn checked(&self, result: &'static str) {
        self.checked.lock().unwrap().push(result);
    }
    fn rolled_back(&self) {
        *self.rollbacks.lock().unwrap() += 1;
    }
    fn warning(&self, reason: &'static str, _: &'static str, _: String) {
        self.warnings.lock().unwrap().push(reason);
    }
}

impl Recorded {
    fn serving_now(&self) -> Option<String> {
        self.serving.lock().unwrap().clone()
    }
    fn checked(&self, result: &str) -> usize {
        self.checked
            .lock()
            .unwrap()
            .iter()
            .filter(|r| **r == result)
            .count()
    }
}

/// The native guest, or a trap while `broken` is set.
struct Flaky {
    broken: AtomicBool,
}

impl Reconciler for Flaky {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(CallError::Trap("unreachable executed".into()));
        }
        Native.reconcile(input)
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Native.validate(cluster)
    }
}

fn serving(module: Arc<dyn Reconciler>, digest: &str) -> Serving {
    Serving {
        module,
        digest: digest.into(),
        source: format!("test:{digest}"),
    }
}

#[test]
fn the_embedded_guest_and_the_native_crate_pass_the_self_check() {
    let engine = Engine::new(Limits::default()).unwrap();
    let golden = Golden::builtin();
    candidate::self_check(&Native, &golden).unwrap();
    let accepted = Candidate {
        bytes: EMBEDDED_GUEST,
        sha256: None,
    }
    .check(&engine, &golden, None)
    .unwrap();
    assert_eq!(accepted.digest, sha256_hex(EMBEDDED_GUEST));
    // A pin in upper case is the same digest.
    Candidate {
        bytes: EMBEDDED_GUEST,
        sha256: Some(&accepted.digest.to_uppercase()),
    }
    .check(&engine, &golden, None)
    .unwrap();
}

#[test]
fn a_wrong_pin_and_wrong_bytes_are_rejected_with_their_reason() {
    let engine = Engine::new(Limits::default()).unwrap();
    let golden = Golden::builtin();
    let pin = "0".repeat(64);
    let r = Candidate {
        bytes: EMBEDDED_GUEST,
        sha256: Some(&pin),
    }
    .check(&engine, &golden, None)
    .err()
    .unwrap();
    assert_eq!(r.kind(), "digest");
    assert_eq!(
        r.to_string(),
        format!(
            "digest mismatch: expected {pin}, got {}",
            sha256_hex(EMBEDDED_GUEST)
        )
    );
    let r = Candidate {
        bytes: &EMBEDDED_GUEST[..EMBEDDED_GUEST.len() / 2],
        sha256: None,
    }
    .check(&engine, &golden, None)
    .err()
    .unwrap();
    assert_eq!(r.kind(), "load", "{r}");
}

/// Drops every announce key but the first: the self-check must notice.
struct ForgetsAnnounce;

impl Reconciler for ForgetsAnnounce {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Ok(Native.reconcile(input)?.map(|mut d| {
            for n in &mut d.nodes {
                n.announce.truncate(1);
            }
            d
        }))
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Native.validate(cluster)
    }
}

/// Names a port after the wrong node.
struct MislabelsPorts;

impl Reconciler for MislabelsPorts {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Ok(Native.reconcile(input)?.map(|mut d| {
            if let Some(p) = d.services.first_mut().and_then(|s| s.ports.first_mut()) {
                p.name = "vk-n7".into();
            }
            d
        }))
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Native.validate(cluster)
    }
}

/// Accepts everything.
struct Lenient;

impl Reconciler for Lenient {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Native.reconcile(input)
    }

    fn validate(&self, _: &Cluster) -> Result<Vec<Violation>, CallError> {
        Ok(Vec::new())
    }
}

#[test]
fn the_self_check_catches_broken_invariants() {
    let golden = Golden::builtin();
    let r = candidate::self_check(&ForgetsAnnounce, &golden).unwrap_err();
    assert_eq!(r.kind(), "self-check");
    assert!(r.to_string().contains("cluster-announce-"), "{r}");
    let r = candidate::self_check(&MislabelsPorts, &golden).unwrap_err();
    assert!(r.to_string().contains("does not name its node"), "{r}");
    let r = candidate::self_check(&Lenient, &golden).unwrap_err();
    assert!(
        r.to_string().contains("validate accepted an invalid spec"),
        "{r}"
    );
}

#[test]
fn install_swaps_and_keeps_the_previous_module() {
    let observer = Arc::new(Recorded::default());
    let a: Arc<dyn Reconciler> = Arc::new(Native);
    let b: Arc<dyn Reconciler> = Arc::new(Native);
    let m = ModuleManager::new(serving(a.clone(), "aaa"), observer.clone());
    let mut rx = m.subscribe();
    assert_eq!(observer.serving_now().as_deref(), Some("aaa test:aaa"));
    m.install(serving(b.clone(), "bbb"));
    assert!(Arc::ptr_eq(&m.module(), &b));
    assert_eq!(m.previous().unwrap().digest, "aaa");
    assert_eq!(observer.serving_now().as_deref(), Some("bbb test:bbb"));
    assert!(rx.try_recv().is_ok(), "a swap re-reconciles everything");
}

#[test]
fn consecutive_failures_roll_back_to_the_previous_module() {
    let observer = Arc::new(Recorded::default());
    let good: Arc<dyn Reconciler> = Arc::new(Native);
    let flaky = Arc::new(Flaky {
        broken: AtomicBool::new(false),
    });
    let bad: Arc<dyn Reconciler> = flaky.clone();
    let m =
        ModuleManager::new(serving(good.clone(), "good"), observer.clone()).with_rollback_after(3);
    m.install(serving(bad.clone(), "bad"));
    let mut rx = m.subscribe();
    let trap = CallError::Trap("unreachable".into());

    // Failures of a module that no longer serves, host errors and failures
    // interrupted by a success do not count.
    assert!(!m.module_failed(&good, &trap));
    assert!(!m.module_failed(&bad, &CallError::Host(anyhow::anyhow!("x"))));
    assert!(!m.module_failed(&bad, &trap));
    assert!(!m.module_failed(&bad, &trap));
    m.module_succeeded(&bad);
    assert!(!m.module_failed(&bad, &trap));
    assert!(!m.module_failed(
        &bad,
        &CallError::Deadline(std::time::Duration::from_secs(1))
    ));
    assert!(Arc::ptr_eq(&m.module(), &bad));
    assert!(
        m.module_failed(&bad, &CallError::MemoryCap(1)),
        "the third in a row rolls back"
    );

    assert!(Arc::ptr_eq(&m.module(), &good));
    assert_eq!(m.serving().digest, "good");
    assert!(m.previous().is_none(), "never back to the bad module");
    assert_eq!(*observer.rollbacks.lock().unwrap(), 1);
    assert_eq!(*observer.warnings.lock().unwrap(), ["ModuleRolledBack"]);
    assert_eq!(observer.serving_now().as_deref(), Some("good test:good"));
    assert!(rx.try_recv().is_ok(), "a rollback re-reconciles everything");
    assert!(m.last_rejection().unwrap().contains("rolled back bad"));

    // With nothing to go back to, failures only count.
    for _ in 0..5 {
        assert!(!m.module_failed(&good, &trap));
    }
    assert!(Arc::ptr_eq(&m.module(), &good));
}

#[test]
fn failures_are_counted_per_cluster() {
    let mut f = Failures::default();
    assert_eq!(f.failed("ns/a"), 1);
    assert_eq!(f.failed("ns/b"), 1);
    assert_eq!(f.failed("ns/a"), 2);
    f.succeeded("ns/b");
    assert_eq!(
        f.of("ns/a"),
        2,
        "another cluster's success ends only its own run"
    );
    assert_eq!(f.of("ns/b"), 0);
    f.succeeded("ns/a");
    assert_eq!(f.failed("ns/a"), 1, "a success ends the run");
    f.clear();
    assert_eq!(f.of("ns/a"), 0);
}

#[test]
fn one_failing_cluster_among_healthy_ones_rolls_back() {
    let observer = Arc::new(Recorded::default());
    let good: Arc<dyn Reconciler> = Arc::new(Native);
    let bad: Arc<dyn Reconciler> = Arc::new(Native);
    let m =
        ModuleManager::new(serving(good.clone(), "good"), observer.clone()).with_rollback_after(3);
    m.install(serving(bad.clone(), "bad"));
    let healthy: Vec<String> = (0..10).map(|i| format!("default/c{i}")).collect();
    // Ten clusters answered between every failure of the eleventh: with one
    // global count they would reset it for ever.
    for round in 0..3 {
        for c in &healthy {
            m.module_succeeded_on(&bad, c);
        }
        // Host errors and a slot shortage are not the module's failures.
        assert!(!m.module_failed_on(
            &bad,
            "default/victim",
            &CallError::Host(anyhow::anyhow!("x"))
        ));
        assert!(!m.module_failed_on(
            &bad,
            "default/victim",
            &CallError::Busy(std::time::Duration::from_secs(1))
        ));
        let rolled = m.module_failed_on(&bad, "default/victim", &CallError::Exit(3));
        assert_eq!(rolled, round == 2, "round {round}");
    }
    assert_eq!(m.serving().digest, "good");
    assert_eq!(*observer.rollbacks.lock().unwrap(), 1);
    let why = m.last_rejection().unwrap();
    assert!(why.contains("cluster default/victim"), "{why}");
    assert!(why.contains("called exit(3)"), "{why}");
}

#[test]
fn failures_spread_over_clusters_do_not_roll_back() {
    let good: Arc<dyn Reconciler> = Arc::new(Native);
    let bad: Arc<dyn Reconciler> = Arc::new(Native);
    let m = ModuleManager::new(serving(good, "good"), Arc::new(Unobserved)).with_rollback_after(3);
    m.install(serving(bad.clone(), "bad"));
    let trap = CallError::Trap("x".into());
    for c in ["default/a", "default/b", "default/a", "default/b"] {
        assert!(!m.module_failed_on(&bad, c, &trap));
    }
    m.module_succeeded_on(&bad, "default/a");
    assert!(!m.module_failed_on(&bad, "default/a", &trap));
    assert!(!m.module_failed_on(&bad, "default/a", &trap));
    assert_eq!(m.serving().digest, "bad");
    assert!(
        m.module_failed_on(&bad, "default/b", &trap),
        "b's third in a row"
    );
}

#[tokio::test]
async fn a_rolled_back_digest_is_not_taken_again() {
    let engine = Arc::new(Engine::new(Limits::default()).unwrap());
    let checker = Checker::new(engine.clone());
    let observer = Arc::new(Recorded::default());
    let m = ModuleManager::new(serving(Arc::new(Native), "native"), observer.clone());
    let source = ModuleSource::File {
        path: "/nonexistent/reconcile.wasm".into(),
        sha256: None,
    };
    let digest = m
        .offer(&checker, EMBEDDED_GUEST.to_vec(), &source)
        .await
        .unwrap();
    assert_eq!(m.serving().digest, digest);
    let used = m.module();
    for _ in 0..DEFAULT_ROLLBACK_AFTER {
        m.module_failed(&used, &CallError::Trap("x".into()));
    }
    assert_eq!(m.serving().digest, "native");
    let r = m
        .offer(&checker, EMBEDDED_GUEST.to_vec(), &source)
        .await
        .unwrap_err();
    assert_eq!(r.kind(), "rolled-back");
    assert_eq!(observer.checked("accepted"), 1);
    assert_eq!(observer.checked("rejected"), 1);
}

/// Offers `bytes` from a file source while recording the tier of every
/// module seen serving; returns the tiers seen, in order, without repeats.
async fn offer_watching_tiers(
    manager: &Arc<ModuleManager>,
    checker: &Checker,
    bytes: &[u8],
) -> Vec<Option<Tier>> {
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let (manager, done) = (manager.clone(), done.clone());
        async move {
            let mut seen: Vec<Option<Tier>> = Vec::new();
            loop {
                let tier = manager.serving().module.tier();
                if seen.last() != Some(&tier) {
                    seen.push(tier);
                }
                if done.load(Ordering::Relaxed) {
                    return seen;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
    });
    let source = ModuleSource::File {
        path: "/modules/reconcile.wasm".into(),
        sha256: None,
    };
    let digest = manager
        .offer(checker, bytes.to_vec(), &source)
        .await
        .unwrap();
    assert_eq!(digest, sha256_hex(bytes));
    done.store(true, Ordering::Relaxed);
    watcher.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_module_serves_from_baseline_code_until_its_optimised_code_is_ready() {
    let observer = Arc::new(Recorded::default());
    let manager = Arc::new(ModuleManager::new(
        serving(Arc::new(Native), "native"),
        observer.clone(),
    ));
    let mut swaps = manager.subscribe();
    let dir = std::env::temp_dir().join(format!("shardgate-tiers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let optimizing = Arc::new(Engine::new(Limits::default()).unwrap());
    let baseline = Arc::new(Engine::with_tier(Limits::default(), Tier::Baseline).unwrap());
    let checker = Checker::new(optimizing)
        .with_baseline(baseline)
        .with_precompiled(Precompiled::open(&dir).unwrap());

    let seen = offer_watching_tiers(&manager, &checker, EMBEDDED_GUEST).await;
    assert_eq!(
        seen,
        [None, Some(Tier::Baseline), Some(Tier::Optimized)],
        "native, then baseline code, then optimised code"
    );
    // The tier-up is not a swap: the previous module is the one before,
    // one swap was counted and one re-reconcile asked for.
    assert_eq!(manager.previous().unwrap().digest, "native");
    assert_eq!(manager.serving().digest, sha256_hex(EMBEDDED_GUEST));
    assert_eq!(observer.checked("accepted"), 1);
    assert!(swaps.try_recv().is_ok());
    assert!(
        swaps.try_recv().is_err(),
        "the tier-up re-reconciles nothing"
    );

    // The optimised code is now precompiled: the same module offered to a fresh
    // manager is loaded precompiled and never runs baseline code.
    let manager = Arc::new(ModuleManager::new(
        serving(Arc::new(Native), "native"),
        Arc::new(Unobserved),
    ));
    let seen = offer_watching_tiers(&manager, &checker, EMBEDDED_GUEST).await;
    assert_eq!(seen, [None, Some(Tier::Optimized)]);
    let _ = std::fs::remove_dir_all(&dir);
}
