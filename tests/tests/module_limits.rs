//! The sandbox stops a module that loops, allocates past its cap or traps,
//! with an error that says which, and the module keeps working afterwards
//! (every call gets a fresh Store).

use std::time::Duration;

use shardgate_contract::model::{Cluster, Input};
use shardgate_tests::modules::MISBEHAVE;
use shardgate_wasm::{CallError, Engine, Limits};

fn input(name: &str) -> Input {
    Input {
        cluster: Cluster {
            name: name.into(),
            shards: 1,
            ..Cluster::default()
        },
        ..Input::default()
    }
}

fn engine() -> Engine {
    Engine::new(Limits {
        memory_bytes: 16 << 20,
        deadline: Duration::from_millis(200),
    })
    .unwrap()
}

#[test]
fn misbehaving_module_is_stopped_with_the_right_error() {
    let rt = engine();
    let module = rt
        .load(MISBEHAVE)
        .expect("misbehave exports the reconcile world");

    // A well-behaved call answers: the guest's own verdict comes back.
    let verdict = module.reconcile(&input("fine")).unwrap().unwrap_err();
    assert_eq!(verdict.violations[0].field, "metadata.name");

    // The loop ends only by the epoch deadline: the error says so. (How
    // soon after the deadline it stops is a benchmark's business.)
    match module.reconcile(&input("loop")) {
        Err(CallError::Deadline(d)) => assert_eq!(d, Duration::from_millis(200)),
        other => panic!("expected a deadline error, got {other:?}"),
    }

    match module.reconcile(&input("alloc")) {
        Err(CallError::MemoryCap(cap)) => assert_eq!(cap, 16 << 20),
        other => panic!("expected a memory cap error, got {other:?}"),
    }

    match module.validate(&input("trap").cluster) {
        Err(CallError::Trap(msg)) => assert!(msg.contains("unreachable"), "{msg}"),
        other => panic!("expected a trap, got {other:?}"),
    }

    // Each call had its own Store: the module still serves.
    assert!(module.reconcile(&input("fine")).unwrap().is_err());
    assert!(module.validate(&input("fine").cluster).unwrap().len() == 1);
}

#[test]
fn the_embedded_guest_can_observe_nothing_of_the_host() {
    // The guest links against WASI but gets no env, args, files, network,
    // clock or randomness: its output cannot vary between runs or hosts.
    let rt = engine();
    let module = rt.load_embedded().unwrap();
    let a = module.reconcile(&input("demo")).unwrap();
    let b = module.reconcile(&input("demo")).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_non_component_is_refused_clearly() {
    let rt = engine();
    let err = rt
        .load(b"\0asm\x01\0\0\0")
        .err()
        .expect("a core module is not a component");
    assert!(format!("{err:#}").contains("component"), "{err:#}");
    let err = rt.load(b"not wasm at all").err().unwrap();
    assert!(
        format!("{err:#}").contains("not a valid wasm component"),
        "{err:#}"
    );
}

#[test]
fn a_call_reports_the_most_memory_its_guest_held() {
    let rt = engine();
    let module = rt.load_embedded().unwrap();
    let (answer, small) = module.reconcile_metered(&input("demo"));
    assert!(answer.unwrap().is_ok());
    let mut big = input("big");
    big.cluster.shards = 200;
    big.cluster.replicas = 1;
    let (answer, large) = module.reconcile_metered(&big);
    assert_eq!(answer.unwrap().unwrap().nodes.len(), 400);
    assert!(0 < small && small < large, "{small} then {large}");
    assert!(large <= 16 << 20);

    // A call stopped at its cap reports what it held up to there.
    let misbehave = rt.load(MISBEHAVE).unwrap();
    let (answer, peak) = misbehave.reconcile_metered(&input("alloc"));
    assert!(matches!(answer, Err(CallError::MemoryCap(_))), "{answer:?}");
    assert!((12 << 20..=16 << 20).contains(&peak), "{peak}");
}

/// The largest clusters the CRD allows (400 nodes, in three shapes), formed
/// and observed in full (every node's view of every peer), reconcile
/// through the embedded module under the operator's own limits, and the
/// status the operator would write stays under 1 MiB. Figures by size:
/// `cargo bench -p shardgate --bench size_limits`.
#[test]
fn the_largest_allowed_clusters_reconcile_within_the_limits_and_their_status_fits() {
    use shardgate_tests::sizes;
    let rt = Engine::new(Limits::default()).unwrap();
    let module = rt.load_embedded().unwrap();
    for (shards, nodes) in [(400, 1), (200, 2), (25, 16)] {
        assert_eq!(
            i64::from(shards * nodes),
            shardgate_guest::validate::MAX_NODES
        );
        let input = sizes::formed(shards, nodes);
        let desired = match module.reconcile(&input) {
            Ok(Ok(d)) => d,
            other => panic!("{shards} x {nodes}: {other:?}"),
        };
        assert_eq!(desired.nodes.len() as u32, shards * nodes);
        assert!(desired.topology.formed, "{}", desired.topology.waiting);
        let status = sizes::status_bytes(&input, &desired);
        assert!(
            status < 1 << 20,
            "{shards} x {nodes}: status of {status} bytes"
        );
    }
    // One node more is refused by validation, naming the field.
    let over = sizes::formed(201, 2);
    match module.reconcile(&over) {
        Ok(Err(e)) => assert!(
            e.violations.iter().any(|v| v.field == "spec.shards"),
            "{:?}",
            e.violations
        ),
        other => panic!("201 x 2 was not refused: {other:?}"),
    }
}
