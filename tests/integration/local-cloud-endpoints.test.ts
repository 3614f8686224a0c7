import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalCloud, type CloudResource, type LocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import { startTestHost, type TestHost } from '../support/local-host';
import { expectProblem, fieldsOf } from '../support/problems';

/**
 * The local-only endpoints that change the local cloud out of band, on a local host started in this process with
 * its full set of components. What they did is read back through a local cloud over the host's own store.
 */

const RESOURCES = '/runtime-cloud/local/cloud/resources';
const OUTAGE = '/runtime-cloud/local/cloud/outage';
const admin = { roles: ['PlatformAdmin'] };
/** The tenant whose scope the resources of these tests are made in, and the project of their stacks. */
const TENANT = 'demo-team';
const PROJECT = 'demo';
/** Who an unmanaged resource made through the endpoint belongs to: the tenant's scope, in a stack of the project. */
const OWNER = { tenant: TENANT, project: PROJECT };

interface Page {
  target: string;
  tenant?: string;
  stack?: string;
  items: CloudResource[];
  nextCursor: string | null;
}

const resourcePath = (urn: string, target?: string, tenant?: string) => {
  const query = new URLSearchParams({ ...(target ? { target } : {}), ...(tenant ? { tenant } : {}) }).toString();
  return `${RESOURCES}/${encodeURIComponent(urn)}${query ? `?${query}` : ''}`;
};

describe('local cloud endpoints on the local host', () => {
  let host: TestHost;
  let cloud: LocalCloud;

  beforeAll(async () => {
    host = await startTestHost();
    cloud = createLocalCloud({ store: host.host.deps.sql, clock: host.host.deps.clock, ids: randomIds });
  });
  afterAll(async () => {
    await host?.stop();
  });

  const call = (method: string, path: string, body?: unknown, claims: object | null = admin) =>
    host.fetch(path, {
      method,
      ...(claims ? { claims } : {}),
      ...(body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
  const listOf = async (query: string): Promise<Page> => {
    const response = await call('GET', `${RESOURCES}?${query}`);
    expect(response.status).toBe(200);
    return (await response.json()) as Page;
  };
  /** A resource as the local IaC engine would have made it: in a stack's project, not through these endpoints. */
  const managed = (stack: string, name: string, properties: Record<string, unknown>, type = 'local:compute:WorkerPool') =>
    cloud.create('local', { scope: TENANT, urn: `urn:pulumi:${stack}::${PROJECT}::${type}::${name}`, type, properties });

  it("when an unmanaged resource is created, then it answers 201 with a location and is listed under its stack only, in its tenant's scope", async () => {
    const response = await call('POST', RESOURCES, { ...OWNER, stack: 'drift-create', type: 'local:storage:Bucket', name: 'stray', properties: { tier: 'hot' } });

    expect(response.status).toBe(201);
    const urn = `urn:pulumi:drift-create::${PROJECT}::local:storage:Bucket::stray`;
    const created = (await response.json()) as CloudResource;
    expect(created).toMatchObject({ target: 'local', scope: TENANT, urn, type: 'local:storage:Bucket', properties: { tier: 'hot' } });
    expect(created.id).toMatch(/^lcr_/);
    expect(response.headers.get('location')).toBe(`${RESOURCES}/${encodeURIComponent(urn)}?target=local&tenant=${TENANT}`);
    const located = await call('GET', response.headers.get('location') ?? '');
    expect(located.status).toBe(200);
    expect(await located.json()).toEqual(created);
    expect(await listOf('stack=drift-create')).toEqual({ target: 'local', stack: 'drift-create', items: [created], nextCursor: null });
    expect((await listOf('stack=drift-create-other')).items).toEqual([]);
    expect(await listOf(`stack=drift-create&tenant=${TENANT}`)).toEqual({ target: 'local', tenant: TENANT, stack: 'drift-create', items: [created], nextCursor: null });
    expect((await listOf('stack=drift-create&tenant=other-team')).items).toEqual([]);
    expect((await listOf('')).items).toContainEqual(created);
    expect(await cloud.get('local', created.id)).toEqual(created);
  });

  it("when a urn is created twice for a tenant, then the second answers 409 LOCAL_CLOUD.ALREADY_EXISTS and the first is kept; another tenant's of the urn is its own", async () => {
    const body = { ...OWNER, stack: 'drift-twice', type: 'local:storage:Bucket', name: 'twin', properties: { n: 1 } };
    const first = (await (await call('POST', RESOURCES, body)).json()) as CloudResource;

    const second = await call('POST', RESOURCES, { ...body, properties: { n: 2 } });
    const others = await call('POST', RESOURCES, { ...body, tenant: 'other-team', properties: { n: 3 } });

    const problem = await expectProblem(second, 409, 'LOCAL_CLOUD.ALREADY_EXISTS');
    expect(problem).toMatchObject({ urn: first.urn, id: first.id });
    expect(others.status).toBe(201);
    const theirs = (await others.json()) as CloudResource;
    expect(theirs).toMatchObject({ scope: 'other-team', urn: first.urn, properties: { n: 3 } });
    expect((await listOf('stack=drift-twice')).items).toEqual([first, theirs]);
    expect((await listOf(`stack=drift-twice&tenant=${TENANT}`)).items).toEqual([first]);
  });

  it('when a resource is patched, then nested objects merge, null deletes, other values replace, and the local cloud holds it', async () => {
    const resource = await managed('drift-patch', 'pool', {
      size: 2,
      sku: { tier: 'standard', capacity: 1, family: 'B' },
      tags: { team: 'a' },
      zones: ['1', '2'],
    });

    const response = await call('PATCH', resourcePath(resource.urn), {
      size: 5,
      sku: { capacity: 3, family: null },
      tags: null,
      zones: ['3'],
      added: { inner: { kept: 1, dropped: null } },
      absent: null,
    });

    expect(response.status).toBe(200);
    const expected = { size: 5, sku: { tier: 'standard', capacity: 3 }, zones: ['3'], added: { inner: { kept: 1 } } };
    const patched = (await response.json()) as CloudResource;
    expect(patched).toMatchObject({ id: resource.id, urn: resource.urn, type: resource.type, target: 'local' });
    expect(patched.properties).toEqual(expected);
    expect((await cloud.get('local', resource.id))?.properties).toEqual(expected);
  });

  it('when a resource is deleted, then it is gone and a second delete, a patch and a read answer 404 LOCAL_CLOUD.NOT_FOUND', async () => {
    const resource = await managed('drift-delete', 'pool', { size: 1 });
    const kept = await managed('drift-delete', 'other', { size: 1 });

    const response = await call('DELETE', resourcePath(resource.urn));

    expect(response.status).toBe(204);
    expect(await response.text()).toBe('');
    expect(await cloud.get('local', resource.id)).toBeUndefined();
    expect((await listOf('stack=drift-delete')).items.map((r) => r.id)).toEqual([kept.id]);
    const again = await expectProblem(await call('DELETE', resourcePath(resource.urn)), 404, 'LOCAL_CLOUD.NOT_FOUND');
    expect(again).toMatchObject({ target: 'local', urn: resource.urn });
    await expectProblem(await call('PATCH', resourcePath(resource.urn), { size: 2 }), 404, 'LOCAL_CLOUD.NOT_FOUND');
    await expectProblem(await call('GET', resourcePath(resource.urn)), 404, 'LOCAL_CLOUD.NOT_FOUND');
  });

  it('when a urn holds "::", "/", "$" and "." and is URL-encoded, then every route addresses exactly that resource', async () => {
    const parentQualified = await managed('drift-encoding', 'a.b', { v: 1 }, 'local:network:Vnet$local:storage/v2:Bucket');
    const created = (await (
      await call('POST', RESOURCES, { ...OWNER, stack: 'drift-encoding', type: 'aws:s3/bucket:Bucket', name: 'logs', properties: { v: 1 } })
    ).json()) as CloudResource;
    expect(created.urn).toBe(`urn:pulumi:drift-encoding::${PROJECT}::aws:s3/bucket:Bucket::logs`);

    for (const resource of [parentQualified, created]) {
      const read = await call('GET', resourcePath(resource.urn));
      expect(read.status).toBe(200);
      expect(((await read.json()) as CloudResource).id).toBe(resource.id);
      const patched = await call('PATCH', resourcePath(resource.urn), { v: 2 });
      expect(((await patched.json()) as CloudResource).properties).toEqual({ v: 2 });
      expect((await call('DELETE', resourcePath(resource.urn))).status).toBe(204);
      expect(await cloud.get('local', resource.id)).toBeUndefined();
    }
  });

  it('when the default target is switched unreachable, then resource calls answer 503 TARGET_UNREACHABLE until it is switched back', async () => {
    const resource = await managed('drift-outage', 'pool', { size: 1 });
    const down = await call('POST', OUTAGE, { unreachable: true });
    try {
      expect(down.status).toBe(200);
      expect(await down.json()).toEqual({ target: 'local', reachable: false });

      const calls = [
        call('GET', `${RESOURCES}?stack=drift-outage`),
        call('GET', resourcePath(resource.urn)),
        call('PATCH', resourcePath(resource.urn), { size: 9 }),
        call('DELETE', resourcePath(resource.urn)),
        call('POST', RESOURCES, { ...OWNER, stack: 'drift-outage', type: 'local:storage:Bucket', name: 'late', properties: {} }),
      ];
      for (const response of await Promise.all(calls)) {
        expect(await expectProblem(response, 503, 'PROVISIONING.TARGET_UNREACHABLE')).toMatchObject({ target: 'local' });
      }
      await expect(cloud.list('local')).rejects.toMatchObject({ code: 'PROVISIONING.TARGET_UNREACHABLE' });
      const stillDown = await call('POST', OUTAGE, { unreachable: true });
      expect(await stillDown.json()).toEqual({ target: 'local', reachable: false });
    } finally {
      const up = await call('POST', OUTAGE, { unreachable: false });
      expect(up.status).toBe(200);
      expect(await up.json()).toEqual({ target: 'local', reachable: true });
    }

    const page = await listOf('stack=drift-outage');
    expect(page.items).toEqual([resource]);
    const patched = await call('PATCH', resourcePath(resource.urn), { size: 9 });
    expect(((await patched.json()) as CloudResource).properties).toEqual({ size: 9 });
  });

  it('when another target is named, then its outage and resources are its own and the default target is untouched', async () => {
    const down = await call('POST', OUTAGE, { unreachable: true, target: 'elsewhere' });
    expect(await down.json()).toEqual({ target: 'elsewhere', reachable: false });
    await expectProblem(await call('GET', `${RESOURCES}?target=elsewhere`), 503, 'PROVISIONING.TARGET_UNREACHABLE');
    expect((await call('GET', RESOURCES)).status).toBe(200);

    // The query names the target when the body does not.
    const up = await call('POST', `${OUTAGE}?target=elsewhere`, { unreachable: false });
    expect(await up.json()).toEqual({ target: 'elsewhere', reachable: true });
    const response = await call('POST', RESOURCES, { ...OWNER, stack: 'drift-target', type: 'local:storage:Bucket', name: 'there', properties: {}, target: 'elsewhere' });

    expect(response.status).toBe(201);
    const created = (await response.json()) as CloudResource;
    expect(created.target).toBe('elsewhere');
    expect(response.headers.get('location')).toBe(resourcePath(created.urn, 'elsewhere', TENANT));
    expect((await listOf('target=elsewhere&stack=drift-target')).items).toEqual([created]);
    expect((await listOf('stack=drift-target')).items).toEqual([]);
    await expectProblem(await call('DELETE', resourcePath(created.urn)), 404, 'LOCAL_CLOUD.NOT_FOUND');
    expect((await call('DELETE', resourcePath(created.urn, 'elsewhere'))).status).toBe(204);
    expect(await cloud.list('elsewhere')).toEqual([]);
  });

  it('when a stack has more resources than a page, then nextCursor walks them in creation order', async () => {
    const made = [];
    for (const name of ['first', 'second', 'third']) {
      made.push(await managed('drift-page', name, { name }));
    }

    const first = await listOf('stack=drift-page&limit=2');
    const second = await listOf(`stack=drift-page&limit=2&cursor=${first.nextCursor ?? ''}`);

    expect(first.items.map((r) => r.id)).toEqual([made[0]?.id, made[1]?.id]);
    expect(first.nextCursor).toBe(made[1]?.id);
    expect(second.items.map((r) => r.id)).toEqual([made[2]?.id]);
    expect(second.nextCursor).toBeNull();
  });

  it('when two resources share a urn, then patch and delete answer 409 LOCAL_CLOUD.AMBIGUOUS_URN and change neither', async () => {
    const one = await managed('drift-ambiguous', 'twin', { n: 1 });
    const two = await managed('drift-ambiguous', 'twin', { n: 2 });

    const patched = await call('PATCH', resourcePath(one.urn), { n: 3 });
    const deleted = await call('DELETE', resourcePath(one.urn));

    expect(await expectProblem(patched, 409, 'LOCAL_CLOUD.AMBIGUOUS_URN')).toMatchObject({ ids: [one.id, two.id] });
    await expectProblem(deleted, 409, 'LOCAL_CLOUD.AMBIGUOUS_URN');
    expect((await listOf('stack=drift-ambiguous')).items).toEqual([one, two]);
  });

  it("when two tenants have a resource of one urn, then a route that names no tenant answers 409 LOCAL_CLOUD.AMBIGUOUS_URN; naming the tenant reaches that tenant's only", async () => {
    const ours = await managed('drift-tenants', 'pool', { n: 1 });
    const theirs = await cloud.create('local', { scope: 'other-team', urn: ours.urn, type: ours.type, properties: { n: 2 } });

    const unnamed = await call('PATCH', resourcePath(ours.urn), { n: 3 });
    const read = await call('GET', resourcePath(ours.urn, undefined, 'other-team'));
    const patched = await call('PATCH', resourcePath(ours.urn, undefined, 'other-team'), { n: 4 });
    const deleted = await call('DELETE', resourcePath(ours.urn, undefined, TENANT));
    const nobody = await call('GET', resourcePath(ours.urn, undefined, 'no-team'));

    expect(await expectProblem(unnamed, 409, 'LOCAL_CLOUD.AMBIGUOUS_URN')).toMatchObject({ ids: [ours.id, theirs.id], tenants: [TENANT, 'other-team'] });
    expect(((await read.json()) as CloudResource).id).toBe(theirs.id);
    expect(((await patched.json()) as CloudResource).properties).toEqual({ n: 4 });
    expect(deleted.status).toBe(204);
    await expectProblem(nobody, 404, 'LOCAL_CLOUD.NOT_FOUND');
    expect(await cloud.get('local', ours.id)).toBeUndefined();
    expect((await cloud.get('local', theirs.id))?.properties).toEqual({ n: 4 });
  });

  it('when bodies, queries or the path are invalid, then 400 problem+json names the fields and nothing changes', async () => {
    const resource = await managed('drift-invalid', 'pool', { size: 1 });

    const badCreate = await expectProblem(
      await call('POST', RESOURCES, { tenant: '', project: 'a/b', stack: 'has space', type: 'Bucket', name: 'a::b', properties: ['not', 'an', 'object'] }),
      400,
      'REQUEST.INVALID',
    );
    expect(fieldsOf(badCreate)).toEqual(['name', 'project', 'properties', 'stack', 'tenant', 'type']);
    expect(fieldsOf(await expectProblem(await call('POST', RESOURCES, { ...OWNER, stack: 's', type: 'a:b:C', name: 'n' }), 400, 'REQUEST.INVALID'))).toEqual(['properties']);
    // Whose a resource is, is never assumed.
    expect(fieldsOf(await expectProblem(await call('POST', RESOURCES, { stack: 's', type: 'a:b:C', name: 'n', properties: {} }), 400, 'REQUEST.INVALID'))).toEqual(['project', 'tenant']);
    expect(
      fieldsOf(await expectProblem(await call('POST', RESOURCES, { ...OWNER, stack: 's', type: 'a::C', name: 'n', properties: {}, extra: 1 }), 400, 'REQUEST.INVALID')),
    ).toEqual(['(body)', 'type']);
    await expectProblem(await call('POST', RESOURCES, '{"stack":'), 400, 'REQUEST.MALFORMED_JSON');
    expect(fieldsOf(await expectProblem(await call('PATCH', resourcePath(resource.urn), [{ size: 2 }]), 400, 'REQUEST.INVALID'))).toEqual(['(body)']);
    await expectProblem(await call('PATCH', resourcePath(resource.urn), '"size"'), 400, 'REQUEST.INVALID');
    await expectProblem(await call('PATCH', resourcePath(resource.urn), 'size=2'), 400, 'REQUEST.MALFORMED_JSON');
    expect(fieldsOf(await expectProblem(await call('POST', OUTAGE, { unreachable: 'yes' }), 400, 'REQUEST.INVALID'))).toEqual(['unreachable']);
    expect(fieldsOf(await expectProblem(await call('POST', OUTAGE, {}), 400, 'REQUEST.INVALID'))).toEqual(['unreachable']);
    expect(fieldsOf(await expectProblem(await call('POST', OUTAGE, { unreachable: true, target: '../x' }), 400, 'REQUEST.INVALID'))).toEqual(['target']);
    expect(fieldsOf(await expectProblem(await call('GET', `${RESOURCES}?limit=0&stack=a%20b`), 400, 'REQUEST.INVALID_QUERY'))).toEqual(['limit', 'stack']);
    expect(fieldsOf(await expectProblem(await call('DELETE', `${resourcePath(resource.urn)}?target=`), 400, 'REQUEST.INVALID_QUERY'))).toEqual(['target']);
    await expectProblem(await call('GET', `${RESOURCES}/urn%E0%A4%A`), 400, 'REQUEST.BAD_TARGET');

    expect(await cloud.isReachable('local')).toBe(true);
    expect(await cloud.get('local', resource.id)).toEqual(resource);
    expect((await listOf('stack=s')).items).toEqual([]);
  });

  it('when the token is tenant-bound, read-only or missing, then the routes refuse it and nothing changes', async () => {
    const resource = await managed('drift-auth', 'pool', { size: 1 });
    const tenantAdmin = { tenant: 'demo-team', roles: ['PlatformAdmin'] };
    const observer = { roles: ['Observer'] };
    const attempts = (claims: object | null) => [
      call('GET', RESOURCES, undefined, claims),
      call('PATCH', resourcePath(resource.urn), { size: 2 }, claims),
      call('DELETE', resourcePath(resource.urn), undefined, claims),
      call('POST', RESOURCES, { ...OWNER, stack: 'drift-auth', type: 'local:storage:Bucket', name: 'no', properties: {} }, claims),
      call('POST', OUTAGE, { unreachable: true }, claims),
    ];

    for (const response of await Promise.all(attempts(tenantAdmin))) await expectProblem(response, 403, 'AUTH.PLATFORM_ONLY');
    for (const response of await Promise.all(attempts(observer))) await expectProblem(response, 403, 'AUTH.SCOPE_MISSING');
    for (const response of await Promise.all(attempts(null))) expect(response.status).toBe(401);

    expect(await cloud.isReachable('local')).toBe(true);
    expect((await listOf('stack=drift-auth')).items).toEqual([resource]);
    // The scope alone, without the role, is enough.
    const scoped = await call('GET', `${RESOURCES}?stack=drift-auth`, undefined, { scopes: ['factory.runtime.admin'] });
    expect(scoped.status).toBe(200);
  });
});
