//! A compiled reconcile module and the calls into it. Every call
//! instantiates the module in a fresh [`Store`] with a memory cap and an
//! epoch deadline, and throws the Store away afterwards, so one call can
//! never see or break another.

use std::time::Duration;

use anyhow::anyhow;
use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};
use wasmtime::component::{ComponentExportIndex, InstancePre};
use wasmtime::{Store, Trap};
use wasmtime_wasi::I32Exit;

use crate::isolation::{Limits, State};
use crate::wasi::Denied;

/// How often the epoch advances; deadlines are counted in these ticks.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Which compiler turns a module's wasm into machine code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tier {
    /// Cranelift: the optimising compiler, whose code every reconcile
    /// should run.
    #[default]
    Optimized,
    /// Winch: a single-pass baseline compiler, many times quicker to compile
    /// but with slower code; it serves a new module while the optimised
    /// compile runs.
    Baseline,
}

/// Why a guest call produced no answer. Nothing may be applied after any of
/// these.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The epoch deadline interrupted the guest.
    #[error("reconcile module exceeded its deadline of {0:?} and was stopped")]
    Deadline(Duration),
    /// The guest asked for more linear memory than its cap.
    #[error("reconcile module exceeded its memory cap of {0} bytes and was stopped")]
    MemoryCap(usize),
    /// The guest trapped, or made a host call the sandbox refuses (such as
    /// waiting: [`crate::wasi::Denied`]).
    #[error("reconcile module trapped: {0}")]
    Trap(String),
    /// The guest called `wasi:cli/exit` with this status.
    #[error("reconcile module called exit({0}) and was stopped")]
    Exit(i32),
    /// The call ran past its deadline plus [`crate::guard::MARGIN`] without
    /// returning (stuck in host code, where the epoch deadline cannot
    /// interrupt it): the caller stopped waiting for it ([`crate::guard`]).
    #[error("reconcile module exceeded its deadline of {0:?} inside a host call and was abandoned")]
    Abandoned(Duration),
    /// No guest call slot was free within this wait: the memory budget
    /// (`--module-memory-budget`) was taken by other calls. The module is
    /// not at fault.
    #[error("no reconcile module call slot was free within {0:?} (--module-memory-budget)")]
    Busy(Duration),
    /// The host could not make the call. The module is not at fault.
    #[error("reconcile module could not be called: {0:#}")]
    Host(anyhow::Error),
}

impl CallError {
    /// Whether the module itself is at fault (deadline, memory cap, trap,
    /// exit, abandoned), as opposed to the host (no slot, host error): only
    /// module failures count towards a rollback.
    pub fn is_module_failure(&self) -> bool {
        !matches!(self, CallError::Busy(_) | CallError::Host(_))
    }
}

/// A compiled, linked reconcile module. Cheap to clone; every call runs in a
/// fresh Store.
#[derive(Clone)]
pub struct Module {
    engine: wasmtime::Engine,
    tier: Tier,
    limits: Limits,
    pre: InstancePre<State>,
    reconcile: ComponentExportIndex,
    validate: ComponentExportIndex,
}

type ReconcileResult = Result<Desired, GuestError>;

impl Module {
    pub(crate) fn new(
        engine: wasmtime::Engine,
        tier: Tier,
        limits: Limits,
        pre: InstancePre<State>,
        reconcile: ComponentExportIndex,
        validate: ComponentExportIndex,
    ) -> Self {
        Module {
            engine,
            tier,
            limits,
            pre,
            reconcile,
            validate,
        }
    }

    /// Which compiler made this module's code.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// What each call of this module may use.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Calls `reconcile`. The outer error is the sandbox's (trap, deadline,
    /// cap); the inner one is the guest's verdict on the input.
    pub fn reconcile(&self, input: &Input) -> Result<ReconcileResult, CallError> {
        self.reconcile_metered(input).0
    }

    /// Calls `reconcile` like [`Module::reconcile`], and also reports the
    /// most linear memory the guest held during the call (instantiation
    /// included), in bytes, whether or not the call succeeded: what size
    /// checks and benchmarks read. The limiter counts it on every call.
    pub fn reconcile_metered(&self, input: &Input) -> (Result<ReconcileResult, CallError>, usize) {
        self.call(|store, instance| {
            let f = instance
                .get_typed_func::<(&Input,), (ReconcileResult,)>(&mut *store, self.reconcile)?;
            Ok(f.call(&mut *store, (input,))?.0)
        })
    }

    /// Calls `validate`.
    pub fn validate(&self, cluster: &Cluster) -> Result<Vec<Violation>, CallError> {
        self.call(|store, instance| {
            let f = instance
                .get_typed_func::<(&Cluster,), (Vec<Violation>,)>(&mut *store, self.validate)?;
            Ok(f.call(&mut *store, (cluster,))?.0)
        })
        .0
    }

    /// Instantiates once and looks the functions up with their Rust types, so
    /// a module whose exports have other types is refused at load time.
    pub(crate) fn check_types(&self) -> anyhow::Result<()> {
        let mut store = self.store();
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| anyhow!("{e:#}"))?;
        instance
            .get_typed_func::<(&Input,), (ReconcileResult,)>(&mut store, self.reconcile)
            .map_err(|e| anyhow!("`reconcile` has the wrong type: {e:#}"))?;
        instance
            .get_typed_func::<(&Cluster,), (Vec<Violation>,)>(&mut store, self.validate)
            .map_err(|e| anyhow!("`validate` has the wrong type: {e:#}"))?;
        Ok(())
    }

    /// A fresh Store: memory cap and epoch deadline set.
    fn store(&self) -> Store<State> {
        let mut store = Store::new(&self.engine, State::new(&self.limits));
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        let ticks = self
            .limits
            .deadline
            .as_nanos()
            .div_ceil(EPOCH_TICK.as_nanos()) as u64;
        store.set_epoch_deadline(ticks.max(1) + 1);
        store.epoch_deadline_trap();
        store
    }

    /// Runs `f` on a fresh instance; also returns the guest's peak linear
    /// memory in bytes.
    fn call<R>(
        &self,
        f: impl FnOnce(&mut Store<State>, &wasmtime::component::Instance) -> wasmtime::Result<R>,
    ) -> (Result<R, CallError>, usize) {
        let mut store = self.store();
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, &instance));
        let peak = store.data().peak_memory();
        (result.map_err(|e| self.classify(&store, e)), peak)
    }

    fn classify(&self, store: &Store<State>, e: wasmtime::Error) -> CallError {
        if store.data().cap_hit {
            return CallError::MemoryCap(self.limits.memory_bytes);
        }
        if let Some(exit) = e.downcast_ref::<I32Exit>() {
            return CallError::Exit(exit.0);
        }
        if e.downcast_ref::<Denied>().is_some() {
            return CallError::Trap(format!("{e:#}"));
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallError::Deadline(self.limits.deadline),
            Some(trap) => CallError::Trap(format!("{trap}: {e:#}")),
            None => CallError::Host(anyhow!("{e:#}")),
        }
    }
}
