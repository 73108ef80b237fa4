//! Uploads (issue 32): a 64 MiB image into a write root over loopback, streamed by
//! `PUT /upload` against `write_file`'s base64 chunks of 1 MiB over MCP (rmcp's client,
//! one call per chunk, the last with the file's SHA-256), in MB/s of file. Target: the
//! stream at least 10 times as fast.

use std::time::Instant;

use base64::Engine;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::harness::*;
use crate::{Row, Sizes, serve};

fn rate_row(figure: &str, mib: f64, secs: &mut [f64], target: &str, ok: Option<bool>) -> Row {
    secs.sort_by(|a, b| a.total_cmp(b));
    let median = secs[secs.len() / 2];
    Row {
        figure: figure.into(),
        median: format!("{:.1} MB/s", mib * 1.048576 / median),
        p99: format!("{:.1} MB/s", mib * 1.048576 / secs[secs.len() - 1]),
        samples: secs.len(),
        target: target.into(),
        verdict: match ok {
            Some(true) => "met".into(),
            Some(false) => "MISSED".into(),
            None => String::new(),
        },
    }
}

pub async fn rows(z: &Sizes) -> Vec<Row> {
    let mib = if z.events < 50 { 8 } else { 64 };
    let runs = if z.events < 50 { 1 } else { 3 };
    let s = serve(
        &format!(
            "clients:\n  - name: bench-a\n    token: {TOKEN_A}\n    write_roots: [$DIR/images]\nfile_roots: [$DIR/images]\n"
        ),
        &[],
    );
    std::fs::create_dir_all(s.path("images")).expect("images");
    let data: Vec<u8> = (0..mib << 20)
        .map(|i: usize| (i * 31 % 251) as u8)
        .collect();
    let sha = hex::encode(Sha256::digest(&data));
    let http = reqwest::Client::new();
    let mut put = Vec::new();
    for i in 0..runs {
        let t0 = Instant::now();
        let r = http
            .put(format!("{}/upload?path=put-{i}.img&sha256={sha}", s.base))
            .bearer_auth(TOKEN_A)
            .body(data.clone())
            .send()
            .await
            .expect("PUT");
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
        put.push(t0.elapsed().as_secs_f64());
    }
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let mut chunked = Vec::new();
    let b64 = base64::engine::general_purpose::STANDARD;
    for i in 0..runs {
        let t0 = Instant::now();
        let chunks: Vec<&[u8]> = data.chunks(1 << 20).collect();
        for (k, chunk) in chunks.iter().enumerate() {
            let mut args = json!({
                "path": format!("chunked-{i}.img"),
                "offset": k << 20,
                "content_base64": b64.encode(chunk),
            });
            if k + 1 == chunks.len() {
                args["sha256"] = sha.clone().into();
            }
            let r = call(&c, "write_file", args).await;
            assert!(!is_error(&r), "{}", text(&r));
        }
        chunked.push(t0.elapsed().as_secs_f64());
    }
    let _ = c.cancel().await;
    let put_median = {
        let mut v = put.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let chunked_median = {
        let mut v = chunked.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let ratio = chunked_median / put_median;
    vec![
        rate_row(
            &format!("write_file, {mib} MiB in 1 MiB base64 chunks over MCP"),
            mib as f64,
            &mut chunked,
            "",
            None,
        ),
        rate_row(
            &format!("PUT /upload, {mib} MiB streamed ({ratio:.1}x write_file)"),
            mib as f64,
            &mut put,
            ">= 10x write_file",
            Some(ratio >= 10.0),
        ),
    ]
}
