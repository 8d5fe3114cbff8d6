//! Reading and writing `metadata.managedFields`, and the ownership bookkeeping
//! of non-apply writes (operation `Update`).

use serde_json::{Map, Value, json};

use crate::fieldset::{FieldSet, Walk, modified_fields, present_fields};

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

/// Who is writing.
pub(crate) struct Actor<'a> {
    pub manager: &'a str,
    pub subresource: Option<&'a str>,
    pub api_version: &'a str,
    pub now: &'a str,
}

impl Actor<'_> {
    pub fn owns(&self, e: &Entry, operation: &str) -> bool {
        e.manager == self.manager
            && e.operation == operation
            && e.subresource.as_deref() == self.subresource
    }

    pub fn new_entry(&self, operation: &str, fields: FieldSet) -> Entry {
        Entry {
            manager: self.manager.to_string(),
            operation: operation.to_string(),
            api_version: self.api_version.to_string(),
            time: self.now.to_string(),
            subresource: self.subresource.map(str::to_string),
            fields,
        }
    }
}

pub(crate) fn read(obj: &Value) -> Vec<Entry> {
    let Some(items) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    items
        .iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            subresource: e["subresource"].as_str().map(str::to_string),
            fields: FieldSet::from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

pub(crate) fn write(obj: &mut Value, entries: &[Entry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields.to_fields_v1(),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = Value::String(s.clone());
            }
            v
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(list));
}

/// Metadata fields that are never owned (reset by the server).
const IGNORED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Which part of an object a write may touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource; `.status` is excluded when `status_sub` is set.
    Main { status_sub: bool },
    /// The `/status` subresource: only `.status`.
    Status,
}

/// `obj` without server-managed fields, restricted to `scope`.
pub(crate) fn view(obj: &Value, scope: Scope) -> Value {
    let mut v = obj.clone();
    if let Value::Object(m) = &mut v {
        m.remove("apiVersion");
        m.remove("kind");
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            for f in IGNORED_META {
                meta.remove(*f);
            }
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
        match scope {
            Scope::Main { status_sub: true } => {
                m.remove("status");
            }
            Scope::Status => {
                m.retain(|k, _| k == "status");
            }
            _ => {}
        }
    } else {
        v = Value::Object(Map::new());
    }
    v
}

/// Records an `Update` by `actor` that turned `old_view` into `new_view`: the
/// actor takes ownership of every field it changed or added; other managers
/// lose ownership of those fields; removed fields leave every set.
pub(crate) fn record_update(
    entries: &mut Vec<Entry>,
    actor: &Actor<'_>,
    kind: &str,
    old_view: Option<&Value>,
    new_view: &Value,
) {
    let modified = modified_fields(old_view, new_view, &mut Walk::new(kind));
    let new_full = present_fields(new_view, &mut Walk::new(kind));
    let removed = match old_view {
        Some(o) => present_fields(o, &mut Walk::new(kind)).difference(&new_full),
        None => FieldSet::default(),
    };
    let mut found = false;
    for e in entries.iter_mut() {
        if actor.owns(e, "Update") {
            found = true;
            e.fields = e.fields.union(&modified).difference(&removed);
        } else {
            e.fields = e.fields.difference(&modified).difference(&removed);
        }
    }
    if !found && !modified.is_empty() {
        entries.push(actor.new_entry("Update", modified));
    }
}
