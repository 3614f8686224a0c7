import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { dirname, extname, join, resolve, sep } from 'node:path';
import type { HttpRequest, HttpResponseInit } from '@azure/functions';
import { hostApp } from '../app';
import { servesFiles } from '../http/endpoint';
import { getConfig } from '../runtime';

/**
 * The operator console (console/, built by `npm run build` into dist/console): static files, served without a token
 * (every API call the console makes carries the signed-in person's bearer token). A path without a file extension
 * is one of the console's own pages and gets its index.html, so every page's URL can be shared and reloaded.
 */
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

/** Scripts and styles from the console's own files only; API calls to this host (and Entra for sign-in). */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' https://login.microsoftonline.com; frame-ancestors 'none'; base-uri 'self'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

let root: string | undefined;

/** dist/console beside the app's package.json (the repository locally, wwwroot in Azure). */
function consoleRoot(): string {
  if (root === undefined) {
    let dir = __dirname;
    while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
    root = join(dir, 'dist', 'console');
  }
  return root;
}

export async function serveConsole(request: HttpRequest): Promise<HttpResponseInit> {
  const base = consoleRoot();
  const asked = request.params.path ?? '';
  if (asked === CONFIG_FILE) return signInConfig();
  if (asked.includes('\0') || asked.split('/').some((segment) => segment === '..')) return notFound(asked);
  const file = resolve(base, asked === '' ? 'index.html' : asked);
  if (file !== base && !file.startsWith(base + sep)) return notFound(asked);
  const page = extname(file) === '' ? join(base, 'index.html') : file;
  const found = await stat(page).catch(() => undefined);
  if (!found?.isFile()) {
    return page.endsWith('index.html') ? problem(503, 'The console is not built', 'Build it with npm run build (dist/console).') : notFound(asked);
  }
  const hashed = page.startsWith(join(base, 'assets') + sep);
  return {
    status: 200,
    headers: {
      'content-type': TYPES[extname(page)] ?? 'application/octet-stream',
      // Vite names each asset by a hash of its content; index.html names the current ones.
      'cache-control': hashed ? 'public, max-age=31536000, immutable' : 'no-cache',
      ...SECURITY_HEADERS,
    },
    body: await readFile(page),
  };
}

/** The console's settings, which the host serves in place of a file: how the console signs people in. */
const CONFIG_FILE = 'config.json';

/**
 * How the console signs people in (docs/console.md, "Signing in"): with Entra (authorization code with PKCE) when the
 * host names the console's app registration (`RuntimeCloud__Console__ClientId`), with its authority and the scope
 * of this host's API to ask a token for; else the local host's "sign in as". Nothing secret: a public client's id.
 */
export function signInConfig(): HttpResponseInit {
  const { clientId, authority, apiScope } = getConfig().console;
  const body = clientId === '' ? { signIn: 'local' } : { signIn: 'entra', clientId, authority, scopes: [apiScope] };
  return { status: 200, headers: { 'content-type': 'application/json', 'cache-control': 'no-cache', ...SECURITY_HEADERS }, body: JSON.stringify(body) };
}

function notFound(path: string): HttpResponseInit {
  return problem(404, 'Not found', `The console has no file ${JSON.stringify(path.slice(0, 200))}.`);
}

function problem(status: number, title: string, detail: string): HttpResponseInit {
  return { status, headers: { 'content-type': 'application/problem+json', ...SECURITY_HEADERS }, jsonBody: { type: 'about:blank', title, status, detail } };
}

servesFiles(serveConsole);
hostApp.http('RuntimeCloudConsole', { route: 'runtime-cloud/console/{*path}', methods: ['GET'], authLevel: 'anonymous', handler: serveConsole });
