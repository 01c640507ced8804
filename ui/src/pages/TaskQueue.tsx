// A task queue: its figures (pending and claimed runs, the oldest pending run's age, workers:
// what the queue's metrics give; the runs past the aging threshold), the pending runs in claim
// order (those past the threshold marked), the claimed runs, and the workers seen on it
// (recent tasks, quarantine). And one worker.
import { useEffect, useState } from 'preact/hooks';
import { useSession } from '../lib/session';
import { apiError, type ApiError } from '../lib/api';
import { LIVE, usePoll } from '../lib/poll';
import { paths } from '../lib/router';
import { remember } from '../lib/recent';
import { count, duration } from '../lib/format';
import type { TaskDef } from '../lib/types';
import { ErrorBox, Facts, Loading, Table, Time, Updated, type Column } from '../components';

const LIST = 100;

interface Pending {
  taskId: string;
  runId: number;
  task: TaskDef;
  inserted: string;
}
interface Claimed {
  taskId: string;
  runId: number;
  task: TaskDef;
  workerGroup: string;
  workerId: string;
  claimed: string;
}
/** `taskQueueFigures`: the figures the queue's metrics give for this queue. */
interface Figures {
  pendingTasks: number;
  claimedTasks: number;
  oldestPending: string | null;
  /** Pending runs past the aging threshold, claimed first (oldest first). */
  agedPendingTasks: number;
  /** The aging threshold in ms; 0: off (strict priority order). */
  priorityAgingMs: number;
  workers: number;
  quarantinedWorkers: number;
  idleWorkers: number;
}
interface WorkerItem {
  workerGroup: string;
  workerId: string;
  quarantineUntil?: string;
  firstClaim: string;
  latestTask?: { taskId: string; runId: number };
  lastDateActive?: string;
}

/** The first columns of the pending and claimed runs. */
const TASK: Column<{ taskId: string; task: TaskDef }> = {
  label: 'Task',
  cell: (t) => <a href={paths.task(t.taskId)}>{t.task.metadata?.name ?? t.taskId}</a>,
};
const RUN: Column<{ runId: number }> = { label: 'Run', cell: (t) => t.runId };

/** One read, its value or its error: each part of the page stands on its own scopes. */
type Part<T> = { ok: T } | { err: ApiError };
async function part<T>(p: Promise<T>): Promise<Part<T>> {
  try {
    return { ok: await p };
  } catch (e) {
    return { err: apiError(e) };
  }
}

function Show<T>({ p, what, children }: { p?: Part<T>; what: string; children: (v: T) => preact.ComponentChildren }) {
  if (!p) return <Loading what={what} />;
  if ('err' in p) return <ErrorBox error={p.err} what={`Reading ${what}`} />;
  return <>{children(p.ok)}</>;
}

/** A titled part of the page: its read's error, or "none", or its table. */
function Listed<T>(props: {
  id: string;
  title: string;
  what: string;
  p?: Part<T>;
  none: string;
  empty: (v: T) => boolean;
  children: (v: T) => preact.ComponentChildren;
}) {
  return (
    <section aria-labelledby={props.id}>
      <h2 id={props.id}>{props.title}</h2>
      <Show p={props.p} what={props.what}>
        {(v) => (props.empty(v) ? <p>{props.none}</p> : props.children(v))}
      </Show>
    </section>
  );
}

export function TaskQueue({ taskQueueId }: { taskQueueId: string }) {
  const { queue, figures, credentials } = useSession();
  const [provisionerId, workerType] = taskQueueId.split('/');
  const polled = usePoll(
    async () => {
      const [counts, pending, claimed, info, workers] = await Promise.all([
        part<Figures>(figures.taskQueueFigures(taskQueueId)),
        part<{ tasks: Pending[] }>(queue.listPendingTasks(taskQueueId, { limit: LIST })),
        part<{ tasks: Claimed[] }>(queue.listClaimedTasks(taskQueueId, { limit: LIST })),
        part<{ lastDateActive?: string; expires?: string; stability?: string; description?: string }>(queue.getTaskQueue(taskQueueId)),
        part<{ workers: WorkerItem[] }>(queue.listWorkers(provisionerId, workerType ?? '', { limit: LIST })),
      ]);
      return { counts, pending, claimed, info, workers };
    },
    [taskQueueId],
    LIVE,
    credentials,
  );
  useEffect(() => remember('queue', taskQueueId), [taskQueueId]);
  const d = polled.data;
  const now = Date.now();
  const threshold = d && 'ok' in d.counts ? d.counts.ok.priorityAgingMs : 0;
  /** True if a run pending since `inserted` has waited past the aging threshold. */
  const aged = (inserted: string) => threshold > 0 && now - new Date(inserted).getTime() >= threshold;
  return (
    <>
      <h1>
        Task queue <code class="id">{taskQueueId}</code>
      </h1>
      <section aria-labelledby="counts-title">
        <h2 id="counts-title" class="visually-hidden">
          Counts
        </h2>
        {!d && <Loading what="the task queue" />}
        {d && (
          <Facts
            items={[
              ['Pending', 'ok' in d.counts ? <span data-testid="pending-count">{count(d.counts.ok.pendingTasks)}</span> : 'not readable'],
              ['Claimed', 'ok' in d.counts ? <span data-testid="claimed-count">{count(d.counts.ok.claimedTasks)}</span> : 'not readable'],
              [
                'Oldest pending',
                'ok' in d.counts
                  ? d.counts.ok.oldestPending
                    ? <span data-testid="oldest-pending">{duration(d.counts.ok.oldestPending, null, now)} old</span>
                    : 'none pending'
                  : 'not readable',
              ],
              [
                'Workers',
                'ok' in d.counts ? (
                  <span data-testid="workers-count">
                    {count(d.counts.ok.workers)} ({count(d.counts.ok.idleWorkers)} idle, {count(d.counts.ok.quarantinedWorkers)} quarantined)
                  </span>
                ) : (
                  'not readable'
                ),
              ],
              ['Priority aging', 'ok' in d.counts ? aging(d.counts.ok) : 'not readable'],
              ['Last active', 'ok' in d.info ? <Time iso={d.info.ok.lastDateActive} /> : undefined],
              ['Expires', 'ok' in d.info ? <Time iso={d.info.ok.expires} /> : undefined],
            ]}
          />
        )}
        {d && 'err' in d.counts && <ErrorBox error={d.counts.err} what="Reading the counts" />}
      </section>
      <Listed id="pending-title" title="Pending runs" what="pending runs" p={d?.pending} none="None." empty={(v) => v.tasks.length === 0}>
        {(v) => (
          <Table
            testid="pending"
            caption={`In claim order: past the aging threshold (oldest first), then by priority and age${v.tasks.length === LIST ? ` (the first ${LIST})` : ''}`}
            rows={v.tasks}
            rowKey={(t) => `${t.taskId}/${t.runId}`}
            rowProps={(t) => ({ 'data-task-id': t.taskId, 'data-aged': aged(t.inserted) ? 'true' : undefined })}
            columns={[
              TASK,
              RUN,
              { label: 'Priority', cell: (t) => t.task.priority ?? 'lowest' },
              { label: 'Pending since', cell: (t) => <Time iso={t.inserted} /> },
              {
                label: 'Age',
                cell: (t) => (
                  <>
                    {duration(t.inserted, null, now)}
                    {aged(t.inserted) && <span class="aged"> past the aging threshold</span>}
                  </>
                ),
              },
            ]}
          />
        )}
      </Listed>
      <Listed id="claimed-title" title="Claimed runs" what="claimed runs" p={d?.claimed} none="None." empty={(v) => v.tasks.length === 0}>
        {(v) => (
          <Table
            testid="claimed"
            rows={v.tasks}
            rowKey={(t) => `${t.taskId}/${t.runId}`}
            rowProps={(t) => ({ 'data-task-id': t.taskId })}
            columns={[
              TASK,
              RUN,
              {
                label: 'Worker',
                cell: (t) => <a href={paths.worker(taskQueueId, t.workerGroup, t.workerId)}>{`${t.workerGroup}/${t.workerId}`}</a>,
              },
              { label: 'Claimed', cell: (t) => <Time iso={t.claimed} /> },
            ]}
          />
        )}
      </Listed>
      <Listed
        id="workers-title"
        title="Workers"
        what="workers"
        p={d?.workers}
        none="No worker has claimed from this queue lately."
        empty={(v) => v.workers.length === 0}
      >
        {(v) => (
          <Table
            testid="workers"
            rows={v.workers}
            rowKey={(w) => `${w.workerGroup}/${w.workerId}`}
            rowProps={(w) => ({ 'data-worker': `${w.workerGroup}/${w.workerId}` })}
            columns={[
              {
                label: 'Worker',
                cell: (w) => <a href={paths.worker(taskQueueId, w.workerGroup, w.workerId)}>{`${w.workerGroup}/${w.workerId}`}</a>,
              },
              { label: 'Quarantine', cell: (w) => quarantine(w.quarantineUntil, now) },
              {
                label: 'Latest task',
                cell: (w) =>
                  w.latestTask ? <a href={paths.run(w.latestTask.taskId, w.latestTask.runId)}>{`${w.latestTask.taskId} run ${w.latestTask.runId}`}</a> : '—',
              },
              { label: 'Last active', cell: (w) => <Time iso={w.lastDateActive} /> },
              {
                label: 'Recent tasks',
                cell: (w) => <RecentTasks taskQueueId={taskQueueId} workerGroup={w.workerGroup} workerId={w.workerId} />,
              },
            ]}
          />
        )}
      </Listed>
      <Updated at={polled.updated} />
    </>
  );
}

/** The aging rule of this deployment, and how many pending runs it moved ahead. */
function aging(f: Figures) {
  if (f.priorityAgingMs <= 0) return 'off: strict priority, then age';
  const after = duration(new Date(0).toISOString(), new Date(f.priorityAgingMs).toISOString());
  return (
    <span>
      after {after}: <span data-testid="aged-count">{count(f.agedPendingTasks)}</span> pending past it, claimed first
    </span>
  );
}

function quarantine(until: string | undefined, now: number) {
  if (!until || new Date(until).getTime() <= now) return 'no';
  return (
    <span class="quarantined">
      until <Time iso={until} />
    </span>
  );
}

interface WorkerInfo {
  recentTasks: { taskId: string; runId: number }[];
  quarantineUntil?: string;
  firstClaim?: string;
  lastDateActive?: string;
  expires?: string;
}

function useWorker(taskQueueId: string, workerGroup: string, workerId: string, enabled: boolean) {
  const { queue } = useSession();
  const [info, setInfo] = useState<WorkerInfo | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  useEffect(() => {
    if (!enabled) return;
    const [p, wt] = taskQueueId.split('/');
    queue.getWorker(p, wt ?? '', workerGroup, workerId).then(setInfo, (e: unknown) => setError(apiError(e)));
  }, [queue, taskQueueId, workerGroup, workerId, enabled]);
  return { info, error };
}

function TaskList({ tasks }: { tasks: { taskId: string; runId: number }[] }) {
  if (tasks.length === 0) return <p>None.</p>;
  return (
    <ol class="links recent-tasks" reversed>
      {tasks
        .slice()
        .reverse()
        .map((t) => (
          <li key={`${t.taskId}/${t.runId}`}>
            <a href={paths.run(t.taskId, t.runId)}>{`${t.taskId} run ${t.runId}`}</a>
          </li>
        ))}
    </ol>
  );
}

/** A worker's recent tasks, read when opened. */
function RecentTasks(props: { taskQueueId: string; workerGroup: string; workerId: string }) {
  const [open, setOpen] = useState(false);
  const { info, error } = useWorker(props.taskQueueId, props.workerGroup, props.workerId, open);
  return (
    <details onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary>Show</summary>
      {error && <ErrorBox error={error} what="Reading the worker" />}
      {open && !info && !error && <Loading what="recent tasks" />}
      {info && <TaskList tasks={info.recentTasks} />}
    </details>
  );
}

export function Worker(props: { taskQueueId: string; workerGroup: string; workerId: string }) {
  const { info, error } = useWorker(props.taskQueueId, props.workerGroup, props.workerId, true);
  const now = Date.now();
  return (
    <>
      <h1>
        Worker <code class="id">{`${props.workerGroup}/${props.workerId}`}</code>
      </h1>
      <p>
        On task queue <a href={paths.queue(props.taskQueueId)}>{props.taskQueueId}</a>
      </p>
      {error && <ErrorBox error={error} what="Reading the worker" />}
      {!error && !info && <Loading what="the worker" />}
      {info && (
        <>
          <Facts
            items={[
              ['Quarantine', quarantine(info.quarantineUntil, now)],
              ['First claim', <Time iso={info.firstClaim} />],
              ['Last active', <Time iso={info.lastDateActive} />],
              ['Expires', <Time iso={info.expires} />],
            ]}
          />
          <section aria-labelledby="recent-title">
            <h2 id="recent-title">Recent tasks (newest first)</h2>
            <TaskList tasks={info.recentTasks} />
          </section>
        </>
      )}
    </>
  );
}
