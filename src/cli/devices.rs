//! `gatecmd devices [--watch]`: the device view as MCP clients see it, and hotplug events.

use std::path::PathBuf;
use std::sync::Arc;

use super::startup::{load, start_state};
use gatecmd_domain::audit::Audit;

/// Prints the attached devices; with `watch`, every add/remove/change until Ctrl-C.
pub(super) async fn devices(
    config: Option<PathBuf>,
    json: bool,
    watch: bool,
) -> Result<(), String> {
    use gatecmd_mcp::views::{DeviceList, DeviceView, render_device};
    let (config, _) = load(config)?;
    let config = Arc::new(config);
    // `devices` only looks: it decides nothing, so it records nothing.
    let (state, monitor) = start_state((*config).clone(), Audit::disabled()).await?;
    let view = |d| DeviceView::new(&state, &config, d, "");
    let list = DeviceList {
        devices: state.registry.snapshot().into_iter().map(view).collect(),
        event_source: monitor.source().to_string(),
    };
    if json && !watch {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if !json {
        for d in &list.devices {
            println!("{}", render_device(d));
        }
        if list.devices.is_empty() {
            println!("(no USB devices)");
        }
        println!("event source: {}", list.event_source);
    }
    if !watch {
        return Ok(());
    }
    let mut events = state.registry.subscribe();
    if json {
        let hello = serde_json::json!({"event": "watching", "event_source": list.event_source, "devices": list.devices});
        println!("{hello}");
    } else {
        println!("watching for hotplug events (Ctrl-C to stop)");
    }
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        match ev {
            Ok(ev) => {
                if json {
                    let line = serde_json::json!({"at": now, "source": monitor.source().to_string(), "event": ev});
                    println!("{line}");
                } else {
                    let (what, d) = match &ev {
                        gatecmd_devices::DeviceEvent::Added(d) => ("added  ", d),
                        gatecmd_devices::DeviceEvent::Removed(d) => ("removed", d),
                        gatecmd_devices::DeviceEvent::Changed { new, .. } => ("changed", new),
                    };
                    println!("{now} {what} {}", render_device(&view(d.clone())));
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                println!("{now} (missed {n} events)")
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}
