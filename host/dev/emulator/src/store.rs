//! Object storage with one global resourceVersion counter and a bounded
//! history of change events for watches.

use std::collections::{BTreeMap, VecDeque};
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
        let mut obj = Arc::unwrap_or_clone(self.objects.remove(key)?);
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
