// Client-side routes on the History API: the server answers every inspector path with
// index.html, and links between pages change the URL without a reload.
import { useEffect, useState } from 'preact/hooks';

const EVENT = 'tcq:navigate';

export function navigate(to: string, replace = false) {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  window.dispatchEvent(new Event(EVENT));
  window.scrollTo(0, 0);
}

/** The current path and query, re-rendered on navigation. */
export function useLocation(): string {
  const [loc, setLoc] = useState(location.pathname + location.search);
  useEffect(() => {
    const on = () => setLoc(location.pathname + location.search);
    window.addEventListener('popstate', on);
    window.addEventListener(EVENT, on);
    return () => {
      window.removeEventListener('popstate', on);
      window.removeEventListener(EVENT, on);
    };
  }, []);
  return loc;
}

/** Follows same-origin links inside the app without a reload (plain clicks only). */
export function interceptLinks(root: HTMLElement) {
  root.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    // SVG links (the graph's nodes) too: read attributes, which both kinds of link have.
    const a = (e.target as Element).closest?.('a');
    const href = a?.getAttribute('href');
    if (!a || !href || a.getAttribute('target') || a.hasAttribute('download') || a.hasAttribute('data-external')) return;
    const url = new URL(href, location.href);
    if (url.origin !== location.origin || !isAppPath(url.pathname)) return;
    if (url.pathname === location.pathname && url.search === location.search && url.hash) return;
    e.preventDefault();
    navigate(url.pathname + url.search + url.hash);
  });
}

/** Paths the inspector draws (the others are the API's, schemas, references, blobs). */
export function isAppPath(path: string): boolean {
  return !/^\/(api|schemas|references|__blobs)(\/|$)/.test(path);
}

/** A path segment as the URL carries it, decoded. */
const dec = (s: string) => {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
};

export type Route =
  | { page: 'home' }
  | { page: 'group'; taskGroupId: string }
  | { page: 'task'; taskId: string; runId?: number }
  | { page: 'queue'; taskQueueId: string }
  | { page: 'worker'; taskQueueId: string; workerGroup: string; workerId: string }
  | { page: 'graph'; taskGraphId: string }
  | { page: 'not-found'; path: string };

/** The page of a path. Upstream's UI paths where it has them (tasks, groups, provisioners). */
export function route(path: string): Route {
  const s = path.split('?')[0].split('/').filter((x) => x !== '').map(dec);
  const [a, b, c, d, e, f, g] = s;
  if (s.length === 0) return { page: 'home' };
  if (a === 'tasks' && b === 'groups' && c && s.length === 3) return { page: 'group', taskGroupId: c };
  if (a === 'tasks' && b && s.length === 2) return { page: 'task', taskId: b };
  if (a === 'tasks' && b && c === 'runs' && d && s.length === 4 && /^\d+$/.test(d)) {
    return { page: 'task', taskId: b, runId: Number(d) };
  }
  if (a === 'task-queues' && s.length >= 2) return { page: 'queue', taskQueueId: s.slice(1).join('/') };
  if (a === 'provisioners' && c === 'worker-types' && d) {
    const taskQueueId = `${b}/${d}`;
    if (s.length === 4) return { page: 'queue', taskQueueId };
    if (e === 'workers' && f && g && s.length === 7) return { page: 'worker', taskQueueId, workerGroup: f, workerId: g };
  }
  if (a === 'task-graphs' && b && s.length === 2) return { page: 'graph', taskGraphId: b };
  return { page: 'not-found', path };
}

const enc = encodeURIComponent;
export const paths = {
  group: (id: string) => `/tasks/groups/${enc(id)}`,
  task: (id: string) => `/tasks/${enc(id)}`,
  run: (id: string, runId: number) => `/tasks/${enc(id)}/runs/${runId}`,
  queue: (taskQueueId: string) => `/task-queues/${taskQueueId.split('/').map(enc).join('/')}`,
  worker: (taskQueueId: string, group: string, id: string) => {
    const [p, wt] = taskQueueId.split('/');
    return `/provisioners/${enc(p)}/worker-types/${enc(wt)}/workers/${enc(group)}/${enc(id)}`;
  },
  graph: (id: string) => `/task-graphs/${enc(id)}`,
};
