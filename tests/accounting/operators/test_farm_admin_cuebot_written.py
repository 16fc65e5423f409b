"""Frames, host stats and local reservations are Cuebot's: the admin shows them, read-only."""

import pytest
from django.urls import reverse

from tests.farms import build_farm

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["shows/frame", "shows/hoststat", "accounting/hostlocal"])
def test_listed_but_never_added_changed_or_deleted(admin_client, model):
    farm = build_farm(managed=False)
    farm.add_proc(cores=250, local=True)
    app, name = model.split("/")

    listing = admin_client.get(reverse(f"admin:{app}_{name}_changelist"))
    add = reverse(f"admin:{app}_{name}_add")

    assert listing.status_code == 200
    assert listing.context["cl"].result_count == 1
    assert add not in listing.content.decode()
    assert admin_client.get(add).status_code == 403
    assert not listing.context["cl"].model_admin.has_delete_permission(listing.wsgi_request)
