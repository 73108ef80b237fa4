"""Uploads as an agent on the official MCP Python SDK makes them (issue 32; docs/PERFORMANCE.md
"flash_board"): a 64 MiB image into a write root over loopback, by `PUT /upload` (httpx2,
the SDK's own HTTP client, one streamed request with the SHA-256; and `curl -T` as
docs/TOOLS.md shows it, the token read from a file, not argv) against `write_file`
(base64 in MCP calls of 1 MiB and of 4 MiB, the last with the SHA-256; the config raises
`staging.max_chunk_bytes` to 4 MiB and the body limit to 8 MiB for them), in MB/s of file,
median of RUNS. The release server (`GATECMD_BIN`, default target/release/gatecmd) is
started here with a config of its own. `UPLOAD_BENCH_DIR` puts the work directory (the
write root among it) on another filesystem: `/dev/shm` takes the disk out, so what is left
is the server's own cost per byte.

  .venv/bin/python benches/upload_python.py
  UPLOAD_BENCH_DIR=/dev/shm .venv/bin/python benches/upload_python.py
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import socket
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx  # the SDK's own HTTP client (mcp 2.3 ships httpx2)
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
SIZE = 64 * MIB
RUNS = int(os.environ.get("UPLOAD_BENCH_RUNS", "3"))
TOKEN = "upload-bench-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def write_file(url: str, data: bytes, path: str, chunk: int) -> float:
    digest = hashlib.sha256(data).hexdigest()
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
            s = time.monotonic()
            off = 0
            while off < len(data):
                piece = data[off : off + chunk]
                args = {"path": path, "content_base64": base64.b64encode(piece).decode(), "offset": off}
                if off + len(piece) >= len(data):
                    args["sha256"] = digest
                r = await c.call_tool("write_file", args)
                assert r.is_error is not True, r.content
                off = r.structured_content["next_offset"]
            return time.monotonic() - s


async def put(base: str, data: bytes, path: str) -> float:
    digest = hashlib.sha256(data).hexdigest()
    async with httpx.AsyncClient(timeout=None) as http:
        s = time.monotonic()

        async def body():
            for off in range(0, len(data), 4 * MIB):
                yield data[off : off + 4 * MIB]

        r = await http.put(
            f"{base}/upload",
            params={"path": path, "sha256": digest},
            headers={"Authorization": f"Bearer {TOKEN}"},
            content=body(),
        )
        took = time.monotonic() - s
        assert r.status_code == 200 and r.json()["complete"], r.text
        return took


def curl(base: str, src: Path, headers: Path, path: str, digest: str) -> float:
    s = time.monotonic()
    out = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "-H", f"@{headers}", "-T", str(src),
         f"{base}/upload?path={path}&sha256={digest}"],
        capture_output=True, text=True, check=False,
    )
    took = time.monotonic() - s
    assert out.returncode == 0 and '"complete":true' in out.stdout, (out.returncode, out.stdout, out.stderr)
    return took


async def main() -> None:
    binary = os.environ.get("GATECMD_BIN") or str(REPO / "target/release/gatecmd")
    work = Path(tempfile.mkdtemp(prefix="gatecmd-upload-bench.", dir=os.environ.get("UPLOAD_BENCH_DIR")))
    (work / "root").mkdir()
    port = free_port()
    cfg = work / "config.yaml"
    cfg.write_text(
        f"clients:\n  - name: a\n    token: {TOKEN}\n    write_roots: [{work}/root]\n"
        f"file_roots: [{work}/root]\nstaging:\n  max_chunk_bytes: {4 * MIB}\n"
        # 4 MiB of base64 and its envelope fit 8 MiB.
        f"limits:\n  max_request_body_bytes: {8 * MIB}\n"
    )
    cfg.chmod(stat.S_IRUSR | stat.S_IWUSR)
    server = subprocess.Popen(
        [binary, "serve", "--config", str(cfg), "--bind", f"127.0.0.1:{port}"],
        env={**os.environ, "STATE_DIRECTORY": str(work / "state"), "GATECMD_LOG": "warn"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in server.stderr:
            if line.startswith("gatecmd: listening on "):
                break
        base = f"http://127.0.0.1:{port}"
        data = os.urandom(SIZE)
        src = work / "src.img"
        src.write_bytes(data)
        headers = work / "headers"
        headers.write_text(f"Authorization: Bearer {TOKEN}\n")
        headers.chmod(stat.S_IRUSR | stat.S_IWUSR)
        digest = hashlib.sha256(data).hexdigest()
        rows = {"PUT /upload (curl -T)": [], "PUT /upload (httpx2, streamed)": [], "write_file, 1 MiB chunks": [], "write_file, 4 MiB chunks": []}
        for i in range(RUNS):
            rows["PUT /upload (curl -T)"].append(curl(base, src, headers, f"curl{i}.img", digest))
            rows["PUT /upload (httpx2, streamed)"].append(await put(base, data, f"put{i}.img"))
            rows["write_file, 1 MiB chunks"].append(await write_file(f"{base}/mcp", data, f"w1-{i}.img", MIB))
            rows["write_file, 4 MiB chunks"].append(await write_file(f"{base}/mcp", data, f"w4-{i}.img", 4 * MIB))
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(work)], capture_output=True, text=True, check=False).stdout.strip()
        print(f"| upload of {SIZE // MIB} MiB over loopback into {work} ({fs}), Python (median of {RUNS}) | MB/s |")
        print("|---|---|")
        curl_rate = SIZE / 1e6 / statistics.median(rows["PUT /upload (curl -T)"])
        put_rate = SIZE / 1e6 / statistics.median(rows["PUT /upload (httpx2, streamed)"])
        for name, secs in rows.items():
            rate = SIZE / 1e6 / statistics.median(secs)
            if "write_file" in name:
                print(f"| {name} | {rate:.1f} (PUT is {curl_rate / rate:.1f}× faster with curl, {put_rate / rate:.1f}× with httpx2) |")
            else:
                print(f"| {name} | {rate:.1f} |")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "tests" / "python"))
    asyncio.run(main())
