// The API clients (taskcluster-client-web: Hawk-signed requests and bewit URLs) and the
// signed-in caller's credentials, which live in this tab's session storage only.
import '../shims/globals';
import Client, { type Credentials, type ScopeExpr } from 'taskcluster-client-web/src/Client';
import Queue from 'taskcluster-client-web/src/clients/Queue';

export type { Credentials, ScopeExpr };

const CREDENTIALS_KEY = 'tcq-inspector-credentials';

/** The API is served from the same origin as the inspector. */
const rootUrl = location.origin;

/** The task-graph scheduler's read methods (not in taskcluster-client-web). */
const SchedulerClient = Client.create({
  serviceName: 'scheduler',
  serviceVersion: 'v1',
  entries: ['info', 'inspect'].map((name) => ({
    type: 'function',
    name,
    method: 'get',
    route: `/task-graph/<taskGraphId>/${name}`,
    args: ['taskGraphId'],
    query: [],
    output: true,
  })),
});

/** The queue's own read of a task queue's figures (not upstream's, so not in the library). */
const FiguresClient = Client.create({
  serviceName: 'queue',
  serviceVersion: 'v1',
  entries: [
    {
      type: 'function',
      name: 'taskQueueFigures',
      method: 'get',
      route: '/task-queues/<taskQueueId>/figures',
      args: ['taskQueueId'],
      query: [],
      output: true,
    },
  ],
});

/**
 * The auth service's one method the inspector calls (the library's whole Auth reference would
 * add 28 kB for it).
 */
const AuthClient = Client.create({
  serviceName: 'auth',
  serviceVersion: 'v1',
  entries: [{ type: 'function', name: 'currentScopes', method: 'get', route: '/scopes/current', args: [], query: [], output: true }],
});

export function loadCredentials(): Credentials | null {
  try {
    const c = JSON.parse(sessionStorage.getItem(CREDENTIALS_KEY) ?? 'null');
    return c && typeof c.clientId === 'string' && typeof c.accessToken === 'string' ? c : null;
  } catch {
    return null;
  }
}

export function saveCredentials(c: Credentials | null) {
  if (c) sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify(c));
  else sessionStorage.removeItem(CREDENTIALS_KEY);
}

export interface Clients {
  queue: Queue;
  figures: InstanceType<typeof FiguresClient>;
  auth: InstanceType<typeof AuthClient>;
  scheduler: InstanceType<typeof SchedulerClient>;
  credentials: Credentials | null;
}

/** Clients signing as `credentials` (anonymous when null). */
export function clients(credentials: Credentials | null): Clients {
  // One attempt: the pages poll anyway, and an error should show at once.
  const options = { rootUrl, credentials, retries: 0 };
  return {
    queue: new Queue(options),
    figures: new FiguresClient(options),
    auth: new AuthClient(options),
    scheduler: new SchedulerClient(options),
    credentials,
  };
}

/** An API error as the inspector shows it. */
export interface ApiError {
  status: number;
  code: string;
  message: string;
}

export function apiError(e: unknown): ApiError {
  const err = e as { response?: Response; body?: { code?: string; message?: string }; message?: string };
  if (err?.response) {
    return {
      status: err.response.status,
      code: err.body?.code ?? err.response.statusText,
      message: err.body?.message ?? err.message ?? '',
    };
  }
  return { status: 0, code: 'NetworkError', message: String(err?.message ?? e) };
}

/**
 * Every item of a paged listing: `call(query)` until no continuationToken is left, 1,000 a
 * page (the API's most), the first page `first` (a small one shows sooner).
 */
export async function allPages<T>(
  key: string,
  call: (query: Record<string, string | number>) => Promise<Record<string, unknown>>,
  onPage?: (items: T[]) => void,
  first = 1000,
): Promise<T[]> {
  const out: T[] = [];
  let token: string | undefined;
  do {
    const query: Record<string, string | number> = { limit: token ? 1000 : first };
    if (token) query.continuationToken = token;
    const page = await call(query);
    out.push(...((page[key] as T[]) ?? []));
    onPage?.(out);
    token = page.continuationToken as string | undefined;
  } while (token);
  return out;
}

/**
 * Every item of a by-taskIds call (`tasks`, `statuses`) for `ids`: at most 1,000 taskIds per
 * request, as the API takes, each read through [`allPages`].
 */
export async function allPagesByIds<T>(
  key: string,
  ids: string[],
  call: (taskIds: string[], query: Record<string, string | number>) => Promise<Record<string, unknown>>,
): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < ids.length; i += 1000) {
    const taskIds = ids.slice(i, i + 1000);
    out.push(...(await allPages<T>(key, (q) => call(taskIds, q))));
  }
  return out;
}
