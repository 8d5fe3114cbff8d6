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
use tracing::{info, warn};

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
/// or changing shape (gossip, syncs and migrations take seconds).
pub const TOPOLOGY_RECHECK: Duration = Duration::from_secs(1);
/// The first wait after a plan's steps ran: the facts the next phase waits
/// for (a meet, a replica's sync) often hold within tens of milliseconds.
pub const TOPOLOGY_FIRST_RECHECK: Duration = Duration::from_millis(50);

/// Reconciles one cluster through every stage and says when to look at it
/// again; until the caches are listed it only requeues.
#[tracing::instrument(skip_all, fields(cluster = %vc.name_any(), namespace = vc.namespace().unwrap_or_default()))]
pub async fn reconcile(vc: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.caches.synced() {
        // Not counted as a reconcile: nothing was looked at.
        return Ok(Action::requeue(CACHE_RECHECK));
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = run(&vc, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    let obj = ObjectRef::from_obj(vc.as_ref());
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
            if let Err(e) = status::publish(&vc, &ctx, &outcome).await {
                warn!(error = %e, "could not write the failure to status");
            }
        }
    }
    result
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

async fn run(vc: &ValkeyCluster, ctx: &Context) -> Result<Action, Error> {
    let (snapshot, mut input) = observe::objects(vc, ctx)?;
    let access = match credentials::resolve(ctx, vc, &mut input).await? {
        Ok(access) => access,
        Err(violations) => {
            return status::refuse(vc, ctx, &violations, Some(SECRET_RECHECK)).await;
        }
    };
    let mut nodes = observe::valkey(ctx, &snapshot, &access).await;
    let desired = match guest::call(ctx, input, nodes.as_ref()).await? {
        Ok(desired) => desired,
        Err(violations) => return status::refuse(vc, ctx, &violations, None).await,
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
    let obj = ObjectRef::from_obj(vc);
    let waited = ctx.waits(&obj);
    let look = next_look(&outcome, reshaped, pending, waited, ctx.recheck);
    ctx.set_waits(
        &obj,
        if look.reshaping && reshaped.steps == 0 {
            waited + 1
        } else {
            0
        },
    );
    let after = pruned.retire_in.map_or(look.after, |d| d.min(look.after));
    Ok(Action::requeue(after))
}

/// How soon to look again at a cluster whose Valkey is reshaping.
///
/// The default stays the fixed [`TOPOLOGY_RECHECK`] tick: measured side by
/// side (`cargo bench -p shardgate --bench sandbox_ready`, release, 2
/// vCPUs), the adaptive look made a 3x1 cluster Ready 1.29x sooner but a
/// 10x2 one 0.90x as fast at the median (each look reads all 30 nodes, and
/// the operator's CPU competes with Valkey's); see docs/performance.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recheck {
    /// [`TOPOLOGY_FIRST_RECHECK`] after a plan's steps ran, doubling while
    /// there is nothing to do yet, at most [`TOPOLOGY_RECHECK`].
    Adaptive,
    /// Always this long: one phase per tick.
    Fixed(Duration),
}

impl Default for Recheck {
    fn default() -> Self {
        Recheck::Fixed(TOPOLOGY_RECHECK)
    }
}

/// When to look at a cluster again, and whether Valkey is reshaping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Look {
    after: Duration,
    reshaping: bool,
}

/// When to look at the cluster again. While Valkey is reshaping: soon after
/// a plan's steps ran ([`TOPOLOGY_FIRST_RECHECK`]), then twice as long
/// after each look that found nothing to do yet (`waited` of them in a
/// row), at most [`TOPOLOGY_RECHECK`]; so each phase starts about as soon as
/// Valkey allows, not on a fixed tick. Later while something else is
/// pending, else at the resync.
fn next_look(
    outcome: &Outcome<'_>,
    reshaped: reshape::Reshaped,
    pending: bool,
    waited: u32,
    recheck: Recheck,
) -> Look {
    let forming = match outcome {
        Outcome::Reconciled { progress, .. } => {
            progress.formation.as_ref().is_some_and(|f| !f.formed)
        }
        Outcome::Refused { .. } | Outcome::Failed { .. } => false,
    };
    let reshaping =
        forming || reshaped.steps > 0 || reshaped.announce_spreading || reshaped.acl_waiting > 0;
    let after = if let (true, Recheck::Fixed(every)) = (reshaping, recheck) {
        every
    } else if reshaping {
        let doublings = if reshaped.steps > 0 { 0 } else { waited.min(8) };
        (TOPOLOGY_FIRST_RECHECK * 2u32.pow(doublings)).min(TOPOLOGY_RECHECK)
    } else if pending || reshaped.tls_reloaded > 0 {
        PENDING_RECHECK
    } else {
        RESYNC
    };
    Look { after, reshaping }
}

#[cfg(test)]
mod tests {
    use shardgate_contract::model::Status;
    use shardgate_k8s::status::Formation;

    use super::*;

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
        let reshaped = |steps, announce_spreading| reshape::Reshaped {
            steps,
            announce_spreading,
            acl_waiting: 0,
            tls_reloaded: 0,
        };
        let ms = Duration::from_millis;
        // (formed, steps run, spreading, pending, looks that waited) => after
        for (formed, steps, spreading, pending, waited, want) in [
            (Some(false), 0, false, false, 0, ms(50)),
            (Some(false), 0, false, false, 1, ms(100)),
            (Some(false), 0, false, false, 3, ms(400)),
            (Some(false), 0, false, false, 5, TOPOLOGY_RECHECK),
            (Some(false), 0, false, false, 40, TOPOLOGY_RECHECK),
            (Some(true), 2, false, true, 5, ms(50)),
            (Some(true), 0, true, true, 2, ms(200)),
            (Some(true), 0, false, true, 2, PENDING_RECHECK),
            (None, 0, false, true, 0, PENDING_RECHECK),
            (Some(true), 0, false, false, 0, RESYNC),
            (None, 0, false, false, 0, RESYNC),
        ] {
            let look = next_look(
                &outcome(formed),
                reshaped(steps, spreading),
                pending,
                waited,
                Recheck::Adaptive,
            );
            assert_eq!(
                look.after, want,
                "{formed:?} {steps} {spreading} {pending} {waited}"
            );
            let fixed = Recheck::Fixed(TOPOLOGY_RECHECK);
            let look = next_look(
                &outcome(formed),
                reshaped(steps, spreading),
                pending,
                0,
                fixed,
            );
            if look.reshaping {
                assert_eq!(look.after, TOPOLOGY_RECHECK, "fixed: one tick per phase");
            }
        }
        // Nodes told to reload a renewed certificate whose files the
        // kubelet may not have refreshed yet: looked at again while pending.
        let reloading = reshape::Reshaped {
            tls_reloaded: 2,
            ..reshaped(0, false)
        };
        let look = next_look(&outcome(Some(true)), reloading, false, 0, Recheck::Adaptive);
        assert_eq!(look.after, PENDING_RECHECK);
    }
}
