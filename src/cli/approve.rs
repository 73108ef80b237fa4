//! `gatecmd approve ID [--note TEXT]` and `gatecmd deny ID [--note TEXT]`: the host's
//! approver decides a pending approval request (docs/APPROVALS.md), as an MCP client of
//! the running server (`mcp_client.rs`): it calls the `approve`/`deny` tool, so who may
//! decide is checked by the same code as every approver's, and the decision is audited
//! under that client's name.

use serde_json::{Value, json};

use super::mcp_client::{Target, call_tool};

/// Approves (or denies) request `id` with `note`; prints the outcome.
pub async fn decide(
    id: String,
    note: Option<String>,
    approve: bool,
    t: Target,
) -> Result<(), String> {
    let mut args = json!({"approval": id});
    if let Some(n) = note {
        args["note"] = Value::String(n);
    }
    let tool = if approve { "approve" } else { "deny" };
    let answer = call_tool(t, tool, args).await?;
    print!("{}", answer.text);
    Ok(())
}
