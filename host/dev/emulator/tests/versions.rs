//! One API group serving kinds at different versions (as the Gateway API
//! does: `v1 Gateway`, `v1alpha2 TCPRoute`), registered in any order.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube_emulator::{CustomResource, Emulator};
use serde_json::json;

const GROUP: &str = "gateway.networking.k8s.io";

#[tokio::test]
async fn a_group_serves_each_kind_at_its_version_and_prefers_the_most_stable() {
    // The alpha kind first: the preferred version is still v1.
    let emu = Emulator::builder()
        .custom_resource(CustomResource::namespaced(
            GROUP,
            "v1alpha2",
            "TCPRoute",
            "tcproutes",
        ))
        .custom_resource(CustomResource::namespaced(
            GROUP, "v1", "Gateway", "gateways",
        ))
        .start()
        .await
        .unwrap();
    let client = emu.client().await.unwrap();
    for aggregated in [false, true] {
        let d = Discovery::new(client.clone());
        let d = if aggregated {
            d.run_aggregated().await
        } else {
            d.run().await
        }
        .unwrap();
        let g = d.get(GROUP).expect("the group");
        assert_eq!(g.versions().collect::<Vec<_>>(), ["v1", "v1alpha2"]);
        if !aggregated {
            assert_eq!(g.preferred_version(), Some("v1"));
        }
        // As on a real cluster, `recommended_kind` looks at the preferred
        // version only: a kind served at another one is found by
        // stability (or `versioned_resources`).
        assert!(g.recommended_kind("Gateway").is_some());
        assert!(g.recommended_kind("TCPRoute").is_none());
        let by_stability = g.resources_by_stability();
        for (kind, version, plural) in [
            ("Gateway", "v1", "gateways"),
            ("TCPRoute", "v1alpha2", "tcproutes"),
        ] {
            let (ar, caps) = by_stability
                .iter()
                .find(|(ar, _)| ar.kind == kind)
                .unwrap_or_else(|| panic!("aggregated={aggregated}: {kind}"));
            assert_eq!((ar.version.as_str(), ar.plural.as_str()), (version, plural));
            assert_eq!(caps.scope, Scope::Namespaced);
            assert!(
                caps.subresources
                    .iter()
                    .any(|(s, _)| s.plural.ends_with("status")),
                "aggregated={aggregated}: {kind}: {:?}",
                caps.subresources
            );
        }
    }

    // Each kind at its own version, with its /status subresource.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1", "Gateway"),
        "gateways",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let gw: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "c", "listeners": [{"name": "l", "port": 7000, "protocol": "TCP"}]},
    }))
    .unwrap();
    api.create(&Default::default(), &gw).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "IPAddress", "value": "127.0.6.1"}]}});
    api.patch_status("gw", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let got = emu
        .get("gateway.networking.k8s.io/v1/Gateway", "default", "gw")
        .unwrap();
    assert_eq!(got["status"]["addresses"][0]["value"], "127.0.6.1");
    assert_eq!(got["spec"]["listeners"][0]["port"], 7000);
    assert_eq!(emu.namespaced("gateways"), Some(true));
    assert_eq!(
        emu.namespaced(&format!("{GROUP}/v1alpha2/TCPRoute")),
        Some(true)
    );
    // A kind at a version it is not served at is not served.
    assert_eq!(emu.namespaced(&format!("{GROUP}/v1/TCPRoute")), None);
    assert_eq!(emu.namespaced("Namespace"), Some(false));
    assert_eq!(emu.namespaced("example.com/v1/Widget"), None);
    emu.shutdown().await;
}
