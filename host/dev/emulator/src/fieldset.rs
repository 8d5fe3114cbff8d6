//! Field sets: which fields of an object a manager owns, with conversion to and
//! from the `fieldsV1` (`f:` / `k:` / `.`) wire format used in
//! `metadata.managedFields`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::schema::{always_encoded, atomic_items, atomic_map, key_default, list_keys};

/// One step in a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PathElem {
    /// A field of a struct or a key of a map: `f:name`.
    Field(String),
    /// An associative-list item identified by its key fields: `k:{...}`; the
    /// string is the canonical (sorted-key) JSON of the key.
    Key(String),
}

pub(crate) type Path = Vec<PathElem>;

/// A set of field paths, as a tree. `member` marks that the path leading to
/// this node is itself in the set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<PathElem, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    fn prune(&mut self) {
        self.children.retain(|_, c| {
            c.prune();
            !c.is_empty()
        });
    }

    pub fn contains(&self, path: &[PathElem]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, c) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            out.children.insert(k.clone(), d);
        }
        out.prune();
        out
    }

    /// All member paths, depth first.
    pub fn members(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_members(&mut Vec::new(), &mut out);
        out
    }

    fn collect_members(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect_members(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON form.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            let name = match k {
                PathElem::Field(f) => format!("f:{f}"),
                PathElem::Key(j) => format!("k:{j}"),
            };
            m.insert(name, c.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Parses the `fieldsV1` JSON form (unknown prefixes such as `v:` and
    /// `i:` are ignored).
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let mut out = FieldSet::default();
        let Some(m) = v.as_object() else {
            return out;
        };
        if m.is_empty() {
            out.member = true;
            return out;
        }
        for (k, c) in m {
            if k == "." {
                out.member = true;
            } else if let Some(f) = k.strip_prefix("f:") {
                out.children
                    .insert(PathElem::Field(f.into()), Self::from_fields_v1(c));
            } else if let Some(j) = k.strip_prefix("k:") {
                let canon = serde_json::from_str::<Value>(j)
                    .map(|v| canonical_json(&v))
                    .unwrap_or_else(|_| j.to_string());
                out.children
                    .insert(PathElem::Key(canon), Self::from_fields_v1(c));
            }
        }
        out
    }
}

/// JSON with object keys sorted (serde_json's map may preserve insertion order).
pub(crate) fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical_json(&m[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// Canonical key of a list-map item for the given key fields.
pub(crate) fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let obj = item.as_object()?;
    let mut key = Map::new();
    for k in keys {
        match obj.get(*k).cloned().or_else(|| key_default(k)) {
            Some(v) => {
                key.insert((*k).to_string(), v);
            }
            None => continue,
        }
    }
    if key.is_empty() {
        return None;
    }
    Some(canonical_json(&Value::Object(key)))
}

/// Matches an item against a canonical key string whose field names are taken
/// from the key itself.
pub(crate) fn item_matches(item: &Value, key: &str) -> bool {
    let Ok(Value::Object(k)) = serde_json::from_str::<Value>(key) else {
        return false;
    };
    let names: Vec<&str> = k.keys().map(String::as_str).collect();
    item_key(item, &names).as_deref() == Some(key)
}

/// Schema context while walking an object.
pub(crate) struct Walk<'a> {
    pub kind: &'a str,
    pub names: Vec<String>,
}

impl<'a> Walk<'a> {
    pub fn new(kind: &'a str) -> Self {
        Self {
            kind,
            names: Vec::new(),
        }
    }

    pub fn keys(&self) -> Option<&'static [&'static str]> {
        list_keys(self.kind, &self.names)
    }

    pub fn atomic_map(&self) -> bool {
        atomic_map(self.kind, &self.names)
    }

    pub fn always_encoded(&self) -> bool {
        always_encoded(self.kind, &self.names)
    }

    /// The items of the list here are owned whole.
    pub fn atomic_items(&self) -> bool {
        atomic_items(&self.names)
    }
}

/// The set of all fields present in `v` (leaves, atomic values, list-map
/// items and empty maps are members).
pub(crate) fn fields_of(v: &Value, w: &mut Walk<'_>) -> FieldSet {
    let mut out = FieldSet::default();
    collect(v, w, &mut out);
    out
}

fn collect(v: &Value, w: &mut Walk<'_>, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() && !w.atomic_map() => {
            for (k, c) in m {
                w.names.push(k.clone());
                let child = out.children.entry(PathElem::Field(k.clone())).or_default();
                collect(c, w, child);
                w.names.pop();
            }
        }
        Value::Array(items) => match w.keys() {
            Some(keys) if items.iter().all(|i| item_key(i, keys).is_some()) => {
                for item in items {
                    let key = item_key(item, keys).unwrap_or_default();
                    let child = out.children.entry(PathElem::Key(key)).or_default();
                    child.member = true;
                    collect_item(item, w, child);
                }
            }
            _ => out.member = true,
        },
        _ => out.member = true,
    }
}

fn collect_item(item: &Value, w: &mut Walk<'_>, out: &mut FieldSet) {
    if w.atomic_items() {
        return;
    }
    if let Value::Object(m) = item {
        for (k, c) in m {
            w.names.push(k.clone());
            let child = out.children.entry(PathElem::Field(k.clone())).or_default();
            collect(c, w, child);
            w.names.pop();
        }
    }
}

/// Members of `new` whose value differs from `old` (or that `old` lacks).
pub(crate) fn modified_fields(old: Option<&Value>, new: &Value, w: &mut Walk<'_>) -> FieldSet {
    let mut out = FieldSet::default();
    modified(old, new, w, &mut out);
    out.prune();
    out
}

fn modified(old: Option<&Value>, new: &Value, w: &mut Walk<'_>, out: &mut FieldSet) {
    if old == Some(new) {
        return;
    }
    match (old, new) {
        (Some(Value::Object(o)), Value::Object(n)) if !n.is_empty() && !w.atomic_map() => {
            for (k, c) in n {
                w.names.push(k.clone());
                let child = out.children.entry(PathElem::Field(k.clone())).or_default();
                modified(o.get(k), c, w, child);
                w.names.pop();
            }
        }
        (Some(Value::Array(o)), Value::Array(n)) => match w.keys() {
            Some(keys) if n.iter().chain(o).all(|i| item_key(i, keys).is_some()) => {
                for item in n {
                    let key = item_key(item, keys).unwrap_or_default();
                    let prev = o
                        .iter()
                        .find(|i| item_key(i, keys).as_deref() == Some(&key));
                    let child = out.children.entry(PathElem::Key(key)).or_default();
                    match prev {
                        Some(p) if w.atomic_items() => child.member |= p != item,
                        Some(p) => {
                            if let (Value::Object(po), Value::Object(no)) = (p, item) {
                                for (k, c) in no {
                                    w.names.push(k.clone());
                                    let gc = child
                                        .children
                                        .entry(PathElem::Field(k.clone()))
                                        .or_default();
                                    modified(po.get(k), c, w, gc);
                                    w.names.pop();
                                }
                            }
                        }
                        None => {
                            child.member = true;
                            collect_item_added(item, w, child);
                        }
                    }
                }
            }
            _ => out.member = true,
        },
        // A map that lost all its entries: they are removed, the map is not
        // the writer's.
        (Some(Value::Object(o)), Value::Object(n))
            if n.is_empty() && !o.is_empty() && !w.atomic_map() => {}
        (None, _) => collect_added(new, w, out, true),
        _ => collect(new, w, out),
    }
}

/// The fields of a value an update adds, as the API server's comparison
/// records them: like [`fields_of`], and every map (but an atomic one) and
/// every associative list is itself a member (`.` in fieldsV1) beside its
/// contents. `parent_existed`: the value's parent was already there, so a
/// field every encoded object has (a Go struct value, see
/// [`crate::schema::always_encoded`]) is not added; its own fields may be.
fn collect_added(v: &Value, w: &mut Walk<'_>, out: &mut FieldSet, parent_existed: bool) {
    let existed = w.names.is_empty() || (parent_existed && w.always_encoded());
    match v {
        Value::Object(m) if !m.is_empty() && !w.atomic_map() => {
            out.member |= !existed;
            for (k, c) in m {
                w.names.push(k.clone());
                let child = out.children.entry(PathElem::Field(k.clone())).or_default();
                collect_added(c, w, child, existed);
                w.names.pop();
            }
        }
        Value::Array(items) => {
            // An atomic list is a leaf; an associative one is added unless
            // every encoded object has it.
            out.member = true;
            if let Some(keys) = w.keys()
                && items.iter().all(|i| item_key(i, keys).is_some())
            {
                out.member = !existed || items.is_empty();
                for item in items {
                    let key = item_key(item, keys).unwrap_or_default();
                    let child = out.children.entry(PathElem::Key(key)).or_default();
                    child.member = true;
                    collect_item_added(item, w, child);
                }
            }
        }
        _ => out.member = true,
    }
}

fn collect_item_added(item: &Value, w: &mut Walk<'_>, out: &mut FieldSet) {
    if w.atomic_items() {
        return;
    }
    if let Value::Object(m) = item {
        for (k, c) in m {
            w.names.push(k.clone());
            let child = out.children.entry(PathElem::Field(k.clone())).or_default();
            collect_added(c, w, child, false);
            w.names.pop();
        }
    }
}

/// Every path present in `v`: each field, map, list and list item (but
/// the root) is a member. A write's removals are what the object had and
/// no longer has.
pub(crate) fn present_fields(v: &Value, w: &mut Walk<'_>) -> FieldSet {
    let mut out = FieldSet::default();
    if let Value::Object(m) = v {
        for (k, c) in m {
            w.names.push(k.clone());
            let child = out.children.entry(PathElem::Field(k.clone())).or_default();
            collect_present(c, w, child);
            w.names.pop();
        }
    }
    out
}

fn collect_present(v: &Value, w: &mut Walk<'_>, out: &mut FieldSet) {
    out.member = true;
    match v {
        Value::Object(m) if !w.atomic_map() => {
            for (k, c) in m {
                w.names.push(k.clone());
                let child = out.children.entry(PathElem::Field(k.clone())).or_default();
                collect_present(c, w, child);
                w.names.pop();
            }
        }
        Value::Array(items) => {
            if let Some(keys) = w.keys()
                && items.iter().all(|i| item_key(i, keys).is_some())
            {
                for item in items {
                    let key = item_key(item, keys).unwrap_or_default();
                    let child = out.children.entry(PathElem::Key(key)).or_default();
                    child.member = true;
                    if let Value::Object(m) = item {
                        for (k, c) in m {
                            w.names.push(k.clone());
                            let gc = child
                                .children
                                .entry(PathElem::Field(k.clone()))
                                .or_default();
                            collect_present(c, w, gc);
                            w.names.pop();
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// The value at `path`, if present.
pub(crate) fn get_path<'v>(v: &'v Value, path: &[PathElem]) -> Option<&'v Value> {
    let Some((first, rest)) = path.split_first() else {
        return Some(v);
    };
    let next = match first {
        PathElem::Field(f) => v.as_object()?.get(f)?,
        PathElem::Key(k) => v.as_array()?.iter().find(|i| item_matches(i, k))?,
    };
    get_path(next, rest)
}

/// Human-readable path, as the API server prints it in conflicts:
/// `.spec.ports[port=80,protocol="TCP"].nodePort`.
pub(crate) fn path_string(path: &[PathElem]) -> String {
    let mut s = String::new();
    for e in path {
        match e {
            PathElem::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            PathElem::Key(k) => {
                let parts: Vec<String> = match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(m)) => m.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    _ => vec![k.clone()],
                };
                s.push_str(&format!("[{}]", parts.join(",")));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip_with_list_map_keys() {
        let svc = json!({
            "metadata": {"labels": {"a": "1"}},
            "spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"app": "x"}},
        });
        let set = fields_of(&svc, &mut Walk::new("Service"));
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({
                "f:metadata": {"f:labels": {"f:a": {}}},
                "f:spec": {
                    "f:ports": {r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:name": {}, "f:port": {}}},
                    "f:selector": {},
                },
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
        let path = vec![
            PathElem::Field("spec".into()),
            PathElem::Field("ports".into()),
            PathElem::Key(r#"{"port":80,"protocol":"TCP"}"#.into()),
            PathElem::Field("name".into()),
        ];
        assert!(set.contains(&path));
        assert_eq!(get_path(&svc, &path), Some(&json!("http")));
        assert_eq!(
            path_string(&path),
            r#".spec.ports[port=80,protocol="TCP"].name"#
        );
    }

    #[test]
    fn set_algebra() {
        let a = fields_of(
            &json!({"data": {"x": "1", "y": "2"}}),
            &mut Walk::new("ConfigMap"),
        );
        let b = fields_of(&json!({"data": {"y": "2"}}), &mut Walk::new("ConfigMap"));
        let only_x = a.difference(&b);
        assert_eq!(only_x.members().len(), 1);
        assert_eq!(b.union(&only_x), a);
    }

    #[test]
    fn modified_fields_only_reports_changes() {
        let old = json!({"spec": {"a": 1, "b": [1, 2]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let new = json!({"spec": {"a": 1, "b": [1, 3]}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let m = modified_fields(Some(&old), &new, &mut Walk::new("X"));
        let paths: Vec<String> = m.members().iter().map(|p| path_string(p)).collect();
        assert_eq!(
            paths,
            [".spec.b", r#".status.conditions[type="Ready"].status"#]
        );
    }
}
