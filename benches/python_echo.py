"""gatecmd benchmark helper: sequential `execute_command` calls of /usr/bin/echo through the
official MCP Python SDK, the client most tools use. benches/gatecmd.rs runs it with .venv's
Python and reads the one JSON line it prints: {"ms": [latency of each timed call]}.

usage: python_echo.py URL TOKEN MODE(legacy|auto) CALLS
"""

import asyncio
import json
import sys
import time

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url: str, token: str, mode: str, calls: int) -> None:
    args = {"command": "echo", "args": ["hello", "world"]}
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            for _ in range(20):
                await client.call_tool("execute_command", args)
            ms = []
            for _ in range(calls):
                t = time.perf_counter()
                r = await client.call_tool("execute_command", args)
                ms.append((time.perf_counter() - t) * 1000.0)
                if r.is_error:
                    raise SystemExit(f"execute_command failed: {r.content}")
    print(json.dumps({"ms": ms}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
