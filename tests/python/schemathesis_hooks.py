"""Schemathesis hooks for our OpenAPI documents (SCHEMATHESIS_HOOKS=<this file>).

Every request is signed with Hawk as the official clients sign it (mohawk, which the official
Python client uses), with the credentials in TASKCLUSTER_CLIENT_ID and TASKCLUSTER_ACCESS_TOKEN,
over the exact URL and body that go out. One check is added: every error reply is Taskcluster's
`{code, message, requestInfo}` with a code of its status, and a request that the document says is
valid is never refused as malformed (see `refusable`).
"""

import os
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote

import jsonschema_rs
import mohawk
import requests
import schemathesis

# Upstream's codes, by status (upstream's libraries/api error codes).
CODES = {
    400: {"MalformedPayload", "InvalidRequestArguments", "InputValidationError", "InputError"},
    401: {"AuthenticationFailed"},
    403: {"InsufficientScopes"},
    404: {"ResourceNotFound"},
    406: {"NoMatchingMethod"},
    408: {"RequestTimeout"},
    409: {"RequestConflict"},
    410: {"ResourceExpired"},
    413: {"InputTooLarge"},
    500: {"InternalServerError"},
}

def refusable(body):
    """Whether a request the document says is valid may still be refused with this 400: by a
    rule no schema expresses (InputError), or for a continuationToken that no earlier page gave
    (the document can only say it is a string)."""
    return body["code"] == "InputError" or (
        body["code"] == "InvalidRequestArguments"
        and body["message"].startswith("continuationToken ")
    )



_validators = {}


def _valid(raw, key, schema, value):
    """Whether `value` matches `schema` (a part of the document `raw`, its $refs local)."""
    if key not in _validators:
        _validators[key] = jsonschema_rs.validator_for(dict(schema, components=raw["components"]))
    return _validators[key].is_valid(value)


def conforms(case):
    """Whether the request really is what the document calls valid. Schemathesis also sends
    values taken from earlier replies and requests (a decoded name from an error's requestInfo,
    a list where an id goes) as positive data; those prove nothing about the document."""
    raw = case.operation.schema.raw_schema
    method = case.operation.method.lower()
    op = raw["paths"][case.operation.path][method]
    # Path parameters are kept percent-encoded, as they go out.
    path = {k: unquote(v) if isinstance(v, str) else v for k, v in (case.path_parameters or {}).items()}
    given = {"path": path, "query": case.query or {}}
    for p in op.get("parameters", []):
        if p["name"] in given[p["in"]]:
            key = (case.operation.path, method, p["name"])
            if not _valid(raw, key, p["schema"], given[p["in"]][p["name"]]):
                return False
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None and isinstance(case.body, (dict, list, str, int, float, bool)):
        if not _valid(raw, (case.operation.path, method, None), body["schema"], case.body):
            return False
    return True


class Hawk(requests.auth.AuthBase):
    """Signs the prepared request: method, URL as sent, body hash with its content type."""

    def __init__(self):
        self.credentials = {
            "id": os.environ["TASKCLUSTER_CLIENT_ID"],
            "key": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
            "algorithm": "sha256",
        }

    def __call__(self, r):
        body = r.body or b""
        if isinstance(body, str):
            body = body.encode()
        sender = mohawk.Sender(
            credentials=self.credentials,
            url=r.url,
            method=r.method,
            content=body,
            content_type=r.headers.get("Content-Type", ""),
        )
        r.headers["Authorization"] = sender.request_header
        return r


schemathesis.auth.set_from_requests(Hawk())


@schemathesis.check
def taskcluster_errors(ctx, response, case):
    status = response.status_code
    # 424 is an error artifact's reply (`{reason, message}`), documented as such.
    if status < 400 or status == 424:
        return None
    body = response.json()
    assert isinstance(body, dict), f"error body is not an object: {body!r}"
    assert set(body) == {"code", "message", "requestInfo"}, f"error body keys: {sorted(body)}"
    assert body["code"] in CODES.get(status, ()), f"{status} with code {body['code']}"
    assert isinstance(body["message"], str)
    info = body["requestInfo"]
    assert isinstance(info, dict) and {"method", "params", "payload", "time"} <= set(info), info
    meta = case.meta
    if status == 400 and meta is not None and meta.generation.mode.is_positive and conforms(case):
        assert refusable(body), (
            f"a request the document says is valid was refused: {body['code']}: "
            f"{body['message'].split(chr(10))[0]} ({meta.phase.name} phase)"
        )
    return None


def _at(delta):
    t = datetime.now(timezone.utc) + delta
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _near_now(v):
    """Gives every task definition in `v` times a queue accepts (created now, deadline in an
    hour, expiry in a day): random dates never are, and no task would ever exist."""
    if isinstance(v, dict):
        if isinstance(v.get("created"), str) and isinstance(v.get("deadline"), str):
            v["created"], v["deadline"] = _at(timedelta()), _at(timedelta(hours=1))
            if isinstance(v.get("expires"), str):
                v["expires"] = _at(timedelta(days=1))
        for x in v.values():
            _near_now(x)
    elif isinstance(v, list):
        for x in v:
            _near_now(x)


@schemathesis.hook
def map_case(context, case):
    """Valid requests create real tasks (see `_near_now`), so that the calls linked to their
    creation (claimWork on the task queue, reportCompleted of the claimed run, ...) reach
    something that exists. Invalid requests stay as generated."""
    meta = case.meta
    if meta is not None and meta.generation.mode.is_positive:
        _near_now(case.body)
    return case
