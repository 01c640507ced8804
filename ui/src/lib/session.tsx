// Who the inspector signs requests as: anonymous, or the clientId and accessToken pasted into
// the sign-in form (kept in this tab's session storage), with that client's scopes.
import { createContext, type ComponentChildren } from 'preact';
import { useContext, useEffect, useMemo, useState } from 'preact/hooks';
import { apiError, clients, loadCredentials, saveCredentials, type Clients, type Credentials } from './api';

export interface Session extends Clients {
  /** The signed-in client's scopes; null when they could not be read, undefined while loading. */
  scopes?: string[] | null;
  signIn(c: Credentials): Promise<void>;
  signOut(): void;
}

const Ctx = createContext<Session | null>(null);

export function useSession(): Session {
  const s = useContext(Ctx);
  if (!s) throw new Error('no session');
  return s;
}

export function SessionProvider({ children }: { children: ComponentChildren }) {
  const [credentials, setCredentials] = useState<Credentials | null>(loadCredentials);
  const [scopes, setScopes] = useState<string[] | null | undefined>(undefined);
  const c = useMemo(() => clients(credentials), [credentials]);
  useEffect(() => {
    setScopes(undefined);
    if (!credentials) return;
    let alive = true;
    c.auth
      .currentScopes()
      .then((r: { scopes: string[] }) => alive && setScopes(r.scopes))
      .catch(() => alive && setScopes(null));
    return () => {
      alive = false;
    };
  }, [c]);
  const session: Session = {
    ...c,
    scopes,
    async signIn(creds) {
      // Checked before it is kept: a wrong accessToken fails here, not on every page.
      try {
        await clients(creds).auth.currentScopes();
      } catch (e) {
        throw apiError(e);
      }
      saveCredentials(creds);
      setCredentials(creds);
    },
    signOut() {
      saveCredentials(null);
      setCredentials(null);
    },
  };
  return <Ctx.Provider value={session}>{children}</Ctx.Provider>;
}
