//! Prometheus metrics, the scrape side (docs/METRICS.md): `GET /metrics` in the classic
//! text format or OpenMetrics, as the scraper asks. It reads the state at each scrape; the
//! counters it renders are recorded by `metrics` in `src/metrics/` (core), which never
//! imports this.
//!
//! # Layout
//!
//! - `census`: the gauges that are state (leases, waiters, devices, sessions), read from
//!   `AppState` at each scrape.
//! - `encode`: content negotiation and the two exposition formats.
//! - `route`: the `/metrics` handlers (main bind, `metrics.bind`, both to a token) and the layer
//!   counting HTTP answers.

mod census;
mod encode;
mod route;

pub use encode::Format;
pub use route::{PATH, answer, bind_router, count_status, scrape};
