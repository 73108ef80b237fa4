//! gatecmd's domain: the bench and its rules, below the MCP surface.

pub mod audit;
pub mod boards;
pub mod capture;
pub mod config;
pub mod console;
pub mod exec;
pub mod isolation;
pub mod jobs;
pub mod locks;
pub mod permits;
pub mod progress;
pub mod quotas;
pub mod running;
pub mod staging;
pub mod state;
