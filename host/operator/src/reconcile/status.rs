//! Stage 6, status: computed in one pure function
//! ([`shardgate_k8s::status::compute`], shared with `shardgate render`) and
//! written through the status subresource only when it differs.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use shardgate_contract::model::Violation;
use shardgate_k8s::crd::{ValkeyCluster, ValkeyClusterStatus};
use shardgate_k8s::manager::FIELD_MANAGER;
use shardgate_k8s::status::{self, Outcome};
use tracing::warn;

use super::{Error, events};
use crate::context::Context;
use crate::metrics::ClusterLabels;

/// Writes the status `outcome` gives, if it differs from the one `vc` has.
pub async fn publish(
    vc: &ValkeyCluster,
    ctx: &Context,
    outcome: &Outcome<'_>,
) -> Result<(), Error> {
    let previous = vc.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let next = status::compute(outcome, Some(&previous), vc.metadata.generation, &now);
    let state = next.state.map(|s| format!("{s:?}")).unwrap_or_default();
    ctx.metrics
        .cluster_status(&labels(vc), &state, next.shards, next.ready_shards);
    let write = write(&previous, &next);
    if write == Write::Nothing {
        return Ok(());
    }
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &vc.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": ValkeyCluster::api_version(&()),
        "kind": ValkeyCluster::kind(&()),
        "status": next,
    });
    api.patch_status(
        &vc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.metrics.write("apply", "valkeyclusters/status");
    if let Write::ApplyThenDrop(fields) = write {
        // Apply dropped what was in them; remove the (now empty) fields
        // themselves, as the seed's status shape requires.
        let fields: serde_json::Map<String, serde_json::Value> = fields
            .into_iter()
            .map(|f| (f.to_string(), serde_json::Value::Null))
            .collect();
        let remove = json!({ "status": fields });
        api.patch_status(
            &vc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&remove),
        )
        .await?;
        ctx.metrics.write("patch", "valkeyclusters/status");
    }
    Ok(())
}

/// The per-cluster metrics' labels for `vc`.
pub fn labels(vc: &ValkeyCluster) -> ClusterLabels {
    ClusterLabels {
        namespace: vc.namespace().unwrap_or_default(),
        cluster: vc.name_any(),
    }
}

/// A spec the guest refuses: nothing is applied or deleted; the status and
/// an Event say why, and nothing more happens until the spec changes, or,
/// with `recheck` (a refusal that rests on something the operator does not
/// watch, such as a Secret), until that much time has passed.
pub async fn refuse(
    vc: &ValkeyCluster,
    ctx: &Context,
    violations: &[Violation],
    recheck: Option<Duration>,
) -> Result<Action, Error> {
    let message = violations
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    warn!(%message, "spec refused; nothing applied");
    ctx.metrics.error("InvalidSpec");
    events::warn_once(ctx, vc, "InvalidSpec", "Validate", message.clone()).await;
    publish(vc, ctx, &Outcome::Refused { message }).await?;
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

/// What writing `next` over `previous` takes.
#[derive(Debug, PartialEq, Eq)]
enum Write {
    Nothing,
    Apply,
    /// Server-side apply cannot remove the list or object it stops owning
    /// the contents of: a merge patch drops these fields after the apply.
    ApplyThenDrop(Vec<&'static str>),
}

fn write(previous: &ValkeyClusterStatus, next: &ValkeyClusterStatus) -> Write {
    if previous == next {
        return Write::Nothing;
    }
    let gone = |was: bool, is: bool, field| (was && !is).then_some(field);
    let drop: Vec<&'static str> = [
        gone(
            previous.external_endpoints.is_some(),
            next.external_endpoints.is_some(),
            "externalEndpoints",
        ),
        gone(
            previous.gateway.is_some(),
            next.gateway.is_some(),
            "gateway",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if drop.is_empty() {
        Write::Apply
    } else {
        Write::ApplyThenDrop(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_written_only_when_it_differs() {
        let with = |endpoints: bool, generation: i64| ValkeyClusterStatus {
            external_endpoints: endpoints.then(Vec::new),
            observed_generation: Some(generation),
            ..ValkeyClusterStatus::default()
        };
        let gateway = |endpoints: bool| ValkeyClusterStatus {
            gateway: Some(Default::default()),
            ..with(endpoints, 1)
        };
        for (previous, next, want) in [
            (with(false, 1), with(false, 1), Write::Nothing),
            (with(true, 1), with(true, 1), Write::Nothing),
            (with(false, 1), with(false, 2), Write::Apply),
            (with(false, 1), with(true, 1), Write::Apply),
            (
                with(true, 1),
                with(false, 2),
                Write::ApplyThenDrop(vec!["externalEndpoints"]),
            ),
            (
                gateway(true),
                with(true, 2),
                Write::ApplyThenDrop(vec!["gateway"]),
            ),
            (
                gateway(true),
                with(false, 2),
                Write::ApplyThenDrop(vec!["externalEndpoints", "gateway"]),
            ),
            (with(true, 1), gateway(true), Write::Apply),
        ] {
            assert_eq!(write(&previous, &next), want, "{previous:?} -> {next:?}");
        }
    }
}
