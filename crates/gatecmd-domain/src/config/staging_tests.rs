//! File staging: limits, write roots and their errors.

use std::path::{Path, PathBuf};

use super::*;

fn errors(text: &str) -> Vec<ConfigError> {
    match Config::parse(text, "test.yaml") {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.0,
    }
}

#[test]
fn defaults_and_implicit_clients_write_everywhere() {
    let c = Config::parse("auth_token: x\nfile_roots: [/srv/a, /srv/b]\n", "t").expect("ok");
    assert_eq!(c.staging.defaults, StagingLimits::default());
    assert_eq!(c.staging.stale_upload_secs, 86400);
    for name in ["default", "anonymous", "stdio"] {
        let p = c.staging.policy(name);
        assert_eq!(p.write_roots, WriteRoots::All, "{name}");
        assert!(p.write_roots.allows(Path::new("/srv/b")));
    }
}

#[test]
fn listed_client_writes_only_its_roots() {
    let c = Config::parse(
        "clients:\n  - name: a\n    token_env: A\n    write_roots: [/srv/b/]\n    staging: {max_file_bytes: 1000}\n  - name: b\n    token_env: B\nfile_roots: [/srv/a, /srv/b]\nstaging:\n  max_chunk_bytes: 1024\n",
        "t",
    )
    .expect("ok");
    let a = c.staging.policy("a");
    assert_eq!(
        a.write_roots,
        WriteRoots::Only(vec![PathBuf::from("/srv/b")])
    );
    assert!(!a.write_roots.allows(Path::new("/srv/a")));
    assert_eq!(a.limits.max_file_bytes, 1000);
    assert_eq!(
        a.limits.max_chunk_bytes, 1024,
        "inherits the section's value"
    );
    let b = c.staging.policy("b");
    assert_eq!(
        b.write_roots,
        WriteRoots::Only(vec![]),
        "nowhere by default"
    );
}

#[test]
fn write_root_must_be_a_file_root() {
    let e = errors(
        "file_roots: [/srv/a]\nclients:\n  - name: a\n    token_env: A\n    write_roots: [/srv/x]\n",
    );
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (5, "clients[0].write_roots[0]")
    );
    assert!(
        e[0].message.contains("not one of file_roots (/srv/a)"),
        "{}",
        e[0]
    );
}

#[test]
fn chunk_must_fit_the_request_body() {
    let e = errors("file_roots: [/srv/a]\nstaging:\n  max_chunk_bytes: 8388608\n");
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (3, "staging.max_chunk_bytes")
    );
    assert!(
        e[0].message.contains("raise limits.max_request_body_bytes"),
        "{}",
        e[0]
    );
    // Raising the body limit makes it valid.
    Config::parse(
        "file_roots: [/srv/a]\nlimits: {max_request_body_bytes: 16777216}\nstaging:\n  max_chunk_bytes: 8388608\n",
        "t",
    )
    .expect("fits");
    // A client override is checked too, at the client's line.
    let e = errors(
        "file_roots: [/srv/a]\nclients:\n  - name: a\n    token_env: A\n    staging: {max_chunk_bytes: 8388608}\n",
    );
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (5, "clients[0].staging.max_chunk_bytes")
    );
}

#[test]
fn entry_quota_depth_and_new_dirs_have_defaults_and_overrides() {
    let d = StagingLimits::default();
    assert_eq!(
        (
            d.quota_entries_per_root,
            d.max_depth,
            d.max_new_dirs_per_call
        ),
        (100_000, 16, 8)
    );
    let c = Config::parse(
        "clients:\n  - name: a\n    token_env: A\n    staging: {max_depth: 4}\nfile_roots: [/srv/a]\nstaging:\n  quota_entries_per_root: 50\n  max_new_dirs_per_call: 2\n",
        "t",
    )
    .expect("ok");
    let a = c.staging.policy("a").limits;
    assert_eq!(
        (
            a.quota_entries_per_root,
            a.max_depth,
            a.max_new_dirs_per_call
        ),
        (50, 4, 2)
    );
    let e = errors("staging:\n  max_depth: 0\n");
    assert_eq!((e[0].line, e[0].field.as_str()), (2, "staging.max_depth"));
}

#[test]
fn zero_limits_and_unknown_keys_are_located() {
    let e = errors("staging:\n  quota_bytes_per_root: 0\n");
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (2, "staging.quota_bytes_per_root")
    );
    let e = errors("staging:\n  max_chunk: 5\n");
    assert_eq!(e[0].line, 2);
    assert!(
        e[0].message.contains("unknown field `max_chunk`"),
        "{}",
        e[0]
    );
}
