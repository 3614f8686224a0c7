import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { AppError } from '../../shared/platform/errors/app-error';
import { type HeldIgnoreRule, type IacEngine } from '../../shared/platform/iac/iac-runner';
import { localIacRunner } from '../../local/engine/local-engine';
import type { ValueReference } from '../../shared/platform/iac/iac-values';
import { LOCAL_ENGINE_VERSION } from '../../local/engine/local-engine';
import type { Plan, ResolveReferences, StackState } from '../../shared/platform/iac/plan';
import type { ProjectFiles } from '../../local/engine/pulumi-yaml';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import { readStackState, stackStateDb, writeStackState } from '../../local/engine/stack-state.repository';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const SECRET = 'hunter2-s3cr3t-value';

/** A development environment: a network, a database with a secret password, a worker pool sized by config. */
function shop(options: { poolSize?: number; sku?: string; withCache?: boolean } = {}): ProjectFiles {
  return {
    'Pulumi.yaml': `name: shop
runtime: yaml
config:
  poolSize:
    type: integer
    default: 2
  dbPassword:
    type: string
    secret: true
variables:
  prefix: shop-dev
resources:
  net:
    type: local:network:VirtualNetwork
    properties:
      cidr: 10.0.0.0/16
      tags: { env: dev }
  db:
    type: local:sql:Database
    properties:
      name: \${prefix}-db
      network: \${net.id}
      sku: ${options.sku ?? 'basic'}
      password: \${dbPassword}
  pool:
    type: local:compute:WorkerPool
    properties:
      size: \${poolSize}
      network: \${net.id}
    options:
      dependsOn:
        - \${db}
${options.withCache === false ? '' : '  cache:\n    type: local:cache:Redis\n    properties:\n      size: 1\n'}outputs:
  poolId: \${pool.id}
  dbName: \${db.name}
`,
    'Pulumi.dev.yaml': `config:\n  shop:poolSize: ${options.poolSize ?? 2}\n  dbPassword:\n    secretRef: kv://shop/db-password\n`,
  };
}

const resolveSecrets: ResolveReferences = (reference: ValueReference) => {
  if ('secretRef' in reference && reference.secretRef === 'kv://shop/db-password') return Promise.resolve(SECRET);
  return Promise.reject(new AppError('GOVERNANCE.SECRET_NOT_FOUND', 'not-found', 'no such secret'));
};

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local IaC engine on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let cloud: LocalCloud;
    let engine: IacEngine;
    let target: string;
    let stack: StackRef;
    let run = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      // Each test has its own stack and target in the file's database.
      run++;
      stack = { tenant: 'tenant-a', project: 'shop', stack: `dev-${run}` };
      target = `target-${run}`;
      clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
      engine = localIacRunner({ store: database.store, clock, ids: randomIds, cloud, targetOf: () => target });
    });

    /** The stack file is named after the stack. */
    function files(options?: Parameters<typeof shop>[0]): ProjectFiles {
      const { 'Pulumi.dev.yaml': stackFile, ...rest } = shop(options);
      return { ...rest, [`Pulumi.${stack.stack}.yaml`]: stackFile ?? '' };
    }

    async function stateRow(): Promise<{ serial: number; resources: string } | undefined> {
      const { rows } = await sql<{ serial: number; resources: string }>`select serial, resources from local_iac_stacks where tenant_id = ${stack.tenant} and project = ${stack.project} and stack = ${stack.stack}`.execute(database.store.db);
      return rows[0] ? { serial: Number(rows[0].serial), resources: rows[0].resources } : undefined;
    }

    async function applyFresh(program: ProjectFiles = files()) {
      const plan = await engine.preview(stack, program, {});
      return { plan, result: await engine.apply(stack, program, {}, plan, resolveSecrets) };
    }

    it('when the state store answers, then version() returns the engine version; when it has no state table, version() fails', async () => {
      await expect(engine.version()).resolves.toBe(LOCAL_ENGINE_VERSION);
      const unmigrated = await createTestDatabase(dialect, { migrate: false });
      try {
        await expect(localIacRunner({ store: unmigrated.store, clock, ids: randomIds }).version()).rejects.toThrow(/local_iac_stacks/);
      } finally {
        await unmigrated.drop();
      }
    });

    it('when a new stack is previewed, applied and previewed again, then the target holds the resources and the second plan is all same', async () => {
      const { plan, result } = await applyFresh();
      expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['create net', 'create db', 'create pool', 'create cache']);

      expect(result.status).toBe('applied');
      expect(result.resources.map((r) => [r.name, r.status])).toEqual([
        ['net', 'succeeded'],
        ['db', 'succeeded'],
        ['pool', 'succeeded'],
        ['cache', 'succeeded'],
      ]);
      const resources = await cloud.list(target);
      const byUrn = new Map(resources.map((r) => [r.urn.split('::').pop(), r]));
      const net = byUrn.get('net')!;
      expect(byUrn.get('db')?.properties).toEqual({ name: 'shop-dev-db', network: net.id, sku: 'basic', password: SECRET });
      expect(byUrn.get('pool')?.properties).toEqual({ size: 2, network: net.id });
      expect(result.outputs).toEqual({ poolId: byUrn.get('pool')?.id, dbName: 'shop-dev-db' });
      expect(result.serial).toBe((await stateRow())?.serial);
      expect(result.serial).toBeGreaterThan(0);
      expect(await cloud.applies(target, stack)).toHaveLength(1);

      const again = await engine.preview(stack, files(), {});
      expect(again.steps.map((s) => s.op)).toEqual(['same', 'same', 'same', 'same']);
      expect(again.baseSerial).toBe(result.serial);
    });

    it('when a property and a config value change, then update lists the paths and the apply changes only those resources', async () => {
      const { result: first } = await applyFresh();
      const before = await cloud.list(target);
      clock.advance(60_000);

      const program = files({ sku: 'premium' });
      const plan = await engine.preview(stack, program, { poolSize: 5 });
      expect(plan.steps.map((s) => [s.name, s.op, s.changedPaths])).toEqual([
        ['net', 'same', []],
        ['db', 'update', ['sku']],
        ['pool', 'update', ['size']],
        ['cache', 'same', []],
      ]);
      const result = await engine.apply(stack, program, { poolSize: 5 }, plan, resolveSecrets);
      expect(result.status).toBe('applied');
      expect(result.resources.map((r) => r.status)).toEqual(['unchanged', 'succeeded', 'succeeded', 'unchanged']);
      expect(result.serial).toBe(first.serial + 2);

      const after = await cloud.list(target);
      expect(after.map((r) => r.id)).toEqual(before.map((r) => r.id));
      const changed = after.filter((r, i) => r.updatedAt !== before[i]?.updatedAt).map((r) => r.urn.split('::').pop());
      expect(changed).toEqual(['db', 'pool']);
      expect(after.find((r) => r.urn.endsWith('::pool'))?.properties).toMatchObject({ size: 5 });
    });

    it('when a resource leaves the project, then the plan deletes it and the apply removes it from target and state', async () => {
      await applyFresh();
      const plan = await engine.preview(stack, files({ withCache: false }), {});
      expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['same net', 'same db', 'same pool', 'delete cache']);
      const result = await engine.apply(stack, files({ withCache: false }), {}, plan, resolveSecrets);
      expect(result.status).toBe('applied');
      expect((await cloud.list(target)).map((r) => r.urn.split('::').pop())).toEqual(['net', 'db', 'pool']);
      expect((await engine.preview(stack, files({ withCache: false }), {})).counts).toEqual({ create: 0, update: 0, replace: 0, delete: 0, same: 3 });
    });

    it('when the program changed between preview and apply, then PLAN_CHANGED and nothing is applied', async () => {
      const plan = await engine.preview(stack, files(), {});
      const result = await engine.apply(stack, files({ sku: 'premium' }), {}, plan, resolveSecrets);
      expect(result).toMatchObject({ status: 'failed', planDigest: plan.digest, serial: 0, outputs: {}, error: { code: 'PROVISIONING.PLAN_CHANGED' } });
      expect(result.resources.every((r) => r.status === 'skipped')).toBe(true);
      expect(await cloud.list(target)).toEqual([]);
      expect(await cloud.applies(target)).toEqual([]);
      expect(await stateRow()).toBeUndefined();
    });

    it('when the approved plan is not a plan (a tampered receipt), then apply refuses it with INVALID_PLAN', async () => {
      const plan = await engine.preview(stack, files(), {});
      await expect(engine.apply(stack, files(), {}, { ...plan, digest: 'approved' }, resolveSecrets)).rejects.toMatchObject({ code: 'IAC.INVALID_PLAN' });
      expect(await cloud.applies(target)).toEqual([]);
    });

    it('when an approved plan is applied a second time, then the second apply is PLAN_CHANGED: one apply, one set of resources', async () => {
      const plan = await engine.preview(stack, files(), {});
      expect((await engine.apply(stack, files(), {}, plan, resolveSecrets)).status).toBe('applied');
      const serial = (await stateRow())?.serial;
      const second = await engine.apply(stack, files(), {}, plan, resolveSecrets);
      expect(second.error?.code).toBe('PROVISIONING.PLAN_CHANGED');
      expect(await cloud.applies(target, stack)).toHaveLength(1);
      expect(await cloud.list(target)).toHaveLength(4);
      expect((await stateRow())?.serial).toBe(serial);
    });

    it('when the target is unreachable, then the apply fails with TARGET_UNREACHABLE and every step skipped', async () => {
      const plan = await engine.preview(stack, files(), {});
      await cloud.setReachable(target, false);
      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets);
      expect(result.error?.code).toBe('PROVISIONING.TARGET_UNREACHABLE');
      expect(result.resources.map((r) => r.status)).toEqual(['skipped', 'skipped', 'skipped', 'skipped']);
      await cloud.setReachable(target, true);
      expect(await cloud.list(target)).toEqual([]);
      expect(await stateRow()).toBeUndefined();
    });

    it('when the target becomes unreachable midway, then the result says which steps succeeded and the state holds exactly those', async () => {
      // The target drops off the network right after the first resource is created.
      const dropping: LocalCloud = {
        ...cloud,
        async create(t, resource) {
          const created = await cloud.create(t, resource);
          await cloud.setReachable(t, false);
          return created;
        },
      };
      engine = localIacRunner({ store: database.store, clock, ids: randomIds, cloud: dropping, targetOf: () => target });
      const plan = await engine.preview(stack, files(), {});
      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets);

      expect(result.status).toBe('failed');
      expect(result.error?.code).toBe('PROVISIONING.TARGET_UNREACHABLE');
      expect(result.resources.map((r) => [r.name, r.status, r.error?.code])).toEqual([
        ['net', 'succeeded', undefined],
        ['db', 'failed', 'PROVISIONING.TARGET_UNREACHABLE'],
        ['pool', 'skipped', undefined],
        ['cache', 'skipped', undefined],
      ]);
      await cloud.setReachable(target, true);
      const [net] = await cloud.list(target);
      expect(result.resources[0]?.id).toBe(net?.id);
      const state = await stateRow();
      expect(result.serial).toBe(state?.serial);
      expect((JSON.parse(state?.resources ?? '[]') as { name: string; id: string }[]).map((r) => [r.name, r.id])).toEqual([['net', net?.id]]);

      // The next plan starts from what was applied.
      const next = await localIacRunner({ store: database.store, clock, ids: randomIds, cloud, targetOf: () => target }).preview(stack, files(), {});
      expect(next.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['same net', 'create db', 'create pool', 'create cache']);
    });

    it('when a stack uses a secret reference, then the value reaches the target only: not the plan, the result or the stored state', async () => {
      const { plan, result } = await applyFresh();
      expect(JSON.stringify(plan)).toContain('kv://shop/db-password');
      expect(plan.references).toEqual([{ secretRef: 'kv://shop/db-password' }]);
      for (const text of [JSON.stringify(plan), JSON.stringify(result), (await stateRow())?.resources ?? '']) expect(text).not.toContain(SECRET);
      expect((await cloud.list(target)).find((r) => r.urn.endsWith('::db'))?.properties.password).toBe(SECRET);
    });

    it('when a reference cannot be resolved, then the apply fails with the resolver code and nothing is applied', async () => {
      const plan = await engine.preview(stack, files(), {});
      const missing: ResolveReferences = () => Promise.reject(new AppError('GOVERNANCE.SECRET_NOT_FOUND', 'not-found', 'no such secret'));
      const result = await engine.apply(stack, files(), {}, plan, missing);
      expect(result.error?.code).toBe('GOVERNANCE.SECRET_NOT_FOUND');
      const untyped: ResolveReferences = () => Promise.reject(new Error('broker down'));
      expect((await engine.apply(stack, files(), {}, plan, untyped)).error?.code).toBe('PROVISIONING.REFERENCE_UNRESOLVED');
      expect(await cloud.list(target)).toEqual([]);
      expect(await cloud.applies(target)).toEqual([]);
    });

    it('when protect is set on an existing resource and it is then removed, then preview refuses with PROTECTED and apply leaves the target', async () => {
      const { result: first } = await applyFresh();
      const protectedCache = { ...files(), 'Pulumi.yaml': files()['Pulumi.yaml']!.replace('      size: 1\n', '      size: 1\n    options:\n      protect: true\n') };
      // Protecting changes no property: every step is same, yet the state must record it.
      const { plan, result } = await applyFresh(protectedCache);
      expect(plan.counts.same).toBe(4);
      expect(result).toMatchObject({ status: 'applied', serial: first.serial + 1 });
      await expect(engine.preview(stack, files({ withCache: false }), {})).rejects.toMatchObject({ code: 'IAC.PROTECTED' });
      const approved = await engine.preview(stack, protectedCache, {});
      const refused = await engine.apply(stack, files({ withCache: false }), {}, approved, resolveSecrets);
      expect(refused.error?.code).toBe('IAC.PROTECTED');
      expect(await cloud.list(target)).toHaveLength(4);
    });

    it('when a resource changes type, then the apply replaces it with a new id and updates what read the old id', async () => {
      await applyFresh();
      const [oldNet] = await cloud.list(target);
      const retyped = { ...files(), 'Pulumi.yaml': files()['Pulumi.yaml']!.replace('local:network:VirtualNetwork', 'local:network:Vnet2') };
      const plan = await engine.preview(stack, retyped, {});
      expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['replace net', 'update db', 'update pool', 'same cache']);
      const result = await engine.apply(stack, retyped, {}, plan, resolveSecrets);
      expect(result.status).toBe('applied');
      const resources = await cloud.list(target);
      const net = resources.find((r) => r.urn.endsWith('::net'));
      expect(net?.type).toBe('local:network:Vnet2');
      expect(net?.id).not.toBe(oldNet?.id);
      expect(await cloud.get(target, oldNet!.id)).toBeUndefined();
      expect(resources.find((r) => r.urn.endsWith('::db'))?.properties.network).toBe(net?.id);
      expect((await engine.preview(stack, retyped, {})).counts).toEqual({ create: 0, update: 0, replace: 0, delete: 0, same: 4 });
    });

    /** A resource of this test's target by its name in the project. */
    async function inTarget(name: string) {
      const found = (await cloud.list(target)).find((r) => r.urn.endsWith(`::${name}`));
      if (!found) throw new Error(`${name} is not in the target`);
      return found;
    }
    const REFRESH = { refresh: true } as const;
    const stepsOf = (plan: Plan) => plan.steps.map((s) => [s.name, s.op, s.changedPaths]);

    it('when an apply succeeds, then each result carries the inputs the state records: references unresolved, ids known; a deleted resource none', async () => {
      const { result } = await applyFresh();
      const net = await inTarget('net');
      expect(result.resources.find((r) => r.name === 'db')?.inputs).toEqual({ name: 'shop-dev-db', network: net.id, sku: 'basic', password: { secretRef: 'kv://shop/db-password' } });
      expect(result.resources.find((r) => r.name === 'net')?.inputs).toEqual({ cidr: '10.0.0.0/16', tags: { env: 'dev' } });

      const plan = await engine.preview(stack, files({ withCache: false }), {});
      const removed = await engine.apply(stack, files({ withCache: false }), {}, plan, resolveSecrets);
      expect(removed.resources.map((r) => [r.name, r.status, r.inputs !== undefined])).toEqual([
        ['net', 'unchanged', true],
        ['db', 'unchanged', true],
        ['pool', 'unchanged', true],
        ['cache', 'succeeded', false],
      ]);
      expect(JSON.stringify(removed)).not.toContain(SECRET);
    });

    it('when a property is changed out of band, then a refresh plan updates exactly that path and its apply restores it; without refresh all is same', async () => {
      const { result: first } = await applyFresh();
      const pool = await inTarget('pool');
      await cloud.update(target, pool.id, { ...pool.properties, size: 9 });

      const unrefreshed = await engine.preview(stack, files(), {});
      const plan = await engine.preview(stack, files(), {}, REFRESH);

      expect(unrefreshed.counts).toEqual({ create: 0, update: 0, replace: 0, delete: 0, same: 4 });
      // db's password is a reference in the state and the secret in the target: not compared, and not in the plan.
      expect(stepsOf(plan)).toEqual([
        ['net', 'same', []],
        ['db', 'same', []],
        ['pool', 'update', ['size']],
        ['cache', 'same', []],
      ]);
      expect(plan.baseSerial).toBe(first.serial);
      expect(JSON.stringify(plan)).not.toContain(SECRET);

      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets, REFRESH);
      expect(result.status).toBe('applied');
      expect(result.resources.map((r) => r.status)).toEqual(['unchanged', 'unchanged', 'succeeded', 'unchanged']);
      expect((await cloud.get(target, pool.id))?.properties).toEqual({ ...pool.properties, size: 2 });
      expect((await engine.preview(stack, files(), {}, REFRESH)).counts.same).toBe(4);
      expect((await stateRow())?.resources ?? '').not.toContain(SECRET);
    });

    it('when a resource is deleted out of band, then a refresh plan creates it again and updates what read its id; without refresh all is same', async () => {
      await applyFresh();
      const net = await inTarget('net');
      await cloud.delete(target, net.id);

      expect((await engine.preview(stack, files(), {})).counts.same).toBe(4);
      const plan = await engine.preview(stack, files(), {}, REFRESH);
      expect(stepsOf(plan)).toEqual([
        ['net', 'create', []],
        ['db', 'update', ['network']],
        ['pool', 'update', ['network']],
        ['cache', 'same', []],
      ]);

      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets, REFRESH);
      expect(result.status).toBe('applied');
      const recreated = await inTarget('net');
      expect(recreated.id).not.toBe(net.id);
      expect((await inTarget('db')).properties).toMatchObject({ network: recreated.id, password: SECRET });
      expect((await engine.preview(stack, files(), {}, REFRESH)).counts.same).toBe(4);
    });

    it("when a resource's type is changed out of band, then a refresh plan replaces it", async () => {
      await applyFresh();
      const cache = await inTarget('cache');
      await sql`update local_cloud_resources set type = ${'local:cache:Memcached'} where target = ${target} and id = ${cache.id}`.execute(database.store.db);

      const plan = await engine.preview(stack, files(), {}, REFRESH);
      expect(plan.steps.find((s) => s.name === 'cache')).toMatchObject({ op: 'replace', oldType: 'local:cache:Memcached', id: cache.id });
      expect((await engine.apply(stack, files(), {}, plan, resolveSecrets, REFRESH)).status).toBe('applied');
      expect(await cloud.get(target, cache.id)).toBeUndefined();
      expect((await inTarget('cache')).type).toBe('local:cache:Redis');
    });

    it('when the target changes again after a refresh plan, then its apply is PLAN_CHANGED and nothing is applied', async () => {
      await applyFresh();
      const pool = await inTarget('pool');
      await cloud.update(target, pool.id, { ...pool.properties, size: 9 });
      const plan = await engine.preview(stack, files(), {}, REFRESH);
      await cloud.update(target, pool.id, { ...pool.properties, size: 9, note: 'edited' });

      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets, REFRESH);
      expect(result.error?.code).toBe('PROVISIONING.PLAN_CHANGED');
      expect((await cloud.get(target, pool.id))?.properties).toMatchObject({ size: 9, note: 'edited' });
      // Without refresh, the same approved plan does not match either: the digest binds the refresh.
      expect((await engine.apply(stack, files(), {}, plan, resolveSecrets)).error?.code).toBe('PROVISIONING.PLAN_CHANGED');
    });

    it('when the target is unreachable, then a refresh preview fails with TARGET_UNREACHABLE, a refresh apply fails with it and every step skipped', async () => {
      await applyFresh();
      const plan = await engine.preview(stack, files(), {}, REFRESH);
      const serial = (await stateRow())?.serial;
      await cloud.setReachable(target, false);

      await expect(engine.preview(stack, files(), {}, REFRESH)).rejects.toMatchObject({ code: 'PROVISIONING.TARGET_UNREACHABLE', kind: 'unavailable' });
      expect((await engine.preview(stack, files(), {})).counts.same).toBe(4);
      const result = await engine.apply(stack, files(), {}, plan, resolveSecrets, REFRESH);
      expect(result).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.TARGET_UNREACHABLE' } });
      expect(result.resources.every((r) => r.status === 'skipped')).toBe(true);
      expect((await stateRow())?.serial).toBe(serial);
    });

    it('when operator ignore rules hold, then the paths they match keep what the resource has, with refresh and without, in plan and apply', async () => {
      await applyFresh();
      const net = await inTarget('net');
      const db = await inTarget('db');
      await cloud.update(target, net.id, { cidr: '10.9.0.0/16', tags: { env: 'dev', owner: 'ops' } });
      const tags: HeldIgnoreRule = { scope: { type: 'local:network:VirtualNetwork' }, path: 'tags.*' };
      const sku: HeldIgnoreRule = { scope: { urn: db.urn }, path: 'sku' };
      const everything: HeldIgnoreRule = { scope: { type: 'local:compute:WorkerPool' }, path: '*' };
      const elsewhere: HeldIgnoreRule = { scope: { urn: `${db.urn}-other` }, path: 'sku' };
      const options = { refresh: true, ignore: [tags, sku, everything, elsewhere] };

      // The program changes db's sku and the pool's size; the target changed net's cidr and tags.
      const program = files({ sku: 'premium' });
      const held = await engine.preview(stack, program, { poolSize: 5 }, options);
      const unheld = await engine.preview(stack, program, { poolSize: 5 }, REFRESH);
      expect(stepsOf(unheld).slice(0, 3)).toEqual([
        ['net', 'update', ['cidr', 'tags.owner']],
        ['db', 'update', ['sku']],
        ['pool', 'update', ['size']],
      ]);
      expect(stepsOf(held)).toEqual([
        ['net', 'update', ['cidr']],
        ['db', 'same', []],
        ['pool', 'same', []],
        ['cache', 'same', []],
      ]);
      // Without refresh the rules hold against the state: what the last apply left.
      expect((await engine.preview(stack, program, { poolSize: 5 }, { ignore: [sku, everything] })).steps.map((s) => s.op)).toEqual(['same', 'same', 'same', 'same']);

      // An apply re-plans with the rules it is given: others than the preview's are another plan.
      expect((await engine.apply(stack, program, { poolSize: 5 }, held, resolveSecrets, REFRESH)).error?.code).toBe('PROVISIONING.PLAN_CHANGED');
      const result = await engine.apply(stack, program, { poolSize: 5 }, held, resolveSecrets, options);
      expect(result.status).toBe('applied');
      expect((await cloud.get(target, net.id))?.properties).toEqual({ cidr: '10.0.0.0/16', tags: { env: 'dev', owner: 'ops' } });
      expect((await cloud.get(target, db.id))?.properties).toMatchObject({ sku: 'basic' });
      expect((await inTarget('pool')).properties).toMatchObject({ size: 2 });
    });

    it('when an ignore rule path cannot be read, then preview refuses it with INVALID_IGNORE_RULE and apply with a receipt', async () => {
      const plan = await engine.preview(stack, files(), {});
      const bad: HeldIgnoreRule = { scope: { type: 'local:sql:Database' }, path: 'tags.*.env' };
      await expect(engine.preview(stack, files(), {}, { ignore: [bad] })).rejects.toMatchObject({ code: 'IAC.INVALID_IGNORE_RULE', kind: 'validation' });
      expect((await engine.apply(stack, files(), {}, plan, resolveSecrets, { ignore: [bad] })).error?.code).toBe('IAC.INVALID_IGNORE_RULE');
      expect(await cloud.list(target)).toEqual([]);
    });

    it('when a held rule names an array index past 10,000 it is refused; one the array does not have pads nothing in plan, apply, target or state', async () => {
      const withSubnets = (env: string) => {
        const all = files();
        return { ...all, 'Pulumi.yaml': all['Pulumi.yaml']!.replace('tags: { env: dev }', `tags: { env: ${env} }\n      subnets: [10.0.1.0/24]`) };
      };
      await engine.apply(stack, withSubnets('dev'), {}, await engine.preview(stack, withSubnets('dev'), {}), resolveSecrets);
      const huge: HeldIgnoreRule = { scope: { type: 'local:network:VirtualNetwork' }, path: 'subnets.999999999.name' };
      const absent: HeldIgnoreRule = { scope: { type: 'local:network:VirtualNetwork' }, path: 'subnets.9000.name' };

      // The program changes net's tag, so the plan and the apply both compute net's inputs under the rules.
      const plan = await engine.preview(stack, withSubnets('staging'), {});
      await expect(engine.preview(stack, withSubnets('staging'), {}, { ignore: [huge] })).rejects.toMatchObject({ code: 'IAC.INVALID_IGNORE_RULE', details: { path: huge.path } });
      expect((await engine.apply(stack, withSubnets('staging'), {}, plan, resolveSecrets, { ignore: [huge] })).error?.code).toBe('IAC.INVALID_IGNORE_RULE');

      const held = await engine.preview(stack, withSubnets('staging'), {}, { ignore: [absent] });
      expect(held.digest).toBe(plan.digest);
      expect((await engine.apply(stack, withSubnets('staging'), {}, held, resolveSecrets, { ignore: [absent] })).status).toBe('applied');
      const expected = { cidr: '10.0.0.0/16', tags: { env: 'staging' }, subnets: ['10.0.1.0/24'] };
      expect((await inTarget('net')).properties).toEqual(expected);
      const state = JSON.parse((await stateRow())!.resources) as { name: string; inputs: unknown }[];
      expect(state.find((r) => r.name === 'net')?.inputs).toEqual(expected);
    });

    it('when two writers write the same next serial of a stack state, then the second fails with STATE_CONFLICT', async () => {
      const db = stackStateDb(database.store.db);
      const state = (serial: number): StackState => ({ stack: stack.stack, project: stack.project, serial, resources: [] });
      await writeStackState(db, stack.tenant, state(1), 1);
      await expect(writeStackState(db, stack.tenant, state(1), 2)).rejects.toMatchObject({ code: 'PROVISIONING.STATE_CONFLICT', kind: 'conflict' });
      await writeStackState(db, stack.tenant, state(2), 3);
      await expect(writeStackState(db, stack.tenant, state(2), 4)).rejects.toMatchObject({ code: 'PROVISIONING.STATE_CONFLICT', details: { expectedSerial: 1 } });
      await expect(writeStackState(db, stack.tenant, state(4), 5)).rejects.toMatchObject({ code: 'PROVISIONING.STATE_CONFLICT' });
      expect((await readStackState(db, stack))?.serial).toBe(2);
    });
  });
}
