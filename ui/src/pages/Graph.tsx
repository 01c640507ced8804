// A task graph of the task-graph scheduler, drawn as a DAG (dagre lays it out; SVG draws it):
// each node a link to its task, coloured by the task's state (the queue's where the task
// exists, else the scheduler's), with its reruns left. Also listed as a table.
import dagre from '@dagrejs/dagre';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { useSession } from '../lib/session';
import { allPagesByIds } from '../lib/api';
import { LIVE, usePoll } from '../lib/poll';
import { paths } from '../lib/router';
import { remember } from '../lib/recent';
import type { Status } from '../lib/types';
import { ErrorBox, Facts, Loading, State, Table, Updated } from '../components';

interface GraphTask {
  taskId: string;
  label: string;
  requires: string[];
  requiresLeft: string[];
  dependents: string[];
  reruns: number;
  rerunsLeft: number;
  state: string;
}

interface Inspect {
  status: { taskGraphId: string; schedulerId: string; state: string };
  metadata: { name?: string; description?: string; owner?: string; source?: string };
  tags: Record<string, string>;
  tasks: GraphTask[];
}

const NODE_W = 184;
const NODE_H = 58;

/** Positions of the nodes and the edges' points, from the graph's structure only. */
function layout(tasks: GraphTask[]) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 48, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  const known = new Set(tasks.map((t) => t.taskId));
  for (const t of tasks) g.setNode(t.taskId, { width: NODE_W, height: NODE_H });
  for (const t of tasks) for (const r of t.requires) if (known.has(r)) g.setEdge(r, t.taskId);
  dagre.layout(g);
  const nodes = new Map(tasks.map((t) => [t.taskId, g.node(t.taskId) as { x: number; y: number }]));
  const edges = g.edges().map((e) => ({ from: e.v, to: e.w, points: (g.edge(e) as { points: { x: number; y: number }[] }).points }));
  const { width = 0, height = 0 } = g.graph() as { width?: number; height?: number };
  return { nodes, edges, width, height };
}

const short = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

export function Graph({ taskGraphId }: { taskGraphId: string }) {
  const { scheduler, queue, credentials } = useSession();
  const polled = usePoll(
    async () => {
      const inspect: Inspect = await scheduler.inspect(taskGraphId);
      // The queue's states, where it knows the task (scheduled tasks): richer than the
      // scheduler's (pending and running are both "scheduled" there). Optional: a caller who
      // may not read statuses still sees the scheduler's.
      const states = new Map<string, string>();
      const ids = inspect.tasks.filter((t) => t.state !== 'unscheduled').map((t) => t.taskId);
      try {
        const s = await allPagesByIds<{ taskId: string; status: Status }>('statuses', ids, (taskIds, q) => queue.statuses({ taskIds }, q));
        for (const x of s) states.set(x.taskId, x.status.state);
      } catch {
        // Shown with the scheduler's states.
      }
      return { inspect, states };
    },
    [taskGraphId],
    LIVE,
    credentials,
  );
  const inspect = polled.data?.inspect;
  const structure = inspect ? inspect.tasks.map((t) => `${t.taskId}<${t.requires.join(',')}`).join(';') : '';
  const drawn = useMemo(() => (inspect ? layout(inspect.tasks) : null), [structure]);
  // Fitted to the page's width, down to 60 % of its size (smaller, the labels are unreadable:
  // the drawing then scrolls in its frame); or at its own size.
  const [fit, setFit] = useState(true);
  useEffect(() => {
    if (inspect) remember('graph', taskGraphId, inspect.metadata?.name);
  }, [!!inspect, taskGraphId]);

  if (!inspect || !drawn) {
    return (
      <>
        <h1>Task graph {taskGraphId}</h1>
        {polled.error ? <ErrorBox error={polled.error} what="Reading the task graph" /> : <Loading what="the task graph" />}
      </>
    );
  }
  const states = polled.data!.states;
  const stateOf = (t: GraphTask) => states.get(t.taskId) ?? t.state;
  const labels = new Map(inspect.tasks.map((t) => [t.taskId, t.label]));
  return (
    <>
      <h1>
        {inspect.metadata?.name ?? 'Task graph'} <code class="id">{taskGraphId}</code>
      </h1>
      <Facts
        items={[
          ['State', <State state={inspect.status.state} />],
          ['Tasks', String(inspect.tasks.length)],
          ['schedulerId', inspect.status.schedulerId],
          ['Owner', inspect.metadata?.owner],
          ['Description', inspect.metadata?.description],
        ]}
      />
      {polled.error && <ErrorBox error={polled.error} what="The last update failed" />}
      <div class="buttons graph-tools">
        <button type="button" aria-pressed={!fit} onClick={() => setFit(!fit)}>
          Actual size
        </button>
      </div>
      <div class="graph-wrap">
        <svg
          class="graph"
          width={fit ? '100%' : drawn.width}
          height={fit ? undefined : drawn.height}
          style={fit ? { maxWidth: `${drawn.width}px`, minWidth: `${Math.round(drawn.width * 0.6)}px`, height: 'auto' } : undefined}
          viewBox={`0 0 ${drawn.width} ${drawn.height}`}
          role="group"
          aria-label={`The graph's ${inspect.tasks.length} tasks and their dependencies`}
        >
          <defs>
            <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
              <path d="M0,0 L10,5 L0,10 z" class="arrow" />
            </marker>
          </defs>
          {drawn.edges.map((e) => (
            <path
              key={`${e.from}>${e.to}`}
              class="edge"
              data-from={e.from}
              data-to={e.to}
              d={e.points.map((p, i) => `${i ? 'L' : 'M'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ')}
              marker-end="url(#arrow)"
            />
          ))}
          {inspect.tasks.map((t) => {
            const p = drawn.nodes.get(t.taskId)!;
            const state = stateOf(t);
            return (
              <a
                key={t.taskId}
                href={paths.task(t.taskId)}
                class={`node state-${state}`}
                data-task-id={t.taskId}
                data-state={state}
                aria-label={`${t.label}: ${state}, ${t.rerunsLeft} of ${t.reruns} reruns left`}
              >
                <title>{`${t.label} (${t.taskId})`}</title>
                <rect x={p.x - NODE_W / 2} y={p.y - NODE_H / 2} width={NODE_W} height={NODE_H} rx={6} />
                <text x={p.x} y={p.y - 8} class="label">
                  {short(t.label, 24)}
                </text>
                <text x={p.x} y={p.y + 12} class="sub">
                  {`${state} · reruns ${t.rerunsLeft}/${t.reruns}`}
                </text>
              </a>
            );
          })}
        </svg>
      </div>
      <details class="graph-table">
        <summary>The tasks as a table</summary>
        <Table
          rows={inspect.tasks}
          rowKey={(t) => t.taskId}
          columns={[
            { label: 'Label', cell: (t) => <a href={paths.task(t.taskId)}>{t.label}</a> },
            { label: 'State', cell: (t) => <State state={stateOf(t)} /> },
            { label: 'Reruns left', cell: (t) => `${t.rerunsLeft} of ${t.reruns}` },
            { label: 'Requires', cell: (t) => t.requires.map((r) => labels.get(r) ?? r).join(', ') || '—' },
          ]}
        />
      </details>
      <Updated at={polled.updated} />
    </>
  );
}
