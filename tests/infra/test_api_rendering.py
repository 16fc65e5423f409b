"""The API's answers are written by orjson (infra.api.OrjsonRenderer), in the JSON ninja's
own encoder wrote before: the same values, datetimes in Django's format."""

import json
from datetime import UTC, datetime
from decimal import Decimal

from ninja.responses import NinjaJSONEncoder

from infra.api import OrjsonRenderer, api


def test_the_api_renders_with_orjson():
    assert isinstance(api.renderer, OrjsonRenderer)


def test_orjson_writes_what_ninjas_encoder_wrote():
    data = {
        "names": {"show": "pipe", "job": "ünïcode", "dept": None},
        "cores": 2.5,
        "cores_centicores": 250,
        "checked_at": datetime(2026, 11, 26, 22, 0, 0, 123456, tzinfo=UTC),
        "exact": Decimal("2.50"),
        "results": [{"status": "released"}, {"status": "not_found", "release": None}],
        "by_count": {3: "three", True: "yes", None: "none"},
    }
    rendered = OrjsonRenderer().render(None, data, response_status=200)  # type: ignore[arg-type]
    assert isinstance(rendered, bytes)
    assert json.loads(rendered) == json.loads(json.dumps(data, cls=NinjaJSONEncoder))
    assert json.loads(rendered)["checked_at"] == "2026-11-26T22:00:00.123Z"
