//! Exports the `shardgate:reconcile` world and misbehaves according to the
//! cluster name: `loop` spins forever, `alloc` allocates without bound,
//! `trap` panics (a trap). Any other name is refused with a violation naming
//! `metadata.name`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "shardgate",
});

use exports::shardgate::reconcile::reconciler::Guest;
use shardgate::reconcile::types::{Cluster, Desired, Error, Input, Severity, Violation};

struct Misbehave;

export!(Misbehave);

fn misbehave(name: &str) -> Vec<Violation> {
    match name {
        "loop" => loop {
            std::hint::black_box(());
        },
        "alloc" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "trap" => panic!("deliberate trap"),
        other => vec![Violation {
            severity: Severity::Error,
            field: "metadata.name".into(),
            message: format!("misbehave refuses {other:?}"),
        }],
    }
}

impl Guest for Misbehave {
    fn reconcile(input: Input) -> Result<Desired, Error> {
        Err(Error {
            violations: misbehave(&input.cluster.name),
        })
    }

    fn validate(cluster: Cluster) -> Vec<Violation> {
        misbehave(&cluster.name)
    }
}
