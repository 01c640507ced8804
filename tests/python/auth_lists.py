"""The auth calls whose routes end in `/`, which the PyPI client sends without it: prints one
JSON line with what each returned."""
import json
import os

import taskcluster

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
root = {
    "clientId": os.environ["TASKCLUSTER_CLIENT_ID"],
    "accessToken": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
}
auth = taskcluster.Auth({"rootUrl": root_url, "credentials": root})
clients = auth.listClients()
roles = auth.listRoles()
tester = taskcluster.Auth(
    {"rootUrl": root_url, "credentials": {"clientId": "tester", "accessToken": "no-secret"}}
)
tested = tester.testAuthenticateGet()
print(
    json.dumps(
        {
            "clientIds": [c["clientId"] for c in clients["clients"]],
            "roleIds": [r["roleId"] for r in roles],
            "tested": tested,
        }
    )
)
