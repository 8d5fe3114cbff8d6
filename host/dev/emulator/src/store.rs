//! Object storage with one global resourceVersion counter and a bounded
//! history of change events for watches.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

/// `(resource key, namespace or "", name)`.
pub(crate) type ObjKey = (String, String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub(crate) struct WatchEvent {
    pub rv: u64,
    pub res_key: String,
    pub etype: EventType,
    /// Shared with the store (and the next event's `prev`): a write costs
    /// no copy of the object.
    pub object: Arc<Value>,
    /// The object before the change (for selector transitions).
    pub prev: Option<Arc<Value>>,
}

/// What open watch streams are told.
#[derive(Clone, Debug)]
pub(crate) enum Notice {
    Event(Arc<WatchEvent>),
    /// Send a BOOKMARK now; all events up to this rv were already sent.
    Bookmark(u64),
    /// Close every watch connection abruptly.
    DropAll,
}

pub(crate) struct Store {
    objects: BTreeMap<ObjKey, Arc<Value>>,
    /// Each stored object's key by its `metadata.uid`.
    by_uid: HashMap<String, ObjKey>,
    /// The keys of the objects naming each uid in an `ownerReference`: the
    /// garbage collector's graph, as kube-controller-manager keeps one, so
    /// a delete costs its dependents, not a walk of the whole store.
    dependents: HashMap<String, BTreeSet<ObjKey>>,
    rv: u64,
    history: VecDeque<Arc<WatchEvent>>,
    history_limit: usize,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    pub tx: broadcast::Sender<Notice>,
    /// Change events emitted per resource key since the last reset: what
    /// every watch of that resource is sent (before its own filtering).
    pub emitted: BTreeMap<String, u64>,
}

pub(crate) fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Store {
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(16 * 1024);
        Self {
            objects: BTreeMap::new(),
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            rv: 1,
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            tx,
            emitted: BTreeMap::new(),
        }
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The stored object; clone the `Arc` to hold it past a write.
    pub fn get(&self, key: &ObjKey) -> Option<&Arc<Value>> {
        self.objects.get(key)
    }

    /// Objects of one resource, optionally in one namespace, ordered by
    /// namespace then name.
    /// Costs the objects returned, not the whole store: keys sort by
    /// resource, then namespace, so the wanted ones are one range.
    pub fn list(&self, res_key: &str, ns: Option<&str>) -> Vec<&Value> {
        self.range(res_key, ns, None).map(|o| o.as_ref()).collect()
    }

    /// [`Store::list`] as an iterator, from just after `(namespace, name)`
    /// if given: a list page starts where the previous one ended, without
    /// walking the objects before it.
    pub fn list_after<'s>(
        &'s self,
        res_key: &str,
        ns: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = &'s Value> + use<'s> {
        self.range(res_key, ns, after).map(|o| o.as_ref())
    }

    /// [`Store::list`], holding the objects past later writes.
    pub fn list_shared(&self, res_key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        self.range(res_key, ns, None).cloned().collect()
    }

    /// One kind's objects (in one namespace, or all), in key order, from
    /// just after `after` if given.
    fn range<'s>(
        &'s self,
        res_key: &str,
        ns: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = &'s Arc<Value>> + use<'s> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let first_of_namespace = (
            res_key.to_string(),
            ns.unwrap_or_default().to_string(),
            String::new(),
        );
        let start = match after {
            // A token sorting before this namespace (another list's) starts
            // at the namespace, as if there were none.
            Some((a_ns, a_name)) if ns.is_none_or(|ns| a_ns >= ns) => {
                Excluded((res_key.to_string(), a_ns.to_string(), a_name.to_string()))
            }
            _ => Included(first_of_namespace),
        };
        let (res_key, ns) = (res_key.to_string(), ns.map(str::to_string));
        self.objects
            .range((start, Unbounded))
            .take_while(move |((r, n, _), _)| *r == res_key && ns.as_ref().is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
    }

    /// Whether an object with this `metadata.uid` is stored.
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// The keys of the objects with an `ownerReference` to `uid`, in key
    /// order.
    pub fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        self.dependents
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Adds (or, with `add` false, drops) `obj` under `key` in the uid and
    /// owner indexes.
    fn index(&mut self, key: &ObjKey, obj: &Value, add: bool) {
        let meta = &obj["metadata"];
        if let Some(uid) = meta["uid"].as_str() {
            if add {
                self.by_uid.insert(uid.to_string(), key.clone());
            } else if self.by_uid.get(uid) == Some(key) {
                self.by_uid.remove(uid);
            }
        }
        let owners = meta["ownerReferences"].as_array().into_iter().flatten();
        for owner in owners.filter_map(|r| r["uid"].as_str()) {
            if add {
                self.dependents
                    .entry(owner.to_string())
                    .or_default()
                    .insert(key.clone());
            } else if let Some(keys) = self.dependents.get_mut(owner) {
                keys.remove(key);
                if keys.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    pub fn keys_where(&self, mut f: impl FnMut(&ObjKey, &Value) -> bool) -> Vec<ObjKey> {
        self.objects
            .iter()
            .filter(|(k, v)| f(k, v))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stores `obj` under a fresh resourceVersion and emits ADDED/MODIFIED.
    pub fn put(&mut self, key: ObjKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        set_rv(&mut obj, self.rv);
        let obj = Arc::new(obj);
        let prev = self.objects.insert(key.clone(), obj.clone());
        if let Some(prev) = &prev {
            self.index(&key, prev, false);
        }
        self.index(&key, &obj, true);
        let etype = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.emit(key.0, etype, obj.clone(), prev);
        obj
    }

    /// Removes an object, emitting DELETED with a fresh resourceVersion.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let obj = self.objects.remove(key)?;
        self.index(key, &obj, false);
        let mut obj = Arc::unwrap_or_clone(obj);
        self.rv += 1;
        set_rv(&mut obj, self.rv);
        let obj = Arc::new(obj);
        self.emit(key.0.clone(), EventType::Deleted, obj.clone(), None);
        Some(obj)
    }

    fn emit(
        &mut self,
        res_key: String,
        etype: EventType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        *self.emitted.entry(res_key.clone()).or_default() += 1;
        let ev = Arc::new(WatchEvent {
            rv: self.rv,
            res_key,
            etype,
            object,
            prev,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.tx.send(Notice::Event(ev));
    }

    /// Forgets all history: watches from any resourceVersion older than the
    /// current one get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Events after `rv`, or `None` if that history was compacted away.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<WatchEvent>>> {
        if rv < self.compacted {
            return None;
        }
        // History is in resourceVersion order.
        let first = self.history.partition_point(|e| e.rv <= rv);
        Some(self.history.range(first..).cloned().collect())
    }
}
