//! Fuzzing the guest over its whole input, topology facts included
//! (`shardgate_tests::fuzz` builds the cases). Every case runs through the
//! native guest and must hold the invariants below; every
//! `SHARDGATE_FUZZ_WASM_EVERY`th case (default 50) also runs through the
//! wasm component, which must answer byte for byte the same.
//!
//! - `SHARDGATE_FUZZ_CASES` (default 10,000): how many cases.
//! - `SHARDGATE_FUZZ_SEED`: the run's seed (hex); random when unset, and
//!   printed either way. Case `i` is generated from its own seed, derived
//!   from the run's seed and `i`.
//! - `SHARDGATE_FUZZ_CASE`: one case's seed (hex), as a failure reports it:
//!   runs that case only and prints it.
//!
//! A failing case is shrunk (proptest's value tree) and reported with its
//! seed, the broken invariant and the smallest input found.
//!
//! The invariants, precisely (docs/reliability.md, "Fuzzing the guest"):
//! 1. The guest does not panic (in wasm a panic is a trap).
//! 2. A refusal lists at least one violation, each an error whose field is
//!    a path into the ValkeyCluster (checked against the CRD's schema);
//!    warnings name such a path too.
//! 3. Every Service port maps to exactly one node: each port of a Service
//!    names a node of the Service's shard that `desired.nodes` has, by index
//!    and port name; no two ports of a Service name one node; a node's own
//!    Service has exactly that node's port.
//! 4. No serving node is deleted or forgotten: no `forget` of an ID that an
//!    answering node with that ID reports serving slots; every answering
//!    node that serves slots is in `desired.nodes` (the spec's or
//!    departing), unless it is at a place no spec makes (shard 1000 or
//!    more, node 16 or more: not the cluster's own); a `restart` (which deletes the pod) of a node serving
//!    slots only when its data is on a volume.
//! 5. No slot is left unassigned: `add-slots` goes to an answering node of
//!    a shard of the spec (the shard's primary, which may be a node past
//!    `spec.replicas` still serving it until it hands over) and adds only
//!    slots nobody serves, each once, and if a plan
//!    adds slots it adds every slot nobody serves; when some slots are
//!    served and some are not, the plan adds them, or is still meeting
//!    (only `meet` steps), or waits (no steps and a `waiting` reason).
//!    `migrate` moves only slots its source serves, to an answering node of
//!    the spec. `formed` means every node of the spec answered and every
//!    slot is served by exactly one node (one ID), all of them of the spec.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use kube::CustomResourceExt;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::Value;
use shardgate_contract::model::*;
use shardgate_guest::validate::{MAX_REPLICAS, MAX_SHARDS};
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_tests::fuzz::{self, Case, SLOTS};
use shardgate_wasm::{Engine, Limits, Module};

static RUNTIME: LazyLock<Engine> = LazyLock::new(|| Engine::new(Limits::default()).unwrap());
static MODULE: LazyLock<Module> = LazyLock::new(|| RUNTIME.load_embedded().unwrap());

/// The CRD's OpenAPI schema of a ValkeyCluster.
static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let crd = ValkeyCluster::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the CRD has a schema");
    serde_json::to_value(schema).unwrap()
});

/// The seed of the case running now, for [`Guard`] to name.
static CURRENT: AtomicU64 = AtomicU64::new(0);

/// The system allocator, refusing any one allocation past the guest's
/// memory cap: in wasm it would trap at the cap. A refused allocation
/// aborts the process (an allocator may not unwind), so the case's seed is
/// printed first.
struct Guard;

const ONE_ALLOCATION_AT_MOST: usize = 64 << 20;

// SAFETY: every call is passed on to the system allocator unchanged, but
// for refusing (null) a request past the cap, which callers must handle.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ONE_ALLOCATION_AT_MOST {
            refused(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ONE_ALLOCATION_AT_MOST {
            refused(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ONE_ALLOCATION_AT_MOST {
            refused(new_size);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn refused(size: usize) {
    eprintln!(
        "fuzz: case SHARDGATE_FUZZ_CASE={:016x} asks for {size} bytes at once, past the \
         guest's 64 MiB cap: refused (the process aborts)",
        CURRENT.load(Ordering::Relaxed)
    );
}

#[global_allocator]
static ALLOCATOR: Guard = Guard;

/// The message of the last panic on this process (the hook keeps it quiet:
/// shrinking may panic hundreds of times).
static PANIC: Mutex<String> = Mutex::new(String::new());

/// A count from the environment (decimal, `_` allowed).
fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

/// A seed from the environment (hex, as the run prints them).
fn env_seed(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        u64::from_str_radix(v.trim().trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a hex seed")),
    )
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The value tree of the case with seed `seed`.
fn generate<S: Strategy<Value = Case>>(strategy: &S, seed: u64) -> S::Tree {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&splitmix(seed ^ i as u64).to_le_bytes());
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    strategy
        .new_tree(&mut runner)
        .expect("the strategy rejects nothing")
}

/// What one case came to, for the run's summary.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// Refused; the first violation's field, up to its second dot.
    Refused(String),
    NoFacts,
    Formed,
    Waiting,
    Steps(&'static str),
}

fn first_step(t: &Topology) -> &'static str {
    match t.steps.first() {
        Some(Step::Meet(_)) => "meet",
        Some(Step::AddSlots(_)) => "add-slots",
        Some(Step::Replicate(_)) => "replicate",
        Some(Step::Migrate(_)) => "migrate",
        Some(Step::Forget(_)) => "forget",
        Some(Step::Failover(_)) => "failover",
        Some(Step::Restart(_)) => "restart",
        None => "none",
    }
}

/// Runs one case natively (and through wasm when `wasm`), checking every
/// invariant.
fn check(case: &Case, wasm: bool) -> Result<Verdict, String> {
    let input = &case.input;
    PANIC.lock().unwrap().clear();
    let answer = catch_unwind(AssertUnwindSafe(|| shardgate_guest::reconcile(input)))
        .map_err(|_| format!("the guest panicked: {}", PANIC.lock().unwrap()))?;
    if wasm {
        let from_wasm = MODULE
            .reconcile(input)
            .map_err(|e| format!("the wasm call failed: {e}"))?;
        let (a, b) = (json(&answer), json(&from_wasm));
        if a != b {
            return Err(format!("wasm and native differ:\nnative {a}\nwasm   {b}"));
        }
    }
    match answer {
        Err(e) => {
            if e.violations.is_empty() {
                return Err("a refusal with no violation".into());
            }
            for v in &e.violations {
                if v.severity != Severity::Error {
                    return Err(format!("a refusal lists a warning: {v:?}"));
                }
                names_a_field(&v.field).map_err(|why| format!("{v:?}: {why}"))?;
            }
            let field = &e.violations[0].field;
            let end = field
                .match_indices('.')
                .nth(1)
                .map_or(field.len(), |(i, _)| i);
            Ok(Verdict::Refused(field[..end].to_string()))
        }
        Ok(d) => {
            for v in &d.warnings {
                names_a_field(&v.field).map_err(|why| format!("{v:?}: {why}"))?;
            }
            ports_map_to_one_node(&d)?;
            let Some(facts) = input.observed.valkey.as_deref() else {
                if !d.topology.steps.is_empty() || d.topology.formed {
                    return Err("a plan without facts".into());
                }
                return Ok(Verdict::NoFacts);
            };
            no_serving_node_goes(input, facts, &d)?;
            no_slot_left_unassigned(input, facts, &d.topology)?;
            Ok(if d.topology.formed {
                Verdict::Formed
            } else if d.topology.steps.is_empty() {
                Verdict::Waiting
            } else {
                Verdict::Steps(first_step(&d.topology))
            })
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// `field` is a path into a ValkeyCluster: `metadata.name`,
/// `metadata.namespace`, or a path under `spec` that the CRD's schema has
/// (`[i]` into lists, a key or `["key"]` into maps; past a map key or a
/// field the schema leaves open, anything goes).
fn names_a_field(field: &str) -> Result<(), String> {
    if field == "metadata.name" || field == "metadata.namespace" {
        return Ok(());
    }
    let Some(rest) = field.strip_prefix("spec") else {
        return Err("the field is not under spec or metadata".into());
    };
    let mut at = &SCHEMA["properties"]["spec"];
    let mut rest = rest;
    while !rest.is_empty() {
        if at.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return Ok(());
        }
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (name, tail) = after.split_at(end);
            if let Some(next) = at.get("properties").and_then(|p| p.get(name)) {
                at = next;
                rest = tail;
            } else if at.get("additionalProperties").is_some() {
                return Ok(()); // a map key: it may hold any character
            } else {
                return Err(format!("the schema has no {name:?} here"));
            }
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(close) = after.find(']') else {
                return Err("an unclosed [".into());
            };
            let key = &after[..close];
            if key.parse::<usize>().is_ok() && at.get("items").is_some() {
                at = &at["items"];
                rest = &after[close + 1..];
            } else if key.starts_with('"') && at.get("additionalProperties").is_some() {
                return Ok(()); // a quoted map key
            } else {
                return Err(format!("[{key}] does not index what is here"));
            }
        } else {
            return Err(format!("cannot read {rest:?}"));
        }
    }
    Ok(())
}

/// Invariant 3.
fn ports_map_to_one_node(d: &Desired) -> Result<(), String> {
    let mut places = BTreeSet::new();
    // Which nodes of a shard a port name reaches.
    let mut by_port: BTreeMap<(u32, &str), Vec<u32>> = BTreeMap::new();
    for n in &d.nodes {
        if !places.insert((n.shard, n.node)) {
            return Err(format!("node {}/{} is listed twice", n.shard, n.node));
        }
        by_port
            .entry((n.shard, n.port_name.as_str()))
            .or_default()
            .push(n.node);
    }
    for svc in &d.services {
        if let Some(node) = svc.node
            && (svc.ports.len() != 1 || svc.ports[0].node != node)
        {
            return Err(format!(
                "node Service {} has ports {:?}, not node {node}'s alone",
                svc.name, svc.ports
            ));
        }
        let mut seen = BTreeSet::new();
        for p in &svc.ports {
            if !seen.insert(p.node) {
                return Err(format!("{} has two ports for node {}", svc.name, p.node));
            }
            let targets = by_port
                .get(&(svc.shard, p.name.as_str()))
                .map_or(&[][..], Vec::as_slice);
            if targets != [p.node] {
                return Err(format!(
                    "{} port {} (node {}) reaches nodes {targets:?}",
                    svc.name, p.name, p.node
                ));
            }
        }
    }
    Ok(())
}

/// Serves at least one slot (a range past 16383 or inverted serves none).
fn serves(f: &ValkeyNode) -> bool {
    f.slots.iter().any(|r| r.start <= r.end && r.start < SLOTS)
}

fn served_slots(f: &ValkeyNode) -> impl Iterator<Item = u32> + '_ {
    f.slots
        .iter()
        .flat_map(|r| r.start.min(SLOTS)..=r.end.min(SLOTS - 1))
}

/// At a place some spec makes: no object of the cluster is at any other.
fn placeable(f: &ValkeyNode) -> bool {
    f.shard < MAX_SHARDS as u32 && f.node <= MAX_REPLICAS as u32
}

fn in_spec(input: &Input, r: NodeRef) -> bool {
    r.shard < input.cluster.shards as u32 && r.node <= input.cluster.replicas as u32
}

fn answered(facts: &[ValkeyNode], r: NodeRef) -> bool {
    facts.iter().any(|f| f.shard == r.shard && f.node == r.node)
}

/// Invariant 4.
fn no_serving_node_goes(input: &Input, facts: &[ValkeyNode], d: &Desired) -> Result<(), String> {
    let kept: BTreeSet<(u32, u32)> = d.nodes.iter().map(|n| (n.shard, n.node)).collect();
    for f in facts.iter().filter(|f| serves(f) && placeable(f)) {
        if !kept.contains(&(f.shard, f.node)) {
            return Err(format!(
                "node {}/{} serves slots but is not in desired.nodes",
                f.shard, f.node
            ));
        }
    }
    for step in &d.topology.steps {
        match step {
            Step::Forget(id) => {
                if let Some(f) = facts.iter().find(|f| &f.id == id && serves(f)) {
                    return Err(format!(
                        "forgets {id}, which node {}/{} serves slots as",
                        f.shard, f.node
                    ));
                }
            }
            Step::Restart(r) => {
                let serving = facts
                    .iter()
                    .any(|f| f.shard == r.shard && f.node == r.node && serves(f));
                if serving && input.cluster.persistence.is_none() {
                    return Err(format!(
                        "restarts {}/{}, which serves slots and keeps no data on a volume",
                        r.shard, r.node
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Invariant 5.
fn no_slot_left_unassigned(
    input: &Input,
    facts: &[ValkeyNode],
    t: &Topology,
) -> Result<(), String> {
    // The first node ID serving each slot, and whether another ID serves
    // it too (a node that answers twice is one node).
    let mut owner: Vec<Option<&str>> = vec![None; SLOTS as usize];
    let mut shared = vec![false; SLOTS as usize];
    for f in facts {
        for s in served_slots(f) {
            match owner[s as usize] {
                None => owner[s as usize] = Some(&f.id),
                Some(id) => shared[s as usize] |= id != f.id,
            }
        }
    }
    let free = owner.iter().filter(|o| o.is_none()).count();
    let mut added = vec![false; SLOTS as usize];
    let mut adds = 0;
    for step in &t.steps {
        match step {
            Step::AddSlots(a) => {
                // A shard's primary may be a node past spec.replicas that
                // serves the shard until it hands over.
                if a.node.shard >= input.cluster.shards as u32 || !answered(facts, a.node) {
                    return Err(format!(
                        "add-slots to {:?}, not an answering node of a shard of the spec",
                        a.node
                    ));
                }
                for r in &a.slots {
                    if r.start > r.end || r.end >= SLOTS {
                        return Err(format!("add-slots of a bad range {r:?}"));
                    }
                    for s in r.start..=r.end {
                        if owner[s as usize].is_some() {
                            return Err(format!("add-slots of slot {s}, which is served"));
                        }
                        if std::mem::replace(&mut added[s as usize], true) {
                            return Err(format!("add-slots of slot {s} twice"));
                        }
                        adds += 1;
                    }
                }
            }
            Step::Migrate(m) => {
                if !in_spec(input, m.target) || !answered(facts, m.target) {
                    return Err(format!(
                        "migrate to {:?}, not an answering node of the spec",
                        m.target
                    ));
                }
                let mut source = vec![false; SLOTS as usize];
                for f in facts
                    .iter()
                    .filter(|f| f.shard == m.source.shard && f.node == m.source.node)
                {
                    for s in served_slots(f) {
                        source[s as usize] = true;
                    }
                }
                for r in &m.slots {
                    if r.start > r.end
                        || r.end >= SLOTS
                        || !(r.start..=r.end).all(|s| source[s as usize])
                    {
                        return Err(format!(
                            "migrate of {r:?}, which {:?} does not serve",
                            m.source
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if adds > 0 && adds != free {
        return Err(format!("adds {adds} slots of the {free} nobody serves"));
    }
    let meeting = !t.steps.is_empty() && t.steps.iter().all(|s| matches!(s, Step::Meet(_)));
    let waiting = t.steps.is_empty() && !t.formed && !t.waiting.is_empty();
    if free > 0 && free < SLOTS as usize && adds == 0 && !meeting && !waiting {
        return Err(format!(
            "{free} slots are served by nobody, and the plan neither adds them nor waits: {:?}",
            t.steps.iter().map(first_kind).collect::<Vec<_>>()
        ));
    }
    if t.formed {
        let shards = input.cluster.shards as u32;
        let nodes = input.cluster.replicas as u32 + 1;
        for shard in 0..shards {
            for node in 0..nodes {
                if !answered(facts, NodeRef { shard, node }) {
                    return Err(format!("formed, but {shard}/{node} did not answer"));
                }
            }
        }
        if let Some(s) = (0..SLOTS).find(|&s| owner[s as usize].is_none() || shared[s as usize]) {
            return Err(format!(
                "formed, but slot {s} is not served by exactly one node"
            ));
        }
        if let Some(f) = facts.iter().find(|f| {
            !in_spec(
                input,
                NodeRef {
                    shard: f.shard,
                    node: f.node,
                },
            )
        }) {
            return Err(format!(
                "formed, but {}/{} is past the spec",
                f.shard, f.node
            ));
        }
        if !t.steps.is_empty() {
            return Err("formed, with steps to run".into());
        }
    }
    Ok(())
}

fn first_kind(s: &Step) -> &'static str {
    first_step(&Topology {
        steps: vec![s.clone()],
        ..Topology::default()
    })
}

/// Shrinks a failing case; returns the smallest failing case found and why.
fn shrink<T: ValueTree<Value = Case>>(mut tree: T, mut why: String, wasm: bool) -> (Case, String) {
    let mut smallest = tree.current();
    let mut budget = 4096;
    if !tree.simplify() {
        return (smallest, why);
    }
    while budget > 0 {
        budget -= 1;
        let case = tree.current();
        match check(&case, wasm) {
            Err(w) => {
                (smallest, why) = (case, w);
                if !tree.simplify() {
                    break;
                }
            }
            Ok(_) => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    (smallest, why)
}

#[test]
fn the_guest_holds_its_invariants_on_whole_inputs() {
    // The strategy's value trees are deep and, unoptimised, their frames
    // large: more stack than a test thread's 2 MiB.
    std::thread::Builder::new()
        .name("fuzz".into())
        .stack_size(256 << 20)
        .spawn(fuzz_run)
        .unwrap()
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

fn fuzz_run() {
    std::panic::set_hook(Box::new(|info| {
        *PANIC.lock().unwrap() = info.to_string();
    }));
    let strategy = fuzz::case();
    if let Some(seed) = env_seed("SHARDGATE_FUZZ_CASE") {
        CURRENT.store(seed, Ordering::Relaxed);
        let case = generate(&strategy, seed).current();
        println!("case {seed:016x}:\n{:#?}", case.world);
        println!("input: {}", json(&case.input));
        let result = check(&case, true);
        let _ = std::panic::take_hook();
        result.unwrap();
        return;
    }
    let cases = env_count("SHARDGATE_FUZZ_CASES", 10_000);
    let wasm_every = env_count("SHARDGATE_FUZZ_WASM_EVERY", 50).max(1);
    let run_seed = env_seed("SHARDGATE_FUZZ_SEED").unwrap_or_else(|| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(Instant::now())
    });
    println!("fuzz: {cases} cases, seed {run_seed:016x}, every {wasm_every}th through wasm");
    let started = Instant::now();
    let mut verdicts: BTreeMap<Verdict, u64> = BTreeMap::new();
    let mut through_wasm = 0;
    for i in 0..cases {
        let seed = splitmix(run_seed ^ splitmix(i));
        CURRENT.store(seed, Ordering::Relaxed);
        let tree = generate(&strategy, seed);
        let wasm = i % wasm_every == 0;
        through_wasm += u64::from(wasm);
        match check(&tree.current(), wasm) {
            Ok(v) => *verdicts.entry(v).or_default() += 1,
            Err(why) => {
                let (case, why) = shrink(tree, why, wasm);
                let _ = std::panic::take_hook();
                panic!(
                    "case {i} (SHARDGATE_FUZZ_CASE={seed:016x}) breaks an invariant: {why}\n\
                     shrunk to: {:#?}\ninput: {}",
                    case.world,
                    json(&case.input)
                );
            }
        }
    }
    let _ = std::panic::take_hook();
    let took = started.elapsed();
    println!(
        "fuzz: {cases} cases ({through_wasm} through wasm too) in {:.1} s, {:.0} cases/s",
        took.as_secs_f64(),
        cases as f64 / took.as_secs_f64()
    );
    for (v, n) in &verdicts {
        println!("  {v:?}: {n} ({:.1}%)", *n as f64 * 100.0 / cases as f64);
    }
}

/// The field check itself: paths the guest uses pass, others do not.
#[test]
fn field_paths_are_checked_against_the_crd() {
    for ok in [
        "metadata.name",
        "spec.shards",
        "spec.externalAccess.domain",
        "spec.users[0].name",
        "spec.externalAccess.nodePorts.ports[1][2]",
        "spec.config.maxmemory",
        "spec.externalAccess.serviceAnnotations[\"a.io/b\"]",
    ] {
        assert_eq!(names_a_field(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "shards",
        "spec.shard",
        "spec.users.name",
        "status.shards",
        "spec.users[x]",
    ] {
        assert!(names_a_field(bad).is_err(), "{bad}");
    }
}
