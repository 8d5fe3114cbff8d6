//! What shardgate owns of a live object, read from its managed fields, as a
//! digest small enough to cache instead of the object.
//!
//! Server-side apply records, per field manager, the fields that manager
//! applied (`metadata.managedFields[].fieldsV1`). A field another manager
//! changes leaves shardgate's set (its new owner takes it), and a removed
//! field leaves every set. So the live object projected onto shardgate's
//! set holds exactly what shardgate applied, unless something changed or
//! removed one of those fields. [`digest_of_entry_reusing`] digests that
//! projection when an object is cached; [`digest`] digests the desired
//! object the same way; the two are equal when the object is in place.
//!
//! Both sides are digested in one canonical form: sorted keys, compact JSON,
//! nulls and empty objects and lists left out (an API server drops empty
//! maps it was sent), and the identity fields (`apiVersion`, `kind`,
//! `metadata.name`, `metadata.namespace`) left out, since the cache is keyed
//! by them and managed fields never list them.
//!
//! A field whose whole value is owned (a scalar, an atomic list or struct)
//! is projected whole: if the API server defaults something inside an
//! atomic struct, the digests differ although nothing drifted. The operator
//! then re-applies once and accepts what its own apply left (see
//! `apply::Recent`), so such a case costs one no-op apply, not a loop.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::manager::FIELD_MANAGER;

/// The digest of the fields shardgate applied to a live object, from
/// shardgate's apply entry in its managed fields: `fields` (its `fieldsV1`,
/// as JSON text) and `time`; with the key of that entry. `live` gives the
/// object as JSON, with at least the top-level fields `fields` names, and
/// is called only when `reuse` has no digest for the entry's key.
///
/// `reuse` may answer, for that key, the digest an earlier version of the
/// object had, which is then taken without projecting the object again.
/// That holds while the applied hash is the same too (the caller checks):
/// a field shardgate owns whose value someone else changes or removes
/// leaves shardgate's entry (the new owner takes it), and shardgate's own
/// apply of new values gives a new hash. So an object whose only change
/// since is its status, or fields shardgate does not own, keeps its digest.
pub fn digest_of_entry_reusing(
    time: Option<i64>,
    fields: &str,
    live: impl FnOnce(&dyn Fn(&str) -> bool) -> Value,
    reuse: impl FnOnce(&str) -> Option<String>,
) -> Option<(String, String)> {
    let mut hasher = Sha256::new();
    hasher.update(time.unwrap_or_default().to_le_bytes());
    hasher.update(fields.as_bytes());
    let key = hex(&hasher.finalize()[..8]);
    if let Some(digest) = reuse(&key) {
        return Some((digest, key));
    }
    let fields: Value = serde_json::from_str(fields).ok()?;
    let fields = fields.as_object()?;
    let live = live(&|name| fields.contains_key(&format!("f:{name}")));
    Some((projected_digest(&live, fields), key))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of the fields shardgate applied to an object as JSON (an API
/// server's answer); `None` without shardgate's apply entry.
pub fn live_digest_of_json(o: &Value) -> Option<String> {
    let fields = o
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| {
            applied_by_shardgate(
                e["manager"].as_str(),
                e["operation"].as_str(),
                e["subresource"].as_str(),
            )
        })?
        .get("fieldsV1")?
        .as_object()?;
    Some(projected_digest(o, fields))
}

fn applied_by_shardgate(manager: Option<&str>, operation: Option<&str>, sub: Option<&str>) -> bool {
    manager == Some(FIELD_MANAGER) && operation == Some("Apply") && sub.unwrap_or("").is_empty()
}

/// The first 16 bytes of the SHA-256 of `v`'s canonical form, in hex.
pub fn digest(v: &Value) -> String {
    let canonical = Canonical {
        value: v,
        at: Level::Root,
    };
    sha256_hex(&canonical, 16)
}

/// The digest of `live` projected onto `fields`: equal to [`digest`] of the
/// projection.
fn projected_digest(live: &Value, fields: &Map<String, Value>) -> String {
    let projected = Projected {
        live,
        fields: Some(fields),
        at: Level::Root,
    };
    sha256_hex(&projected, 16)
}

/// The first `bytes` bytes of the SHA-256 of `v`'s compact JSON, in hex.
/// The JSON is streamed into the hasher, not collected first.
pub(crate) fn sha256_hex(v: &impl Serialize, bytes: usize) -> String {
    let mut hasher = Sha256::new();
    v.serialize(&mut serde_json::Serializer::new(&mut hasher))
        .expect("JSON serializes");
    hex(&hasher.finalize()[..bytes])
}

/// The owned part of `live`: `fields` in the `fieldsV1` form (`f:<name>` a
/// field, `k:<json>` a list item by its key fields, `v:<json>` a set item,
/// `i:<n>` a list item by index, `.` the node itself); `None`, or a node
/// with no children in the set, is owned whole. Streamed in the canonical
/// form: the projection is never built.
struct Projected<'a> {
    live: &'a Value,
    fields: Option<&'a Map<String, Value>>,
    at: Level,
}

impl<'a> Projected<'a> {
    /// The owned children of an object node: `None` if it is owned whole.
    fn owned_children(&self) -> Option<impl Iterator<Item = (&'a String, &'a Value)>> {
        let fields = self.fields?;
        let mut children = fields.iter().filter(|(k, _)| k.as_str() != ".").peekable();
        children.peek()?;
        Some(children)
    }

    /// The owned fields of an object, by name, with their sub-sets.
    fn object_fields(
        &self,
        m: &'a Map<String, Value>,
        children: impl Iterator<Item = (&'a String, &'a Value)>,
    ) -> impl Iterator<Item = (&'a String, Projected<'a>)> {
        let at = self.at;
        children.filter_map(move |(k, sub)| {
            let name = k.strip_prefix("f:")?;
            let (name, live) = m.get_key_value(name)?;
            let identity = match at {
                Level::Root => name == "apiVersion" || name == "kind",
                Level::Metadata => name == "name" || name == "namespace",
                Level::Inner => false,
            };
            let inner = if at == Level::Root && name == "metadata" {
                Level::Metadata
            } else {
                Level::Inner
            };
            let child = Projected {
                live,
                fields: sub.as_object(),
                at: inner,
            };
            (!identity && !child.blank()).then_some((name, child))
        })
    }

    /// The owned items of a list, in the list's order.
    fn list_items(
        items: &'a [Value],
        children: impl Iterator<Item = (&'a String, &'a Value)>,
    ) -> impl Iterator<Item = Projected<'a>> {
        let selectors: Vec<(Selector, Option<&'a Map<String, Value>>)> = children
            .filter_map(|(k, sub)| Some((Selector::parse(k)?, sub.as_object())))
            .collect();
        items.iter().enumerate().filter_map(move |(i, item)| {
            let (_, fields) = selectors.iter().find(|(s, _)| s.selects(i, item))?;
            Some(Projected {
                live: item,
                fields: *fields,
                at: Level::Inner,
            })
        })
    }

    fn blank(&self) -> bool {
        let Some(children) = self.owned_children() else {
            return blank(self.live);
        };
        match self.live {
            Value::Object(m) => self.object_fields(m, children).next().is_none(),
            Value::Array(items) => Self::list_items(items, children).next().is_none(),
            scalar => blank(scalar),
        }
    }
}

impl Serialize for Projected<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(children) = self.owned_children() else {
            return Canonical {
                value: self.live,
                at: self.at,
            }
            .serialize(s);
        };
        match self.live {
            Value::Object(m) => {
                let mut map = s.serialize_map(None)?;
                for (name, child) in self.object_fields(m, children) {
                    map.serialize_entry(name, &child)?;
                }
                map.end()
            }
            Value::Array(items) => s.collect_seq(Self::list_items(items, children)),
            scalar => scalar.serialize(s),
        }
    }
}

/// How `fieldsV1` names a list item.
enum Selector {
    Key(Map<String, Value>),
    Value(Value),
    Index(usize),
}

impl Selector {
    fn parse(k: &str) -> Option<Selector> {
        if let Some(key) = k.strip_prefix("k:") {
            match serde_json::from_str(key).ok()? {
                Value::Object(m) => Some(Selector::Key(m)),
                _ => None,
            }
        } else if let Some(v) = k.strip_prefix("v:") {
            serde_json::from_str(v).ok().map(Selector::Value)
        } else {
            k.strip_prefix("i:")?.parse().ok().map(Selector::Index)
        }
    }

    fn selects(&self, index: usize, item: &Value) -> bool {
        match self {
            Selector::Key(key) => key.iter().all(|(f, v)| item.get(f) == Some(v)),
            Selector::Value(v) => item == v,
            Selector::Index(i) => *i == index,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
    Inner,
}

/// `value` in the canonical form, streamed (nothing is copied).
struct Canonical<'a> {
    value: &'a Value,
    at: Level,
}

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Object(m) => {
                let mut map = s.serialize_map(None)?;
                for (k, v) in m {
                    let identity = match self.at {
                        Level::Root => k == "apiVersion" || k == "kind",
                        Level::Metadata => k == "name" || k == "namespace",
                        Level::Inner => false,
                    };
                    if identity || blank(v) {
                        continue;
                    }
                    let at = if self.at == Level::Root && k == "metadata" {
                        Level::Metadata
                    } else {
                        Level::Inner
                    };
                    map.serialize_entry(k, &Canonical { value: v, at })?;
                }
                map.end()
            }
            Value::Array(items) => s.collect_seq(items.iter().map(|value| Canonical {
                value,
                at: Level::Inner,
            })),
            scalar => scalar.serialize(s),
        }
    }
}

/// Null, or a list or object with nothing but blanks in it.
fn blank(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(m) => m.values().all(blank),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{digest, live_digest_of_json, projected_digest};
    use serde_json::{Value, json};

    /// What an API server holds after shardgate applied `applied` and the
    /// server defaulted `protocol` and `targetPort`, and another manager
    /// added a label and a port.
    fn live() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "n", "resourceVersion": "7",
                "labels": {"app": "v", "zone": "a"},
                "managedFields": [
                    {"manager": "shardgate", "operation": "Apply", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:ports": {
                            "k:{\"port\":6379,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:nodePort": {}}
                        }, "f:selector": {}, "f:type": {}}}},
                    {"manager": "other", "operation": "Update", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:zone": {}}},
                        "f:spec": {"f:ports": {"k:{\"port\":9000,\"protocol\":\"TCP\"}": {}}}}}
                ]},
            "spec": {"type": "NodePort", "selector": {"app": "v", "node": "0"}, "clusterIP": "10.0.0.1",
                "ports": [
                    {"name": "n0", "port": 6379, "protocol": "TCP", "targetPort": 6379, "nodePort": 30001},
                    {"name": "x", "port": 9000, "protocol": "TCP", "targetPort": 9000}
                ]},
            "status": {"loadBalancer": {}}
        })
    }

    fn applied() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "n", "labels": {"app": "v"}, "annotations": {}},
            "spec": {"type": "NodePort", "selector": {"app": "v", "node": "0"},
                "ports": [{"name": "n0", "port": 6379, "nodePort": 30001}]}
        })
    }

    #[test]
    fn the_projection_is_what_shardgate_applied() {
        assert_eq!(live_digest_of_json(&live()), Some(digest(&applied())));
    }

    #[test]
    fn a_changed_or_removed_field_changes_the_digest() {
        let want = digest(&applied());
        // Another manager took a field over: it left shardgate's set.
        let mut taken = live();
        taken["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:type");
        taken["spec"]["type"] = "ClusterIP".into();
        assert_ne!(live_digest_of_json(&taken), Some(want.clone()));
        // A field gone from the object.
        let mut removed = live();
        removed["spec"]["ports"].as_array_mut().unwrap().remove(0);
        assert_ne!(live_digest_of_json(&removed), Some(want.clone()));
        // The desired object changed.
        let mut desired = applied();
        desired["spec"]["ports"][0]["nodePort"] = 30002.into();
        assert_ne!(live_digest_of_json(&live()), Some(digest(&desired)));
    }

    #[test]
    fn no_apply_entry_no_digest() {
        let mut v = live();
        v["metadata"]["managedFields"][0]["operation"] = "Update".into();
        assert_eq!(live_digest_of_json(&v), None);
    }

    #[test]
    fn list_items_are_selected_by_key_value_or_index() {
        let fields = json!({"f:a": {"v:\"x\"": {}, "i:2": {}}})
            .as_object()
            .unwrap()
            .clone();
        let live = json!({"a": ["x", "y", "z"], "b": 1});
        assert_eq!(
            projected_digest(&live, &fields),
            digest(&json!({"a": ["x", "z"]}))
        );
        assert_ne!(projected_digest(&live, &fields), digest(&live));
    }
}
