//! The AzureEventGridSource adapter as a library, no hypervisor: it receives Azure Event
//! Grid push deliveries as Event Grid sends them and sends each event on to the source's
//! sink as a CloudEvent, and runs the sources' lifecycle (sink resolution and status).
//!
//! - [`delivery`]: what a delivery asks for (validation handshakes, Event Grid schema and
//!   CloudEvents schema events, batches), as a pure function of the request.
//! - [`send`]: a CloudEvent to a sink in binary mode.
//! - [`sources`]: the source controller and the table of sinks it keeps.
//! - [`server`]: the HTTP endpoint, `/<namespace>/<name>` per source.
//!
//! The `eventgrid-adapter` binary runs the controller and the endpoint in one process for
//! every source in the cluster. Creating the Event Grid subscription that points at it is
//! the Azure provider's (see `docs/eventing.md`).

pub mod delivery;
pub mod send;
pub mod server;
pub mod sources;
