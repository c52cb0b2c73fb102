"""Edges of the Skills extension and the skill:// resources (SPEC §8.2, §12), through the SDK client on both eras."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter
from support import ERAS, connect, deployment_for, write_skill

pytestmark = pytest.mark.anyio

_RAW = TypeAdapter(dict[str, Any])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(client: Any, method: str, **params: Any) -> dict[str, Any]:
    return await client.session.send_request(types.Request[dict[str, Any], str](method=method, params=params), _RAW)


async def refusal(client: Any, method: str, **params: Any) -> str:
    with pytest.raises(MCPError) as caught:
        await call(client, method, **params)
    assert caught.value.error.code == types.INVALID_PARAMS
    return caught.value.error.message


@pytest.mark.parametrize("era", ERAS)
async def test_a_listed_uri_of_a_long_non_ascii_path_is_quoted_whole_in_refusals(root: Any, era: str) -> None:
    # 913 characters pass §6.1's 1024, but percent-encoded the URI is 5427: §12.4 wants «<uri>» verbatim.
    rel = "/".join(["é" * 100] * 9) + "/f.md"
    write_skill(root, "alpha", files={rel: "deep\n"})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        uri = [resource.uri for resource in (await client.list_resources()).resources][1]
        assert len(uri) > 5000
        assert (await client.read_resource(uri, cache_mode="bypass")).contents[0].text == "deep\n"
        assert f'no skill is served at "{uri}";' in await refusal(client, "skills/get", uri=uri)
        assert f'"{uri}" is not a directory resource;' in await refusal(client, "resources/directory/read", uri=uri)
        with pytest.raises(MCPError) as undecodable:
            await client.read_resource(uri + "%FF", cache_mode="bypass")
        assert undecodable.value.error.message == f'"{uri}%FF" does not decode to a UTF-8 path'
