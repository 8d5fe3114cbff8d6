//! The local sandbox: the parts that, together with the API emulator
//! (`kube-emulator`), stand in for a Kubernetes cluster on one machine so the
//! real operator drives real `valkey-server` processes.
//!
//! - [`nodes`] are the Kubernetes nodes the sandbox models (three by
//!   default), each with its own loopback InternalIP and ExternalIP.
//! - [`scheduler`] binds each pending Pod to a node (node selector, pod
//!   anti-affinity, topology spread constraints).
//! - [`kubelet`] runs each Pod bound to one of its nodes as a
//!   `valkey-server` process pinned to its own loopback pod IP, and reports
//!   podIP/hostIP/Ready.
//! - [`proxy`] exposes NodePort (on every node's addresses) and LoadBalancer
//!   Services as TCP listeners on loopback addresses, forwarding each connection to the one pod the
//!   Service port selects; it also acts as the Gateway ([`gateway`]) for
//!   the Gateway API kinds the sandbox serves ([`gateway_api`]), reading
//!   TLS server names with [`sni`]. [`listeners`] keeps both kinds of
//!   listener in step with each tick.
//! - [`server_binary`] finds the `valkey-server` to run.
//! - [`certs`] is the certificate authority that issues (and renews) a TLS
//!   cluster's Secret, as cert-manager would; the kubelet puts a TLS front
//!   before each such pod's plaintext server ([`kubelet::tls_front`]).
//! - [`stack`] puts them together with the emulator and the real operator
//!   loop for one ValkeyCluster: `shardgate sandbox`.
//!
//! Everything is loopback: the whole 127.0.0.0/8 is local on Linux, so pods
//! get addresses like 127.0.1.N and load balancers 127.0.2.N without any
//! network setup (Gateways on 127.0.6.N). There are no namespaces, cgroups or images; each module
//! documents what it models and what it does not.

pub mod certs;
pub mod gateway;
pub mod gateway_api;
mod ip_pool;
pub mod kubelet;
mod listeners;
pub mod nodes;
pub mod proxy;
pub mod scheduler;
pub mod server_binary;
pub mod sni;
pub mod stack;
