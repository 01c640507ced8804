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


def apply(desired_roles, desired_clients):
    calls = []
    roles, clients = current()
    for rid, want in desired_roles.items():
        if rid not in roles:
            auth.createRole(rid, want)
            calls.append("createRole")
        elif not same(roles[rid], want):
            auth.updateRole(rid, want)
            calls.append("updateRole")
    for rid in roles:
        if rid not in desired_roles:
            auth.deleteRole(rid)
            calls.append("deleteRole")
    for cid, want in desired_clients.items():
        body = dict(want, expires=FOREVER, deleteOnExpiration=False)
        if cid not in clients:
            auth.createClient(cid, body)
            calls.append("createClient")
        elif not same(clients[cid], want):
            auth.updateClient(cid, body)
            calls.append("updateClient")
    for cid in clients:
        if cid not in desired_clients:
            auth.deleteClient(cid)
            calls.append("deleteClient")
    roles, clients = current()
    return {
        "calls": calls,
        "roles": {k: {"description": v["description"], "scopes": v["scopes"]} for k, v in roles.items()},
        "clients": {k: {"description": v["description"], "scopes": v["scopes"]} for k, v in clients.items()},
        "again": apply_needed(desired_roles, desired_clients),
    }


def apply_needed(desired_roles, desired_clients):
    """True if a second apply would change anything (it must not)."""
    roles, clients = current()
    return sorted(roles) != sorted(desired_roles) or sorted(clients) != sorted(desired_clients) or any(
        not same(roles[r], w) for r, w in desired_roles.items()
    ) or any(not same(clients[c], w) for c, w in desired_clients.items())


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
