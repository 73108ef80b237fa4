//! `PUT /upload` (issue 32): a file streamed into a client's write root over plain HTTP with
//! the client's token, by the real binary; the same rules as `write_file` (write roots,
//! hidden temporary file, SHA-256), and an upload cut off mid-body continued from where it
//! stopped.

mod harness;

use std::time::Duration;

use harness::{Server, TOKEN_A, TOKEN_B};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
    write_roots: [$DIR/images]
  - name: vm-b
    token: {TOKEN_B}
file_roots: [$DIR/images]
"#
    )
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[i % 4] ^ seed)
        .collect()
}

fn hex_sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

async fn put(s: &Server, token: Option<&str>, query: &str, body: Vec<u8>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .put(format!("{}/upload?{query}", s.base))
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.expect("PUT");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(s: &Server, query: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{}/upload?{query}", s.base))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_streams_into_the_root_and_an_interrupted_upload_goes_on() {
    let s = Server::start(&config());
    std::fs::create_dir_all(s.path("images")).expect("images");
    let image = data(9 << 20, 7);

    // Whole, in one request; the server hashes it and says the hash.
    let (status, v) = put(
        &s,
        Some(TOKEN_A),
        "path=a/one.img&final=true",
        image.clone(),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["received"], image.len(), "{v}");
    assert_eq!(v["sha256"], hex_sha(&image), "{v}");
    assert_eq!(
        std::fs::read(s.path("images/a/one.img")).expect("file"),
        image
    );

    // Cut off mid-body: a raw request that sends 5 MiB of a declared 9 MiB and closes.
    let addr = s.base.trim_start_matches("http://").to_string();
    {
        use tokio::io::AsyncWriteExt;
        let mut sock = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let head = format!(
            "PUT /upload?path=two.img&sha256={} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN_A}\r\nContent-Length: {}\r\n\r\n",
            hex_sha(&image),
            image.len()
        );
        sock.write_all(head.as_bytes()).await.expect("head");
        sock.write_all(&image[..5 << 20]).await.expect("part");
        sock.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The server keeps what arrived in whole pieces, hidden; nothing under the name. Its
    // writer may still be storing the last pieces when the first GET answers: the figure
    // is read once it has stopped growing (the same twice, 300 ms apart).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = None;
    let received = loop {
        let (status, v) = get(&s, "path=two.img").await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["complete"], false, "{v}");
        let r = v["received"].as_u64().unwrap_or(0);
        if (r > 0 && last == Some(r)) || std::time::Instant::now() > deadline {
            break r;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(received > 0 && received <= 5 << 20, "{received}");
    assert!(!s.path("images/two.img").exists());
    // Going on at the wrong offset is refused; at the right one it completes, checked.
    let (status, v) = put(
        &s,
        Some(TOKEN_A),
        "path=two.img&offset=1&final=true",
        vec![1],
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (409, Some("upload_state")),
        "{v}"
    );
    let rest = image[received as usize..].to_vec();
    let q = format!("path=two.img&offset={received}&sha256={}", hex_sha(&image));
    let (status, v) = put(&s, Some(TOKEN_A), &q, rest).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["complete"].as_bool(), v["bytes"].as_u64()),
        (Some(true), Some(image.len() as u64 - received)),
        "{v}"
    );
    assert_eq!(
        std::fs::read(s.path("images/two.img")).expect("file"),
        image
    );

    // A wrong hash: refused, nothing under the name.
    let q = format!("path=three.img&sha256={}", "0".repeat(64));
    let (status, v) = put(&s, Some(TOKEN_A), &q, data(1 << 20, 1)).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (422, Some("hash_mismatch")),
        "{v}"
    );
    assert!(!s.path("images/three.img").exists());

    // Who may: no token, a client without write roots, a path outside the roots.
    let (status, _) = put(&s, None, "path=x.img&final=true", vec![1]).await;
    assert_eq!(status, 401);
    let (status, v) = put(&s, Some(TOKEN_B), "path=x.img&final=true", vec![1]).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (403, Some("not_permitted")),
        "{v}"
    );
    let (status, v) = put(&s, Some(TOKEN_A), "path=../x.img&final=true", vec![1]).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_path")),
        "{v}"
    );
    assert!(!s.path("x.img").exists());

    // Audited: the finished uploads with their size and hash.
    let log = std::fs::read_to_string(s.path("state/audit.log")).expect("audit");
    assert!(
        log.lines()
            .any(|l| l.contains("\"finalize\"") && l.contains(&hex_sha(&image))),
        "{log}"
    );
}
