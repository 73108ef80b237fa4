//! gatecmd's MCP surface: tools, resources and notifications over the domain.

pub mod answer;
pub mod board_talk;
pub mod console_access;
pub mod device_filter;
pub mod file_staging;
pub mod handler;
pub mod jobs;
pub mod list_cache;
pub mod notify;
pub mod pace;
pub mod progress;
pub mod reasons;
pub mod resources;
pub mod schema;
pub mod server;
pub mod subscriptions;
pub mod tasks;
pub mod tools;
pub mod views;
