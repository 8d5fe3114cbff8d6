//! Isolation that holds: a module that sleeps, polls a timer, reads
//! standard input, calls exit or loops is stopped within its deadline (or
//! answered at once), with an error that says why, by the module itself,
//! by the check `shardgate check-module` runs, by the admission webhook,
//! and in the operator's reconcile path; and a module that fails one
//! cluster among ten healthy ones is rolled back.
//!
//! Nothing here asserts a tight wall-clock bound: every call runs on a
//! thread the test abandons after a generous minute ([`within`]), so a
//! module that blocked the host would fail the test instead of hanging it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, mpsc};
use std::time::Duration;

use shardgate_contract::model::{Cluster, Input};
use shardgate_operator::{Metrics, ModuleReporter};
use shardgate_tests::harness::{
    Operator, Setup, cluster, converged, create, emulator, eventually, metric_sum, nodeport,
};
use shardgate_tests::modules::MISBEHAVE;
use shardgate_tests::wait;
use shardgate_wasm::guard::Guarded;
use shardgate_wasm::swap::{Candidate, Golden, ModuleManager, ModuleSource, Serving};
use shardgate_wasm::{CallError, EMBEDDED_GUEST, Engine, Limits, Module, Reconciler};

/// The deadline every module here runs with.
const DEADLINE: Duration = Duration::from_millis(200);

static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
    Engine::new(Limits {
        memory_bytes: 16 << 20,
        deadline: DEADLINE,
    })
    .unwrap()
});

fn misbehave() -> Module {
    ENGINE
        .load(MISBEHAVE)
        .expect("misbehave exports the reconcile world")
}

fn input(name: &str) -> Input {
    Input {
        cluster: Cluster {
            name: name.into(),
            namespace: "default".into(),
            shards: 1,
            ..Cluster::default()
        },
        ..Input::default()
    }
}

/// Runs `f` on a thread of its own and gives its result, or panics naming
/// `what` if it has not returned within a minute (the host blocked).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: the call did not return within a minute"))
}

/// What a module does with a cluster of each misbehaving name, as a
/// predicate on the call's outcome with its description.
type Expect = fn(&Result<String, CallError>) -> bool;

fn expectations() -> [(&'static str, &'static str, Expect); 6] {
    [
        (
            "loop",
            "deadline",
            |r| matches!(r, Err(CallError::Deadline(d)) if *d == DEADLINE),
        ),
        (
            "sleep",
            "refused wait",
            |r| matches!(r, Err(CallError::Trap(m)) if m.contains("may not wait") && m.contains("pollable.block")),
        ),
        (
            "poll",
            "refused wait",
            |r| matches!(r, Err(CallError::Trap(m)) if m.contains("may not wait") && m.contains("poll.poll")),
        ),
        (
            "stdin",
            "answer: stdin is empty",
            |r| matches!(r, Ok(m) if m.contains("read 0 bytes from stdin")),
        ),
        // WASI 0.2's `exit` carries success or failure only: exit(3)
        // arrives as status 1.
        (
            "exit",
            "exit",
            |r| matches!(r, Err(CallError::Exit(s)) if *s != 0),
        ),
        (
            "trap",
            "trap",
            |r| matches!(r, Err(CallError::Trap(m)) if m.contains("unreachable")),
        ),
    ]
}

/// The guest's verdict message, or the call's error.
fn outcome(module: &dyn Reconciler, name: &str) -> Result<String, CallError> {
    module
        .reconcile(&input(name))
        .map(|verdict| format!("{:?}", verdict.map(|_| ()).unwrap_err().violations))
}

#[test]
fn every_misbehaviour_is_stopped_or_answered_at_once() {
    for guarded in [false, true] {
        for (name, what, expected) in expectations() {
            let module: Arc<dyn Reconciler> = Arc::new(misbehave());
            let module: Arc<dyn Reconciler> = if guarded {
                Arc::new(Guarded(module))
            } else {
                module
            };
            let got = within(name, {
                let module = module.clone();
                move || outcome(&*module, name)
            });
            println!("{name} (guarded: {guarded}): {got:?}");
            assert!(
                expected(&got),
                "{name}: expected {what}, got {got:?} (guarded: {guarded})"
            );
            // A fresh Store per call: the module still answers.
            let fine = within("fine", move || outcome(&*module, "fine"));
            assert!(fine.unwrap().contains("misbehave refuses"), "{name}");
        }
    }
}

#[test]
fn the_error_names_the_deadline_and_the_exit_status() {
    let module = misbehave();
    let e = within("loop", move || {
        module.reconcile(&input("loop")).unwrap_err()
    });
    assert!(e.to_string().contains("deadline of 200ms"), "{e}");
    assert!(e.is_module_failure());
    let module = misbehave();
    let e = within("exit", move || {
        module.validate(&input("exit").cluster).unwrap_err()
    });
    assert_eq!(
        e.to_string(),
        "reconcile module called exit(1) and was stopped"
    );
    assert!(e.is_module_failure(), "exit is the module's failure");
}

/// `shardgate check-module` runs exactly this check
/// ([`Candidate::check`]); the golden inputs renamed after a misbehaviour
/// make the module misbehave on each of them.
#[test]
fn the_module_check_stops_each_misbehaviour_with_its_reason() {
    for (name, kind, reason) in [
        ("loop", "deadline", "exceeded its deadline of 200ms"),
        ("sleep", "trap", "may not wait"),
        ("poll", "trap", "may not wait"),
        ("exit", "exit", "called exit(1)"),
        ("stdin", "self-check", "read 0 bytes from stdin"),
    ] {
        let rejection = within(name, move || {
            Candidate {
                bytes: MISBEHAVE,
                sha256: None,
            }
            .check(&ENGINE, &Golden::renamed(name), None)
            .err()
            .expect("misbehave is rejected")
        });
        println!(
            "check-module on {name:?} ({}): {rejection}",
            rejection.kind()
        );
        assert_eq!(rejection.kind(), kind, "{name}: {rejection}");
        assert!(
            rejection.to_string().contains(reason),
            "{name}: {rejection}"
        );
    }
}

/// An AdmissionReview creating a one-shard cluster named `name`.
fn admission(name: &str) -> kube::core::admission::AdmissionReview<kube::core::DynamicObject> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "shardgate.io", "version": "v1alpha1", "kind": "ValkeyCluster"},
            "resource": {"group": "shardgate.io", "version": "v1alpha1", "resource": "valkeyclusters"},
            "name": name,
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": name, "namespace": "default"}, "spec": {"shards": 1}},
        }
    }))
    .unwrap()
}

/// The webhook runs the same module: each misbehaviour is stopped within
/// the deadline and the review is answered, denied with the reason (the
/// webhook fails closed; its `failurePolicy` is for when it cannot answer).
#[test]
fn the_webhook_stops_each_misbehaviour_and_denies_with_the_reason() {
    for (name, reason) in [
        ("loop", "exceeded its deadline of 200ms"),
        ("sleep", "may not wait"),
        ("poll", "may not wait"),
        ("exit", "called exit(1)"),
        ("trap", "unreachable"),
        ("stdin", "read 0 bytes from stdin"),
    ] {
        let response = within(name, move || {
            let module = misbehave();
            let review =
                shardgate_webhook::review(&module, &shardgate_webhook::NoClusters, admission(name));
            review.response.expect("an answer")
        });
        println!(
            "webhook on {name:?}: allowed {}, {}",
            response.allowed, response.result.message
        );
        assert!(!response.allowed, "{name}: admitted");
        assert!(
            response.result.message.contains(reason),
            "{name}: {}",
            response.result.message
        );
    }
}

/// The embedded guest, checked, as the module a rollback returns to.
fn good() -> Serving {
    let accepted = Candidate {
        bytes: EMBEDDED_GUEST,
        sha256: None,
    }
    .check(&ENGINE, &Golden::builtin(), None)
    .unwrap();
    Serving {
        module: accepted.module,
        digest: accepted.digest,
        source: ModuleSource::Embedded.label(),
    }
}

fn misbehave_serving(tag: &str) -> Serving {
    Serving {
        module: Arc::new(misbehave()),
        digest: format!("misbehave-{tag}"),
        source: "test:misbehave".into(),
    }
}

fn module_failures(metrics: &Metrics) -> u64 {
    metric_sum(
        metrics,
        "shardgate_reconcile_errors_total{reason=\"ModuleFailed\"}",
    )
}

/// Through the operator's reconcile path (the guest stage, the budget and
/// the guard): each misbehaviour fails the reconcile of its cluster, the
/// failure is the module's (a rollback after one), and the rollback names
/// the cluster and the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_stops_each_misbehaviour_and_rolls_it_back() {
    let good = good();
    for (name, reason) in [
        ("loop", "exceeded its deadline of 200ms"),
        ("sleep", "may not wait"),
        ("poll", "may not wait"),
        ("exit", "called exit(1)"),
    ] {
        let emu = emulator().await;
        let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
        let metrics = reporter.metrics().clone();
        let manager =
            Arc::new(ModuleManager::new(good.clone(), reporter.clone()).with_rollback_after(1));
        let op = Operator::with(
            &emu,
            Setup::new("isolation").modules(manager.clone(), reporter.clone()),
        )
        .await;
        manager.install(misbehave_serving(name));
        create(&emu, cluster(name, 1, 0, nodeport())).await;
        wait::until(
            &format!("{name}: the rollback"),
            Duration::from_secs(60),
            || manager.serving().digest == good.digest,
        )
        .await;
        let why = manager.last_rejection().unwrap();
        println!("{name}: {why}");
        assert!(why.contains(reason), "{name}: {why}");
        assert!(
            why.contains(&format!("cluster default/{name}")),
            "{name}: {why}"
        );
        wait::until("the failure counted", Duration::from_secs(10), || {
            module_failures(&metrics) >= 1
        })
        .await;
        assert_eq!(metrics.module_rollbacks.get(), 1, "{name}");
        // The good module serves the same cluster afterwards.
        eventually(&emu, "converged after the rollback", |e| converged(e, name)).await;
        op.stop().await;
    }
}

/// A module that traps on one cluster and answers ten others is rolled
/// back after three failures in a row on that cluster, although the ten
/// are reconciled (and answered) between every two of its failures: with
/// one global count, every answer would reset it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_cluster_among_ten_healthy_ones_rolls_the_module_back() {
    let emu = emulator().await;
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let good = good();
    let manager =
        Arc::new(ModuleManager::new(good.clone(), reporter.clone()).with_rollback_after(3));
    let op = Operator::with(
        &emu,
        Setup::new("isolation-rollback").modules(manager.clone(), reporter.clone()),
    )
    .await;
    let healthy: Vec<String> = (0..10).map(|i| format!("healthy-{i}")).collect();
    for name in &healthy {
        create(&emu, cluster(name, 1, 0, nodeport())).await;
    }
    eventually(&emu, "the healthy clusters converged", |e| {
        healthy.iter().all(|n| converged(e, n))
    })
    .await;

    // Misbehave answers every healthy cluster (with a refusal: an answer)
    // and traps on `trap`.
    manager.install(misbehave_serving("trap"));
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (tx, stop) = (op.resync_sender(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                tx.send(()).ok();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let reconciles_before = metrics.reconciles.get();
    create(&emu, cluster("trap", 1, 0, nodeport())).await;
    wait::until("the rollback", Duration::from_secs(120), || {
        manager.serving().digest == good.digest
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();

    let reconciles = metrics.reconciles.get() - reconciles_before;
    let why = manager.last_rejection().unwrap();
    println!("after {reconciles} reconciles: {why}");
    assert!(
        why.contains("after 3 failures in a row on cluster default/trap"),
        "{why}"
    );
    assert!(why.contains("trapped"), "{why}");
    assert_eq!(metrics.module_rollbacks.get(), 1);
    // The third failure rolled the module back inside its reconcile; the
    // controller counts it when that reconcile has returned.
    wait::until(
        "three module failures counted",
        Duration::from_secs(10),
        || module_failures(&metrics) >= 3,
    )
    .await;
    assert!(
        reconciles > 3 + 10,
        "the healthy clusters were reconciled meanwhile ({reconciles} reconciles)"
    );
    // The restored module serves every cluster.
    eventually(&emu, "every cluster converged after the rollback", |e| {
        converged(e, "trap") && healthy.iter().all(|n| converged(e, n))
    })
    .await;
    op.stop().await;
}
