"""Writes the seed inputs of the text-shaped fuzz targets, made with the official Taskcluster
Python client and its Hawk library (mohawk), keyed as the targets are (fuzz/src/lib.rs).

    python3 -m venv /tmp/v && /tmp/v/bin/pip install taskcluster
    /tmp/v/bin/python fuzz/seeds/make_seeds.py

The structured targets (authenticate, routing, scopes) take fuzzer-made seeds instead; the
files written here are committed, so this is only needed to change them.
"""

import base64
import datetime
import json
import os

import mohawk
import mohawk.base
import mohawk.bewit
import taskcluster

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "fuzz-access-token-0123456789abcdefghijklmnopq"
NOW_S = 1_700_000_000
URL = "https://queue.example.com/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ"


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def temp_creds(name=None, scopes=("queue:create-task:*", "assume:project:x")):
    start = datetime.datetime(2023, 11, 14, 22, 0, 0)
    return taskcluster.createTemporaryCredentials(
        "fuzz/issuer", "issuer-secret", start, start + datetime.timedelta(hours=1),
        list(scopes), name=name)


def ext(creds=None, authorized=None):
    o = {}
    if creds:
        o["certificate"] = json.loads(creds["certificate"])
    if authorized is not None:
        o["authorizedScopes"] = authorized
    return base64.b64encode(json.dumps(o).encode()).decode()


def header(n, **kw):
    s = mohawk.Sender({"id": kw.pop("id", "fuzz/client"), "key": KEY, "algorithm": "sha256"},
                      kw.pop("url", URL), kw.pop("method", "POST"), nonce="n0nce" + str(n),
                      _timestamp=NOW_S, always_hash_content="content" in kw, **kw)
    write("hawk_header", f"{n:02}", s.request_header)


def bewit(n, path_query, ext_value=""):
    url = "https://queue.example.com" + path_query
    r = mohawk.base.Resource(credentials={"id": "fuzz/client", "key": KEY, "algorithm": "sha256"},
                             method="GET", ext=ext_value, url=url, timestamp=NOW_S + 900,
                             nonce="")
    b = mohawk.bewit.get_bewit(r).rstrip("=")
    sep = "&" if "?" in path_query else "?"
    write("hawk_bewit", f"{n:02}", f"{path_query}{sep}bewit={b}")


def main():
    header(1)
    header(2, content='{"a":1}', content_type="application/json")
    header(3, ext=ext(temp_creds()))
    header(4, ext=ext(temp_creds("fuzz/named"), ["queue:create-task:*"]), id="fuzz/named")
    header(5, app="some-app", dlg="someone", method="GET")
    header(6, ext=ext(authorized=[]), url=URL + "?limit=10&continuationToken=abc")
    bewit(1, "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ/artifacts/public%2Flogs%2Flive.log")
    bewit(2, "/api/auth/v1/test-authenticate-get/?a=b&c=")
    bewit(3, "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ", ext(temp_creds()))
    write("hawk_bewit", "04", "/p?x=1&bewit=&bewit=abc&y")
    for i, c in enumerate([temp_creds(), temp_creds("fuzz/named"), temp_creds(scopes=[])]):
        write("cert", f"{2 * i:02}", c["certificate"])
        write("cert", f"{2 * i + 1:02}", json.dumps(c["certificate"]))
    for i, cursor in enumerate([["", "", ""], ["2023-11-14T22:13:20.000Z", "task-group/x", "t"],
                                ["é\u0000\"", "\\", "🦀"]]):
        token = base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode().rstrip("=")
        write("page_token", f"{i:02}", token)
    write("page_token", "03", "W10")  # []
    methods = {"GET": 0, "POST": 1, "PUT": 2, "DELETE": 3}
    for i, (m, path) in enumerate([
        ("GET", "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ/status"),
        ("POST", "/api/queue/v1/claim-work/prov%2Fwt"),
        ("POST", "/api/queue/v1/claim-work/prov/wt"),
        ("GET", "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ/runs/0/artifacts/public%2Fa/b%20c"),
        ("GET", "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ/artifact-info/x/y"),
        ("PUT", "/api/scheduler/v1/task-graph/fN1SbArXTPSVFNUvaOlinQ"),
        ("DELETE", "/api/auth/v1/roles/repo%3Agithub.com%2Fo%2F%2A"),
        ("GET", "/api/auth/v1/clients/"),
        ("POST", "/api/auth/v1/clients/a%2Fb/reset"),
        ("GET", "/api/queue/v1/task-queues/prov%2fwt/counts"),
        ("PUT", "/api/object/v1/upload/public%2Fx"),
        # updateClient of a client named like another's reset: ambiguous once decoded.
        ("POST", "/api/auth/v1/clients/ai/a/auth%2Freset"),
    ]):
        write("router", f"{i:02}", bytes([methods[m]]) + path.encode())


if __name__ == "__main__":
    main()
