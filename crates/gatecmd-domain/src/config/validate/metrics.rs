//! `metrics:`: the listed clients exist, and `metrics.bind` is an address other than the
//! main bind (it serves `/metrics` to the same tokens).

use std::net::SocketAddr;

use super::super::metrics::{MetricsSettings, RawMetrics};
use super::super::schema::ClientConfig;
use super::super::values::parse_bind;
use super::validator::Validator;

impl Validator {
    pub(super) fn metrics(
        &mut self,
        raw: RawMetrics,
        clients: &[ClientConfig],
        bind: SocketAddr,
    ) -> MetricsSettings {
        // With no client configured, the generated token's client is `default`.
        let known: Vec<&str> = if clients.is_empty() {
            vec!["default"]
        } else {
            clients.iter().map(|c| c.name.as_str()).collect()
        };
        for (i, name) in raw.clients.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                let at = self.at(&format!("metrics.clients[{i}]"));
                self.err(
                    at,
                    format!("metrics.clients[{i}]"),
                    format!(
                        "unknown client {name:?}; configured clients: {}",
                        known.join(", ")
                    ),
                );
            }
        }
        let metrics_bind = raw.bind.and_then(|b| {
            let at = self.at("metrics.bind");
            let addr = self.value(parse_bind(&b), at, "metrics.bind".into())?;
            if addr == bind {
                self.err(
                    at,
                    "metrics.bind".into(),
                    format!(
                        "{addr} is the main bind; give metrics.bind its own port (the main bind \
                         serves /metrics already, to a client's token)"
                    ),
                );
                return None;
            }
            Some(addr)
        });
        MetricsSettings {
            enabled: raw.enabled,
            clients: raw.clients,
            bind: metrics_bind,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn errors(yaml: &str) -> String {
        Config::parse(yaml, "t.yaml")
            .expect_err("must be refused")
            .to_string()
    }

    #[test]
    fn listed_clients_must_exist_and_the_bind_must_be_its_own() {
        let e = errors(
            "clients:\n  - name: vm-a\n    token: aaaaaaaaaaaaaaaaaaaa\nmetrics:\n  clients: [vm-b]\n",
        );
        assert!(
            e.contains("t.yaml:5") && e.contains("metrics.clients[0]") && e.contains("vm-a"),
            "{e}"
        );
        let e = errors("bind: 127.0.0.1:9222\nmetrics:\n  bind: 127.0.0.1:9222\n");
        assert!(e.contains("is the main bind"), "{e}");
        let ok = Config::parse(
            "metrics:\n  clients: [default]\n  bind: '[::1]:9223'\n",
            "t.yaml",
        )
        .expect("valid");
        assert_eq!(ok.metrics.bind, Some("[::1]:9223".parse().expect("addr")));
        assert!(ok.metrics.enabled);
    }
}
