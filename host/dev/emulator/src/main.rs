//! `kube-emulator [--port N] [--kubeconfig PATH] [--crd FILE]... [--statefulset-controller]
//! [--instant-pods] [--service-node-port-range LOW-HIGH]`
//!
//! Runs the emulator until interrupted, e.g. for a local sandbox.

use kube_emulator::{CustomResource, Emulator};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut builder = Emulator::builder();
    let mut kubeconfig = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => builder = builder.port(args.next().unwrap_or_default().parse()?),
            "--kubeconfig" => kubeconfig = args.next(),
            "--crd" => {
                let path = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--crd needs a file"))?;
                builder = builder.custom_resource(CustomResource::from_crd_yaml(
                    &std::fs::read_to_string(path)?,
                )?);
            }
            "--statefulset-controller" => builder = builder.statefulset_controller(true),
            "--instant-pods" => builder = builder.instant_pods(true),
            "--service-node-port-range" => {
                let range = args.next().unwrap_or_default();
                let (lo, hi) = range.split_once('-').ok_or_else(|| {
                    anyhow::anyhow!("--service-node-port-range wants LOW-HIGH, got {range:?}")
                })?;
                builder = builder.node_port_range(lo.parse()?..=hi.parse()?);
            }
            "--auto-create-namespaces" => builder = builder.auto_create_namespaces(true),
            "--namespace" => builder = builder.namespace(&args.next().unwrap_or_default()),
            other => anyhow::bail!(
                "unknown argument {other}; usage: kube-emulator [--port N] [--kubeconfig PATH] [--crd FILE]... [--namespace NS]... [--statefulset-controller] [--instant-pods] [--service-node-port-range LOW-HIGH] [--auto-create-namespaces]"
            ),
        }
    }
    let emu = builder.start().await?;
    if let Some(path) = kubeconfig {
        emu.write_kubeconfig(&path)?;
        eprintln!("kubeconfig written to {path}");
    }
    println!("{}", emu.url());
    tokio::signal::ctrl_c().await?;
    emu.shutdown().await;
    Ok(())
}
