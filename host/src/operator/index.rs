//! Which objects each cluster has: a secondary index beside each reflector
//! store, kept from the same watch events, so a reconcile looks at its own
//! cluster's few dozen objects instead of scanning every cached object.
//! (Scanning made a cold start with 1,000 clusters quadratic.)
//!
//! Keys are `(namespace, value of the cluster label)`; values the object
//! names. The index only narrows the search: a reconcile still reads each
//! object from the store and checks ownership (label AND controller UID)
//! before trusting it.
//!
//! Where an object was indexed before an event is read from the reflector
//! store, which the index is updated ahead of: the index holds each name
//! once and nothing else per object.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
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
    live: Names,
    /// A re-list in progress: replaces `live` when it is done, so objects
    /// deleted while the watch was down drop out.
    relist: Option<Names>,
}

#[derive(Default)]
struct Names(HashMap<Key, BTreeSet<Box<str>>>);

impl Names {
    fn remove(&mut self, namespace: &str, cluster: &str, name: &str) {
        let key = (namespace.to_string(), cluster.to_string());
        if let Some(names) = self.0.get_mut(&key) {
            names.remove(name);
            if names.is_empty() {
                self.0.remove(&key);
            }
        }
    }

    fn put(&mut self, namespace: &str, cluster: &str, name: &str) {
        self.0
            .entry((namespace.to_string(), cluster.to_string()))
            .or_default()
            .insert(name.into());
    }
}

/// An object's namespace, cluster label and name, if it has all three.
fn place<K: kube::Resource + Labelled>(o: &K) -> Option<(String, &str, String)> {
    Some((o.namespace()?, o.label(LABEL_CLUSTER)?, o.name_any()))
}

impl ByCluster {
    /// Follows one watch event. Call it for every event, before `store`
    /// (the store this index is for) sees it: the store still holds where
    /// the object was indexed.
    pub fn apply<K>(&self, event: &watcher::Event<K>, store: &Store<K>)
    where
        K: kube::Resource<DynamicType = ()> + Labelled + Clone,
    {
        let mut inner = self.inner.write().unwrap();
        let was = |o: &K| store.get(&ObjectRef::from_obj(o));
        match event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                if let Some((namespace, cluster, name)) = was(o).as_deref().and_then(place) {
                    inner.live.remove(&namespace, cluster, &name);
                }
                if let watcher::Event::Apply(o) = event
                    && let Some((namespace, cluster, name)) = place(o)
                {
                    inner.live.put(&namespace, cluster, &name);
                }
            }
            watcher::Event::Init => inner.relist = Some(Names::default()),
            watcher::Event::InitApply(o) => {
                if let (Some(relist), Some((namespace, cluster, name))) =
                    (inner.relist.as_mut(), place(o))
                {
                    relist.put(&namespace, cluster, &name);
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
            .0
            .get(&(namespace.to_string(), cluster.to_string()))
            .map(|names| names.iter().map(|n| n.to_string()).collect())
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
    use kube::runtime::reflector::{self, Store, store::Writer};
    use kube::runtime::watcher::Event;
    use shardgate_guest::names::LABEL_CLUSTER;

    /// An index and its store, fed as the operator feeds them: the index
    /// first.
    struct Fed {
        index: ByCluster,
        store: Store<Service>,
        writer: Writer<Service>,
    }

    impl Fed {
        fn new() -> Self {
            let (store, writer) = reflector::store();
            Fed {
                index: ByCluster::default(),
                store,
                writer,
            }
        }

        fn apply(&mut self, event: Event<Service>) {
            self.index.apply(&event, &self.store);
            self.writer.apply_watcher_event(&event);
        }
    }

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
        let mut fed = Fed::new();
        let index = fed.index.clone();
        fed.apply(Event::Apply(svc("a", "x-0", Some("x"))));
        fed.apply(Event::Apply(svc("a", "x-1", Some("x"))));
        fed.apply(Event::Apply(svc("b", "x-0", Some("x"))));
        fed.apply(Event::Apply(svc("a", "y-0", Some("y"))));
        fed.apply(Event::Apply(svc("a", "unlabelled", None)));
        assert_eq!(index.names("a", "x"), ["x-0", "x-1"]);
        assert_eq!(index.names("b", "x"), ["x-0"]);
        assert_eq!(index.names("a", "y"), ["y-0"]);
        assert!(index.names("a", "z").is_empty());
    }

    #[test]
    fn deletes_and_relabels_move_objects() {
        let mut fed = Fed::new();
        let index = fed.index.clone();
        fed.apply(Event::Apply(svc("a", "o", Some("x"))));
        fed.apply(Event::Apply(svc("a", "o", Some("y"))));
        assert!(index.names("a", "x").is_empty(), "relabelled away");
        assert_eq!(index.names("a", "y"), ["o"]);
        fed.apply(Event::Apply(svc("a", "o", None)));
        assert!(index.names("a", "y").is_empty(), "label removed");
        fed.apply(Event::Apply(svc("a", "o", Some("y"))));
        fed.apply(Event::Delete(svc("a", "o", Some("y"))));
        assert!(index.names("a", "y").is_empty(), "deleted");
        // Removed from where it was indexed, whatever its last state says.
        fed.apply(Event::Apply(svc("a", "p", Some("x"))));
        fed.apply(Event::Delete(svc("a", "p", None)));
        assert!(index.names("a", "x").is_empty(), "deleted unlabelled");
    }

    #[test]
    fn a_relist_drops_what_was_deleted_while_the_watch_was_down() {
        let mut fed = Fed::new();
        let index = fed.index.clone();
        fed.apply(Event::Apply(svc("a", "gone", Some("x"))));
        fed.apply(Event::Apply(svc("a", "kept", Some("x"))));
        fed.apply(Event::<Service>::Init);
        fed.apply(Event::InitApply(svc("a", "kept", Some("x"))));
        // Until the relist is done, the old view serves.
        assert_eq!(index.names("a", "x"), ["gone", "kept"]);
        fed.apply(Event::<Service>::InitDone);
        assert_eq!(index.names("a", "x"), ["kept"]);
        // Relabelled while the watch was down, then again after the relist.
        fed.apply(Event::<Service>::Init);
        fed.apply(Event::InitApply(svc("a", "kept", Some("z"))));
        fed.apply(Event::<Service>::InitDone);
        assert_eq!(index.names("a", "z"), ["kept"]);
        fed.apply(Event::Apply(svc("a", "kept", Some("x"))));
        assert!(index.names("a", "z").is_empty());
        assert_eq!(index.names("a", "x"), ["kept"]);
    }
}
