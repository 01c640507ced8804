//! Expiry of tasks, dependency edges and task groups: reads treat anything past `expires` as
//! gone at once; the expiry job then deletes it, and a group id can be taken again.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use shared::records::edge::sk_dependent;
use shared::records::group::TASK_GROUPS;
use shared::records::task::TASKS;
use shared::store::SkRange;
use std::time::Duration;

/// The least a short-lived task lives, in ms (3 s; in the deployed shape 20 s, where cold
/// functions beside other tests' stacks took more than 8 s to create, claim and complete one).
fn least_lifetime_ms() -> i64 {
    local_or_shape(3_000, 20_000)
}

/// How long a short-lived task lives on `app`, in ms: four times what one create, claim and
/// complete of a task of its own took there just now (which also warms the functions that
/// serve them), and at least [`least_lifetime_ms`]. A test makes about five calls before its
/// short-lived task's deadline must not have passed; a fixed 3 s was too little for the
/// local server on a loaded LocalStack (its reportCompleted answered 409: deadline exceeded).
async fn lifetime_on(app: &TestServer, tq: &str) -> i64 {
    let started = std::time::Instant::now();
    let id = create(app, &task_def(tq)).await;
    app.queue()
        .claimTask(&id, "0", &claimer("g", "w"))
        .await
        .expect("claim the warm-up task");
    complete(app, &id, 0).await;
    let took = started.elapsed().as_millis() as i64;
    let lifetime = least_lifetime_ms().max(4 * took);
    eprintln!("a create, claim and complete took {took} ms: short-lived tasks live {lifetime} ms");
    lifetime
}

/// How long to wait for a task living `lifetime` ms to be gone.
fn until_gone(lifetime: i64) -> Duration {
    Duration::from_millis(lifetime as u64) + Duration::from_secs(20)
}

/// How long to wait, once the first short-lived task is gone, for the expiry job to delete
/// what expired: a minute, and four lifetimes (the dependent expires up to a lifetime after
/// the first, and the job's passes slow down with the store as the calls measured by
/// [`lifetime_on`] do: beside the crash and racing tests on LocalStack, a minute alone was too
/// little where a create, claim and complete took 3.7 s).
fn until_deleted(lifetime: i64) -> Duration {
    Duration::from_secs(60) + 4 * Duration::from_millis(lifetime as u64)
}

/// A task in `group` under `scheduler` whose deadline and expiry pass within `lifetime` ms
/// (and 500 ms).
fn short_lived(tq: &str, group: &str, scheduler: &str, lifetime: i64) -> Value {
    def_with(
        tq,
        json!({
            "created": ts(-5_000),
            "deadline": ts(lifetime),
            "expires": ts(lifetime + 500),
            "taskGroupId": group,
            "schedulerId": scheduler,
        }),
    )
}

/// A short-lived task of a group of its own, claimed (run 0 running): its id, its definition
/// and its lifetime.
async fn short_lived_running(app: &TestServer) -> (String, Value, i64) {
    let tq = task_queue_id();
    let lifetime = lifetime_on(app, &tq).await;
    let body = short_lived(&tq, &slugid(), "s", lifetime);
    let id = create(app, &body).await;
    app.queue()
        .claimTask(&id, "0", &claimer("g", "w"))
        .await
        .expect("claim");
    (id, body, lifetime)
}

/// A long-lived task in `group` under `scheduler`: the group's second life, which must not
/// expire while the test reads it back, however loaded the machine.
fn lasting(tq: &str, group: &str, scheduler: &str) -> Value {
    def_with(
        tq,
        json!({ "taskGroupId": group, "schedulerId": scheduler }),
    )
}

/// The HTTP status of a call (200 when it succeeded).
fn answer(r: anyhow::Result<Value>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(e) => status_of(&e).unwrap_or(0),
    }
}

/// Every item in one partition of the server's store.
async fn partition(app: &TestServer, table: &'static str, pk: &str) -> Vec<String> {
    let page = app
        .domain_queue()
        .await
        .store
        .query(table, pk, &SkRange::default(), None, 1000)
        .await
        .unwrap();
    page.items.into_iter().map(|i| i.sk).collect()
}

#[tokio::test]
async fn expired_tasks_edges_and_groups_are_deleted_and_the_group_id_reused() {
    let app = spawn_app_with(|c| {
        c.queue.group_expiry_extension_ms = 300;
        c.artifact_reaper_interval_ms = 100;
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let lifetime = lifetime_on(&app, &tq).await;
    let long_lived = create(&app, &task_def(&tq)).await;
    let short = create(&app, &short_lived(&tq, &group, "first", lifetime)).await;
    // As upstream's expire-tasks test: a completed task goes, a longer-lived one stays.
    q.claimTask(&short, "0", &claimer("g", "w"))
        .await
        .expect("claim the short-lived task");
    complete(&app, &short, 0).await;
    // An edge from the long-lived task to the short-lived one: it expires with its dependent.
    let mut dependent = short_lived(&tq, &group, "first", lifetime);
    dependent["dependencies"] = json!([long_lived]);
    let dep = create(&app, &dependent).await;
    assert!(partition(&app, TASKS, &long_lived)
        .await
        .contains(&sk_dependent(&dep)));
    // Another scheduler can't use the group while it lives.
    assert_eq!(
        err_status(
            q.createTask(&slugid(), &short_lived(&tq, &group, "second", lifetime))
                .await
        ),
        409
    );

    // Past `expires`, reads say 404 at once, whether or not the job has run.
    poll(
        until_gone(lifetime),
        "the short-lived task to be gone",
        || async { (answer(q.status(&short).await) == 404).then_some(()) },
    )
    .await;
    assert_eq!(err_status(q.task(&short).await), 404);
    // Then the job deletes every item: tasks, edge, membership, counters and the group.
    poll(
        until_deleted(lifetime),
        "the expiry job to delete everything",
        || async {
            let gone = partition(&app, TASKS, &short).await.is_empty()
                && partition(&app, TASKS, &dep).await.is_empty()
                && partition(&app, TASK_GROUPS, &group).await.is_empty()
                && !partition(&app, TASKS, &long_lived)
                    .await
                    .contains(&sk_dependent(&dep));
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(err_status(q.getTaskGroup(&group).await), 404);
    assert_eq!(status(&app, &long_lived).await["state"], "pending");

    // The group id is free again, for another schedulerId.
    let reborn = create(&app, &lasting(&tq, &group, "second")).await;
    let g = q.getTaskGroup(&group).await.unwrap();
    assert_eq!(g["schedulerId"], "second");
    let listed = q.listTaskGroup(&group, None, None).await.unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(listed["tasks"][0]["status"]["taskId"], reborn.as_str());
}

#[tokio::test]
async fn edges_go_with_their_dependents_even_when_the_dependency_expires_first() {
    let app = spawn_app_with(|c| {
        c.queue.group_expiry_extension_ms = 300;
        c.artifact_reaper_interval_ms = 100;
    })
    .await;
    let tq = task_queue_id();
    let group = slugid();
    let lifetime = lifetime_on(&app, &tq).await;
    let first = short_lived(&tq, &group, "s", lifetime);
    let dependency = create(&app, &first).await;
    // Its dependent's deadline is the dependency's (within its life, however long creating
    // it took), its expiry a lifetime later; it also depends on itself, so its own partition
    // holds an edge too.
    let dependent = slugid();
    let mut body = short_lived(&tq, &group, "s", lifetime);
    body["deadline"] = first["deadline"].clone();
    body["expires"] = json!(ts(2 * lifetime + 500));
    body["dependencies"] = json!([dependency, dependent]);
    let made = app.queue().createTask(&dependent, &body).await;
    assert!(made.is_ok(), "create the dependent: {made:?}");
    let edge = sk_dependent(&dependent);
    assert!(partition(&app, TASKS, &dependency).await.contains(&edge));
    assert!(partition(&app, TASKS, &dependent).await.contains(&edge));

    // The dependency's expiry deletes all of it but the edge, which is its dependent's.
    poll(
        until_deleted(lifetime),
        "the dependency to be deleted but for the edge",
        || async {
            (partition(&app, TASKS, &dependency).await == vec![edge.clone()]).then_some(())
        },
    )
    .await;
    assert!(!partition(&app, TASKS, &dependent).await.is_empty());
    // The dependent's expiry deletes the edge, its own self-edge and the rest.
    poll(
        until_deleted(2 * lifetime),
        "the dependent and its edges to be deleted",
        || async {
            let gone = partition(&app, TASKS, &dependency).await.is_empty()
                && partition(&app, TASKS, &dependent).await.is_empty();
            gone.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn artifacts_that_expire_with_their_task_go_with_it_bytes_and_all() {
    use shared::blobs::Bucket;
    use shared::records::artifact::{ARTIFACTS, ARTIFACT_EXPIRY};
    use shared::store::shard::{shard_of, shard_pk};
    let app = spawn_app_with(|c| {
        c.queue.group_expiry_extension_ms = 300;
        c.queue.artifact_expiry_grace_ms = 0;
        c.artifact_reaper_interval_ms = 100;
    })
    .await;
    let q = app.queue();
    let (id, body, lifetime) = short_lived_running(&app).await;
    let name = "public/with-the-task.txt";
    let made = q
        .createArtifact(
            &id,
            "0",
            name,
            &json!({"storageType": "s3", "expires": body["expires"], "contentType": "text/plain"}),
        )
        .await
        .expect("createArtifact");
    let put = reqwest::Client::new()
        .put(made["putUrl"].as_str().unwrap_or_default())
        .header("content-type", "text/plain")
        .body("bytes")
        .send()
        .await
        .expect("PUT");
    assert_eq!(put.status().as_u16(), 200);
    let url = app
        .domain_blobs()
        .await
        .get_url(
            Bucket::for_name(name),
            &format!("{id}/0/{name}"),
            shared::time::Ts::now(),
            3_600_000,
        )
        .await
        .expect("a download URL");
    let fetch = |url: String| async move {
        let r = reqwest::get(&url).await.expect("GET");
        r.status().as_u16()
    };
    assert_eq!(fetch(url.clone()).await, 200);
    complete(&app, &id, 0).await;
    // It has no entry of its own in the artifacts' expiry index.
    settle_indexes().await;
    let entries = app
        .domain_queue()
        .await
        .store
        .query_index(
            ARTIFACTS,
            ARTIFACT_EXPIRY,
            &shard_pk(ARTIFACT_EXPIRY, shard_of(&id)),
            &SkRange::default(),
            None,
            1000,
        )
        .await
        .expect("the index");
    assert!(
        entries.items.iter().all(|i| i.pk != id),
        "{:?}",
        entries.items
    );
    // Once the task expired the expiry job deletes the bytes, the row and the task.
    poll(
        until_gone(lifetime) + until_deleted(lifetime),
        "the task and its artifact to be deleted",
        || {
            let url = url.clone();
            let (app, id) = (&app, &id);
            async move {
                let gone = partition(app, ARTIFACTS, id).await.is_empty()
                    && partition(app, TASKS, id).await.is_empty()
                    && matches!(fetch(url).await, 403 | 404);
                gone.then_some(())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_pass_leaves_a_task_whose_artifacts_are_in_their_grace_and_does_not_spin() {
    use shared::records::artifact::ARTIFACTS;
    // The timer stays out of the way: the test runs the passes.
    let app = spawn_app_alone_with(|c| c.artifact_reaper_interval_ms = 3_600_000).await;
    let q = app.queue();
    let (id, body, lifetime) = short_lived_running(&app).await;
    let artifact = json!({"storageType": "error", "expires": body["expires"],
        "reason": "file-missing-on-worker", "message": "m"});
    q.createArtifact(&id, "0", "public/e", &artifact)
        .await
        .expect("createArtifact");
    complete(&app, &id, 0).await;
    poll(until_gone(lifetime), "the task to expire", || async {
        (answer(q.status(&id).await) == 404).then_some(())
    })
    .await;
    settle_indexes().await;
    let (queue, blobs) = (app.domain_queue().await, app.domain_blobs().await);
    let budget = shared::time::Budget::of(Duration::from_secs(60));
    // Within the grace: nothing goes, and a page full of such tasks (one, at a batch of
    // one) does not ask for another pass at once.
    let grace = shared::queue::artifacts::EXPIRY_GRACE_MS;
    let pass = queue
        .expire_once(blobs.as_ref(), shared::time::Ts::now(), grace, 1, &budget)
        .await
        .expect("a pass");
    assert_eq!((pass.done, pass.more), (0, false));
    assert!(!partition(&app, ARTIFACTS, &id).await.is_empty());
    // Past it, the artifact and the task go.
    let pass = queue
        .expire_once(blobs.as_ref(), shared::time::Ts::now(), 0, 1, &budget)
        .await
        .expect("a pass");
    assert_eq!(pass.done, 1);
    assert!(partition(&app, ARTIFACTS, &id).await.is_empty());
    assert!(partition(&app, TASKS, &id).await.is_empty());
}

#[tokio::test]
async fn a_group_id_is_free_as_soon_as_the_group_expired_even_before_deletion() {
    // The job never runs here: reuse must not depend on it.
    let app = spawn_app_with(|c| {
        c.queue.group_expiry_extension_ms = 0;
        c.artifact_reaper_interval_ms = 3_600_000;
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let lifetime = least_lifetime_ms();
    let old = create(&app, &short_lived(&tq, &group, "first", lifetime)).await;
    poll(until_gone(lifetime), "the group to expire", || async {
        (answer(q.getTaskGroup(&group).await) == 404).then_some(())
    })
    .await;
    assert_eq!(err_status(q.status(&old).await), 404);
    let id = create(&app, &lasting(&tq, &group, "second")).await;
    assert_eq!(
        q.getTaskGroup(&group).await.unwrap()["schedulerId"],
        "second"
    );
    let listed = q.listTaskGroup(&group, None, None).await.unwrap();
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["status"]["taskId"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()], "the expired member is not listed");
}
