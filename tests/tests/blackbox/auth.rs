//! Authentication and authorisation end to end, with the official `taskcluster` crate: the
//! root client, limited clients, `authorizedScopes`, the temporary credentials of a claim,
//! signed URLs, the auth API, and a 403/success matrix over every queue endpoint.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::time::Duration;
use taskcluster::Credentials;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A worker loop with the given worker credentials: claim, reclaim and resolve with the
/// claim's temporary credentials, which also carry the task's scopes.
async fn worker_loop(app: &TestServer, creds: Credentials) {
    let tq = task_queue_id();
    let id = create(app, &def_with(&tq, json!({"scopes": ["custom:scope:a"]}))).await;
    let q = app.queue_as(Some(creds));
    let claimed = q
        .claimWork(&tq, &worker("grp", "wkr", 1))
        .await
        .expect("claimWork");
    let claim = &claimed["tasks"][0];
    assert_eq!(claim["status"]["taskId"], id.as_str());
    let temp = credentials_of(claim);
    assert!(temp
        .client_id
        .starts_with(&format!("task-client/{id}/0/on/grp/wkr/until/")));

    // The temporary credentials hold the run's scopes and the task's, nothing more.
    let scopes = app
        .auth_as(Some(temp.clone()))
        .currentScopes()
        .await
        .expect("currentScopes");
    let scopes: Vec<String> = serde_json::from_value(scopes["scopes"].clone()).unwrap();
    for s in [
        format!("queue:reclaim-task:{id}/0"),
        format!("queue:resolve-task:{id}/0"),
        format!("queue:create-artifact:{id}/0"),
        "custom:scope:a".to_string(),
    ] {
        assert!(scopes.contains(&s), "{scopes:?} lacks {s}");
    }
    assert!(!scopes.contains(&"*".to_string()));

    let tq_temp = app.queue_as(Some(temp.clone()));
    // Not enough for another task's run, nor for creating tasks.
    assert_eq!(
        err_status(tq_temp.reportCompleted(&slugid(), "0").await),
        403
    );
    assert_eq!(
        err_status(tq_temp.createTask(&slugid(), &task_def(&tq)).await),
        403
    );

    let reclaimed = tq_temp
        .reclaimTask(&id, "0")
        .await
        .expect("reclaim with claim creds");
    let fresh = credentials_of(&reclaimed);
    // Old credentials keep working until they expire; resolve with the fresh ones.
    assert_eq!(
        tq_temp
            .status(&id)
            .await
            .map(|_| ())
            .map_err(|e| status_of(&e)),
        Err(Some(403)),
        "the claim credentials do not include queue:status"
    );
    let done = app
        .queue_as(Some(fresh))
        .reportCompleted(&id, "0")
        .await
        .expect("resolve with reclaim creds");
    assert_eq!(done["status"]["state"], "completed");
}

#[tokio::test]
async fn a_worker_loop_with_the_root_client() {
    let app = spawn_app().await;
    worker_loop(&app, root_credentials()).await;
}

#[tokio::test]
async fn a_worker_loop_with_a_client_holding_only_worker_scopes() {
    let app = spawn_app().await;
    // A role grants the claim scope, the client holds the role and its worker id.
    app.auth()
        .createRole(
            "worker-pool:test-prov/*",
            &json!({"description": "workers", "scopes": ["queue:claim-work:test-prov/<..>"]}),
        )
        .await
        .expect("createRole");
    let worker = client_with(
        &app,
        &strings(&["assume:worker-pool:test-prov/*", "queue:worker-id:grp/wkr"]),
    )
    .await;
    // It cannot create tasks.
    let q = app.queue_as(Some(worker.clone()));
    assert_eq!(
        err_status(q.createTask(&slugid(), &task_def(&task_queue_id())).await),
        403
    );
    worker_loop(&app, worker).await;
}

#[tokio::test]
async fn authorized_scopes_narrow_what_a_client_may_do() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let narrowed = taskcluster::Queue::new(
        builder(&app.root_url(), Some(root_credentials())).authorized_scopes([
            format!("queue:claim-work:{tq}"),
            "queue:worker-id:grp/wkr".into(),
        ]),
    )
    .unwrap();
    // Root narrowed to worker scopes cannot create a task ...
    assert_eq!(
        err_status(narrowed.createTask(&slugid(), &task_def(&tq)).await),
        403
    );
    // ... but can claim one.
    let id = create(&app, &task_def(&tq)).await;
    let r = narrowed
        .claimWork(&tq, &worker("grp", "wkr", 1))
        .await
        .expect("claimWork");
    assert_eq!(r["tasks"][0]["status"]["taskId"], id.as_str());
    // A limited client cannot widen itself with authorizedScopes: 401.
    let limited = client_with(&app, &strings(&["queue:status:*"])).await;
    let widened = taskcluster::Queue::new(
        builder(&app.root_url(), Some(limited)).authorized_scopes(["queue:get-task:*"]),
    )
    .unwrap();
    assert_eq!(err_status(widened.task(&id).await), 401);
    // Temporary credentials combine with authorizedScopes (as a worker proxying a task).
    let claim_tq = task_queue_id();
    let t2 = create(
        &app,
        &def_with(&claim_tq, json!({"scopes": ["queue:status:*"]})),
    )
    .await;
    let claim = claim_one(&app, &claim_tq, "grp", "wkr").await;
    let proxy = taskcluster::Queue::new(
        builder(&app.root_url(), Some(credentials_of(&claim)))
            .authorized_scopes(["queue:status:*"]),
    )
    .unwrap();
    assert_eq!(
        proxy.status(&t2).await.expect("status")["status"]["taskId"],
        t2.as_str()
    );
    assert_eq!(err_status(proxy.reportCompleted(&t2, "0").await), 403);
}

#[tokio::test]
async fn a_signed_url_works_and_then_expires() {
    let app = spawn_app().await;
    let id = create(&app, &task_def(&task_queue_id())).await;
    let http = reqwest::Client::new();
    // Unsigned, the anonymous role may not read the task.
    let plain = app.queue_as(None);
    assert_eq!(err_status(plain.task(&id).await), 403);
    let url = app
        .queue()
        .task_signed_url(&id, Duration::from_secs(60))
        .unwrap();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["metadata"]["name"], "black-box test task");

    // With the test client, a one-second bewit works at once and is refused once expired.
    let tester = app.auth_as(Some(Credentials::new("tester", "no-secret")));
    let short = tester
        .testAuthenticateGet_signed_url(Duration::from_secs(1))
        .unwrap();
    let r = http.get(&short).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["clientId"], "tester");
    poll(Duration::from_secs(10), "the bewit to expire", || {
        let (http, short) = (http.clone(), short.clone());
        async move {
            let r = http.get(&short).send().await.ok()?;
            (r.status().as_u16() == 401).then_some(())
        }
    })
    .await;
    // Refused for its expiry, not for anything else.
    let (code, body) = raw_url_with(&short, "GET", None, None, None).await;
    assert_eq!(code, 401);
    assert_eq!(body["code"], "AuthenticationFailed");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("expired"),
        "{body:#}"
    );
}

/// Raw call returning the status, the `www-authenticate` header and the JSON body.
async fn raw_auth(
    url: &str,
    method: &str,
    authorization: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, Option<String>, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_vec());
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let www = r
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let v = serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or(Value::Null);
    (status, www, v)
}

#[tokio::test]
async fn bad_credentials_are_401_with_www_authenticate_hawk() {
    let app = spawn_app().await;
    let id = create(&app, &task_def(&task_queue_id())).await;
    let url = app.url(&format!("/task/{id}"));
    let other = app.url(&format!("/task/{id}/status"));
    let good = hawk_authorization(ROOT_CLIENT_ID, ROOT_ACCESS_TOKEN, "GET", &url, None);
    assert_eq!(raw_auth(&url, "GET", Some(&good), None).await.0, 200);

    let limited = client_with(&app, &strings(&["queue:get-task:*"])).await;
    let disabled = client_with(&app, &strings(&["queue:get-task:*"])).await;
    app.auth()
        .disableClient(&disabled.client_id)
        .await
        .expect("disableClient");
    let deleted = client_with(&app, &strings(&["queue:get-task:*"])).await;
    app.auth()
        .deleteClient(&deleted.client_id)
        .await
        .expect("deleteClient");
    let ok = hawk_authorization(&limited.client_id, &limited.access_token, "GET", &url, None);
    assert_eq!(raw_auth(&url, "GET", Some(&ok), None).await.0, 200);

    let bewit_url = app
        .queue()
        .task_signed_url(&id, Duration::from_secs(60))
        .unwrap();
    let stale = {
        let creds = hawk::Credentials {
            id: ROOT_CLIENT_ID.into(),
            key: hawk::Key::new(ROOT_ACCESS_TOKEN, hawk::SHA256).unwrap(),
        };
        let u = reqwest::Url::parse(&url).unwrap();
        let ts = std::time::SystemTime::now() - Duration::from_secs(20 * 60);
        let h = hawk::RequestBuilder::from_url("GET", &u)
            .unwrap()
            .request()
            .make_header_full(&creds, ts, "nonce")
            .unwrap();
        format!("Hawk {h}")
    };
    let cases: Vec<(&str, String, String)> = vec![
        ("signed for another URL", other.clone(), good.clone()),
        (
            "wrong accessToken",
            url.clone(),
            hawk_authorization(ROOT_CLIENT_ID, "wrong", "GET", &url, None),
        ),
        (
            "unknown client",
            url.clone(),
            hawk_authorization("no/such/client", "x", "GET", &url, None),
        ),
        (
            "disabled client",
            url.clone(),
            hawk_authorization(
                &disabled.client_id,
                &disabled.access_token,
                "GET",
                &url,
                None,
            ),
        ),
        (
            "deleted client",
            url.clone(),
            hawk_authorization(&deleted.client_id, &deleted.access_token, "GET", &url, None),
        ),
        ("timestamp 20 minutes old", url.clone(), stale),
        (
            "tampered mac",
            url.clone(),
            good.replace("mac=\"", "mac=\"A"),
        ),
        (
            "malformed header",
            url.clone(),
            "Hawk id=\"x\", ts=\"notanumber\"".into(),
        ),
        ("not hawk", url.clone(), "Basic dXNlcjpwYXNz".into()),
        ("bewit and header together", bewit_url.clone(), good.clone()),
    ];
    for (what, u, authz) in cases {
        let (status, www, body) = raw_auth(&u, "GET", Some(&authz), None).await;
        assert_eq!(status, 401, "{what}: {body:#}");
        assert_eq!(www.as_deref(), Some("hawk"), "{what}");
        assert_eq!(body["code"], "AuthenticationFailed", "{what}");
        assert_error_shape(&body);
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains(ROOT_ACCESS_TOKEN),
            "{what}: secret in the message"
        );
    }

    // A payload hash that does not match the body.
    let q = task_queue_id();
    let create_url = app.url(&format!("/task/{}", slugid()));
    let body = serde_json::to_vec(&task_def(&q)).unwrap();
    let mut other_body = task_def(&q);
    other_body["priority"] = json!("high");
    let other_body = serde_json::to_vec(&other_body).unwrap();
    let signed = hawk_authorization(
        ROOT_CLIENT_ID,
        ROOT_ACCESS_TOKEN,
        "PUT",
        &create_url,
        Some(("application/json", &body)),
    );
    let (status, www, _) = raw_auth(&create_url, "PUT", Some(&signed), Some(&other_body)).await;
    assert_eq!((status, www.as_deref()), (401, Some("hawk")));
    assert_eq!(
        raw_auth(&create_url, "PUT", Some(&signed), Some(&body))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn the_auth_api_manages_clients_and_roles() {
    let app = spawn_app_alone().await;
    let auth = app.auth();
    // Roles, with a parameterised star role.
    let role = auth
        .createRole(
            "project:*",
            &json!({"description": "projects", "scopes": ["secrets:get:project/<..>/*"]}),
        )
        .await
        .expect("createRole");
    assert_eq!(role["roleId"], "project:*");
    assert_eq!(
        err_status(
            auth.createRole("project:*", &json!({"description": "", "scopes": []}))
                .await
        ),
        409
    );
    let got = auth.role("project:*").await.expect("role");
    assert_eq!(got["scopes"], json!(["secrets:get:project/<..>/*"]));
    let all = auth.listRoles().await.expect("listRoles");
    assert!(all
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["roleId"] == "project:*"));
    let expanded = auth
        .expandScopes(&json!({"scopes": ["assume:project:alpha"]}))
        .await
        .expect("expandScopes");
    assert_eq!(
        expanded["scopes"],
        json!(["assume:project:alpha", "secrets:get:project/alpha/*"])
    );

    // Clients: create, read, list, disable/enable, reset, delete.
    let id = format!("test/{}", slugid());
    let created = auth
        .createClient(&id, &json!({"description": "d", "expires": ts(3_600_000), "scopes": ["assume:project:alpha"]}))
        .await
        .expect("createClient");
    assert_eq!(created["accessToken"].as_str().unwrap().len(), 44);
    assert_eq!(
        err_status(
            auth.createClient(&id, &json!({"description": "d", "expires": ts(3_600_000)}))
                .await
        ),
        409
    );
    let c = auth.client(&id).await.expect("client");
    assert!(
        c.get("accessToken").is_none(),
        "the secret is never read back"
    );
    assert_eq!(
        c["expandedScopes"],
        json!(["assume:project:alpha", "secrets:get:project/alpha/*"])
    );
    let listed = auth
        .listClients(Some("test/"), None, None)
        .await
        .expect("listClients");
    assert_eq!(listed["clients"].as_array().unwrap().len(), 1);
    let everyone = auth
        .listClients(None, None, None)
        .await
        .expect("listClients");
    assert!(everyone["clients"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["clientId"] == ROOT_CLIENT_ID));

    let creds = Credentials::new(id.clone(), created["accessToken"].as_str().unwrap());
    let me = app.auth_as(Some(creds.clone()));
    let mine = me.currentScopes().await.expect("currentScopes");
    assert!(mine["scopes"]
        .as_array()
        .unwrap()
        .contains(&json!("secrets:get:project/alpha/*")));
    // A client cannot grant scopes it does not hold.
    assert_eq!(
        err_status(
            me.createClient(
                "test/other",
                &json!({"description": "", "expires": ts(60_000)})
            )
            .await
        ),
        403
    );

    assert_eq!(
        auth.disableClient(&id).await.expect("disable")["disabled"],
        true
    );
    assert_eq!(err_status(me.currentScopes().await), 401);
    assert_eq!(
        auth.enableClient(&id).await.expect("enable")["disabled"],
        false
    );
    assert!(me.currentScopes().await.is_ok());
    let reset = auth.resetAccessToken(&id).await.expect("reset");
    assert_eq!(
        err_status(me.currentScopes().await),
        401,
        "the old token is revoked"
    );
    let renewed = app.auth_as(Some(Credentials::new(
        id.clone(),
        reset["accessToken"].as_str().unwrap(),
    )));
    assert!(renewed.currentScopes().await.is_ok());
    auth.deleteClient(&id).await.expect("deleteClient");
    assert_eq!(err_status(auth.client(&id).await), 404);
    assert_eq!(err_status(renewed.currentScopes().await), 401);

    // Static clients are not manageable; deleting a role takes effect at once.
    assert_eq!(
        err_status(auth.deleteClient(ROOT_CLIENT_ID).await.map(|_| Value::Null)),
        400
    );
    auth.deleteRole("project:*").await.expect("deleteRole");
    assert_eq!(err_status(auth.role("project:*").await), 404);
    let expanded = auth
        .expandScopes(&json!({"scopes": ["assume:project:alpha"]}))
        .await
        .unwrap();
    assert_eq!(expanded["scopes"], json!(["assume:project:alpha"]));

    // Unsigned callers get the anonymous role only.
    let anon = app
        .auth_as(None)
        .currentScopes()
        .await
        .expect("anonymous currentScopes");
    assert_eq!(
        anon["scopes"],
        json!(["assume:anonymous", "queue:get-artifact:public/*"])
    );
}

#[tokio::test]
async fn authenticate_hawk_and_the_test_endpoints_answer_like_upstream() {
    let app = spawn_app().await;
    let auth = app.auth();
    let resource = "/api/queue/v1/task/abc";
    let authz = hawk_authorization(
        ROOT_CLIENT_ID,
        ROOT_ACCESS_TOKEN,
        "GET",
        &format!("https://q.example.com{resource}"),
        None,
    );
    let ok = auth
        .authenticateHawk(&json!({"method": "get", "resource": resource, "host": "q.example.com", "port": 443, "authorization": authz}))
        .await
        .expect("authenticateHawk");
    assert_eq!(ok["status"], "auth-success");
    assert_eq!(ok["clientId"], ROOT_CLIENT_ID);
    assert_eq!(ok["scopes"], json!(["*"]));
    let bad = auth
        .authenticateHawk(&json!({"method": "get", "resource": resource, "host": "q.example.com", "port": 80, "authorization": authz}))
        .await
        .expect("authenticateHawk");
    assert_eq!(bad["status"], "auth-failed");
    let none = auth
        .authenticateHawk(
            &json!({"method": "get", "resource": resource, "host": "q.example.com", "port": 443}),
        )
        .await
        .expect("authenticateHawk");
    assert_eq!(none["status"], "no-auth");

    let tester = app.auth_as(Some(Credentials::new("tester", "no-secret")));
    let r = tester
        .testAuthenticate(&json!({"clientScopes": ["test:a:*"], "requiredScopes": ["test:a:b"]}))
        .await
        .expect("testAuthenticate");
    assert_eq!(r["clientId"], "tester");
    assert_eq!(
        err_status(
            tester
                .testAuthenticate(
                    &json!({"clientScopes": ["test:a"], "requiredScopes": ["test:b"]})
                )
                .await
        ),
        403
    );
    // Only the test client exists there: root is unknown.
    assert_eq!(
        err_status(
            auth.testAuthenticate(&json!({"clientScopes": [], "requiredScopes": []}))
                .await
        ),
        401
    );
    let r = tester
        .testAuthenticateGet()
        .await
        .expect("testAuthenticateGet");
    assert!(r["scopes"].as_array().unwrap().contains(&json!("test:*")));
    // Named temporary credentials made by the client library from the tester.
    let temp = Credentials::new("tester", "no-secret")
        .create_named_temp_creds(
            "test:temp",
            Duration::from_secs(600),
            ["test:authenticate-get"],
        )
        .unwrap();
    let r = app
        .auth_as(Some(temp))
        .testAuthenticateGet()
        .await
        .expect("with temp creds");
    assert_eq!(r["clientId"], "test:temp");
}

/// One queue endpoint with arguments prepared for it.
enum Ep {
    Task(String),
    Status(String),
    Tasks(String),
    Statuses(String),
    Create(String, Value),
    Define(String, Value),
    Schedule(String),
    Rerun(String),
    Cancel(String),
    ChangePriority(String),
    ClaimWork(String),
    ClaimTask(String),
    Reclaim(String),
    Completed(String),
    Failed(String),
    Exception(String),
    Pending(String),
    Counts(String),
    /// Ours (no official client has it): signed raw.
    Figures(String),
    ListPending(String),
    ListClaimed(String),
    ListDependents(String),
    GetTaskGroup(String),
    ListTaskGroup(String),
    SealTaskGroup(String),
    CancelTaskGroup(String),
    ChangeTaskGroupPriority(String),
    /// A worker-metadata endpoint (by name) on a task queue whose worker `grp/wkr` exists.
    Metadata(&'static str, String),
}

/// Calls `ep` as `creds`; the HTTP status of the failure, or `None` on success.
async fn call(app: &TestServer, creds: &Credentials, ep: &Ep) -> Option<u16> {
    let q = app.queue_as(Some(creds.clone()));
    let w = worker("grp", "wkr", 1);
    let r: anyhow::Result<Value> = match ep {
        Ep::Task(id) => q.task(id).await,
        Ep::Status(id) => q.status(id).await,
        Ep::Tasks(id) => q.tasks(&json!({"taskIds": [id]}), None, None).await,
        Ep::Statuses(id) => q.statuses(&json!({"taskIds": [id]}), None, None).await,
        Ep::Create(id, def) => q.createTask(id, def).await,
        Ep::Define(id, def) => {
            // The official clients no longer have defineTask; sign a raw call.
            let url = app.url(&format!("/task/{id}/define"));
            let body = serde_json::to_vec(def).unwrap();
            let authz = hawk_authorization(
                &creds.client_id,
                &creds.access_token,
                "POST",
                &url,
                Some(("application/json", &body)),
            );
            let (code, _) = raw_url_with(
                &url,
                "POST",
                Some("application/json"),
                Some(body),
                Some(&authz),
            )
            .await;
            return (code != 200).then_some(code);
        }
        Ep::Schedule(id) => q.scheduleTask(id).await,
        Ep::Rerun(id) => q.rerunTask(id).await,
        Ep::Cancel(id) => q.cancelTask(id).await,
        Ep::ChangePriority(id) => {
            q.changeTaskPriority(id, &json!({"newPriority": "high"}))
                .await
        }
        Ep::ClaimWork(tq) => q.claimWork(tq, &w).await,
        Ep::ClaimTask(id) => q.claimTask(id, "0", &claimer("grp", "wkr")).await,
        Ep::Reclaim(id) => q.reclaimTask(id, "0").await,
        Ep::Completed(id) => q.reportCompleted(id, "0").await,
        Ep::Failed(id) => q.reportFailed(id, "0").await,
        Ep::Exception(id) => {
            q.reportException(id, "0", &json!({"reason": "malformed-payload"}))
                .await
        }
        Ep::Pending(tq) => q.pendingTasks(tq).await,
        Ep::Counts(tq) => q.taskQueueCounts(tq).await,
        Ep::Figures(tq) => {
            let url = app.url(&format!("/task-queues/{}/figures", tq.replace('/', "%2F")));
            let authz =
                hawk_authorization(&creds.client_id, &creds.access_token, "GET", &url, None);
            let (code, _) = raw_url_with(&url, "GET", None, None, Some(&authz)).await;
            return (code != 200).then_some(code);
        }
        Ep::ListPending(tq) => q.listPendingTasks(tq, None, None).await,
        Ep::ListClaimed(tq) => q.listClaimedTasks(tq, None, None).await,
        Ep::ListDependents(id) => q.listDependentTasks(id, None, None).await,
        Ep::GetTaskGroup(id) => q.getTaskGroup(id).await,
        Ep::ListTaskGroup(id) => q.listTaskGroup(id, None, None).await,
        Ep::SealTaskGroup(id) => q.sealTaskGroup(id).await,
        Ep::CancelTaskGroup(id) => q.cancelTaskGroup(id).await,
        Ep::ChangeTaskGroupPriority(id) => {
            q.changeTaskGroupPriority(id, &json!({ "newPriority": "high" }))
                .await
        }
        Ep::Metadata(name, tq) => {
            let (p, t) = tq.split_once('/').expect("a task queue id");
            let later = json!({ "expires": ts(3_600_000) });
            match *name {
                "listTaskQueues" => q.listTaskQueues(None, None).await,
                "getTaskQueue" => q.getTaskQueue(tq).await,
                "listProvisioners" => q.listProvisioners(None, None).await,
                "getProvisioner" => q.getProvisioner(p).await,
                "listWorkerTypes" => q.listWorkerTypes(p, None, None).await,
                "getWorkerType" => q.getWorkerType(p, t).await,
                "listWorkers" => q.listWorkers(p, t, None, None, None).await,
                "getWorker" => q.getWorker(p, t, "grp", "wkr").await,
                "quarantineWorker" => {
                    let lifted = json!({ "quarantineUntil": ts(-1_000) });
                    q.quarantineWorker(p, t, "grp", "wkr", &lifted).await
                }
                "declareWorker" => q.declareWorker(p, t, "grp", "wkr", &later).await,
                other => panic!("no metadata case for {other}"),
            }
        }
    };
    r.err().map(|e| status_of(&e).unwrap_or(0))
}

/// For every queue endpoint: a caller lacking any one of the required scopes gets 403, and
/// one holding exactly those scopes succeeds.
#[tokio::test]
async fn every_queue_endpoint_requires_exactly_its_scopes() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let s = |v: Vec<String>| v;
    let def = task_def(&tq);
    let pending = || create(&app, &def);
    let claimed = || async {
        let id = create(&app, &task_def(&tq)).await;
        let q = app.queue();
        q.claimTask(&id, "0", &claimer("grp", "wkr"))
            .await
            .expect("claimTask as root");
        id
    };
    // task group = taskId, schedulerId "-" (the defaults).
    let sch = |verb: &str, id: &str| vec![format!("queue:{verb}-task:-/{id}/{id}")];
    let new_def = def_with(
        &tq,
        json!({"scopes": ["custom:a"], "routes": ["index.x"], "priority": "low"}),
    );
    let create_scopes = vec![
        "custom:a".to_string(),
        "queue:route:index.x".into(),
        "queue:create-task:project:none".into(),
        "queue:scheduler-id:-".into(),
        format!("queue:create-task:low:{tq}"),
    ];
    let work_tq = task_queue_id();
    create(&app, &task_def(&work_tq)).await;

    let mut cases: Vec<(&str, Ep, Vec<String>)> = vec![];
    let id = pending().await;
    cases.push((
        "task",
        Ep::Task(id.clone()),
        vec![format!("queue:get-task:{id}")],
    ));
    cases.push((
        "status",
        Ep::Status(id.clone()),
        vec![format!("queue:status:{id}")],
    ));
    cases.push((
        "tasks",
        Ep::Tasks(id.clone()),
        vec![format!("queue:get-task:{id}")],
    ));
    cases.push((
        "statuses",
        Ep::Statuses(id.clone()),
        vec![format!("queue:status:{id}")],
    ));
    cases.push((
        "createTask",
        Ep::Create(slugid(), new_def.clone()),
        s(create_scopes.clone()),
    ));
    cases.push((
        "defineTask",
        Ep::Define(slugid(), new_def.clone()),
        s(create_scopes.clone()),
    ));
    let id = pending().await;
    cases.push((
        "scheduleTask",
        Ep::Schedule(id.clone()),
        sch("schedule", &id),
    ));
    let id = pending().await;
    cases.push(("rerunTask", Ep::Rerun(id.clone()), sch("rerun", &id)));
    let id = pending().await;
    cases.push(("cancelTask", Ep::Cancel(id.clone()), sch("cancel", &id)));
    let id = pending().await;
    cases.push((
        "changeTaskPriority",
        Ep::ChangePriority(id.clone()),
        vec![format!("queue:change-task-priority:{id}")],
    ));
    cases.push((
        "claimWork",
        Ep::ClaimWork(work_tq.clone()),
        vec![
            format!("queue:claim-work:{work_tq}"),
            "queue:worker-id:grp/wkr".into(),
        ],
    ));
    let id = pending().await;
    cases.push((
        "claimTask",
        Ep::ClaimTask(id.clone()),
        vec![
            format!("queue:claim-task:{tq}"),
            "queue:worker-id:grp/wkr".into(),
        ],
    ));
    let id = claimed().await;
    cases.push((
        "reclaimTask",
        Ep::Reclaim(id.clone()),
        vec![format!("queue:reclaim-task:{id}/0")],
    ));
    for (name, make) in [
        ("reportCompleted", Ep::Completed as fn(String) -> Ep),
        ("reportFailed", Ep::Failed),
        ("reportException", Ep::Exception),
    ] {
        let id = claimed().await;
        cases.push((
            name,
            make(id.clone()),
            vec![format!("queue:resolve-task:{id}/0")],
        ));
    }
    cases.push((
        "pendingTasks",
        Ep::Pending(tq.clone()),
        vec![format!("queue:pending-count:{tq}")],
    ));
    cases.push((
        "taskQueueCounts",
        Ep::Counts(tq.clone()),
        vec![
            format!("queue:pending-count:{tq}"),
            format!("queue:claimed-count:{tq}"),
        ],
    ));
    cases.push((
        "taskQueueFigures",
        Ep::Figures(tq.clone()),
        vec![
            format!("queue:pending-count:{tq}"),
            format!("queue:claimed-count:{tq}"),
            format!("queue:list-workers:{tq}"),
        ],
    ));
    cases.push((
        "listPendingTasks",
        Ep::ListPending(tq.clone()),
        vec![format!("queue:pending-list:{tq}")],
    ));
    cases.push((
        "listClaimedTasks",
        Ep::ListClaimed(tq.clone()),
        vec![format!("queue:claimed-list:{tq}")],
    ));
    let id = pending().await;
    cases.push((
        "listDependentTasks",
        Ep::ListDependents(id.clone()),
        vec![format!("queue:list-dependent-tasks:{id}")],
    ));
    // A task without a taskGroupId is its own group.
    let group = pending().await;
    for (name, make) in [
        ("getTaskGroup", Ep::GetTaskGroup as fn(String) -> Ep),
        ("listTaskGroup", Ep::ListTaskGroup),
    ] {
        cases.push((
            name,
            make(group.clone()),
            vec![format!("queue:list-task-group:{group}")],
        ));
    }

    // The group operations name the group's schedulerId (`-`); cancel needs a sealed group.
    let sealed = pending().await;
    app.queue().sealTaskGroup(&sealed).await.unwrap();
    for (name, make, group, what) in [
        (
            "sealTaskGroup",
            Ep::SealTaskGroup as fn(String) -> Ep,
            pending().await,
            "seal-task-group",
        ),
        (
            "cancelTaskGroup",
            Ep::CancelTaskGroup,
            sealed,
            "cancel-task-group",
        ),
        (
            "changeTaskGroupPriority",
            Ep::ChangeTaskGroupPriority,
            pending().await,
            "change-task-group-priority",
        ),
    ] {
        let scopes = vec![format!("queue:{what}:-/{group}")];
        cases.push((name, make(group), scopes));
    }

    // Worker metadata, on a queue where worker grp/wkr was declared.
    let meta = task_queue_id();
    let (p, t) = meta.split_once('/').expect("a task queue id");
    app.queue()
        .declareWorker(p, t, "grp", "wkr", &json!({ "expires": ts(3_600_000) }))
        .await
        .expect("declareWorker as root");
    let worker = format!("{meta}/grp/wkr");
    for (name, scope) in [
        ("listTaskQueues", "queue:list-task-queues".to_string()),
        ("getTaskQueue", format!("queue:get-task-queue:{meta}")),
        ("listProvisioners", "queue:list-provisioners".into()),
        ("getProvisioner", format!("queue:get-provisioner:{p}")),
        ("listWorkerTypes", format!("queue:list-worker-types:{p}")),
        ("getWorkerType", format!("queue:get-worker-type:{meta}")),
        ("listWorkers", format!("queue:list-workers:{meta}")),
        ("getWorker", format!("queue:get-worker:{worker}")),
        (
            "quarantineWorker",
            format!("queue:quarantine-worker:{worker}"),
        ),
        (
            "declareWorker",
            format!("queue:declare-worker:{worker}#expires"),
        ),
    ] {
        cases.push((name, Ep::Metadata(name, meta.clone()), vec![scope]));
    }

    for (name, ep, scopes) in &cases {
        // Without any scope, and without each required scope in turn: 403.
        let mut lacking: Vec<Vec<String>> = vec![vec![]];
        for i in 0..scopes.len() {
            let mut fewer = scopes.clone();
            fewer.remove(i);
            lacking.push(fewer);
        }
        for held in lacking {
            let creds = client_with(&app, &held).await;
            assert_eq!(
                call(&app, &creds, ep).await,
                Some(403),
                "{name} with {held:?}"
            );
        }
        let creds = client_with(&app, scopes).await;
        assert_eq!(
            call(&app, &creds, ep).await,
            None,
            "{name} with exactly {scopes:?}"
        );
    }
    // Every endpoint of the queue that has scopes is covered: by these cases, or (the
    // artifact endpoints) by the scope test in artifacts.rs; the others are below.
    for e in shared::api::endpoints::QUEUE.endpoints() {
        let covered = cases.iter().any(|(name, _, _)| *name == e.name)
            || shared::api::endpoints::artifacts::ENDPOINTS
                .iter()
                .any(|a| a.name == e.name)
            || matches!(e.scopes, shared::api::declare::Scopes::None);
        assert!(covered, "{} has no case in the scope matrix", e.name);
    }

    // Endpoints without scopes answer anyone, even unsigned.
    let anon = app.queue_as(None);
    assert!(anon.ping().await.is_ok());
    assert!(anon.lbheartbeat().await.is_ok());
    assert!(anon.version().await.is_ok());
    assert!(anon.heartbeat().await.is_ok());
}

/// Without configured credentials, the first start creates the root client's credentials in
/// an owner-only file, and they work; the database is owner-only too.
#[tokio::test]
async fn the_first_start_creates_root_credentials_readable_only_by_the_owner() {
    if not_in_shape("reads the local server's data directory") {
        return;
    }
    let app = spawn_app_with(|cfg| cfg.root_access_token = None).await;
    let path = app.dir.path().join("root-credentials.json");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("file")).unwrap();
    assert_eq!(saved["clientId"], ROOT_CLIENT_ID);
    let token = saved["accessToken"].as_str().expect("accessToken");
    assert_ne!(token, ROOT_ACCESS_TOKEN);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        let db = app.dir.path().join("queue.db");
        if db.exists() {
            assert_eq!(mode(&db), 0o600);
        }
    }
    let me = app.auth_as(Some(Credentials::new(ROOT_CLIENT_ID, token)));
    assert_eq!(
        me.currentScopes().await.expect("currentScopes")["scopes"],
        json!(["*"])
    );
    // The test fixture's token is not accepted by this server.
    assert_eq!(err_status(app.auth().currentScopes().await), 401);
}

/// Upstream's order of checks: endpoints whose scopes come from the URL alone answer 403
/// before looking the task up, even for a task that does not exist; those that need the
/// task to know their scopes answer 404 for a missing task first.
#[tokio::test]
async fn scope_checks_come_before_or_after_the_lookup_as_upstream() {
    let app = spawn_app().await;
    let nobody = app.queue_as(Some(client_with(&app, &[]).await));
    let missing = slugid();
    let forbidden_first = [
        err_status(nobody.task(&missing).await),
        err_status(nobody.status(&missing).await),
        err_status(nobody.reportCompleted(&missing, "0").await),
        err_status(nobody.reportFailed(&missing, "0").await),
        err_status(nobody.reclaimTask(&missing, "0").await),
    ];
    assert_eq!(forbidden_first, [403; 5]);
    let not_found_first = [
        err_status(nobody.scheduleTask(&missing).await),
        err_status(nobody.rerunTask(&missing).await),
        err_status(nobody.cancelTask(&missing).await),
    ];
    assert_eq!(not_found_first, [404; 3]);
    // With the task present, the same callers get 403 from the second group too.
    let id = create(&app, &task_def(&task_queue_id())).await;
    assert_eq!(err_status(nobody.cancelTask(&id).await), 403);
}

/// With no `anonymous` role stored and none configured, unsigned callers may read (tasks,
/// statuses, listings, public artifacts, the scheduler's reads) and nothing else.
#[tokio::test]
async fn unsigned_callers_may_read_by_default() {
    let app = spawn_app_with(|c| c.queue.anonymous_scopes = None).await;
    let tq = task_queue_id();
    let def = task_def(&tq);
    let id = create(&app, &def).await;
    // Without a taskGroupId, the task is its own group.
    let group = def["taskGroupId"].as_str().unwrap_or(&id).to_string();
    let unsigned = |path: String| {
        let url = app.url(&path);
        async move { raw_url_with(&url, "GET", None, None, None).await.0 }
    };
    assert_eq!(unsigned(format!("/task/{id}")).await, 200);
    assert_eq!(unsigned(format!("/task/{id}/status")).await, 200);
    assert_eq!(unsigned(format!("/task/{id}/runs/0/artifacts")).await, 200);
    assert_eq!(unsigned(format!("/task/{id}/artifacts")).await, 200);
    assert_eq!(unsigned(format!("/task-group/{group}/list")).await, 200);
    assert_eq!(unsigned(format!("/task/{id}/dependents")).await, 200);
    // Writes and private artifacts stay signed.
    let url = app.url(&format!("/task/{}", slugid()));
    let (status, _) = raw_url_with(
        &url,
        "PUT",
        Some("application/json"),
        Some(def.to_string().into_bytes()),
        None,
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        unsigned(format!("/task/{id}/runs/0/artifacts/private/x")).await,
        403
    );
}

/// Upstream's answers where clients compare them: listClients pages static and stored
/// clients alike by clientId; testAuthenticate returns the scopes as given merged with
/// `assume:anonymous` (upstream's merge: given order kept, nothing expanded), and
/// `auth-failed:no-auth` for an unsigned call; authenticateHawk without credentials expires
/// in 15 minutes.
#[tokio::test]
async fn auth_answers_as_upstream_for_listings_and_test_calls() {
    let app = spawn_app_alone().await;
    let auth = app.auth();
    let prefix = format!("page-{}/", slugid());
    for n in ["b", "a", "c"] {
        auth.createClient(
            &format!("{prefix}{n}"),
            &json!({"description": "x", "expires": ts(3_600_000), "scopes": []}),
        )
        .await
        .expect("createClient");
    }
    let auth = &auth;
    let seen: Vec<String> = all_pages("clients", 1, |t| async move {
        auth.listClients(None, t.as_deref(), Some("1"))
            .await
            .expect("listClients")
    })
    .await
    .iter()
    .map(|c| c["clientId"].as_str().unwrap().to_string())
    .collect();
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "every client once, by clientId");
    for id in [
        ROOT_CLIENT_ID.to_string(),
        format!("{prefix}a"),
        format!("{prefix}c"),
    ] {
        assert!(seen.contains(&id), "{id} listed");
    }

    let tester = app.auth_as(Some(Credentials::new("tester", "no-secret")));
    for (given, want) in [
        (
            json!(["test:b", "test:a"]),
            json!(["assume:anonymous", "test:b", "test:a"]),
        ),
        (
            json!(["test:a", "test:*"]),
            json!(["assume:anonymous", "test:a", "test:*"]),
        ),
    ] {
        let r = tester
            .testAuthenticate(&json!({"clientScopes": given, "requiredScopes": []}))
            .await
            .expect("testAuthenticate");
        assert_eq!(r["clientId"], "tester");
        assert_eq!(r["scopes"], want, "given {given}");
    }
    let r = app
        .auth_as(None)
        .testAuthenticate(&json!({"clientScopes": [], "requiredScopes": []}))
        .await
        .expect("unsigned testAuthenticate");
    assert_eq!(r["clientId"], "auth-failed:no-auth");
    assert_eq!(r["scopes"], json!(["assume:anonymous"]));

    let none = auth
        .authenticateHawk(
            &json!({"method": "get", "resource": "/x", "host": "q.example.com", "port": 443}),
        )
        .await
        .expect("authenticateHawk");
    assert_eq!(none["status"], "no-auth");
    let expires = shared::time::Ts::parse(none["expires"].as_str().unwrap()).expect("a date");
    let left = expires.millis() - shared::time::Ts::now().millis();
    assert!(
        (14 * 60_000..=15 * 60_000 + 5_000).contains(&left),
        "{left} ms"
    );
}

/// listRoleIds and listRoles2 page through every role by roleId, as upstream's.
#[tokio::test]
async fn role_ids_and_roles_come_a_page_at_a_time() {
    let app = spawn_app_alone().await;
    let auth = app.auth();
    let prefix = format!("paged-{}-", slugid());
    for n in ["b", "a", "c"] {
        auth.createRole(
            &format!("{prefix}{n}"),
            &json!({"description": "x", "scopes": [format!("queue:status:{n}")]}),
        )
        .await
        .expect("createRole");
    }
    let auth = &auth;
    let ids: Vec<String> = all_pages("roleIds", 1, |t| async move {
        auth.listRoleIds(t.as_deref(), Some("1"))
            .await
            .expect("listRoleIds")
    })
    .await
    .iter()
    .map(|r| r.as_str().unwrap().to_string())
    .collect();
    let mine: Vec<&String> = ids.iter().filter(|i| i.starts_with(&prefix)).collect();
    assert_eq!(
        mine,
        ["a", "b", "c"]
            .map(|n| format!("{prefix}{n}"))
            .iter()
            .collect::<Vec<_>>()
    );
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);

    let roles = all_pages("roles", 2, |t| async move {
        auth.listRoles2(t.as_deref(), Some("2"))
            .await
            .expect("listRoles2")
    })
    .await;
    let listed: Vec<&str> = roles
        .iter()
        .map(|r| r["roleId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let b = roles
        .iter()
        .find(|r| r["roleId"] == format!("{prefix}b").as_str())
        .unwrap();
    assert_eq!(b["scopes"], json!(["queue:status:b"]));
    assert!(b["expandedScopes"]
        .as_array()
        .unwrap()
        .contains(&json!("queue:status:b")));
}

/// The server process body for the cross-process role test; only runs when re-executed by
/// `spawn_child_server`.
#[ignore]
#[test]
fn auth_child_server() {
    blackbox::run_child_server()
}

/// As deployed every function is a process of its own: a role changed through one process is
/// in force in another within 2 s (each re-reads the roles at most once a second), however
/// recently that one read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_change_reaches_another_process_within_2_s() {
    if not_in_shape("starts server processes of its own") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut servers = vec![];
    for _ in 0..2 {
        servers.push(ChildServer::start("auth::auth_child_server", dir.path(), &[]).await);
    }
    let roots: Vec<String> = servers.iter().map(|s| s.root.clone()).collect();
    let auth_of = |root: &str| {
        taskcluster::Auth::new(
            taskcluster::ClientBuilder::new(root).credentials(root_credentials()),
        )
        .expect("client")
    };
    let (a, b) = (auth_of(&roots[0]), auth_of(&roots[1]));
    let role = format!("cross-{}", slugid());
    let expand = json!({ "scopes": [format!("assume:{role}")] });
    let grants = |r: &Value| {
        r["scopes"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("queue:status:granted")))
    };
    // B has just read the roles.
    assert!(!grants(&b.expandScopes(&expand).await.unwrap()));
    a.createRole(
        &role,
        &json!({"description": "x", "scopes": ["queue:status:granted"]}),
    )
    .await
    .expect("createRole in A");
    let changed = std::time::Instant::now();
    loop {
        if grants(&b.expandScopes(&expand).await.unwrap()) {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(2),
            "the grant is not in force in B after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A revocation the same way.
    a.deleteRole(&role).await.expect("deleteRole in A");
    let changed = std::time::Instant::now();
    while grants(&b.expandScopes(&expand).await.unwrap()) {
        assert!(
            changed.elapsed() < Duration::from_secs(2),
            "the revocation is not in force in B after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// updateClient and updateRole, as upstream: a client's update needs the scopes it adds that
/// the client does not hold word for word; a role's, those its present expansion does not
/// satisfy; a missing client or role is 404 before the scope check; `**` and an expansion
/// without end are 400.
#[tokio::test]
async fn update_client_and_update_role_grant_only_what_the_caller_holds() {
    let app = spawn_app().await;
    let auth = app.auth();
    let tag = slugid();
    let (role, cid) = (format!("test-role-{tag}"), format!("test/{tag}/c"));
    auth.createRole(
        &role,
        &json!({"description": "r", "scopes": ["a:*", "assume:sub-{tag}".replace("{tag}", &tag)]}),
    )
    .await
    .expect("createRole");
    let sub = format!("sub-{tag}");
    auth.createRole(&sub, &json!({"description": "", "scopes": ["s:1"]}))
        .await
        .expect("createRole");
    let created = auth
        .createClient(
            &cid,
            &json!({"description": "c", "expires": ts(3_600_000), "scopes": ["x:1", "z:1"]}),
        )
        .await
        .expect("createClient");
    // The caller may update both, and holds x:2 and b:1 but not y:1 nor x:1.
    let lid = format!("test/{tag}/updater");
    let limited = auth
        .createClient(
            &lid,
            &json!({"description": "", "expires": ts(3_600_000), "scopes": [
                format!("auth:update-client:test/{tag}/*"),
                format!("auth:update-role:test-role-{tag}"),
                "x:2", "b:1",
            ]}),
        )
        .await
        .expect("createClient");
    let me = app.auth_as(Some(Credentials::new(
        lid.clone(),
        limited["accessToken"].as_str().unwrap_or_default(),
    )));
    let body = |desc: &str, scopes: &[&str]| json!({"description": desc, "expires": ts(7_200_000), "scopes": scopes});
    // Added x:2 (held); x:1 kept; z:1 dropped, which needs nothing.
    let c = me
        .updateClient(&cid, &body("c2", &["x:1", "x:2"]))
        .await
        .expect("updateClient");
    assert_eq!(c["description"], "c2");
    assert_eq!(c["scopes"], json!(["x:1", "x:2"]));
    assert!(c.get("accessToken").is_none());
    let expires = shared::time::Ts::parse(c["expires"].as_str().unwrap_or_default());
    assert!(
        expires.is_some_and(|e| e.millis() > shared::time::Ts::now().millis() + 3_600_000),
        "{c}"
    );
    assert_ne!(c["lastModified"], created["lastModified"]);
    assert_eq!(
        auth.client(&cid).await.expect("client")["scopes"],
        c["scopes"]
    );
    // Adding y:1, which the caller lacks: 403, and nothing changes.
    assert_eq!(
        err_status(me.updateClient(&cid, &body("c3", &["x:1", "y:1"])).await),
        403
    );
    assert_eq!(
        auth.client(&cid).await.expect("client")["description"],
        "c2"
    );
    // The client's own access token still works after an update.
    let own = app.auth_as(Some(Credentials::new(
        cid.clone(),
        created["accessToken"].as_str().unwrap_or_default(),
    )));
    assert!(own.currentScopes().await.is_ok());
    let nobody = app.auth_as(Some(client_with(&app, &[]).await));
    assert_eq!(
        err_status(
            nobody
                .updateClient(&format!("test/{tag}/none"), &body("", &[]))
                .await
        ),
        404
    );
    assert_eq!(
        err_status(nobody.updateClient(&cid, &body("", &[])).await),
        403
    );
    assert_eq!(
        err_status(auth.updateClient(ROOT_CLIENT_ID, &body("", &[])).await),
        400
    );
    assert_eq!(
        err_status(auth.updateClient(&cid, &body("", &["x:**"])).await),
        400
    );
    // Word for word, as upstream: x:5 is within a stored x:*, yet added, so the caller must
    // hold it.
    let starred = format!("test/{tag}/starred");
    auth.createClient(
        &starred,
        &json!({"description": "", "expires": ts(3_600_000), "scopes": ["x:*"]}),
    )
    .await
    .expect("createClient");
    assert_eq!(
        err_status(me.updateClient(&starred, &body("", &["x:*", "x:5"])).await),
        403
    );

    // The role: a:5 is within a:* and s:1 comes through the sub-role, so neither needs the
    // caller; b:1 the caller holds; c:1 it does not.
    let assume_sub = format!("assume:{sub}");
    let r = me
        .updateRole(
            &role,
            &json!({"description": "r2", "scopes": ["a:*", "a:5", "s:1", "b:1", assume_sub]}),
        )
        .await
        .expect("updateRole");
    assert_eq!(r["description"], "r2");
    assert!(r["expandedScopes"]
        .as_array()
        .expect("expandedScopes")
        .contains(&json!(format!("assume:{role}"))));
    assert!(r["expandedScopes"]
        .as_array()
        .unwrap()
        .contains(&json!("b:1")));
    // Another process (expandScopes' function, as deployed) sees the role within 2 s.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let expanded = auth
            .expandScopes(&json!({"scopes": [format!("assume:{role}")]}))
            .await
            .expect("expandScopes");
        let has = expanded["scopes"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("b:1")));
        if has {
            break;
        }
        assert!(std::time::Instant::now() < until, "{expanded}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        err_status(
            me.updateRole(&role, &json!({"description": "", "scopes": ["c:1"]}))
                .await
        ),
        403
    );
    // An update whose expansion would not end (each step a longer roleId) is refused.
    let looping = format!("test-loop-{tag}*");
    auth.createRole(&looping, &json!({"description": "", "scopes": []}))
        .await
        .expect("createRole");
    let cycle = json!({"description": "", "scopes": [format!("assume:test-loop-{tag}x<..>")]});
    assert_eq!(err_status(auth.updateRole(&looping, &cycle).await), 400);
    let stars = json!({"description": "", "scopes": ["b:**"]});
    assert_eq!(err_status(auth.updateRole(&role, &stars).await), 400);
    assert_eq!(
        err_status(nobody.updateRole(&format!("no-role-{tag}"), &cycle).await),
        404
    );
    assert_eq!(auth.role(&role).await.expect("role")["description"], "r2");
}
