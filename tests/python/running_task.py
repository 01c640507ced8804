"""A task claimed by worker py/w1, for the scripts that then act as its worker."""
import datetime

import taskcluster


def running_task(root_queue, root_url, tq, name):
    """Creates a task on `tq`, claims it as py/w1 and returns (taskId, the claim, a Queue
    client with the claim's temporary credentials)."""
    now = datetime.datetime.utcnow()
    task_id = taskcluster.slugId()
    root_queue.createTask(task_id, {
        "taskQueueId": tq,
        "created": taskcluster.stringDate(now),
        "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
        "payload": {},
        "metadata": {"name": name, "description": name,
                     "owner": "tests@example.com", "source": "https://example.com/tests"},
    })
    claims = root_queue.claimWork(
        tq, {"workerGroup": "py", "workerId": "w1", "tasks": 1})["tasks"]
    assert len(claims) == 1, claims
    claim = claims[0]
    worker = taskcluster.Queue({"rootUrl": root_url, "maxRetries": 0,
                                "credentials": claim["credentials"]})
    return task_id, claim, worker
