//! fiber-router: serves HTTP/1.1 and h2c, routes each request to a Revision
//! (by KIngress host rules, by Knative's `Knative-Serving-*` headers or by
//! Host), holds requests while a Revision wakes (the activator's role), and
//! scales fibers (the KPA's role).
//!
//! Locally (`ly run`) Revisions are [`LocalBackend`]s in this process; in a
//! cluster ([`cluster`]) they are [`FiberdBackend`]s forwarding to the fiberd
//! instances their Homes list, and the router implements KIngresses of its
//! own class ([`kingress`]). See `docs/fiber-router.md`.

pub mod backend;
pub mod cluster;
pub mod fiberd_backend;
mod forwarded;
pub mod peers;
pub mod http_backend;
pub mod kingress;
pub mod local;
pub mod metrics;
pub mod scaler;
pub mod server;
pub mod table;

pub use backend::{Backend, BackendStats};
pub use cluster::{ClusterConfig, ClusterRoutes};
pub use fiberd_backend::{FiberdBackend, FiberdConfig, Instance};
pub use http_backend::{HttpBackend, HttpLimits};
pub use local::LocalBackend;
pub use scaler::{Scaler, ScalerConfig};
pub use server::{Exposure, Router, RouterConfig};
pub use table::{HostRoute, PathRoute, RevisionEntry, RouteTable, ServiceRoute, SplitRoute};
