//! P3 "module swap" benchmark: from the module file replaced to the new
//! module serving, with compile and with the precompiled cache, and the bare
//! stages side by side.
//!
//! a. End to end with compile: a [`ModuleManager`] fed by the real file
//!    watcher ([`source::follow_file`], as `shardgate run --module PATH
//!    --module-baseline=false` does: notify watcher, settle delay (skipped
//!    once the file is renamed into place), read, sha256, compile + export
//!    check, golden self-check, swap). Each swap renames the other variant over the
//!    watched file (written aside first, in a sibling directory, so the only
//!    event in the watched directory is the rename) and times until the
//!    manager serves the new digest. Meanwhile a background loop reconciles
//!    every [`RECONCILE_EVERY`] through the serving module, as the operator
//!    does (fetch the module, call it on a blocking thread, report success
//!    or failure to the manager), and checks each answer against the native
//!    guest: any failure fails the bench.
//! a2. The same with a baseline runtime (`shardgate run`'s default,
//!    `--module-baseline`): the candidate is compiled by Winch, checked and
//!    served, then compiled by Cranelift, checked again and swapped in as
//!    the same module; timed to both.
//! b. The same with the precompiled cache (`--module-cache`), after each
//!    variant was compiled once, so every swap loads a cache hit. That no
//!    swap compiled is checked: a compile rewrites the cache entry (new
//!    inode), a hit does not.
//! c. The bare stages, interleaved in one loop with nothing else running:
//!    sha256, `Engine::load` (compile), `Engine::load_cached` on an empty
//!    cache (compile + store) and on a filled one (precompiled load), and the
//!    golden self-check.
//!
//! The two variants are the embedded guest with different trailing custom
//! sections: the same code under two digests.
//!
//! Modes (as `guest_stage`):
//! - `cargo bench -p shardgate --bench swap`: 20 swaps per end-to-end part,
//!   20 rounds of the bare stages.
//! - quick: `SHARDGATE_BENCH_QUICK=1`, `-- --quick`, or `cargo test
//!   --benches` (no `--bench` argument): 3 swaps and 3 rounds. Asserts only
//!   correctness (every swap served, no reconcile failed, cache hits), never
//!   timings.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardgate_contract::model::{Desired, Input};
use shardgate_operator::{Metrics, ModuleReporter};
use shardgate_tests::bench::{Invocation, machine, max, median, ms};
use shardgate_tests::harness::module_swaps as swaps;
use shardgate_tests::modules::variant;
use shardgate_tests::scratch::ScratchDir;
use shardgate_tests::wait;
use shardgate_wasm::swap::candidate::self_check;
use shardgate_wasm::swap::{
    Candidate, CheckTimings, Checker, Golden, ModuleManager, ModuleSource, Serving, source,
};
use shardgate_wasm::{Engine, Limits, Loaded, Native, Precompiled, Reconciler, Tier, sha256_hex};
use tokio::sync::broadcast::error::RecvError;

/// How often the background loop reconciles (the operator's hot-swap test
/// resyncs every 5 ms too).
const RECONCILE_EVERY: Duration = Duration::from_millis(5);
/// Reconciles through the new module before the next swap.
const RECONCILES_BETWEEN_SWAPS: u64 = 3;
/// Longest a swap may take before the bench fails (the watcher re-reads the
/// file every `source::FILE_RECHECK` even if an event were lost).
const SWAP_TIMEOUT: Duration = Duration::from_secs(60);

// ---- helpers ---------------------------------------------------------------

/// One module variant: its bytes and digest.
struct Variant {
    bytes: Vec<u8>,
    digest: String,
}

impl Variant {
    fn new(tag: &str) -> Self {
        let bytes = variant(tag);
        let digest = sha256_hex(&bytes);
        Variant { bytes, digest }
    }
}

/// `(inode, name)` of every `.cwasm` entry in a cache directory: a compile
/// writes its entry anew (temp file + rename, so a new inode), a hit only
/// reads it.
fn cache_entries(dir: &Path) -> BTreeMap<String, u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().ino(),
            )
        })
        .collect()
}

fn empty_dir(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
}

/// Waits until the serving module runs Cranelift's code.
async fn optimised_code_serving(manager: &ModuleManager) {
    wait::until("optimised code serving", SWAP_TIMEOUT, || {
        manager.serving().module.tier() == Some(Tier::Optimized)
    })
    .await;
}

// ---- the reconcile load ----------------------------------------------------

/// Reconciles through the manager's serving module until stopped, the way
/// the operator's reconcile does, and checks every answer.
struct Load {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    first_failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(manager: Arc<ModuleManager>, cases: Arc<Vec<(Input, Desired)>>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let first_failures = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (stop, calls, failed, first_failures) = (
                stop.clone(),
                calls.clone(),
                failed.clone(),
                first_failures.clone(),
            );
            async move {
                let mut tick = tokio::time::interval(RECONCILE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let (input, expected) = &cases[i % cases.len()];
                    i += 1;
                    let module = manager.module();
                    let used = module.clone();
                    let input = input.clone();
                    let result =
                        tokio::task::spawn_blocking(move || module.reconcile(&input)).await;
                    let problem = match result {
                        Err(e) => Some(format!("the reconcile task failed: {e}")),
                        Ok(Err(e)) => {
                            manager.module_failed(&used, &e);
                            Some(e.to_string())
                        }
                        Ok(Ok(verdict)) => {
                            manager.module_succeeded(&used);
                            match verdict {
                                Ok(desired) if desired == *expected => None,
                                Ok(_) => Some("the answer differs from the native guest's".into()),
                                Err(e) => Some(format!("the module refused a valid spec: {e}")),
                            }
                        }
                    };
                    calls.fetch_add(1, Ordering::Relaxed);
                    if let Some(p) = problem {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut first = first_failures.lock().unwrap();
                        if first.len() < 5 {
                            first.push(p);
                        }
                    }
                }
            }
        });
        Load {
            stop,
            calls,
            failed,
            first_failures,
            task,
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Stops and returns `(calls, failed, first failures)`.
    async fn stop(self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the reconcile loop");
        let first = self.first_failures.lock().unwrap().clone();
        (
            self.calls.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            first,
        )
    }
}

// ---- a. and b.: end to end -------------------------------------------------

struct SwapSample {
    /// Rename -> the manager serves the new digest.
    e2e: Duration,
    /// The accepted candidate's check, as the manager recorded it (with a
    /// baseline runtime: the baseline check).
    check: CheckTimings,
    /// With a baseline runtime: rename -> the optimised code serves.
    optimized: Option<Duration>,
}

struct EndToEnd {
    samples: Vec<SwapSample>,
    reconciles: u64,
    failed: u64,
}

/// Swaps `swaps` times between the two variants through a watched file
/// under reconcile load. With `cache`, both variants were compiled into it
/// beforehand and every swap must be a cache hit.
async fn end_to_end(
    label: &str,
    runtime: &Arc<Engine>,
    baseline: Option<&Arc<Engine>>,
    cache: Option<(&Precompiled, &Path)>,
    variants: &[Variant; 2],
    cases: &Arc<Vec<(Input, Desired)>>,
    swaps_wanted: usize,
) -> EndToEnd {
    let dir = ScratchDir::new(&format!("bench-swap-{label}"));
    let watched = dir.path().join("modules");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(&watched).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    let path = watched.join("reconcile.wasm");
    let aside = staging.join("reconcile.wasm");
    // Replaces the watched file atomically with `bytes`: the write happens
    // outside the watched directory, the rename is the only event in it.
    // Returns the instant of the rename.
    let replace = |bytes: &[u8]| -> Instant {
        std::fs::write(&aside, bytes).unwrap();
        let at = Instant::now();
        std::fs::rename(&aside, &path).unwrap();
        at
    };

    std::fs::write(&path, &variants[0].bytes).unwrap();
    let module_source = ModuleSource::File {
        path: path.clone(),
        sha256: None,
    };
    let mut checker = Checker::new(runtime.clone());
    if let Some((cache, _)) = cache {
        checker = checker.with_precompiled(cache.clone());
    }
    if let Some(baseline) = baseline {
        checker = checker.with_baseline(baseline.clone());
    }
    let entries_before = cache.map(|(_, dir)| cache_entries(dir));
    // As `shardgate run --module PATH`: the file must pass the checks to
    // start serving.
    let initial = Candidate {
        bytes: &variants[0].bytes,
        sha256: None,
    }
    .check(runtime, &checker.golden, checker.precompiled.as_ref())
    .unwrap_or_else(|e| panic!("{label}: the initial module: {e}"));
    let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
    let metrics = reporter.metrics().clone();
    let manager = Arc::new(ModuleManager::new(
        Serving {
            module: initial.module,
            digest: initial.digest.clone(),
            source: module_source.label(),
        },
        reporter,
    ));
    let watcher = tokio::spawn({
        let (manager, source, path) = (manager.clone(), module_source.clone(), path.clone());
        let initial = Some(initial.digest);
        async move {
            source::follow_file(&manager, &checker, &source, &path, initial)
                .await
                .unwrap();
        }
    });

    // Warm-up swap (not measured): the watcher registers its inotify watch
    // in its own task, so the first rename may come before it; rename again
    // until the swap is seen (a re-rename of bytes the watcher has not
    // offered yet is offered).
    let deadline = Instant::now() + SWAP_TIMEOUT;
    loop {
        replace(&variants[1].bytes);
        let serving = async {
            while manager.serving().digest != variants[1].digest {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(2), serving)
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: the warm-up swap never served (last rejection: {:?})",
            manager.last_rejection()
        );
    }

    // The watcher offers one version at a time: let the warm-up's
    // optimised compile finish first.
    if baseline.is_some() {
        optimised_code_serving(&manager).await;
    }

    let load = Load::start(manager.clone(), cases.clone());
    wait::until(
        "reconciles before the first swap",
        Duration::from_secs(30),
        || load.calls() >= RECONCILES_BETWEEN_SWAPS,
    )
    .await;

    let mut samples = Vec::with_capacity(swaps_wanted);
    for i in 0..swaps_wanted {
        let target = &variants[i % 2];
        let mut swapped = manager.subscribe();
        let replaced = replace(&target.bytes);
        // The manager announces every install (and rollback) on this
        // channel, right after the new module serves.
        loop {
            match tokio::time::timeout(SWAP_TIMEOUT, swapped.recv()).await {
                Ok(Ok(())) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) => panic!("{label}: the manager went away"),
                Err(_) => panic!(
                    "{label}: swap {i} not served after {SWAP_TIMEOUT:?} (last rejection: {:?})",
                    manager.last_rejection()
                ),
            }
            if manager.serving().digest == target.digest {
                break;
            }
        }
        let e2e = replaced.elapsed();
        let check = manager
            .last_check()
            .expect("an accepted candidate has check timings");
        assert_eq!(
            manager.last_rejection(),
            None,
            "{label}: swap {i}: a candidate was rejected"
        );
        if let Some((_, dir)) = cache {
            assert_eq!(
                Some(cache_entries(dir)),
                entries_before,
                "{label}: swap {i} compiled instead of loading the precompiled entry"
            );
        }
        // With a baseline runtime, the optimised code takes over later.
        let optimized = if baseline.is_some() {
            optimised_code_serving(&manager).await;
            Some(replaced.elapsed())
        } else {
            None
        };
        samples.push(SwapSample {
            e2e,
            check,
            optimized,
        });
        // Reconciles run through the new module before the next swap.
        let calls = load.calls();
        wait::until("reconciles after a swap", Duration::from_secs(30), || {
            load.calls() >= calls + RECONCILES_BETWEEN_SWAPS
        })
        .await;
    }

    let (reconciles, failed, first) = load.stop().await;
    watcher.abort();
    let _ = watcher.await;
    assert_eq!(
        failed, 0,
        "{label}: {failed} of {reconciles} reconciles failed during the swaps, first: {first:?}"
    );
    assert_eq!(
        swaps(&metrics, "accepted"),
        swaps_wanted as u64 + 1,
        "{label}: accepted swaps (the warm-up one included)"
    );
    assert_eq!(swaps(&metrics, "rejected"), 0, "{label}: rejected swaps");
    assert_eq!(metrics.module_rollbacks.get(), 0, "{label}: rollbacks");
    let last = &variants[(swaps_wanted + 1) % 2];
    assert_eq!(manager.serving().digest, last.digest);
    assert_eq!(
        manager.previous().map(|p| p.digest),
        Some(variants[swaps_wanted % 2].digest.clone())
    );
    EndToEnd {
        samples,
        reconciles,
        failed,
    }
}

// ---- c.: the bare stages ---------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Sha256,
    Compile,
    CacheMiss,
    CacheHit,
    SelfCheck,
}

const STAGES: [Stage; 5] = [
    Stage::Sha256,
    Stage::Compile,
    Stage::CacheMiss,
    Stage::CacheHit,
    Stage::SelfCheck,
];

/// Every stage once per round, in a rotating order, alternating variants.
fn bare_stages(
    runtime: &Engine,
    golden: &Golden,
    variants: &[Variant; 2],
    rounds: usize,
) -> BTreeMap<Stage, Vec<Duration>> {
    let hit_dir = ScratchDir::new("bench-swap-hit");
    let miss_dir = ScratchDir::new("bench-swap-miss");
    let hit_cache = Precompiled::open(hit_dir.path()).unwrap();
    let miss_cache = Precompiled::open(miss_dir.path()).unwrap();
    for v in variants {
        let (_, loaded) = runtime.load_cached(&v.bytes, &hit_cache).unwrap();
        assert_eq!(loaded, Loaded::Compiled, "a fresh cache compiles");
    }
    let module = runtime.load(&variants[0].bytes).unwrap();
    self_check(&module, golden).expect("the variant passes the self-check");

    let mut samples: BTreeMap<Stage, Vec<Duration>> = BTreeMap::new();
    for round in 0..rounds {
        let v = &variants[round % 2];
        let n = STAGES.len();
        for i in 0..n {
            let stage = STAGES[(i + round) % n];
            if stage == Stage::CacheMiss {
                empty_dir(miss_dir.path());
            }
            let started = Instant::now();
            match stage {
                Stage::Sha256 => assert_eq!(sha256_hex(&v.bytes), v.digest),
                Stage::Compile => drop(runtime.load(&v.bytes).expect("compiles")),
                Stage::CacheMiss => {
                    let (_, loaded) = runtime.load_cached(&v.bytes, &miss_cache).unwrap();
                    assert_eq!(loaded, Loaded::Compiled);
                }
                Stage::CacheHit => {
                    let (_, loaded) = runtime.load_cached(&v.bytes, &hit_cache).unwrap();
                    assert_eq!(loaded, Loaded::Precompiled);
                }
                Stage::SelfCheck => self_check(&module, golden).expect("self-check"),
            }
            samples.entry(stage).or_default().push(started.elapsed());
        }
    }
    samples
}

// ---- the table -------------------------------------------------------------

fn sum(v: &[Duration]) -> Duration {
    v.iter().sum()
}

struct Table {
    rows: Vec<(String, Option<Vec<Duration>>)>,
}

impl Table {
    fn section(&mut self, title: &str) {
        self.rows.push((title.to_string(), None));
    }

    fn row(&mut self, stage: &str, samples: Vec<Duration>) {
        self.rows.push((stage.to_string(), Some(samples)));
    }

    fn print(&self) {
        let width = self.rows.iter().map(|(s, _)| s.len()).max().unwrap_or(0) + 2;
        println!(
            "{:<width$}{:>11}{:>11}{:>5}",
            "stage", "median ms", "max ms", "n"
        );
        println!("{}", "-".repeat(width + 27));
        for (stage, samples) in &self.rows {
            match samples {
                Some(s) => println!(
                    "{:<width$}{:>11.1}{:>11.1}{:>5}",
                    stage,
                    ms(median(s)),
                    ms(max(s)),
                    s.len()
                ),
                None => println!("{stage}"),
            }
        }
    }
}

/// The end-to-end rows of one part, and where its time went.
fn end_to_end_rows(table: &mut Table, title: &str, load_stage: &str, run: &EndToEnd) {
    let s = &run.samples;
    table.section(title);
    table.row(
        "  end to end: rename -> new digest serving",
        s.iter().map(|x| x.e2e).collect(),
    );
    table.row("    sha256", s.iter().map(|x| x.check.digest).collect());
    table.row(
        &format!("    {load_stage}"),
        s.iter().map(|x| x.check.compile).collect(),
    );
    table.row(
        "    golden self-check",
        s.iter().map(|x| x.check.self_check).collect(),
    );
    table.row(
        "    watch: event (no settle after a rename), read, swap",
        s.iter()
            .map(|x| x.e2e.saturating_sub(x.check.total()))
            .collect(),
    );
    if s.iter().all(|x| x.optimized.is_some()) {
        table.row(
            "  then: rename -> optimised code serving",
            s.iter().filter_map(|x| x.optimized).collect(),
        );
    }
}

/// Shares of the summed end-to-end time.
fn breakdown(label: &str, load_stage: &str, run: &EndToEnd) {
    let s = &run.samples;
    let total = sum(&s.iter().map(|x| x.e2e).collect::<Vec<_>>());
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-12);
    let check =
        |f: fn(&CheckTimings) -> Duration| sum(&s.iter().map(|x| f(&x.check)).collect::<Vec<_>>());
    let (digest, load, self_check) = (
        check(|c| c.digest),
        check(|c| c.compile),
        check(|c| c.self_check),
    );
    let rest = total.saturating_sub(digest + load + self_check);
    println!(
        "{label}: of {:.1} ms per swap on average: {load_stage} {:.0}%, self-check {:.0}%, \
         sha256 {:.0}%, watcher (event, settle if any, read) and handoff {:.0}%",
        ms(total) / s.len() as f64,
        pct(load),
        pct(self_check),
        pct(digest),
        pct(rest),
    );
}

// ---- entry point -----------------------------------------------------------

fn main() -> anyhow::Result<()> {
    let invocation = Invocation::from_env();
    let quick = invocation.quick();
    if invocation.has("--list") {
        return Ok(());
    }
    let (swap_count, rounds) = if quick { (3, 3) } else { (20, 20) };

    let started = Instant::now();
    let runtime = Arc::new(Engine::new(Limits::default())?);
    let golden = Golden::builtin();
    let variants = [Variant::new("a"), Variant::new("b")];
    assert_ne!(variants[0].digest, variants[1].digest);
    let cases: Arc<Vec<(Input, Desired)>> = Arc::new(
        golden
            .cases
            .iter()
            .map(|c| {
                let desired = Native
                    .reconcile(&c.input)
                    .expect("native call")
                    .expect("native accepts the golden input");
                (c.input.clone(), desired)
            })
            .collect(),
    );

    // c. first, with nothing else running.
    let bare = bare_stages(&runtime, &golden, &variants, rounds);

    let tokio = tokio::runtime::Runtime::new()?;
    let baseline = Arc::new(Engine::with_tier(Limits::default(), Tier::Baseline)?);
    let (compiled, tiered, precompiled) = tokio.block_on(async {
        let compiled = end_to_end(
            "compile", &runtime, None, None, &variants, &cases, swap_count,
        )
        .await;
        let tiered = end_to_end(
            "baseline",
            &runtime,
            Some(&baseline),
            None,
            &variants,
            &cases,
            swap_count,
        )
        .await;
        let cache_dir = ScratchDir::new("bench-swap-cache");
        let cache = Precompiled::open(cache_dir.path())?;
        // Each variant compiled once: from here on every load is a hit.
        for v in &variants {
            let (_, loaded) = runtime.load_cached(&v.bytes, &cache)?;
            assert_eq!(loaded, Loaded::Compiled);
        }
        let precompiled = end_to_end(
            "cache",
            &runtime,
            None,
            Some((&cache, cache_dir.path())),
            &variants,
            &cases,
            swap_count,
        )
        .await;
        anyhow::Ok((compiled, tiered, precompiled))
    })?;

    let mut table = Table { rows: Vec::new() };
    end_to_end_rows(
        &mut table,
        "a. swap with compile (file watch, no cache)",
        "compile + link + type check (Engine::load)",
        &compiled,
    );
    end_to_end_rows(
        &mut table,
        "a2. swap with compile, baseline code first (shardgate run's default)",
        "baseline compile (Winch) + link + type check",
        &tiered,
    );
    end_to_end_rows(
        &mut table,
        "b. swap with the precompiled cache (every load a hit)",
        "precompiled load (Engine::load_cached, hit)",
        &precompiled,
    );
    table.section("c. bare stages, interleaved, no watcher, no load");
    let stage = |s: Stage| bare.get(&s).cloned().unwrap_or_default();
    table.row("    sha256 of the module", stage(Stage::Sha256));
    table.row("    compile (Engine::load)", stage(Stage::Compile));
    table.row(
        "    cache miss: compile + store (load_cached)",
        stage(Stage::CacheMiss),
    );
    table.row(
        "    precompiled load, cache hit (load_cached)",
        stage(Stage::CacheHit),
    );
    table.row("    golden self-check", stage(Stage::SelfCheck));

    println!(
        "\n## P3 module swap latency: {swap_count} swaps per end-to-end part, {rounds} rounds of \
         bare stages; module {} bytes, 2 variants\n",
        variants[0].bytes.len()
    );
    table.print();
    println!();
    breakdown("a (compile)", "compile", &compiled);
    breakdown("a2 (baseline first)", "baseline compile", &tiered);
    breakdown("b (cache)", "precompiled load", &precompiled);
    let (c, h) = (
        median(&stage(Stage::Compile)),
        median(&stage(Stage::CacheHit)),
    );
    println!(
        "bare compile / precompiled load (medians, c.): {:.1}x",
        c.as_secs_f64() / h.as_secs_f64().max(1e-12)
    );
    println!(
        "reconciles during the swaps (every {} ms): a {} ({} failed), a2 {} ({} failed), b {} ({} failed)",
        RECONCILE_EVERY.as_millis(),
        compiled.reconciles,
        compiled.failed,
        tiered.reconciles,
        tiered.failed,
        precompiled.reconciles,
        precompiled.failed
    );
    let e2e = |run: &EndToEnd| run.samples.iter().map(|x| x.e2e).collect::<Vec<_>>();
    let (a, a2) = (e2e(&compiled), e2e(&tiered));
    let verdict = |d: Duration| {
        if d <= Duration::from_millis(100) {
            "met"
        } else {
            "NOT met"
        }
    };
    for (label, samples) in [("a2, baseline first", &a2), ("a, optimised only", &a)] {
        println!(
            "goal <= 100 ms with compile, 0 failed reconciles ({label}): median {:.1} ms ({}), \
             max {:.1} ms ({})",
            ms(median(samples)),
            verdict(median(samples)),
            ms(max(samples)),
            verdict(max(samples)),
        );
    }
    println!(
        "failed reconciles in all parts: {}",
        compiled.failed + tiered.failed + precompiled.failed
    );
    println!("{}", machine());
    if quick {
        println!(
            "(quick mode: {swap_count} swaps, {rounds} rounds; timings are not meaningful; \
             took {:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
