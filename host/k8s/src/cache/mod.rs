//! shardgate's cache of one owned kind, kept from one watch: the entries
//! ([`entry::Slim`]) by namespace and name, and their names by
//! namespace and cluster label, so a reconcile looks at its own cluster's
//! few dozen objects instead of scanning every cached object.
//!
//! It stands in for kube's reflector store, whose entries must implement
//! `kube::Resource` and so carry a 360-byte `ObjectMeta` each, and whose
//! keys hold four strings per object. Here an entry's name is one shared
//! string, used by the entry and both maps, and a namespace is one string
//! for all its entries.
//!
//! The name index only narrows the search: a reconcile still checks
//! ownership (label AND controller UID) before trusting an object.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::runtime::watcher;
use shardgate_contract::labels;
use tokio::sync::watch;

pub mod entry;
pub mod watched;

pub use entry::{
    CachedConfigMap, CachedDisruptionBudget, CachedPod, CachedPort, CachedRoute, CachedService,
    CachedStatefulSet, Entry, PodState, ServiceState, Slim, StatefulSetState,
};

/// The cache of one kind. Clones share it.
pub struct Cache<E> {
    inner: Arc<RwLock<Inner<E>>>,
    /// True once the first list is in.
    ready: Arc<watch::Sender<bool>>,
}

impl<E> Clone for Cache<E> {
    fn clone(&self) -> Self {
        Cache {
            inner: self.inner.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<E> Default for Cache<E> {
    fn default() -> Self {
        Cache {
            inner: Arc::new(RwLock::new(Inner {
                live: Objects::default(),
                relist: None,
            })),
            ready: Arc::new(watch::Sender::new(false)),
        }
    }
}

struct Inner<E> {
    live: Objects<E>,
    /// A re-list in progress: replaces `live` when it is done, so objects
    /// deleted while the watch was down drop out.
    relist: Option<Objects<E>>,
}

type Names = BTreeSet<Arc<str>>;

struct Objects<E> {
    /// namespace -> name -> entry.
    by_name: HashMap<Arc<str>, HashMap<Arc<str>, Arc<E>>>,
    /// namespace -> cluster label -> names.
    by_cluster: HashMap<Arc<str>, HashMap<Box<str>, Names>>,
}

impl<E> Default for Objects<E> {
    fn default() -> Self {
        Objects {
            by_name: HashMap::new(),
            by_cluster: HashMap::new(),
        }
    }
}

impl<E: Entry> Objects<E> {
    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<E>> {
        self.by_name.get(namespace)?.get(name)
    }

    /// The entry held under `entry`'s name, if it equals `entry`.
    fn held(&self, entry: &E) -> Option<Arc<E>> {
        self.get(entry.namespace(), entry.name())
            .filter(|held| ***held == *entry)
            .cloned()
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(names) = self.by_name.get_mut(namespace) else {
            return;
        };
        let Some(old) = names.remove(name) else {
            return;
        };
        if names.is_empty() {
            self.by_name.remove(namespace);
        }
        let Some(cluster) = old.label(labels::CLUSTER) else {
            return;
        };
        let Some(clusters) = self.by_cluster.get_mut(namespace) else {
            return;
        };
        if let Some(names) = clusters.get_mut(cluster) {
            names.remove(name);
            if names.is_empty() {
                clusters.remove(cluster);
            }
        }
        if clusters.is_empty() {
            self.by_cluster.remove(namespace);
        }
    }

    /// Puts `entry` in, replacing any entry of its name; returns it.
    fn insert(&mut self, mut entry: E) -> Arc<E> {
        self.remove(entry.namespace(), entry.name());
        let known = self.by_name.get_key_value(entry.namespace());
        let known = known.map(|(namespace, _)| namespace.clone());
        let (name, namespace) = entry.shared_names();
        if let Some(known) = known {
            *namespace = known;
        }
        let (name, namespace) = (name.clone(), namespace.clone());
        if let Some(cluster) = entry.label(labels::CLUSTER) {
            self.by_cluster
                .entry(namespace.clone())
                .or_default()
                .entry(cluster.into())
                .or_default()
                .insert(name.clone());
        }
        let entry = Arc::new(entry);
        self.by_name
            .entry(namespace)
            .or_default()
            .insert(name, entry.clone());
        entry
    }
}

impl<E: Entry> Cache<E> {
    /// The cache of a kind the API server does not serve: empty, and
    /// ready (there is nothing to list).
    pub fn unserved() -> Self {
        let cache = Cache::default();
        cache.ready.send_replace(true);
        cache
    }

    /// Follows one watch event, consuming it. Returns the entry it touched
    /// (applied, deleted or re-listed), to trigger reconciles from, and
    /// whether it changed anything a reconcile reads: an object that reads
    /// the same as the entry already cached (only fields no reconcile
    /// reads changed, such as a StatefulSet's replica counts or a Pod's
    /// start time) leaves that entry in place.
    pub fn apply(&self, event: watcher::Event<E>) -> Option<(Arc<E>, bool)> {
        let mut inner = self.inner.write().unwrap();
        match event {
            watcher::Event::Apply(e) => Some(match inner.live.held(&e) {
                Some(held) => (held, false),
                None => (inner.live.insert(e), true),
            }),
            watcher::Event::Delete(e) => {
                inner.live.remove(e.namespace(), e.name());
                Some((Arc::new(e), true))
            }
            watcher::Event::Init => {
                inner.relist = Some(Objects::default());
                None
            }
            watcher::Event::InitApply(e) => {
                let changed = inner.live.held(&e).is_none();
                let entry = inner.relist.get_or_insert_with(Objects::default).insert(e);
                Some((entry, changed))
            }
            watcher::Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    inner.live = relist;
                }
                drop(inner);
                self.ready.send_replace(true);
                None
            }
        }
    }

    /// The entry named `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<E>> {
        self.inner
            .read()
            .unwrap()
            .live
            .get(namespace, name)
            .cloned()
    }

    /// The entries labelled for `cluster` in `namespace` (ownership is for
    /// the caller to check).
    pub fn labelled(&self, namespace: &str, cluster: &str) -> Vec<Arc<E>> {
        let inner = self.inner.read().unwrap();
        let objects = &inner.live;
        objects
            .by_cluster
            .get(namespace)
            .and_then(|clusters| clusters.get(cluster))
            .into_iter()
            .flatten()
            .filter_map(|name| objects.get(namespace, name).cloned())
            .collect()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        let inner = self.inner.read().unwrap();
        inner.live.by_name.values().map(HashMap::len).sum()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the first list is in.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = ready.wait_for(|r| *r).await;
    }
}

#[cfg(test)]
mod tests {
    use super::Cache;
    use crate::cache::entry::{self as cached, CachedService, Entry};
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;
    use shardgate_contract::labels;

    fn svc(namespace: &str, name: &str, cluster: Option<&str>) -> CachedService {
        cached::service(
            super::watched::Watched::of(&Service {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    labels: cluster.map(|c| [(labels::CLUSTER.to_string(), c.to_string())].into()),
                    ..ObjectMeta::default()
                },
                ..Service::default()
            }),
            None,
        )
    }

    fn names(cache: &Cache<CachedService>, namespace: &str, cluster: &str) -> Vec<String> {
        cache
            .labelled(namespace, cluster)
            .iter()
            .map(|e| e.name().to_string())
            .collect()
    }

    #[test]
    fn objects_are_found_by_name_and_by_namespace_and_cluster_label() {
        let cache = Cache::default();
        cache.apply(Event::Apply(svc("a", "x-0", Some("x"))));
        cache.apply(Event::Apply(svc("a", "x-1", Some("x"))));
        cache.apply(Event::Apply(svc("b", "x-0", Some("x"))));
        cache.apply(Event::Apply(svc("a", "y-0", Some("y"))));
        cache.apply(Event::Apply(svc("a", "unlabelled", None)));
        assert_eq!(names(&cache, "a", "x"), ["x-0", "x-1"]);
        assert_eq!(names(&cache, "b", "x"), ["x-0"]);
        assert_eq!(names(&cache, "a", "y"), ["y-0"]);
        assert!(names(&cache, "a", "z").is_empty());
        assert_eq!(cache.get("a", "unlabelled").unwrap().name(), "unlabelled");
        assert!(cache.get("b", "unlabelled").is_none());
        assert_eq!(cache.len(), 5);
        let (x0, x1) = (
            cache.get("a", "x-0").unwrap(),
            cache.get("a", "x-1").unwrap(),
        );
        assert!(
            std::sync::Arc::ptr_eq(&x0.namespace, &x1.namespace),
            "one string per namespace"
        );
    }

    #[test]
    fn deletes_and_relabels_move_objects() {
        let cache = Cache::default();
        cache.apply(Event::Apply(svc("a", "o", Some("x"))));
        cache.apply(Event::Apply(svc("a", "o", Some("y"))));
        assert!(names(&cache, "a", "x").is_empty(), "relabelled away");
        assert_eq!(names(&cache, "a", "y"), ["o"]);
        cache.apply(Event::Apply(svc("a", "o", None)));
        assert!(names(&cache, "a", "y").is_empty(), "label removed");
        assert!(cache.get("a", "o").is_some());
        cache.apply(Event::Apply(svc("a", "o", Some("y"))));
        let (touched, changed) = cache
            .apply(Event::Delete(svc("a", "o", Some("y"))))
            .unwrap();
        assert_eq!(touched.name(), "o", "a delete touches the object");
        assert!(changed);
        assert!(names(&cache, "a", "y").is_empty(), "deleted");
        assert!(cache.get("a", "o").is_none());
        // Removed from where it was indexed, whatever its last state says.
        cache.apply(Event::Apply(svc("a", "p", Some("x"))));
        cache.apply(Event::Delete(svc("a", "p", None)));
        assert!(names(&cache, "a", "x").is_empty(), "deleted unlabelled");
        assert!(cache.is_empty());
    }

    #[test]
    fn an_object_that_reads_the_same_changes_nothing() {
        let cache = Cache::default();
        let changed = |event| cache.apply(event).map(|(_, changed)| changed);
        assert_eq!(changed(Event::Apply(svc("a", "o", Some("x")))), Some(true));
        let held = cache.get("a", "o").unwrap();
        // The same again (say, only its resourceVersion or a field no
        // reconcile reads moved on): the entry cached stays.
        assert_eq!(changed(Event::Apply(svc("a", "o", Some("x")))), Some(false));
        assert!(std::sync::Arc::ptr_eq(&held, &cache.get("a", "o").unwrap()));
        assert_eq!(changed(Event::Apply(svc("a", "o", Some("y")))), Some(true));
        assert_eq!(names(&cache, "a", "y"), ["o"]);
        // A relist tells what differs from what was held.
        assert_eq!(changed(Event::Init), None);
        assert_eq!(
            changed(Event::InitApply(svc("a", "o", Some("y")))),
            Some(false)
        );
        assert_eq!(
            changed(Event::InitApply(svc("a", "p", Some("y")))),
            Some(true)
        );
        assert_eq!(changed(Event::InitDone), None);
        assert_eq!(changed(Event::Delete(svc("a", "o", Some("y")))), Some(true));
    }

    #[test]
    fn a_relist_drops_what_was_deleted_while_the_watch_was_down() {
        let cache = Cache::default();
        assert!(!cache.is_ready());
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(svc("a", "gone", Some("x"))));
        cache.apply(Event::InitApply(svc("a", "kept", Some("x"))));
        assert!(!cache.is_ready(), "not ready before the first list is in");
        assert!(names(&cache, "a", "x").is_empty());
        cache.apply(Event::InitDone);
        assert!(cache.is_ready());
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(svc("a", "kept", Some("z"))));
        // Until the relist is done, the old view serves.
        assert_eq!(names(&cache, "a", "x"), ["gone", "kept"]);
        cache.apply(Event::InitDone);
        assert!(names(&cache, "a", "x").is_empty());
        assert!(cache.get("a", "gone").is_none());
        assert_eq!(names(&cache, "a", "z"), ["kept"]);
        cache.apply(Event::Apply(svc("a", "kept", Some("x"))));
        assert!(names(&cache, "a", "z").is_empty());
        assert_eq!(names(&cache, "a", "x"), ["kept"]);
    }

    #[tokio::test]
    async fn waiting_ends_when_the_first_list_is_in() {
        let cache: Cache<CachedService> = Cache::default();
        let waiting = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_until_ready().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("ready")
            .unwrap();
    }
}
