//! Tasks: createTask and defineTask (with their dependencies and group membership), and
//! reading definitions and statuses.

use super::core::{backoff, Queue, MAX_ATTEMPTS};
use super::deps::DependencyPlan;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::{TaskId, TaskQueueId};
use crate::page::{decode_token, encode_token, Filler, PageReq};
use crate::records::group::{member_item, TASK_GROUPS};
use crate::records::task::{task_expiry_entry, Priority, TaskRecord, SK_DEF, TASKS};
use crate::store::{Cond, Data, Item, StoreError, WriteOp};
use crate::time::{Ts, DAY, MINUTE};
use serde_json::{json, Map, Value};

/// Clock skew allowed on `created`, and on the deadline limit.
const DRIFT_MS: i64 = 15 * MINUTE;

impl Queue {
    /// GET /task/<taskId>: the definition (with the current priority). A task past its
    /// `expires` is gone, even before the expiry job deletes it.
    pub async fn task(&self, task_id: &TaskId, now: Ts) -> ApiResult<Value> {
        let def = self.load_def(task_id.as_str()).await?;
        let expired = |d: &Value| d["expires"].as_str().and_then(Ts::parse) <= Some(now);
        let Some(mut def) = def.filter(|d| !expired(d)) else {
            return Err(ApiError::not_found(format!("Task {task_id} not found")));
        };
        if let Some((rec, _)) = self.load(task_id.as_str()).await? {
            def["priority"] = json!(rec.priority.as_str());
        }
        Ok(def)
    }

    /// GET /task/<taskId>/status; a task past its `expires` is gone.
    pub async fn status(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        match self.load(task_id.as_str()).await? {
            Some((rec, _)) if rec.expires > now => Ok(rec),
            _ => Err(ApiError::not_found(format!("Task {task_id} not found"))),
        }
    }

    /// Definitions or statuses of many tasks; unknown ids are skipped. Offset-paged.
    pub async fn many(
        &self,
        task_ids: &[String],
        page: &PageReq,
        statuses: bool,
        now: Ts,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let start = match &page.token {
            Some(t) => decode_token(t)?
                .0
                .parse::<usize>()
                .map_err(|_| ApiError::bad_argument("continuationToken is not valid"))?,
            None => 0,
        };
        let mut end = (start + page.limit).min(task_ids.len());
        let mut out = Filler::default();
        for (i, id) in task_ids.iter().enumerate().take(end).skip(start) {
            let Ok(tid) = TaskId::parse(id) else { continue };
            // A task that does not exist is left out, as upstream; any other failure is the
            // caller's to see (a page silently missing a task would read as "no such task").
            let item = if statuses {
                match self.status(&tid, now).await {
                    Ok(rec) => json!({ "taskId": id, "status": rec.status_json() }),
                    Err(e) if e.code == ErrorCode::ResourceNotFound => continue,
                    Err(e) => return Err(e),
                }
            } else {
                match self.task(&tid, now).await {
                    Ok(def) => json!({ "taskId": id, "task": def }),
                    Err(e) if e.code == ErrorCode::ResourceNotFound => continue,
                    Err(e) => return Err(e),
                }
            };
            if !out.push(item) {
                end = i;
                break;
            }
        }
        let next = (end < task_ids.len())
            .then(|| encode_token(&(end.to_string(), String::new(), String::new())));
        Ok((out.into_items(), next))
    }

    /// createTask / defineTask. `body` has been schema-validated with defaults filled.
    /// With `define_only`, the task stays unscheduled until scheduleTask.
    pub async fn create_task(
        &self,
        task_id: &TaskId,
        body: Value,
        define_only: bool,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        let def = normalize_definition(task_id, body, now, self.cfg.max_task_deadline_days)?;
        let (rec, plan) = self.initial_record(task_id, &def, define_only, now).await?;
        for attempt in 0..MAX_ATTEMPTS {
            // Task group: schedulerId must agree and the group must not be sealed. The first
            // try reads the group eventually consistent: the transaction checks the versions
            // read, and a refusal is only given on a strong read.
            let group_ops = match self.join_group_ops(&rec, now, attempt > 0).await {
                Err(_) if attempt == 0 => self.join_group_ops(&rec, now, true).await?,
                ops => ops?,
            };
            let mut fresh = rec.clone();
            fresh.emit_created();
            let expiry = task_expiry_entry(rec.expires, task_id.as_str(), SK_DEF);
            // Encoded here rather than copied: the store writes the text either way.
            let def_data = Data::encode(&def)?;
            let def_len = def_data.encoded().map_or(0, |b| b.len());
            let mut ops = vec![
                WriteOp::Put {
                    table: TASKS,
                    item: Item::new(task_id.as_str(), SK_DEF, def_data, vec![expiry]),
                    cond: Cond::NotExists,
                },
                WriteOp::Put {
                    table: TASKS,
                    item: Self::status_item(&fresh)?,
                    cond: Cond::NotExists,
                },
                // Membership, so that listTaskGroup is one strongly consistent query. It
                // cannot exist without the definition (expiry deletes it first), so it is
                // new exactly when the definition is: no read of its current version.
                WriteOp::Put {
                    table: TASK_GROUPS,
                    item: member_item(&rec.task_group_id, task_id.as_str(), rec.expires),
                    cond: Cond::NotExists,
                },
            ];
            ops.extend(group_ops);
            match self.store.transact(ops).await {
                Ok(()) => {
                    // A created item's first version is 1 (the store port's promise).
                    self.after_write(&fresh, 1);
                    if self.cfg.keep_created_defs {
                        self.keep_def(task_id.as_str(), def, def_len);
                    }
                    if plan.edges.is_empty() {
                        return Ok(fresh);
                    }
                    self.write_edges(&fresh, &plan, now).await?;
                    // A dependency may have been met meanwhile: show the task as it is now.
                    return self.status(task_id, now).await;
                }
                // The definition exists: an idempotent repeat, or a conflict.
                Err(StoreError::TransactionCancelled { reasons })
                    if reasons.first() == Some(&true) =>
                {
                    if let Some(existing) = self.load_def(task_id.as_str()).await? {
                        let rec = self.repeat_create(task_id, &existing, &def).await?;
                        if plan.edges.is_empty() {
                            return Ok(rec);
                        }
                        // The first attempt may have stopped before its edges were written.
                        self.write_edges(&rec, &plan, now).await?;
                        return self.status(task_id, now).await;
                    }
                }
                // The group changed meanwhile (or the task vanished again): look again.
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {task_id} could not be created under contention; try again"
        )))
    }

    /// The same taskId again: equal definitions are idempotent (and re-send the events),
    /// anything else is 409.
    async fn repeat_create(
        &self,
        task_id: &TaskId,
        existing: &Value,
        def: &Value,
    ) -> ApiResult<TaskRecord> {
        if existing != def {
            return Err(ApiError::conflict(format!(
                "Task {task_id} already exists with a different definition"
            )));
        }
        let (rec, ()) = self
            .mutate(task_id.as_str(), |rec| {
                rec.emit_created();
                Ok(())
            })
            .await?;
        Ok(rec)
    }

    async fn initial_record(
        &self,
        task_id: &TaskId,
        def: &Value,
        define_only: bool,
        now: Ts,
    ) -> ApiResult<(TaskRecord, DependencyPlan)> {
        let s = |k: &str| def[k].as_str().unwrap_or_default().to_string();
        let ts = |k: &str| Ts::parse(def[k].as_str().unwrap_or_default()).unwrap_or(now);
        let priority = Priority::parse(def["priority"].as_str().unwrap_or("lowest"))
            .unwrap_or(Priority::Lowest);
        let retries = def["retries"].as_u64().unwrap_or(5) as u32;
        let strings = |k: &str| -> Vec<String> { crate::json::string_list(&def[k]) };
        let mut rec = TaskRecord {
            unknown: Default::default(),
            task_id: task_id.to_string(),
            task_queue_id: s("taskQueueId"),
            scheduler_id: s("schedulerId"),
            project_id: s("projectId"),
            task_group_id: s("taskGroupId"),
            priority,
            deadline: ts("deadline"),
            expires: ts("expires"),
            retries,
            retries_left: retries,
            runs: vec![],
            routes: strings("routes"),
            tags: def["tags"].clone(),
            outbox: vec![],
            unsatisfied: 0,
            dependents_due: None,
            group_counted: true,
            resolution_held: false,
            sweep: !self.cfg.events_from_stream,
            aged: None,
            held_since: None,
        };
        let plan = self
            .plan_dependencies(task_id.as_str(), def, rec.deadline, now)
            .await?;
        // defineTask waits for scheduleTask, as a self-dependency does.
        rec.unsatisfied = plan.unsatisfied + u32::from(define_only);
        if rec.unsatisfied == 0 {
            rec.start_first_run(now);
        }
        Ok((rec, plan))
    }
}

/// One calendar year after `t`, as upstream's `setFullYear(getFullYear() + 1)` (29 February
/// becomes 1 March).
fn one_year_after(t: Ts) -> Ts {
    use chrono::{Datelike, TimeZone, Utc};
    let Some(d) = Utc.timestamp_millis_opt(t.millis()).single() else {
        return t.plus(365 * DAY);
    };
    let year = d.year() + 1;
    d.with_year(year)
        .or_else(|| d.with_day(1)?.with_month(3)?.with_year(year))
        .map(|n| Ts(n.timestamp_millis()))
        .unwrap_or(t.plus(365 * DAY))
}

/// Applies the hand-checked rules of createTask and returns the definition as stored:
/// dates in millisecond form, taskQueueId and the legacy pair reconciled, taskGroupId and
/// expires defaulted.
pub fn normalize_definition(
    task_id: &TaskId,
    mut body: Value,
    now: Ts,
    max_deadline_days: i64,
) -> ApiResult<Value> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::input("task definition must be an object"))?;
    let tq = obj
        .get("taskQueueId")
        .and_then(Value::as_str)
        .map(String::from);
    let prov = obj
        .get("provisionerId")
        .and_then(Value::as_str)
        .map(String::from);
    let wt = obj
        .get("workerType")
        .and_then(Value::as_str)
        .map(String::from);
    let q = match (tq, prov, wt) {
        (Some(tq), p, w) => {
            let q = TaskQueueId::parse(&tq).map_err(|e| ApiError::input(e.message))?;
            if p.as_deref().is_some_and(|p| p != q.provisioner_id())
                || w.as_deref().is_some_and(|w| w != q.worker_type())
            {
                return Err(ApiError::input(format!(
                    "taskQueueId {tq} does not agree with provisionerId/workerType"
                )));
            }
            q
        }
        (None, Some(p), Some(w)) => {
            TaskQueueId::from_parts(&p, &w).map_err(|e| ApiError::input(e.message))?
        }
        _ => {
            return Err(ApiError::input(
                "A task needs a taskQueueId, or both provisionerId and workerType",
            ))
        }
    };
    obj.insert("taskQueueId".into(), json!(q.as_str()));
    obj.insert("provisionerId".into(), json!(q.provisioner_id()));
    obj.insert("workerType".into(), json!(q.worker_type()));
    obj.entry("taskGroupId")
        .or_insert_with(|| json!(task_id.as_str()));

    let date = |obj: &Map<String, Value>, k: &str| -> ApiResult<Option<Ts>> {
        match obj.get(k).and_then(Value::as_str) {
            None => Ok(None),
            Some(s) => Ts::parse(s)
                .map(Some)
                .ok_or_else(|| ApiError::input(format!("{k} is not a valid date-time: {s}"))),
        }
    };
    let created = date(obj, "created")?.ok_or_else(|| ApiError::input("created is required"))?;
    let deadline = date(obj, "deadline")?.ok_or_else(|| ApiError::input("deadline is required"))?;
    let expires = date(obj, "expires")?.unwrap_or(one_year_after(deadline));
    if (created.millis() - now.millis()).abs() > DRIFT_MS {
        return Err(ApiError::input(format!(
            "created {created} must be within 15 minutes of the current time {now}"
        )));
    }
    if deadline < created {
        return Err(ApiError::input(format!(
            "deadline {deadline} must not be before created {created}"
        )));
    }
    if deadline <= now {
        return Err(ApiError::input(format!(
            "deadline {deadline} is in the past"
        )));
    }
    if deadline > now.plus(max_deadline_days * DAY + DRIFT_MS) {
        return Err(ApiError::input(format!(
            "deadline {deadline} is more than {max_deadline_days} days in the future"
        )));
    }
    if expires < deadline {
        return Err(ApiError::input(format!(
            "expires {expires} must not be before deadline {deadline}"
        )));
    }
    obj.insert("created".into(), json!(created));
    obj.insert("deadline".into(), json!(deadline));
    obj.insert("expires".into(), json!(expires));
    if let Some(bad) = obj.get("scopes").and_then(Value::as_array).and_then(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .find(|s| s.ends_with("**"))
    }) {
        return Err(ApiError::input(format!(
            "scope {bad:?} ends with '**', which is not allowed"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_expiry_is_one_calendar_year_after_the_deadline() {
        let at = |s: &str| Ts::parse(s).unwrap();
        assert_eq!(
            one_year_after(at("2027-03-01T10:00:00.123Z")),
            at("2028-03-01T10:00:00.123Z"),
            "crossing 29 February takes 366 days"
        );
        assert_eq!(
            one_year_after(at("2028-02-29T00:00:00.000Z")),
            at("2029-03-01T00:00:00.000Z"),
            "29 February rolls over to 1 March, as in JavaScript"
        );
    }
}
