//! The engine that compiles reconcile modules: one wasmtime engine
//! (epoch interruption on, pooling allocator, memory growth failures trap)
//! and a thread that advances its epoch. [`Engine::load`] compiles a
//! component, type-checks it against the `shardgate:reconcile` world and
//! pre-links it against a deny-all WASI whose calls never wait
//! ([`crate::isolation`], [`crate::wasi`]), giving a [`Module`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, anyhow};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

use crate::isolation::{Limits, State};
use crate::module::{EPOCH_TICK, Module, Tier};

/// The interface a reconcile module must export, at the version
/// `wit/reconcile.wit` declares.
pub const RECONCILER_INTERFACE: &str = concat!(
    "shardgate:reconcile/reconciler@",
    env!("SHARDGATE_RECONCILE_VERSION")
);

/// The wasmtime engine and its epoch ticker. Dropping it stops the ticker.
pub struct Engine {
    pub(crate) engine: wasmtime::Engine,
    tier: Tier,
    limits: Limits,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

impl Engine {
    /// Most instances alive at once (one per in-flight call).
    pub const MAX_INSTANCES: u32 = 64;

    /// An engine with the optimising compiler.
    pub fn new(limits: Limits) -> anyhow::Result<Self> {
        Self::with_tier(limits, Tier::Optimized)
    }

    /// An engine that compiles with `tier`, on the pooling allocator.
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
        let engine = wasmtime::Engine::new(&config).map_err(|e| anyhow!("{e:#}"))?;

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
        Ok(Engine {
            engine,
            tier,
            limits,
            stop,
            ticker: Some(ticker),
        })
    }

    /// The underlying wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// The compiler this engine uses.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// What each guest call on this engine may use.
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
        self.load(crate::EMBEDDED_GUEST)
            .context("loading the embedded reconcile module")
    }

    /// Links a compiled component against the deny-all WASI and locates its
    /// exports.
    pub fn prepare(&self, component: Component) -> anyhow::Result<Module> {
        let mut linker = Linker::<State>::new(&self.engine);
        crate::wasi::link(&mut linker)?;
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
        let module = Module::new(
            self.engine.clone(),
            self.tier,
            self.limits,
            pre,
            func("reconcile")?,
            func("validate")?,
        );
        module.check_types()?;
        Ok(module)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::swap::{Golden, candidate::self_check};

    /// Both tiers compile the embedded guest, and the baseline's code passes
    /// the same golden self-check as the optimised code.
    #[test]
    fn both_tiers_run_the_embedded_guest() {
        for tier in [Tier::Optimized, Tier::Baseline] {
            let engine = Engine::with_tier(Limits::default(), tier).unwrap();
            let started = Instant::now();
            let module = engine.load_embedded().unwrap();
            let compiled = started.elapsed();
            self_check(&module, &Golden::builtin()).unwrap();
            println!("{tier:?}: compiled in {compiled:?}");
        }
    }
}
