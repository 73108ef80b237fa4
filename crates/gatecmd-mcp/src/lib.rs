//! gatecmd's MCP surface: tools, resources and notifications over the domain.

pub mod list_cache;
pub mod notify;
pub mod pace;
pub mod progress;
pub mod resources;
pub mod server;
pub mod subscriptions;
pub mod tools;
pub mod views;
