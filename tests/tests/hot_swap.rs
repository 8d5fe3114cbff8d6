//! Hot-swapping the reconcile module: the operator against the API emulator
//! with a watched file or ConfigMap source. Swaps under load cost no failed
//! reconcile and no API write; bad candidates are rejected with their reason
//! while the last good module keeps serving; a module that keeps failing at
//! reconcile time is rolled back.
//!
//! `--nocapture` prints the swap latency (file replaced -> new module
//! serving) and the compile time against the rest of the check.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube_emulator::Emulator;
use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};
use shardgate_operator::modules as operator_modules;
use shardgate_operator::{Metrics, ModuleReporter};
use shardgate_tests::bench::{max, median, ms};
use shardgate_tests::harness::{
    NS, Operator, Setup, cluster, converged, create, emulator, events, eventually, metric_sum,
    module_swaps as swaps, nodeport,
};
use shardgate_tests::modules::{MISBEHAVE, variant};
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::wait;
use shardgate_wasm::Reconciler;
use shardgate_wasm::sha256_hex;
use shardgate_wasm::swap::{
    self as modules, Checker, Golden, ModuleManager, ModuleSource, Serving,
};
use shardgate_wasm::{CallError, EMBEDDED_GUEST, Engine, Limits, Tier};

static ENGINE: LazyLock<Arc<Engine>> =
    LazyLock::new(|| Arc::new(Engine::new(Limits::default()).unwrap()));

/// Replaces `path` atomically (write aside, rename), as a rollout should.
fn replace(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// The operator against `emu`, serving what `manager` serves.
async fn operator(
    emu: &Emulator,
    manager: &Arc<ModuleManager>,
    reporter: &Arc<ModuleReporter>,
) -> Operator {
    Operator::with(
        emu,
        Setup::new("hot-swap").modules(manager.clone(), reporter.clone()),
    )
    .await
}

/// Serving `bytes` from `source`, checked.
fn checked(bytes: &[u8], source: &ModuleSource) -> Serving {
    let accepted = modules::Candidate {
        bytes,
        sha256: None,
    }
    .check(&ENGINE, &Golden::builtin(), None)
    .unwrap();
    Serving {
        module: accepted.module,
        digest: accepted.digest,
        source: source.label(),
    }
}

/// The `shardgate_module_info` lines.
fn module_info(metrics: &Metrics) -> Vec<String> {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("shardgate_module_info{"))
        .map(String::from)
        .collect()
}

fn info_line(digest: &str, source: &str) -> String {
    format!("shardgate_module_info{{digest=\"{digest}\",source=\"{source}\"}} 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_load_fail_no_reconcile_and_write_nothing() {
    let emu = emulator().await;
    let dir = ScratchDir::new("hot-swap-load");
    let path = dir.join("reconcile.wasm");
    let (a, b) = (EMBEDDED_GUEST.to_vec(), variant("b"));
    let (digest_a, digest_b) = (sha256_hex(&a), sha256_hex(&b));
    assert_ne!(digest_a, digest_b);
    std::fs::write(&path, &a).unwrap();
    let source = ModuleSource::File {
        path: path.clone(),
        sha256: None,
    };
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let manager = Arc::new(ModuleManager::new(checked(&a, &source), reporter.clone()));
    let op = operator(&emu, &manager, &reporter).await;
    let watch = operator_modules::follow(
        manager.clone(),
        Checker::new(ENGINE.clone()),
        source.clone(),
        None,
        Some(digest_a.clone()),
    );

    create(&emu, cluster("load", 2, 1, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "load")).await;

    // Reconciles run continuously from here on.
    let stop_load = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (tx, stop) = (op.resync_sender(), stop_load.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                tx.send(()).ok();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let warm = metrics.reconciles.get() + 5;
    wait::until("the load to run", Duration::from_secs(10), || {
        metrics.reconciles.get() >= warm
    })
    .await;
    op.settle().await;
    let writes_before = emu.total_writes();
    let counts_before = emu.write_counts();
    let errors_before = op.errors();
    let reconciles_start = metrics.reconciles.get();

    let mut latencies = Vec::new();
    let mut compiles = Vec::new();
    let mut rests = Vec::new();
    for i in 0..20 {
        let (bytes, digest) = if i % 2 == 0 {
            (&b, &digest_b)
        } else {
            (&a, &digest_a)
        };
        let reconciles = metrics.reconciles.get();
        let replaced = Instant::now();
        replace(&path, bytes);
        wait::until(
            &format!("swap {i} to serve"),
            Duration::from_secs(30),
            || manager.serving().digest == *digest,
        )
        .await;
        let latency = replaced.elapsed();
        latencies.push(latency);
        let t = manager.last_check().expect("an accepted check has timings");
        compiles.push(t.compile);
        rests.push(latency.saturating_sub(t.compile));
        assert_eq!(
            module_info(&metrics),
            [info_line(digest, &source.label())],
            "swap {i}: module_info shows only the serving module"
        );
        // Reconciles run with the new module before the next swap.
        wait::until("reconciles after the swap", Duration::from_secs(10), || {
            metrics.reconciles.get() >= reconciles + 3
        })
        .await;
    }
    stop_load.store(true, Ordering::Relaxed);
    load.await.unwrap();
    // Every reconcile the load started has finished: all they wrote counts.
    op.settle().await;

    let reconciles = metrics.reconciles.get() - reconciles_start;
    assert_eq!(op.errors(), errors_before, "no reconcile failed");
    assert_eq!(errors_before, 0);
    assert_eq!(
        emu.total_writes(),
        writes_before,
        "the swaps wrote nothing: before {counts_before:?}, after {:?}",
        emu.write_counts()
    );
    assert_eq!(swaps(&metrics, "accepted"), 20);
    assert_eq!(swaps(&metrics, "rejected"), 0);
    assert_eq!(manager.serving().digest, digest_a);
    assert_eq!(manager.previous().unwrap().digest, digest_b);
    assert!(converged(&emu, "load"));

    println!(
        "hot swap: 20 swaps under load ({reconciles} reconciles meanwhile, 0 failed, 0 writes)"
    );
    println!(
        "swap latency (file replaced -> new module serving): median {:.1} ms, max {:.1} ms",
        ms(median(&latencies)),
        ms(max(&latencies))
    );
    println!(
        "  compile + type check (Engine::load): median {:.1} ms, max {:.1} ms",
        ms(median(&compiles)),
        ms(max(&compiles))
    );
    println!(
        "  the rest (event, settle {:.0} ms, read, digest, self-check, swap): median {:.1} ms, max {:.1} ms",
        ms(modules::source::SETTLE),
        ms(median(&rests)),
        ms(max(&rests))
    );

    watch.abort();
    op.stop().await;
    drop(dir);
}

/// Waits for the `n`th rejection and returns its message.
async fn rejection(manager: &ModuleManager, metrics: &Metrics, n: u64) -> String {
    wait::until(&format!("rejection {n}"), Duration::from_secs(30), || {
        swaps(metrics, "rejected") >= n
    })
    .await;
    manager.last_rejection().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_modules_are_rejected_with_their_reason_and_the_last_good_one_serves() {
    let emu = emulator().await;
    let client = emu.client().await.unwrap();
    let dir = ScratchDir::new("hot-swap-reject");
    let path = dir.join("reconcile.wasm");
    std::fs::write(&path, EMBEDDED_GUEST).unwrap();
    let source = ModuleSource::File {
        path: path.clone(),
        sha256: None,
    };
    let good = checked(EMBEDDED_GUEST, &source);
    let good_digest = good.digest.clone();
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let manager = Arc::new(ModuleManager::new(good, reporter.clone()));
    reporter.set_events(
        client,
        "hot-swap",
        operator_modules::pod_reference(NS, "shardgate-hot-swap"),
    );
    let checker = Checker::new(ENGINE.clone());
    let watch = operator_modules::follow(
        manager.clone(),
        checker.clone(),
        source.clone(),
        None,
        Some(good_digest.clone()),
    );
    let still_good = |what: &str| {
        assert_eq!(
            manager.serving().digest,
            good_digest,
            "{what}: the last good module serves"
        );
        assert_eq!(
            module_info(&metrics),
            [info_line(&good_digest, &source.label())]
        );
        assert_eq!(swaps(&metrics, "accepted"), 0, "{what}");
    };

    // Through the watched file.
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "core module",
            b"\0asm\x01\0\0\0".to_vec(),
            "not a reconcile module: not a valid wasm component",
        ),
        (
            "empty component",
            b"\0asm\x0d\0\x01\0".to_vec(),
            "does not export shardgate:reconcile/reconciler@0.7.0",
        ),
        (
            "truncated",
            EMBEDDED_GUEST[..EMBEDDED_GUEST.len() * 2 / 3].to_vec(),
            "not a reconcile module: not a valid wasm component",
        ),
        (
            "misbehave (refuses every name)",
            MISBEHAVE.to_vec(),
            "self-check failed: golden input \"golden-nodeport\": validate refused a valid spec: error: metadata.name: misbehave refuses",
        ),
    ];
    let mut n = 0;
    for (what, bytes, reason) in cases {
        n += 1;
        replace(&path, &bytes);
        let message = rejection(&manager, &metrics, n).await;
        println!("rejected {what}: {message}");
        assert!(message.contains(reason), "{what}: {message}");
        still_good(what);
    }

    // A pinned digest: other bytes are refused before they are compiled.
    let pinned_path = dir.join("pinned.wasm");
    std::fs::write(&pinned_path, EMBEDDED_GUEST).unwrap();
    let pinned = ModuleSource::File {
        path: pinned_path.clone(),
        sha256: Some(good_digest.to_uppercase()),
    };
    let pinned_watch = operator_modules::follow(
        manager.clone(),
        checker.clone(),
        pinned,
        None,
        Some(good_digest.clone()),
    );
    let other = variant("unpinned");
    replace(&pinned_path, &other);
    n += 1;
    let message = rejection(&manager, &metrics, n).await;
    println!("rejected unpinned bytes: {message}");
    assert_eq!(
        message,
        format!(
            "digest mismatch: expected {good_digest}, got {}",
            sha256_hex(&other)
        )
    );
    still_good("digest mismatch");
    pinned_watch.abort();

    // Trap, deadline and memory cap during the self-check: the misbehave
    // module misbehaves on golden inputs bearing those names.
    let baseline = Arc::new(Engine::with_tier(Limits::default(), Tier::Baseline).unwrap());
    for (name, reason) in [
        (
            "trap",
            "self-check on golden input \"trap\": reconcile module trapped",
        ),
        (
            "loop",
            "self-check on golden input \"loop\": reconcile module exceeded its deadline",
        ),
        (
            "alloc",
            "self-check on golden input \"alloc\": reconcile module exceeded its memory cap",
        ),
    ] {
        // Baseline code first, as `shardgate run` does: its failure hands
        // the verdict to the optimising check.
        let checker = Checker {
            engine: ENGINE.clone(),
            baseline: Some(baseline.clone()),
            golden: Arc::new(Golden::renamed(name)),
            precompiled: None,
        };
        let r = manager
            .offer(&checker, MISBEHAVE.to_vec(), &source)
            .await
            .unwrap_err();
        n += 1;
        println!("rejected misbehave on {name:?} ({}): {r}", r.kind());
        assert!(r.to_string().contains(reason), "{r}");
        assert_eq!(swaps(&metrics, "rejected"), n);
        still_good(name);
    }

    // Each rejection was recorded as an Event about the operator's Pod.
    wait::until("a ModuleRejected Event", Duration::from_secs(10), || {
        !events(&emu, "ModuleRejected").is_empty()
    })
    .await;
    let recorded = events(&emu, "ModuleRejected");
    assert!(
        recorded
            .iter()
            .all(|e| e["regarding"]["kind"] == "Pod" && e["type"] == "Warning"),
        "{recorded:#?}"
    );

    // And a good module is still taken afterwards.
    let next = variant("after");
    replace(&path, &next);
    wait::until(
        "the good module after rejections",
        Duration::from_secs(30),
        || manager.serving().digest == sha256_hex(&next),
    )
    .await;

    watch.abort();
    drop(dir);
}

/// The real module, except that it traps for one cluster.
struct TrapsFor {
    inner: Arc<dyn Reconciler>,
    cluster: &'static str,
}

impl Reconciler for TrapsFor {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        if input.cluster.name == self.cluster {
            return Err(CallError::Trap(
                "wasm trap: wasm `unreachable` instruction executed".into(),
            ));
        }
        self.inner.reconcile(input)
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        self.inner.validate(cluster)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_keeps_trapping_at_reconcile_time_is_rolled_back() {
    let emu = emulator().await;
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let good = checked(EMBEDDED_GUEST, &ModuleSource::Embedded);
    let good_digest = good.digest.clone();
    // It passes the self-check (the golden inputs have other names) ...
    let bad = TrapsFor {
        inner: good.module.clone(),
        cluster: "victim",
    };
    modules::candidate::self_check(&bad, &Golden::builtin()).unwrap();
    let manager = Arc::new(ModuleManager::new(good, reporter.clone()).with_rollback_after(3));
    let op = operator(&emu, &manager, &reporter).await;
    create(&emu, cluster("victim", 2, 1, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "victim")).await;

    // ... but traps on a live cluster.
    manager.install(Serving {
        module: Arc::new(bad),
        digest: "bad".into(),
        source: "test:bad".into(),
    });
    wait::until("rollback", Duration::from_secs(30), || {
        manager.serving().digest == good_digest
    })
    .await;
    assert_eq!(metrics.module_rollbacks.get(), 1);
    // The controller counts a failed reconcile in its error policy, after
    // the reconcile (and so the rollback) returned: wait for the count.
    let module_failures = || {
        metric_sum(
            &metrics,
            "shardgate_reconcile_errors_total{reason=\"ModuleFailed\"}",
        )
    };
    wait::until("the third failure counted", Duration::from_secs(10), || {
        module_failures() >= 3
    })
    .await;
    assert_eq!(module_failures(), 3, "rolled back after exactly 3 failures");
    assert_eq!(
        module_info(&metrics),
        [info_line(&good_digest, &ModuleSource::Embedded.label())]
    );
    println!("{}", manager.last_rejection().unwrap());

    // The restored module reconciles the cluster again; the rollback was
    // recorded.
    let done = metrics.reconciles.get();
    op.resync_sender().send(()).ok();
    eventually(&emu, "reconciled after the rollback", |e| {
        metrics.reconciles.get() > done && converged(e, "victim")
    })
    .await;
    wait::until("a ModuleRolledBack Event", Duration::from_secs(10), || {
        !events(&emu, "ModuleRolledBack").is_empty()
    })
    .await;
    let ev = &events(&emu, "ModuleRolledBack")[0];
    assert!(
        ev["note"].as_str().unwrap().contains("rolled back to"),
        "{ev:#}"
    );
    assert_eq!(module_failures(), 3);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_source_is_watched_through_the_api() {
    let emu = emulator().await;
    let client = emu.client().await.unwrap();
    let source = ModuleSource::ConfigMap {
        namespace: NS.into(),
        name: "shardgate-module".into(),
        key: modules::DEFAULT_CONFIGMAP_KEY.into(),
        sha256: None,
    };
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let manager = Arc::new(ModuleManager::new(
        checked(EMBEDDED_GUEST, &ModuleSource::Embedded),
        reporter.clone(),
    ));
    reporter.set_events(
        client.clone(),
        "hot-swap",
        operator_modules::event_reference(&source, NS, "shardgate-hot-swap"),
    );
    let op = operator(&emu, &manager, &reporter).await;
    let watch = operator_modules::follow(
        manager.clone(),
        Checker::new(ENGINE.clone()),
        source.clone(),
        Some(client.clone()),
        None,
    );
    create(&emu, cluster("cm", 2, 1, nodeport())).await;
    eventually(&emu, "converged", |e| converged(e, "cm")).await;

    let api: Api<ConfigMap> = Api::namespaced(client, NS);
    let config_map = |bytes: &[u8]| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("shardgate-module".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        binary_data: Some(
            [(
                modules::DEFAULT_CONFIGMAP_KEY.to_string(),
                ByteString(bytes.to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let first = variant("configmap-1");
    let created = Instant::now();
    api.create(&PostParams::default(), &config_map(&first))
        .await
        .unwrap();
    wait::until(
        "the ConfigMap's module serves",
        Duration::from_secs(30),
        || manager.serving().digest == sha256_hex(&first),
    )
    .await;
    println!(
        "ConfigMap created -> serving: {:.1} ms",
        ms(created.elapsed())
    );
    assert_eq!(
        module_info(&metrics),
        [info_line(&sha256_hex(&first), &source.label())]
    );

    let second = variant("configmap-2");
    let mut cm = api.get("shardgate-module").await.unwrap();
    cm.binary_data = config_map(&second).binary_data;
    let updated = Instant::now();
    api.replace("shardgate-module", &PostParams::default(), &cm)
        .await
        .unwrap();
    wait::until("the updated module serves", Duration::from_secs(30), || {
        manager.serving().digest == sha256_hex(&second)
    })
    .await;
    println!(
        "ConfigMap updated -> serving: {:.1} ms",
        ms(updated.elapsed())
    );

    // A bad update is rejected, recorded against the ConfigMap, and the
    // second module keeps serving.
    let mut cm = api.get("shardgate-module").await.unwrap();
    cm.binary_data = config_map(&second[..100]).binary_data;
    api.replace("shardgate-module", &PostParams::default(), &cm)
        .await
        .unwrap();
    let message = rejection(&manager, &metrics, 1).await;
    assert!(message.contains("not a valid wasm component"), "{message}");
    assert_eq!(manager.serving().digest, sha256_hex(&second));
    wait::until("a ModuleRejected Event", Duration::from_secs(10), || {
        !events(&emu, "ModuleRejected").is_empty()
    })
    .await;
    let ev = &events(&emu, "ModuleRejected")[0];
    assert_eq!(ev["regarding"]["kind"], "ConfigMap", "{ev:#}");
    assert_eq!(ev["regarding"]["name"], "shardgate-module", "{ev:#}");

    // The cluster kept converging through both swaps.
    op.settle().await;
    assert!(converged(&emu, "cm"));
    assert_eq!(op.errors(), 0);
    watch.abort();
    op.stop().await;
}
