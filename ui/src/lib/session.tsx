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

/** The caller's credentials and, once read, their scopes (see [`Session.scopes`]). */
interface Auth {
  credentials: Credentials | null;
  scopes?: string[] | null;
}

export function SessionProvider({ children }: { children: ComponentChildren }) {
  const [auth, setAuth] = useState<Auth>(() => ({ credentials: loadCredentials() }));
  const c = useMemo(() => clients(auth.credentials), [auth.credentials]);
  useEffect(() => {
    // Credentials restored from the tab's storage: their scopes are read here (signing in
    // reads them itself).
    if (!auth.credentials || auth.scopes !== undefined) return;
    let alive = true;
    const settle = (scopes: string[] | null) => alive && setAuth((a) => ({ ...a, scopes }));
    c.auth
      .currentScopes()
      .then((r: { scopes: string[] }) => settle(r.scopes))
      .catch(() => settle(null));
    return () => {
      alive = false;
    };
  }, [c]);
  const session: Session = {
    ...c,
    scopes: auth.scopes,
    async signIn(creds) {
      // Checked before it is kept: a wrong accessToken fails here, not on every page.
      let scopes: string[];
      try {
        ({ scopes } = await clients(creds).auth.currentScopes());
      } catch (e) {
        throw apiError(e);
      }
      saveCredentials(creds);
      setAuth({ credentials: creds, scopes });
    },
    signOut() {
      saveCredentials(null);
      setAuth({ credentials: null });
    },
  };
  return <Ctx.Provider value={session}>{children}</Ctx.Provider>;
}
