"""Input types, error schemas and the bearer token's reading shared by every endpoint of the API
(docs/api.md, "Errors")."""

from typing import Annotated, Any, Literal

from ninja import Field, Schema
from ninja.errors import HttpError
from pydantic import AfterValidator, BeforeValidator, WithJsonSchema


# PostgreSQL text cannot hold a NUL: a string carrying one would fail in the database (a 500).
# Every string used to look something up is DbText, so such input is a 422 and touches nothing.
def storable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# Also stated in the schema, so clients (and fuzzers) know before sending.
NO_NUL = {"pattern": "^[^\\u0000]*$"}
DbText = Annotated[str, AfterValidator(storable), WithJsonSchema({"type": "string", **NO_NUL})]


class JsonNumber:
    """A JSON number written with a fraction or an exponent (`2.5`, `1e3`), kept as its text.

    The API's parser (infra.api.JsonOnly) reads such numbers into this instead of a
    float: a float cannot hold 0.1 or 2.675 exactly, and cores are stored in exact
    hundredths, so a cores field reads the digits the client wrote. Every other field
    refuses it, as it refused a float: a JSON integer (an int) is all a count takes."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def whole_number(value: object) -> object:
    """JSON integers only: true/false, "5", 1.0 and 1e3 are refused (pydantic would read them
    as 1/0, 5, 1 and 1000)."""
    if isinstance(value, bool | str | float | JsonNumber):
        raise ValueError('must be a JSON integer (digits only: not 1.0, 1e3, true or "5")')
    return value


def json_int(*, ge: int, le: int) -> Any:
    """An integer within [ge, le], stated as minimum/maximum in the schema, read by whole_number."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(whole_number)]


class ErrorOut(Schema):
    detail: str


class MissingPermissionOut(Schema):
    detail: str
    permission: str = Field(description="The Django permission the token's user lacks.")


class InvalidOut(Schema):
    detail: str | list[dict[str, Any]] = Field(
        description="A message, or one {type, loc, msg} per invalid field (loc ends with the field's name)."
    )


# The error answers of an endpoint, for its `response=` (infra.api makes them JSON).
LOOKUP_ERRORS = {404: ErrorOut, 422: InvalidOut}
AUTH_ERRORS = {401: ErrorOut, 403: MissingPermissionOut}


class WritesOffOut(Schema):
    detail: str
    setting: Literal["ACCOUNTING_WRITES"] = Field(description="The setting that keeps this instance from writing.")
    grant: str = Field(description="What the write needs beyond the observer's SELECT, with ACCOUNTING_WRITES=on.")


# An operation that writes: also refused, 403 with the setting named, while ACCOUNTING_WRITES is off.
WRITE_ERRORS = {401: ErrorOut, 403: MissingPermissionOut | WritesOffOut}


class NotJson(Exception):
    """A body sent with a content type other than application/json."""

    def __init__(self, content_type: str | None) -> None:
        super().__init__(f"the body must be application/json, not {content_type or 'no content type'}")


class MissingPermission(HttpError):
    """A valid token whose user lacks the endpoint's permission: 403 naming it."""

    def __init__(self, permission: str) -> None:
        super().__init__(403, f"this token's user lacks the permission {permission}")
        self.permission = permission


class OutcomeUnknownOut(Schema):
    detail: str
    outcome: Literal["unknown"] = Field(description="Whether the request took effect is not known.")
    retry: Literal["safe"] = Field(description="Sending the same request again is safe (Retry-After: when).")


class OutcomeUnknown(HttpError):
    """503 with Retry-After: the request's database connection was lost before its outcome was known
    (it may or may not have committed). Raised only where sending the same request again is safe,
    which the answer says (OutcomeUnknownOut)."""

    retry_after = 1  # seconds: the next request opens a connection of its own

    def __init__(self, detail: str) -> None:
        super().__init__(503, detail)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as django-ninja's HttpBearer reads it
    (the scheme in any case; the token may be empty); None for no header or another scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token if scheme.lower() == "bearer" else None
