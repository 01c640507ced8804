"""A worker loop with the official Python client (PyPI `taskcluster`), run by
tests/tests/auth_python.rs against a spawned server.

Environment: TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN (root),
WORKER_CLIENT_ID / WORKER_ACCESS_TOKEN (a client holding only worker scopes), TASK_QUEUE_ID.
Prints one JSON line describing what happened; exits non-zero on any failure.
"""
import datetime
import json
import os
import sys

import requests
import taskcluster

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
tq = os.environ["TASK_QUEUE_ID"]
base = {"rootUrl": root_url, "maxRetries": 0}


def client(cls, credentials=None, **extra):
    opts = dict(base, **extra)
    if credentials:
        opts["credentials"] = credentials
    return cls(opts)


root = taskcluster.optionsFromEnvironment({"maxRetries": 0})
root_queue = taskcluster.Queue(root)
worker_creds = {"clientId": os.environ["WORKER_CLIENT_ID"], "accessToken": os.environ["WORKER_ACCESS_TOKEN"]}
worker_queue = client(taskcluster.Queue, worker_creds)
out = {}

# Root creates a task carrying a scope of its own.
now = datetime.datetime.utcnow()
task_id = taskcluster.slugId()
definition = {
    "taskQueueId": tq,
    "created": taskcluster.stringDate(now),
    "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
    "scopes": ["python:scope"],
    "payload": {},
    "metadata": {"name": "python", "description": "python worker loop",
                 "owner": "tests@example.com", "source": "https://example.com/tests"},
}
root_queue.createTask(task_id, definition)
out["taskId"] = task_id

# The worker client may not create tasks.
try:
    worker_queue.createTask(taskcluster.slugId(), definition)
    out["worker_create"] = "allowed"
except taskcluster.exceptions.TaskclusterRestFailure as e:
    out["worker_create"] = e.status_code

claims = worker_queue.claimWork(tq, {"workerGroup": "py", "workerId": "w1", "tasks": 1})["tasks"]
assert len(claims) == 1, claims
claim = claims[0]
assert claim["status"]["taskId"] == task_id
temp = claim["credentials"]
out["tempClientId"] = temp["clientId"]

# The claim's temporary credentials: scopes, reclaim, and an unsigned-query read.
temp_auth = client(taskcluster.Auth, temp)
out["tempScopes"] = temp_auth.currentScopes()["scopes"]
temp_queue = client(taskcluster.Queue, temp)
fresh = temp_queue.reclaimTask(task_id, "0")["credentials"]

# authorizedScopes with temporary credentials: only the task's scopes, so resolving fails.
proxy = client(taskcluster.Queue, fresh, authorizedScopes=["python:scope"])
try:
    proxy.reportCompleted(task_id, "0")
    out["proxy_resolve"] = "allowed"
except taskcluster.exceptions.TaskclusterRestFailure as e:
    out["proxy_resolve"] = e.status_code

out["resolved"] = client(taskcluster.Queue, fresh).reportCompleted(task_id, "0")["status"]["state"]

# A signed URL (bewit) made by the Python client.
url = root_queue.buildSignedUrl("task", task_id)
out["signedUrlStatus"] = requests.get(url).status_code
out["unsignedStatus"] = requests.get(root_queue.buildUrl("task", task_id)).status_code

# Temporary credentials minted client-side from root.
start = now - datetime.timedelta(minutes=1)
minted = taskcluster.createTemporaryCredentials(
    root["credentials"]["clientId"], root["credentials"]["accessToken"],
    start, start + datetime.timedelta(hours=1), ["queue:status:*"], name="python/minted")
out["mintedScopes"] = client(taskcluster.Auth, minted).currentScopes()["scopes"]
out["mintedStatus"] = client(taskcluster.Queue, minted).status(task_id)["status"]["state"]

# Bad credentials raise the auth failure.
try:
    client(taskcluster.Queue, {"clientId": worker_creds["clientId"], "accessToken": "wrong"}).status(task_id)
    out["bad"] = "allowed"
except taskcluster.exceptions.TaskclusterAuthFailure as e:
    out["bad"] = e.status_code

print(json.dumps(out))
sys.exit(0)
