//! Exports the `shardgate:reconcile` world and misbehaves according to the
//! cluster name:
//!
//! - `loop` spins forever, `alloc` allocates without bound, `trap` panics
//!   (a trap);
//! - `sleep` sleeps for an hour (`std::thread::sleep`: a monotonic-clock
//!   subscription and `pollable.block`), `poll` polls an hour-long timer
//!   (`wasi:io/poll.poll`), `stdin` reads standard input to its end, `exit`
//!   calls `exit(3)` (WASI 0.2 carries it to the host as status 1).
//!
//! Any other name (and `stdin`, once its read returns) is refused with a
//! violation naming `metadata.name`; for `stdin` the message says how many
//! bytes were read.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "shardgate",
});

/// The WASI interfaces `poll` calls directly.
mod waits {
    wit_bindgen::generate!({
        path: "wit",
        world: "waits",
        generate_all,
    });
}

use std::io::Read;
use std::time::Duration;

use exports::shardgate::reconcile::reconciler::Guest;
use shardgate::reconcile::types::{Cluster, Desired, Error, Input, Severity, Violation};

/// An hour: far past any deadline.
const HOUR: Duration = Duration::from_secs(3600);

struct Misbehave;

export!(Misbehave);

fn refuse(message: String) -> Vec<Violation> {
    vec![Violation {
        severity: Severity::Error,
        field: "metadata.name".into(),
        message,
    }]
}

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
        "sleep" => {
            std::thread::sleep(HOUR);
            refuse("misbehave woke up".into())
        }
        "poll" => {
            use waits::wasi::clocks::monotonic_clock;
            use waits::wasi::io::poll;
            let timer = monotonic_clock::subscribe_duration(HOUR.as_nanos() as u64);
            let ready = poll::poll(&[&timer]);
            refuse(format!("misbehave's timer fired: {ready:?}"))
        }
        "stdin" => {
            let mut bytes = Vec::new();
            let read = std::io::stdin().read_to_end(&mut bytes);
            refuse(format!("misbehave read {} bytes from stdin ({read:?})", bytes.len()))
        }
        "exit" => std::process::exit(3),
        other => refuse(format!("misbehave refuses {other:?}")),
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
