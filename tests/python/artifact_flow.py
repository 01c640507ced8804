"""A worker's artifact flow with the official Python client (PyPI `taskcluster`), run by
tests/tests/artifacts.rs against a spawned server: claimWork, createArtifact with the claim's
temporary credentials, a plain HTTP PUT to the putUrl, reportCompleted.

Environment: TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN (root),
TASK_QUEUE_ID. Prints one JSON line (taskId, the createArtifact reply's storageType, the PUT's
status, the final state); exits non-zero on any failure.
"""
import datetime
import json
import os

import requests
import taskcluster

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
tq = os.environ["TASK_QUEUE_ID"]
root_queue = taskcluster.Queue(taskcluster.optionsFromEnvironment({"maxRetries": 0}))

now = datetime.datetime.utcnow()
task_id = taskcluster.slugId()
root_queue.createTask(task_id, {
    "taskQueueId": tq,
    "created": taskcluster.stringDate(now),
    "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
    "payload": {},
    "metadata": {"name": "python artifacts", "description": "artifact upload flow",
                 "owner": "tests@example.com", "source": "https://example.com/tests"},
})

claims = root_queue.claimWork(tq, {"workerGroup": "py", "workerId": "w1", "tasks": 1})["tasks"]
assert len(claims) == 1, claims
claim = claims[0]
worker = taskcluster.Queue({"rootUrl": root_url, "maxRetries": 0, "credentials": claim["credentials"]})

body = b"hello from python\n"
reply = worker.createArtifact(task_id, "0", "public/logs/hello.txt", {
    "storageType": "s3",
    "contentType": "text/plain",
    "expires": taskcluster.stringDate(now + datetime.timedelta(hours=2)),
})
put = requests.put(reply["putUrl"], data=body, headers={"Content-Type": "text/plain"})
status = worker.reportCompleted(task_id, "0")["status"]
print(json.dumps({
    "taskId": task_id,
    "storageType": reply["storageType"],
    "putStatus": put.status_code,
    "state": status["state"],
}))
