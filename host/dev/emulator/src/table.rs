//! `meta.k8s.io` `Table` responses, what `kubectl get` asks for
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`) to print
//! the server's columns. Built-in kinds print with [`crate::printers`];
//! custom resources with their CRD's `additionalPrinterColumns`, evaluated
//! with [`crate::jsonpath`] as the apiextensions table convertor does.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::age;
use crate::errors::{ApiError, ApiResult};
use crate::jsonpath::{self, JsonPath};
use crate::printers::{self, AGE_DESCRIPTION, NAME_DESCRIPTION, Row, column};
use crate::resources::{PrinterColumn, ResourceInfo};

/// `?includeObject=`: what each row's `object` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IncludeObject {
    /// A `PartialObjectMetadata` (the default, kubectl's choice).
    Metadata,
    Object,
    None,
}

/// A request for a Table: its `meta.k8s.io` version and row objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableRequest {
    /// `v1` or `v1beta1`.
    version: &'static str,
    include: IncludeObject,
}

/// The Table version the first acceptable clause of `accept` asks for, or
/// `None` when plain JSON comes first (or nothing asks for a Table).
/// Clauses asking for conversions the emulator does not model
/// (`as=PartialObjectMetadata`, protobuf, ...) are skipped.
fn wanted_version(accept: &str) -> Option<&'static str> {
    for clause in accept.split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: HashMap<String, &str> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"')))
            .collect();
        match params.get("as") {
            Some(&"Table")
                if media == "application/json" && params.get("g") == Some(&"meta.k8s.io") =>
            {
                match params.get("v") {
                    Some(&"v1") => return Some("v1"),
                    Some(&"v1beta1") => return Some("v1beta1"),
                    _ => {}
                }
            }
            Some(_) => {}
            None if matches!(
                media.as_str(),
                "application/json" | "application/*" | "*/*" | ""
            ) =>
            {
                return None;
            }
            None => {}
        }
    }
    None
}

impl TableRequest {
    /// A Table request, if the Accept header asks for one before plain
    /// JSON; `includeObject` must then be `Metadata`, `Object` or `None`.
    pub fn negotiate(accept: &str, query: &HashMap<String, String>) -> ApiResult<Option<Self>> {
        let Some(version) = wanted_version(accept) else {
            return Ok(None);
        };
        let include = match query.get("includeObject").map(String::as_str) {
            None | Some("" | "Metadata") => IncludeObject::Metadata,
            Some("Object") => IncludeObject::Object,
            Some("None") => IncludeObject::None,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "unrecognized includeObject value: {other:?}"
                )));
            }
        };
        Ok(Some(Self { version, include }))
    }

    pub fn content_type(&self) -> String {
        format!("application/json;as=Table;v={};g=meta.k8s.io", self.version)
    }

    /// A list as a Table: one row per item, the list's resourceVersion
    /// and continue token.
    pub fn list(&self, res: &ResourceInfo, list: &Value, now: i64) -> Value {
        let printer = Printer::of(res);
        let rows: Vec<Value> = list["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|o| self.row(&printer, o, now))
            .collect();
        let mut meta = json!({"resourceVersion": list["metadata"]["resourceVersion"]});
        if let Some(c) = list["metadata"]["continue"].as_str() {
            meta["continue"] = json!(c);
        }
        self.table(meta, printer.columns(), rows)
    }

    /// One object as a Table of one row (GET, or a watch event's object);
    /// without column definitions when `headers` is false.
    pub fn object(&self, res: &ResourceInfo, obj: &Value, now: i64, headers: bool) -> Value {
        let printer = Printer::of(res);
        let row = self.row(&printer, obj, now);
        let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
        let columns = if headers {
            printer.columns()
        } else {
            Vec::new()
        };
        self.table(meta, columns, vec![row])
    }

    /// A Table without rows at `rv` (a watch BOOKMARK).
    pub fn empty(&self, rv: u64) -> Value {
        self.table(
            json!({"resourceVersion": rv.to_string()}),
            Vec::new(),
            Vec::new(),
        )
    }

    fn table(&self, meta: Value, columns: Vec<Value>, rows: Vec<Value>) -> Value {
        json!({
            "kind": "Table",
            "apiVersion": format!("meta.k8s.io/{}", self.version),
            "metadata": meta,
            "columnDefinitions": columns,
            "rows": rows,
        })
    }

    fn row(&self, printer: &Printer, obj: &Value, now: i64) -> Value {
        let Row { cells, conditions } = printer.row(obj, now);
        let object = match self.include {
            IncludeObject::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{}", self.version),
                "metadata": obj["metadata"],
            }),
            IncludeObject::Object => obj.clone(),
            IncludeObject::None => Value::Null,
        };
        let mut row = json!({"cells": cells, "object": object});
        if let Some(c) = conditions {
            row["conditions"] = c;
        }
        row
    }
}

/// A watch's Table rendering: the column definitions go with the first
/// event only, as the API server sends them.
pub(crate) struct TableWatch {
    req: TableRequest,
    headers_sent: bool,
}

impl TableWatch {
    pub fn new(req: TableRequest) -> Self {
        Self {
            req,
            headers_sent: false,
        }
    }

    pub fn content_type(&self) -> String {
        self.req.content_type()
    }

    /// The object of an ADDED/MODIFIED/DELETED event.
    pub fn event(&mut self, res: &ResourceInfo, obj: &Value) -> Value {
        let headers = !std::mem::replace(&mut self.headers_sent, true);
        self.req.object(res, obj, age::now(), headers)
    }

    /// The object of a BOOKMARK event.
    pub fn bookmark(&self, rv: u64) -> Value {
        self.req.empty(rv)
    }
}

/// A CRD printer column with its parsed path (a path the emulator cannot
/// parse gives empty cells).
struct Column {
    def: PrinterColumn,
    path: Result<JsonPath, String>,
}

enum Printer {
    Builtin(printers::Printer),
    Custom(Vec<Column>),
}

impl Printer {
    fn of(res: &ResourceInfo) -> Self {
        match &res.printer_columns {
            None => Self::Builtin(printers::builtin(&res.group, &res.plural)),
            Some(cols) => {
                let mut cols = cols.clone();
                if cols.is_empty() {
                    // `serveDefaultColumnsIfEmpty`.
                    let mut age = PrinterColumn::new("Age", "date", ".metadata.creationTimestamp");
                    age.description = AGE_DESCRIPTION.into();
                    cols.push(age);
                }
                Self::Custom(
                    cols.into_iter()
                        .map(|def| Column {
                            path: def.json_path.parse(),
                            def,
                        })
                        .collect(),
                )
            }
        }
    }

    fn columns(&self) -> Vec<Value> {
        match self {
            Self::Builtin(p) => (p.columns)(),
            Self::Custom(cols) => {
                std::iter::once(column("Name", "string", "name", 0, NAME_DESCRIPTION))
                    .chain(cols.iter().map(|c| {
                        let description = if c.def.description.is_empty() {
                            format!(
                                "Custom resource definition column (in JSONPath format): {}",
                                c.def.json_path
                            )
                        } else {
                            c.def.description.clone()
                        };
                        column(
                            &c.def.name,
                            &c.def.column_type,
                            &c.def.format,
                            i64::from(c.def.priority),
                            &description,
                        )
                    }))
                    .collect()
            }
        }
    }

    fn row(&self, obj: &Value, now: i64) -> Row {
        match self {
            Self::Builtin(p) => (p.row)(obj, now),
            Self::Custom(cols) => std::iter::once(obj["metadata"]["name"].clone())
                .chain(cols.iter().map(|c| custom_cell(c, obj, now)))
                .collect::<Vec<_>>()
                .into(),
        }
    }
}

/// The apiextensions table convertor's cell: the first JSONPath result,
/// printed for `string` columns, converted for typed ones (`null` when
/// missing or of the wrong type), and for `date` the age of the timestamp.
fn custom_cell(col: &Column, obj: &Value, now: i64) -> Value {
    let Ok(path) = &col.path else {
        return Value::Null;
    };
    let Some(value) = path.find(obj).ok().and_then(|r| r.first().copied()) else {
        return Value::Null;
    };
    match (col.def.column_type.as_str(), value) {
        ("string", v) => json!(jsonpath::text(v)),
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(ts)) => json!(age::since(Some(ts), now)),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CustomResource, Registry};

    const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    const T0: &str = "2024-01-01T00:00:00Z";

    fn t0() -> i64 {
        T0.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(wanted_version(KUBECTL), Some("v1"));
        assert_eq!(
            wanted_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("v1beta1")
        );
        assert_eq!(
            wanted_version(
                "application/json;as=Table;v=v1alpha1;g=meta.k8s.io,application/json;as=Table;g=meta.k8s.io;v=v1"
            ),
            Some("v1")
        );
        assert_eq!(wanted_version("application/json"), None);
        assert_eq!(wanted_version(""), None);
        assert_eq!(
            wanted_version("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"),
            None
        );
        assert_eq!(
            wanted_version(
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
            ),
            None
        );
        let q = |v: &str| HashMap::from([("includeObject".to_string(), v.to_string())]);
        let t = TableRequest::negotiate(KUBECTL, &HashMap::new())
            .unwrap()
            .unwrap();
        assert_eq!(t.include, IncludeObject::Metadata);
        assert_eq!(
            t.content_type(),
            "application/json;as=Table;v=v1;g=meta.k8s.io"
        );
        let t = TableRequest::negotiate(KUBECTL, &q("None"))
            .unwrap()
            .unwrap();
        assert_eq!(t.include, IncludeObject::None);
        let e = TableRequest::negotiate(KUBECTL, &q("Everything")).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            TableRequest::negotiate("application/json", &q("Everything"))
                .unwrap()
                .is_none()
        );
    }

    fn valkey() -> std::sync::Arc<ResourceInfo> {
        let cr = CustomResource::namespaced(
            "shardgate.io",
            "v1alpha1",
            "ValkeyCluster",
            "valkeyclusters",
        )
        .printer_column(PrinterColumn::new("State", "string", ".status.state"))
        .printer_column(PrinterColumn::new("Shards", "integer", ".status.shards"))
        .printer_column(PrinterColumn::new("Replicas", "integer", ".spec.replicas"))
        .printer_column(PrinterColumn::new(
            "Ready",
            "string",
            r#".status.conditions[?(@.type=="Ready")].status"#,
        ))
        .printer_column(PrinterColumn::new("Ratio", "number", ".spec.ratio"))
        .printer_column(PrinterColumn::new("On", "boolean", ".spec.on"))
        .printer_column(PrinterColumn::new("Broken", "string", ".spec["))
        .printer_column(PrinterColumn::new(
            "Age",
            "date",
            ".metadata.creationTimestamp",
        ));
        let mut reg = Registry::default();
        reg.add_custom(&cr);
        reg.lookup("valkeyclusters").unwrap()
    }

    #[test]
    fn custom_resource_columns_and_cells() {
        let res = valkey();
        let obj = json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "vc", "namespace": "default", "resourceVersion": "7", "creationTimestamp": T0},
            "spec": {"replicas": 1, "ratio": 2, "on": "yes"},
            "status": {"state": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let req = TableRequest::negotiate(KUBECTL, &HashMap::new())
            .unwrap()
            .unwrap();
        let t = req.object(&res, &obj, t0() + 300, true);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name", "State", "Shards", "Replicas", "Ready", "Ratio", "On", "Broken", "Age"
            ]
        );
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        assert_eq!(t["columnDefinitions"][8]["type"], "date");
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["vc", "Running", null, 1, "True", 2.0, null, null, "5m"])
        );
        assert_eq!(
            t["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        );
        let bare = req.object(&res, &obj, t0(), false);
        assert_eq!(bare["columnDefinitions"], json!([]));
    }

    #[test]
    fn custom_resource_without_columns_has_age() {
        let mut reg = Registry::default();
        reg.add_custom(&CustomResource::namespaced(
            "example.com",
            "v1",
            "Widget",
            "widgets",
        ));
        let res = reg.lookup("widgets").unwrap();
        let list = json!({
            "metadata": {"resourceVersion": "9", "continue": "abc"},
            "items": [{"metadata": {"name": "w", "creationTimestamp": T0}}],
        });
        let req = TableRequest {
            version: "v1beta1",
            include: IncludeObject::None,
        };
        let t = req.list(&res, &list, t0() + 7200);
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(
            t["metadata"],
            json!({"resourceVersion": "9", "continue": "abc"})
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Age");
        assert_eq!(t["rows"], json!([{"cells": ["w", "120m"], "object": null}]));
    }
}
