"""``from tuner_client.client import connect`` (README, docs) is the client API of
``tuner_client/api/client.py``, the same objects, after the tuner's grouping into rooms."""

from __future__ import annotations

import tuner_client.api.client as api_client
import tuner_client.client as public


def test_the_documented_import_is_the_client_api() -> None:
    assert public.__all__ == api_client.__all__
    for name in public.__all__:
        assert getattr(public, name) is getattr(api_client, name), name
