"""Shared fixtures: the async backends every async test runs on."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each anyio test on asyncio and on trio."""
    return str(request.param)
