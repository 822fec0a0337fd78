//! fiber-router: serves HTTP/1.1 and h2c, routes each request to a Revision
//! (by Knative's `Knative-Serving-*` headers or by Host), holds requests while
//! a Revision wakes (the activator's role), and scales fibers (the KPA's role).

pub mod backend;
pub mod http_backend;
pub mod local;
pub mod metrics;
pub mod scaler;
pub mod server;
pub mod table;

pub use backend::{Backend, BackendStats};
pub use http_backend::{HttpBackend, HttpLimits};
pub use local::LocalBackend;
pub use scaler::{Scaler, ScalerConfig};
pub use server::{Router, RouterConfig};
pub use table::{RevisionEntry, RouteTable, ServiceRoute};
