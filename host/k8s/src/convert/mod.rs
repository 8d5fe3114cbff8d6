//! Conversion between Kubernetes objects and the reconcile contract: the
//! only place that knows both shapes. [`input`] goes into the guest,
//! [`objects`], [`workload`] and [`placement`] come out of it.

pub mod input;
pub mod objects;
pub mod placement;
pub mod workload;

pub use input::{
    Labelled, PodView, ServiceView, cluster, input, observed_pod, observed_service, parse_ip,
    pinned_elsewhere,
};
pub use objects::{CONFIG_KEY, NodeObjects, Objects, RouteObject, objects, typed_json};
pub use workload::{BUS_PORT_NAME, SERVER_CONTAINER};
