"""Build information, anonymous (seed 001 §5.4): the same answer as ``jobgate --version``, and
nothing about the deployment."""

from __future__ import annotations

from tests.api.conftest import World

import jobgate
from jobgate.buildinfo import version_line
from jobgate.store.migrate import HEAD


def test_buildinfo_is_anonymous_and_names_the_build_only(world: World) -> None:
    for path in ("/api/v1/buildinfo", "/buildinfo.json"):
        got = world.client.get(path)
        assert got.status_code == 200
        body = got.json()
        assert body["name"] == "jobgate" and body["version"] == jobgate.__version__ and body["schema"] == HEAD
        assert set(body) == {"name", "version", "schema", "python"}
        assert f"jobgate {body['version']} (schema {HEAD}, Python {body['python']})" == version_line()
