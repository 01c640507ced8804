import './shims/globals';
import './style.css';
import { render, type ComponentType } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { interceptLinks, route, useLocation } from './lib/router';
import { SessionProvider, useSession } from './lib/session';
import type { ApiError } from './lib/api';
import { ErrorBox, Loading } from './components';
import { Home } from './pages/Home';
import { Group } from './pages/Group';
import { Task } from './pages/Task';
import { TaskQueue, Worker } from './pages/TaskQueue';

/** The graph page and its layout library load only when a graph is opened. */
function LazyGraph({ taskGraphId }: { taskGraphId: string }) {
  const [Page, setPage] = useState<ComponentType<{ taskGraphId: string }> | null>(null);
  const [failed, setFailed] = useState<string | null>(null);
  useEffect(() => {
    import('./pages/Graph').then((m) => setPage(() => m.Graph)).catch((e) => setFailed(String(e)));
  }, []);
  if (failed) return <ErrorBox error={{ status: 0, code: 'LoadError', message: failed }} />;
  return Page ? <Page taskGraphId={taskGraphId} /> : <Loading what="the graph view" />;
}

function Page() {
  const loc = useLocation();
  const r = route(loc);
  const main = useRef<HTMLElement>(null);
  // After a client-side navigation, focus moves to the new page (as a reload would).
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    main.current?.focus();
  }, [loc]);
  let page;
  switch (r.page) {
    case 'home':
      page = <Home />;
      break;
    case 'group':
      page = <Group key={r.taskGroupId} taskGroupId={r.taskGroupId} />;
      break;
    case 'task':
      page = <Task key={r.taskId} taskId={r.taskId} runId={r.runId} />;
      break;
    case 'queue':
      page = <TaskQueue key={r.taskQueueId} taskQueueId={r.taskQueueId} />;
      break;
    case 'worker':
      page = <Worker key={loc} taskQueueId={r.taskQueueId} workerGroup={r.workerGroup} workerId={r.workerId} />;
      break;
    case 'graph':
      page = <LazyGraph key={r.taskGraphId} taskGraphId={r.taskGraphId} />;
      break;
    default:
      page = (
        <>
          <h1>Not found</h1>
          <p>
            The inspector has no page at <code>{r.path}</code>. <a href="/">Search</a> for a task, task group, task
            queue or task graph.
          </p>
        </>
      );
  }
  return (
    <main id="main" ref={main} tabIndex={-1}>
      {page}
    </main>
  );
}

function SignIn() {
  const session = useSession();
  const dialog = useRef<HTMLDialogElement>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const clientId = String(form.get('clientId') ?? '').trim();
    const accessToken = String(form.get('accessToken') ?? '').trim();
    setBusy(true);
    setError(null);
    try {
      await session.signIn({ clientId, accessToken });
      dialog.current?.close();
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
    }
  };
  if (session.credentials) {
    return (
      <div class="who">
        <span>
          Signed in as <strong data-testid="client-id">{session.credentials.clientId}</strong>
        </span>
        <button type="button" onClick={() => session.signOut()}>
          Sign out
        </button>
      </div>
    );
  }
  return (
    <div class="who">
      <button
        type="button"
        onClick={() => {
          setError(null);
          dialog.current?.showModal();
        }}
      >
        Sign in
      </button>
      <dialog ref={dialog} aria-labelledby="sign-in-title">
        <form onSubmit={submit} method="dialog">
          <h2 id="sign-in-title">Sign in</h2>
          <p class="hint">
            Requests are signed in this tab with these credentials (Hawk). They are kept in this tab's session
            storage only, and forgotten when it closes.
          </p>
          <label>
            clientId
            <input name="clientId" required autoComplete="username" spellcheck={false} />
          </label>
          <label>
            accessToken
            <input name="accessToken" type="password" required autoComplete="current-password" />
          </label>
          {error && <ErrorBox error={error} what="Signing in failed" />}
          <div class="buttons">
            <button type="submit" disabled={busy}>
              Sign in
            </button>
            <button type="button" onClick={() => dialog.current?.close()}>
              Cancel
            </button>
          </div>
        </form>
      </dialog>
    </div>
  );
}

function App() {
  return (
    <SessionProvider>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="/">
          Taskcluster Queue
        </a>
        <nav aria-label="Sign in">
          <SignIn />
        </nav>
      </header>
      <Page />
    </SessionProvider>
  );
}

const root = document.getElementById('app')!;
interceptLinks(root);
render(<App />, root);
