//! Pruning that only ever deletes what this cluster owns.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Resource;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::core::NamespaceResourceScope;
use shardgate_contract::labels;

use crate::apply::Recent;
use crate::cache::Entry;

/// Deletes every object of `owned` (what the cluster owns in `namespace`,
/// see [`owned_by`], as cached) that is not in `keep`, and forgets what
/// `recent` held of it. Returns the names deleted.
pub async fn prune<K, C: Entry>(
    client: &kube::Client,
    recent: &Recent,
    owned: &[Arc<C>],
    namespace: &str,
    keep: &BTreeSet<String>,
) -> kube::Result<Vec<String>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    let resource = ApiResource::erase::<K>(&());
    prune_resource(client, recent, &resource, owned, namespace, keep).await
}

/// [`prune`] for a kind known only at run time (the Gateway API's routes).
pub async fn prune_resource<C: Entry>(
    client: &kube::Client,
    recent: &Recent,
    resource: &ApiResource,
    owned: &[Arc<C>],
    namespace: &str,
    keep: &BTreeSet<String>,
) -> kube::Result<Vec<String>> {
    let doomed = owned.iter().filter(|o| !keep.contains(o.name()));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let mut deleted = Vec::new();
    for o in doomed {
        let name = o.name().to_string();
        let params = DeleteParams {
            preconditions: o.uid().map(|uid| kube::api::Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let deleted_now = match api.delete(&name, &params).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 => false,
            Err(e) => return Err(e),
        };
        recent.forget(&Recent::key(resource, namespace, &name));
        if deleted_now {
            deleted.push(name);
        }
    }
    Ok(deleted)
}

/// Labelled as the cluster's AND controlled by the cluster's UID: anything
/// else is never touched (upstream W16).
pub fn owned_by(o: &impl Entry, cluster: &str, uid: &str) -> bool {
    o.label(labels::CLUSTER) == Some(cluster) && o.controller_uid() == Some(uid)
}
