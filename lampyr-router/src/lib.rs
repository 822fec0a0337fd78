//! fiber-router: serves HTTP/1.1 and h2c, routes each request to a Revision
//! (by KIngress host rules, by Knative's `Knative-Serving-*` headers or by
//! Host), holds requests while a Revision wakes (the activator's role), and
//! scales fibers (the KPA's role).
//!
//! A Revision is any [`Backend`]: locally (`ly run`) `lampyr-fiber`'s
//! `LocalBackend`, fibers in this process; in a cluster ([`cluster`])
//! [`FiberdBackend`]s forwarding to the fiberd instances their Homes list, and
//! the router implements KIngresses of its own class ([`kingress`]). This crate
//! links no hypervisor. See `docs/fiber-router.md`.

pub mod backend;
pub mod body;
pub mod cluster;
pub mod fiberd_backend;
mod forwarded;
pub mod guest;
pub mod http_backend;
pub mod invoke;
pub mod kingress;
pub mod metrics;
pub mod peers;
pub mod route;
pub mod scaler;
pub mod server;
pub mod service_backend;
pub mod services;
pub mod table;
pub mod tls;
mod upstream_pool;
pub mod workers;

pub use backend::{Backend, BackendStats};
pub use body::Body;
pub use cluster::{ClusterConfig, ClusterRoutes};
pub use fiberd_backend::{FiberdBackend, FiberdConfig, Instance};
pub use http_backend::{HttpBackend, HttpLimits};
pub use invoke::{InvokeError, OUTCOMES};
pub use route::{RouteOptions, ServiceTraffic, TrafficRoute};
pub use scaler::{Scaler, ScalerConfig};
pub use server::{Exposure, Router, RouterConfig};
pub use service_backend::ServiceBackend;
pub use table::{HostRoute, PathRoute, RevisionEntry, RouteTable, SplitRoute};
pub use workers::{Listen, Workers, WorkersError};
