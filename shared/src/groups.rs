//! Task groups: getTaskGroup and listTaskGroup.
//!
//! A group is one item (`group`: schedulerId, expires, sealed) plus one member item per task
//! (`task#<taskId>`), all in the group's partition and written in the transaction that
//! creates the task. Listing is therefore a strongly consistent query in taskId order, and
//! its continuation token is the last taskId returned: tasks added while a client pages
//! never make it see a task twice or skip one that existed when it started.

use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::queue::{decode_token, encode_token, PageReq, Queue};
use crate::store::SkRange;
use crate::time::Ts;
use futures_util::future::try_join_all;
use serde_json::{json, Map, Value};

impl Queue {
    /// getTaskGroup: `{taskGroupId, schedulerId, expires, sealed?}`; a group past its
    /// `expires` is gone (404), even before the expiry job deletes it.
    pub async fn task_group(&self, group_id: &str, now: Ts) -> ApiResult<Value> {
        let item = self
            .store
            .get(keys::TASK_GROUPS, group_id, keys::SK_GROUP)
            .await
            .map_err(ApiError::internal)?;
        let expires = item
            .as_ref()
            .and_then(|i| i.data["expires"].as_str().and_then(Ts::parse));
        let (Some(item), Some(expires)) = (item, expires) else {
            return Err(ApiError::not_found(format!(
                "Task group {group_id} not found"
            )));
        };
        if expires <= now {
            return Err(ApiError::not_found(format!(
                "Task group {group_id} not found"
            )));
        }
        let mut out = Map::new();
        out.insert("taskGroupId".into(), json!(group_id));
        out.insert("schedulerId".into(), item.data["schedulerId"].clone());
        out.insert("expires".into(), json!(expires));
        if let Some(sealed) = item.data.get("sealed").filter(|s| !s.is_null()) {
            out.insert("sealed".into(), sealed.clone());
        }
        Ok(Value::Object(out))
    }

    /// listTaskGroup: the group's fields and one page of its tasks, in taskId order.
    pub async fn list_task_group(
        &self,
        group_id: &str,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Value, Option<String>)> {
        let mut out = self.task_group(group_id, now).await?;
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let range = SkRange {
            prefix: Some(keys::SK_MEMBER_PREFIX.to_string()),
            ..Default::default()
        };
        let res = self
            .store
            .query(
                keys::TASK_GROUPS,
                group_id,
                &range,
                after.as_ref(),
                page.limit,
            )
            .await
            .map_err(ApiError::internal)?;
        let ids: Vec<&str> = res
            .items
            .iter()
            .filter_map(|m| m.sk.strip_prefix(keys::SK_MEMBER_PREFIX))
            .collect();
        let mut tasks = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(16) {
            let found = try_join_all(chunk.iter().map(|id| self.task_and_status(id, now))).await?;
            // Expired members (deleted or not yet) are skipped.
            tasks.extend(found.into_iter().flatten());
        }
        out["tasks"] = json!(tasks);
        Ok((out, res.next.as_ref().map(encode_token)))
    }
}
