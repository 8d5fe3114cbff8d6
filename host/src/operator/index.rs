//! Which objects each cluster has: a secondary index beside each reflector
//! store, kept from the same watch events, so a reconcile looks at its own
//! cluster's few dozen objects instead of scanning every cached object.
//! (Scanning made a cold start with 1,000 clusters quadratic.)
//!
//! Keys are `(namespace, value of the cluster label)`; values the object
//! names. The index only narrows the search: a reconcile still reads each
//! object from the store and checks ownership (label AND controller UID)
//! before trusting it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher;
use shardgate_guest::names::LABEL_CLUSTER;

use crate::convert::Labelled;

type Key = (String, String);

/// Object names by `(namespace, cluster label)`, for one kind.
#[derive(Clone, Default)]
pub struct ByCluster {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    live: Maps,
    /// A re-list in progress: replaces `live` when it is done, so objects
    /// deleted while the watch was down drop out.
    relist: Option<Maps>,
}

#[derive(Default)]
struct Maps {
    names: HashMap<Key, BTreeSet<String>>,
    /// `(namespace, name)` -> its key, so a relabelled object moves.
    keys: HashMap<(String, String), Key>,
}

impl Maps {
    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(k) = self.keys.remove(&(namespace.to_string(), name.to_string())) else {
            return;
        };
        if let Some(names) = self.names.get_mut(&k) {
            names.remove(name);
            if names.is_empty() {
                self.names.remove(&k);
            }
        }
    }

    fn put<K: kube::Resource + Labelled>(&mut self, o: &K) {
        let (Some(namespace), name) = (o.namespace(), o.name_any()) else {
            return;
        };
        self.remove(&namespace, &name);
        if let Some(cluster) = o.label(LABEL_CLUSTER) {
            let k = (namespace.clone(), cluster.to_string());
            self.names
                .entry(k.clone())
                .or_default()
                .insert(name.clone());
            self.keys.insert((namespace, name), k);
        }
    }
}

impl ByCluster {
    /// Follows one watch event (call it for every event the store sees).
    pub fn apply<K: kube::Resource + Labelled>(&self, event: &watcher::Event<K>) {
        let mut inner = self.inner.write().unwrap();
        match event {
            watcher::Event::Apply(o) => inner.live.put(o),
            watcher::Event::Delete(o) => {
                if let Some(namespace) = o.namespace() {
                    inner.live.remove(&namespace, &o.name_any());
                }
            }
            watcher::Event::Init => inner.relist = Some(Maps::default()),
            watcher::Event::InitApply(o) => {
                if let Some(relist) = inner.relist.as_mut() {
                    relist.put(o);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    inner.live = relist;
                }
            }
        }
    }

    /// The names labelled for `cluster` in `namespace`.
    pub fn names(&self, namespace: &str, cluster: &str) -> Vec<String> {
        let inner = self.inner.read().unwrap();
        inner
            .live
            .names
            .get(&(namespace.to_string(), cluster.to_string()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A reflector store with its by-cluster index.
#[derive(Clone)]
pub struct Indexed<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    pub store: kube::runtime::reflector::Store<K>,
    pub index: ByCluster,
}

impl<K> Indexed<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    /// The cached objects labelled for `cluster` in `namespace` (ownership
    /// is for the caller to check).
    pub fn labelled(&self, namespace: &str, cluster: &str) -> Vec<Arc<K>> {
        self.index
            .names(namespace, cluster)
            .into_iter()
            .filter_map(|name| {
                self.store
                    .get(&kube::runtime::reflector::ObjectRef::new(&name).within(namespace))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::ByCluster;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;
    use shardgate_guest::names::LABEL_CLUSTER;

    fn svc(namespace: &str, name: &str, cluster: Option<&str>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: cluster.map(|c| [(LABEL_CLUSTER.to_string(), c.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    #[test]
    fn objects_are_found_by_namespace_and_cluster_label() {
        let index = ByCluster::default();
        index.apply(&Event::Apply(svc("a", "x-0", Some("x"))));
        index.apply(&Event::Apply(svc("a", "x-1", Some("x"))));
        index.apply(&Event::Apply(svc("b", "x-0", Some("x"))));
        index.apply(&Event::Apply(svc("a", "y-0", Some("y"))));
        index.apply(&Event::Apply(svc("a", "unlabelled", None)));
        assert_eq!(index.names("a", "x"), ["x-0", "x-1"]);
        assert_eq!(index.names("b", "x"), ["x-0"]);
        assert_eq!(index.names("a", "y"), ["y-0"]);
        assert!(index.names("a", "z").is_empty());
    }

    #[test]
    fn deletes_and_relabels_move_objects() {
        let index = ByCluster::default();
        index.apply(&Event::Apply(svc("a", "o", Some("x"))));
        index.apply(&Event::Apply(svc("a", "o", Some("y"))));
        assert!(index.names("a", "x").is_empty(), "relabelled away");
        assert_eq!(index.names("a", "y"), ["o"]);
        index.apply(&Event::Apply(svc("a", "o", None)));
        assert!(index.names("a", "y").is_empty(), "label removed");
        index.apply(&Event::Apply(svc("a", "o", Some("y"))));
        index.apply(&Event::Delete(svc("a", "o", Some("y"))));
        assert!(index.names("a", "y").is_empty(), "deleted");
    }

    #[test]
    fn a_relist_drops_what_was_deleted_while_the_watch_was_down() {
        let index = ByCluster::default();
        index.apply(&Event::Apply(svc("a", "gone", Some("x"))));
        index.apply(&Event::Apply(svc("a", "kept", Some("x"))));
        index.apply(&Event::<Service>::Init);
        index.apply(&Event::InitApply(svc("a", "kept", Some("x"))));
        // Until the relist is done, the old view serves.
        assert_eq!(index.names("a", "x"), ["gone", "kept"]);
        index.apply(&Event::<Service>::InitDone);
        assert_eq!(index.names("a", "x"), ["kept"]);
    }
}
