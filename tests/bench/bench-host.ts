/**
 * What the benchmarks that drive local hosts over HTTP share: a host in a child process (`startHost`), tokens from
 * its issuer (`tokenIssuer`), one HTTP exchange on a keep-alive agent (`call`), and a step that failed (`StepFailed`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';

const ROOT = join(__dirname, '..', '..');

/** A request answered with another status than the cycle needs; `what` names the step and the status. */
export class StepFailed extends Error {
  constructor(
    readonly what: string,
    body: string,
  ) {
    super(`${what}: ${body.slice(0, 300)}`);
    this.name = 'StepFailed';
  }
}

export type Issue = (claims: object) => Promise<string>;

/** Tokens from the issuer key in a host's state dir (created here first when hosts share it). */
export async function tokenIssuer(stateDir: string): Promise<Issue> {
  const keys = await ensureLocalKeys(stateDir);
  const config = parseConfig({});
  return (claims) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
}

export interface HostChild {
  readonly url: URL;
  stop(): Promise<void>;
}

export function startHost(stateDir: string, env: Record<string, string> = {}): Promise<HostChild> {
  const child = spawn(process.execPath, ['--require', 'tsx/cjs', '--import', 'tsx/esm', 'local/cli.ts', 'start', '--port', '0', '--state-dir', stateDir], {
    cwd: ROOT,
    env: { ...process.env, RuntimeCloud__Host__EnabledModules: 'capacity', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return waitForUrl(child, /listening on (http:\/\/\S+)/, 'runtime-cloud host', async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await new Promise((done) => child.once('exit', done));
  });
}

function waitForUrl(child: ChildProcess, pattern: RegExp, what: string, stop: () => Promise<void>): Promise<HostChild> {
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = pattern.exec(output);
      if (match?.[1]) {
        child.stdout?.off('data', onData);
        resolve({ url: new URL(match[1]), stop });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`${what} exited with ${code}:\n${output}`)));
  });
}

export function call(
  agent: http.Agent,
  base: URL,
  method: string,
  path: string,
  token: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        agent,
        host: base.hostname,
        port: base.port,
        method,
        path,
        headers: {
          ...headers,
          authorization: `Bearer ${token}`,
          ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (c: Buffer) => chunks.push(c));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}
