//! One interface over the two ways to run the reconcile logic: the sandboxed
//! wasm module (what the operator uses) and the same crate linked natively
//! (the reference for differential tests and benchmarks).

use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};

use crate::runtime::{CallError, Module, Tier};

pub trait Reconciler: Send + Sync {
    /// The outer error means the call itself failed (trap, deadline, cap);
    /// the inner one is the guest's verdict on invalid input.
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError>;
    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError>;
    /// The compiler tier of a wasm module's code; `None` for other kinds.
    fn tier(&self) -> Option<Tier> {
        None
    }
}

/// The guest crate called directly, with no sandbox.
#[derive(Clone, Copy, Debug, Default)]
pub struct Native;

impl Reconciler for Native {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Ok(shardgate_guest::reconcile(input))
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Ok(shardgate_guest::validate(cluster))
    }
}

impl Reconciler for Module {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Module::reconcile(self, input)
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Module::validate(self, cluster)
    }

    fn tier(&self) -> Option<Tier> {
        Some(Module::tier(self))
    }
}
