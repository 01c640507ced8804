// The start page: one search box for any id, and what was looked at lately.
import { useState } from 'preact/hooks';
import { useSession } from '../lib/session';
import { apiError, type ApiError } from '../lib/api';
import { navigate, paths } from '../lib/router';
import { recentItems, type Kind } from '../lib/recent';
import { ErrorBox } from '../components';

const KIND_NAMES: Record<Kind, string> = {
  task: 'Task',
  group: 'Task group',
  queue: 'Task queue',
  graph: 'Task graph',
};

const pathOf = (kind: Kind, id: string) =>
  kind === 'task' ? paths.task(id) : kind === 'group' ? paths.group(id) : kind === 'queue' ? paths.queue(id) : paths.graph(id);

interface Found {
  kind: Kind;
  id: string;
  title?: string;
}

export function Home() {
  const { queue, scheduler } = useSession();
  const [found, setFound] = useState<Found[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const recent = recentItems();

  const search = async (e: Event) => {
    e.preventDefault();
    const id = String(new FormData(e.target as HTMLFormElement).get('q') ?? '').trim();
    if (!id) return;
    setError(null);
    setFound(null);
    // A taskQueueId holds a slash; a slugid may name a task, a task group (often a task's own
    // id) or a task graph: look each up and go straight there when only one answers.
    if (id.includes('/')) {
      navigate(paths.queue(id));
      return;
    }
    setBusy(true);
    const tries: [Kind, () => Promise<string | undefined>][] = [
      ['task', async () => (await queue.task(id)).metadata?.name],
      ['group', async () => (await queue.getTaskGroup(id)).schedulerId],
      ['graph', async () => (await scheduler.info(id)).metadata?.name],
    ];
    const results = await Promise.all(
      tries.map(async ([kind, look]) => {
        try {
          return { kind, id, title: await look() } as Found;
        } catch (err) {
          return apiError(err);
        }
      }),
    );
    setBusy(false);
    const hits = results.filter((r): r is Found => 'kind' in r);
    if (hits.length === 1) {
      navigate(pathOf(hits[0].kind, id));
      return;
    }
    if (hits.length === 0) {
      // A refusal says more than "not found" (e.g. the scopes a task needs).
      const refusal = results.find((r) => 'status' in r && r.status !== 404) as ApiError | undefined;
      setError(refusal ?? { status: 404, code: 'ResourceNotFound', message: `No task, task group or task graph has the id ${id}.` });
      return;
    }
    setFound(hits);
  };

  return (
    <>
      <h1>Inspect tasks, task groups, task queues and task graphs</h1>
      <form class="search" role="search" onSubmit={search}>
        <label for="q">taskId, taskGroupId, taskGraphId or taskQueueId</label>
        <div class="row">
          <input id="q" name="q" type="search" required spellcheck={false} autoComplete="off" placeholder="e.g. fN1SbArXTPSVFNUvaOlinQ or proj/worker-type" />
          <button type="submit" disabled={busy}>
            Go
          </button>
        </div>
      </form>
      {busy && <p role="status">Looking it up…</p>}
      {error && <ErrorBox error={error} />}
      {found && (
        <section aria-labelledby="found-title">
          <h2 id="found-title">That id names more than one thing</h2>
          <ul class="links">
            {found.map((f) => (
              <li key={f.kind}>
                <a href={pathOf(f.kind, f.id)}>
                  {KIND_NAMES[f.kind]} {f.id}
                </a>
                {f.title ? ` (${f.title})` : ''}
              </li>
            ))}
          </ul>
        </section>
      )}
      <section aria-labelledby="recent-title">
        <h2 id="recent-title">Recently viewed</h2>
        {recent.length === 0 ? (
          <p class="hint">Nothing yet: pages you open are listed here (in this browser only).</p>
        ) : (
          <ul class="links">
            {recent.map((r) => (
              <li key={`${r.kind}:${r.id}`}>
                <span class="kind">{KIND_NAMES[r.kind]}</span> <a href={pathOf(r.kind, r.id)}>{r.title || r.id}</a>
                {r.title && <code class="id"> {r.id}</code>}
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}
