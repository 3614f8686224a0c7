/** Who is signed in, kept for this browser tab only (sessionStorage): a token never outlives the tab. */
export interface Session {
  readonly token: string;
  readonly name: string;
  readonly role: string;
  readonly tenant?: string;
  /** Epoch ms. */
  readonly expiresAt: number;
}

const KEY = 'runtime-cloud-console.session';

export function currentSession(): Session | undefined {
  const raw = sessionStorage.getItem(KEY);
  if (!raw) return undefined;
  const session = JSON.parse(raw) as Session;
  if (session.expiresAt <= Date.now()) {
    sessionStorage.removeItem(KEY);
    return undefined;
  }
  return session;
}

export function saveSession(session: Session): void {
  sessionStorage.setItem(KEY, JSON.stringify(session));
}

export function signOut(): void {
  sessionStorage.removeItem(KEY);
}
