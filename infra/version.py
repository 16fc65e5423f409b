"""The service's version on the admin's pages: every page's footer names it
(cuebot_acct/templates/admin/base_site.html), as `cuebot-acct --version`, /healthz and
cuebot_acct_build_info do, all from infra.__version__."""

from django.http import HttpRequest

from infra import __version__


def template_context(request: HttpRequest) -> dict[str, str]:
    return {"service_version": __version__}
