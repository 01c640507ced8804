"""Checks each service's OpenAPI document (named in SERVICES, comma-separated) at
TASKCLUSTER_ROOT_URL against the OpenAPI 3.1 meta-schema, the copy schemathesis ships, and prints
one JSON line: {"documents": N, "errors": [...]}."""

import json
import os
import urllib.request

import jsonschema_rs
from schemathesis.specs.openapi.definitions import OPENAPI_31

root = os.environ["TASKCLUSTER_ROOT_URL"]
validator = jsonschema_rs.validator_for(OPENAPI_31)
errors = []
services = os.environ["SERVICES"].split(",")
for service in services:
    with urllib.request.urlopen(f"{root}/api/{service}/v1/openapi.json") as r:
        doc = json.load(r)
    errors += [f"{service}: {e}" for e in validator.iter_errors(doc)]
print(json.dumps({"documents": len(services), "errors": errors}))
