import { z } from 'zod';
import { createLocalCloud, type CloudResource, type LocalCloud } from '../cloud/local-cloud';
import { AppError } from '../../shared/platform/errors/app-error';
import { parseJsonBody, parseQueryParams } from '../../shared/platform/validation/validation';
import { STACK_NAME_PATTERN } from '../../shared/provisioning/promotion';
import type { HostComponent, HostContext } from '../host';
import { adminOnly } from '../http/raw-problems';
import type { RawRequest, RawResponse } from '../http/http-binding';

const BASE = 'runtime-cloud/local/cloud';
const RESOURCES = `${BASE}/resources`;
/** The target the local IaC engine applies to unless configured otherwise. */
const DEFAULT_TARGET = 'local';

// Names end up inside urns, which `::` separates, and in 200-character key columns: plain characters only. Each
// pattern needs a character, so an empty name is one problem, not two.
const PLAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** A Pulumi type token `package:module:Type` (module may hold `/`, as in `aws:s3/bucket:Bucket`), never `::`. */
const TYPE_TOKEN = /^[A-Za-z0-9_-]+:[A-Za-z0-9_./-]+:[A-Za-z0-9_.-]+$/;

const targetName = z.string().max(200).regex(PLAIN_NAME, 'a target is letters, digits, ".", "_" or "-"');
const stackName = z.string().max(200).regex(STACK_NAME_PATTERN, 'a stack is letters, digits, ".", "_" or "-"');
const jsonObject = z.record(z.string(), z.unknown(), { error: 'must be a JSON object' });

const tenantName = z.string().min(1).max(200);

/** `?target=`, and `?tenant=`: the scope of the tenant whose resources are meant (urns repeat across tenants). */
const targetQuerySchema = z.object({ target: targetName.default(DEFAULT_TARGET), tenant: tenantName.optional() });

const listQuerySchema = targetQuerySchema.extend({
  stack: stackName.optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  /** The last id of the previous page. */
  cursor: z.string().min(1).max(200).optional(),
});

/**
 * The body that creates an unmanaged resource. Changing it is a breaking change for scripts and tests that make
 * drift on the local host.
 */
const newResourceSchema = z.strictObject({
  /** The tenant whose scope the resource is made in. */
  tenant: tenantName,
  /** The project and stack whose resources it is among (`urn:pulumi:<stack>::<project>::…`); no program declares it. */
  project: stackName,
  stack: stackName,
  type: z.string().max(200).regex(TYPE_TOKEN, 'a type is a token package:module:Type of letters, digits, ".", "_", "-" (and "/" in the module)'),
  name: z.string().max(200).regex(PLAIN_NAME, 'a name is letters, digits, ".", "_" or "-"'),
  properties: jsonObject,
  /** Wins over `?target=`. */
  target: targetName.optional(),
});

/** The outage switch's body. Changing it is a breaking change for scripts and tests that take the target down. */
const outageSchema = z.strictObject({
  unreachable: z.boolean(),
  /** Wins over `?target=`. */
  target: targetName.optional(),
});

/**
 * Local-only endpoints that change the local cloud out of band, as someone clicking in a portal would, so drift,
 * unmanaged resources and an unreachable target can be produced on one machine (never registered in Azure): list
 * resources, JSON-Merge-Patch a resource's properties, delete one, create an unmanaged one, switch a target
 * unreachable. Resources are addressed by urn (URL-encoded in the path). PlatformAdmin or `factory.runtime.admin`
 * only; errors are problem+json, and while a target is unreachable its resource calls answer 503
 * `PROVISIONING.TARGET_UNREACHABLE`, as the engine sees them.
 */
export class LocalCloudEndpoints implements HostComponent {
  readonly name = 'local-cloud-endpoints';

  start(context: HostContext): Promise<void> {
    const { deps, http } = context;
    const cloud = createLocalCloud({ store: deps.sql, clock: deps.clock, ids: deps.ids });
    const route = (method: string, template: string, run: (request: RawRequest) => Promise<RawResponse>) =>
      http.addRawRoute([method], template, (request) => adminOnly(deps.auth, request, () => run(request)));

    route('GET', RESOURCES, (request) => listResources(cloud, request));
    route('POST', RESOURCES, (request) => createUnmanaged(cloud, request));
    route('GET', `${RESOURCES}/{urn}`, async (request) => {
      return { status: 200, body: await resourceByUrn(cloud, queryScope(request), urnParam(request)) };
    });
    route('PATCH', `${RESOURCES}/{urn}`, (request) => patchResource(cloud, request));
    route('DELETE', `${RESOURCES}/{urn}`, (request) => deleteResource(cloud, request));
    route('POST', `${BASE}/outage`, async (request) => {
      const body = parseJsonBody(request.body.toString('utf8'), outageSchema);
      const target = body.target ?? queryTarget(request);
      // The switch itself works while the target is unreachable; otherwise it could never be switched back.
      await cloud.setReachable(target, !body.unreachable);
      return { status: 200, body: { target, reachable: await cloud.isReachable(target) } };
    });
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}

async function listResources(cloud: LocalCloud, request: RawRequest): Promise<RawResponse> {
  const query = parseQueryParams(request.url.searchParams, listQuerySchema);
  const prefix = query.stack === undefined ? undefined : `urn:pulumi:${query.stack}::`;
  // Ids are time-ordered; sorting by code unit here (not by the store's collation) keeps the cursor exact.
  const all = (await cloud.list(query.target))
    .filter((r) => (prefix === undefined || r.urn.startsWith(prefix)) && (query.tenant === undefined || r.scope === query.tenant))
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const { cursor } = query;
  const after = cursor === undefined ? all : all.filter((r) => r.id > cursor);
  const items = after.slice(0, query.limit);
  const last = items[items.length - 1];
  return {
    status: 200,
    body: {
      target: query.target,
      ...(query.tenant === undefined ? {} : { tenant: query.tenant }),
      ...(query.stack === undefined ? {} : { stack: query.stack }),
      items,
      nextCursor: after.length > items.length && last ? last.id : null,
    },
  };
}

async function createUnmanaged(cloud: LocalCloud, request: RawRequest): Promise<RawResponse> {
  const body = parseJsonBody(request.body.toString('utf8'), newResourceSchema);
  const target = body.target ?? queryTarget(request);
  const urn = `urn:pulumi:${body.stack}::${body.project}::${body.type}::${body.name}`;
  // Check, then insert: two racing creates may both pass. Local-only and operator-driven, so that is accepted;
  // a second resource with the urn then answers LOCAL_CLOUD.AMBIGUOUS_URN rather than being picked at random.
  const existing = (await cloud.list(target)).find((r) => r.scope === body.tenant && r.urn === urn);
  if (existing) {
    throw new AppError('LOCAL_CLOUD.ALREADY_EXISTS', 'conflict', `the target ${target} already has a resource ${urn} of tenant ${body.tenant}`, { target, urn, id: existing.id });
  }
  const created = await cloud.create(target, { scope: body.tenant, urn, type: body.type, properties: body.properties });
  return {
    status: 201,
    headers: { location: `/${RESOURCES}/${encodeURIComponent(urn)}?target=${encodeURIComponent(target)}&tenant=${encodeURIComponent(body.tenant)}` },
    body: created,
  };
}

async function patchResource(cloud: LocalCloud, request: RawRequest): Promise<RawResponse> {
  const where = queryScope(request);
  // Validated before the cloud is asked: a bad patch is the client's fault whether or not the target answers.
  const patch = parseJsonBody(request.body.toString('utf8'), jsonObject);
  const resource = await resourceByUrn(cloud, where, urnParam(request));
  // Read, merge, write without a version check: a concurrent writer's change in between is lost. Local-only.
  const updated = await cloud.update(where.target, resource.id, mergeObjects(resource.properties, patch));
  return { status: 200, body: updated };
}

async function deleteResource(cloud: LocalCloud, request: RawRequest): Promise<RawResponse> {
  const where = queryScope(request);
  const urn = urnParam(request);
  const resource = await resourceByUrn(cloud, where, urn);
  if (!(await cloud.delete(where.target, resource.id))) throw notFound(where.target, urn);
  return { status: 204 };
}

/**
 * The one resource of the target with the urn, in the tenant's scope when one is named. The local cloud keys
 * resources by id, so this lists the target (small, local-only) and matches; two tenants' resources of one urn
 * need the tenant named (409 `LOCAL_CLOUD.AMBIGUOUS_URN` otherwise).
 */
async function resourceByUrn(cloud: LocalCloud, where: { target: string; tenant?: string | undefined }, urn: string): Promise<CloudResource> {
  const { target, tenant } = where;
  const matches = (await cloud.list(target)).filter((r) => r.urn === urn && (tenant === undefined || r.scope === tenant));
  const [only] = matches;
  if (!only) throw notFound(target, urn);
  if (matches.length > 1) {
    throw new AppError('LOCAL_CLOUD.AMBIGUOUS_URN', 'conflict', `the target ${target} has ${matches.length} resources ${urn}; name the tenant (?tenant=)`, {
      target,
      urn,
      ids: matches.map((r) => r.id),
      tenants: matches.map((r) => r.scope),
    });
  }
  return only;
}

function notFound(target: string, urn: string): AppError {
  return new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `the target ${target} has no resource ${urn}`, { target, urn });
}

function queryTarget(request: RawRequest): string {
  return queryScope(request).target;
}

function queryScope(request: RawRequest): { target: string; tenant?: string | undefined } {
  return parseQueryParams(request.url.searchParams, targetQuerySchema);
}

/** The route matched a non-empty segment and decoded it once, so `encodeURIComponent(urn)` arrives as the urn. */
function urnParam(request: RawRequest): string {
  return request.params.urn ?? '';
}

/** JSON Merge Patch (RFC 7386) of an object by an object. */
function mergeObjects(target: Readonly<Record<string, unknown>>, patch: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const merged = new Map(Object.entries(target));
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) merged.delete(key);
    else merged.set(key, mergeValue(merged.get(key), value));
  }
  // fromEntries defines own data properties, so a member named `__proto__` stays a member, never a prototype.
  return Object.fromEntries(merged);
}

/** RFC 7386: an object patch merges into the member (a non-object member is replaced by `{}` first); anything else, arrays too, replaces it. */
function mergeValue(target: unknown, patch: unknown): unknown {
  if (!isJsonObject(patch)) return patch;
  return mergeObjects(isJsonObject(target) ? target : {}, patch);
}

function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
