//! `printEvent` for core/v1 Events and events.k8s.io/v1 Events (their
//! fields mapped to the core ones, as the server converts them).

use serde_json::{Value, json};

use crate::age;

use super::{NAME_DESCRIPTION, Row, column, s, string_col};

pub(super) fn columns() -> Vec<Value> {
    vec![
        string_col(
            "Last Seen",
            0,
            "The time at which the most recent occurrence of this event was recorded.",
        ),
        string_col(
            "Type",
            0,
            "Type of this event (Normal, Warning), new types could be added in the future",
        ),
        string_col(
            "Reason",
            0,
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        string_col("Object", 0, "The object that this event is about."),
        string_col(
            "Subobject",
            1,
            "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
        ),
        string_col(
            "Source",
            1,
            "The component reporting this event. Should be a short machine understandable string.",
        ),
        string_col(
            "Message",
            0,
            "A human-readable description of the status of this operation.",
        ),
        string_col(
            "First Seen",
            1,
            "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
        ),
        string_col("Count", 1, "The number of times this event has occurred."),
        column("Name", "string", "name", 1, NAME_DESCRIPTION),
    ]
}

/// The fields `printEvent` reads, from either event API.
struct EventView<'a> {
    name: &'a str,
    ty: &'a str,
    reason: &'a str,
    message: &'a str,
    regarding: &'a Value,
    first: &'a Value,
    last: &'a Value,
    event_time: &'a Value,
    count: i64,
    series: &'a Value,
    source: &'a Value,
    controller: &'a str,
    instance: &'a str,
}

pub(super) fn core_row(e: &Value, now: i64) -> Row {
    event_row(
        &EventView {
            name: s(e, &["metadata", "name"]),
            ty: s(e, &["type"]),
            reason: s(e, &["reason"]),
            message: s(e, &["message"]),
            regarding: &e["involvedObject"],
            first: &e["firstTimestamp"],
            last: &e["lastTimestamp"],
            event_time: &e["eventTime"],
            count: e["count"].as_i64().unwrap_or(0),
            series: &e["series"],
            source: &e["source"],
            controller: s(e, &["reportingComponent"]),
            instance: s(e, &["reportingInstance"]),
        },
        now,
    )
}

/// events.k8s.io/v1, converted to the core fields as the server does.
pub(super) fn v1_row(e: &Value, now: i64) -> Row {
    event_row(
        &EventView {
            name: s(e, &["metadata", "name"]),
            ty: s(e, &["type"]),
            reason: s(e, &["reason"]),
            message: s(e, &["note"]),
            regarding: &e["regarding"],
            first: &e["deprecatedFirstTimestamp"],
            last: &e["deprecatedLastTimestamp"],
            event_time: &e["eventTime"],
            count: e["deprecatedCount"].as_i64().unwrap_or(0),
            series: &e["series"],
            source: &e["deprecatedSource"],
            controller: s(e, &["reportingController"]),
            instance: s(e, &["reportingInstance"]),
        },
        now,
    )
}

fn event_row(e: &EventView<'_>, now: i64) -> Row {
    let since = |v: &Value| age::since(v.as_str(), now);
    let first = if e.first.is_string() {
        since(e.first)
    } else {
        since(e.event_time)
    };
    let mut last = if e.last.is_string() {
        since(e.last)
    } else {
        first.clone()
    };
    let mut count = e.count;
    if e.series.is_object() {
        last = since(&e.series["lastObservedTime"]);
        count = e.series["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let kind = s(e.regarding, &["kind"]).to_lowercase();
    let target = match s(e.regarding, &["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &'_ str, b: &'_ str| if a.is_empty() { b } else { a }.to_string();
    let component = first_non_empty(s(e.source, &["component"]), e.controller);
    let host = first_non_empty(s(e.source, &["host"]), e.instance);
    let source = if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(e.ty),
        json!(e.reason),
        json!(target),
        json!(s(e.regarding, &["fieldPath"])),
        json!(source),
        json!(e.message.trim()),
        json!(first),
        json!(count),
        json!(e.name),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00Z";

    fn t0() -> i64 {
        T0.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    #[test]
    fn events_v1_fields_map_to_the_core_printer() {
        let ev = json!({
            "metadata": {"name": "vc.1"}, "type": "Normal", "reason": "Scaled", "note": " scaled up ",
            "regarding": {"kind": "ValkeyCluster", "name": "vc"}, "eventTime": T0,
            "reportingController": "shardgate", "reportingInstance": "op-1",
        });
        assert_eq!(
            v1_row(&ev, t0() + 61).cells,
            vec![
                json!("61s"),
                json!("Normal"),
                json!("Scaled"),
                json!("valkeycluster/vc"),
                json!(""),
                json!("shardgate, op-1"),
                json!("scaled up"),
                json!("61s"),
                json!(1),
                json!("vc.1"),
            ]
        );
    }
}
