//! gatecmd: a device-aware, allowlisted command gateway spoken over MCP.
pub mod locks;
