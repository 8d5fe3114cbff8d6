//! One reconcile of one ValkeyCluster, flowing one way through named stages,
//! each a module with its decisions tested beside it:
//!
//! 1. [`observe`]: what the cluster owns, each Pod projected once, and its
//!    Valkey nodes' facts, read as the operator's system user once
//!    [`credentials`] has found every user's passwords (a missing one
//!    refuses the spec);
//! 2. [`guest`]: the reconcile module's desired state, or a refusal that
//!    applies and deletes nothing;
//! 3. [`apply`]: the ACL Secret ([`credentials::deliver_acl`]), then every
//!    desired object not already in place;
//! 4. [`reshape`]: the Valkey nodes announce live, then the topology plan's
//!    steps run;
//! 5. [`prune`]: what the cluster owns and no longer wants;
//! 6. [`status`]: computed in one pure function, written when it differs.

mod apply;
mod credentials;
mod error;
mod events;
mod guest;
mod observe;
mod poll;
mod prune;
mod reshape;
pub mod retire;
mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use shardgate_k8s::convert;
use shardgate_k8s::crd::{ExternalAccessType, ValkeyCluster};
use shardgate_k8s::status::{Outcome, Progress};
use tracing::{debug, info, warn};

pub use error::Error;
pub use events::Said;

use crate::context::Context;

/// How long to wait before looking again at a converged cluster.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How soon to look again while something is still pending.
pub const PENDING_RECHECK: Duration = Duration::from_secs(15);
/// How soon to look again at a spec refused for a password the operator
/// could not read: Secrets are read by name, never watched.
pub const SECRET_RECHECK: Duration = Duration::from_secs(5);
/// How soon to look again when the object caches have not been listed yet.
pub const CACHE_RECHECK: Duration = Duration::from_millis(200);
/// The longest wait before looking again while the Valkey cluster is forming
/// or changing shape (gossip, syncs and migrations take seconds): a fixed
/// tick's period, and the most an adaptive reconcile polls before its next
/// look.
pub const TOPOLOGY_RECHECK: Duration = Duration::from_secs(1);

/// How long one reconcile keeps looking again by itself while Valkey
/// reshapes before it hands the cluster back to the controller's queue. A
/// stopping controller (lease lost, shutdown) waits for the reconciles in
/// flight, so none may run long: with the last poll (at most
/// [`TOPOLOGY_RECHECK`]), one reconcile lasts about two of these at most.
pub const LOOKING_AT_MOST: Duration = TOPOLOGY_RECHECK;

/// Reconciles one cluster through every stage and says when to look at it
/// again; until the caches are listed it only requeues. While Valkey
/// reshapes, a look is followed by a poll ([`poll`]) and the next look at
/// once, within this call: the controller's debounce delays only what the
/// watches report, not the operator's own next look.
#[tracing::instrument(skip_all, fields(cluster = %vc.name_any(), namespace = vc.namespace().unwrap_or_default()))]
pub async fn reconcile(vc: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.caches.synced() {
        // Not counted as a reconcile: nothing was looked at.
        return Ok(Action::requeue(CACHE_RECHECK));
    }
    let obj = ObjectRef::from_obj(vc.as_ref());
    let mut vc = vc;
    let started = Instant::now();
    loop {
        let mut wait = match look(&vc, &ctx).await? {
            Looked::Done(action) => return Ok(action),
            Looked::Poll(wait) => wait,
        };
        let polled = wait.until_changed(&ctx, &vc).await;
        debug!(?polled, waiting = %wait.waiting, "polled the reshaping cluster");
        vc = match after_poll(started.elapsed(), || ctx.clusters.get(&obj)) {
            Ok(latest) => latest,
            Err(action) => return Ok(action),
        };
    }
}

/// What follows a poll, `looking` into a reconcile: the next look, at the
/// spec as the cache holds it now (`latest`); or, past
/// [`LOOKING_AT_MOST`], the controller's queue at once; or, for a cluster
/// no longer cached (deleted), nothing until it changes.
fn after_poll(
    looking: Duration,
    latest: impl FnOnce() -> Option<Arc<ValkeyCluster>>,
) -> Result<Arc<ValkeyCluster>, Action> {
    if looking >= LOOKING_AT_MOST {
        return Err(Action::requeue(Duration::ZERO));
    }
    latest().ok_or_else(Action::await_change)
}

/// One look: every stage once, timed and counted, its failure written to
/// status.
async fn look(vc: &ValkeyCluster, ctx: &Context) -> Result<Looked, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = run(vc, ctx).await;
    // A poll that follows is the wait between looks, not part of one.
    let took = started.elapsed();
    ctx.metrics.reconcile_seconds.observe(took.as_secs_f64());
    debug!(?took, ok = result.is_ok(), "looked");
    let obj = ObjectRef::from_obj(vc);
    match &result {
        Ok(_) => {
            ctx.succeeded(&obj);
            ctx.said.clear(&obj, FAILED);
        }
        Err(e) => {
            // Every reconcile ends with the status saying how it went.
            let outcome = Outcome::Failed {
                message: e.to_string(),
            };
            if let Err(e) = status::publish(vc, ctx, &outcome).await {
                warn!(error = %e, "could not write the failure to status");
            }
        }
    }
    result
}

/// How a look ended.
enum Looked {
    Done(Action),
    /// Valkey is reshaping: poll it, then look again at once.
    Poll(poll::Wait),
}

/// The reason of the Event and condition of a reconcile that failed.
const FAILED: &str = "ReconcileFailed";

/// Requeue with backoff, and say why.
pub fn error_policy(vc: Arc<ValkeyCluster>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(err.reason());
    let delay = ctx.failed(ObjectRef::from_obj(vc.as_ref()));
    warn!(cluster = %vc.name_any(), error = %err, retry_in = ?delay, "reconcile failed");
    let message = err.to_string();
    tokio::spawn(async move {
        events::warn_once(&ctx, &vc, FAILED, "Reconcile", message).await;
    });
    Action::requeue(delay)
}

async fn run(vc: &ValkeyCluster, ctx: &Context) -> Result<Looked, Error> {
    let (snapshot, mut input) = observe::objects(vc, ctx)?;
    let seen = poll::Seen::now(ctx, vc);
    let access = match credentials::resolve(ctx, vc, &mut input).await? {
        Ok(access) => access,
        Err(violations) => {
            return status::refuse(vc, ctx, &violations, Some(SECRET_RECHECK))
                .await
                .map(Looked::Done);
        }
    };
    let mut nodes = observe::valkey(ctx, &snapshot, &access).await;
    let desired = match guest::call(ctx, input, nodes.as_ref()).await? {
        Ok(desired) => desired,
        Err(violations) => {
            return status::refuse(vc, ctx, &violations, None)
                .await
                .map(Looked::Done);
        }
    };
    events::warnings(ctx, vc, &desired).await;
    let acl_marker = credentials::deliver_acl(ctx, vc, &desired.acl).await?;
    let objects = convert::objects(vc, &desired);
    let applied = apply::run(ctx, vc, &objects).await?;
    let served = access.tls.as_ref().map(|m| &m.leaf);
    let reshaped = reshape::run(
        ctx,
        vc,
        &snapshot,
        nodes.as_mut(),
        &desired,
        &acl_marker,
        served,
    )
    .await?;
    let pruned = prune::run(ctx, vc, &snapshot, &objects, reshaped.announce_spreading).await?;
    let changed = applied.changed + pruned.deleted;
    ctx.said.clear(&ObjectRef::from_obj(vc), "InvalidSpec");
    let progress = Progress {
        changed,
        ready_nodes: snapshot.ready_nodes(&desired.nodes),
        wanted_nodes: desired.nodes.len(),
        shards: vc.spec.shards.max(0) as usize,
        ready_shards: snapshot.ready_shards(&desired.nodes, vc.spec.shards.max(0) as u32),
        formation: nodes.is_some().then(|| (&desired.topology).into()),
        announce_spreading: reshaped.announce_spreading,
        acl_pending: reshaped.acl_waiting,
        conflicts: applied.conflicts,
        rolling: snapshot.rolling(),
        external_access_type: Some(ExternalAccessType::of(vc.spec.external_access.as_ref())),
    };
    let pending = shardgate_k8s::status::pending(&desired.status, &progress);
    let outcome = Outcome::Reconciled {
        guest: &desired.status,
        progress,
    };
    status::publish(vc, ctx, &outcome).await?;
    if changed > 0 {
        info!(changed, "applied");
    }
    let after = match (next_look(&outcome, reshaped, pending, ctx.recheck), nodes) {
        (Next::After(after), _) => after,
        (Next::Poll(budget), Some(nodes)) => {
            return Ok(Looked::Poll(poll::Wait {
                nodes,
                seen,
                steps_ran: reshaped.steps > 0,
                budget,
                waiting: desired.topology.waiting.clone(),
            }));
        }
        (Next::Poll(budget), None) => budget,
    };
    let after = pruned.retire_in.map_or(after, |d| d.min(after));
    Ok(Looked::Done(Action::requeue(after)))
}

/// How soon to look again at a cluster whose Valkey is reshaping.
/// Measured side by side by `cargo bench -p shardgate --bench
/// sandbox_ready`; see docs/performance.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Recheck {
    /// Poll the nodes' facts within the reconcile ([`poll`]) and look again
    /// as soon as they, the Pods or the spec changed, at the latest after
    /// [`TOPOLOGY_RECHECK`].
    #[default]
    Adaptive,
    /// Always this long: one phase per tick.
    Fixed(Duration),
}

/// What a reconcile does before it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Poll the reshaping cluster for at most this long, then look again.
    Poll(Duration),
    /// Look again after this long.
    After(Duration),
}

/// When to look at the cluster again. While Valkey is reshaping: by
/// `recheck`, so each phase starts about as soon as Valkey allows. Later
/// while something else is pending, else at the resync.
fn next_look(
    outcome: &Outcome<'_>,
    reshaped: reshape::Reshaped,
    pending: bool,
    recheck: Recheck,
) -> Next {
    let forming = match outcome {
        Outcome::Reconciled { progress, .. } => {
            progress.formation.as_ref().is_some_and(|f| !f.formed)
        }
        Outcome::Refused { .. } | Outcome::Failed { .. } => false,
    };
    let reshaping =
        forming || reshaped.steps > 0 || reshaped.announce_spreading || reshaped.acl_waiting > 0;
    match (reshaping, recheck) {
        (true, Recheck::Fixed(every)) => Next::After(every),
        (true, Recheck::Adaptive) => Next::Poll(TOPOLOGY_RECHECK),
        _ if pending || reshaped.tls_reloaded > 0 => Next::After(PENDING_RECHECK),
        _ => Next::After(RESYNC),
    }
}

#[cfg(test)]
mod tests {
    use shardgate_contract::model::Status;
    use shardgate_k8s::status::Formation;

    use super::*;

    #[test]
    fn after_a_poll_a_reconcile_looks_again_until_its_time_is_up() {
        let vc = Arc::new(ValkeyCluster::new(
            "c",
            serde_json::from_value(serde_json::json!({})).unwrap(),
        ));
        let ms = Duration::from_millis;
        let bound = LOOKING_AT_MOST;
        // (looking for, still cached) => the next look's cluster, or the action
        for (looking, cached, want) in [
            (ms(0), true, Ok(())),
            (bound - ms(1), true, Ok(())),
            (bound, true, Err(Action::requeue(Duration::ZERO))),
            (bound * 30, true, Err(Action::requeue(Duration::ZERO))),
            (ms(0), false, Err(Action::await_change())),
            // Past the bound, the queue; it finds the cluster gone itself.
            (bound, false, Err(Action::requeue(Duration::ZERO))),
        ] {
            let mut read = false;
            let got = after_poll(looking, || {
                read = true;
                cached.then(|| vc.clone())
            });
            match (&got, &want) {
                (Ok(latest), Ok(())) => assert!(Arc::ptr_eq(latest, &vc)),
                (Err(a), Err(b)) => assert_eq!(a, b, "{looking:?} {cached}"),
                _ => panic!("{looking:?} {cached}: {got:?}, want {want:?}"),
            }
            // The cache is read only for a look that will happen.
            assert_eq!(read, looking < bound, "{looking:?} {cached}");
        }
    }

    #[test]
    fn reshaping_looks_again_soonest_then_pending_then_resync() {
        let guest = Status::default();
        let outcome = |formed: Option<bool>| Outcome::Reconciled {
            guest: &guest,
            progress: Progress {
                formation: formed.map(|formed| Formation {
                    formed,
                    waiting: String::new(),
                }),
                ..Progress::default()
            },
        };
        let reshaped = |steps, announce_spreading, acl_waiting, tls_reloaded| reshape::Reshaped {
            steps,
            announce_spreading,
            acl_waiting,
            tls_reloaded,
        };
        let tick = Duration::from_millis(700);
        let later = Next::After(PENDING_RECHECK);
        let resync = Next::After(RESYNC);
        // (formed, steps run, spreading, ACL waiting, TLS reloaded, pending)
        // => what follows, `None` while reshaping: a poll when adaptive,
        // the tick when fixed.
        for (formed, steps, spreading, acl, tls, pending, want) in [
            (Some(false), 0, false, 0, 0, false, None),
            (Some(true), 2, false, 0, 0, true, None),
            (Some(true), 0, true, 0, 0, true, None),
            (Some(true), 0, false, 1, 0, false, None),
            (Some(true), 0, false, 0, 0, true, Some(later)),
            // Nodes told to reload a renewed certificate whose files the
            // kubelet may not have refreshed yet: looked at again while
            // pending.
            (Some(true), 0, false, 0, 2, false, Some(later)),
            (None, 0, false, 0, 0, true, Some(later)),
            (Some(true), 0, false, 0, 0, false, Some(resync)),
            (None, 0, false, 0, 0, false, Some(resync)),
        ] {
            let adaptive = want.unwrap_or(Next::Poll(TOPOLOGY_RECHECK));
            let fixed = want.unwrap_or(Next::After(tick));
            let case = format!("{formed:?} {steps} {spreading} {acl} {tls} {pending}");
            let r = reshaped(steps, spreading, acl, tls);
            let o = outcome(formed);
            assert_eq!(
                next_look(&o, r, pending, Recheck::Adaptive),
                adaptive,
                "{case}"
            );
            assert_eq!(
                next_look(&o, r, pending, Recheck::Fixed(tick)),
                fixed,
                "{case}"
            );
        }
    }
}
