//! The sandboxed wasm runtime that runs reconcile modules.
//!
//! One [`Runtime`] holds the only [`Engine`] (epoch interruption on, pooling
//! allocator, memory growth failures trap) and a thread that advances the
//! epoch. A [`Module`] is a compiled component, type-checked against the
//! `shardgate:reconcile` world and pre-linked against a deny-all WASI. Every
//! call instantiates it in a fresh [`Store`] with a memory cap and an epoch
//! deadline, and throws the Store away afterwards, so one call can never see
//! or break another.

pub mod cache;
mod sandbox;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, anyhow};
use shardgate_contract::model::{Cluster, Desired, Error as GuestError, Input, Violation};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Strategy, Trap,
};

pub use sandbox::Limits;
use sandbox::State;

/// The interface a reconcile module must export.
pub const RECONCILER_INTERFACE: &str = "shardgate:reconcile/reconciler@0.2.0";

/// How often the epoch advances; deadlines are counted in these ticks.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The guest component built from `guest/` and embedded at build time.
pub static EMBEDDED_GUEST: &[u8] = include_bytes!(env!("SHARDGATE_GUEST_WASM"));

/// Why a guest call produced no answer. Nothing may be applied after any of
/// these.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("reconcile module exceeded its deadline of {0:?} and was stopped")]
    Deadline(Duration),
    #[error("reconcile module exceeded its memory cap of {0} bytes and was stopped")]
    MemoryCap(usize),
    #[error("reconcile module trapped: {0}")]
    Trap(String),
    #[error("reconcile module could not be called: {0:#}")]
    Host(anyhow::Error),
}

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

/// The engine and its epoch ticker.
pub struct Runtime {
    engine: Engine,
    tier: Tier,
    limits: Limits,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

impl Runtime {
    /// Most instances alive at once (one per in-flight call).
    pub const MAX_INSTANCES: u32 = 64;

    /// An optimising runtime.
    pub fn new(limits: Limits) -> anyhow::Result<Self> {
        Self::with_tier(limits, Tier::Optimized)
    }

    pub fn with_tier(limits: Limits, tier: Tier) -> anyhow::Result<Self> {
        Self::with_options(limits, tier, true)
    }

    /// With `pooling` false, every instance's memory and tables are
    /// allocated on demand instead of from the pooling allocator, which
    /// reserves hundreds of GiB of address space up front: slower
    /// instantiation, but runnable where that reservation fails (valgrind,
    /// a small `ulimit -v`). The memory cap holds either way.
    pub fn with_options(limits: Limits, tier: Tier, pooling: bool) -> anyhow::Result<Self> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(Self::MAX_INSTANCES)
            .total_core_instances(Self::MAX_INSTANCES * 4)
            .total_memories(Self::MAX_INSTANCES * 2)
            .total_tables(Self::MAX_INSTANCES * 4)
            .max_memory_size(limits.memory_bytes.saturating_mul(2));
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .wasm_component_model(true)
            .allocation_strategy(if pooling {
                InstanceAllocationStrategy::Pooling(pool)
            } else {
                InstanceAllocationStrategy::OnDemand
            });
        if tier == Tier::Baseline {
            config.strategy(Strategy::Winch);
        }
        let engine = Engine::new(&config).map_err(|e| anyhow!("{e:#}"))?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("shardgate-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .context("starting the epoch thread")?
        };
        Ok(Runtime {
            engine,
            tier,
            limits,
            stop,
            ticker: Some(ticker),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn tier(&self) -> Tier {
        self.tier
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Compiles a component and checks it exports the reconcile world.
    pub fn load(&self, bytes: &[u8]) -> anyhow::Result<Module> {
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| anyhow!("not a valid wasm component: {e:#}"))?;
        self.prepare(component)
    }

    /// Loads the guest embedded in this binary.
    pub fn load_embedded(&self) -> anyhow::Result<Module> {
        self.load(EMBEDDED_GUEST)
            .context("loading the embedded reconcile module")
    }

    /// Links a compiled component against the deny-all WASI and locates its
    /// exports.
    pub fn prepare(&self, component: Component) -> anyhow::Result<Module> {
        let mut linker = Linker::<State>::new(&self.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| anyhow!("{e:#}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| anyhow!("the module's imports cannot be satisfied: {e:#}"))?;
        let iface = component
            .get_export_index(None, RECONCILER_INTERFACE)
            .ok_or_else(|| anyhow!("the module does not export {RECONCILER_INTERFACE}"))?;
        let func = |name: &str| {
            component
                .get_export_index(Some(&iface), name)
                .ok_or_else(|| anyhow!("the module's {RECONCILER_INTERFACE} lacks `{name}`"))
        };
        let module = Module {
            engine: self.engine.clone(),
            tier: self.tier,
            limits: self.limits,
            reconcile: func("reconcile")?,
            validate: func("validate")?,
            pre,
        };
        module.check_types()?;
        Ok(module)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// A compiled, linked reconcile module. Cheap to clone; every call runs in a
/// fresh Store.
#[derive(Clone)]
pub struct Module {
    engine: Engine,
    tier: Tier,
    limits: Limits,
    pre: InstancePre<State>,
    reconcile: ComponentExportIndex,
    validate: ComponentExportIndex,
}

type ReconcileResult = Result<Desired, GuestError>;

impl Module {
    /// Which compiler made this module's code.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Calls `reconcile`. The outer error is the sandbox's (trap, deadline,
    /// cap); the inner one is the guest's verdict on the input.
    pub fn reconcile(&self, input: &Input) -> Result<ReconcileResult, CallError> {
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
    }

    /// Instantiates once and looks the functions up with their Rust types, so
    /// a module whose exports have other types is refused at load time.
    fn check_types(&self) -> anyhow::Result<()> {
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

    fn call<R>(
        &self,
        f: impl FnOnce(&mut Store<State>, &wasmtime::component::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut store = self.store();
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, &instance));
        result.map_err(|e| self.classify(&store, e))
    }

    fn classify(&self, store: &Store<State>, e: wasmtime::Error) -> CallError {
        if store.data().cap_hit {
            return CallError::MemoryCap(self.limits.memory_bytes);
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallError::Deadline(self.limits.deadline),
            Some(trap) => CallError::Trap(format!("{trap}: {e:#}")),
            None => CallError::Host(anyhow!("{e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::modules::{Golden, candidate::self_check};

    /// Both tiers compile the embedded guest, and the baseline's code passes
    /// the same golden self-check as the optimised code.
    #[test]
    fn both_tiers_run_the_embedded_guest() {
        for tier in [Tier::Optimized, Tier::Baseline] {
            let runtime = Runtime::with_tier(Limits::default(), tier).unwrap();
            let started = Instant::now();
            let module = runtime.load_embedded().unwrap();
            let compiled = started.elapsed();
            self_check(&module, &Golden::builtin()).unwrap();
            println!("{tier:?}: compiled in {compiled:?}");
        }
    }
}
