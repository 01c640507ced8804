"""A worker's artifact flow with the official Python client (PyPI `taskcluster`), run by
tests/tests/artifacts.rs against a spawned server: claimWork, createArtifact with the claim's
temporary credentials, a plain HTTP PUT to the putUrl, reportCompleted.

Environment: TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN (root),
TASK_QUEUE_ID. Prints one JSON line (taskId, the createArtifact reply's storageType, the PUT's
status, the final state, and what downloads of a gzip-encoded JSON artifact gave); exits
non-zero on any failure.
"""
import datetime
import gzip
import json
import os

import requests
import taskcluster
import taskcluster.download
from running_task import running_task

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
tq = os.environ["TASK_QUEUE_ID"]
root_queue = taskcluster.Queue(taskcluster.optionsFromEnvironment({"maxRetries": 0}))

now = datetime.datetime.utcnow()
task_id, _, worker = running_task(root_queue, root_url, tq, "python artifacts")

body = b"hello from python\n"
reply = worker.createArtifact(task_id, "0", "public/logs/hello.txt", {
    "storageType": "s3",
    "contentType": "text/plain",
    "expires": taskcluster.stringDate(now + datetime.timedelta(hours=2)),
})
put = requests.put(reply["putUrl"], data=body, headers={"Content-Type": "text/plain"})

# A gzip-encoded JSON artifact, uploaded as workers upload logs: the stored headers come back,
# so every client decodes it on download.
data = {"answer": 42, "text": "gzip " * 50}
original = json.dumps(data).encode()
gz = worker.createArtifact(task_id, "0", "public/data.json", {
    "storageType": "s3",
    "contentType": "application/json",
    "expires": taskcluster.stringDate(now + datetime.timedelta(hours=2)),
})
stored = {
    "Content-Encoding": "gzip",
    "Content-Disposition": 'attachment; filename="data.json"',
    "Cache-Control": "max-age=600",
    "Content-Language": "en",
}
gz_put = requests.put(gz["putUrl"], data=gzip.compress(original),
                      headers={"Content-Type": "application/json", **stored})
status = worker.reportCompleted(task_id, "0")["status"]
# getArtifact through the client answers the 303 (the client does not follow redirects):
# following its URL gives the decoded JSON.
redirect = root_queue.getArtifact(task_id, "0", "public/data.json")
target = redirect.get("url") or redirect["response"].headers["Location"]
followed = requests.get(target).json()
buf, content_type = taskcluster.download.downloadArtifactToBuf(
    taskId=task_id, runId="0", name="public/data.json", queueService=root_queue)
url = root_queue.artifact(task_id, "0", "public/data.json")["url"]
got = requests.get(url, headers={"Accept-Encoding": "gzip"})
head = requests.head(url)
print(json.dumps({
    "taskId": task_id,
    "storageType": reply["storageType"],
    "putStatus": put.status_code,
    "gzPutStatus": gz_put.status_code,
    "state": status["state"],
    "followedEqual": followed == data,
    "downloadEqual": bytes(buf) == original,
    "downloadContentType": content_type,
    "headers": {k: got.headers.get(k) for k in stored},
    "headHeaders": {k: head.headers.get(k) for k in stored},
    "headLength": head.headers.get("Content-Length"),
    "gzLength": len(gzip.compress(original)),
}))
