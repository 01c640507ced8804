//! A task group's counter of unresolved tasks, split into shares (`unresolved#<shard>`) so
//! that tasks created together rarely contend. createTask (and a rerun of a resolved task)
//! adds one in its own transaction; the dependency worker, which visits every resolution,
//! takes one off in the transaction that clears the task's resolution mark (see
//! [`super::groups`]).

use crate::error::ApiResult;
use crate::records::group::{
    share_count, share_op, sk_unresolved, COUNTER_SHARES, SK_UNRESOLVED_PREFIX, TASK_GROUPS,
};
use crate::store::{Cond, Item, SkRange, Store, WriteOp};

/// The counter shares of a group. Read eventually consistent (`consistent` false), they may
/// be stale: every write that rests on them is conditioned on the versions read.
pub(crate) async fn shares(
    store: &dyn Store,
    group_id: &str,
    consistent: bool,
) -> ApiResult<Vec<Item>> {
    let range = SkRange {
        prefix: Some(SK_UNRESOLVED_PREFIX.to_string()),
        ..Default::default()
    };
    let page = store
        .query_as(TASK_GROUPS, group_id, &range, COUNTER_SHARES, consistent)
        .await?;
    Ok(page.items)
}

/// The writes that count `task_id` as one more unresolved task of its group, given the
/// shares read. With `reset` (the group id is taken again after expiry), the other shares are
/// cleared in the same transaction.
pub(crate) fn count_ops(
    shares: &[Item],
    group_id: &str,
    task_id: &str,
    reset: bool,
) -> Vec<WriteOp> {
    let sk = sk_unresolved(task_id);
    let mine = shares.iter().find(|i| i.sk == sk);
    let count = if reset {
        1
    } else {
        mine.map_or(0, share_count) + 1
    };
    let mut ops = vec![share_op(group_id, sk.clone(), count, mine)];
    if reset {
        ops.extend(
            shares
                .iter()
                .filter(|i| i.sk != sk)
                .map(|i| WriteOp::Delete {
                    table: TASK_GROUPS,
                    pk: group_id.to_string(),
                    sk: i.sk.clone(),
                    cond: Cond::Version(i.version),
                }),
        );
    }
    ops
}

/// The writes that take `task_id` off its group's count, and whether that empties it. When
/// it does, the transaction also checks that every other share is still at the zero read, so
/// exactly one transaction sees the count reach zero however many resolve at once.
pub(crate) fn uncount_ops(shares: &[Item], group_id: &str, task_id: &str) -> (Vec<WriteOp>, bool) {
    let sk = sk_unresolved(task_id);
    let mine = shares.iter().find(|i| i.sk == sk);
    let left = mine.map_or(0, share_count).saturating_sub(1);
    let mut ops = vec![share_op(group_id, sk.clone(), left, mine)];
    if left > 0 {
        return (ops, false);
    }
    let others: Vec<&Item> = shares.iter().filter(|i| i.sk != sk).collect();
    ops.extend(others.iter().map(|i| WriteOp::Check {
        table: TASK_GROUPS,
        pk: group_id.to_string(),
        sk: i.sk.clone(),
        cond: Cond::Version(i.version),
    }));
    (ops, others.iter().all(|i| share_count(i) == 0))
}
