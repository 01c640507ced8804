// A task: its status and runs (kept live), each run's artifacts with download links, its
// dependencies and dependents, its definition, and the actions the caller's scopes allow.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { useSession, type Session } from '../lib/session';
import { allPages, allPagesByIds, apiError, type ApiError } from '../lib/api';
import { LIVE, usePoll } from '../lib/poll';
import { paths } from '../lib/router';
import { remember } from '../lib/recent';
import { allows } from '../lib/scopes';
import { duration, RESOLVED } from '../lib/format';
import type { Artifact, Run, Status, TaskAndStatus, TaskDef } from '../lib/types';
import { ErrorBox, Facts, Json, Loading, State, Table, Time, Updated } from '../components';

export function Task({ taskId, runId }: { taskId: string; runId?: number }) {
  const session = useSession();
  const { queue } = session;
  const [def, setDef] = useState<TaskDef | null>(null);
  const [defError, setDefError] = useState<ApiError | null>(null);
  useEffect(() => {
    queue.task(taskId).then(setDef, (e: unknown) => setDefError(apiError(e)));
  }, [queue, taskId]);
  const polled = usePoll<Status>(async () => (await queue.status(taskId)).status, [taskId], LIVE, session.credentials);
  const status = polled.data;
  useEffect(() => {
    if (def) remember('task', taskId, def.metadata?.name);
  }, [def, taskId]);
  useEffect(() => {
    if (runId !== undefined && status) document.getElementById(`run-${runId}`)?.scrollIntoView();
  }, [runId, !!status]);

  const name = def?.metadata?.name;
  const error = defError ?? (status ? null : polled.error);
  return (
    <>
      <h1>
        {name ?? 'Task'} <code class="id">{taskId}</code>
      </h1>
      {error && <ErrorBox error={error} what="Reading the task" />}
      {!error && !status && <Loading what="the task" />}
      {status && (
        <>
          <p class="task-state">
            State: <State state={status.state} />
          </p>
          <Facts
            items={[
              ['Task queue', <a href={paths.queue(status.taskQueueId)}>{status.taskQueueId}</a>],
              ['Task group', <a href={paths.group(status.taskGroupId)}>{status.taskGroupId}</a>],
              ['schedulerId', status.schedulerId],
              ['projectId', status.projectId],
              ['Priority', def?.priority],
              ['Created', def && <Time iso={def.created} />],
              ['Deadline', <Time iso={status.deadline} />],
              ['Expires', <Time iso={status.expires} />],
              ['Retries left', String(status.retriesLeft)],
              ['Owner', def?.metadata?.owner],
              [
                'Source',
                def?.metadata?.source &&
                  (/^https?:\/\//.test(def.metadata.source) ? (
                    <a href={def.metadata.source} rel="noreferrer" data-external>
                      {def.metadata.source}
                    </a>
                  ) : (
                    def.metadata.source
                  )),
              ],
            ]}
          />
          {polled.error && <ErrorBox error={polled.error} what="The last update failed" />}
          <Actions session={session} status={status} onDone={polled.reload} />
          <Runs taskId={taskId} status={status} selected={runId} />
          <Updated at={polled.updated} />
        </>
      )}
      {def && <Dependencies taskId={taskId} def={def} />}
      {def && (
        <section aria-labelledby="definition-title">
          <h2 id="definition-title">Definition</h2>
          {def.metadata?.description && <p class="description">{def.metadata.description}</p>}
          <Json value={def} />
        </section>
      )}
    </>
  );
}

const ACTIONS = [
  { method: 'cancelTask', label: 'Cancel task', done: 'Task canceled.', applies: (s: Status) => !RESOLVED.includes(s.state) },
  { method: 'rerunTask', label: 'Rerun task', done: 'New run added.', applies: (s: Status) => RESOLVED.includes(s.state) },
  { method: 'scheduleTask', label: 'Schedule task', done: 'Task scheduled.', applies: (s: Status) => s.state === 'unscheduled' },
] as const;

/** The actions that apply to the task's state and that the caller's scopes allow. */
function Actions({ session, status, onDone }: { session: Session; status: Status; onDone: () => void }) {
  const [confirming, setConfirming] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<string | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const { queue, credentials, scopes } = session;
  const params = {
    taskId: status.taskId,
    taskGroupId: status.taskGroupId,
    schedulerId: status.schedulerId,
    projectId: status.projectId,
  };
  const applicable = ACTIONS.filter((a) => a.applies(status));
  // Unknown scopes (currentScopes failed): offer the actions and let the API decide.
  const allowed = applicable.filter((a) => credentials && (scopes === null || (scopes && allows(queue[a.method].entry.scopes, params, scopes))));
  const run = async (a: (typeof ACTIONS)[number]) => {
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      await queue[a.method](status.taskId);
      setResult(a.done);
      onDone();
    } catch (e) {
      setError(apiError(e));
    } finally {
      setBusy(false);
      setConfirming(null);
    }
  };
  return (
    <section aria-labelledby="actions-title" class="actions">
      <h2 id="actions-title">Actions</h2>
      {!credentials && <p class="hint">Sign in to cancel, rerun or schedule the task, as your scopes allow.</p>}
      {credentials && scopes === undefined && <p class="hint">Reading your scopes…</p>}
      {credentials && scopes !== undefined && allowed.length === 0 && (
        <p class="hint">Your scopes allow no action on this task in its current state.</p>
      )}
      <div class="buttons">
        {allowed.map((a) =>
          confirming === a.method ? (
            <span class="confirm" key={a.method} role="group" aria-label={`Confirm: ${a.label}`}>
              <span>{a.label}: are you sure?</span>
              <button type="button" class="danger" disabled={busy} onClick={() => run(a)}>
                Yes, {a.label.toLowerCase()}
              </button>
              <button type="button" disabled={busy} onClick={() => setConfirming(null)}>
                No
              </button>
            </span>
          ) : (
            <button type="button" key={a.method} data-action={a.method} disabled={busy} onClick={() => setConfirming(a.method)}>
              {a.label}
            </button>
          ),
        )}
      </div>
      {result && <p role="status">{result}</p>}
      {error && <ErrorBox error={error} what="The action failed" />}
    </section>
  );
}

function Runs({ taskId, status, selected }: { taskId: string; status: Status; selected?: number }) {
  if (status.runs.length === 0) {
    return (
      <section aria-labelledby="runs-title">
        <h2 id="runs-title">Runs</h2>
        <p>No runs yet: the task is {status.state}.</p>
      </section>
    );
  }
  return (
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs</h2>
      <Table
        class="runs"
        rows={status.runs}
        rowKey={(r) => String(r.runId)}
        rowProps={(r) => ({
          id: `run-${r.runId}`,
          'data-run-id': r.runId,
          'data-state': r.state,
          class: selected === r.runId ? 'selected' : undefined,
        })}
        columns={[
          { label: 'Run', cell: (r) => <a href={paths.run(taskId, r.runId)}>{r.runId}</a> },
          { label: 'State', cell: (r) => <State state={r.state} /> },
          { label: 'Reason created', cell: (r) => r.reasonCreated },
          { label: 'Reason resolved', cell: (r) => r.reasonResolved ?? '—' },
          {
            label: 'Worker',
            cell: (r) =>
              r.workerId ? <a href={paths.worker(status.taskQueueId, r.workerGroup!, r.workerId)}>{`${r.workerGroup}/${r.workerId}`}</a> : '—',
          },
          { label: 'Scheduled', cell: (r) => <Time iso={r.scheduled} /> },
          { label: 'Started', cell: (r) => <Time iso={r.started} /> },
          { label: 'Resolved', cell: (r) => <Time iso={r.resolved} /> },
          { label: 'Duration', cell: (r) => duration(r.started, r.resolved) },
        ]}
      />
      {status.runs.map((r) => (
        <Artifacts key={`${r.runId}:${r.state}`} taskId={taskId} run={r} />
      ))}
    </section>
  );
}

/**
 * A run's artifacts: re-read on a timer while the run is pending or running (its worker adds
 * them as it goes), once after it has resolved. Its key holds the run's state, so a change
 * of state mounts it afresh (and `live` holds for its whole life).
 */
function Artifacts({ taskId, run }: { taskId: string; run: Run }) {
  const { queue, credentials } = useSession();
  const live = !RESOLVED.includes(run.state);
  const polled = usePoll<Artifact[]>(
    () => allPages<Artifact>('artifacts', (q) => queue.listArtifacts(taskId, String(run.runId), q)),
    [taskId, run.runId],
    live ? LIVE : null,
    credentials,
  );
  const { data: list, error } = polled;
  const link = (a: Artifact): string | null => {
    if (a.storageType === 'error' || a.storageType === 'object') return null;
    // Signed in: a bewit URL, which carries the caller's right to read it; anonymous: the
    // plain URL, which the anonymous role may read for public/ names.
    if (credentials) return queue.buildSignedUrlSync(queue.getArtifact, taskId, String(run.runId), a.name);
    return a.name.startsWith('public/') ? queue.buildUrl(queue.getArtifact, taskId, String(run.runId), a.name) : null;
  };
  return (
    <section class="artifacts" aria-labelledby={`artifacts-${run.runId}`}>
      <h3 id={`artifacts-${run.runId}`}>Artifacts of run {run.runId}</h3>
      {error && <ErrorBox error={error} what="Listing artifacts" />}
      {!error && !list && <Loading what="artifacts" />}
      {list && list.length === 0 && <p>None.</p>}
      {list && list.length > 0 && (
        <ul class="artifact-list">
          {list.map((a) => {
            const href = link(a);
            const file = a.name.split('/').pop() || a.name;
            return (
              <li key={a.name} data-artifact={a.name}>
                {href ? (
                  <>
                    <a href={href} data-external class="artifact-name">
                      {a.name}
                    </a>{' '}
                    <a href={href} download={file} data-external class="download" aria-label={`Download ${a.name}`}>
                      download
                    </a>
                  </>
                ) : (
                  <span class="artifact-name">{a.name}</span>
                )}{' '}
                <span class="meta">
                  {a.storageType}
                  {a.contentType ? `, ${a.contentType}` : ''}, expires <Time iso={a.expires} />
                  {!href && a.storageType === 'object' && ' (an object artifact: download it with a Taskcluster client)'}
                  {!href && a.storageType === 'error' && ' (an error artifact: it has no content)'}
                  {!href && !credentials && a.storageType !== 'object' && a.storageType !== 'error' && ' (sign in to download)'}
                </span>
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}

/** The tasks this one waits for, and the tasks that wait for it. */
function Dependencies({ taskId, def }: { taskId: string; def: TaskDef }) {
  const { queue } = useSession();
  const [deps, setDeps] = useState<{ taskId: string; name?: string; state?: string }[] | null>(null);
  const [dependents, setDependents] = useState<TaskAndStatus[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const ids = useMemo(() => def.dependencies.filter((d) => d !== taskId), [def, taskId]);
  useEffect(() => {
    const load = async () => {
      const found: Record<string, { name?: string; state?: string }> = {};
      const [t, s] = await Promise.all([
        allPagesByIds<{ taskId: string; task: TaskDef }>('tasks', ids, (taskIds, q) => queue.tasks({ taskIds }, q)),
        allPagesByIds<{ taskId: string; status: Status }>('statuses', ids, (taskIds, q) => queue.statuses({ taskIds }, q)),
      ]);
      for (const x of t) (found[x.taskId] ??= {}).name = x.task.metadata?.name;
      for (const x of s) (found[x.taskId] ??= {}).state = x.status.state;
      setDeps(ids.map((id) => ({ taskId: id, ...found[id] })));
      setDependents(await allPages<TaskAndStatus>('tasks', (q) => queue.listDependentTasks(taskId, q)));
    };
    load().catch((e) => setError(apiError(e)));
  }, [queue, ids, taskId]);
  const item = (id: string, name?: string, state?: string) => (
    <li key={id}>
      <a href={paths.task(id)}>{name ?? id}</a> {state && <State state={state} />} {name && <code class="id">{id}</code>}
    </li>
  );
  return (
    <section aria-labelledby="deps-title">
      <h2 id="deps-title">Dependencies</h2>
      {error && <ErrorBox error={error} what="Reading dependencies" />}
      <h3>Depends on{def.requires ? ` (${def.requires === 'all-completed' ? 'all completed' : 'all resolved'})` : ''}</h3>
      {ids.length === 0 ? <p>Nothing.</p> : deps ? <ul class="links deps">{deps.map((d) => item(d.taskId, d.name, d.state))}</ul> : <Loading what="dependencies" />}
      <h3>Dependents</h3>
      {dependents ? (
        dependents.length === 0 ? (
          <p>None.</p>
        ) : (
          <ul class="links dependents">{dependents.map((d) => item(d.status.taskId, d.task.metadata?.name, d.status.state))}</ul>
        )
      ) : (
        !error && <Loading what="dependents" />
      )}
    </section>
  );
}
