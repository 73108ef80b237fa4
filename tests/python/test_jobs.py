"""Jobs with the official MCP Python SDK (issue 23): a job belongs to its client, not to
the session that started it. A job started in one session is found, followed and
finished from a new session of the same client; another client is refused it."""

from __future__ import annotations

import pytest

from conftest import TOKEN_A, TOKEN_B, connect

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_job_outlives_its_session_and_is_its_clients_only(server, mode):
    # `flash` prints five progress lines over about a second.
    async with connect(server.url, TOKEN_A, mode) as first:
        r = await first.call_tool(
            "execute_command", {"command": "flash", "args": ["wl", "7"], "background": True}
        )
        assert r.is_error is not True, r
        job = r.structured_content["job"]
        assert job.startswith("job-")
    # The first session is closed (a legacy one ended with DELETE); the job runs on.
    async with connect(server.url, TOKEN_B, mode) as other:
        listed = await other.call_tool("list_jobs", {})
        assert all(j["job"] != job for j in listed.structured_content["jobs"]), listed.structured_content
        refused = await other.call_tool("wait_job", {"job": job, "timeout_secs": 0})
        assert refused.is_error is True
        assert refused.structured_content["refusal"]["reason"] == "not_found"
        assert "list_jobs" in refused.structured_content["refusal"]["message"]
    async with connect(server.url, TOKEN_A, mode) as second:
        listed = await second.call_tool("list_jobs", {})
        assert any(j["job"] == job for j in listed.structured_content["jobs"]), listed.structured_content
        done = await second.call_tool("wait_job", {"job": job, "timeout_secs": 30})
        s = done.structured_content
        assert s["state"] == "succeeded", s
        assert s["exit_code"] == 0
        assert s["client"] == "vm-a"
        assert "(100%)" in s["stdout"] and s["stdout"].endswith("Write LBA from file OK.\n"), s["stdout"]
        resource = await second.read_resource(f"gatecmd://jobs/{job}")
        assert f'"{job}"' in resource.contents[0].text
