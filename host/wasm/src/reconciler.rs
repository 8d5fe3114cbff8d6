//! One interface over the ways to run the reconcile logic: a sandboxed wasm
//! [`Module`] (what every host of shardgate uses) and, for differential tests
//! and benchmarks only, the guest crate linked natively ([`Native`], behind
//! the `native` feature).

use std::time::Duration;

use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};

use crate::module::{CallError, Module, Tier};

/// The reconcile contract as the host calls it.
pub trait Reconciler: Send + Sync {
    /// The outer error means the call itself failed (trap, deadline, cap);
    /// the inner one is the guest's verdict on invalid input.
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError>;
    /// Every error and warning for a cluster spec, without observed state.
    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError>;
    /// The compiler tier of a wasm module's code; `None` for other kinds.
    fn tier(&self) -> Option<Tier> {
        None
    }
    /// How long one call may run before the sandbox stops it; `None` when
    /// nothing stops it (a native reconciler). The wall-clock guard
    /// ([`crate::guard`]) gives up on a call after this plus its margin.
    fn deadline(&self) -> Option<Duration> {
        None
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

    fn deadline(&self) -> Option<Duration> {
        Some(self.limits().deadline)
    }
}

/// The guest crate called directly, with no sandbox: the reference the wasm
/// module is compared with.
#[cfg(any(test, feature = "native"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct Native;

#[cfg(any(test, feature = "native"))]
impl Reconciler for Native {
    fn reconcile(&self, input: &Input) -> Result<Result<Desired, GuestError>, CallError> {
        Ok(shardgate_guest::reconcile(input))
    }

    fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        Ok(shardgate_guest::validate(cluster))
    }
}
