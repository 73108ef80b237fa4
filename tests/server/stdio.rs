//! `gatecmd stdio`: the same handler over stdin/stdout, driven by rmcp's child-process client.

use crate::harness;

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

#[tokio::test]
async fn stdio_serves_the_same_tools() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "commands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args: [{pattern: \"{w}\"}]\n").expect("write");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"));
    // The audit log goes to the state directory: keep it out of the tester's home.
    cmd.arg("stdio")
        .arg("--config")
        .arg(&cfg)
        .env("STATE_DIRECTORY", dir.path().join("state"));
    let transport = TokioChildProcess::new(cmd).expect("spawn");
    let client = ().serve(transport).await.expect("initialize over stdio");
    let tools = client.list_all_tools().await.expect("tools");
    assert!(tools.iter().any(|t| t.name == "execute_command"));
    let r = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("execute_command").with_arguments(
                json!({"command": "echo", "args": ["via stdio"]})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("call");
    assert_eq!(harness::structured(&r)["stdout"], json!("via stdio\n"));
    client.cancel().await.expect("close");
    let audit =
        crate::harness::settled_audit(dir.path().join("state/audit.log")).expect("audit log");
    assert!(
        audit.contains("\"client\":\"stdio\"") && audit.contains("execute_finished"),
        "{audit}"
    );
}
