//! The wasm component, run by the host's sandboxed runtime, gives
//! byte-identical results to the same guest code linked natively.

use std::sync::LazyLock;

use proptest::prelude::*;
use shardgate_tests::strategies;
use shardgate_wasm::{Engine, Limits, Module};
use shardgate_wasm::{Native, Reconciler};

/// Compiled once per test process: compiling a component in a debug build
/// takes about a second.
static RUNTIME: LazyLock<Engine> = LazyLock::new(|| Engine::new(Limits::default()).unwrap());
static MODULE: LazyLock<Module> = LazyLock::new(|| RUNTIME.load_embedded().unwrap());

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reconcile_is_byte_identical(input in strategies::input()) {
        let native = Native.reconcile(&input).unwrap();
        let wasm = MODULE.reconcile(&input).unwrap();
        prop_assert_eq!(json(&native), json(&wasm));
    }

    #[test]
    fn validate_is_byte_identical(cluster in strategies::cluster()) {
        let native = Native.validate(&cluster).unwrap();
        let wasm = MODULE.validate(&cluster).unwrap();
        prop_assert_eq!(json(&native), json(&wasm));
    }
}

#[test]
fn a_large_cluster_is_identical_too() {
    let input = shardgate_contract::model::Input {
        cluster: shardgate_contract::model::Cluster {
            name: "big".into(),
            namespace: "default".into(),
            // The most nodes a cluster may have (400).
            shards: 80,
            replicas: 4,
            external_access: Some(Default::default()),
            ..Default::default()
        },
        ..Default::default()
    };
    let native = Native.reconcile(&input).unwrap().unwrap();
    assert_eq!(native.nodes.len(), 400);
    assert_eq!(
        json(&native),
        json(&MODULE.reconcile(&input).unwrap().unwrap())
    );
}
