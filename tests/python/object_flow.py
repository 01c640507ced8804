"""Object uploads and downloads with the official Python client's helpers (PyPI
`taskcluster`: `taskcluster.upload`, `taskcluster.download`), run by
tests/tests/blackbox/objects.rs against a spawned server.

1. For each size in SIZES (bytes): `uploadFromBuf` to the object service as root, then
   `downloadToBuf` (which checks the hashes the service returns).
2. A worker: claimWork; for each size, createArtifact `object` with the claim's credentials,
   `uploadFromBuf` with the credentials and uploadId that createArtifact returned,
   finishArtifact; reportCompleted; then `downloadArtifactToBuf` as root of each artifact, for
   the latest run and for run 0.

Environment: TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN (root),
TASK_QUEUE_ID, SIZES (comma-separated), PREFIX (object names). Prints one JSON line: per size
the sha256 of what was uploaded and of what came back, for objects and artifacts; exits
non-zero on any failure.
"""
import hashlib
import json
import os

import taskcluster
import taskcluster.download
import taskcluster.upload
from running_task import running_task

root_url = os.environ["TASKCLUSTER_ROOT_URL"]
tq = os.environ["TASK_QUEUE_ID"]
prefix = os.environ["PREFIX"]
sizes = [int(s) for s in os.environ["SIZES"].split(",")]
options = taskcluster.optionsFromEnvironment({"maxRetries": 0})
root_queue = taskcluster.Queue(options)
root_object = taskcluster.Object(options)
expires = taskcluster.fromNow("1 day")


def data_of(size, seed):
    # Not compressible, not repetitive: a hash chain.
    out, block = bytearray(), seed.encode()
    while len(out) < size:
        block = hashlib.sha512(block).digest()
        out += block
    return bytes(out[:size])


def text(s):
    # The client turns credentials into bytes in place; Content-Types may be either.
    return s.decode() if isinstance(s, bytes) else s


def sha(b):
    return hashlib.sha256(b).hexdigest()


result = {"objects": {}}
for size in sizes:
    data = data_of(size, f"object-{size}")
    name = f"{prefix}/{size}.bin"
    taskcluster.upload.uploadFromBuf(
        projectId="py-project", name=name, contentType="application/x-test",
        contentLength=len(data), expires=expires, objectService=root_object, data=data)
    got, content_type = taskcluster.download.downloadToBuf(name=name, objectService=root_object)
    result["objects"][str(size)] = {
        "sent": sha(data), "got": sha(bytes(got)), "contentType": text(content_type)}

task_id, _, worker = running_task(root_queue, root_url, tq, "python objects")
result["artifacts"] = {}
for size in sizes:
    artifact = f"public/build/{size}.bin"
    data = data_of(size, f"artifact-{size}")
    created = worker.createArtifact(task_id, "0", artifact, {
        "storageType": "object", "expires": taskcluster.stringDate(expires),
        "contentType": "application/x-test"})
    uploader = taskcluster.Object({"rootUrl": root_url, "maxRetries": 0,
                                   "credentials": created["credentials"]})
    taskcluster.upload.uploadFromBuf(
        projectId=created["projectId"], name=created["name"], contentType="application/x-test",
        contentLength=len(data), expires=created["expires"], uploadId=created["uploadId"],
        objectService=uploader, data=data)
    worker.finishArtifact(task_id, "0", artifact, {"uploadId": created["uploadId"]})
    result["artifacts"][str(size)] = {
        "name": artifact, "objectName": created["name"], "sent": sha(data),
        "uploadClientId": text(created["credentials"]["clientId"])}
worker.reportCompleted(task_id, "0")
result["taskId"] = task_id
for size, a in result["artifacts"].items():
    latest, _ = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, name=a["name"], queueService=root_queue)
    run0, ct = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name=a["name"], queueService=root_queue)
    a.update({"latest": sha(bytes(latest)), "run0": sha(bytes(run0)), "contentType": text(ct)})
print(json.dumps(result))
