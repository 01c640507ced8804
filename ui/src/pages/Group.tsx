// A task group: every task with its state, counts per state, a filter and a name search, kept
// live by re-reading the group (see lib/poll.ts). Rows are paged: 10,000 tasks stay responsive.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { useSession } from '../lib/session';
import { allPages } from '../lib/api';
import { LIVE, usePoll } from '../lib/poll';
import { paths } from '../lib/router';
import { remember } from '../lib/recent';
import { count, RESOLVED, TASK_STATES } from '../lib/format';
import type { Status, TaskAndStatus } from '../lib/types';
import { ErrorBox, Facts, Loading, State, Table, Time, Updated, type Column } from '../components';

const PAGE = 100;

interface GroupData {
  info: { taskGroupId: string; schedulerId: string; expires: string; sealed?: string };
  tasks: TaskAndStatus[];
  /** False while the first read is still paging. */
  complete: boolean;
}

interface Row {
  taskId: string;
  name: string;
  state: string;
  runs: number;
  started?: string;
  resolved?: string;
  worker?: string;
}

const nameOf = (t: TaskAndStatus) => t.task.metadata?.name ?? t.status.taskId;

function row({ status, task }: TaskAndStatus): Row {
  const last = status.runs[status.runs.length - 1];
  return {
    taskId: status.taskId,
    name: nameOf({ status, task }),
    state: status.state,
    runs: status.runs.length,
    started: last?.started,
    resolved: last?.resolved,
    worker: last?.workerId ? `${last.workerGroup}/${last.workerId}` : undefined,
  };
}

/** By name, then taskId (the rows' order). */
function byNameThenId(a: TaskAndStatus, b: TaskAndStatus): number {
  const [x, y] = [nameOf(a), nameOf(b)];
  if (x !== y) return x < y ? -1 : 1;
  return a.status.taskId < b.status.taskId ? -1 : 1;
}

const COLUMNS: Column<Row>[] = [
  { label: 'Name', cell: (r) => <a href={paths.task(r.taskId)}>{r.name}</a> },
  { label: 'State', cell: (r) => <State state={r.state} /> },
  { label: 'Runs', cell: (r) => r.runs },
  { label: 'Started', cell: (r) => <Time iso={r.started} /> },
  { label: 'Resolved', cell: (r) => <Time iso={r.resolved} /> },
  { label: 'Worker', cell: (r) => r.worker ?? '—' },
];

export function Group({ taskGroupId }: { taskGroupId: string }) {
  const { queue, credentials } = useSession();
  const shown = useRef(false);
  const polled = usePoll<GroupData>(
    async (partial) => {
      const info = await queue.getTaskGroup(taskGroupId);
      const first = !shown.current;
      const tasks = await allPages<TaskAndStatus>(
        'tasks',
        (q) => queue.listTaskGroup(taskGroupId, q),
        // The first read shows each page as it arrives, starting with a small one (the
        // table's first page); later reads swap the whole list.
        first ? (sofar) => partial({ info, tasks: sofar.slice(), complete: false }) : undefined,
        first ? PAGE : 1000,
      );
      shown.current = true;
      return { info, tasks, complete: true };
    },
    [taskGroupId],
    LIVE,
    credentials,
  );
  const { data, error } = polled;
  const [filter, setFilter] = useState<string | null>(null);
  const [search, setSearch] = useState('');
  const [page, setPage] = useState(0);
  useEffect(() => setPage(0), [filter, search]);
  useEffect(() => {
    if (data?.complete) remember('group', taskGroupId);
  }, [data?.complete, taskGroupId]);

  // Statuses read since the last full read, by taskId (see `useVisibleStatuses`).
  const fresh = useVisibleStatuses(polled);
  // The order (by name, then taskId) depends on the full read only: sorted once per read, not
  // on every status refresh (each second, for 10,000 rows).
  const sorted = useMemo(() => (data?.tasks ?? []).slice().sort(byNameThenId), [data]);
  const rows = useMemo(
    () => sorted.map((t) => row({ status: fresh.map.get(t.status.taskId) ?? t.status, task: t.task })),
    [sorted, fresh.map],
  );
  const counts = useMemo(() => {
    const c: Record<string, number> = Object.fromEntries(TASK_STATES.map((s) => [s, 0]));
    for (const r of rows) c[r.state] = (c[r.state] ?? 0) + 1;
    return c;
  }, [rows]);
  const visible = useMemo(() => {
    const q = search.trim().toLowerCase();
    return rows.filter((r) => (!filter || r.state === filter) && (!q || r.name.toLowerCase().includes(q)));
  }, [rows, filter, search]);

  if (!data) {
    return (
      <>
        <h1>Task group {taskGroupId}</h1>
        {error ? <ErrorBox error={error} what="Reading the task group" /> : <Loading what="the task group" />}
      </>
    );
  }
  const total = rows.length;
  const unresolved = total - RESOLVED.reduce((n, s) => n + (counts[s] ?? 0), 0);
  const pages = Math.max(1, Math.ceil(visible.length / PAGE));
  const current = Math.min(page, pages - 1);
  const slice = visible.slice(current * PAGE, (current + 1) * PAGE);
  fresh.shown.current = slice.map((r) => r.taskId);

  return (
    <>
      <h1>
        Task group <code class="id">{taskGroupId}</code>
      </h1>
      <Facts
        items={[
          ['schedulerId', data.info.schedulerId],
          ['Tasks', <span data-testid="total">{count(total)}</span>],
          ['Sealed', data.info.sealed ? <Time iso={data.info.sealed} /> : 'no'],
          [
            'Resolved',
            <span data-testid="resolved">
              {!data.complete ? 'reading…' : total > 0 && unresolved === 0 ? `yes: all ${count(total)} tasks resolved` : `no: ${count(unresolved)} unresolved`}
            </span>,
          ],
          ['Expires', <Time iso={data.info.expires} />],
        ]}
      />
      {error && <ErrorBox error={error} what="The last update failed" />}
      <Progress counts={counts} total={total} />
      <section aria-labelledby="tasks-title">
        <h2 id="tasks-title">Tasks</h2>
        <div class="controls">
          <div role="group" aria-label="Filter by state" class="filters">
            <button type="button" aria-pressed={filter === null} onClick={() => setFilter(null)}>
              All <span class="n">{count(total)}</span>
            </button>
            {TASK_STATES.map((s) => (
              <button
                type="button"
                key={s}
                class={`filter state-${s}`}
                aria-pressed={filter === s}
                data-state={s}
                onClick={() => setFilter(filter === s ? null : s)}
              >
                {s} <span class="n" data-testid={`count-${s}`}>{count(counts[s] ?? 0)}</span>
              </button>
            ))}
          </div>
          <label class="name-search">
            Search names
            <input type="search" value={search} onInput={(e) => setSearch((e.target as HTMLInputElement).value)} />
          </label>
        </div>
        <Table
          class="tasks"
          rows={slice}
          rowKey={(r) => r.taskId}
          rowProps={(r) => ({ 'data-task-id': r.taskId, 'data-state': r.state })}
          caption={
            <>
              {visible.length === 0
                ? 'No task matches.'
                : `Tasks ${count(current * PAGE + 1)}–${count(current * PAGE + slice.length)} of ${count(visible.length)}${
                    visible.length !== total ? ` (of ${count(total)} in the group)` : ''
                  }`}
              {!data.complete && ' (still reading the group…)'}
            </>
          }
          columns={COLUMNS}
        />
        {pages > 1 && (
          <nav class="pager" aria-label="Pages of tasks">
            <button type="button" disabled={current === 0} onClick={() => setPage(current - 1)}>
              Previous
            </button>
            <span>
              Page {current + 1} of {pages}
            </span>
            <button type="button" disabled={current >= pages - 1} onClick={() => setPage(current + 1)}>
              Next
            </button>
          </nav>
        )}
        <Updated at={polled.updated} took={polled.took} />
      </section>
    </>
  );
}

/** How long a full read may take before the shown rows are also read on their own. */
const SLOW_READ_MS = 400;

/**
 * A big group is read in full only every few seconds (see lib/poll.ts); meanwhile the rows on
 * screen (at most a page, 100) are re-read every second with `statuses`, so that a change
 * there shows within about a second whatever the group's size. A full read supersedes them.
 */
function useVisibleStatuses(polled: { took?: number; updated?: Date }) {
  const { queue } = useSession();
  const shown = useRef<string[]>([]);
  const [map, setMap] = useState<Map<string, Status>>(new Map());
  useEffect(() => setMap(new Map()), [polled.updated]);
  const slow = (polled.took ?? 0) > SLOW_READ_MS;
  useEffect(() => {
    if (!slow) return;
    let alive = true;
    const tick = async () => {
      const taskIds = shown.current;
      if (alive && taskIds.length && document.visibilityState === 'visible') {
        try {
          const r = await queue.statuses({ taskIds }, { limit: 1000 });
          if (alive) setMap((m) => new Map([...m, ...(r.statuses as { taskId: string; status: Status }[]).map((x) => [x.taskId, x.status] as const)]));
        } catch {
          // The next full read shows the error, if it lasts.
        }
      }
      if (alive) timer = setTimeout(tick, 1000);
    };
    let timer = setTimeout(tick, 1000);
    return () => {
      alive = false;
      clearTimeout(timer);
    };
  }, [queue, slow]);
  return { map, shown };
}

/** The share of each state, as a bar and as text. */
function Progress({ counts, total }: { counts: Record<string, number>; total: number }) {
  const label = TASK_STATES.filter((s) => counts[s]).map((s) => `${counts[s]} ${s}`).join(', ');
  return (
    <div class="progress" role="img" aria-label={total ? `Progress: ${label}` : 'No tasks'}>
      {TASK_STATES.filter((s) => counts[s]).map((s) => (
        <span key={s} class={`bar state-${s}`} style={{ width: `${(100 * counts[s]) / total}%` }} title={`${counts[s]} ${s}`} />
      ))}
    </div>
  );
}
