//! `printPod`: Ready, Status, Restarts, Age; wide IP, Node, Nominated Node,
//! Readiness Gates.

use serde_json::{Value, json};

use crate::age;

use super::{Row, age_cell, age_col, items, name, name_col, or_none, s, string_col};

pub(super) fn columns() -> Vec<Value> {
    vec![
        name_col(),
        string_col(
            "Ready",
            0,
            "The aggregate readiness state of this pod for accepting traffic.",
        ),
        string_col(
            "Status",
            0,
            "The aggregate status of the containers in this pod.",
        ),
        string_col(
            "Restarts",
            0,
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        age_col(),
        string_col("IP", 1, "podIP address allocated to the pod."),
        string_col(
            "Node",
            1,
            "NodeName indicates in which node this pod is scheduled.",
        ),
        string_col(
            "Nominated Node",
            1,
            "nominatedNodeName is set only when this pod preempts other pods on the node.",
        ),
        string_col(
            "Readiness Gates",
            1,
            "If specified, all readiness gates will be evaluated for pod readiness.",
        ),
    ]
}

fn timestamp(v: &Value) -> Option<i64> {
    v.as_str()?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

fn has_condition(status: &Value, ty: &str) -> bool {
    items(&status["conditions"])
        .iter()
        .any(|c| c["type"] == ty && c["status"] == "True")
}

/// `printPod`: READY is ready/total containers (running and ready ones
/// from `containerStatuses`; sidecar init containers count), STATUS the
/// phase or the reason the containers give, RESTARTS with the age of the
/// last restart.
pub(super) fn row(pod: &Value, now: i64) -> Row {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let phase = s(status, &["phase"]);
    let mut reason = match s(status, &["reason"]) {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if items(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    let init_specs = items(&spec["initContainers"]);
    let restartable = |name: &Value| {
        init_specs
            .iter()
            .any(|c| c["name"] == *name && c["restartPolicy"] == "Always")
    };
    let mut total = items(&spec["containers"]).len();
    total += init_specs
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut last_restart: Option<i64> = None;
    let mut last_sidecar_restart: Option<i64> = None;
    let finished = |c: &Value| timestamp(&c["lastTerminationState"]["terminated"]["finishedAt"]);

    let mut initializing = false;
    let init_statuses = items(&status["initContainerStatuses"]);
    for (i, c) in init_statuses.iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        restarts += count;
        last_restart = last_restart.max(finished(c));
        let sidecar = restartable(&c["name"]);
        if sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = last_sidecar_restart.max(finished(c));
        }
        let terminated = &c["state"]["terminated"];
        let waiting_reason = s(c, &["state", "waiting", "reason"]);
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if sidecar && c["started"] == true {
            if c["ready"] == true {
                ready += 1;
            }
            continue;
        }
        reason = if terminated.is_object() {
            match s(terminated, &["reason"]) {
                "" => match terminated["signal"].as_i64().unwrap_or(0) {
                    0 => format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    ),
                    sig => format!("Init:Signal:{sig}"),
                },
                r => format!("Init:{r}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }

    if !initializing || has_condition(status, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in items(&status["containerStatuses"]).iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            last_restart = last_restart.max(finished(c));
            let state = &c["state"];
            let terminated = &state["terminated"];
            if !s(state, &["waiting", "reason"]).is_empty() {
                reason = s(state, &["waiting", "reason"]).to_string();
            } else if !s(terminated, &["reason"]).is_empty() {
                reason = s(terminated, &["reason"]).to_string();
            } else if terminated.is_object() {
                reason = match terminated["signal"].as_i64().unwrap_or(0) {
                    0 => format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0)),
                    sig => format!("Signal:{sig}"),
                };
            } else if c["ready"] == true && state["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_condition(status, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .into();
        }
    }

    if !pod["metadata"]["deletionTimestamp"].is_null() {
        if s(status, &["reason"]) == "NodeLost" {
            reason = "Unknown".into();
        } else if !matches!(phase, "Succeeded" | "Failed") {
            reason = "Terminating".into();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", age::human_duration(now - t))
        }
        _ => restarts.to_string(),
    };
    let gates = items(&spec["readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|g| {
                items(&status["conditions"])
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    Row {
        cells: vec![
            name(pod),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts),
            age_cell(pod, now),
            json!(or_none(s(&status["podIPs"][0], &["ip"]))),
            json!(or_none(s(spec, &["nodeName"]))),
            json!(or_none(s(status, &["nominatedNodeName"]))),
            json!(readiness_gates),
        ],
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00Z";

    fn t0() -> i64 {
        T0.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "vc-0", "creationTimestamp": T0},
            "spec": {"containers": [{"name": "valkey"}, {"name": "exporter"}]},
            "status": status,
        })
    }

    fn cells(p: &Value, now: i64) -> Vec<Value> {
        row(p, now).cells
    }

    #[test]
    fn pod_without_container_statuses() {
        let p = pod(json!({"phase": "Pending"}));
        assert_eq!(
            cells(&p, t0() + 42),
            vec![
                json!("vc-0"),
                json!("0/2"),
                json!("Pending"),
                json!("0"),
                json!("42s"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
            ]
        );
        assert_eq!(columns().len(), cells(&p, t0()).len());
    }

    #[test]
    fn pod_ready_counts_running_ready_containers_and_restarts() {
        let p = pod(json!({
            "phase": "Running",
            "podIPs": [{"ip": "10.244.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "valkey", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastTerminationState": {"terminated": {"finishedAt": "2024-01-01T00:10:00Z"}}},
                {"name": "exporter", "ready": false, "restartCount": 0, "state": {"running": {}}},
            ],
        }));
        let c = cells(&p, t0() + 3600);
        assert_eq!(c[1], json!("1/2"));
        assert_eq!(c[2], json!("Running"));
        assert_eq!(c[3], json!("2 (50m ago)"));
        assert_eq!(c[4], json!("60m"));
        assert_eq!(c[5], json!("10.244.0.1"));
    }

    #[test]
    fn pod_status_reasons() {
        let waiting = pod(json!({
            "phase": "Pending",
            "containerStatuses": [
                {"name": "valkey", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ],
        }));
        assert_eq!(cells(&waiting, t0())[2], json!("CrashLoopBackOff"));

        let mut terminating = pod(json!({"phase": "Running"}));
        terminating["metadata"]["deletionTimestamp"] = json!(T0);
        assert_eq!(cells(&terminating, t0())[2], json!("Terminating"));

        let mut done = pod(json!({"phase": "Succeeded"}));
        done["metadata"]["deletionTimestamp"] = json!(T0);
        let row = row(&done, t0());
        assert_eq!(row.cells[2], json!("Succeeded"), "terminal phases stay");
        assert_eq!(row.conditions.unwrap()[0]["type"], "Completed");

        let mut init = pod(json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "init", "state": {"running": {}}}],
        }));
        init["spec"]["initContainers"] = json!([{"name": "init"}]);
        assert_eq!(cells(&init, t0())[2], json!("Init:0/1"));

        let exited = pod(json!({
            "phase": "Failed",
            "containerStatuses": [{"name": "valkey", "state": {"terminated": {"exitCode": 137}}}],
        }));
        assert_eq!(cells(&exited, t0())[2], json!("ExitCode:137"));
    }

    #[test]
    fn pod_sidecars_count_towards_total() {
        let mut p = pod(json!({
            "phase": "Running",
            "initContainerStatuses": [
                {"name": "proxy", "ready": true, "started": true, "state": {"running": {}}},
            ],
            "containerStatuses": [
                {"name": "valkey", "ready": true, "state": {"running": {}}},
                {"name": "exporter", "ready": true, "state": {"running": {}}},
            ],
        }));
        p["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
        assert_eq!(cells(&p, t0())[1], json!("3/3"));
    }
}
