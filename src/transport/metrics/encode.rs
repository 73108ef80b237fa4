//! Writing a scrape: OpenMetrics for a scraper that asks for it, else the classic text
//! format 0.0.4.
//!
//! Why both: `prometheus-client` natively writes OpenMetrics, whose counter families are
//! named without `_total` in `# HELP`/`# TYPE` while the samples carry it; a tool reading
//! that as the classic format (Debian's `promtool check metrics` 2.42, `curl | grep`)
//! sees samples without help text. The classic writer names the family `x_total` in
//! HELP/TYPE as that format expects and writes no `# EOF`. Prometheus itself sends
//! `Accept: application/openmetrics-text;…` and gets OpenMetrics.

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::registry::Registry;

/// `Content-Type` of an OpenMetrics answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of a classic text format answer.
pub const CLASSIC: &str = prometheus_text::CONTENT_TYPE;

/// Which exposition format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Classic,
}

impl Format {
    /// The format for this `Accept` header: OpenMetrics when it lists
    /// `application/openmetrics-text` with a weight above 0, else classic.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let asks = accept.is_some_and(|a| {
            a.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or_default();
                media.eq_ignore_ascii_case("application/openmetrics-text")
                    && !parts.any(|p| {
                        p.strip_prefix("q=")
                            .and_then(|q| q.trim().parse::<f32>().ok())
                            .is_some_and(|q| q <= 0.0)
                    })
            })
        });
        if asks {
            Format::OpenMetrics
        } else {
            Format::Classic
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::Classic => CLASSIC,
        }
    }

    /// `registries` one after the other in this format (their names must not overlap).
    pub fn render(self, registries: &[&Registry]) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        for r in registries {
            match self {
                Format::OpenMetrics => text::encode_registry(&mut out, r)?,
                Format::Classic => prometheus_text::encode(&mut out, r)?,
            }
        }
        if self == Format::OpenMetrics {
            text::encode_eof(&mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0, text/plain")),
            Format::Classic
        );
    }

    #[test]
    fn classic_counters_carry_total_in_help_and_type_and_no_eof() {
        let mut r = Registry::with_prefix("gatecmd");
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        r.register("things", "Things", c.clone());
        c.inc();
        let classic = Format::Classic.render(&[&r]).expect("render");
        assert!(
            classic.contains("# TYPE gatecmd_things_total counter\n"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"));
        let om = Format::OpenMetrics.render(&[&r, &r]).expect("render");
        assert!(om.contains("# TYPE gatecmd_things counter\n"), "{om}");
        assert_eq!(om.matches("# EOF").count(), 1);
        assert!(om.ends_with("# EOF\n"));
    }
}
