//! The API server's table printers (`pkg/printers/internalversion`) for the
//! built-in kinds the emulator serves: column definitions and one row's
//! cells, computed from the stored JSON. The server prints as `-o wide`
//! does (every column; kubectl hides those with a priority above 0).

use serde_json::{Value, json};

use crate::age;

mod event;
mod pod;
mod service;
mod simple;

/// `metav1.ObjectMeta{}.SwaggerDoc()["name"]`.
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`.
pub(crate) const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A `TableColumnDefinition`.
pub(crate) fn column(
    name: &str,
    ty: &str,
    format: &str,
    priority: i64,
    description: &str,
) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

fn name_col() -> Value {
    column("Name", "string", "name", 0, NAME_DESCRIPTION)
}

fn age_col() -> Value {
    column("Age", "string", "", 0, AGE_DESCRIPTION)
}

fn string_col(name: &str, priority: i64, description: &str) -> Value {
    column(name, "string", "", priority, description)
}

/// One row: its cells and, for finished Pods, the `Completed` condition.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Row {
    pub cells: Vec<Value>,
    pub conditions: Option<Value>,
}

impl From<Vec<Value>> for Row {
    fn from(cells: Vec<Value>) -> Self {
        Self {
            cells,
            conditions: None,
        }
    }
}

type ColumnsFn = fn() -> Vec<Value>;
/// One row of an object at a time (seconds since the epoch).
type RowFn = fn(&Value, i64) -> Row;

/// Columns and row function of one kind.
pub(crate) struct Printer {
    pub columns: ColumnsFn,
    pub row: RowFn,
}

/// The printer the API server has for a built-in `group`/`plural`, or the
/// default convertor (Name, Created At) for a kind without one.
pub(crate) fn builtin(group: &str, plural: &str) -> Printer {
    let (columns, row): (ColumnsFn, RowFn) = match (group, plural) {
        ("", "pods") => (pod::columns, pod::row),
        ("", "services") => (service::columns, service::row),
        ("apps", "statefulsets") => (simple::statefulset_columns, simple::statefulset_row),
        ("policy", "poddisruptionbudgets") => (simple::pdb_columns, simple::pdb_row),
        ("", "persistentvolumeclaims") => (simple::pvc_columns, simple::pvc_row),
        ("", "namespaces") => (simple::namespace_columns, simple::namespace_row),
        ("", "nodes") => (simple::node_columns, simple::node_row),
        ("", "configmaps") => (simple::configmap_columns, simple::configmap_row),
        ("", "secrets") => (simple::secret_columns, simple::secret_row),
        ("coordination.k8s.io", "leases") => (simple::lease_columns, simple::lease_row),
        ("", "events") => (event::columns, event::core_row),
        ("events.k8s.io", "events") => (event::columns, event::v1_row),
        _ => (default_columns, default_row),
    };
    Printer { columns, row }
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

fn or_none(x: &str) -> String {
    if x.is_empty() { "<none>" } else { x }.to_string()
}

fn name(o: &Value) -> Value {
    json!(s(o, &["metadata", "name"]))
}

fn age_cell(o: &Value, now: i64) -> Value {
    json!(age::since(o["metadata"]["creationTimestamp"].as_str(), now))
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn default_columns() -> Vec<Value> {
    vec![
        name_col(),
        column("Created At", "date", "", 0, AGE_DESCRIPTION),
    ]
}

/// `rest.defaultTableConvertor`: the timestamp itself, in RFC 3339.
fn default_row(o: &Value, _now: i64) -> Row {
    vec![name(o), o["metadata"]["creationTimestamp"].clone()].into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_printer_has_a_cell_per_column() {
        for (g, p) in [
            ("", "pods"),
            ("", "services"),
            ("apps", "statefulsets"),
            ("policy", "poddisruptionbudgets"),
            ("", "persistentvolumeclaims"),
            ("", "namespaces"),
            ("", "nodes"),
            ("", "configmaps"),
            ("", "secrets"),
            ("coordination.k8s.io", "leases"),
            ("", "events"),
            ("events.k8s.io", "events"),
            ("example.com", "widgets"),
        ] {
            let printer = builtin(g, p);
            let n = (printer.columns)().len();
            assert_eq!((printer.row)(&json!({}), 0).cells.len(), n, "{g}/{p}");
        }
    }
}
