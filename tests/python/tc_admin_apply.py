"""Applies desired roles and clients the way tc-admin does: reads the current ones under a
prefix (listRoles, listClients), compares each by description and scopes, and creates,
updates or deletes to match, one call at a time. Three applies: create, change, remove. Prints
one JSON line with what the server held after each."""
import json
import os
import sys

import taskcluster

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
creds = {
    "clientId": os.environ["TASKCLUSTER_CLIENT_ID"],
    "accessToken": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
}
prefix = os.environ["PREFIX"]
auth = taskcluster.Auth({"rootUrl": root_url, "credentials": creds})
# A client that lives as long as tc-admin's do.
FOREVER = "3000-01-01T00:00:00.000Z"


def current():
    roles = {r["roleId"]: r for r in auth.listRoles() if r["roleId"].startswith(prefix)}
    clients = {}
    query = {"prefix": prefix}
    while True:
        page = auth.listClients(query=query)
        for c in page["clients"]:
            clients[c["clientId"]] = c
        if not page.get("continuationToken"):
            break
        query["continuationToken"] = page["continuationToken"]
    return roles, clients


def same(a, b):
    return a["description"] == b["description"] and sorted(a["scopes"]) == sorted(b["scopes"])


def reconcile(kind, current, desired, body=lambda want: want):
    """Creates, updates and deletes resources of `kind` (Role, Client) so that `current`
    becomes `desired`; the calls it made."""
    calls = []
    for name, want in desired.items():
        if name not in current:
            verb = "create"
        elif not same(current[name], want):
            verb = "update"
        else:
            continue
        getattr(auth, verb + kind)(name, body(want))
        calls.append(verb + kind)
    for name in current:
        if name not in desired:
            getattr(auth, "delete" + kind)(name)
            calls.append("delete" + kind)
    return calls


def differs(current, desired):
    return sorted(current) != sorted(desired) or any(not same(current[k], w) for k, w in desired.items())


def described(resources):
    return {k: {"description": v["description"], "scopes": v["scopes"]} for k, v in resources.items()}


def apply(desired_roles, desired_clients):
    roles, clients = current()
    calls = reconcile("Role", roles, desired_roles)
    calls += reconcile(
        "Client", clients, desired_clients, lambda want: dict(want, expires=FOREVER, deleteOnExpiration=False)
    )
    roles, clients = current()
    # A second apply must find nothing to do.
    again = differs(roles, desired_roles) or differs(clients, desired_clients)
    return {"calls": calls, "roles": described(roles), "clients": described(clients), "again": again}


role, client = prefix + "ci", prefix + "worker"
out = {}
out["create"] = apply(
    {role: {"description": "CI", "scopes": ["queue:create-task:highest:proj/*"]}},
    {client: {"description": "a worker", "scopes": ["assume:" + role]}},
)
out["change"] = apply(
    {role: {"description": "CI, and its secrets", "scopes": ["queue:create-task:highest:proj/*", "secrets:get:proj/*"]}},
    {client: {"description": "a worker, renamed", "scopes": ["assume:" + role, "queue:claim-work:proj/*"]}},
)
out["remove"] = apply({}, {})
print(json.dumps(out))
sys.stdout.flush()
