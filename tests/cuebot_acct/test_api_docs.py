"""/api/v1/docs works without internet: the page loads Swagger UI from this service's own
static files (shipped with django-ninja), and each of them is served, found where the installed
package keeps them (WHITENOISE_USE_FINDERS: no collectstatic)."""

import json
import re

from django.test import Client

SOURCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def test_the_docs_page_references_only_local_static_files_and_they_are_served(db):
    client = Client()
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    urls = SOURCES.findall(html)
    assert any(url.endswith("swagger-ui-bundle.js") for url in urls), html
    assert all(url.startswith("/static/") for url in urls), urls
    assert "//" not in " ".join(urls)
    swagger_settings = json.loads(re.search(r'id="swagger-settings">(.*?)</script>', html, re.S).group(1))
    assert swagger_settings["validatorUrl"] is None  # no call to validator.swagger.io
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert b"".join(response.streaming_content if response.streaming else [response.content]), url
    assert client.get("/api/v1/openapi.json").status_code == 200
