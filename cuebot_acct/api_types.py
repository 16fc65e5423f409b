"""Input types shared by every endpoint of the API.

PostgreSQL text cannot hold a NUL character: a string carrying one reaches the database
only to fail there (a 500). Every string that is used to look something up is this type,
so such input is refused up front with a 422 and nothing is touched.
"""
from typing import Annotated

from pydantic import AfterValidator


def storable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


DbText = Annotated[str, AfterValidator(storable)]
