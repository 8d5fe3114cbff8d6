//! What shardgate's tests and benches share: the operator against the API
//! emulator ([`harness`]), waiting with deadlines ([`wait`]), proptest
//! strategies for the guest's input ([`strategies`]) and whole inputs with
//! Valkey topology facts for the fuzz test ([`fuzz`]), a model of what
//! applying a desired state produces ([`apply`]), the data-path checks
//! against a real Valkey cluster ([`valkey`]) and the end-to-end steps
//! through the sandbox ([`e2e`]), the chaos suite's parts ([`chaos`]), clusters of a given size ([`sizes`]), the modules the swap tests
//! load ([`modules`]), scratch directories ([`scratch`]), and the benches'
//! invocation, timing statistics and machine line ([`bench`]).

pub mod apply;
pub mod bench;
pub mod chaos;
pub mod e2e;
pub mod fuzz;
pub mod harness;
pub mod modules;
pub mod scratch;
pub mod sizes;
pub mod strategies;
pub mod valkey;
pub mod wait;
