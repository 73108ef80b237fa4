//! Lane 1 of scripts/cargo-tests.sh, after every crate's unit tests: the server over its wire
//! and its files (MCP and HTTP, tools and jobs, flash_board with a fake tool, test plans and
//! lab peers on pty boards, uploads, abuse, audit, page, CLI, install, reload) and the checks
//! that read the tree (docs_truth, structure, use_cases, test_binaries).
//!
//! One test binary, a module per topic (tests/server/<topic>.rs): the suite links
//! once per lane, not once per file (README.md, "Development"). A new topic is a
//! file in tests/server/ and its `mod` line here (tests/server/test_binaries.rs checks both).

// The modules every topic may use, in tests/<name>/mod.rs.
#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;
#[path = "../modgraph/mod.rs"]
mod modgraph;
#[path = "../sim_board/mod.rs"]
mod sim_board;

mod abuse_audit;
mod abuse_files;
mod abuse_http;
mod abuse_jobs;
mod abuse_mcp2;
mod abuse_output;
mod abuse_page2;
mod abuse_staging;
mod audit_chain;
mod audit_log;
mod cli_check;
mod deb_package;
mod docs_truth;
mod exec;
mod files;
mod flash_board;
mod install;
mod jobs_tasks;
mod lab_peers;
mod listeners;
mod long_running;
mod mcp_http;
mod metrics;
mod page;
mod proptest_policy;
mod recipes;
mod refusals;
mod reload;
mod stdio;
mod structure;
mod test_binaries;
mod test_plans;
mod upload;
mod use_cases;
