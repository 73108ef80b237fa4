//! `gatecmd leases` lists the leases of the running server; `gatecmd leases end LEASE_ID`
//! ends one (docs/OPERATING.md). An MCP client of the server like `gatecmd approve`
//! (`mcp_client.rs`): the list is `list_locks` and the end is `unlock_device`, the tool
//! every client ends a lease with (the unlock use case), so who may end which lease is
//! decided by the same code: an `admin` client's token ends anyone's (recorded as
//! `force_released` by that operator, and the board's `on_release` runs), another
//! client's only its own.

use serde_json::{Value, json};

use super::mcp_client::{Target, call_tool};

/// Prints every lease (`json`: the `list_locks` answer as it came).
pub async fn list(t: Target, json_out: bool) -> Result<(), String> {
    let answer = call_tool(t, "list_locks", json!({})).await?;
    let v = answer.structured;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let leases: Vec<&Value> = (v["locks"].as_array().into_iter().flatten())
        .filter(|l| l["held_by"] == "lease")
        .collect();
    if leases.is_empty() {
        println!("no leases");
        return Ok(());
    }
    println!("KEY\tHOLDER\tLEASE\tSINCE\tEXPIRES\tWAITING\tNOTE");
    for l in leases {
        let s = |k: &str| l[k].as_str().unwrap_or("-").to_string();
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            s("key"),
            s("holder"),
            s("lease_id"),
            s("since"),
            s("lease_expires_at"),
            l["queue_len"].as_u64().unwrap_or(0),
            s("note")
        );
    }
    if v["omitted"].as_u64().unwrap_or(0) > 0 {
        println!("({} more keys not listed: leases.max_listed)", v["omitted"]);
    }
    Ok(())
}

/// Ends lease `id`.
pub async fn end(t: Target, id: String) -> Result<(), String> {
    let answer = call_tool(t, "unlock_device", json!({"lease": id})).await?;
    print!("{}", answer.text);
    Ok(())
}
