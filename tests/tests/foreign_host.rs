//! The reconcile world is a contract any wasmtime embedder can host: this
//! host uses nothing of shardgate but the component's bytes and the WIT
//! file. It generates bindings from `wit/`, links a WASI context that grants
//! nothing, and calls `validate` as a policy engine would.

use wasmtime::component::{Component, Linker, ResourceTable, bindgen};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

bindgen!({
    path: "../wit",
    world: "shardgate",
});

use self::shardgate::reconcile::types::{
    Cluster, EndpointType, ExternalAccess, HostnameScope, NodeAddressType, Scheduling,
    ServiceTopology, ServiceType, Severity, SpreadSet, Strength, TrafficPolicy,
};

struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn cluster(domain: Option<&str>) -> Cluster {
    Cluster {
        name: "orders".into(),
        namespace: "shop".into(),
        shards: 3,
        replicas: 1,
        image: None,
        resources: None,
        tls: None,
        external_access: Some(ExternalAccess {
            enabled: true,
            service_type: ServiceType::NodePort,
            external_traffic_policy: TrafficPolicy::Cluster,
            service_annotations: vec![],
            hostname_prefix: "shard".into(),
            domain: domain.map(String::from),
            preferred_endpoint_type: EndpointType::Hostname,
            hostname_scope: HostnameScope::Shard,
            topology: ServiceTopology::PerShard,
            node_address_type: NodeAddressType::InternalIp,
            node_ports: None,
            load_balancer_source_ranges: vec![],
            load_balancer_class: None,
            allocate_load_balancer_node_ports: None,
            external_dns: false,
            gateway: None,
        }),
        users: vec![],
        config: vec![("maxmemory".into(), "100mb".into())],
        persistence: None,
        disruption_budget: true,
        scheduling: Scheduling {
            node: SpreadSet {
                shard: Strength::Preferred,
                primaries: Strength::Disabled,
                pods: Strength::Disabled,
            },
            zone: SpreadSet {
                shard: Strength::Disabled,
                primaries: Strength::Disabled,
                pods: Strength::Disabled,
            },
        },
    }
}

#[test]
fn a_plain_wasmtime_host_can_call_validate() {
    let engine = Engine::new(&Config::new()).unwrap();
    // The bytes are the only thing taken from shardgate.
    let component = Component::new(&engine, shardgate_wasm::EMBEDDED_GUEST).unwrap();
    let mut linker = Linker::<Host>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    let mut store = Store::new(
        &engine,
        Host {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    let world = Shardgate::instantiate(&mut store, &component, &linker).unwrap();
    let reconciler = world.shardgate_reconcile_reconciler();

    let ok = reconciler
        .call_validate(&mut store, &cluster(Some("example.com")))
        .unwrap();
    assert!(ok.is_empty(), "{ok:?}");

    let bad = reconciler
        .call_validate(&mut store, &cluster(None))
        .unwrap();
    assert_eq!(bad.len(), 1);
    assert!(matches!(bad[0].severity, Severity::Error));
    assert_eq!(bad[0].field, "spec.externalAccess.domain");
}
