import fc from 'fast-check';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueLocalToken, ensureLocalKeys } from '../../local/auth/local-issuer';
import { localDurable } from '../../local/durable/durable-component';
import { capacitySeedComponent } from '../../local/capacity-seed';
import { exampleDesiredStateComponent } from '../../local/example-repository';
import { BusEndpoints } from '../../local/local-endpoints/bus-endpoints';
import { LocalCloudEndpoints } from '../../local/local-endpoints/cloud-endpoints';
import { LocalExternalServicesEndpoints } from '../../local/local-endpoints/external-services-endpoints';
import openapi from '../../openapi.json';
import { startTestHost, type TestHost } from '../support/local-host';
import { changedKeys, StateDigest } from '../support/state-digest';
import { bodyOf, contentType, extraHeaders, pathParam, query, type Schema } from './arbitraries';
import { fuzzSettings } from './settings';

/** One operation of openapi.json, and the local-only routes beside them. */
interface Operation {
  readonly method: string;
  readonly path: string;
  readonly body?: Schema;
  /** The operation's `x-required-scope`. */
  readonly scope?: string;
}

const LOCAL_ROUTES: readonly Operation[] = [
  { method: 'POST', path: '/runtime-cloud/local/queues/{queue}/messages', scope: 'factory.runtime.admin', body: { type: 'object', properties: { body: {}, messageId: { type: 'string' } }, required: ['body'] } },
  { method: 'GET', path: '/runtime-cloud/local/queues/{queue}/deadletter', scope: 'factory.runtime.admin' },
  { method: 'GET', path: '/runtime-cloud/local/topics/{topic}/messages', scope: 'factory.runtime.admin' },
];

function operations(): Operation[] {
  const found: Operation[] = [];
  for (const [path, item] of Object.entries(openapi.paths as unknown as Record<string, Record<string, { requestBody?: { content: Record<string, { schema: Schema }> }; 'x-required-scope'?: string }>>)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'put', 'post', 'delete', 'patch'].includes(method)) continue;
      found.push({ method: method.toUpperCase(), path, scope: op['x-required-scope'], ...(op.requestBody ? { body: op.requestBody.content['application/json']?.schema } : {}) });
    }
  }
  return [...found, ...LOCAL_ROUTES];
}

/** A generated request as it goes on the wire. */
interface FuzzRequest {
  method: string;
  path: string;
  /** An index into the Authorization headers (so a counterexample prints short). */
  auth: number;
  headers: Record<string, string>;
  body: string | Buffer | undefined;
}

interface Answer {
  status: number;
  contentType: string | undefined;
  body: string;
}

/**
 * The good tokens that fit an operation's scope (indexes into `authorizations`): both tenants' for tenant routes,
 * the admin's or the agent's where those are needed.
 */
function fittingTokens(scope: string | undefined): number[] {
  if (scope === 'factory.runtime.admin') return [2];
  if (scope === 'factory.runner.agent') return [3];
  return [0, 1, 4];
}

/** The Authorization headers: good tokens of two tenants, an admin, an agent; expired, wrong audience or issuer, forged, malformed. */
async function authorizations(host: TestHost): Promise<string[]> {
  const keys = await ensureLocalKeys(host.stateDir);
  const { issuer, audience } = host.host.config.auth;
  const all = ['factory.runtime.read', 'factory.provisioning.operate', 'factory.capacity.lease', 'factory.health.read', 'factory.meta.read'];
  const good = await Promise.all([
    host.token({ tenant: 'contoso', scopes: all, roles: ['Operator'] }),
    host.token({ tenant: 'fabrikam', scopes: all, roles: ['Operator'] }),
    host.token({ roles: ['PlatformAdmin'], scopes: ['factory.runtime.admin'] }),
    host.token({ scopes: ['factory.runner.agent'], runnerPool: 'local-runner.contoso' }),
    host.token({ tenant: 'contoso', scopes: ['factory.runtime.read'] }),
  ]);
  const expired = await issueLocalToken(keys, { issuer, audience, tenant: 'contoso', scopes: all, ttlSeconds: -120 });
  const wrongAudience = await issueLocalToken(keys, { issuer, audience: 'api://someone-else', tenant: 'contoso', scopes: all });
  const wrongIssuer = await issueLocalToken(keys, { issuer: 'https://evil.example', audience, tenant: 'contoso', scopes: all });
  const [h, p] = good[0].split('.');
  const forged = `${h}.${p}.${'A'.repeat(86)}`;
  const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${p}.`;
  return [
    ...good.map((t) => `Bearer ${t}`),
    ...[expired, wrongAudience, wrongIssuer, forged, none].map((t) => `Bearer ${t}`),
    '',
    'Bearer',
    'Bearer ',
    'Basic dXNlcjpwYXNz',
    'Bearer not.a.jwt',
    `Bearer ${'x'.repeat(9000)}`,
    `bearer ${good[0]}`,
  ];
}

function fuzzRequest(ops: readonly Operation[], auths: readonly string[]): fc.Arbitrary<FuzzRequest> {
  return fc.constantFrom(...ops).chain((op) =>
    fc.record({
      method: fc.oneof({ weight: 9, arbitrary: fc.constant(op.method) }, { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS') }),
      path: fc
        .tuple(fc.array(pathParam, { minLength: 4, maxLength: 4 }), query, fc.constantFrom('', '', '', '/', '//', '/..', '/extra'))
        .map(([params, q, tail]) => {
          let i = 0;
          return `${op.path.replace(/\{[^}]+\}/g, () => params[i++]!)}${tail}${q}`;
        }),
      // Mostly good tokens, so most requests get past authentication to the validation and the use cases behind it.
      auth: fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...fittingTokens(op.scope)) }, { weight: 1, arbitrary: fc.nat(auths.length - 1) }),
      headers: fc.tuple(extraHeaders, contentType).map(([h, ct]) => (ct === undefined ? h : { ...h, 'content-type': ct })),
      body: bodyOf(op.body),
    }),
  );
}

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

/**
 * Sends one request on the kept-alive connection. A reset of a reused connection is sent again once on a new one:
 * the host closes a connection idle for its keep-alive timeout (5 s), and a client that is starved of CPU for that
 * long (the suite runs on two cores) can write its next request into the connection as it closes. Node's
 * documentation gives this retry for it (`request.reusedSocket`); a reset on a new connection is not retried.
 */
async function send(url: URL, auths: readonly string[], r: FuzzRequest): Promise<Answer> {
  try {
    return await sendOnce(url, auths, r);
  } catch (error) {
    if (!(error instanceof ConnectionReset)) throw error;
    return sendOnce(url, auths, r);
  }
}

class ConnectionReset extends Error {}

function sendOnce(url: URL, auths: readonly string[], r: FuzzRequest): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...r.headers };
    if (auths[r.auth]) headers.authorization = auths[r.auth]!;
    const req = request({ host: url.hostname, port: url.port, method: r.method, path: r.path, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', (error: NodeJS.ErrnoException) => reject(req.reusedSocket && error.code === 'ECONNRESET' ? new ConnectionReset(error.message) : error));
    req.end(r.body);
  });
}

/**
 * What is wrong with an answer: a 5xx, a refusal that is not a problem, or a refusal that changed state. The
 * LeaseService's Connect route answers in its protocol's words (a JSON `{code, message}`), not problem+json.
 */
function defectOf(answer: Answer, changed: readonly string[], path: string): string | undefined {
  if (answer.status >= 500) return `a ${answer.status}: ${answer.body.slice(0, 300)}`;
  if (answer.status < 400) return undefined;
  if (path.startsWith(CONNECT_PREFIX)) return connectDefectOf(answer, changed);
  if (answer.contentType !== 'application/problem+json') return `a ${answer.status} with content-type ${String(answer.contentType)}: ${answer.body.slice(0, 200)}`;
  let problem: { type?: unknown; title?: unknown; status?: unknown };
  try {
    problem = JSON.parse(answer.body) as typeof problem;
  } catch {
    return `a ${answer.status} problem whose body is not JSON`;
  }
  if (typeof problem.type !== 'string' || typeof problem.title !== 'string' || problem.status !== answer.status) return `a ${answer.status} problem without type, title or status: ${answer.body.slice(0, 200)}`;
  if (changed.length > 0) return `a refused request (${answer.status}) changed ${changed.join(', ')}`;
  return undefined;
}

const CONNECT_PREFIX = '/runtime-cloud/connect/';

function connectDefectOf(answer: Answer, changed: readonly string[]): string | undefined {
  let error: { code?: unknown; message?: unknown };
  try {
    error = JSON.parse(answer.body) as typeof error;
  } catch {
    return `a ${answer.status} Connect error whose body is not JSON`;
  }
  if (typeof error.code !== 'string') return `a ${answer.status} Connect error without a code: ${answer.body.slice(0, 200)}`;
  if (changed.length > 0) return `a refused call (${answer.status}) changed ${changed.join(', ')}`;
  return undefined;
}

function describeRequest(r: FuzzRequest): string {
  const body = r.body === undefined ? '' : r.body.length > 300 ? `${r.body.slice(0, 300).toString()}… (${r.body.length} bytes)` : r.body.toString();
  return `${r.method} ${r.path.slice(0, 300)} auth=#${r.auth} headers=${JSON.stringify(r.headers).slice(0, 300)} body=${body}`;
}

describe('HTTP fuzzing', () => {
  let host: TestHost;
  let digest: StateDigest;
  beforeAll(async () => {
    // No timers, no queue receivers, no agents: between two requests nothing but the requests writes the store.
    host = await startTestHost({
      components: [localDurable(), capacitySeedComponent(), exampleDesiredStateComponent(), new BusEndpoints(), new LocalCloudEndpoints(), new LocalExternalServicesEndpoints()],
    });
    digest = new StateDigest(join(host.stateDir, host.host.config.store.connection));
  });
  afterAll(async () => {
    agent.destroy();
    digest?.close();
    await host?.stop();
  });

  it('when 10,000 generated requests hit every route, then none is a 5xx, every refusal is a problem and changes nothing', async () => {
    const { seed, numRuns } = fuzzSettings('http-fuzz', 10_000);
    const ops = operations();
    const auths = await authorizations(host);
    const statuses = new Map<number, number>();
    // The state after one request is the state before the next: one digest per request.
    let before = digest.take();
    await fc.assert(
      fc.asyncProperty(fuzzRequest(ops, auths), async (r) => {
        const answer = await send(host.url, auths, r);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        const after = digest.take();
        const changed = answer.status >= 400 ? changedKeys(before, after) : [];
        before = after;
        const defect = defectOf(answer, changed, r.path);
        if (defect) throw new Error(`${defect}\n  for ${describeRequest(r)}`);
      }),
      { seed, numRuns, endOnFailure: true },
    );
    console.log(`http-fuzz statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b)))}`);
    expect([...statuses.keys()].filter((s) => s >= 500)).toEqual([]);
  }, 300_000);
});
