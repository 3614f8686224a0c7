import { randomUUID } from 'node:crypto';
import type { TokenValidator } from '../../shared/platform/auth/token-validator';
import { AppError } from '../../shared/platform/errors/app-error';
import { errorProblem } from '../../shared/platform/http/problem';
import { parseJsonText } from '../../shared/platform/validation/validation';
import type { AnyDb, SqlDialect } from '../../shared/platform/sql/database';
import type { Clock } from '../../shared/platform/time/clock';
import type { HttpBinding, RawRequest, RawResponse } from '../http/http-binding';
import { adminOnly, answeringProblems } from '../http/raw-problems';
import {
  HistoryEventType,
  INSTANCE_ID_RULES,
  MAX_INSTANCE_ID_LENGTH,
  TERMINAL_STATUSES,
  durableClientData,
  summarizeEvent,
  type HistoryEvent,
} from './durable-protocol';
import {
  durableDb,
  getInstance,
  listInstances,
  loadHistory,
  purgeInstance,
  purgeInstancesBy,
  raiseEvent,
  resumeInstance,
  suspendInstance,
  startInstance,
  terminateInstance,
  type DurableInstance,
} from './durable.repository';
import { initialRunnerState } from './durable-runner';

/** Where the local host serves the Durable HTTP API subset that `DurableClient` calls (with `rpcBaseUrl` set). */
export const RPC_BASE_PATH = 'runtime-cloud/local/durable/rpc';
/** The webhook-style routes behind the URLs of `createCheckStatusResponse` (as the Functions host names them). */
export const WEBHOOK_BASE_PATH = 'runtime/webhooks/durabletask';
/** The local view of instances, for people (bearer token with factory.runtime.admin). */
export const VIEW_BASE_PATH = 'runtime-cloud/local/durable/instances';

export interface DurableApiDeps {
  readonly db: AnyDb;
  readonly dialect: SqlDialect;
  readonly clock: Clock;
  readonly auth: TokenValidator;
  /** This host process's secret in the client URLs. */
  readonly key: string;
  /** The orchestration functions registered on this host. */
  readonly orchestrations: () => readonly string[];
  /** Tells the runner there is work (a start, an event, a termination). */
  readonly wake: () => void;
  /** The host's origin, once listening. */
  readonly origin: () => string;
  readonly workerId: string;
  /** The version of instances started without one (host.json `defaultVersion`). */
  readonly defaultVersion?: string;
}

/** Binds the Durable client API (rpc and webhook forms) and the local view to the host's HTTP server. */
export function addDurableRoutes(http: HttpBinding, deps: DurableApiDeps): void {
  const api = new DurableApi(deps);
  const rpc = (handler: (r: RawRequest) => Promise<RawResponse>) => async (request: RawRequest) =>
    request.params.key === deps.key ? guarded(handler, request) : errorProblem(new AppError('DURABLE.UNKNOWN_ENDPOINT', 'not-found', 'unknown durable endpoint'));
  const webhook = (handler: (r: RawRequest) => Promise<RawResponse>) => async (request: RawRequest) =>
    request.url.searchParams.get('code') === deps.key ? guarded(handler, request) : errorProblem(new AppError('DURABLE.CODE_REQUIRED', 'unauthorized', 'a valid code is required'));

  for (const [wrap, base] of [
    [rpc, `${RPC_BASE_PATH}/{key}`],
    [webhook, WEBHOOK_BASE_PATH],
  ] as const) {
    http.addRawRoute(['POST'], `${base}/orchestrators/{functionName}/{instanceId?}`, wrap((r) => api.start(r)));
    http.addRawRoute(['GET'], `${base}/instances/{instanceId?}`, wrap((r) => (r.params.instanceId ? api.status(r) : api.list(r))));
    http.addRawRoute(['DELETE'], `${base}/instances/{instanceId?}`, wrap((r) => (r.params.instanceId ? api.purge(r) : api.purgeBy(r))));
    http.addRawRoute(['POST'], `${base}/instances/{instanceId}/raiseEvent/{eventName}`, wrap((r) => api.raise(r)));
    http.addRawRoute(['POST'], `${base}/instances/{instanceId}/terminate`, wrap((r) => api.terminate(r)));
    http.addRawRoute(['POST'], `${base}/instances/{instanceId}/suspend`, wrap((r) => api.suspend(r)));
    http.addRawRoute(['POST'], `${base}/instances/{instanceId}/resume`, wrap((r) => api.resume(r)));
    http.addRawRoute(['POST'], `${base}/instances/{instanceId}/rewind`, wrap((r) => api.rewind(r)));
  }
  http.addRawRoute(['GET'], `${VIEW_BASE_PATH}/{instanceId?}`, (r) => adminOnly(deps.auth, r, () => api.view(r)));
}

function guarded(handler: (r: RawRequest) => Promise<RawResponse>, request: RawRequest): Promise<RawResponse> {
  return answeringProblems(() => handler(request));
}

function notFound(instanceId: string): RawResponse {
  return errorProblem(new AppError('DURABLE.INSTANCE_NOT_FOUND', 'not-found', `no instance with id '${instanceId}'`));
}

function gone(instanceId: string): RawResponse {
  return errorProblem(new AppError('DURABLE.INSTANCE_GONE', 'gone', `instance '${instanceId}' is no longer running`));
}

/** The orchestration input as JSON text, checked to be JSON; an empty body is no input. */
function inputText(body: Buffer): string | null {
  const text = body.toString('utf8');
  if (text.trim() === '') return null;
  parseJsonText(text);
  return text;
}

function parseOrNull(text: string | null): unknown {
  return text === null ? null : (JSON.parse(text) as unknown);
}

/** What a rewind answers: the feature named, and what to do instead. */
export const REWIND_NOT_SUPPORTED =
  'Rewind is not supported by the local Durable host (runtime-cloud): start the orchestration again, or use Azure, where the Durable extension supports it.';

/** An ISO-8601 instant of the query, as epoch ms; a value that is not one is the caller's error. */
function instantParameter(query: URLSearchParams, name: string): number | undefined {
  const text = query.get(name);
  if (text === null || text === '') return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw new AppError('DURABLE.INVALID_TIME', 'validation', `${name} must be an ISO-8601 time`);
  return at;
}

class DurableApi {
  readonly #deps: DurableApiDeps;
  constructor(deps: DurableApiDeps) {
    this.#deps = deps;
  }

  get #db() {
    return durableDb(this.#deps.db);
  }

  /** startNew: a caller-chosen id that is pending or running is refused (409); an ended one starts afresh. */
  async start(request: RawRequest): Promise<RawResponse> {
    const name = request.params.functionName ?? '';
    const registered = this.#deps.orchestrations().find((n) => n.toLowerCase() === name.toLowerCase());
    if (!registered) {
      throw new AppError('DURABLE.UNKNOWN_ORCHESTRATION', 'validation', `'${name}' is not an orchestration function of this host`);
    }
    const instanceId = request.params.instanceId ?? randomUUID().replace(/-/g, '');
    if (instanceId.length > MAX_INSTANCE_ID_LENGTH || /[/\\#?]/.test(instanceId)) {
      throw new AppError('DURABLE.INVALID_INSTANCE_ID', 'validation', INSTANCE_ID_RULES);
    }
    const input = inputText(request.body);
    // The client's `version` (startNew's option), else the default version, as the extension assigns it.
    const version = request.url.searchParams.get('version') || this.#deps.defaultVersion;
    const outcome = await startInstance(this.#db, {
      instanceId,
      name: registered,
      executionId: randomUUID(),
      input,
      runnerState: JSON.stringify(initialRunnerState()),
      ...(version !== undefined ? { orchestrationVersion: version } : {}),
      now: this.#deps.clock.now().getTime(),
    });
    if (outcome === 'conflict') {
      throw new AppError('DURABLE.INSTANCE_ACTIVE', 'conflict', `an instance with id '${instanceId}' is already pending or running`);
    }
    this.#deps.wake();
    const links = this.#links(instanceId);
    return { status: 202, headers: { location: links.statusQueryGetUri ?? '' }, body: { ...links, id: instanceId } };
  }

  async status(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const instance = await getInstance(this.#db, instanceId);
    if (!instance) return notFound(instanceId);
    const query = request.url.searchParams;
    const body: Record<string, unknown> = statusOf(instance, query.get('showInput') !== 'false');
    if (query.get('showHistory') === 'true') body.history = (await loadHistory(this.#db, instanceId)).map(summarizeEvent);
    return { status: TERMINAL_STATUSES.includes(instance.status) ? 200 : 202, body };
  }

  /** getStatusAll/getStatusBy: pages follow `x-ms-continuation-token`. */
  async list(request: RawRequest): Promise<RawResponse> {
    const query = request.url.searchParams;
    const token = request.headers['x-ms-continuation-token'];
    const after = typeof token === 'string' && token ? Buffer.from(token, 'base64url').toString('utf8') : undefined;
    const from = query.get('createdTimeFrom');
    const to = query.get('createdTimeTo');
    const page = await listInstances(this.#db, this.#deps.dialect, {
      limit: 100,
      ...(after !== undefined ? { after } : {}),
      ...(query.get('runtimeStatus') ? { statuses: (query.get('runtimeStatus') ?? '').split(',') } : {}),
      ...(from ? { createdFrom: Date.parse(from) } : {}),
      ...(to ? { createdTo: Date.parse(to) } : {}),
    });
    const last = page.items.at(-1);
    return {
      status: 200,
      headers: page.more && last ? { 'x-ms-continuation-token': Buffer.from(last.instanceId).toString('base64url') } : {},
      body: page.items.map((i) => statusOf(i, query.get('showInput') === 'true')),
    };
  }

  async raise(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const now = this.#deps.clock.now();
    const event: HistoryEvent = {
      EventType: HistoryEventType.EventRaised,
      EventId: -1,
      Timestamp: now.toISOString(),
      IsPlayed: false,
      Name: request.params.eventName ?? '',
      Input: inputText(request.body),
    };
    const outcome = await raiseEvent(this.#db, instanceId, event, now.getTime());
    if (outcome === 'not-found') return notFound(instanceId);
    if (outcome === 'gone') return gone(instanceId);
    this.#deps.wake();
    return { status: 202 };
  }

  async terminate(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const reason = request.url.searchParams.get('reason') ?? '';
    const outcome = await terminateInstance(this.#db, instanceId, reason, this.#deps.workerId, this.#deps.clock.now().getTime());
    if (outcome === 'not-found') return notFound(instanceId);
    if (outcome === 'gone') return gone(instanceId);
    this.#deps.wake();
    return { status: 202 };
  }

  async purge(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const outcome = await purgeInstance(this.#db, instanceId);
    if (outcome === 'not-found') return notFound(instanceId);
    if (outcome === 'active') {
      throw new AppError('DURABLE.INSTANCE_ACTIVE', 'conflict', `instance '${instanceId}' is still pending or running; terminate it first`);
    }
    return { status: 200, body: { instancesDeleted: 1 } };
  }

  async suspend(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const outcome = await suspendInstance(this.#db, instanceId, this.#deps.clock.now().getTime());
    if (outcome === 'not-found') return notFound(instanceId);
    if (outcome === 'gone') return gone(instanceId);
    return { status: 202 };
  }

  async resume(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId ?? '';
    const outcome = await resumeInstance(this.#db, instanceId, this.#deps.clock.now().getTime());
    if (outcome === 'not-found') return notFound(instanceId);
    if (outcome === 'gone') return gone(instanceId);
    this.#deps.wake();
    return { status: 202 };
  }

  /**
   * Rewind is not built locally. 501 is the answer the SDK's client turns into a rejection with the body as its
   * message (`rewind` in `durableClient/DurableClient.js`), so the body is that message, as text.
   */
  async rewind(request: RawRequest): Promise<RawResponse> {
    const instance = await getInstance(this.#db, request.params.instanceId ?? '');
    if (!instance) return notFound(request.params.instanceId ?? '');
    return { status: 501, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: REWIND_NOT_SUPPORTED };
  }

  /** purgeInstanceHistoryBy: ended instances created in the window, of the given statuses (default: every ended one). */
  async purgeBy(request: RawRequest): Promise<RawResponse> {
    const query = request.url.searchParams;
    const from = instantParameter(query, 'createdTimeFrom');
    const to = instantParameter(query, 'createdTimeTo');
    const statuses = query.get('runtimeStatus')?.split(',').filter((s) => s !== '');
    const deleted = await purgeInstancesBy(this.#db, {
      ...(statuses ? { statuses } : {}),
      ...(from !== undefined ? { createdFrom: from } : {}),
      ...(to !== undefined ? { createdTo: to } : {}),
    });
    return { status: 200, body: { instancesDeleted: deleted } };
  }

  /** The local view: a page of instances, or one instance with its history summary. PlatformAdmin or factory.runtime.admin. */
  async view(request: RawRequest): Promise<RawResponse> {
    const instanceId = request.params.instanceId;
    if (instanceId) {
      const instance = await getInstance(this.#db, instanceId);
      if (!instance) return notFound(instanceId);
      const history = await loadHistory(this.#db, instanceId);
      return {
        status: 200,
        body: {
          ...statusOf(instance, true),
          failure: parseOrNull(instance.failure),
          executionId: instance.executionId,
          parent: instance.parent,
          history: history.map(summarizeEvent),
        },
      };
    }
    const query = request.url.searchParams;
    const limitText = query.get('limit') ?? '100';
    const limit = Number(limitText);
    if (!/^\d+$/.test(limitText) || limit < 1 || limit > 1000) {
      throw new AppError('DURABLE.INVALID_LIMIT', 'validation', 'limit must be an integer from 1 to 1000');
    }
    const cursor = query.get('cursor');
    const page = await listInstances(this.#db, this.#deps.dialect, { limit, ...(cursor ? { after: Buffer.from(cursor, 'base64url').toString('utf8') } : {}) });
    const last = page.items.at(-1);
    return {
      status: 200,
      body: {
        items: page.items.map((i) => {
          const { input: _input, output: _output, ...summary } = statusOf(i, false);
          return summary;
        }),
        nextCursor: page.more && last ? Buffer.from(last.instanceId).toString('base64url') : null,
      },
    };
  }

  #links(instanceId: string): Record<string, string> {
    const urls = durableClientData(this.#deps.origin(), this.#deps.key).managementUrls;
    return Object.fromEntries(Object.entries(urls).map(([k, v]) => [k, v.replace('INSTANCEID', encodeURIComponent(instanceId))]));
  }
}

/** The status shape `DurableOrchestrationStatus` accepts: input and output must be present (null when none). */
function statusOf(instance: DurableInstance, showInput: boolean): Record<string, unknown> {
  return {
    name: instance.name,
    instanceId: instance.instanceId,
    createdTime: new Date(instance.createdAt).toISOString(),
    lastUpdatedTime: new Date(instance.updatedAt).toISOString(),
    input: showInput ? parseOrNull(instance.input) : null,
    output: parseOrNull(instance.output),
    runtimeStatus: instance.status,
    customStatus: parseOrNull(instance.customStatus),
  };
}
