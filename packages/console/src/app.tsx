import { useEffect, useState } from 'preact/hooks';
import { loggedIn, login, logout, onSessionChange } from './api.js';
import { ControllerPage } from './controller.js';
import { SandboxList } from './list.js';
import { SandboxPage } from './sandbox.js';
import { SnapshotList } from './snapshots.js';
import { ErrorBox } from './ui.js';

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return hash;
}

export function App() {
  const [session, setSession] = useState(loggedIn());
  useEffect(() => onSessionChange(() => setSession(loggedIn())), []);
  const hash = useHash();
  if (!session) return <Login />;
  const sandbox = /^#\/sandboxes\/([A-Za-z0-9]+)$/.exec(hash)?.[1];
  const page = sandbox ? (
    <SandboxPage id={sandbox} key={sandbox} />
  ) : hash === '#/controller' ? (
    <ControllerPage />
  ) : hash === '#/snapshots' ? (
    <SnapshotList />
  ) : (
    <SandboxList />
  );
  const other = sandbox || hash === '#/controller' || hash === '#/snapshots';
  return (
    <div class="shell">
      <header>
        <a class="brand" href="#/">
          Warren
        </a>
        <nav aria-label="Main">
          <a href="#/" aria-current={!other ? 'page' : undefined}>
            Sandboxes
          </a>
          <a href="#/snapshots" aria-current={hash === '#/snapshots' ? 'page' : undefined}>
            Snapshots
          </a>
          <a href="#/controller" aria-current={hash === '#/controller' ? 'page' : undefined}>
            Controller
          </a>
          <button type="button" class="link" onClick={() => void logout()}>
            Log out
          </button>
        </nav>
      </header>
      <main>{page}</main>
    </div>
  );
}

function Login() {
  const [key, setKey] = useState('');
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await login(key);
      setKey('');
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="login">
      <form onSubmit={(e) => void submit(e)} aria-labelledby="login-title">
        <h1 id="login-title">Warren console</h1>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          name="api-key"
          type="password"
          autoComplete="current-password"
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
          required
          autoFocus
        />
        <button type="submit" disabled={busy}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
        <ErrorBox error={error} />
        <p class="muted">The key is sent once; this page then holds the session (with an HttpOnly cookie). A reload or another tab asks for the key again.</p>
      </form>
    </main>
  );
}
